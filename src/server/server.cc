// Server (kvtier/server.h): routes over the event-driven front (server/http_front.h). /health
// and /metrics run on the loop thread; each completion request runs on a worker thread: parse
// and validate (server/openai.h), build the prompt, submit a Generation, then either wait for
// the end (a client that leaves cancels at once) or stream SSE chunks as text completes.
#include "kvtier/server.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>

#include "constrain/token_mask.h"
#include "kvtier/chat_template.h"
#include "server/anthropic_serve.h"
#include "server/dashboard.h"
#include "server/http_front.h"
#include "server/generation.h"
#include "server/openai.h"
#include "server/reasoning.h"
#include "server/server_metrics.h"
#include "server/tool_calls.h"
#include "server/tool_serve.h"

namespace kvtier {

using server::ApiError;
using server::ApiRequest;
using server::Endpoint;

struct Server::Impl {
  Impl(ServerDeps d, ServerOptions o) : deps(std::move(d)), opt(std::move(o)), metrics(deps, opt.metrics_ssd_reconcile_ms) {}

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

  server::HttpFront::Route RouteOf(const server::HttpHead& h);
  void Complete(Endpoint endpoint, server::Exchange& x);
  void CacheStats(server::Exchange& x);
  void CacheClear(server::Exchange& x);
  // Prompt tokens of a parsed request, or an error (400 / 413).
  // *think_open: the rendered chat prompt ends inside <think> (a reasoning model's template).
  bool Prompt(const ApiRequest& r, std::vector<int32_t>* tokens, ApiError* e,
              bool* think_open) const;
  void Reply(server::Exchange& x, const std::string& endpoint, const ApiError& e);
  void Log(const std::string& line) const {
    if (opt.log) opt.log(line);
  }
  // The token mask of a request with a json_grammar (response_format, a forced tool call).
  std::shared_ptr<LogitConstraint> MakeConstraint(const ApiRequest& r) {
    std::call_once(trie_once, [this] { trie = constrain::VocabTrie::Build(*deps.tokenizer); });
    // A forced tool call: at most one blank in a row (a call's JSON needs none).
    constrain::MatchLimits limits = constrain::MatchLimits::Generation();
    if (r.tools && r.tools->constrained) limits.max_ws_run = 1;
    return std::make_shared<constrain::JsonConstraint>(r.json_grammar, trie, *deps.tokenizer,
                                                       stop_tokens, limits);
  }

