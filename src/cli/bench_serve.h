// `kvtier-bench serve` (issue 9): an end-to-end benchmark of an OpenAI-compatible server,
// kvtier's own or any other (llama-server included), through its HTTP API with streamed
// completions, as a user's client sees it.
//
// Without --url it starts `kvtier serve --port 0 --host 127.0.0.1 <server args>` as a child
// process (this binary), waits for its "listening on" line, and at the end reads the child's
// peak RSS (VmHWM) before SIGTERM. With --url it drives that endpoint (and reads the peak RSS
// of --server-pid when given).
//
// Workloads:
//   multiturn          N conversations at once, R rounds each, a shared system prompt; every
//                      round sends the whole history (system, user turns, previous answers)
//                      plus a new user turn;
//   two-round          round 1 a cold ~--context-tokens prompt, round 2 the same prompt
//                      extended by round 1's answer and a new turn (seed 004's live test);
//   batched-histories  B long histories loaded (round 1, max_tokens 1), then B requests that
//                      extend them decoding together (round 2; seed 002's protocol);
//   concurrency        C clients at once, each sending several requests in turn;
//   agent              one tool-using conversation of R turns (--api chat): a ~--system-tokens
//                      system prompt and a tool list sent with every request; after each turn
//                      the history gains the same scripted assistant tool call, its tool result
//                      (~--turn-tokens) and a next user message, so every server gets the same
//                      request sequence (the answers themselves are not fed back).
// Prompts are text cut from --text (default data/corpus/eval.txt, the corpus the setup
// fetches; seeded random words when absent), sized in tokens through a chars-per-token ratio
// found once per invocation (--chars-per-token; else the server's POST /tokenize, which
// llama-server has and which prefills nothing; else one max_tokens 1 request of
// kCalibrationChars characters and its usage.prompt_tokens). Every run's prompts start with a
// run-unique line, so nothing from an earlier run is a cache hit.
//
// Reported per run: TTFT p50/p90/p99, decode tokens/s per request ((tokens - 1) / time after
// the first) and in total, cached / prompt tokens, KV bytes by tier and format (the largest of
// /metrics' kvtier_kv_bytes seen, polled every 0.5 s), the server's peak RSS, errors.
// --sweep-contexts / --kv-type F1,F2 repeat two-round or batched-histories per (format,
// context), restarting the child server with --kv-type FMT; --plots DIR writes gnuplot
// data, scripts and PNGs (TTFT and decode tokens/s against context length per format).
//
// The pure helpers (namespace bench_serve) are thread-safe; RunBenchServe is called from one
// thread (it starts its own client threads).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::cli {

struct BenchServeConfig {
  std::string workload = "two-round";    // multiturn | two-round | batched-histories | concurrency | agent
  std::string url;                       // empty: start `kvtier serve` as a child process
  std::vector<std::string> server_args;  // --server-arg ..., and everything after --
  int server_pid = 0;                    // with --url: the server's pid, for its peak RSS
  std::string api = "completions";       // completions (/v1/completions) | chat
  std::string model;                     // child: serve --model; --url: the requests' "model"
  std::string text;                      // prompt text file; empty: the corpus; "random"
  uint32_t conversations = 4;            // multiturn
  uint32_t rounds = 4;                   // multiturn
  uint32_t system_tokens = 1000;         // multiturn: shared system prompt
  uint32_t turn_tokens = 64;             // user turns (multiturn, two-round, batched-histories)
  uint32_t max_tokens = 32;              // completion tokens per request
  std::string response_format;           // --response-format JSON: sent with every request
  uint32_t context_tokens = 11000;       // two-round: round 1's prompt
  uint32_t batch = 4;                    // batched-histories: B
  uint32_t history_tokens = 4000;        // batched-histories: tokens per history
  uint32_t clients = 4;                  // concurrency: C
  uint32_t requests_per_client = 4;      // concurrency
  uint32_t prompt_tokens = 512;          // concurrency: tokens per prompt
  std::string sweep_contexts;            // "1000,2000": context_tokens / history_tokens per run
  std::string server_bin;                // --server-bin: the kvtier serving (default: beside us)
  std::string kv_types;                  // --kv-type "f16,q4_0": the child's --kv-type per run
  std::string plots_dir;                 // --plots
  std::string server_log;                // --server-log: keep the child's stderr there (appended)
  double timeout_s = 600;                // per request (and for the child to start)
  double metrics_interval_s = 0.5;
  uint64_t seed = 0;           // random text only
  double chars_per_token = 0;  // > 0: prompts sized with this ratio, no calibration
};

