// `kvtier-bench kv-paged` (see the header). Builds its own pools and thread pool; one call at
// a time.
#include "cli/bench_kv_paged.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "base/dtype_io.h"
#include "base/stats.h"
#include "base/strings.h"
#include "base/sysinfo.h"
#include "kvtier/thread_pool.h"
#include "base/timer.h"
#include "cli/bench_report.h"
#include "cli/flags.h"
#include "kvtier/batch_cache.h"
#include "kvtier/quant.h"

namespace kvtier::cli {
namespace {

constexpr uint32_t kFillChunk = 256;  // tokens appended per call while filling
constexpr uint32_t kRowStep = 3;      // row i holds context - 3 * i tokens (ragged tails)

Status Validate(const BenchKvPagedConfig& c, std::vector<uint32_t>* contexts) {
  KVTIER_RETURN_IF_ERROR(CheckRange("--layers", c.layers, 1, 1024));
  KVTIER_RETURN_IF_ERROR(CheckRange("--kv-heads", c.kv_heads, 1, 1024));
  KVTIER_RETURN_IF_ERROR(CheckRange("--head-dim", c.head_dim, 1, 4096));
  KVTIER_RETURN_IF_ERROR(CheckRange("--block-tokens", c.block_tokens, 1, 4096));
  KVTIER_RETURN_IF_ERROR(CheckRange("--rows", c.rows, 2, 4096));
  KVTIER_RETURN_IF_ERROR(CheckRange("--repeats", c.repeats, 1, 1000));
  KVTIER_RETURN_IF_ERROR(CheckRange("--threads", c.threads, 0, 1024));
  KVTIER_ASSIGN_OR_RETURN(*contexts, ParseUintList("--contexts", c.contexts,
                                                   uint64_t{kRowStep} * c.rows, 1 << 24));
  return Status::OK();
}

// Seeded normal values in f16: [n_tokens, heads, head_dim].
std::vector<uint8_t> NormalF16(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint8_t> out(n * 2);
  for (size_t i = 0; i < n; ++i) StoreAs(DType::kF16, out.data(), i, nd(rng));
  return out;
}

uint64_t BlockBytes(const KvBlockLayout& l, uint64_t rows, uint64_t tokens) {
  return rows * ((tokens + l.block_tokens - 1) / l.block_tokens) * l.block_stride;
}

}  // namespace

Result<BenchKvPagedReport> RunBenchKvPaged(const BenchKvPagedConfig& config,
                                           const std::function<void(int, int)>& progress) {
  std::vector<uint32_t> contexts;
  KVTIER_RETURN_IF_ERROR(Validate(config, &contexts));
  const KvShape shape{static_cast<uint32_t>(config.layers), static_cast<uint32_t>(config.kv_heads),
                      static_cast<uint32_t>(config.head_dim)};
  const uint32_t bt = static_cast<uint32_t>(config.block_tokens);
  const uint32_t rows = static_cast<uint32_t>(config.rows);
  const uint32_t max_ctx = *std::max_element(contexts.begin(), contexts.end());

  BenchKvPagedReport report;
  report.config = config;
  report.simd_target = QuantSimdTargetName();

  // Bytes per token of every format.
  const uint64_t f16_bpt = KvBytesPerToken(shape, Format::F16(), Format::F16());
  for (const std::string& item : SplitComma(config.formats)) {
    KVTIER_ASSIGN_OR_RETURN(KvFormats f, ParseKvFormats("--kv-type", item));
    Result<KvBlockLayout> l = KvBlockLayout::Make(shape, f.k, f.v, bt);
    if (!l.ok()) return Status::InvalidArgument("--kv-type " + item + ": " + l.status().message());
    BenchKvPagedFormat row;
    row.name = f.name;
    row.k_spec = f.k.spec();
    row.v_spec = f.v.spec();
    row.bits_per_value = (f.k.bits_per_value() + f.v.bits_per_value()) / 2;
    row.bytes_per_token = KvBytesPerToken(shape, f.k, f.v);
    row.vs_f16 = static_cast<double>(f16_bpt) / static_cast<double>(row.bytes_per_token);
    row.block_bytes = l->block_stride;
    row.batch_bytes = BlockBytes(*l, rows, max_ctx);
    report.formats.push_back(row);
  }

  // The cache the operations run on.
  KVTIER_ASSIGN_OR_RETURN(KvFormats of, ParseKvFormats("--timed-kv-type", config.ops_format));
  report.ops_format = of.name;
  Result<KvBlockLayout> layout = KvBlockLayout::Make(shape, of.k, of.v, bt);
  if (!layout.ok()) return Status::InvalidArgument("--timed-kv-type: " + layout.status().message());
  const uint64_t extra_blocks = 4ull * rows + 8;  // forks' copied tails
  const uint64_t capacity = BlockBytes(*layout, rows, max_ctx) + extra_blocks * layout->block_stride;
  Result<uint64_t> ram = TotalRamBytes();
  if (ram.ok() && capacity > *ram / 10 * 8) {
    return Status::ResourceExhausted(
        "--rows " + std::to_string(rows) + " x --contexts " + std::to_string(max_ctx) + " in " +
        of.name + " needs " + DescribeBytes(capacity) + " of KV cache; this machine has " +
        DescribeBytes(*ram) + " of RAM: lower --contexts or --rows, or pick a smaller --timed-kv-type");
  }
  BlockPoolOptions po;
  po.shape = shape;
  po.k_format = of.k;
  po.v_format = of.v;
  po.block_tokens = bt;
  po.capacity_bytes = capacity;
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<BlockPool> pool, BlockPool::Create(po));

