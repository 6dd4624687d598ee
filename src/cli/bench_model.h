// `kvtier-bench model`: prefill and decode speed of a model at several context depths and KV
// formats, the measurements of llama.cpp's `llama-bench -p P -n N -d D` (pp P @ dD, tg N @ dD).
//
// For each KV format and depth the row's cache is first filled to the depth with seeded
// normal K/V (written straight into the cache: timing does not depend on the values, and a
// 16K-token prefill is not spent on every configuration); then, per repeat, a chunk of
// --prefill tokens is timed and trimmed off again, and --decode single-token steps are timed
// and trimmed off. Medians of the repeats. Not thread-safe; call from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::cli {

struct BenchModelConfig {
  std::string model;                 // empty: the bundled model
  std::string depths = "1024,16384";
  std::string kv_types = "f16,q8_0,q4_0";
  uint32_t prefill = 512;
  uint32_t decode = 32;
  int repeats = 3;
  int threads = 2;
  uint64_t seed = 0;
  std::string matmul = "auto";  // model::MatMulPath: auto, float, int8-scalar / -avx2 / -avx512
};

struct BenchModelRow {
  std::string kv_type;
  uint32_t depth = 0;
  double prefill_tok_s = 0;  // median
  double decode_tok_s = 0;
  // Prefill tokens per second of process CPU time (all threads): load-independent with
  // --threads 1, where wall-clock figures on a shared machine are not.
  double prefill_cpu_tok_s = 0;
  double decode_cpu_tok_s = 0;   // median
  uint64_t kv_bytes = 0;     // cache bytes in use at depth + prefill
};

struct BenchModelReport {
  std::string model_name;
  std::string arch;
  uint64_t weight_bytes = 0;
  int threads = 0;
  std::string matmul_target;
  std::vector<BenchModelRow> rows;
};

Result<BenchModelReport> RunBenchModel(const BenchModelConfig& c,
                                       const std::function<void(int, int)>& progress);
std::string FormatBenchModelTable(const BenchModelReport& r);
std::string FormatBenchModelJson(const BenchModelReport& r);

}  // namespace kvtier::cli