  std::string NextId(Endpoint endpoint) {
    return (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(++ids);
  }

  const ServerDeps deps;
  const ServerOptions opt;
  server::ServerMetrics metrics;
  std::unique_ptr<server::Dashboard> dashboard;  // null with --no-dashboard
  ChatRenderer chat_renderer = ChatRenderer::FromSource("", "", "");
  bool reasoning_split = false;  // the template closes a reasoning block: split it out
  server::ReasoningTags reasoning_tags;  // that block's tags
  server::ToolSyntax tool_syntax;  // the call syntax the template teaches (tool_calls.h)
  std::vector<int32_t> stop_tokens;  // end-of-generation ids of the vocabulary
  std::once_flag trie_once;          // the vocabulary trie for response_format, built on first use
  std::shared_ptr<const constrain::VocabTrie> trie;
  uint32_t context = 0;
  uint64_t max_token_bytes = 4;  // the longest vocabulary entry's bytes (at least 4)
  int port = -1;
  std::atomic<uint64_t> ids{0};
  std::atomic<uint32_t> in_flight{0};
  std::atomic<bool> draining{false};
  std::atomic<bool> aborting{false};  // the drain timed out: requests still running end now
  uint32_t drain_ms = 0;
  std::mutex drain_mu;
  std::condition_variable drain_cv;
  std::mt19937_64 seeder{std::random_device{}()};
  std::mutex seeder_mu;
  server::MessagesHost messages;  // the Anthropic Messages API's view of this server
  // Last: destroyed first, waiting for its worker threads while everything they use lives.
  std::unique_ptr<server::HttpFront> http;
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

void Server::Impl::Reply(server::Exchange& x, const std::string& endpoint, const ApiError& e) {
  x.Reply(e.status, "application/json", server::ErrorJson(e));
  metrics.Request(endpoint, e.status);
}

bool Server::Impl::Prompt(const ApiRequest& r, std::vector<int32_t>* tokens, ApiError* e,
                          bool* think_open) const {
  const Tokenizer& tok = *deps.tokenizer;
  const char* what = r.endpoint == Endpoint::kChat ? "messages" : "prompt";
  // Tokenization is bounded by the context: a text longer than (context + 1) of the longest
  // tokens has more than `context` tokens whatever it holds, so it is refused unread.
  auto encode = [&](std::string_view text) {
    if (text.size() > (static_cast<uint64_t>(context) + 2) * max_token_bytes) {
      *e = Err(413,
               std::string(what) + ": the prompt has more than " + std::to_string(context) +
                   " tokens (" + std::to_string(text.size()) +
                   " bytes); this model's maximum context length is " +
                   std::to_string(context) + " tokens (prompt and completion together)",
               "invalid_request_error", what, "context_length_exceeded");
      return false;
    }
    const bool add_bos = r.endpoint == Endpoint::kChat
                             ? chat_renderer.AddBos(tok.add_bos_default(), text)
                             : tok.add_bos_default();
    *tokens = tok.Encode(text, add_bos, /*parse_special=*/true);
    return true;
  };
  if (r.endpoint == Endpoint::kChat) {
    // The OpenAI route keeps the messages as sent (r.chat); the Anthropic route builds
    // role / content messages only (r.messages).
    Result<std::string> text = r.chat.messages.is_undefined()
                                   ? chat_renderer.Render(r.messages, /*add_generation_prompt=*/true)
                                   : chat_renderer.Render(r.chat);
    if (!text.ok()) {
      *e = Err(400, "messages: " + text.status().message(), "invalid_request_error", "messages");
      return false;
    }
    *think_open =
        reasoning_split && server::ReasoningSplitter::PromptOpensThinking(*text, reasoning_tags);
    if (!encode(*text + r.prompt_suffix)) return false;
  } else if (r.prompt_is_tokens) {
    const size_t vocab = tok.vocab_size();
    for (size_t i = 0; i < r.prompt_tokens.size(); ++i) {
      const int32_t t = r.prompt_tokens[i];
      if (t < 0 || static_cast<size_t>(t) >= vocab) {
        *e = Err(400,
                 "prompt: token " + std::to_string(i) + " is " + std::to_string(t) +
                     ", expected a token id 0.." + std::to_string(vocab - 1),
                 "invalid_request_error", "prompt");
        return false;
      }
    }
    *tokens = r.prompt_tokens;
  } else if (!encode(r.prompt)) {
    return false;
  }
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

void Server::Impl::Complete(Endpoint endpoint, server::Exchange& x) {
  const std::string ep = EndpointName(endpoint);
  auto flight = std::make_shared<InFlight>(this);
  if (draining) {
    return Reply(x, ep, Err(503, "the server is shutting down", "server_error", "", "shutdown"));
  }
  if (in_flight > opt.max_in_flight) {
    return Reply(x, ep,
                 Err(503, "the server is overloaded: " + std::to_string(opt.max_in_flight) +
                              " requests in flight",
                     "server_error", "", "overloaded"));
  }
  ApiRequest r;
  ApiError e;
  const bool parsed = server::ParseRequest(endpoint, x.body(), &r, &e,
                                           (static_cast<uint64_t>(context) + 2) * max_token_bytes,
                                           context);
  // The body is not needed past the parse: its memory goes back now (a large one at once).
  const bool large = x.body().size() > (1u << 20);
  std::string().swap(x.mutable_body());
  if (large) malloc_trim(0);
  if (!parsed) return Reply(x, ep, e);
  if (!r.model.empty() && r.model != opt.model_id) {
    return Reply(x, ep,
                 Err(404, "model: the model '" + r.model + "' does not exist; this server has '" +
                              opt.model_id + "'",
                     "invalid_request_error", "model", "model_not_found"));
  }
  if (!server::PrepareToolRequest(tool_syntax, &r, &e)) return Reply(x, ep, e);
  EngineRequest er;
  bool think_open = false;
  const bool prompt_ok = Prompt(r, &er.prompt, &e, &think_open);
  const bool split = endpoint == Endpoint::kChat && reasoning_split;
  server::ReasoningSplitter splitter(think_open, reasoning_tags);
  if (large) {
    r.prompt.clear();
    r.prompt.shrink_to_fit();
    r.messages.clear();
    r.messages.shrink_to_fit();
    r.chat = ChatRenderInput();
    malloc_trim(0);
  }
  if (!prompt_ok) return Reply(x, ep, e);
  const uint32_t room = context - static_cast<uint32_t>(er.prompt.size());
  if (r.max_tokens && *r.max_tokens > room) {
    return Reply(x, ep,
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
  if (r.json_grammar) er.constraint = MakeConstraint(r);
  server::CompletionInfo info;
  info.id = NextId(endpoint);
  info.created = UnixNow();
  info.model = opt.model_id;
  info.prompt_tokens = static_cast<uint32_t>(er.prompt.size());
  Result<std::unique_ptr<server::Generation>> started =
      server::Generation::Start(*deps.engine, *deps.tokenizer, std::move(er), r.stop);
  if (!started.ok()) return Reply(x, ep, FromStatus(started.status()));
  std::unique_ptr<server::Generation> g = std::move(*started);
  // Called once the request has ended, whichever way.
  auto finish_log = [this, ep, &info, &g](bool client_gone, bool cut) {
    Log(server::RecordEnd(metrics, *g, info.id, ep, client_gone, cut));
  };
  const ApiError shutdown_error =
      Err(503, "the server is shutting down: the request was cut at the drain deadline (" +
                   std::to_string(drain_ms) + " ms)",
          "server_error", "", "shutdown");

  if (!r.stream) {
    std::string text;
    bool gone = false, cut = false;
    server::PumpToEnd(*g, x, aborting, &text, &gone, &cut);
    finish_log(gone, cut);
    if (cut) return Reply(x, ep, shutdown_error);
    if (g->finish_reason() == "error") return Reply(x, ep, FromStatus(g->error()));
    info.cached_tokens = g->cached_tokens();
    info.completion_tokens = g->completion_tokens();
    std::string reasoning;
    if (split) {
      server::ReasoningSplitter::Out a = splitter.Push(text), b = splitter.Flush();
      reasoning = a.reasoning + b.reasoning;
      text = a.content + b.content;
    }
    if (r.tools) {
      server::ToolCallStream calls(tool_syntax, r.tools.get());
      text = calls.Push(text);
      server::ToolParse p = calls.Flush();
      text += p.content;
      const std::string_view finish = server::ToolFinish(g->finish_reason(), !p.calls.empty());
      x.Reply(200, "application/json",
              server::ResponseJson(info, text, finish, reasoning,
                                   server::WithIds(p.calls, "call_")));
      metrics.Request(ep, gone ? 499 : 200);
      return;
    }
    x.Reply(200, "application/json",
            server::ResponseJson(endpoint, info, text, g->finish_reason(), reasoning));
    metrics.Request(ep, gone ? 499 : 200);
    return;
  }

  // Streaming: this worker thread writes the chunks until the stream ends.
  metrics.Request(ep, 200);
  x.StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"},
                                          {"X-Accel-Buffering", "no"}});
  bool gone = false, cut = false;
  auto send = [&](const std::string& data) {
    if (gone) return;
    if (!x.Write("data: " + data + "\n\n")) {
      gone = true;
      g->Cancel();
    }
  };
  if (endpoint == Endpoint::kChat) send(server::ChunkJson(endpoint, info, "", true, ""));
  std::string text;
  std::optional<server::ToolCallStream> tool_stream;
  if (r.tools) tool_stream.emplace(tool_syntax, r.tools.get());
  bool have_calls = false;
  for (;;) {
    const bool end = g->Pump(50, &text);
    if (tool_stream) {
      // Reasoning and content as below; the content goes through the call parser first.
      server::ReasoningSplitter::Out o;
      if (split) {
        o = splitter.Push(text);
        if (end) {
          server::ReasoningSplitter::Out rest = splitter.Flush();
          o.reasoning += rest.reasoning;
          o.content += rest.content;
        }
      } else {
        o.content = std::move(text);
      }
      text.clear();
      o.content = tool_stream->Push(o.content);
      std::vector<server::ToolCallOut> calls;
      if (end) {
        server::ToolParse p = tool_stream->Flush();
        o.content += p.content;
        calls = server::WithIds(p.calls, "call_");
      }
      if (!o.reasoning.empty() || !o.content.empty()) {
        send(server::ChunkJson(endpoint, info, o.content, false, "", o.reasoning));
      }
      for (size_t i = 0; i < calls.size(); ++i) {
        // The name first, then the arguments in pieces, as OpenAI streams them.
        send(server::ToolCallChunkJson(info, i, &calls[i], ""));
        for (std::string_view piece : server::ArgumentPieces(calls[i].arguments)) {
          send(server::ToolCallChunkJson(info, i, nullptr, piece));
        }
      }
      have_calls = !calls.empty();
    } else if (split) {
      server::ReasoningSplitter::Out o = splitter.Push(text);
      if (end) {
        server::ReasoningSplitter::Out rest = splitter.Flush();
        o.reasoning += rest.reasoning;
        o.content += rest.content;
      }
      if (!o.reasoning.empty() || !o.content.empty()) {
        send(server::ChunkJson(endpoint, info, o.content, false, "", o.reasoning));
      }
      text.clear();
    } else if (!text.empty()) {
      send(server::ChunkJson(endpoint, info, text, false, ""));
      text.clear();
    }
    if (end) break;
    server::CancelIfEnded(*g, x, aborting, &gone, &cut);  // a cut is told below
  }
  finish_log(gone, cut);
  if (gone) return;
  if (cut) {
    // An error event naming the shutdown, a final chunk with its finish_reason, [DONE].
    send(server::ErrorJson(shutdown_error));
    send(server::ChunkJson(endpoint, info, "", false, "cancelled"));
  } else if (g->finish_reason() == "error") {
    send(server::ErrorJson(FromStatus(g->error())));
  } else {
    send(server::ChunkJson(endpoint, info, "", false,
                           server::ToolFinish(g->finish_reason(), have_calls)));
    if (r.include_usage) {
      info.cached_tokens = g->cached_tokens();
      info.completion_tokens = g->completion_tokens();
      send(server::UsageChunkJson(endpoint, info));
    }
  }
  if (!gone) (void)x.Write("data: [DONE]\n\n");
  x.End();
}

void Server::Impl::CacheStats(server::Exchange& x) {
  // Only what is on disk: files removed or replaced leave the index.
  if (deps.ssd != nullptr) deps.ssd->Reconcile();
  x.Reply(200, "application/json", server::CacheStatsJson(deps).dump());
}

void Server::Impl::CacheClear(server::Exchange& x) {
  nlohmann::json out{{"cleared", true}};
  if (deps.prefix_cache != nullptr) {
    out["prefix_cache_bytes"] = deps.prefix_cache->Stats().bytes;
    deps.prefix_cache->Clear();
  }
  if (deps.ssd != nullptr) {
    deps.ssd->Flush();
    out["ssd_blocks"] = deps.ssd->Stats().blocks;
    Status c = deps.ssd->Clear();
    if (!c.ok()) return Reply(x, "cache", Err(500, c.ToString(), "server_error"));
  }
  Log("cache_clear " + out.dump());
  x.Reply(200, "application/json", out.dump());
}

server::HttpFront::Route Server::Impl::RouteOf(const server::HttpHead& h) {
  using Route = server::HttpFront::Route;
  using X = std::shared_ptr<server::Exchange>;
  const std::string& p = h.path;
  // A known path with another method: 405 naming the ones it takes.
  auto only = [&](const char* allow, Route r) -> Route {
    if (h.method == allow) return r;
    const std::string method = h.method, path = p;
    return {[this, allow, method, path](X x) {
              x->Reply(405, "application/json",
                       server::ErrorJson(Err(405, "method " + method + " is not allowed on " +
                                                      path + "; use " + allow)),
                       {{"Allow", allow}});
              metrics.Request("other", 405);
            },
            true};
  };
  if (p == "/health") {
    return only("GET", {[this](X x) {
                          x->Reply(draining ? 503 : 200, "application/json",
                                   draining ? R"({"status":"draining"})" : R"({"status":"ok"})");
                        },
                        true});
  }
  if (p == "/metrics") {
    return only("GET", {[this](X x) {
                          x->Reply(200, "text/plain; version=0.0.4; charset=utf-8",
                                   metrics.Render());
                        },
                        true});
  }
  if (p == "/v1/chat/completions") {
    return only("POST", {[this](X x) { Complete(Endpoint::kChat, *x); }, false});
  }
  if (p == "/v1/completions") {
    return only("POST", {[this](X x) { Complete(Endpoint::kCompletion, *x); }, false});
  }
  if (p == "/v1/messages" || p == "/v1/messages/count_tokens") {  // Anthropic's error shape
    if (h.method != "POST") {
      return {[this, what = h.method + " " + p](X x) { server::RefuseMethod(messages, *x, what); },
              true};
    }
    if (p == "/v1/messages") return {[this](X x) { server::ServeMessages(messages, *x); }, false};
    return {[this](X x) { server::ServeCountTokens(messages, *x); }, false};
  }
  if (p == "/v1/models") {
    return only("GET", {[this](X x) {
                          x->Reply(200, "application/json",
                                   server::ModelsJson(opt.model_id, UnixNow()));
                          metrics.Request("models", 200);
                        },
                        true});
  }
  if (p.starts_with("/v1/models/") && p.size() > 11) {
    return only("GET", {[this, id = p.substr(11)](X x) {
                          if (id != opt.model_id) {
                            return Reply(*x, "models",
                                         Err(404, "model: the model '" + id + "' does not exist",
                                             "invalid_request_error", "model",
                                             "model_not_found"));
                          }
                          nlohmann::json m{{"id", opt.model_id}, {"object", "model"},
                                           {"created", UnixNow()}, {"owned_by", "kvtier"}};
                          x->Reply(200, "application/json", m.dump());
                          metrics.Request("models", 200);
                        },
                        true});
  }
  if (p == "/v1/cache/stats") return only("GET", {[this](X x) { CacheStats(*x); }, false});
  if (p == "/v1/cache") return only("DELETE", {[this](X x) { CacheClear(*x); }, false});
  if (dashboard != nullptr && p == "/") {
    return only("GET", {[this](X x) {
                          x->Reply(200, "text/html; charset=utf-8", dashboard->Page(),
                                   {{"Cache-Control", "no-store"}});
                        },
                        false});
  }
  if (dashboard != nullptr && p == "/dashboard.json") {
    return only("GET", {[this](X x) {
                          x->Reply(200, "application/json", dashboard->Json(),
                                   {{"Cache-Control", "no-store"}});
                        },
                        false});
  }
  const std::string what = h.method + " " + p;
  return {[this, what](X x) { Reply(*x, "other", Err(404, "unknown route: " + what)); }, true};
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() {
  if (impl_->http != nullptr) impl_->http->Stop(0);
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
  const Tokenizer& tok = *s.deps.tokenizer;
  const std::string& tmpl = s.opt.chat_template.empty() ? tok.chat_template() : s.opt.chat_template;
  s.chat_renderer = s.opt.chat_template.empty()
                        ? ChatRenderer::ForTokenizer(tok)
                        : ChatRenderer::FromSource(
                              tmpl, tok.bos_id() >= 0 ? tok.TokenText(tok.bos_id()) : "",
                              tok.eos_id() >= 0 ? tok.TokenText(tok.eos_id()) : "");
  s.reasoning_tags = server::ReasoningTagsFor(tmpl, &s.reasoning_split);
  s.tool_syntax = server::DetectToolSyntax(tmpl);
  if (!s.chat_renderer.warning().empty()) s.Log("kvtier serve: warning: " + s.chat_renderer.warning());
  for (size_t id = 0; id < s.deps.tokenizer->vocab_size(); ++id) {
    s.max_token_bytes = std::max<uint64_t>(
        s.max_token_bytes, s.deps.tokenizer->TokenText(static_cast<int32_t>(id)).size());
    if (s.deps.tokenizer->IsEndOfGeneration(static_cast<int32_t>(id))) {
      s.stop_tokens.push_back(static_cast<int32_t>(id));
    }
  }
  // Large buffers (request bodies, parsed prompts) from mmap, so their memory leaves the
  // process when freed instead of staying in an arena (issue 36: 55 MB kept per 15 MB
  // request); the heap's top trimmed past 8 MiB. Process-wide, set once.
  static const bool malloc_tuned = [] {
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, 8 << 20);
    return true;
  }();
  (void)malloc_tuned;
  s.messages.engine = s.deps.engine;
  s.messages.tokenizer = s.deps.tokenizer;
  s.messages.metrics = &s.metrics;
  s.messages.model_id = s.opt.model_id;
  s.messages.context = s.context;
  s.messages.max_token_bytes = s.max_token_bytes;
  s.messages.stop_tokens = s.stop_tokens;
  s.messages.aborting = &s.aborting;
  s.messages.drain_ms = &s.drain_ms;
  s.messages.admit = [&s](ApiError* e) -> std::shared_ptr<void> {
    auto flight = std::make_shared<Impl::InFlight>(&s);
    if (s.draining) {
      *e = Err(503, "the server is shutting down", "server_error", "", "shutdown");
    } else if (s.in_flight > s.opt.max_in_flight) {
      *e = Err(503, "the server is overloaded: " + std::to_string(s.opt.max_in_flight) +
                        " requests in flight", "server_error", "", "overloaded");
    } else {
      return flight;
    }
    return nullptr;
  };
  s.messages.prompt = [&s](const ApiRequest& r, std::vector<int32_t>* t, ApiError* e) {
    bool think_open = false;  // /v1/messages returns text blocks only (no reasoning split)
    return s.Prompt(r, t, e, &think_open);
  };
  s.messages.seed = [&s] {
    std::lock_guard<std::mutex> lock(s.seeder_mu);
    return s.seeder();
  };
  s.messages.log = [&s](const std::string& line) { s.Log(line); };
  s.messages.tool_syntax = s.tool_syntax;
  s.messages.constraint = [&s](const ApiRequest& r) { return s.MakeConstraint(r); };
  if (s.opt.dashboard) {
    server::DashboardOptions dopt;
    dopt.model_id = s.opt.model_id;
    dopt.show_text = s.opt.dashboard_show_text;
    dopt.ssd_reconcile_ms = s.opt.metrics_ssd_reconcile_ms;
    s.dashboard = std::make_unique<server::Dashboard>(s.deps, s.metrics, std::move(dopt));
  }
  server::HttpFrontOptions fo;
  fo.host = s.opt.host;
  fo.port = s.opt.port;
  fo.limits.max_body = s.opt.max_body_bytes;
  fo.max_connections = s.opt.max_connections;
  fo.max_connections_per_client = s.opt.max_connections_per_client;
  fo.header_timeout_ms = s.opt.header_timeout_ms;
  fo.idle_timeout_ms = s.opt.idle_timeout_ms;
  fo.body_min_bytes_per_s = s.opt.body_min_bytes_per_s;
  fo.body_budget_bytes = s.opt.body_budget_bytes;
  fo.error_body = [](int status, const std::string& message) {
    return server::ErrorJson(Err(status, message, status >= 500 ? "server_error"
                                                                : "invalid_request_error"));
  };
  s.http = std::make_unique<server::HttpFront>(
      std::move(fo), [&s](const server::HttpHead& h) { return s.RouteOf(h); });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Status Server::Bind() {
  Impl& s = *impl_;
  Status b = s.http->Bind();
  if (!b.ok()) return b;
  s.port = s.http->port();
  return Status::OK();
}

uint16_t Server::port() const { return impl_->port < 0 ? 0 : static_cast<uint16_t>(impl_->port); }

Status Server::Listen() {
  if (impl_->port < 0) return Status::InvalidArgument("server: Listen before Bind");
  return impl_->http->Run();
}

void Server::Shutdown(uint32_t drain_ms) {
  Impl& s = *impl_;
  s.drain_ms = drain_ms;
  s.draining = true;
  {
    std::unique_lock<std::mutex> lock(s.drain_mu);
    if (!s.drain_cv.wait_for(lock, std::chrono::milliseconds(drain_ms),
                             [&] { return s.in_flight.load() == 0; })) {
      s.Log("shutdown: " + std::to_string(s.in_flight.load()) +
            " requests still running after the drain; cancelling them");
      s.aborting = true;
      // Each is told (an error event, a finish_reason and [DONE], or a 503): a moment for it.
      s.drain_cv.wait_for(lock, std::chrono::milliseconds(3000),
                          [&] { return s.in_flight.load() == 0; });
    }
  }
  s.http->Stop(5000);
}

}  // namespace kvtier
