// `kvtier-bench ssd`; see bench_ssd.h. Owned by the cli module; a single-threaded driver (the
// SSD tier runs its writer threads, the model its ThreadPool). The TTFT half lives in
// bench_ssd_ttft.cc; what both halves share is in bench_ssd_util.h.
#include "cli/bench_ssd.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/half.h"
#include "base/stats.h"
#include "base/strings.h"
#include "base/sysinfo.h"
#include "base/timer.h"
#include "cli/bench_report.h"
#include "cli/bench_ssd_util.h"
#include "cli/flags.h"
#include "kvtier/env.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/ssd_tier.h"
#include "tier/block_file.h"

namespace kvtier::cli {
namespace {

using ssd_bench::DropPageCache;
using ssd_bench::LayoutName;
using ssd_bench::ParseLayout;
using ssd_bench::OpenBenchTier;
using ssd_bench::ParseSyncMode;
using ssd_bench::SyncModeName;
using ssd_bench::ResidentPct;

constexpr uint32_t kEntryBlocks = 64;  // blocks per synthetic entry (2,048 tokens of 32)
constexpr uint32_t kSourcePad = 997;   // extra source tokens, so windows differ per entry
const ModelFingerprint kSynthModel{0x55d0bec4, 0x6b767469};

double Gbps(uint64_t bytes, double ms) { return ms > 0 ? double(bytes) / (ms * 1e6) : 0.0; }

// The synthetic workload of one run: entries of random token ids over N blocks, the random
// f16 K/V they are filled from, and the pool and file sizes that follow.
struct Synth {
  KvShape shape;
  Format k, v;
  uint32_t bt = 0;
  uint64_t stride = 0;
  uint64_t file_full = 0;                   // block file bytes of a full block without ends
  uint64_t blocks = 0, total_bytes = 0;     // block files of all entries
  std::vector<std::vector<int32_t>> entries;  // [entries][<= kEntryBlocks * bt] token ids
  std::vector<uint16_t> source;             // [kEntryBlocks * bt + kSourcePad, heads, dim] f16
  std::shared_ptr<BlockPool> pool;          // holds every block of every entry
};

uint64_t FileBytes(const Synth& s, uint32_t n_tokens, uint32_t n_ends) {
  tier::BlockFileHeader h;
  h.shape = s.shape;
  h.k_format = s.k;
  h.v_format = s.v;
  h.block_tokens = s.bt;
  h.tokens.assign(n_tokens, 0);
  h.ends.assign(n_ends, n_tokens);
  return h.file_bytes();
}

Result<Synth> MakeSynth(const BenchSsdConfig& c) {
  Synth s;
  KVTIER_ASSIGN_OR_RETURN(const KvFormats f, ParseKvFormats("--kv-type", c.kv_type));
  s.shape = {c.layers, c.kv_heads, c.head_dim};
  s.k = f.k;
  s.v = f.v;
  s.bt = c.block_tokens;
  Result<KvBlockLayout> layout = KvBlockLayout::Make(s.shape, s.k, s.v, s.bt);
  if (!layout.ok()) {
    return Status::InvalidArgument("--kv-type / --layers / --kv-heads / --head-dim: " +
                                   layout.status().message());
  }
  s.stride = layout->block_stride;
  s.file_full = FileBytes(s, s.bt, 0);
  const uint64_t want = static_cast<uint64_t>(c.gb * 1e9);
  s.blocks = std::max<uint64_t>(1, (want + s.file_full - 1) / s.file_full);
  std::mt19937_64 rng(c.seed);
  for (uint64_t done = 0; done < s.blocks;) {
    const uint64_t nb = std::min<uint64_t>(kEntryBlocks, s.blocks - done);
    std::vector<int32_t> t(nb * s.bt);
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % 1000000000u);
    s.entries.push_back(std::move(t));
    s.total_bytes += (nb - 1) * s.file_full + FileBytes(s, s.bt, 1);
    done += nb;
  }
  s.source.resize(size_t(kEntryBlocks * s.bt + kSourcePad) * s.shape.n_kv_heads *
                  s.shape.head_dim);
  std::normal_distribution<float> nd;
  for (uint16_t& x : s.source) x = F32ToF16(nd(rng));
  BlockPoolOptions po;
  po.shape = s.shape;
  po.k_format = s.k;
  po.v_format = s.v;
  po.block_tokens = s.bt;
  po.capacity_bytes = (s.blocks + 8) * s.stride;
  KVTIER_ASSIGN_OR_RETURN(s.pool, BlockPool::Create(po));
  return s;
}

Result<std::unique_ptr<PrefixCache>> MakeCache(const Synth& s,
                                               const std::shared_ptr<SsdTier>& tier) {
  PrefixCacheOptions o;
  o.memory_budget_bytes = (s.blocks + 8) * s.stride;
  o.lower_tier = tier;
  return PrefixCache::Create(std::move(o));
}

// Quantizes random K/V into every entry's blocks and stores the entries in `cache`.
Status Fill(const Synth& s, PrefixCache& cache) {
  const size_t token_values = size_t(s.shape.n_kv_heads) * s.shape.head_dim;
  for (size_t e = 0; e < s.entries.size(); ++e) {
    const std::vector<int32_t>& t = s.entries[e];
    SequenceCache seq(s.pool);
    for (uint32_t l = 0; l < s.shape.n_layers; ++l) {
      const size_t ko = (e * 131 + l * 17) % kSourcePad, vo = (e * 71 + l * 29 + 5) % kSourcePad;
      KVTIER_RETURN_IF_ERROR(seq.Append(l, DType::kF16, s.source.data() + ko * token_values,
                                        s.source.data() + vo * token_values,
                                        static_cast<uint32_t>(t.size())));
    }
    KVTIER_ASSIGN_OR_RETURN(const PrefixStoreResult r,
                            cache.Store(kSynthModel, t, std::move(seq)));
    if (r.stored_tokens != t.size()) return Status::Internal("bench-ssd: an entry was not stored");
  }
  return Status::OK();
}

// One sequential write of `total` bytes to `path` in `chunk`-byte appends, one Sync at the end.
Result<double> PlainWrite(const std::string& path, uint64_t total, const std::vector<uint8_t>& chunk) {
  Env* env = Env::Default();
  Timer t;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env->NewWritableFile(path));
  for (uint64_t off = 0; off < total; off += chunk.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), total - off));
    KVTIER_RETURN_IF_ERROR(f->Append(std::span<const uint8_t>(chunk.data(), n)));
  }
  KVTIER_RETURN_IF_ERROR(f->Sync());
  KVTIER_RETURN_IF_ERROR(f->Close());
  return t.Millis();
}

