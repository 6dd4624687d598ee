// `kvtier-bench prefix` and `kvtier-bench prefix-agreement`: what the RAM prefix cache buys a
// request (issue 6).
//
// prefix: time to first token (TTFT) of an N-token prompt computed cold (no cache, a
// fresh pool) against the same model after a prefix-cache hit, for each store type ("active":
// the entry keeps the active K/V format and is used in place; any other format: quantized on
// store, converted back on fetch). Two warm requests per store type: the exact prompt (one
// token left to compute) and the prompt + 32 new tokens (a prefix hit). Also the store time,
// the fetch (conversion) time, and the bytes the cache holds per token by format.
//
// prefix-agreement: greedy-token agreement of quantize-on-store with the cold run over many
// prompts (windows of 256..768 tokens): each prompt is generated cold, stored in each format,
// served back as an exact hit and generated again; the report counts prompts whose tokens are
// all identical and the mean fraction identical up to the first divergence.
//
// Prompts are token ids of the model's tokenizer over --text (by default the held-out novel,
// data/corpus/eval.txt, repeated when too short), or seeded random ids below n_vocab when the
// default text is absent or --text is "random"; the report says which. Sequences are freed
// between runs, so memory stays near one cold cache + one cached entry + one warm cache.
// Not thread-safe; call from one thread (the model runs on --threads workers).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::cli {

// The default --text: the source tree's data/corpus/eval.txt.
std::string DefaultPrefixText();

struct BenchPrefixConfig {
  std::string model;                 // empty: the bundled model
  std::string kv_type = "f16";       // active K[/V] format
  std::string prompt_tokens = "4096,16384";
  std::string store_types = "active,affine8g64,affine4g64";
  std::string text;                  // empty: DefaultPrefixText(); "random": random ids
  uint32_t ubatch = 512;
  uint32_t new_tokens = 32;          // appended to the prompt for the prefix hit
  int repeats = 5;                   // warm runs (and stores) per case; the median counts
  int cold_repeats = 1;
  int threads = 2;
  uint64_t seed = 0;
};

struct BenchPrefixWarm {
  std::string store_type;       // "active" or a format name
  std::string entry_format;     // K/V format the entry is held in
  bool quantized = false;       // PrefixStoreResult::quantized
  std::string hit;              // "exact" (the prompt) or "prefix" (prompt + new tokens)
  std::string kind;             // match kind the cache reported
  uint32_t request_tokens = 0;
  uint32_t reused_tokens = 0;
  bool converted = false;
  double warm_ms = 0;           // median TTFT: fetch + compute
  double fetch_ms = 0;          // median fetch (conversion included)
  double compute_ms = 0;        // median model time over the tokens left
  double speedup = 0;           // the case's cold_ms (N tokens) / warm_ms
  double store_ms = 0;          // median Store
  double bytes_per_token = 0;   // cache bytes / cached tokens (whole blocks)
  uint64_t analytic_bytes_per_token = 0;  // KvBytesPerToken of the entry's formats
  uint64_t cache_bytes = 0;
};

struct BenchPrefixCase {
  uint32_t prompt_tokens = 0;
  double cold_ms = 0;           // median cold TTFT of the N-token prompt (for the prefix
                                // hit, a lower bound of the cold N + new tokens request)
  uint64_t cold_kv_bytes = 0;   // the cold sequence's blocks
  std::vector<BenchPrefixWarm> warm;
};

struct BenchPrefixReport {
  std::string model_name, arch, kv_type, prompt_source;
  uint64_t weight_bytes = 0;
  uint64_t active_bytes_per_token = 0;  // KvBytesPerToken of the active formats
  int threads = 0;
  uint32_t ubatch = 0, new_tokens = 0;
  int repeats = 0, cold_repeats = 0;
  uint64_t peak_rss_bytes = 0;
  std::vector<BenchPrefixCase> cases;
};

Result<BenchPrefixReport> RunBenchPrefix(const BenchPrefixConfig& c,
                                         const std::function<void(int, int)>& progress);
std::string FormatBenchPrefixTable(const BenchPrefixReport& r);
std::string FormatBenchPrefixJson(const BenchPrefixReport& r);

struct PrefixAgreementConfig {
  std::string model;
  std::string kv_type = "f16";
  std::string store_types = "active,affine8g64,affine4g64,q8_0,q4_0";
  std::string text;             // as BenchPrefixConfig::text
  uint32_t prompts = 100;
  uint32_t min_tokens = 256;    // window lengths, uniform in [min, max]
  uint32_t max_tokens = 768;
  uint32_t generate = 32;       // greedy tokens per prompt
  uint32_t ubatch = 512;
  int threads = 2;
  uint64_t seed = 0;
};

struct PrefixAgreementRow {
  std::string store_type, entry_format;
  uint32_t prompts = 0;
  uint32_t quantized = 0;       // prompts whose entry was quantized on store
  uint32_t identical = 0;       // prompts with every generated token identical to cold
  double identical_pct = 0;
  double mean_prefix_fraction = 0;  // mean of (tokens identical before the first divergence) / generate
};

struct PrefixAgreementReport {
  std::string model_name, kv_type, prompt_source;
  uint32_t prompts = 0, generate = 0, min_tokens = 0, max_tokens = 0;
  uint64_t prompt_tokens_total = 0;
  int threads = 0;
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;
  std::vector<PrefixAgreementRow> rows;
};

Result<PrefixAgreementReport> RunPrefixAgreement(const PrefixAgreementConfig& c,
                                                 const std::function<void(int, int)>& progress);
std::string FormatPrefixAgreementTable(const PrefixAgreementReport& r);
std::string FormatPrefixAgreementJson(const PrefixAgreementReport& r);

}  // namespace kvtier::cli
