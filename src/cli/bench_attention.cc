// `kvtier-bench attention` (see the header).
#include "cli/bench_attention.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "base/dtype_io.h"
#include "base/stats.h"
#include "base/strings.h"
#include "kvtier/thread_pool.h"
#include "base/timer.h"
#include "cli/bench_report.h"
#include "cli/flags.h"
#include "kernels/probe.h"
#include "kvtier/attention.h"
#include "kvtier/batch_cache.h"

namespace kvtier::cli {
namespace {

constexpr uint32_t kFillChunk = 512;

struct Plan {
  std::vector<uint32_t> ctx, prefill_ctx, batches;
  bool decode = false, prefill = false;
  std::vector<KvFormats> formats;
};

Result<Plan> Validate(const BenchAttentionConfig& c) {
  KVTIER_RETURN_IF_ERROR(CheckRange("--kv-heads", c.kv_heads, 1, 256));
  KVTIER_RETURN_IF_ERROR(CheckRange("--heads", c.heads, 1, 4096));
  if (c.heads % c.kv_heads != 0) {
    return Status::InvalidArgument("--heads " + std::to_string(c.heads) +
                                   " must be a multiple of --kv-heads " +
                                   std::to_string(c.kv_heads));
  }
  KVTIER_RETURN_IF_ERROR(CheckRange("--head-dim", c.head_dim, 1, 4096));
  KVTIER_RETURN_IF_ERROR(CheckRange("--block-tokens", c.block_tokens, 1, 4096));
  KVTIER_RETURN_IF_ERROR(CheckRange("--repeats", c.repeats, 1, 1000));
  KVTIER_RETURN_IF_ERROR(CheckRange("--threads", c.threads, 0, 1024));
  KVTIER_RETURN_IF_ERROR(CheckRange("--prefill-chunk", c.prefill_chunk, 1, 1 << 16));
  Plan p;
  for (const std::string& m : SplitComma(c.modes)) {
    if (m == "decode") {
      p.decode = true;
    } else if (m == "prefill") {
      p.prefill = true;
    } else {
      return Status::InvalidArgument("--modes: '" + m + "' unknown: expected decode, prefill");
    }
  }
  if (!p.decode && !p.prefill) return Status::InvalidArgument("--modes: nothing to run");
  if (p.decode) {
    KVTIER_ASSIGN_OR_RETURN(p.ctx, ParseUintList("--ctx", c.ctx, 1, 1 << 22));
    KVTIER_ASSIGN_OR_RETURN(p.batches, ParseUintList("--batch", c.batches, 1, 256));
  }
  if (p.prefill) {
    KVTIER_ASSIGN_OR_RETURN(p.prefill_ctx, ParseUintList("--prefill-ctx", c.prefill_ctx,
                                                         static_cast<uint64_t>(c.prefill_chunk),
                                                         1 << 22));
  }
  for (const std::string& f : SplitComma(c.formats)) {
    KVTIER_ASSIGN_OR_RETURN(KvFormats kvf, ParseKvFormats("--kv-type", f));
    p.formats.push_back(kvf);
  }
  if (p.formats.empty()) return Status::InvalidArgument("--kv-type: no format given");
  return p;
}

}  // namespace

Result<BenchAttentionReport> RunBenchAttention(const BenchAttentionConfig& config,
                                               const std::function<void(int, int)>& progress) {
  KVTIER_ASSIGN_OR_RETURN(Plan plan, Validate(config));
  const KvShape shape{1, static_cast<uint32_t>(config.kv_heads),
                      static_cast<uint32_t>(config.head_dim)};
  const uint32_t max_batch = plan.decode ? *std::max_element(plan.batches.begin(), plan.batches.end()) : 1;
  uint32_t max_ctx = 0;
  for (uint32_t c : plan.ctx) max_ctx = std::max(max_ctx, c);
  for (uint32_t c : plan.prefill_ctx) max_ctx = std::max(max_ctx, c);

  ThreadPool pool(config.threads);
  BenchAttentionReport report;
  report.config = config;
  report.threads = pool.num_threads();
  report.simd_target = AttentionSimdTargetName();

  // Seeded normal K/V and queries.
  std::mt19937_64 rng(config.seed);
  std::normal_distribution<float> nd;
  const size_t token_values = size_t{shape.n_kv_heads} * shape.head_dim;
  std::vector<float> kdata(kFillChunk * token_values), vdata(kdata.size());
  for (float& x : kdata) x = nd(rng);
  for (float& x : vdata) x = nd(rng);
  const uint32_t n_heads = static_cast<uint32_t>(config.heads);
  const uint32_t max_q = std::max<uint32_t>(max_batch, static_cast<uint32_t>(config.prefill_chunk));
  std::vector<float> q(size_t{max_q} * n_heads * shape.head_dim);
  for (float& x : q) x = nd(rng);
  std::vector<float> out(q.size());

  // Every configuration is built first; then each round times every one of them once (and the
  // probes), so a noisy neighbour slows all of them alike and medians stay comparable.
  struct Config {
    BenchAttentionRow row;
    BatchCache batch;
    PagedKvView view;
    std::vector<uint32_t> q_lens;
    std::vector<double> times;
    double flops = 0;
  };
  std::vector<std::unique_ptr<Config>> configs;
  std::vector<std::shared_ptr<BlockPool>> pools;
  const int total = static_cast<int>(plan.formats.size()) + config.repeats;
  int done = 0;
  for (const KvFormats& f : plan.formats) {
    BlockPoolOptions o;
    o.shape = shape;
    o.k_format = f.k;
    o.v_format = f.v;
    o.block_tokens = static_cast<uint32_t>(config.block_tokens);
    Result<KvBlockLayout> layout = KvBlockLayout::Make(shape, f.k, f.v, o.block_tokens);
    if (!layout.ok()) return Status::InvalidArgument("--kv-type " + f.name + ": " + layout.status().message());
    o.capacity_bytes = (uint64_t{max_batch} * ((max_ctx + o.block_tokens - 1) / o.block_tokens) +
                        4 * max_batch + 8) * layout->block_stride;
    KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<BlockPool> kv_pool, BlockPool::Create(o));
    pools.push_back(kv_pool);
    // Fill the longest rows once; every context is a trimmed fork of them.
    std::vector<SequenceCache> base;
    for (uint32_t b = 0; b < max_batch; ++b) {
      base.emplace_back(kv_pool);
      for (uint32_t t = 0; t < max_ctx; t += kFillChunk) {
        const uint32_t n = std::min(kFillChunk, max_ctx - t);
        KVTIER_RETURN_IF_ERROR(base.back().Append(0, DType::kF32, kdata.data(), vdata.data(), n));
      }
    }
    auto add = [&](const char* mode, uint32_t ctx, uint32_t batch, uint32_t nq) -> Status {
      std::vector<SequenceCache> rows;
      for (uint32_t b = 0; b < batch; ++b) {
        SequenceCache s = base[b].Fork();
        KVTIER_RETURN_IF_ERROR(s.Trim(max_ctx - ctx).status());
        rows.push_back(std::move(s));
      }
      KVTIER_ASSIGN_OR_RETURN(BatchCache bc, BatchCache::Merge(std::move(rows)));
      auto c = std::make_unique<Config>(Config{{}, std::move(bc), {}, {}, {}, 0});
      KVTIER_ASSIGN_OR_RETURN(c->view, c->batch.View(0));
      c->q_lens.assign(batch, nq);
      BenchAttentionRow& row = c->row;
      row.mode = mode;
      row.ctx = ctx;
      row.batch = batch;
      row.queries = nq;
      row.k_format = f.k.spec();
      row.v_format = f.v.spec();
      row.kv_bytes = uint64_t{batch} * ctx * shape.n_kv_heads * (layout->k_row_bytes + layout->v_row_bytes);
      // Visible keys: query i of nq at position ctx - nq + i sees ctx - nq + i + 1 keys.
      const double keys = static_cast<double>(batch) * (static_cast<double>(nq) * (ctx - nq) +
                                                        static_cast<double>(nq) * (nq + 1) / 2);
      c->flops = 4.0 * n_heads * shape.head_dim * keys;
      configs.push_back(std::move(c));
      return Status::OK();
    };
    if (plan.decode) {
      for (uint32_t ctx : plan.ctx) {
        for (uint32_t b : plan.batches) KVTIER_RETURN_IF_ERROR(add("decode", ctx, b, 1));
      }
    }
    if (plan.prefill) {
      for (uint32_t ctx : plan.prefill_ctx) {
        KVTIER_RETURN_IF_ERROR(add("prefill", ctx, 1, static_cast<uint32_t>(config.prefill_chunk)));
      }
    }
    if (progress) progress(++done, total);
  }
  AttentionParams p;
  p.n_heads = n_heads;
  for (auto& c : configs) {  // warm-up
    KVTIER_RETURN_IF_ERROR(Attention(c->view, q.data(), c->q_lens, p, out.data(), &pool));
  }
  std::vector<double> memcpy_runs, read_runs;
  for (int r = 0; r < config.repeats; ++r) {
    memcpy_runs.push_back(MemcpyProbeGbps(pool, size_t{256} << 20, 1));
    read_runs.push_back(ReadProbeGbps(pool, size_t{512} << 20, 1));
    for (auto& c : configs) {
      Timer timer;
      KVTIER_RETURN_IF_ERROR(Attention(c->view, q.data(), c->q_lens, p, out.data(), &pool));
      c->times.push_back(timer.Millis());
    }
    if (progress) progress(++done, total);
  }
  report.memcpy_gbps = Median(memcpy_runs);
  report.read_gbps = Median(read_runs);
  report.peak_gflops = PeakFmaGflops(pool);
  std::map<std::string, double> f16_ms;  // "mode/ctx/batch" -> ms
  for (auto& c : configs) {
    BenchAttentionRow& row = c->row;
    row.ms = Median(c->times);
    row.gbps = static_cast<double>(row.kv_bytes) / (row.ms * 1e-3) / 1e9;
    row.gflops = c->flops / (row.ms * 1e-3) / 1e9;
    // Roofline floor in ms at a bandwidth: the bytes' time or the FLOPs' time at the peak.
    const auto floor_ms = [&](double gbps) {
      return std::max(static_cast<double>(row.kv_bytes) / (gbps * 1e9),
                      c->flops / (report.peak_gflops * 1e9)) * 1e3;
    };
    row.floor_ms = floor_ms(report.memcpy_gbps);
    row.vs_floor = row.ms / row.floor_ms;
    row.read_floor_ms = floor_ms(report.read_gbps);
    row.vs_read_floor = row.ms / row.read_floor_ms;
    if (row.k_format == "f16" && row.v_format == "f16") {
      f16_ms[row.mode + "/" + std::to_string(row.ctx) + "/" + std::to_string(row.batch)] = row.ms;
    }
  }
  for (auto& c : configs) {
    BenchAttentionRow& r = c->row;
    auto it = f16_ms.find(r.mode + "/" + std::to_string(r.ctx) + "/" + std::to_string(r.batch));
    r.speedup_vs_f16 = it == f16_ms.end() ? 0.0 : it->second / r.ms;
    report.rows.push_back(r);
  }
  // Order: mode (decode first), ctx, batch, then formats in the order given.
  std::stable_sort(report.rows.begin(), report.rows.end(), [](const auto& a, const auto& b) {
    return std::tie(a.mode, a.ctx, a.batch) < std::tie(b.mode, b.ctx, b.batch);
  });
  return report;
}