// One sequential read of the whole file in `buf`-sized reads.
Result<double> PlainRead(const std::string& path, uint64_t total, std::vector<uint8_t>& buf) {
  Env* env = Env::Default();
  Timer t;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, env->NewRandomAccessFile(path));
  uint64_t off = 0;
  for (;;) {
    KVTIER_ASSIGN_OR_RETURN(const size_t n, f->Read(off, buf.size(), buf.data()));
    off += n;
    if (n < buf.size()) break;
  }
  const double ms = t.Millis();
  if (off != total) {
    return Status::Internal("bench-ssd: read " + std::to_string(off) + " of " +
                            std::to_string(total) + " bytes of " + path);
  }
  return ms;
}

// The same sequential read into `dst` (distinct memory of `total` bytes, pages touched
// before), `chunk` bytes at a time one after the other: what reload does to the pool.
Result<double> PlainReadInto(const std::string& path, uint64_t total, size_t chunk, uint8_t* dst) {
  Env* env = Env::Default();
  Timer t;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, env->NewRandomAccessFile(path));
  uint64_t off = 0;
  while (off < total) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk, total - off));
    KVTIER_ASSIGN_OR_RETURN(const size_t n, f->Read(off, want, dst + off));
    off += n;
    if (n < want) break;
  }
  const double ms = t.Millis();
  if (off != total) {
    return Status::Internal("bench-ssd: read " + std::to_string(off) + " of " +
                            std::to_string(total) + " bytes of " + path);
  }
  return ms;
}

struct ReloadTimes {
  double open_ms = 0, fetch_ms = 0;
  std::vector<double> load_us;  // [blocks] SsdTier::Load each
  double load_ms_sum = 0;
};

