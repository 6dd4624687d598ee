// `kvtier-bench serve` (bench_serve.h): the client side of a run: prompt text, the streaming
// request (SSE over cpp-httplib's content receiver), the calibration and the four workloads.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/bench_serve.h"

namespace kvtier::cli::bench_serve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

uint32_t U32(const json& j, const char* key, bool* found) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return 0;
  *found = true;
  return static_cast<uint32_t>(std::max(0.0, it->get<double>()));
}

}  // namespace

TextSource::TextSource(std::string text) : text_(std::move(text)) {
  if (text_.empty()) text_ = " ";
}

std::string TextSource::Take(size_t offset, size_t chars) const {
  size_t at = offset % text_.size();
  for (size_t k = 0; k < 64 && text_[at] != ' '; ++k) at = (at + 1) % text_.size();
  at = (at + 1) % text_.size();
  std::string out;
  out.reserve(chars + 8);
  while (out.size() < chars) {
    const size_t n = std::min(chars - out.size(), text_.size() - at);
    out.append(text_, at, n);
    at = (at + n) % text_.size();
  }
  // Finish a multi-byte character rather than cut it.
  while (at != 0 && (static_cast<unsigned char>(text_[at]) & 0xC0) == 0x80) {
    out += text_[at];
    at = (at + 1) % text_.size();
  }
  return out;
}

std::string RandomWords(uint64_t seed, size_t chars) {
  std::mt19937_64 rng(seed);
  std::string s;
  while (s.size() < chars) {
    const int len = 1 + static_cast<int>(rng() % 9);
    for (int i = 0; i < len; ++i) s += static_cast<char>('a' + rng() % 26);
    s += rng() % 12 == 0 ? ". " : " ";
  }
  return s;
}

std::string RenderCompletion(const Conversation& conv) {
  std::string s;
  for (const Msg& m : conv) {
    if (m.role == "system") {
      s += m.content + "\n\n";
    } else if (m.role == "user") {
      s += "User: " + m.content + "\n\nAssistant:";
    } else if (m.role == "tool") {
      s += "Tool: " + m.content + "\n\n";
    } else {
      s += m.content + "\n\n";
    }
  }
  return s;
}