// One streamed request as the client saw it.
struct BenchServeRequest {
  uint32_t group = 0;  // conversation, client or history row
  uint32_t round = 1;  // 1-based round (concurrency: the client's request number)
  bool ok = false;
  std::string error;
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;
  uint32_t completion_tokens = 0;
  double start_ms = 0;    // since the run began
  double ttft_ms = -1;    // first chunk with non-empty text
  double total_ms = 0;    // start to the end of the stream
  double decode_tps = 0;  // (completion_tokens - 1) / (last text - first text); 0 if < 2 tokens
};

struct BenchServeKvBytes {
  std::string tier;    // active | ram | ssd
  std::string format;  // e.g. "q8_0/q4_0"
  double bytes = 0;
};

struct BenchServeRun {
  std::string workload;
  std::string kv_format;        // the active format (server args, else /metrics); "" unknown
  uint32_t context_tokens = 0;  // the run's context length (the plots' x)
  std::string server;           // what was driven
  std::string prompt_source;
  double chars_per_token = 0;
  bool calibrated = false;  // chars_per_token measured (else given or the 3.8 default)
  std::string calibration;  // how: "tokenize", "request", "given" or "assumed"
  std::vector<BenchServeRequest> requests;
  std::vector<BenchServeKvBytes> kv_bytes;  // the largest value seen per series
  bool metrics_seen = false;                // /metrics answered with kvtier_kv_bytes at least once
  uint64_t peak_rss_bytes = 0;              // 0: unknown
  double wall_s = 0;
};

struct BenchServeReport {
  std::vector<BenchServeRun> runs;
  bool sweep = false;
};

// Statistics of a run (or of one round of it).
struct BenchServeStats {
  uint32_t requests = 0, errors = 0;
  double ttft_p50 = 0, ttft_p90 = 0, ttft_p99 = 0;
  double decode_tps_p50 = 0, decode_tps_mean = 0;  // per request
  double decode_tps_total = 0;                     // completion tokens / (first start to last end)
  uint64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double cached_ratio = 0;
};
// round 0: every request.
BenchServeStats SummarizeRun(const BenchServeRun& r, uint32_t round = 0);

Result<BenchServeReport> RunBenchServe(const BenchServeConfig& c,
                                       const std::function<void(int, int)>& progress);
std::string FormatBenchServeTable(const BenchServeReport& r);
// One JSON object: the run's, or {"sweep":{...},"runs":[...]}. Two-round runs carry
// "rounds":[{"prompt_tokens","cached_tokens","ttft_ms"},...], "round2_ttft_speedup" and
// "hit_rate" (round 2's cached / prompt tokens).
std::string FormatBenchServeJson(const BenchServeReport& r);
// Writes <dir>/<format>.dat, ttft.gp, decode.gp and, when gnuplot runs, ttft.png and
// decode.png; *note says what was written (and that gnuplot is missing, if it is).
Status WriteBenchServePlots(const BenchServeReport& r, const std::string& dir, std::string* note);

// Runs the parsed command: the report on stdout, notes and errors on stderr. Returns the exit
// status: 0, 2 for bad flags, 1 for other failures or when any request failed.
int RunBenchServeCommand(const BenchServeConfig& c, bool json,
                         const std::function<void(int, int)>& progress);

namespace bench_serve {

// Server-sent events, fed in whatever pieces the socket delivers: each event's data (its
// `data:` lines joined by '\n') goes to on_data when the blank line ending it arrives.
class SseParser {
 public:
  void Feed(std::string_view bytes, const std::function<void(const std::string&)>& on_data);
  // Ends the stream: an event not yet ended by a blank line is delivered.
  void Finish(const std::function<void(const std::string&)>& on_data);