  ThreadPool threads(config.threads);
  report.threads = threads.num_threads();
  const size_t chunk_values = size_t{kFillChunk} * shape.n_kv_heads * shape.head_dim;
  const std::vector<uint8_t> k_data = NormalF16(chunk_values, config.seed * 2 + 1);
  const std::vector<uint8_t> v_data = NormalF16(chunk_values, config.seed * 2 + 2);
  const int total_steps = static_cast<int>(contexts.size()) * 2;
  int step = 0;

  for (uint32_t ctx : contexts) {
    // Fill: every row, a forward pass per chunk (all layers), rows in parallel.
    std::vector<SequenceCache> base;
    for (uint32_t i = 0; i < rows; ++i) base.emplace_back(pool);
    std::vector<Status> errors(rows);
    Timer fill;
    threads.ParallelFor(rows, 1, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        const uint32_t len = ctx - kRowStep * static_cast<uint32_t>(i);
        for (uint32_t t = 0; t < len && errors[i].ok(); t += kFillChunk) {
          const uint32_t n = std::min(kFillChunk, len - t);
          for (uint32_t l = 0; l < shape.n_layers && errors[i].ok(); ++l) {
            errors[i] = base[i].Append(l, DType::kF16, k_data.data(), v_data.data(), n);
          }
        }
      }
    });
    BenchKvPagedOps ops;
    ops.context = ctx;
    ops.fill_s = fill.Seconds();
    for (const Status& s : errors) KVTIER_RETURN_IF_ERROR(s);
    uint64_t tokens = 0;
    for (const SequenceCache& s : base) tokens += s.size();
    ops.fill_tokens_per_s = static_cast<double>(tokens) / ops.fill_s;
    ops.kv_bytes = pool->Stats().bytes_in_use;
    if (progress) progress(++step, total_steps);

    std::vector<double> t_merge, t_extract, t_filter, t_extend, t_fork;
    auto copied = [&] { return pool->Stats().copied_bytes; };
    auto forks = [&](uint32_t from, uint32_t to) {
      std::vector<SequenceCache> f;
      for (uint32_t i = from; i < to; ++i) f.push_back(base[i].Fork());
      return f;
    };
    std::vector<size_t> half;
    for (uint32_t i = rows; i-- > 0;) {
      if (i % 2 == 1) half.push_back(i);
    }
    const size_t one_token = size_t{shape.n_kv_heads} * shape.head_dim;
    for (int r = 0; r < config.repeats; ++r) {
      std::vector<SequenceCache> f = forks(0, rows);
      uint64_t c0 = copied();
      Timer t;
      Result<BatchCache> batch = BatchCache::Merge(std::move(f));
      t_merge.push_back(t.Seconds() * 1e6);
      KVTIER_RETURN_IF_ERROR(batch.status());
      ops.merge_copied += copied() - c0;

      std::vector<SequenceCache> extracted;
      extracted.reserve(rows);
      c0 = copied();
      t.Reset();
      for (uint32_t i = 0; i < rows; ++i) {
        Result<SequenceCache> x = batch->Extract(i);
        KVTIER_RETURN_IF_ERROR(x.status());
        extracted.push_back(std::move(*x));
      }
      t_extract.push_back(t.Seconds() * 1e6);
      ops.extract_copied += copied() - c0;

      c0 = copied();
      t.Reset();
      KVTIER_RETURN_IF_ERROR(batch->Filter(half));
      t_filter.push_back(t.Seconds() * 1e6);
      ops.filter_copied += copied() - c0;

      Result<BatchCache> b1 = BatchCache::Merge(forks(0, rows / 2));
      Result<BatchCache> b2 = BatchCache::Merge(forks(rows / 2, rows));
      KVTIER_RETURN_IF_ERROR(b1.status());
      KVTIER_RETURN_IF_ERROR(b2.status());
      c0 = copied();
      t.Reset();
      KVTIER_RETURN_IF_ERROR(b1->Extend(std::move(*b2)));
      t_extend.push_back(t.Seconds() * 1e6);
      ops.extend_copied += copied() - c0;

      // A decode step on an extracted row: its table and its partly filled tail are shared.
      SequenceCache& x = extracted[static_cast<size_t>(r) % rows];
      c0 = copied();
      t.Reset();
      for (uint32_t l = 0; l < shape.n_layers; ++l) {
        KVTIER_RETURN_IF_ERROR(x.Append(l, DType::kF16, k_data.data(), v_data.data() + one_token, 1));
      }
      t_fork.push_back(t.Seconds() * 1e6);
      ops.fork_append_copied += copied() - c0;
    }
    const uint64_t reps = static_cast<uint64_t>(config.repeats);
    ops.merge_copied /= reps;
    ops.extract_copied /= reps;
    ops.filter_copied /= reps;
    ops.extend_copied /= reps;
    ops.fork_append_copied /= reps;
    ops.merge_us = Median(t_merge);
    ops.extract_us = Median(t_extract);
    ops.filter_us = Median(t_filter);
    ops.extend_us = Median(t_extend);
    ops.fork_append_us = Median(t_fork);
    report.ops.push_back(ops);
    if (progress) progress(++step, total_steps);
  }
  Result<uint64_t> peak = PeakRssBytes();
  report.peak_rss_bytes = peak.ok() ? *peak : 0;
  return report;
}