std::string FormatBenchAttentionTable(const BenchAttentionReport& r) {
  const BenchAttentionConfig& c = r.config;
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "bench-attention: %d query / %d KV heads x head_dim %d, %d-token blocks, SIMD %s, "
                "%d threads, median of %d\nmemcpy probe %.1f GB/s (read + write), read probe "
                "%.1f GB/s, FMA peak %.1f GFLOP/s\nfloor: max(KV bytes / memcpy GB/s, FLOPs / "
                "peak); x read: the same with the read probe's GB/s\n\n",
                c.heads, c.kv_heads, c.head_dim, c.block_tokens, r.simd_target.c_str(), r.threads,
                c.repeats, r.memcpy_gbps, r.read_gbps, r.peak_gflops);
  out += line;
  TextTable t({"<mode", "ctx", "batch", "<K/V", "ms", "KV MiB", "GB/s", "GFLOP/s", "floor ms",
               "x floor", "x read", "vs f16"});
  for (const BenchAttentionRow& row : r.rows) {
    const std::string kvname =
        row.k_format == row.v_format ? row.k_format : row.k_format + "/" + row.v_format;
    t.Row({row.mode, std::to_string(row.ctx), std::to_string(row.batch), kvname,
           Printf("%.3f", row.ms), Printf("%.1f", static_cast<double>(row.kv_bytes) / (1 << 20)),
           Printf("%.1f", row.gbps), Printf("%.1f", row.gflops), Printf("%.3f", row.floor_ms),
           Printf("%.2f", row.vs_floor), Printf("%.2f", row.vs_read_floor),
           Printf("%.2fx", row.speedup_vs_f16)});
  }
  return out + t.Render();
}

