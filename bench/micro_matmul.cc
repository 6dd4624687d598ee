// Google Benchmark: model::MatMul per weight type on Qwen3-0.6B's matrix shapes (n_in x n_out:
// 1024x1024, 1024x3072, 3072x1024, the 1024x151936 lm head), decode (1 token) and prefill
// (512 tokens; not the lm head, which prefill runs on one token), next to a bandwidth floor:
// a read of the same weight bytes by the same threads in the same iteration. Counters:
//   weight_GB/s   weight bytes / matmul time
//   floor_GB/s    weight bytes / read-probe time
//   x_floor       matmul time / read-probe time (1.0 = bandwidth-bound)
//   x_floor_cpu   the same in thread CPU time (KVTIER_BENCH_THREADS=1 only)
//   GFLOP/s       2 * n_in * n_out * n_tok / matmul time
// Threads: KVTIER_BENCH_THREADS (default 2). KVTIER_MATMUL_PATH: auto (default), float,
// int8-scalar, int8-avx2, int8-avx512 (model::MatMulForcePath). The weights are seeded random values quantized
// by kvtier's own quantizer (QuantizeRows), so each type's bytes are real blocks (the first
// 4096 rows, repeated over larger shapes).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/gguf.h"
#include "kvtier/quant.h"
#include "kvtier/thread_pool.h"
#include "kvtier/weights.h"
#include "model/matmul.h"