// Reopens the tier in `dir`, fetches every entry through a fresh cache (promotion), then
// times SsdTier::Load of every block into one scratch block (page cache state as it is).
Result<ReloadTimes> Reload(const Synth& s, const std::string& dir, const BenchSsdConfig& c,
                           bool cold) {
  ReloadTimes r;
  if (cold) DropPageCache(dir);
  Timer to;
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<SsdTier> tier, OpenBenchTier(dir, c));
  r.open_ms = to.Millis();
  if (tier->Stats().found_blocks != s.blocks) {
    return Status::Internal("bench-ssd: reopened tier found " +
                            std::to_string(tier->Stats().found_blocks) + " of " +
                            std::to_string(s.blocks) + " blocks");
  }
  {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<PrefixCache> cache, MakeCache(s, tier));
    Timer tf;
    for (const std::vector<int32_t>& t : s.entries) {
      KVTIER_ASSIGN_OR_RETURN(const PrefixFetchResult f, cache->Fetch(kSynthModel, t, s.pool));
      if (f.reused_tokens + 1 != t.size()) {
        return Status::Internal("bench-ssd: reload reused " + std::to_string(f.reused_tokens) +
                                " of " + std::to_string(t.size()) + " tokens");
      }
    }
    r.fetch_ms = tf.Millis();
    if (tier->Stats().loaded_bytes != s.total_bytes) {
      return Status::Internal("bench-ssd: reload read " +
                              std::to_string(tier->Stats().loaded_bytes) + " of " +
                              std::to_string(s.total_bytes) + " bytes");
    }
  }  // the promoted blocks go back to the pool here
  if (cold) DropPageCache(dir);
  const std::vector<TierNamespace> ns = tier->Namespaces(kSynthModel);
  if (ns.size() != 1) return Status::Internal("bench-ssd: expected one namespace on disk");
  std::vector<BlockId> scratch;
  KVTIER_RETURN_IF_ERROR(s.pool->Allocate(1, KvOwner::kTier, &scratch, "bench-ssd load"));
  Status st;
  for (const std::vector<int32_t>& t : s.entries) {
    for (const TierBlock& b : tier->FindChain(ns[0], t)) {
      Timer tl;
      st = tier->Load(ns[0], b.key, *s.pool, scratch[0]);
      const double ms = tl.Millis();
      if (!st.ok()) break;
      r.load_us.push_back(ms * 1e3);
      r.load_ms_sum += ms;
    }
    if (!st.ok()) break;
  }
  s.pool->Unref(scratch, KvOwner::kTier);
  KVTIER_RETURN_IF_ERROR(st);
  if (r.load_us.size() != s.blocks) return Status::Internal("bench-ssd: FindChain missed blocks");
  return r;
}

struct RepeatTimes {
  double fill_ms = 0, spill_ms = 0, write_ms = 0;
  double read_ms[2] = {0, 0}, read_pool_ms[2] = {0, 0}, resident[2] = {0, 0};
  ReloadTimes reload[2];
  SsdTierStats spill_stats;
};

Result<RepeatTimes> OneRepeat(const Synth& s, const BenchSsdConfig& c, const std::string& root,
                              int rep, std::vector<uint8_t>& buf, uint8_t* pool_like) {
  RepeatTimes rt;
  const std::string dir = root + "/tier" + std::to_string(rep);
  const std::string plain = root + "/plain" + std::to_string(rep) + ".bin";
  const bool ours_first = rep % 2 == 1;  // alternate which side goes first
  {
    KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<SsdTier> tier, OpenBenchTier(dir, c));
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<PrefixCache> cache, MakeCache(s, tier));
    Timer tf;
    KVTIER_RETURN_IF_ERROR(Fill(s, *cache));
    rt.fill_ms = tf.Millis();
    auto spill = [&]() -> Status {
      Timer t;
      cache->Evict(UINT64_MAX);
      tier->Flush();
      rt.spill_ms = t.Millis();
      return Status::OK();
    };
    auto write = [&]() -> Status {
      KVTIER_ASSIGN_OR_RETURN(rt.write_ms, PlainWrite(plain, s.total_bytes, buf));
      return Status::OK();
    };
    KVTIER_RETURN_IF_ERROR(ours_first ? spill() : write());
    KVTIER_RETURN_IF_ERROR(ours_first ? write() : spill());
    rt.spill_stats = tier->Stats();
    if (rt.spill_stats.spilled_blocks != s.blocks ||
        rt.spill_stats.spilled_bytes != s.total_bytes || rt.spill_stats.bytes < s.total_bytes) {
      return Status::Internal("bench-ssd: spilled " + std::to_string(rt.spill_stats.spilled_blocks) +
                              " of " + std::to_string(s.blocks) + " blocks (" +
                              std::to_string(rt.spill_stats.spilled_bytes) + " of " +
                              std::to_string(s.total_bytes) + " bytes)");
    }
  }  // cache and tier closed: the next opening is a restart
  for (int cold = 0; cold < (c.cold ? 2 : 1); ++cold) {
    if (cold) DropPageCache(plain);
    rt.resident[cold] = ResidentPct(plain);
    auto ours = [&]() -> Status {
      KVTIER_ASSIGN_OR_RETURN(rt.reload[cold], Reload(s, dir, c, cold != 0));
      return Status::OK();
    };
    auto theirs = [&]() -> Status {
      KVTIER_ASSIGN_OR_RETURN(rt.read_ms[cold], PlainRead(plain, s.total_bytes, buf));
      // The second baseline right after (warm: from the page cache; cold: dropped again).
      if (cold) DropPageCache(plain);
      KVTIER_ASSIGN_OR_RETURN(rt.read_pool_ms[cold],
                              PlainReadInto(plain, s.total_bytes, buf.size(), pool_like));
      return Status::OK();
    };
    KVTIER_RETURN_IF_ERROR(ours_first ? ours() : theirs());
    KVTIER_RETURN_IF_ERROR(ours_first ? theirs() : ours());
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::remove(plain, ec);
  return rt;
}