std::string FormatBenchKvPagedTable(const BenchKvPagedReport& r) {
  const BenchKvPagedConfig& c = r.config;
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "kvtier-bench kv-paged: %d layers x %d KV heads x head_dim %d, %d-token blocks, "
                "source f16, SIMD %s, %d threads, median of %d\n\n",
                c.layers, c.kv_heads, c.head_dim, c.block_tokens, r.simd_target.c_str(),
                r.threads, c.repeats);
  out += line;
  TextTable ft({"<format", "bits/value", "bytes/token", "vs f16", "block bytes",
                std::to_string(c.rows) + " rows x " +
                    std::to_string(r.ops.empty() ? 0 : r.ops.back().context)});
  for (const BenchKvPagedFormat& f : r.formats) {
    ft.Row({f.name, Printf("%.2f", f.bits_per_value), GroupDigits(f.bytes_per_token),
            Printf("%.2fx", f.vs_f16), GroupDigits(f.block_bytes),
            Printf("%.2f GiB", static_cast<double>(f.batch_bytes) / (1ull << 30))});
  }
  out += ft.Render();
  std::snprintf(line, sizeof line,
                "\nbatch operations on %d rows of %s (row i holds context - %u*i tokens); "
                "median microseconds [K/V bytes copied]\n",
                c.rows, r.ops_format.c_str(), kRowStep);
  out += line;
  TextTable ot({"context", "fill s", "fill tok/s", "KV GiB", "merge", "extract all",
                "filter half", "extend", "fork + 1st append"});
  for (const BenchKvPagedOps& o : r.ops) {
    auto cell = [](double us, uint64_t copied) {
      return Printf("%.1f [%s]", us, GroupDigits(copied).c_str());
    };
    ot.Row({std::to_string(o.context), Printf("%.2f", o.fill_s),
            Printf("%.0f", o.fill_tokens_per_s),
            Printf("%.2f", static_cast<double>(o.kv_bytes) / (1ull << 30)),
            cell(o.merge_us, o.merge_copied), cell(o.extract_us, o.extract_copied),
            cell(o.filter_us, o.filter_copied), cell(o.extend_us, o.extend_copied),
            cell(o.fork_append_us, o.fork_append_copied)});
  }
  out += ot.Render();
  std::snprintf(line, sizeof line, "\npeak RSS: %.2f GiB\n",
                static_cast<double>(r.peak_rss_bytes) / (1ull << 30));
  out += line;
  return out;
}