std::string FormatBenchAttentionJson(const BenchAttentionReport& r) {
  const BenchAttentionConfig& c = r.config;
  nlohmann::json j;
  j["config"] = {{"ctx", c.ctx},         {"prefill_ctx", c.prefill_ctx},
                 {"batches", c.batches}, {"modes", c.modes},
                 {"prefill_chunk", c.prefill_chunk},
                 {"heads", c.heads},     {"kv_heads", c.kv_heads},
                 {"head_dim", c.head_dim}, {"block_tokens", c.block_tokens},
                 {"formats", c.formats}, {"repeats", c.repeats},
                 {"threads", r.threads}, {"seed", c.seed},
                 {"simd_target", r.simd_target}};
  j["memcpy_gbps"] = r.memcpy_gbps;
  j["read_gbps"] = r.read_gbps;
  j["peak_gflops"] = r.peak_gflops;
  j["rows"] = nlohmann::json::array();
  for (const BenchAttentionRow& row : r.rows) {
    j["rows"].push_back({{"mode", row.mode},
                         {"ctx", row.ctx},
                         {"batch", row.batch},
                         {"queries", row.queries},
                         {"k_format", row.k_format},
                         {"v_format", row.v_format},
                         {"ms", row.ms},
                         {"kv_bytes", row.kv_bytes},
                         {"gbps", row.gbps},
                         {"gflops", row.gflops},
                         {"floor_ms", row.floor_ms},
                         {"vs_floor", row.vs_floor},
                         {"read_floor_ms", row.read_floor_ms},
                         {"vs_read_floor", row.vs_read_floor},
                         {"speedup_vs_f16", row.speedup_vs_f16}});
  }
  return JsonText(j, /*pretty=*/true);
}

}  // namespace kvtier::cli