BenchServeRequest Send(const Endpoint& ep, const Conversation& conv, uint32_t max_tokens,
                       Clock::time_point t0, std::string* answer) {
  BenchServeRequest r;
  json body{{"max_tokens", max_tokens},
            {"temperature", 0},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}},
            {"cache_prompt", true}};
  if (!ep.model.empty()) body["model"] = ep.model;
  if (!ep.response_format.empty()) body["response_format"] = json::parse(ep.response_format);
  if (ep.api == "chat") {
    json msgs = json::array();
    for (const Msg& m : conv) {
      json msg{{"role", m.role}, {"content", m.content}};
      if (!m.extra.empty()) msg.update(json::parse(m.extra));
      msgs.push_back(std::move(msg));
    }
    body["messages"] = msgs;
    if (!ep.tools.empty()) body["tools"] = json::parse(ep.tools);
  } else {
    body["prompt"] = RenderCompletion(conv);
  }
  httplib::Client cli(ep.origin);
  cli.set_connection_timeout(10);
  const auto timeout = static_cast<time_t>(std::max(1.0, ep.timeout_s));
  cli.set_read_timeout(timeout);
  cli.set_write_timeout(timeout);
  httplib::Request req;
  req.method = "POST";
  req.path = ep.base + (ep.api == "chat" ? "/v1/chat/completions" : "/v1/completions");
  req.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");

  int status = 0;
  std::string raw;  // the first bytes, for error messages
  std::string stream_error;
  double first = -1, last = -1;
  uint32_t text_chunks = 0;
  bool have_prompt = false, have_cached = false, have_completion = false;
  uint32_t timings_cache = 0, timings_prompt = 0, timings_predicted = 0;
  bool have_timings = false, have_timings_predicted = false;
  answer->clear();
  SseParser sse;
  const Clock::time_point start = Clock::now();
  r.start_ms = std::chrono::duration<double, std::milli>(start - t0).count();
  auto on_data = [&](const std::string& d) {
    if (d == "[DONE]") return;
    const json j = json::parse(d, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return;
    if (auto e = j.find("error"); e != j.end()) {
      stream_error = e->is_object() && e->contains("message") && (*e)["message"].is_string()
                         ? (*e)["message"].get<std::string>()
                         : e->dump();
      return;
    }
    std::string text;
    if (auto ch = j.find("choices"); ch != j.end() && ch->is_array() && !ch->empty()) {
      const json& c0 = (*ch)[0];
      if (c0.contains("text") && c0["text"].is_string()) text = c0["text"].get<std::string>();
      if (c0.contains("delta") && c0["delta"].is_object() && c0["delta"].contains("content") &&
          c0["delta"]["content"].is_string()) {
        text = c0["delta"]["content"].get<std::string>();
      }
    }
    if (!text.empty()) {
      const double now = MsSince(start);
      if (first < 0) first = now;
      last = now;
      ++text_chunks;
      *answer += text;
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      const uint32_t p = U32(*u, "prompt_tokens", &have_prompt);
      if (have_prompt) r.prompt_tokens = p;
      const uint32_t c = U32(*u, "completion_tokens", &have_completion);
      if (have_completion) r.completion_tokens = c;
      if (auto d2 = u->find("prompt_tokens_details"); d2 != u->end() && d2->is_object()) {
        const uint32_t cached = U32(*d2, "cached_tokens", &have_cached);
        if (have_cached) r.cached_tokens = cached;
      }
    }
    if (auto t = j.find("timings"); t != j.end() && t->is_object()) {  // llama-server
      timings_cache = U32(*t, "cache_n", &have_timings);
      timings_prompt = U32(*t, "prompt_n", &have_timings);
      timings_predicted = U32(*t, "predicted_n", &have_timings_predicted);
    }
    if (!have_cached) {
      bool found = false;
      const uint32_t tc = U32(j, "tokens_cached", &found);
      if (found) timings_cache = tc, have_timings = true;
    }
  };
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (raw.size() < 4096) raw.append(data, std::min<size_t>(n, 4096 - raw.size()));
    if (status == 200) sse.Feed(std::string_view(data, n), on_data);
    return true;
  };
  const httplib::Result res = cli.send(req);
  if (status == 200) sse.Finish(on_data);
  r.total_ms = MsSince(start);
  if (!res) {
    r.error = "HTTP " + req.path + ": " + httplib::to_string(res.error());
    return r;
  }
  if (status != 200) {
    const json j = json::parse(raw, nullptr, false);
    std::string msg = raw.substr(0, 300);
    if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object() &&
        j["error"].contains("message") && j["error"]["message"].is_string()) {
      msg = j["error"]["message"].get<std::string>();
    }
    r.error = "HTTP " + std::to_string(status) + " from " + req.path + ": " + msg;
    return r;
  }
  if (!stream_error.empty()) {
    r.error = "error in the stream: " + stream_error;
    return r;
  }
  if (!have_cached && have_timings) r.cached_tokens = timings_cache;
  if (!have_prompt && have_timings) r.prompt_tokens = timings_cache + timings_prompt;
  if (!have_completion) {
    r.completion_tokens = have_timings_predicted ? timings_predicted : text_chunks;
  }
  r.ok = true;
  r.ttft_ms = first >= 0 ? first : r.total_ms;  // no text at all: the whole answer
  if (r.completion_tokens >= 2 && last > first && first >= 0) {
    r.decode_tps = (r.completion_tokens - 1) * 1e3 / (last - first);
  }
  return r;
}

namespace {

// What the workloads of one run share, and their prompt and request helpers.
struct Env : WorkloadEnv {
  explicit Env(const WorkloadEnv& w) : WorkloadEnv(w) {}
  size_t Chars(uint32_t tokens) const { return static_cast<size_t>(std::llround(tokens * cpt)); }
  // The first line of a prompt: a tag unique to the run and `k` (a request, or a prefix the
  // run's requests share), first, so that no other prompt shares even its first token.
  std::string Tag(uint64_t k) const {
    uint64_t x = run_id + 0x9E3779B97F4A7C15ull * (k + 1);
    x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    char b[64];
    std::snprintf(b, sizeof b, "%08llx: kvtier bench-serve",
                  static_cast<unsigned long long>(x & 0xffffffffull));
    return b;
  }
  // `conv` plus a last message of `role`: `head`, then text from `offset` sized so that the
  // rendered prompt holds ~`tokens` tokens (whole) or gains ~`tokens` tokens (!whole).
  Conversation With(Conversation conv, const std::string& role, const std::string& head,
                    size_t offset, uint32_t tokens, bool whole) const {
    const size_t before = whole ? 0 : RenderCompletion(conv).size();
    conv.push_back({role, head});
    const size_t overhead = RenderCompletion(conv).size() - before;
    const size_t want = Chars(tokens);
    conv.back().content += text->Take(offset, want > overhead ? want - overhead : 0);
    return conv;
  }
  BenchServeRequest Do(const Conversation& conv, uint32_t max_tokens, uint32_t group,
                       uint32_t round, std::string* answer) const {
    BenchServeRequest r = Send(ep, conv, max_tokens, t0, answer);
    r.group = group;
    r.round = round;
    if (step) step();
    return r;
  }
};

// fn(i) for i in [0, n), each on its own thread, all at once.
void Parallel(uint32_t n, const std::function<void(uint32_t)>& fn) {
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < n; ++i) threads.emplace_back(fn, i);
  for (std::thread& t : threads) t.join();
}

