// kvtier-bench kv-cache implementation. See bench_kv_cache.h for the contract.
#include "cli/bench_kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <mutex>
#include <sstream>

#include "base/aligned_buffer.h"
#include "base/dtype_io.h"
#include "base/stats.h"
#include "base/sysinfo.h"
#include "kvtier/thread_pool.h"
#include "base/timer.h"
#include "cli/bench_report.h"
#include "kvtier/quant.h"
#include "kvtier/quant_chan.h"

namespace kvtier::cli {
namespace {

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256** seeded by SplitMix64: fast, deterministic on every machine.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& s : s_) s = SplitMix64(seed);
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in (0, 1].
  double Uniform() { return (static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// Fills n values of a standard-normal stream (Box-Muller) in `dtype`. The stream
// is cut into fixed segments with their own seeds, so the data does not depend on threads.
constexpr size_t kSegment = 1 << 16;

void FillNormalSegment(uint64_t seed, uint64_t stream, size_t segment, DType dtype, size_t n,
                       uint8_t* out) {
  uint64_t mix = seed ^ (stream * 0x9e3779b97f4a7c15ull) ^ (segment * 0xd1b54a32d192ed03ull);
  Rng rng(SplitMix64(mix));
  for (size_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(rng.Uniform()));
    const double theta = 2.0 * M_PI * rng.Uniform();
    const float v[2] = {static_cast<float>(r * std::cos(theta)), static_cast<float>(r * std::sin(theta))};
    for (size_t k = 0; k < 2 && i + k < n; ++k) StoreAs(dtype, out, i + k, v[k]);
  }
}

Status Validate(const BenchKvCacheConfig& c) {
  auto positive = [](const char* flag, long long v) {
    if (v >= 1) return Status::OK();
    return Status::InvalidArgument(std::string(flag) + ": expected a positive integer, got " +
                                   std::to_string(v));
  };
  KVTIER_RETURN_IF_ERROR(positive("--layers", c.layers));
  KVTIER_RETURN_IF_ERROR(positive("--seq-len", c.seq_len));
  KVTIER_RETURN_IF_ERROR(positive("--heads", c.heads));
  KVTIER_RETURN_IF_ERROR(positive("--head-dim", c.head_dim));
  KVTIER_RETURN_IF_ERROR(positive("--repeats", c.repeats));
  if (c.threads < 0 || c.threads > 1024) {
    return Status::InvalidArgument("--threads: expected 0 (all cores) to 1024, got " +
                                   std::to_string(c.threads));
  }
  if (c.group_size != 32 && c.group_size != 64 && c.group_size != 128) {
    return Status::InvalidArgument("--group-size: expected 32, 64 or 128, got " +
                                   std::to_string(c.group_size));
  }
  return Status::OK();
}

Result<std::vector<Format>> ParseFormatList(const BenchKvCacheConfig& c) {
  std::vector<Format> out = {Format::Plain(c.dtype)};
  std::stringstream ss(c.formats);
  std::string item;
  int parsed = 0;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    Result<Format> f = ParseFormat(item, {.group = c.group_size, .scale_dtype = c.dtype});
    if (!f.ok()) return Status::InvalidArgument("--kv-type: " + f.status().message());
    Status hd = f->CheckHeadDim(static_cast<size_t>(c.head_dim));
    if (!hd.ok()) return Status::InvalidArgument("--head-dim: " + hd.message());
    ++parsed;
    if (std::find(out.begin(), out.end(), *f) == out.end()) out.push_back(*f);
  }
  if (parsed == 0) {
    return Status::InvalidArgument("--kv-type: no format in '" + c.formats + "'");
  }
  return out;
}

struct Accum {
  double quant_s = 0, dequant_s = 0, abs_sum = 0, abs_max = 0;
};

}  // namespace

