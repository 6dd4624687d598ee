// Google Benchmark: the RAM prefix cache on synthetic sequences (no model). Fetch of a cached
// entry in place (same pool and format: shares blocks) against converted (the entry was
// quantized on store, the request's pool is f16), and Store with and without quantizing.
// Shape: 4 layers of the Qwen3-0.6B KV shape (8 KV heads x head_dim 128), so a 16K-token f16
// entry is 256 MiB; `kvtier-bench prefix` runs real models. Single-threaded benchmarks.
#include <benchmark/benchmark.h>

#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "base/half.h"
#include "micro_formats.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/sequence_cache.h"

namespace {

using kvtier::BlockPool;
using kvtier::Format;
using kvtier::PrefixCache;
using kvtier::SequenceCache;
using kvtier::bench::FormatArg;

const kvtier::KvShape kShape{4, 8, 128};
const kvtier::ModelFingerprint kModel{0x5eed, 0xcafe};
constexpr uint32_t kChunk = 512;

const std::vector<uint16_t>& Source() {  // [kChunk tokens, 8 heads, 128] f16
  static const std::vector<uint16_t> v = [] {
    std::vector<uint16_t> s(size_t(kChunk) * 8 * 128);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    for (auto& x : s) x = kvtier::F32ToF16(nd(rng));
    return s;
  }();
  return v;
}

std::shared_ptr<BlockPool> Pool(Format f, uint64_t tokens) {
  kvtier::BlockPoolOptions o;
  o.shape = kShape;
  o.k_format = f;
  o.v_format = f;
  o.capacity_bytes = kvtier::KvBytesPerToken(kShape, f, f) * (tokens + 256) * 2 + (64u << 20);
  return *BlockPool::Create(o);
}

// `n` tokens of f16 K/V in every layer (the same 512-token chunk repeated).
SequenceCache Filled(const std::shared_ptr<BlockPool>& pool, uint32_t n) {
  SequenceCache s(pool);
  const auto& src = Source();
  for (uint32_t done = 0; done < n; done += kChunk) {
    const uint32_t m = std::min(kChunk, n - done);
    for (uint32_t l = 0; l < kShape.n_layers; ++l) {
      (void)s.Append(l, kvtier::DType::kF16, src.data(), src.data(), m);
    }
  }
  return s;
}

std::vector<int32_t> Tokens(uint32_t n) {
  std::vector<int32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 2654435761u) % 150000);
  return t;
}

std::unique_ptr<PrefixCache> Cache(std::optional<Format> store, uint32_t tokens) {
  kvtier::PrefixCacheOptions o;
  o.memory_budget_bytes =
      kvtier::KvBytesPerToken(kShape, Format::F16(), Format::F16()) * (tokens + 256) * 2;
  o.store_format = store;
  return PrefixCache::Create(std::move(o)).value();
}

int64_t F16Bytes(uint32_t tokens) {
  return static_cast<int64_t>(kvtier::KvBytesPerToken(kShape, Format::F16(), Format::F16()) *
                              tokens);
}

// An exact hit on an f16 entry fetched into its own pool: shares the blocks, copies nothing.
void BM_FetchInPlace(benchmark::State& state) {
  const uint32_t n = static_cast<uint32_t>(state.range(0));
  auto pool = Pool(Format::F16(), n);
  auto cache = Cache(std::nullopt, n);
  const auto tokens = Tokens(n);
  if (!cache->Store(kModel, tokens, Filled(pool, n)).ok()) state.SkipWithError("store failed");
  for (auto _ : state) {
    auto r = cache->Fetch(kModel, tokens, pool);
    if (!r.ok() || r->converted || r->reused_tokens != n - 1) {
      state.SkipWithError("fetch was not an in-place exact hit");
      break;
    }
    benchmark::DoNotOptimize(r->sequence.n_blocks());
  }
  state.SetLabel("f16 in place");
}

// An exact hit on an entry quantized on store (format arg 1..4), converted into an f16 pool.
// Bytes processed: the f16 K/V written.
void BM_FetchConverted(benchmark::State& state) {
  const Format f = FormatArg(state.range(0));
  const uint32_t n = static_cast<uint32_t>(state.range(1));
  auto pool = Pool(Format::F16(), n);
  auto cache = Cache(f, n);
  const auto tokens = Tokens(n);
  if (!cache->Store(kModel, tokens, Filled(pool, n)).ok()) state.SkipWithError("store failed");
  for (auto _ : state) {
    auto r = cache->Fetch(kModel, tokens, pool);
    if (!r.ok() || !r->converted || r->reused_tokens != n - 1) {
      state.SkipWithError("fetch was not a converted exact hit");
      break;
    }
    benchmark::DoNotOptimize(r->sequence.n_blocks());
  }  // each fetched copy is freed before the next
  state.SetLabel(f.name() + " -> f16");
  state.SetBytesProcessed(state.iterations() * F16Bytes(n - 1));
}

// Store of an f16 sequence: format arg 0 keeps f16 (shares the blocks), 1..4 quantize on
// store. The cache is cleared between iterations (untimed). Bytes processed: f16 K/V read.
void BM_Store(benchmark::State& state) {
  const int64_t fi = state.range(0);
  const uint32_t n = static_cast<uint32_t>(state.range(1));
  auto pool = Pool(Format::F16(), n);
  auto cache = Cache(fi == 0 ? std::nullopt : std::optional<Format>(FormatArg(fi)), n);
  const auto tokens = Tokens(n);
  const SequenceCache seq = Filled(pool, n);
  for (auto _ : state) {
    auto r = cache->Store(kModel, tokens, seq);
    if (!r.ok() || r->stored_tokens != n) {
      state.SkipWithError("store failed");
      break;
    }
    state.PauseTiming();
    cache->Clear();
    state.ResumeTiming();
  }
  state.SetLabel(fi == 0 ? std::string("f16 shared") : FormatArg(fi).name() + " quantized");
  state.SetBytesProcessed(state.iterations() * F16Bytes(n));
}

}  // namespace

namespace kvtier::bench {

void RegisterMicroPrefix() {
  benchmark::RegisterBenchmark("BM_FetchInPlace", BM_FetchInPlace)
      ->Arg(1024)
      ->Arg(16384)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_FetchConverted", BM_FetchConverted)
      ->ArgsProduct({{1, 2, 3, 4}, {16384}})
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_Store", BM_Store)
      ->ArgsProduct({{0, 1, 2, 3, 4}, {16384}})
      ->Unit(benchmark::kMillisecond);
}

}  // namespace kvtier::bench