std::vector<BenchServeRequest> TwoRound(const Env& e) {
  const BenchServeConfig& c = *e.c;
  std::string answer;
  Conversation conv = e.With({{"system", e.Tag(0)}}, "user", "", 0, c.context_tokens, true);
  std::vector<BenchServeRequest> out;
  out.push_back(e.Do(conv, c.max_tokens, 0, 1, &answer));
  conv.push_back({"assistant", answer});
  conv = e.With(conv, "user", "", e.Chars(c.context_tokens) + 4096, c.turn_tokens, false);
  out.push_back(e.Do(conv, c.max_tokens, 0, 2, &answer));
  return out;
}

std::vector<BenchServeRequest> Multiturn(const Env& e) {
  const BenchServeConfig& c = *e.c;
  const Conversation system = e.With({}, "system", e.Tag(0) + "\n", 0, c.system_tokens, true);
  const size_t turn_chars = e.Chars(c.turn_tokens);
  std::vector<std::vector<BenchServeRequest>> per(c.conversations);
  Parallel(c.conversations, [&](uint32_t conv_i) {
    Conversation conv = system;
    std::string answer;
    for (uint32_t round = 1; round <= c.rounds; ++round) {
      const size_t offset =
          e.Chars(c.system_tokens) + 4096 + (size_t(conv_i) * c.rounds + round) * (turn_chars + 64);
      conv = e.With(conv, "user", "", offset, c.turn_tokens, false);
      per[conv_i].push_back(e.Do(conv, c.max_tokens, conv_i, round, &answer));
      conv.push_back({"assistant", answer});
    }
  });
  std::vector<BenchServeRequest> out;
  for (auto& v : per) out.insert(out.end(), v.begin(), v.end());
  return out;
}

std::vector<BenchServeRequest> BatchedHistories(const Env& e) {
  const BenchServeConfig& c = *e.c;
  const size_t history_chars = e.Chars(c.history_tokens);
  std::vector<Conversation> convs(c.batch);
  for (uint32_t i = 0; i < c.batch; ++i) {
    convs[i] = e.With({{"system", e.Tag(i)}}, "user", "", i * (history_chars + 4096),
                      c.history_tokens, true);
  }
  std::vector<BenchServeRequest> round1(c.batch), round2(c.batch);
  std::vector<std::string> answers(c.batch);
  // Round 1 loads the histories (max_tokens 1); round 2 extends every one and decodes them
  // together.
  Parallel(c.batch, [&](uint32_t i) { round1[i] = e.Do(convs[i], 1, i, 1, &answers[i]); });
  Parallel(c.batch, [&](uint32_t i) {
    Conversation conv = convs[i];
    conv.push_back({"assistant", answers[i]});
    conv = e.With(conv, "user", "", e.text->size() / 2 + i * 4096, c.turn_tokens, false);
    std::string answer;
    round2[i] = e.Do(conv, c.max_tokens, i, 2, &answer);
  });
  round1.insert(round1.end(), round2.begin(), round2.end());
  return round1;
}

std::vector<BenchServeRequest> Concurrency(const Env& e) {
  const BenchServeConfig& c = *e.c;
  const size_t chars = e.Chars(c.prompt_tokens);
  std::vector<std::vector<BenchServeRequest>> per(c.clients);
  Parallel(c.clients, [&](uint32_t client) {
    std::string answer;
    for (uint32_t k = 0; k < c.requests_per_client; ++k) {
      const size_t n = size_t(client) * c.requests_per_client + k;
      const Conversation conv =
          e.With({{"system", e.Tag(n)}}, "user", "", n * (chars + 1024), c.prompt_tokens, true);
      per[client].push_back(e.Do(conv, c.max_tokens, client, k + 1, &answer));
    }
  });
  std::vector<BenchServeRequest> out;
  for (auto& v : per) out.insert(out.end(), v.begin(), v.end());
  return out;
}

