// `kvtier-bench kv-paged`: what the paged KV cache costs per token in each format, and how
// long the continuous-batching operations (merge / extract / filter / extend) take on real
// filled caches at several context lengths, with the K/V bytes each one copies (expected 0).
//
// The cache is a BlockPool of the model shape given (default Qwen3-0.6B: 28 layers x 8 KV
// heads x head_dim 128); rows are filled with seeded normal K/V through SequenceCache::Append
// in parallel. Timings are medians of --repeats. Not thread-safe; call from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::cli {

struct BenchKvPagedConfig {
  int layers = 28;
  int kv_heads = 8;
  int head_dim = 128;
  int block_tokens = 32;
  // Comma-separated; each is a format for K and V or "K/V" (e.g. q8_0/q4_0).
  std::string formats = "f16,bf16,q8_0,q4_0,affine8g64,affine4g64,q8_0/q4_0";
  std::string ops_format = "q4_0";  // K[/V] format of the cache the batch operations run on
  int rows = 8;
  std::string contexts = "1024,8192,32768";  // tokens per row (row i holds context - 3*i)
  int repeats = 9;
  int threads = 0;  // fill threads (0: all cores)
  uint64_t seed = 0;
};

struct BenchKvPagedFormat {
  std::string name;  // "q4_0" or "q8_0/q4_0"
  std::string k_spec, v_spec;
  double bits_per_value = 0;  // mean of K and V, scales included
  uint64_t bytes_per_token = 0;
  double vs_f16 = 0;          // f16 bytes per token / these
  uint64_t block_bytes = 0;   // one block in memory (page-rounded)
  uint64_t batch_bytes = 0;   // rows x the longest context, in whole blocks
};

struct BenchKvPagedOps {
  uint32_t context = 0;
  double fill_s = 0;            // appending every row, all layers
  double fill_tokens_per_s = 0;
  uint64_t kv_bytes = 0;        // pool bytes in use once filled
  // Medians in microseconds for the whole operation on the batch.
  double merge_us = 0;          // Merge(rows) of `rows` sequences
  double extract_us = 0;        // Extract(i) for every row
  double filter_us = 0;         // Filter to half the rows, reordered
  double extend_us = 0;         // Extend a batch of rows/2 by another of rows/2
  double fork_append_us = 0;    // first 1-token append (all layers) to an extracted row
  // K/V bytes copied by each operation (pool counter): 0 for the batch operations; the
  // fork's first append copies its partly filled tail block only.
  uint64_t merge_copied = 0, extract_copied = 0, filter_copied = 0, extend_copied = 0;
  uint64_t fork_append_copied = 0;
};

struct BenchKvPagedReport {
  BenchKvPagedConfig config;
  std::string simd_target;
  int threads = 0;
  std::vector<BenchKvPagedFormat> formats;
  std::string ops_format;
  std::vector<BenchKvPagedOps> ops;
  uint64_t peak_rss_bytes = 0;
};

Result<BenchKvPagedReport> RunBenchKvPaged(const BenchKvPagedConfig& config,
                                           const std::function<void(int, int)>& progress = {});
std::string FormatBenchKvPagedTable(const BenchKvPagedReport& report);
std::string FormatBenchKvPagedJson(const BenchKvPagedReport& report);

}  // namespace kvtier::cli
