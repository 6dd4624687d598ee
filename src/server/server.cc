// Server (kvtier/server.h): cpp-httplib routes over the engine. Each completion request is
// served on its HTTP thread: parse and validate (server/openai.h), build the prompt, submit a
// Generation, then either wait for the end (polling the connection so a client that leaves
// cancels at once) or stream SSE chunks as text completes.
#include "kvtier/server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <nlohmann/json.hpp>
#include <random>

#include "kvtier/chat_template.h"
#include "server/conn_watch.h"
#include "server/generation.h"
#include "server/openai.h"
#include "server/server_metrics.h"

namespace kvtier {

using server::ApiError;
using server::ApiRequest;
using server::Endpoint;

struct Server::Impl {
  Impl(ServerDeps d, ServerOptions o) : deps(std::move(d)), opt(std::move(o)), metrics(deps) {}

  // Counts a request in flight for its lifetime, streams included (Shutdown waits for zero).
  struct InFlight {
    explicit InFlight(Impl* s) : s(s) { ++s->in_flight; }
    ~InFlight() {
      if (--s->in_flight == 0) {
        std::lock_guard<std::mutex> lock(s->drain_mu);
        s->drain_cv.notify_all();
      }
    }
    Impl* s;
  };

  void Routes();
  void Complete(Endpoint endpoint, const httplib::Request& req, const std::string& body,
                httplib::Response& res);
  // Prompt tokens of a parsed request, or an error (400 / 413).
  bool Prompt(const ApiRequest& r, std::vector<int32_t>* tokens, ApiError* e) const;
  void Reply(httplib::Response& res, const std::string& endpoint, const ApiError& e);
  void Log(const std::string& line) const {
    if (opt.log) opt.log(line);
  }
  std::string NextId(Endpoint endpoint) {
    return (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(++ids);
  }

  const ServerDeps deps;
  const ServerOptions opt;
  server::ServerMetrics metrics;
  httplib::Server http;
  ChatTemplate chat_template = ChatTemplate::kPlain;
  std::vector<int32_t> stop_tokens;  // end-of-generation ids of the vocabulary
  uint32_t context = 0;
  int port = -1;
  std::atomic<uint64_t> ids{0};
  std::atomic<uint32_t> in_flight{0};
  std::atomic<bool> draining{false};
  std::atomic<bool> aborting{false};  // the drain timed out: requests still running end now
  std::mutex drain_mu;
  std::condition_variable drain_cv;
  std::mt19937_64 seeder{std::random_device{}()};
  std::mutex seeder_mu;
};

namespace {

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ApiError Err(int status, std::string message, std::string type = "invalid_request_error",
             std::string param = "", std::string code = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

// The engine's refusals and failures as HTTP errors.
ApiError FromStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return Err(400, s.message());
    case StatusCode::kUnavailable:
      return Err(503, "the server is overloaded: " + s.message(), "server_error", "",
                 "overloaded");
    case StatusCode::kResourceExhausted:
      return Err(413, s.message(), "invalid_request_error", "", "context_length_exceeded");
    default:
      return Err(500, s.ToString(), "server_error");
  }
}

const char* EndpointName(Endpoint e) { return e == Endpoint::kChat ? "chat" : "completions"; }

}  // namespace

void Server::Impl::Reply(httplib::Response& res, const std::string& endpoint, const ApiError& e) {
  res.status = e.status;
  res.set_content(server::ErrorJson(e), "application/json");
  metrics.Request(endpoint, e.status);
}

bool Server::Impl::Prompt(const ApiRequest& r, std::vector<int32_t>* tokens, ApiError* e) const {
  const Tokenizer& tok = *deps.tokenizer;
  if (r.endpoint == Endpoint::kChat) {
    const std::string text = ApplyChatTemplate(chat_template, r.messages, true);
    *tokens = tok.Encode(text, tok.add_bos_default(), /*parse_special=*/true);
  } else if (r.prompt_is_tokens) {
    *tokens = r.prompt_tokens;
  } else {
    *tokens = tok.Encode(r.prompt, tok.add_bos_default(), /*parse_special=*/true);
  }
  const char* what = r.endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (tokens->empty()) {
    *e = Err(400, std::string(what) + ": the prompt is empty (0 tokens)", "invalid_request_error",
             what);
    return false;
  }
  if (tokens->size() >= context) {
    *e = Err(413,
             std::string(what) + ": the prompt has " + std::to_string(tokens->size()) +
                 " tokens; this model's maximum context length is " + std::to_string(context) +
                 " tokens (prompt and completion together)",
             "invalid_request_error", what, "context_length_exceeded");
    return false;
  }
  return true;
}

void Server::Impl::Complete(Endpoint endpoint, const httplib::Request& req,
                            const std::string& body, httplib::Response& res) {
  const std::string ep = EndpointName(endpoint);
  auto flight = std::make_shared<InFlight>(this);
  if (draining) {
    return Reply(res, ep, Err(503, "the server is shutting down", "server_error", "", "shutdown"));
  }
  if (in_flight > opt.max_in_flight) {
    return Reply(res, ep,
                 Err(503, "the server is overloaded: " + std::to_string(opt.max_in_flight) +
                              " requests in flight",
                     "server_error", "", "overloaded"));
  }
  ApiRequest r;
  ApiError e;
  if (!server::ParseRequest(endpoint, body, &r, &e)) return Reply(res, ep, e);
  if (!r.model.empty() && r.model != opt.model_id) {
    return Reply(res, ep,
                 Err(404, "model: the model '" + r.model + "' does not exist; this server has '" +
                              opt.model_id + "'",
                     "invalid_request_error", "model", "model_not_found"));
  }
  EngineRequest er;
  if (!Prompt(r, &er.prompt, &e)) return Reply(res, ep, e);
  const uint32_t room = context - static_cast<uint32_t>(er.prompt.size());
  if (r.max_tokens && *r.max_tokens > room) {
    return Reply(res, ep,
                 Err(400,
                     "max_tokens: " + std::to_string(*r.max_tokens) + " is too many: the prompt has " +
                         std::to_string(er.prompt.size()) +
                         " tokens and this model's maximum context length is " +
                         std::to_string(context) + " tokens, so at most " +
                         std::to_string(room) + " can be generated",
                     "invalid_request_error", "max_tokens", "context_length_exceeded"));
  }
  er.max_tokens = r.max_tokens ? *r.max_tokens : room;
  er.sampling = r.sampling;
  if (!r.seeded) {
    std::lock_guard<std::mutex> lock(seeder_mu);
    er.sampling.seed = seeder();
  }
  er.stop_tokens = stop_tokens;
  server::CompletionInfo info;
  info.id = NextId(endpoint);
  info.created = UnixNow();
  info.model = opt.model_id;
  info.prompt_tokens = static_cast<uint32_t>(er.prompt.size());
  Result<std::unique_ptr<server::Generation>> started =
      server::Generation::Start(*deps.engine, *deps.tokenizer, std::move(er), r.stop);
  if (!started.ok()) return Reply(res, ep, FromStatus(started.status()));
  std::shared_ptr<server::Generation> g = std::move(*started);
  const int fd = server::FindConnection(req.local_addr, req.local_port, req.remote_addr,
                                        req.remote_port);
  // Called once the request has ended, whichever way.
  auto finish_log = [this, ep, info, g](bool client_gone) {
    metrics.TokenGaps(g->TakeTokenGaps());
    if (client_gone) metrics.Cancelled();
    metrics.Completion(g->prompt_tokens(), g->cached_tokens(), g->completion_tokens(),
                       g->ttft_ms() / 1000.0, g->total_ms() / 1000.0);
    char times[96];
    std::snprintf(times, sizeof(times), " ttft_ms=%.1f ms=%.1f", g->ttft_ms(), g->total_ms());
    Log("request " + info.id + " endpoint=" + ep + " prompt_tokens=" +
        std::to_string(g->prompt_tokens()) + " cached_tokens=" +
        std::to_string(g->cached_tokens()) + " completion_tokens=" +
        std::to_string(g->completion_tokens()) + " finish=" +
        (client_gone ? std::string("client_gone") : g->finish_reason()) + times +
        (g->error().ok() ? "" : " error=\"" + g->error().message() + "\""));
  };

  if (!r.stream) {
    std::string text;
    bool gone = false;
    while (!g->Pump(50, &text)) {
      if (!gone && (server::PeerClosed(fd) || aborting)) {
        gone = true;
        g->Cancel();
      }
    }
    finish_log(gone);
    if (g->finish_reason() == "error") return Reply(res, ep, FromStatus(g->error()));
    info.cached_tokens = g->cached_tokens();
    info.completion_tokens = g->completion_tokens();
    res.set_content(server::ResponseJson(endpoint, info, text, g->finish_reason()),
                    "application/json");
    metrics.Request(ep, gone ? 499 : 200);
    return;
  }

  // Streaming: the HTTP thread stays in the provider until the stream ends.
  metrics.Request(ep, 200);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  const bool include_usage = r.include_usage;
  auto done = std::make_shared<std::atomic<bool>>(false);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, g, info, endpoint, include_usage, fd, done, finish_log, flight](
          size_t, httplib::DataSink& sink) mutable {
        bool gone = false;
        auto send = [&](const std::string& data) {
          if (gone) return;
          const std::string event = "data: " + data + "\n\n";
          if (!sink.write(event.data(), event.size())) {
            gone = true;
            g->Cancel();
          }
        };
        if (endpoint == Endpoint::kChat) send(server::ChunkJson(endpoint, info, "", true, ""));
        std::string text;
        for (;;) {
          const bool end = g->Pump(50, &text);
          if (!text.empty()) {
            send(server::ChunkJson(endpoint, info, text, false, ""));
            text.clear();
          }
          if (end) break;
          if (!gone && (server::PeerClosed(fd) || aborting)) {
            gone = true;
            g->Cancel();
          }
        }
        *done = true;
        finish_log(gone);
        if (gone) return false;
        if (g->finish_reason() == "error") {
          send(server::ErrorJson(FromStatus(g->error())));
        } else {
          send(server::ChunkJson(endpoint, info, "", false, g->finish_reason()));
          if (include_usage) {
            info.cached_tokens = g->cached_tokens();
            info.completion_tokens = g->completion_tokens();
            send(server::UsageChunkJson(endpoint, info));
          }
        }
        const std::string end_event = "data: [DONE]\n\n";
        sink.write(end_event.data(), end_event.size());
        sink.done();
        return true;
      },
      [g, done, flight](bool) {
        // The connection went away before the provider ran to the end.
        if (!*done) g->Cancel();
      });
}