namespace kvtier::bench {
namespace {

struct Shape {
  uint32_t n_in, n_out;
};
constexpr Shape kShapes[] = {{1024, 1024}, {1024, 3072}, {3072, 1024}, {1024, 151936}};

// The weight types measured (ggml ids); a type this build cannot make is skipped with an error.
constexpr GgmlType kTypes[] = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
    GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kIQ4_NL, GgmlType::kQ2_K,
    GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kIQ4_XS};

void ForcePathFromEnv() {
  const char* p = std::getenv("KVTIER_MATMUL_PATH");
  if (p == nullptr) return;
  const std::string s = p;
  const model::MatMulPath path = s == "float"         ? model::MatMulPath::kFloat
                                 : s == "int8-scalar" ? model::MatMulPath::kInt8Scalar
                                 : s == "int8-avx2"   ? model::MatMulPath::kInt8Avx2
                                 : s == "int8-avx512" ? model::MatMulPath::kInt8Avx512
                                 : s == "int8-avx512-tiles" ? model::MatMulPath::kInt8Avx512Tiles
                                                      : model::MatMulPath::kAuto;
  if (!model::MatMulForcePath(path)) {
    std::fprintf(stderr, "KVTIER_MATMUL_PATH=%s: this CPU cannot run it\n", p);
    std::exit(2);
  }
}

ThreadPool& Pool() {
  static ThreadPool pool([] {
    const char* t = std::getenv("KVTIER_BENCH_THREADS");
    return t != nullptr ? std::atoi(t) : 2;
  }());
  return pool;
}

// Seeded values in about [-1, 1) from a 64-bit LCG (fast enough for the 155 M lm-head values).
void FillRandom(float* v, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<float>(static_cast<int32_t>(s >> 32)) * (1.0f / 2147483648.0f);
  }
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Reads every byte of [p, p + n) on the pool's threads (64 KiB chunks) and returns a checksum.
uint64_t ReadProbe(const uint8_t* p, size_t n, ThreadPool& pool) {
  constexpr size_t kChunk = 64 << 10;
  const size_t n_chunks = (n + kChunk - 1) / kChunk;
  std::vector<uint64_t> sums(n_chunks);
  pool.ParallelFor(n_chunks, 0, [&](size_t c0, size_t c1) {
    for (size_t c = c0; c < c1; ++c) {
      const size_t b = c * kChunk, e = std::min(n, b + kChunk);
      uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      size_t i = b;
      for (; i + 32 <= e; i += 32) {
        uint64_t w[4];
        std::memcpy(w, p + i, 32);
        a0 += w[0];
        a1 ^= w[1];
        a2 += w[2];
        a3 ^= w[3];
      }
      for (; i < e; ++i) a0 += p[i];
      sums[c] = a0 + a1 + a2 + a3;
    }
  });
  uint64_t s = 0;
  for (uint64_t x : sums) s += x;
  return s;
}

void BM_MatMul(benchmark::State& state) {
  const auto type = static_cast<uint32_t>(state.range(0));
  const Shape shape = kShapes[state.range(1)];
  const auto n_tok = static_cast<size_t>(state.range(2));
  auto rb = WeightRowBytes(type, shape.n_in);
  if (!rb.ok()) {
    state.SkipWithError(rb.status().message().c_str());
    return;
  }
  const size_t row_bytes = *rb;
  const size_t bytes = row_bytes * shape.n_out;
  std::unique_ptr<uint8_t[]> w(new uint8_t[bytes]);
  bool random_blocks = false;
  {
    // The first slab of 4096 rows quantized, then copied over the rest (the kernels' speed
    // does not depend on the values; the K-quant quantizers would take minutes on the lm head).
    constexpr size_t kRows = 4096;
    std::vector<float> src(kRows * shape.n_in);
    auto f = WeightRowFormat(type);
    const size_t n = std::min<size_t>(kRows, shape.n_out);
    FillRandom(src.data(), n * shape.n_in, 1);
    const Status st = f.ok() ? QuantizeRows(*f, DType::kF32, src.data(), n, shape.n_in, w.get())
                             : QuantizeWeightRows(type, src.data(), n, shape.n_in, w.get());
    random_blocks = !st.ok();
    for (size_t r = n; r < shape.n_out && !random_blocks; r += n) {
      std::memcpy(w.get() + r * row_bytes, w.get(), std::min(n, shape.n_out - r) * row_bytes);
    }
    if (random_blocks) {  // no quantizer in this build: random bytes (the kernels' speed does
                          // not depend on the values)
      uint64_t s = 12345;
      for (size_t i = 0; i < bytes; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = static_cast<uint8_t>(s >> 56) & 0x3b;  // no f16 NaN / Inf / huge scales
      }
    }
  }
  WeightMatrix m;
  m.type = type;
  m.n_in = shape.n_in;
  m.n_out = shape.n_out;
  m.row_bytes = row_bytes;
  m.data = w.get();
  std::vector<float> x(n_tok * shape.n_in), y(n_tok * shape.n_out);  // [n_tok][n_in], [n_tok][n_out]
  FillRandom(x.data(), x.size(), 7);
  ThreadPool& pool = Pool();
  using Clock = std::chrono::steady_clock;
  double t_mm = 0.0, t_floor = 0.0, c_mm = 0.0, c_floor = 0.0;
  for (auto _ : state) {
    const double c0 = ThreadCpuSeconds();
    auto t0 = Clock::now();
    benchmark::DoNotOptimize(ReadProbe(w.get(), bytes, pool));
    auto t1 = Clock::now();
    const double c1 = ThreadCpuSeconds();
    if (!model::MatMul(m, x.data(), n_tok, y.data(), &pool).ok()) {
      state.SkipWithError("MatMul failed");
      return;
    }
    benchmark::DoNotOptimize(y.data());
    auto t2 = Clock::now();
    const double c2 = ThreadCpuSeconds();
    c_floor += c1 - c0;
    c_mm += c2 - c1;
    const double mm = std::chrono::duration<double>(t2 - t1).count();
    t_mm += mm;
    t_floor += std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(mm);
  }
  const double it = static_cast<double>(state.iterations());
  state.counters["weight_GB/s"] = bytes * it / t_mm * 1e-9;
  state.counters["floor_GB/s"] = bytes * it / t_floor * 1e-9;
  state.counters["x_floor"] = t_mm / t_floor;
  // One thread: the same ratio in this thread's CPU time, which time slices lost to other
  // processes on a loaded machine do not inflate.
  if (pool.num_threads() == 1) state.counters["x_floor_cpu"] = c_mm / c_floor;
  state.counters["GFLOP/s"] = 2.0 * shape.n_in * shape.n_out * n_tok * it / t_mm * 1e-9;
  state.SetLabel(GgmlTypeName(type) + " " + std::to_string(shape.n_in) + "x" +
                 std::to_string(shape.n_out) + " n_tok " + std::to_string(n_tok) + " " +
                 model::MatMulTargetName() + " " + model::MatMulKernelName(type, n_tok) +
                 " threads " + std::to_string(pool.num_threads()) +
                 (random_blocks ? " random-blocks" : ""));
}

void Args(benchmark::internal::Benchmark* b) {
  for (GgmlType t : kTypes) {
    for (int64_t s = 0; s < 4; ++s) {
      b->Args({static_cast<int64_t>(t), s, 1});
      if (s < 3) b->Args({static_cast<int64_t>(t), s, 512});
    }
  }
}

}  // namespace

void RegisterMicroMatmul() {
  ForcePathFromEnv();
  benchmark::RegisterBenchmark("BM_MatMul", BM_MatMul)
      ->Apply(Args)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace kvtier::bench