std::string FormatBenchKvPagedJson(const BenchKvPagedReport& r) {
  const BenchKvPagedConfig& c = r.config;
  nlohmann::json j;
  j["config"] = {{"layers", c.layers},         {"kv_heads", c.kv_heads},
                 {"head_dim", c.head_dim},     {"block_tokens", c.block_tokens},
                 {"formats", c.formats},       {"ops_format", c.ops_format},
                 {"rows", c.rows},             {"contexts", c.contexts},
                 {"repeats", c.repeats},       {"threads", r.threads},
                 {"seed", c.seed},             {"simd_target", r.simd_target}};
  j["formats"] = nlohmann::json::array();
  for (const BenchKvPagedFormat& f : r.formats) {
    j["formats"].push_back({{"format", f.name},
                            {"k_format", f.k_spec},
                            {"v_format", f.v_spec},
                            {"bits_per_value", f.bits_per_value},
                            {"bytes_per_token", f.bytes_per_token},
                            {"vs_f16", f.vs_f16},
                            {"block_bytes", f.block_bytes},
                            {"batch_bytes", f.batch_bytes}});
  }
  j["ops"] = nlohmann::json::array();
  for (const BenchKvPagedOps& o : r.ops) {
    j["ops"].push_back({{"context", o.context},
                        {"fill_s", o.fill_s},
                        {"fill_tokens_per_s", o.fill_tokens_per_s},
                        {"kv_bytes", o.kv_bytes},
                        {"merge_us", o.merge_us},
                        {"extract_us", o.extract_us},
                        {"filter_us", o.filter_us},
                        {"extend_us", o.extend_us},
                        {"fork_append_us", o.fork_append_us},
                        {"merge_copied_bytes", o.merge_copied},
                        {"extract_copied_bytes", o.extract_copied},
                        {"filter_copied_bytes", o.filter_copied},
                        {"extend_copied_bytes", o.extend_copied},
                        {"fork_append_copied_bytes", o.fork_append_copied}});
  }
  j["ops_format"] = r.ops_format;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  return JsonText(j, /*pretty=*/true);
}

}  // namespace kvtier::cli