Result<BenchSsdThroughput> RunThroughput(const BenchSsdConfig& c, const std::string& root,
                                         const std::function<void()>& step) {
  KVTIER_ASSIGN_OR_RETURN(Synth s, MakeSynth(c));
  BenchSsdThroughput r;
  r.kv_type = ParseKvFormats("--kv-type", c.kv_type)->name;
  r.shape = std::to_string(c.layers) + " layers x " + std::to_string(c.kv_heads) +
            " KV heads x " + std::to_string(c.head_dim);
  r.block_tokens = s.bt;
  r.block_stride = s.stride;
  r.file_bytes_per_block = s.file_full;
  r.blocks = s.blocks;
  r.entries = s.entries.size();
  r.total_bytes = s.total_bytes;
  r.writer_threads = c.writer_threads > 0 ? c.writer_threads : SsdTierOptions{}.writer_threads;
  r.ssd_sync = c.ssd_sync.empty() ? SyncModeName(SsdTierOptions{}.sync_mode) : c.ssd_sync;
  r.ssd_layout = c.ssd_layout.empty() ? LayoutName(SsdTierOptions{}.layout) : c.ssd_layout;
  r.repeats = c.repeats;
  std::vector<uint8_t> buf(s.file_full);  // one block file's bytes: the baselines' I/O size
  std::mt19937_64 rng(c.seed + 1);
  for (uint8_t& b : buf) b = static_cast<uint8_t>(rng());
  // Distinct memory the size of all blocks' files, every page touched now (like a pool).
  std::vector<uint8_t> pool_like(s.total_bytes, 1);
  std::vector<RepeatTimes> reps;
  for (int rep = 0; rep < c.repeats; ++rep) {
    KVTIER_ASSIGN_OR_RETURN(RepeatTimes rt, OneRepeat(s, c, root, rep, buf, pool_like.data()));
    reps.push_back(std::move(rt));
    if (step) step();
  }
  auto med = [&](auto get) {
    std::vector<double> v;
    for (const RepeatTimes& rt : reps) v.push_back(get(rt));
    return Median(v);
  };
  r.fill_ms = med([](const RepeatTimes& t) { return t.fill_ms; });
  r.spill_ms = med([](const RepeatTimes& t) { return t.spill_ms; });
  r.write_ms = med([](const RepeatTimes& t) { return t.write_ms; });
  r.spill_gbps = Gbps(s.total_bytes, r.spill_ms);
  r.write_gbps = Gbps(s.total_bytes, r.write_ms);
  r.spill_ratio = r.write_gbps > 0 ? r.spill_gbps / r.write_gbps : 0.0;
  r.producer_waits = reps.back().spill_stats.producer_waits;
  for (uint64_t k : reps.back().spill_stats.skipped) r.skipped += k;
  for (int cold = 0; cold < (c.cold ? 2 : 1); ++cold) {
    BenchSsdRead rd;
    rd.page_cache = cold ? "cold" : "warm";
    rd.reload_ms = med([&](const RepeatTimes& t) { return t.reload[cold].fetch_ms; });
    rd.open_ms = med([&](const RepeatTimes& t) { return t.reload[cold].open_ms; });
    rd.read_ms = med([&](const RepeatTimes& t) { return t.read_ms[cold]; });
    rd.resident_pct = med([&](const RepeatTimes& t) { return t.resident[cold]; });
    rd.reload_gbps = Gbps(s.total_bytes, rd.reload_ms);
    rd.read_gbps = Gbps(s.total_bytes, rd.read_ms);
    rd.ratio = rd.read_gbps > 0 ? rd.reload_gbps / rd.read_gbps : 0.0;
    rd.read_pool_ms = med([&](const RepeatTimes& t) { return t.read_pool_ms[cold]; });
    rd.read_pool_gbps = Gbps(s.total_bytes, rd.read_pool_ms);
    rd.ratio_pool = rd.read_pool_gbps > 0 ? rd.reload_gbps / rd.read_pool_gbps : 0.0;
    rd.load_us_per_block = med([&](const RepeatTimes& t) { return Median(t.reload[cold].load_us); });
    rd.load_gbps = Gbps(s.total_bytes, med([&](const RepeatTimes& t) { return t.reload[cold].load_ms_sum; }));
    r.reads.push_back(rd);
  }
  return r;
}