 private:
  void Line(std::string_view line, const std::function<void(const std::string&)>& on_data);
  std::string line_;
  std::string data_;
  bool has_data_ = false;
};

// The p-th percentile (0..100) by linear interpolation between closest ranks (numpy's
// default); 0 for no samples.
double Percentile(std::vector<double> v, double p);

// Samples of one metric from Prometheus text format 0.0.4 (labels in any order, escapes
// undone; comments and other metrics skipped).
struct PromSample {
  std::map<std::string, std::string> labels;
  double value = 0;
};
std::vector<PromSample> ParsePrometheus(std::string_view text, std::string_view metric);
// kvtier_kv_bytes{tier,format} samples.
std::vector<BenchServeKvBytes> ParseKvBytes(std::string_view text);

// "http://host:port[/base][/v1]" -> scheme://host:port and the path prefix ("" or "/base").
struct ParsedUrl {
  std::string origin;
  std::string base;
};
Result<ParsedUrl> ParseUrl(const std::string& url);

// --- The client side of a run (bench_serve_workloads.cc). ---

constexpr double kDefaultCharsPerToken = 3.8;  // the bundled model's tokenizer on the novel
// The calibration samples: for /tokenize, ~kCalibrationTokens tokens of the bundled model's
// tokenizer (free: nothing is prefilled); for the max_tokens 1 request, kCalibrationChars
// characters (a prefill of at most ~that many tokens: ~270 for the bundled model, 1,024 for
// a byte-level vocabulary such as make-test-model's, where 2,000 tokens sized at 3.8 chars
// per token were 7,600 tokens of prefill: minutes on a Qwen3-0.6B shape with 2 threads).
constexpr uint32_t kCalibrationTokens = 2000;
constexpr size_t kCalibrationChars = 1024;

// The text prompts are cut from, read circularly. Cuts start after a space and end on a
// UTF-8 character boundary, so every piece is valid UTF-8.
class TextSource {
 public:
  explicit TextSource(std::string text);
  size_t size() const { return text_.size(); }
  // ~`chars` bytes from near `offset` (wrapping around).
  std::string Take(size_t offset, size_t chars) const;

 private:
  std::string text_;
};
// Seeded random lowercase words and sentence ends, `chars` bytes or a little more.
std::string RandomWords(uint64_t seed, size_t chars);

struct Endpoint {
  std::string origin;  // http://host:port
  std::string base;    // path prefix ("" or "/proxy")
  std::string api = "completions";
  std::string model;  // the requests' "model" (empty: left out)
  double timeout_s = 600;
  std::string response_format;  // JSON for every request's "response_format" (empty: none)
  std::string tools;            // JSON array sent as every chat request's "tools" (empty: none)
};

struct Msg {
  Msg() = default;
  Msg(std::string r, std::string c, std::string x = {})
      : role(std::move(r)), content(std::move(c)), extra(std::move(x)) {}
  std::string role, content;  // system | user | assistant | tool
  std::string extra;          // chat: a JSON object merged into the message (tool_calls, ...)
};
using Conversation = std::vector<Msg>;
// A conversation as one completion prompt: system text, "User: ..." turns each followed by
// "Assistant:", answers appended as they were, so each round's prompt extends the last.
std::string RenderCompletion(const Conversation& conv);

// One streamed request (temperature 0, stream_options.include_usage, cache_prompt); *answer
// gets the generated text. Never throws; failures are in the result's error.
BenchServeRequest Send(const Endpoint& ep, const Conversation& conv, uint32_t max_tokens,
                       std::chrono::steady_clock::time_point t0, std::string* answer);

// Chars per token of the server's tokenizer over the prompt text (from offset 0, where the
// run's first prompt starts; the ratio varies by +-8% between 600-token windows of the novel):
// POST /tokenize {"content"} -> {"tokens":[...]} over ~kCalibrationTokens * 3.8 chars when the
// server has it (llama-server); else one max_tokens 1 request of kCalibrationChars chars
// behind a first line that no workload prompt shares, counted by its usage.prompt_tokens.
struct Calibration {
  double chars_per_token = kDefaultCharsPerToken;
  bool measured = false;
  std::string method;         // "tokenize", "request", or "assumed" (neither answered)
  BenchServeRequest request;  // the request's, when one was sent
};
Calibration Calibrate(const Endpoint& ep, const TextSource& text);

struct WorkloadEnv {
  const BenchServeConfig* c = nullptr;  // the workload and its sizes
  Endpoint ep;
  const TextSource* text = nullptr;
  double cpt = kDefaultCharsPerToken;
  uint64_t run_id = 0;                       // makes the run's prompts unique
  std::function<void()> step;                // after each request (thread-safe)
  std::chrono::steady_clock::time_point t0;  // the run's start
};
// The agent workload's tool list (a JSON array of OpenAI function tools).
std::string AgentTools();

// The requests of c->workload, in the order of their groups and rounds.
std::vector<BenchServeRequest> RunWorkload(const WorkloadEnv& e);

}  // namespace bench_serve
}  // namespace kvtier::cli
