// `kvtier-bench attention`: fused attention on paged KV in every format, decode (one query per
// row) and prefill (a chunk of queries at the end of each row), against roofline floors from
// probes measured in the same run (memcpy bandwidth, peak FMA throughput).
//
// One KV layer of `--kv-heads` x `--head-dim` is filled with seeded normal K/V per format;
// shorter contexts are forks of the longest rows trimmed down (no copy). After one warm-up call
// each, every configuration is timed once per round, with the memcpy probe, for --repeats
// rounds: a noisy neighbour slows all of them alike, and the medians stay comparable. Not
// thread-safe; call from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::cli {

struct BenchAttentionConfig {
  std::string ctx = "1024,4096,16384,32768";  // decode contexts
  std::string prefill_ctx = "4096";          // prefill contexts (rows' length incl. the chunk)
  std::string batches = "1,8";               // decode batch sizes (prefill runs batch 1)
  std::string modes = "decode,prefill";
  int prefill_chunk = 512;
  int heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  int block_tokens = 32;
  std::string formats = "f16,bf16,q8_0,q4_0,affine8g64,affine4g64,q8_0/q4_0";
  int repeats = 5;
  int threads = 0;
  uint64_t seed = 0;
};

struct BenchAttentionRow {
  std::string mode;  // "decode" or "prefill"
  uint32_t ctx = 0;
  uint32_t batch = 0;
  uint32_t queries = 0;  // per row
  std::string k_format, v_format;
  double ms = 0;
  uint64_t kv_bytes = 0;  // K/V bytes the call must read (each row's cache once)
  double gbps = 0;        // kv_bytes / time
  double gflops = 0;      // 4 * heads * head_dim * visible keys (QK and PV) / time
  double floor_ms = 0;    // max(kv_bytes / memcpy bandwidth, flops / peak)
  double vs_floor = 0;    // ms / floor_ms
  double read_floor_ms = 0;  // max(kv_bytes / read-only bandwidth, flops / peak)
  double vs_read_floor = 0;  // ms / read_floor_ms
  double speedup_vs_f16 = 0;  // f16 ms / ms at the same mode, ctx and batch (0 if no f16 row)
};

struct BenchAttentionReport {
  BenchAttentionConfig config;
  std::string simd_target;
  int threads = 0;
  double memcpy_gbps = 0;  // (read + write) / time of a parallel memcpy
  double read_gbps = 0;    // read / time of a parallel read-only stream
  double peak_gflops = 0;
  std::vector<BenchAttentionRow> rows;
};

Result<BenchAttentionReport> RunBenchAttention(const BenchAttentionConfig& config,
                                               const std::function<void(int, int)>& progress = {});
std::string FormatBenchAttentionTable(const BenchAttentionReport& report);
std::string FormatBenchAttentionJson(const BenchAttentionReport& report);

}  // namespace kvtier::cli
