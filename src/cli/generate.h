// `kvtier generate`: a prompt through a model, the sampled continuation streamed to stdout.
// `kvtier perplexity`: llama-perplexity's method over a text file (non-overlapping windows of
// ctx tokens, the second half of each scored). Single-threaded callers; each run owns its state.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <ostream>
#include <string>

#include "kvtier/sampler.h"
#include "kvtier/status.h"

namespace kvtier::cli {

struct GenerateConfig {
  std::string model;               // empty: the bundled model
  std::string prompt;
  bool chat = false;               // wrap the prompt as a user turn in the model's chat template
  uint32_t max_tokens = 128;
  SamplingParams sampling;
  std::string kv_type = "f16";     // K or K/V
  uint32_t prefill_step = 512;     // prompt tokens per forward call
  int threads = 0;                 // 0: all cores
  std::string device = "cpu";      // cpu or cuda (cli/sequence_runner.h)
};

struct GenerateStats {
  uint32_t prompt_tokens = 0;
  uint32_t generated_tokens = 0;
  double prefill_ms = 0.0;
  double decode_ms = 0.0;
  std::string stop_reason;         // "eos" or "length"
};

// Streams text to `out` as it is sampled (flushed per token).
Result<GenerateStats> RunGenerate(const GenerateConfig& c, std::ostream& out);

// `kvtier chat`: an interactive conversation on the model. Each line of `in` is a user turn;
// the conversation (system prompt, turns, replies) is rendered through the model's chat
// template, the tokens it shares with what the cache already holds are kept, and the reply is
// streamed to `out` followed by a newline. `prompt`, when set, is written to `prompt_out`
// before each turn (a terminal's "> "). EOF ends it.
struct ChatConfig {
  std::string model;               // empty: the bundled model
  std::string system;              // system prompt (empty: none)
  uint32_t max_tokens = 512;       // reply tokens at most
  uint32_t ctx = 0;                // conversation tokens at most (0: the model's, <= 32768)
  SamplingParams sampling;
  std::string kv_type = "f16";     // K or K/V
  uint32_t prefill_step = 512;
  int threads = 0;
  std::string prompt;              // written before each turn (empty: nothing)
};

struct ChatStats {
  uint32_t turns = 0;
  uint32_t generated_tokens = 0;
  uint32_t context_tokens = 0;     // tokens the cache held at the end
};

Result<ChatStats> RunChat(const ChatConfig& c, std::istream& in, std::ostream& out,
                          std::ostream& prompt_out);

struct PerplexityConfig {
  std::string model;
  std::string file;
  uint32_t ctx = 512;
  uint32_t batch = 512;            // tokens per forward call within a window
  uint32_t chunks = 0;             // 0: every whole window of the file
  std::string kv_type = "f16";
  int threads = 0;
  bool kld = false;                // also score every window with f16 KV: ppl_base, KL divergence
  std::string device = "cpu";      // cpu or cuda (cli/sequence_runner.h)
};

struct PerplexityReport {
  double ppl = 0.0;
  double ppl_stderr = 0.0;
  uint64_t tokens_scored = 0;
  uint32_t ctx = 0;
  uint32_t chunks = 0;
  std::string k_format, v_format;
  double seconds = 0.0;
  // --kld (as llama-perplexity --kl-divergence, base = the same windows with f16 KV):
  bool has_kld = false;
  double ppl_base = 0.0;
  double kld = 0.0;        // mean over scored positions of KL(P_base || P)
  double kld_p99 = 0.0;    // 99th percentile (linear interpolation between sorted values)
  double same_top1 = 0.0;  // fraction of positions whose argmax token agrees with the base's
};

// KL(P_base || P) of the softmaxes of two logit rows of V entries (float64), and whether
// their argmax tokens (first maximum) agree.
struct TokenKld {
  double kld = 0.0;
  bool same_top1 = false;
};
TokenKld KldOfLogits(const float* base_logits, const float* logits, size_t V);
// llama-perplexity's percentile: fraction f of the sorted values, interpolated linearly.
double Percentile(const std::vector<double>& sorted, double fraction);

Result<PerplexityReport> RunPerplexity(const PerplexityConfig& c,
                                       const std::function<void(int, int)>& progress);
std::string FormatPerplexityJson(const PerplexityReport& r);
std::string FormatPerplexityText(const PerplexityReport& r);

}  // namespace kvtier::cli