Status CheckConfig(const BenchSsdConfig& c, bool* throughput, bool* ttft) {
  *throughput = *ttft = false;
  for (const std::string& m : SplitComma(c.modes)) {
    if (m == "throughput") {
      *throughput = true;
    } else if (m == "ttft") {
      *ttft = true;
    } else {
      return Status::InvalidArgument("--modes: expected 'throughput', 'ttft' or both, got '" + m + "'");
    }
  }
  if (!*throughput && !*ttft) return Status::InvalidArgument("--modes: no mode given");
  KVTIER_RETURN_IF_ERROR(ParseKvFormats("--kv-type", c.kv_type).status());
  KVTIER_RETURN_IF_ERROR(CheckRange("--layers", c.layers, 1, 1024));
  KVTIER_RETURN_IF_ERROR(CheckRange("--kv-heads", c.kv_heads, 1, 1024));
  KVTIER_RETURN_IF_ERROR(CheckRange("--head-dim", c.head_dim, 1, 1024));
  KVTIER_RETURN_IF_ERROR(CheckRange("--block-tokens", c.block_tokens, 1, 4096));
  if (!(c.gb > 0 && c.gb <= 1000)) {
    return Status::InvalidArgument(Printf("--gb: expected a size in (0, 1000] GB, got %g", c.gb));
  }
  if (!c.dir.empty() && !std::filesystem::is_directory(c.dir)) {
    return Status::InvalidArgument("--dir: expected an existing directory, got '" + c.dir + "'");
  }
  KVTIER_RETURN_IF_ERROR(CheckRange("--writer-threads", c.writer_threads, 0, 64));
  if (!c.ssd_sync.empty()) KVTIER_RETURN_IF_ERROR(ParseSyncMode(c.ssd_sync).status());
  if (!c.ssd_layout.empty()) KVTIER_RETURN_IF_ERROR(ParseLayout(c.ssd_layout).status());
  KVTIER_RETURN_IF_ERROR(CheckRange("--repeats", c.repeats, 1, 1000));
  KVTIER_RETURN_IF_ERROR(CheckRange("--prompt-tokens", c.prompt_tokens, 2, 1 << 20));
  KVTIER_RETURN_IF_ERROR(CheckRange("--new-tokens", c.new_tokens, 1, 4096));
  KVTIER_RETURN_IF_ERROR(CheckRange("--ubatch", c.ubatch, 1, 1 << 16));
  KVTIER_RETURN_IF_ERROR(CheckRange("--cold-repeats", c.cold_repeats, 1, 1000));
  return CheckRange("--threads", c.threads, 0, 1024);
}

}  // namespace