// One tool-using conversation (see bench_serve.h): the same scripted calls and results for
// every server, so the request sequence is identical whatever the model answers.
std::vector<BenchServeRequest> Agent(const Env& e) {
  const BenchServeConfig& c = *e.c;
  static const char* kFiles[] = {"src/kv/block_pool.cc", "src/engine/scheduler.cc",
                                 "src/server/server.cc", "src/prefix/radix.cc",
                                 "src/tier/ssd_tier.cc", "src/model/llama.cc",
                                 "src/quant/q4_0.cc", "src/cli/serve.cc"};
  Conversation conv = e.With({}, "system",
                             e.Tag(0) + "\nYou are a coding agent. Use the tools to read and "
                                        "edit the repository; answer briefly.\n",
                             0, c.system_tokens, true);
  const size_t base = e.Chars(c.system_tokens) + 4096;
  const size_t turn_chars = e.Chars(c.turn_tokens) + 64;
  conv = e.With(conv, "user", "Find why the cache misses. ", base, 32, false);
  std::vector<BenchServeRequest> out;
  std::string answer;
  for (uint32_t round = 1; round <= c.rounds; ++round) {
    out.push_back(e.Do(conv, c.max_tokens, 0, round, &answer));
    const std::string id = "call_" + std::to_string(round);
    const json args{{"path", kFiles[(round - 1) % 8]}};
    const json calls = json::array({{{"id", id},
                                     {"type", "function"},
                                     {"function", {{"name", "read_file"}, {"arguments", args.dump()}}}}});
    conv.push_back({"assistant", "", json{{"tool_calls", calls}}.dump()});
    conv = e.With(conv, "tool", "", base + round * 2 * turn_chars, c.turn_tokens, false);
    conv.back().extra = json{{"tool_call_id", id}}.dump();
    conv = e.With(conv, "user", "Next: ", base + (round * 2 + 1) * turn_chars, 32, false);
  }
  return out;
}

}  // namespace

std::string AgentTools() {
  auto fn = [](const char* name, const char* description, json properties, json required) {
    return json{{"type", "function"},
                {"function",
                 {{"name", name},
                  {"description", description},
                  {"parameters", {{"type", "object"}, {"properties", properties},
                                  {"required", required}, {"additionalProperties", false}}}}}};
  };
  const json str{{"type", "string"}};
  json tools = json::array(
      {fn("read_file", "Read a file of the repository; returns its text.", {{"path", str}},
          {"path"}),
       fn("write_file", "Replace a file's text.", {{"path", str}, {"text", str}}, {"path", "text"}),
       fn("search", "Search the repository for a regular expression; returns matching lines.",
          {{"pattern", str}, {"glob", str}}, {"pattern"}),
       fn("run_tests", "Run the test suite (or the tests matching a filter); returns the log.",
          {{"filter", str}}, json::array()),
       fn("list_dir", "List a directory.", {{"path", str}}, {"path"})});
  return tools.dump();
}

Calibration Calibrate(const Endpoint& ep, const TextSource& text) {
  Calibration cal;
  {
    // llama-server's tokenizer route: counts without a prefill.
    const std::string sample = RenderCompletion(
        {{"system", "Calibration."},
         {"user", text.Take(0, static_cast<size_t>(kCalibrationTokens * kDefaultCharsPerToken))}});
    httplib::Client cli(ep.origin);
    cli.set_connection_timeout(10);
    cli.set_read_timeout(static_cast<time_t>(std::max(1.0, ep.timeout_s)));
    const json body{{"content", sample}, {"add_special", false}};
    const httplib::Result res =
        cli.Post((ep.base + "/tokenize").c_str(),
                 body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    if (res && res->status == 200) {
      const json j = json::parse(res->body, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.contains("tokens") && j["tokens"].is_array() &&
          !j["tokens"].empty()) {
        cal.chars_per_token = static_cast<double>(sample.size()) / j["tokens"].size();
        cal.measured = true;
        cal.method = "tokenize";
        return cal;
      }
    }
  }
  const Conversation conv{{"system", "Calibration."}, {"user", text.Take(0, kCalibrationChars)}};
  std::string answer;
  cal.request = Send(ep, conv, 1, Clock::now(), &answer);
  cal.method = "assumed";
  if (cal.request.ok && cal.request.prompt_tokens > 0) {
    cal.chars_per_token =
        static_cast<double>(RenderCompletion(conv).size()) / cal.request.prompt_tokens;
    cal.measured = true;
    cal.method = "request";
  }
  return cal;
}

std::vector<BenchServeRequest> RunWorkload(const WorkloadEnv& w) {
  const Env e(w);
  if (w.c->workload == "two-round") return TwoRound(e);
  if (w.c->workload == "multiturn") return Multiturn(e);
  if (w.c->workload == "batched-histories") return BatchedHistories(e);
  if (w.c->workload == "agent") return Agent(e);
  return Concurrency(e);
}

}  // namespace kvtier::cli::bench_serve