Result<BenchKvCacheReport> RunBenchKvCache(const BenchKvCacheConfig& config,
                                           const std::function<void(int, int)>& progress) {
  KVTIER_RETURN_IF_ERROR(Validate(config));
  KVTIER_ASSIGN_OR_RETURN(std::vector<Format> formats, ParseFormatList(config));
  // One tensor's buffers must fit in RAM: refuse (not crash) when they cannot.
  {
    unsigned __int128 need = static_cast<unsigned __int128>(config.seq_len) * config.heads *
                             config.head_dim * DTypeSize(config.dtype) * 13 / 5;  // 2.6x a tensor
    Result<uint64_t> ram = TotalRamBytes();
    if (ram.ok() && need > *ram) {
      char msg[256];
      std::snprintf(msg, sizeof msg,
                    "--seq-len %d x --heads %d x --head-dim %d needs %.1f GiB for one tensor's "
                    "buffers; this machine has %.1f GiB",
                    config.seq_len, config.heads, config.head_dim,
                    static_cast<double>(need) / (1ull << 30),
                    static_cast<double>(*ram) / (1ull << 30));
      return Status::ResourceExhausted(msg);
    }
  }

  ThreadPool pool(config.threads);
  const DType dt = config.dtype;
  const size_t es = DTypeSize(dt);
  const size_t head_dim = static_cast<size_t>(config.head_dim);
  // The unit of work is one tensor: the K (or the V) of one layer.
  const size_t rows = static_cast<size_t>(config.seq_len) * config.heads;  // [seq_len, heads]
  const size_t values = rows * head_dim;
  const size_t T = static_cast<size_t>(pool.num_threads());
  const size_t part = (rows + T - 1) / T;  // rows per thread: one fork/join per pass
  size_t max_row_bytes = 0;
  for (const Format& f : formats) max_row_bytes = std::max(max_row_bytes, f.row_bytes(head_dim));

  // Peak memory: one tensor's source and output, and a quantized buffer of at most 0.6 of
  // the source (1.3x one layer's K+V in all), whatever --seq-len and --layers. A format whose
  // tensor does not fit (the plain 16/32-bit rows) runs in several row ranges.
  // (At least one row of the widest format, so every range holds a row.)
  // (Token-grouped formats: at least one group of G tokens x heads rows, and room for a last
  // partial group's whole rows.)
  size_t max_group_rows = 1;
  for (const Format& f : formats) {
    if (f.is_token_grouped()) max_group_rows = std::max<size_t>(max_group_rows, size_t{f.group} * config.heads);
  }
  const size_t quant_bytes =
      std::max(max_group_rows * max_row_bytes, std::min(rows * max_row_bytes, values * es * 3 / 5)) +
      (max_group_rows > 1 ? max_group_rows * max_row_bytes : 0);
  AlignedBuffer source(values * es);  // [seq_len, heads, head_dim] source dtype
  AlignedBuffer quant(quant_bytes);   // [<= seq_len * heads, row_bytes]
  AlignedBuffer out(values * es);     // [seq_len, heads, head_dim] dequantized / memcpy

  std::vector<Accum> acc(formats.size());
  double memcpy_s = 0;
  std::vector<double> part_sum(T), part_max(T);
  Status failure;
  std::mutex failure_mu;
  auto record = [&](Status s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(failure_mu);
    failure = std::move(s);
  };
  // Runs `fn(begin_row, end_row)` over rows [r0, r1), split evenly across the threads (one
  // fork/join), and returns its wall time.
  // Token-grouped formats (chan) work in units of whole groups (G tokens x heads rows).
  auto timed = [&](size_t r0, size_t r1, const std::function<void(size_t, size_t)>& fn,
                   size_t unit = 1) {
    const size_t units = (r1 - r0 + unit - 1) / unit;
    const size_t share = (units + T - 1) / T;
    Timer timer;
    pool.ParallelFor(units, share, [&](size_t b, size_t e) {
      fn(r0 + b * unit, std::min(r1, r0 + e * unit));
    });
    return timer.Seconds();
  };
  auto copy_rows = [&](size_t b, size_t e) {
    std::memcpy(out.data() + b * head_dim * es, source.data() + b * head_dim * es,
                (e - b) * head_dim * es);
  };

  const int tensors = 2 * config.layers;
  for (int tensor = 0; tensor < tensors; ++tensor) {
    const size_t segments = (values + kSegment - 1) / kSegment;
    pool.ParallelFor(segments, 1, [&](size_t b, size_t e) {
      for (size_t s = b; s < e; ++s) {
        const size_t n = std::min(kSegment, values - s * kSegment);
        FillNormalSegment(config.seed, static_cast<uint64_t>(tensor), s, dt, n,
                          source.data() + s * kSegment * es);
      }
    });
    std::vector<double> tm(config.repeats);
    for (int rep = 0; rep < config.repeats; ++rep) tm[rep] = timed(0, rows, copy_rows);
    memcpy_s += Median(tm);
    for (size_t fi = 0; fi < formats.size(); ++fi) {
      const Format& f = formats[fi];
      const size_t rb = f.row_bytes(head_dim);
      const size_t unit = f.is_token_grouped() ? size_t{f.group} * config.heads : 1;
      // Rows per quantized range (whole groups; QuantizeChanGroups writes whole groups).
      const size_t range = std::max(unit, std::min(rows, quant_bytes / rb) / unit * unit);
      const size_t H = config.heads;
      std::vector<double> tq(config.repeats, 0.0), td(config.repeats, 0.0);
      for (int rep = 0; rep < config.repeats; ++rep) {
        for (size_t r0 = 0; r0 < rows; r0 += range) {
          const size_t r1 = std::min(rows, r0 + range);
          tq[rep] += timed(r0, r1, [&](size_t b, size_t e) {
            const void* src = source.data() + b * head_dim * es;
            uint8_t* q = quant.data() + (b - r0) * rb;
            record(unit > 1 ? QuantizeChanGroups(f, dt, src, (e - b) / H, H, head_dim, q)
                            : QuantizeRows(f, dt, src, e - b, head_dim, q));
          }, unit);
          td[rep] += timed(r0, r1, [&](size_t b, size_t e) {
            const uint8_t* q = quant.data() + (b - r0) * rb;
            void* dst = out.data() + b * head_dim * es;
            record(unit > 1 ? DequantizeChanRows(f, q, 0, (e - b) / H, H, head_dim, dt, dst)
                            : DequantizeRows(f, q, e - b, head_dim, dt, dst));
          }, unit);
          if (!failure.ok()) return failure;
        }
      }
      acc[fi].quant_s += Median(tq);
      acc[fi].dequant_s += Median(td);
      // Errors of the last pass's output against the source.
      std::fill(part_sum.begin(), part_sum.end(), 0.0);
      std::fill(part_max.begin(), part_max.end(), 0.0);
      pool.ParallelFor(rows, part, [&](size_t b, size_t e) {
        double sum = 0, mx = 0;
        for (size_t i = b * head_dim; i < e * head_dim; ++i) {
          const double d = std::fabs(static_cast<double>(LoadAs(dt, source.data(), i)) -
                                     static_cast<double>(LoadAs(dt, out.data(), i)));
          sum += d;
          mx = std::max(mx, d);
        }
        part_sum[b / part] = sum;
        part_max[b / part] = mx;
      });
      for (size_t k = 0; k < T; ++k) {
        acc[fi].abs_sum += part_sum[k];
        acc[fi].abs_max = std::max(acc[fi].abs_max, part_max[k]);
      }
    }
    if (progress && tensor % 2 == 1) progress(tensor / 2 + 1, config.layers);
  }

  BenchKvCacheReport r;
  r.config = config;
  r.simd_target = QuantSimdTargetName();
  r.threads = pool.num_threads();
  r.layer_source_bytes = 2 * values * es;
  r.source_bytes = r.layer_source_bytes * static_cast<uint64_t>(config.layers);
  r.memcpy_ms = memcpy_s * 1e3;
  r.memcpy_gbps = 2.0 * static_cast<double>(r.source_bytes) / memcpy_s / 1e9;
  const double total_values = static_cast<double>(values) * tensors;
  for (size_t fi = 0; fi < formats.size(); ++fi) {
    const Format& f = formats[fi];
    BenchKvCacheRow row;
    row.format = f.name();
    row.spec = f.spec();
    row.bits_per_value = f.bits_per_value();
    row.memory_bytes = static_cast<uint64_t>(f.row_bytes(head_dim)) * rows * tensors;
    row.compression = static_cast<double>(r.source_bytes) / static_cast<double>(row.memory_bytes);
    row.mean_abs_error = acc[fi].abs_sum / total_values;
    row.max_abs_error = acc[fi].abs_max;
    row.quantize_ms = acc[fi].quant_s * 1e3;
    row.dequantize_ms = acc[fi].dequant_s * 1e3;
    const double moved = static_cast<double>(r.source_bytes + row.memory_bytes);
    row.quantize_gbps = moved / acc[fi].quant_s / 1e9;
    row.dequantize_gbps = moved / acc[fi].dequant_s / 1e9;
    r.rows.push_back(row);
  }
  Result<uint64_t> peak = PeakRssBytes();
  r.peak_rss_bytes = peak.ok() ? *peak : 0;
  return r;
}

