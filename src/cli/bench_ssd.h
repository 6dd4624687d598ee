// `kvtier-bench ssd`: what the SSD tier (issue 7) costs and buys.
//
// throughput (no model): N synthetic KV blocks of a chosen shape and K/V format (random
// normal K/V quantized into the pool) are stored in a PrefixCache whose lower tier is a fresh
// SsdTier, then all evicted: spill time = first eviction to Flush()'s return, GB/s = block
// file bytes / time. Reload: the tier is reopened (open_ms = index rebuild from the headers),
// a fresh PrefixCache over it fetches every entry (promotion), and SsdTier::Load is also timed
// per block. Baselines in the same run, alternating with the tier each repeat: one plain
// sequential write of the same bytes to one file through Env::Default() (Append, one Sync at
// the end) and a plain sequential read of it. Reads are measured twice: with the files in the
// page cache (right after writing) and with their pages dropped (posix_fadvise DONTNEED on
// every file of both sides, after they were synced), so "cold" reads come from the disk.
//
// ttft (a model): time to first token of an N-token prompt computed cold against the same
// prompt served from the SSD tier: the cold sequence is stored and evicted to a fresh tier;
// then a new, empty PrefixCache over the same tier (a warm process) and over a reopened tier
// (after a restart) prefills the prompt (exact hit: one token computed) and the prompt + 32
// new tokens (prefix hit), with the page cache of the tier's files kept or dropped.
//
// Files go to a fresh directory under --dir (default /tmp), removed at the end. Not
// thread-safe; call from one thread (the tier and the model run their own threads).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::cli {

struct BenchSsdConfig {
  std::string modes = "throughput,ttft";
  std::string kv_type = "f16";      // K[/V] of the synthetic blocks and of the model's cache
  // throughput
  uint32_t layers = 28, kv_heads = 8, head_dim = 128, block_tokens = 32;
  double gb = 2.0;                  // block file bytes to spill, in GB (1e9 bytes)
  std::string dir;                  // parent of the run's directory; empty: /tmp
  uint32_t writer_threads = 0;      // 0: the tier's default
  std::string ssd_sync;             // "per-file" or "syncfs" (SsdSyncMode); empty: the default
  std::string ssd_layout;           // "segments" or "files" (SsdLayout); empty: the default
  int repeats = 3;                  // the median counts
  bool cold = true;                 // also measure reads with the page cache dropped
  // ttft
  std::string model;                // empty: the bundled model
  uint32_t prompt_tokens = 16384;
  uint32_t new_tokens = 32;         // appended to the prompt for the prefix hit
  std::string text;                 // empty: data/corpus/eval.txt (or random ids if absent)
  uint32_t ubatch = 512;
  int cold_repeats = 1;
  int threads = 2;
  uint64_t seed = 0;
};

// Read side of one page-cache state ("warm" or "cold").
struct BenchSsdRead {
  std::string page_cache;           // "warm" or "cold"
  double reload_ms = 0, reload_gbps = 0;  // reopened tier, Fetch of every entry
  double open_ms = 0;               // SsdTier::Open of that reopen (index from the headers)
  double read_ms = 0, read_gbps = 0;      // plain sequential read of the same bytes
  double ratio = 0;                 // reload_gbps / read_gbps
  // The same read into distinct memory of the same total size (pre-touched, like a pool),
  // one block file's bytes after the other, instead of one small reused buffer.
  double read_pool_ms = 0, read_pool_gbps = 0;
  double ratio_pool = 0;            // reload_gbps / read_pool_gbps
  double load_us_per_block = 0;     // SsdTier::Load alone, median per block
  double load_gbps = 0;             // file bytes / sum of Load times
  double resident_pct = 0;          // plain file pages in the page cache before its read
};

struct BenchSsdThroughput {
  std::string kv_type, shape;       // "28 layers x 8 KV heads x 128"
  uint32_t block_tokens = 0;
  uint64_t block_stride = 0;        // pool bytes per block
  uint64_t file_bytes_per_block = 0;
  uint64_t blocks = 0, entries = 0;
  uint64_t total_bytes = 0;         // block file bytes written per repeat
  uint32_t writer_threads = 0;
  std::string ssd_sync;             // the writers' SsdSyncMode: "per-file" or "syncfs"
  std::string ssd_layout;           // "segments" or "files"
  int repeats = 0;
  double fill_ms = 0;               // filling the pool (quantizing random K/V), median
  double spill_ms = 0, spill_gbps = 0;
  double write_ms = 0, write_gbps = 0;    // plain sequential write + one fdatasync
  double spill_ratio = 0;           // spill_gbps / write_gbps
  uint64_t producer_waits = 0;      // last repeat's SsdTierStats
  uint64_t skipped = 0;
  std::vector<BenchSsdRead> reads;  // warm, then cold (when measured)
};

struct BenchSsdTtftRow {
  std::string scenario;             // "warm process" or "after restart"
  std::string page_cache;           // "warm" or "cold"
  std::string hit;                  // "exact" or "prefix"
  std::string kind;                 // the match kind the cache reported
  uint32_t request_tokens = 0, reused_tokens = 0;
  double ttft_ms = 0, fetch_ms = 0, compute_ms = 0;  // medians; ttft = fetch + compute
  double open_ms = 0;               // after restart: median SsdTier::Open before the request
  double speedup = 0;               // cold_ms / ttft_ms
  uint64_t bytes_read = 0;          // block file bytes the tier loaded for the request
  double read_gbps = 0;             // bytes_read / fetch_ms
};

struct BenchSsdTtft {
  std::string model_name, arch, kv_type, prompt_source;
  uint32_t prompt_tokens = 0, new_tokens = 0;
  int threads = 0, repeats = 0, cold_repeats = 0;
  double cold_ms = 0;               // median cold prefill of the prompt
  uint64_t kv_bytes = 0;            // the cold sequence's blocks
  double spill_ms = 0;              // Evict + Flush of the stored prompt
  uint64_t spilled_blocks = 0, spilled_bytes = 0;
  std::vector<BenchSsdTtftRow> rows;
};

struct BenchSsdReport {
  std::string dir;                  // where the files went
  bool has_throughput = false, has_ttft = false;
  BenchSsdThroughput throughput;
  BenchSsdTtft ttft;
  uint64_t peak_rss_bytes = 0;
};


// InvalidArgument naming the flag for bad input.
Result<BenchSsdReport> RunBenchSsd(const BenchSsdConfig& c,
                                   const std::function<void(int, int)>& progress);
std::string FormatBenchSsdTable(const BenchSsdReport& r);
std::string FormatBenchSsdJson(const BenchSsdReport& r);

}  // namespace kvtier::cli