void Server::Impl::Routes() {
  // Bodies are read here, not by cpp-httplib, so --max-body-mb also bounds chunked bodies
  // (cpp-httplib checks only a Content-Length).
  auto post = [this](Endpoint endpoint) {
    return [this, endpoint](const httplib::Request& q, httplib::Response& s,
                            const httplib::ContentReader& reader) {
      std::string body;
      bool too_big = false;
      const bool read = reader([&](const char* data, size_t n) {
        if (body.size() + n > opt.max_body_bytes) {
          too_big = true;
          return false;
        }
        body.append(data, n);
        return true;
      });
      if (too_big || (!read && s.status == 413)) {
        s.set_header("Connection", "close");
        return Reply(s, EndpointName(endpoint),
                     Err(413, "the request body is larger than " +
                                  std::to_string(opt.max_body_bytes) + " bytes"));
      }
      if (!read) {
        return Reply(s, EndpointName(endpoint), Err(400, "the request body could not be read"));
      }
      Complete(endpoint, q, body, s);
    };
  };
  http.Post("/v1/chat/completions", post(Endpoint::kChat));
  http.Post("/v1/completions", post(Endpoint::kCompletion));
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& s) {
    s.set_content(server::ModelsJson(opt.model_id, UnixNow()), "application/json");
    metrics.Request("models", 200);
  });
  http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& q, httplib::Response& s) {
    if (q.matches[1] != opt.model_id) {
      return Reply(s, "models",
                   Err(404, "model: the model '" + std::string(q.matches[1]) + "' does not exist",
                       "invalid_request_error", "model", "model_not_found"));
    }
    nlohmann::json m{{"id", opt.model_id}, {"object", "model"}, {"created", UnixNow()},
                     {"owned_by", "kvtier"}};
    s.set_content(m.dump(), "application/json");
    metrics.Request("models", 200);
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& s) {
    s.status = draining ? 503 : 200;
    s.set_content(draining ? R"({"status":"draining"})" : R"({"status":"ok"})",
                  "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& s) {
    s.set_content(metrics.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/v1/cache/stats", [this](const httplib::Request&, httplib::Response& s) {
    nlohmann::json out;
    if (deps.pool != nullptr) {
      const PoolStats ps = deps.pool->Stats();
      out["active_pool"] = {{"k_format", deps.pool->k_format().name()},
                            {"v_format", deps.pool->v_format().name()},
                            {"capacity_bytes", ps.capacity_bytes},
                            {"bytes_in_use", ps.bytes_in_use},
                            {"blocks_in_use", ps.blocks_in_use},
                            {"capacity_blocks", ps.capacity_blocks}};
    }
    if (deps.prefix_cache != nullptr) {
      const PrefixCacheStats cs = deps.prefix_cache->Stats();
      nlohmann::json hits;
      for (int k = 0; k < kNumPrefixMatchKinds; ++k) {
        hits[std::string(PrefixMatchKindName(static_cast<PrefixMatchKind>(k)))] = cs.hits[k];
      }
      nlohmann::json formats = nlohmann::json::array();
      for (const PrefixFormatStats& f : cs.by_format) {
        formats.push_back({{"k_format", f.k_format.name()}, {"v_format", f.v_format.name()},
                           {"blocks", f.blocks}, {"bytes", f.bytes}, {"tokens", f.tokens}});
      }
      out["prefix_cache"] = {{"lookups", cs.lookups}, {"hits", hits},
                             {"tokens_requested", cs.tokens_requested},
                             {"tokens_reused", cs.tokens_reused}, {"entries", cs.entries},
                             {"bytes", cs.bytes}, {"budget_bytes", cs.budget_bytes},
                             {"evicted_blocks", cs.evicted_blocks},
                             {"promoted_blocks", cs.promoted_blocks}, {"by_format", formats}};
    } else {
      out["prefix_cache"] = nullptr;
    }
    if (deps.ssd != nullptr) {
      const SsdTierStats ss = deps.ssd->Stats();
      out["ssd"] = {{"dir", deps.ssd->options().dir}, {"blocks", ss.blocks},
                    {"bytes", ss.bytes}, {"max_bytes", ss.max_bytes},
                    {"spilled_blocks", ss.spilled_blocks}, {"loaded_blocks", ss.loaded_blocks},
                    {"quarantined", ss.quarantined}, {"evicted_blocks", ss.evicted_blocks},
                    {"queued", ss.queued}};
    } else {
      out["ssd"] = nullptr;
    }
    s.set_content(out.dump(), "application/json");
  });
  http.Delete("/v1/cache", [this](const httplib::Request&, httplib::Response& s) {
    nlohmann::json out{{"cleared", true}};
    if (deps.prefix_cache != nullptr) {
      out["prefix_cache_bytes"] = deps.prefix_cache->Stats().bytes;
      deps.prefix_cache->Clear();
    }
    if (deps.ssd != nullptr) {
      deps.ssd->Flush();
      out["ssd_blocks"] = deps.ssd->Stats().blocks;
      Status c = deps.ssd->Clear();
      if (!c.ok()) return Reply(s, "cache", Err(500, c.ToString(), "server_error"));
    }
    Log("cache_clear " + out.dump());
    s.set_content(out.dump(), "application/json");
  });
  http.set_error_handler([this](const httplib::Request& q, httplib::Response& s) {
    if (!s.body.empty()) return;  // a handler's own error
    ApiError e;
    if (s.status == 413) {
      e = Err(413, "the request body is larger than " + std::to_string(opt.max_body_bytes) +
                       " bytes");
    } else if (s.status == 404) {
      e = Err(404, "unknown route: " + q.method + " " + q.path);
    } else {
      e = Err(s.status, "HTTP " + std::to_string(s.status) + " for " + q.method + " " + q.path);
    }
    s.set_content(server::ErrorJson(e), "application/json");
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& s, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& ex) {
          what = ex.what();
        } catch (...) {
        }
        s.status = 500;
        s.set_content(server::ErrorJson(Err(500, "internal error: " + what, "server_error")),
                      "application/json");
      });
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() {
  if (impl_->http.is_running()) impl_->http.stop();
}

