// `kvtier-bench kv-cache`: memory, accuracy and speed of every KV row format on seeded
// standard-normal K and V, side by side with a memcpy bandwidth probe from the same run.
//
// Work is done one tensor (the K or the V of one layer) at a time: peak memory is that
// tensor's source, quantized and dequantized copies (about 1.3x one layer's source K+V),
// whatever --seq-len and --layers. Every timed step is a whole-tensor pass split across the
// threads (one fork/join per pass); the median of --repeats passes counts. Not thread-safe
// (uses its own thread pool); call from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvtier/format.h"
#include "kvtier/status.h"

namespace kvtier::cli {

struct BenchKvCacheConfig {
  int layers = 32;
  int seq_len = 512;
  int heads = 32;
  int head_dim = 128;
  int group_size = 64;
  std::string formats = "affine8,affine4,q8_0,q4_0";  // comma-separated; affine defaults
  DType dtype = DType::kF16;                           // source data dtype
  uint64_t seed = 0;
  int threads = 0;   // 0: all cores
  int repeats = 3;   // each timed operation runs this many times; the median counts
};

struct BenchKvCacheRow {
  std::string format;  // full short name: "f16", "affine4g64", "q4_0"
  std::string spec;    // round-trips through ParseFormat: "affine4g64:f16"
  double bits_per_value = 0;
  uint64_t memory_bytes = 0;
  double compression = 0;
  double mean_abs_error = 0;
  double max_abs_error = 0;
  double quantize_ms = 0;
  double dequantize_ms = 0;
  double quantize_gbps = 0;    // (bytes read + bytes written) / time
  double dequantize_gbps = 0;
};

struct BenchKvCacheReport {
  BenchKvCacheConfig config;
  std::string simd_target;
  int threads = 0;
  uint64_t source_bytes = 0;        // all layers, K+V
  uint64_t layer_source_bytes = 0;  // one layer, K+V
  double memcpy_gbps = 0;           // (bytes read + bytes written) / time, same buffers
  double memcpy_ms = 0;
  uint64_t peak_rss_bytes = 0;
  std::vector<BenchKvCacheRow> rows;  // source format first, then --formats in order
};

// Validates the config (errors name the flag, expected vs got) and runs the benchmark.
// `progress(done, total)` is called after each layer when set.
Result<BenchKvCacheReport> RunBenchKvCache(const BenchKvCacheConfig& config,
                                           const std::function<void(int, int)>& progress = {});

std::string FormatBenchKvCacheTable(const BenchKvCacheReport& report);
std::string FormatBenchKvCacheJson(const BenchKvCacheReport& report);

}  // namespace kvtier::cli
