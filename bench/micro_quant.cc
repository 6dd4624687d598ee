// Google Benchmark: single-thread quantize / dequantize throughput per format next to memcpy
// of the same bytes (f16 source, head_dim 128, 32768 rows = 8 MiB of source).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"
#include "kvtier/quant.h"

namespace {

constexpr size_t kRows = 32768, kHeadDim = 128;

const std::vector<uint16_t>& Source() {
  static const std::vector<uint16_t> src = [] {
    std::vector<uint16_t> v(kRows * kHeadDim);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (auto& x : v) x = kvtier::F32ToF16(nd(rng));
    return v;
  }();
  return src;
}

kvtier::Format FormatArg(int64_t i) {
  switch (i) {
    case 0: return kvtier::Format::Affine(8, 64, kvtier::DType::kF16);
    case 1: return kvtier::Format::Affine(4, 64, kvtier::DType::kF16);
    case 2: return kvtier::Format::Q8_0();
    case 3: return kvtier::Format::Q4_0();
    default: return kvtier::Format::Affine(3, 64, kvtier::DType::kF16);
  }
}

void BM_Memcpy(benchmark::State& state) {
  const auto& src = Source();
  std::vector<uint16_t> dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * 2);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * src.size() * 2 * 2));
}

void BM_Quantize(benchmark::State& state) {
  const kvtier::Format f = FormatArg(state.range(0));
  const auto& src = Source();
  std::vector<uint8_t> q(kRows * f.row_bytes(kHeadDim));
  for (auto _ : state) {
    if (!kvtier::QuantizeRows(f, kvtier::DType::kF16, src.data(), kRows, kHeadDim, q.data()).ok()) {
      state.SkipWithError("QuantizeRows failed");
    }
    benchmark::DoNotOptimize(q.data());
  }
  state.SetLabel(f.name());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * (src.size() * 2 + q.size())));
}

void BM_Dequantize(benchmark::State& state) {
  const kvtier::Format f = FormatArg(state.range(0));
  const auto& src = Source();
  std::vector<uint8_t> q(kRows * f.row_bytes(kHeadDim));
  std::vector<uint16_t> out(src.size());
  if (!kvtier::QuantizeRows(f, kvtier::DType::kF16, src.data(), kRows, kHeadDim, q.data()).ok()) {
    state.SkipWithError("QuantizeRows failed");
  }
  for (auto _ : state) {
    if (!kvtier::DequantizeRows(f, q.data(), kRows, kHeadDim, kvtier::DType::kF16, out.data()).ok()) {
      state.SkipWithError("DequantizeRows failed");
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(f.name());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * (out.size() * 2 + q.size())));
}

}  // namespace

namespace kvtier::bench {

void RegisterMicroQuant() {
  benchmark::RegisterBenchmark("BM_Memcpy", BM_Memcpy);
  benchmark::RegisterBenchmark("BM_Quantize", BM_Quantize)->DenseRange(0, 4);
  benchmark::RegisterBenchmark("BM_Dequantize", BM_Dequantize)->DenseRange(0, 4);
}

}  // namespace kvtier::bench