Result<std::unique_ptr<Server>> Server::Create(ServerDeps deps, ServerOptions options) {
  if (deps.model == nullptr || deps.tokenizer == nullptr || deps.engine == nullptr) {
    return Status::InvalidArgument("server: model, tokenizer and engine are required");
  }
  if (options.model_id.empty()) return Status::InvalidArgument("server: no model id");
  if (options.http_threads == 0) return Status::InvalidArgument("server: http_threads is 0");
  auto impl = std::make_unique<Impl>(std::move(deps), std::move(options));
  Impl& s = *impl;
  const ModelConfig& c = s.deps.model->config();
  s.context = s.opt.max_context > 0 ? s.opt.max_context : c.n_ctx_train;
  if (s.context == 0) s.context = 2048;
  s.chat_template = DetectChatTemplate(s.deps.tokenizer->chat_template(), nullptr);
  for (size_t id = 0; id < s.deps.tokenizer->vocab_size(); ++id) {
    if (s.deps.tokenizer->IsEndOfGeneration(static_cast<int32_t>(id))) {
      s.stop_tokens.push_back(static_cast<int32_t>(id));
    }
  }
  const uint32_t threads = s.opt.http_threads;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.http.set_payload_max_length(s.opt.max_body_bytes);
  // Idle keep-alive connections hold an HTTP thread until this passes, shutdown included.
  s.http.set_keep_alive_timeout(5);
  s.http.set_read_timeout(60);
  s.http.set_write_timeout(60);
  s.Routes();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Status Server::Bind() {
  Impl& s = *impl_;
  if (s.opt.port == 0) {
    s.port = s.http.bind_to_any_port(s.opt.host);
  } else {
    s.port = s.http.bind_to_port(s.opt.host, s.opt.port) ? s.opt.port : -1;
  }
  if (s.port < 0) {
    return Status::IOError("server: cannot listen on " + s.opt.host + ":" +
                           std::to_string(s.opt.port) + " (address in use, or not this host's)");
  }
  return Status::OK();
}

uint16_t Server::port() const { return impl_->port < 0 ? 0 : static_cast<uint16_t>(impl_->port); }

Status Server::Listen() {
  if (impl_->port < 0) return Status::InvalidArgument("server: Listen before Bind");
  if (!impl_->http.listen_after_bind() && !impl_->draining) {
    return Status::IOError("server: the listener on port " + std::to_string(impl_->port) +
                           " failed");
  }
  return Status::OK();
}

void Server::Shutdown(uint32_t drain_ms) {
  Impl& s = *impl_;
  s.draining = true;
  {
    std::unique_lock<std::mutex> lock(s.drain_mu);
    if (!s.drain_cv.wait_for(lock, std::chrono::milliseconds(drain_ms),
                             [&] { return s.in_flight.load() == 0; })) {
      s.Log("shutdown: " + std::to_string(s.in_flight.load()) +
            " requests still running after the drain; cancelling them");
      s.aborting = true;
    }
  }
  s.http.stop();
}

}  // namespace kvtier