Result<BenchSsdReport> RunBenchSsd(const BenchSsdConfig& c,
                                   const std::function<void(int, int)>& progress) {
  bool throughput = false, ttft = false;
  KVTIER_RETURN_IF_ERROR(CheckConfig(c, &throughput, &ttft));
  KVTIER_ASSIGN_OR_RETURN(ssd_bench::ScratchDir root,
                          ssd_bench::ScratchDir::Create(c.dir.empty() ? "/tmp" : c.dir));
  BenchSsdReport r;
  r.dir = root.path();
  const int total = (throughput ? c.repeats : 0) + (ttft ? ssd_bench::TtftSteps(c) : 0);
  int done = 0;
  const std::function<void()> step = [&] {
    if (progress) progress(++done, total);
  };
  if (throughput) {
    KVTIER_ASSIGN_OR_RETURN(r.throughput, RunThroughput(c, root.path(), step));
    r.has_throughput = true;
  }
  if (ttft) {
    KVTIER_ASSIGN_OR_RETURN(r.ttft, ssd_bench::RunTtft(c, root.path(), step));
    r.has_ttft = true;
  }
  Result<uint64_t> rss = PeakRssBytes();
  r.peak_rss_bytes = rss.ok() ? *rss : 0;
  return r;
}

std::string FormatBenchSsdTable(const BenchSsdReport& r) {
  std::ostringstream o;
  if (r.has_throughput) {
    const BenchSsdThroughput& t = r.throughput;
    o << "throughput: " << t.blocks << " blocks of " << t.shape << ", " << t.block_tokens
      << " tokens, K/V " << t.kv_type << " (" << GroupDigits(t.file_bytes_per_block)
      << " B per block file), " << t.entries << " entries, " << DescribeBytes(t.total_bytes)
      << " per repeat; " << t.writer_threads << " writer threads, layout " << t.ssd_layout
      << ", sync " << t.ssd_sync << "; medians of " << t.repeats << "\n";
    // The tier's operation against plain sequential I/O of the same bytes.
    TextTable tt({"<SSD tier", "ms", "GB/s", "<plain file", "ms", "GB/s", "ratio", "<notes"});
    tt.Row({"spill (evict all + flush)", Printf("%.1f", t.spill_ms), Printf("%.3f", t.spill_gbps),
            "plain write + fdatasync", Printf("%.1f", t.write_ms), Printf("%.3f", t.write_gbps),
            Printf("%.1f%%", 100 * t.spill_ratio),
            Printf("fill %.0f ms, producer waits %llu, skipped %llu", t.fill_ms,
                   static_cast<unsigned long long>(t.producer_waits),
                   static_cast<unsigned long long>(t.skipped))});
    for (const BenchSsdRead& rd : t.reads) {
      tt.Row({"reload, page cache " + rd.page_cache, Printf("%.1f", rd.reload_ms),
              Printf("%.3f", rd.reload_gbps), "plain read", Printf("%.1f", rd.read_ms),
              Printf("%.3f", rd.read_gbps), Printf("%.1f%%", 100 * rd.ratio),
              Printf("open %.1f ms; Load %.0f us/block, %.3f GB/s; plain file %.0f%% resident "
                     "before",
                     rd.open_ms, rd.load_us_per_block, rd.load_gbps, rd.resident_pct)});
      tt.Row({"", "", "", "plain read into distinct memory", Printf("%.1f", rd.read_pool_ms),
              Printf("%.3f", rd.read_pool_gbps), Printf("%.1f%%", 100 * rd.ratio_pool)});
    }
    o << tt.Render();
  }
  if (r.has_ttft) {
    const BenchSsdTtft& t = r.ttft;
    if (r.has_throughput) o << "\n";
    o << "ttft: model " << t.model_name << " (" << t.arch << "), KV " << t.kv_type << ", "
      << t.threads << " threads; prompt " << t.prompt_tokens << " tokens: " << t.prompt_source
      << "\n";
    o << Printf(
        "cold prefill %.1f ms (median of %d); KV %s; spilled %llu blocks, %s in %.1f ms; "
        "warm rows: median of %d\n",
        t.cold_ms, t.cold_repeats, DescribeBytes(t.kv_bytes).c_str(),
        static_cast<unsigned long long>(t.spilled_blocks), DescribeBytes(t.spilled_bytes).c_str(),
        t.spill_ms, t.repeats);
    TextTable tt({"<scenario", "<pages", "<hit", "<kind", "request", "reused", "TTFT ms",
                  "fetch ms", "compute ms", "speedup", "read MiB", "read GB/s", "open ms"});
    for (const BenchSsdTtftRow& w : t.rows) {
      tt.Row({w.scenario, w.page_cache, w.hit, w.kind, std::to_string(w.request_tokens),
              std::to_string(w.reused_tokens), Printf("%.1f", w.ttft_ms),
              Printf("%.1f", w.fetch_ms), Printf("%.1f", w.compute_ms), Printf("%.1fx", w.speedup),
              Printf("%.1f", double(w.bytes_read) / (1 << 20)), Printf("%.3f", w.read_gbps),
              Printf("%.1f", w.open_ms)});
    }
    o << tt.Render();
  }
  o << "files in " << r.dir << " (removed); peak RSS " << DescribeBytes(r.peak_rss_bytes) << "\n";
  return o.str();
}

