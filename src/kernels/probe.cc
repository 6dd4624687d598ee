// Bandwidth and FMA-peak probes (see probe.h). The FMA loop is compiled per Highway target
// and dispatched to the best one the CPU runs.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/probe.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstring>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/stats.h"
#include "kvtier/thread_pool.h"
#include "base/timer.h"
#include "kernels/probe.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::probe::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Runs `iters` rounds of 12 independent FMA chains; returns the FLOPs done.
double FmaChains(size_t iters, float* sink) {
  const hn::ScalableTag<float> df;
  // Distinct starting values: identical chains would be one chain to the compiler (it did fold
  // them, and the probe then counted 12 FMAs for each one it ran).
  auto a0 = hn::Set(df, 1.00f), a1 = hn::Set(df, 1.01f), a2 = hn::Set(df, 1.02f);
  auto a3 = hn::Set(df, 1.03f), a4 = hn::Set(df, 1.04f), a5 = hn::Set(df, 1.05f);
  auto a6 = hn::Set(df, 1.06f), a7 = hn::Set(df, 1.07f), a8 = hn::Set(df, 1.08f);
  auto a9 = hn::Set(df, 1.09f), a10 = hn::Set(df, 1.10f), a11 = hn::Set(df, 1.11f);
  const auto m = hn::Set(df, 0.999999f), c = hn::Set(df, 1e-7f);
  for (size_t i = 0; i < iters; ++i) {
    a0 = hn::MulAdd(a0, m, c); a1 = hn::MulAdd(a1, m, c); a2 = hn::MulAdd(a2, m, c);
    a3 = hn::MulAdd(a3, m, c); a4 = hn::MulAdd(a4, m, c); a5 = hn::MulAdd(a5, m, c);
    a6 = hn::MulAdd(a6, m, c); a7 = hn::MulAdd(a7, m, c); a8 = hn::MulAdd(a8, m, c);
    a9 = hn::MulAdd(a9, m, c); a10 = hn::MulAdd(a10, m, c); a11 = hn::MulAdd(a11, m, c);
  }
  auto s = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  s = hn::Add(s, hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
  *sink = hn::GetLane(s);
  return static_cast<double>(iters) * 12 * 2 * hn::Lanes(df);
}

// Reads n bytes (a multiple of 4 vectors) with 4 independent add chains; returns their sum, so
// that the loads cannot be dropped.
uint64_t SumWords(const uint8_t* p, size_t n) {
  const hn::ScalableTag<uint64_t> d;
  const size_t lanes = hn::Lanes(d);
  const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  for (size_t i = 0; i + 4 * lanes <= n / 8; i += 4 * lanes) {
    s0 = hn::Add(s0, hn::Load(d, w + i));
    s1 = hn::Add(s1, hn::Load(d, w + i + lanes));
    s2 = hn::Add(s2, hn::Load(d, w + i + 2 * lanes));
    s3 = hn::Add(s3, hn::Load(d, w + i + 3 * lanes));
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
}

}  // namespace kvtier::probe::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier {
namespace probe {
HWY_EXPORT(FmaChains);
HWY_EXPORT(SumWords);
}  // namespace probe

double MemcpyProbeGbps(ThreadPool& pool, size_t bytes, int repeats) {
  AlignedBuffer src(bytes), dst(bytes);
  std::memset(src.data(), 1, bytes);  // touch every page before timing
  std::memset(dst.data(), 2, bytes);
  const size_t chunk = (bytes + static_cast<size_t>(pool.num_threads()) - 1) / pool.num_threads();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    Timer t;
    pool.ParallelFor(static_cast<size_t>(pool.num_threads()), 1, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        const size_t off = i * chunk;
        if (off < bytes) std::memcpy(dst.data() + off, src.data() + off, std::min(chunk, bytes - off));
      }
    });
    times.push_back(t.Seconds());
  }
  return 2.0 * static_cast<double>(bytes) / Median(times) / 1e9;
}

double ReadProbeGbps(ThreadPool& pool, size_t bytes, int repeats) {
  const size_t n = static_cast<size_t>(pool.num_threads());
  const size_t chunk = (bytes / n + 4095) / 4096 * 4096;  // whole pages: every load aligned
  AlignedBuffer buf(chunk * n);
  std::memset(buf.data(), 1, chunk * n);  // touch every page before timing
  std::vector<uint64_t> sums(n);  // kept: a call through the dispatch table is not dropped
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    Timer t;
    pool.ParallelFor(n, 1, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        sums[i] = HWY_DYNAMIC_DISPATCH(probe::SumWords)(buf.data() + i * chunk, chunk);
      }
    });
    times.push_back(t.Seconds());
  }
  return static_cast<double>(chunk * n) / Median(times) / 1e9;
}

double PeakFmaGflops(ThreadPool& pool) {
  const int n = pool.num_threads();
  std::vector<double> flops(static_cast<size_t>(n));
  std::vector<float> sinks(static_cast<size_t>(n));
  std::vector<double> rates;
  for (int r = 0; r < 3; ++r) {
    Timer t;
    pool.ParallelFor(static_cast<size_t>(n), 1, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        flops[i] = HWY_DYNAMIC_DISPATCH(probe::FmaChains)(size_t{2} << 20, &sinks[i]);
      }
    });
    double total = 0;
    for (double f : flops) total += f;
    rates.push_back(total / t.Seconds() / 1e9);
  }
  return Median(rates);
}

}  // namespace kvtier
#endif  // HWY_ONCE