std::string FormatBenchKvCacheTable(const BenchKvCacheReport& r) {
  const auto& c = r.config;
  const double mib = 1024.0 * 1024.0;
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "kvtier-bench kv-cache: %d layers x %d tokens x %d heads x %d head_dim, K+V, "
                "source %s, %d threads, SIMD %s, median of %d\n",
                c.layers, c.seq_len, c.heads, c.head_dim, std::string(DTypeName(c.dtype)).c_str(),
                r.threads, r.simd_target.c_str(), c.repeats);
  out += line;
  std::snprintf(line, sizeof line, "memcpy probe: %.2f GB/s (read + write), %.1f ms\n\n",
                r.memcpy_gbps, r.memcpy_ms);
  out += line;
  TextTable t({"<Format", "bits/val", "Memory", "Compression", "Mean err", "Max err", "Quant ms",
               "Dequant ms", "Quant GB/s", "Dequant GB/s"});
  for (const BenchKvCacheRow& row : r.rows) {
    t.Row({row.format, Printf("%.2f", row.bits_per_value),
           Printf("%.2f MiB", row.memory_bytes / mib), Printf("%.2fx", row.compression),
           Printf("%.5f", row.mean_abs_error), Printf("%.5f", row.max_abs_error),
           Printf("%.2f", row.quantize_ms), Printf("%.2f", row.dequantize_ms),
           Printf("%.1f (%.0f%%)", row.quantize_gbps, 100.0 * row.quantize_gbps / r.memcpy_gbps),
           Printf("%.1f (%.0f%%)", row.dequantize_gbps,
                  100.0 * row.dequantize_gbps / r.memcpy_gbps)});
  }
  out += t.Render();
  std::snprintf(line, sizeof line, "\npeak RSS: %.1f MiB (one layer of source K+V: %.1f MiB, %.2fx)\n",
                r.peak_rss_bytes / mib, r.layer_source_bytes / mib,
                static_cast<double>(r.peak_rss_bytes) / static_cast<double>(r.layer_source_bytes));
  out += line;
  return out;
}