std::string FormatBenchSsdJson(const BenchSsdReport& r) {
  nlohmann::json j;
  j["dir"] = r.dir;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  if (r.has_throughput) {
    const BenchSsdThroughput& t = r.throughput;
    nlohmann::json tj = {{"kv_type", t.kv_type},
                         {"shape", t.shape},
                         {"block_tokens", t.block_tokens},
                         {"block_stride", t.block_stride},
                         {"file_bytes_per_block", t.file_bytes_per_block},
                         {"blocks", t.blocks},
                         {"entries", t.entries},
                         {"total_bytes", t.total_bytes},
                         {"writer_threads", t.writer_threads},
                         {"ssd_sync", t.ssd_sync},
                         {"ssd_layout", t.ssd_layout},
                         {"repeats", t.repeats},
                         {"fill_ms", t.fill_ms},
                         {"spill_ms", t.spill_ms},
                         {"spill_gbps", t.spill_gbps},
                         {"write_ms", t.write_ms},
                         {"write_gbps", t.write_gbps},
                         {"spill_ratio", t.spill_ratio},
                         {"producer_waits", t.producer_waits},
                         {"skipped", t.skipped},
                         {"reads", nlohmann::json::array()}};
    for (const BenchSsdRead& rd : t.reads) {
      tj["reads"].push_back({{"page_cache", rd.page_cache},
                             {"reload_ms", rd.reload_ms},
                             {"reload_gbps", rd.reload_gbps},
                             {"open_ms", rd.open_ms},
                             {"read_ms", rd.read_ms},
                             {"read_gbps", rd.read_gbps},
                             {"ratio", rd.ratio},
                             {"read_pool_ms", rd.read_pool_ms},
                             {"read_pool_gbps", rd.read_pool_gbps},
                             {"ratio_pool", rd.ratio_pool},
                             {"load_us_per_block", rd.load_us_per_block},
                             {"load_gbps", rd.load_gbps},
                             {"resident_pct", rd.resident_pct}});
    }
    j["throughput"] = std::move(tj);
  }
  if (r.has_ttft) {
    const BenchSsdTtft& t = r.ttft;
    nlohmann::json tj = {{"model", t.model_name},
                         {"arch", t.arch},
                         {"kv_type", t.kv_type},
                         {"prompt_source", t.prompt_source},
                         {"prompt_tokens", t.prompt_tokens},
                         {"new_tokens", t.new_tokens},
                         {"threads", t.threads},
                         {"repeats", t.repeats},
                         {"cold_repeats", t.cold_repeats},
                         {"cold_ms", t.cold_ms},
                         {"kv_bytes", t.kv_bytes},
                         {"spill_ms", t.spill_ms},
                         {"spilled_blocks", t.spilled_blocks},
                         {"spilled_bytes", t.spilled_bytes},
                         {"rows", nlohmann::json::array()}};
    for (const BenchSsdTtftRow& w : t.rows) {
      tj["rows"].push_back({{"scenario", w.scenario},
                            {"page_cache", w.page_cache},
                            {"hit", w.hit},
                            {"kind", w.kind},
                            {"request_tokens", w.request_tokens},
                            {"reused_tokens", w.reused_tokens},
                            {"ttft_ms", w.ttft_ms},
                            {"fetch_ms", w.fetch_ms},
                            {"compute_ms", w.compute_ms},
                            {"open_ms", w.open_ms},
                            {"speedup", w.speedup},
                            {"bytes_read", w.bytes_read},
                            {"read_gbps", w.read_gbps}});
    }
    j["ttft"] = std::move(tj);
  }
  return JsonText(j);
}

}  // namespace kvtier::cli