std::string FormatBenchKvCacheJson(const BenchKvCacheReport& r) {
  using nlohmann::json;
  const auto& c = r.config;
  json formats = json::array();
  for (size_t i = 1; i < r.rows.size(); ++i) formats.push_back(r.rows[i].spec);
  json j;
  j["config"] = {{"layers", c.layers},       {"seq_len", c.seq_len},
                 {"heads", c.heads},         {"head_dim", c.head_dim},
                 {"group_size", c.group_size}, {"formats", formats},
                 {"dtype", std::string(DTypeName(c.dtype))}, {"seed", c.seed},
                 {"threads", r.threads},     {"repeats", c.repeats},
                 {"simd_target", r.simd_target}};
  j["memcpy_gbps"] = r.memcpy_gbps;
  j["memcpy_ms"] = r.memcpy_ms;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["layer_source_bytes"] = r.layer_source_bytes;
  json rows = json::array();
  for (const BenchKvCacheRow& row : r.rows) {
    rows.push_back({{"format", row.format},
                    {"spec", row.spec},
                    {"bits_per_value", row.bits_per_value},
                    {"memory_bytes", row.memory_bytes},
                    {"compression", row.compression},
                    {"mean_abs_error", row.mean_abs_error},
                    {"max_abs_error", row.max_abs_error},
                    {"quantize_ms", row.quantize_ms},
                    {"dequantize_ms", row.dequantize_ms},
                    {"quantize_gbps", row.quantize_gbps},
                    {"dequantize_gbps", row.dequantize_gbps}});
  }
  j["rows"] = rows;
  return JsonText(j);
}

}  // namespace kvtier::cli
