// Google Benchmark: the paged KV cache. A prefill chunk appended per format (bytes of f16
// source per second), a decode step of a batch, and batch operations against context length
// (their time must not grow with it). One layer of the Qwen3-0.6B KV shape (8 x 128) keeps
// the memory small; `kvtier-bench kv-paged` runs the full model shape.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "base/half.h"
#include "micro_formats.h"
#include "kvtier/batch_cache.h"

namespace {

using kvtier::BatchCache;
using kvtier::BlockPool;
using kvtier::Format;
using kvtier::SequenceCache;

const kvtier::KvShape kShape{1, 8, 128};

const std::vector<uint16_t>& Source() {  // [512 tokens, 8 heads, 128] f16
  static const std::vector<uint16_t> v = [] {
    std::vector<uint16_t> s(512 * 8 * 128);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (auto& x : s) x = kvtier::F32ToF16(nd(rng));
    return s;
  }();
  return v;
}

using kvtier::bench::FormatArg;

std::shared_ptr<BlockPool> Pool(Format f, uint64_t capacity) {
  kvtier::BlockPoolOptions o;
  o.shape = kShape;
  o.k_format = f;
  o.v_format = f;
  o.capacity_bytes = capacity;
  return *BlockPool::Create(o);
}

// Appends 512-token chunks to a sequence, trimming it back each time it reaches 16K tokens.
void BM_AppendPrefill(benchmark::State& state) {
  const Format f = FormatArg(state.range(0));
  auto pool = Pool(f, 64 << 20);
  SequenceCache s(pool);
  const auto& src = Source();
  for (auto _ : state) {
    if (s.size() >= 16384) (void)s.Trim(s.size());
    if (!s.Append(0, kvtier::DType::kF16, src.data(), src.data(), 512).ok()) {
      state.SkipWithError("append failed");
      break;
    }
  }
  state.SetLabel(f.name());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * src.size() * 2 * 2));
}

// Batch operations on 8 rows of `context` tokens (q4_0): merge, extract all, filter, extend.
void BM_BatchOps(benchmark::State& state) {
  const uint32_t context = static_cast<uint32_t>(state.range(0));
  auto pool = Pool(Format::Q4_0(), 1ull << 30);
  std::vector<SequenceCache> base;
  const auto& src = Source();
  for (int i = 0; i < 8; ++i) {
    base.emplace_back(pool);
    for (uint32_t t = 0; t < context - 3 * i; t += 512) {
      const uint32_t n = std::min<uint32_t>(512, context - 3 * i - t);
      (void)base.back().Append(0, kvtier::DType::kF16, src.data(), src.data(), n);
    }
  }
  const size_t half[] = {7, 5, 3, 1};
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<SequenceCache> a, b, c;
    for (int i = 0; i < 8; ++i) a.push_back(base[i].Fork());
    for (int i = 0; i < 4; ++i) b.push_back(base[i].Fork());
    for (int i = 4; i < 8; ++i) c.push_back(base[i].Fork());
    state.ResumeTiming();
    auto batch = BatchCache::Merge(std::move(a));
    for (size_t i = 0; i < 8; ++i) benchmark::DoNotOptimize(batch->Extract(i));
    (void)batch->Filter(half);
    auto b1 = BatchCache::Merge(std::move(b));
    auto b2 = BatchCache::Merge(std::move(c));
    (void)b1->Extend(std::move(*b2));
    state.PauseTiming();
    batch = kvtier::Status::Internal("done");  // release outside the timed region
    b1 = kvtier::Status::Internal("done");
    state.ResumeTiming();
  }
  state.counters["copied_bytes"] = static_cast<double>(pool->Stats().copied_bytes);
}

// One decode step of a batch of 8 rows: reserve, append one token, view.
void BM_DecodeStep(benchmark::State& state) {
  auto pool = Pool(FormatArg(state.range(0)), 256 << 20);
  std::vector<SequenceCache> rows;
  for (int i = 0; i < 8; ++i) rows.emplace_back(pool);
  auto batch = BatchCache::Merge(std::move(rows));
  const auto& src = Source();
  for (auto _ : state) {
    if (batch->size() >= 4096) (void)batch->Trim(batch->size());
    if (!batch->Append(0, kvtier::DType::kF16, src.data(), src.data(), 1).ok()) {
      state.SkipWithError("append failed");
      break;
    }
    benchmark::DoNotOptimize(batch->View(0));
  }
  state.SetLabel(FormatArg(state.range(0)).name());
}

}  // namespace

namespace kvtier::bench {

void RegisterMicroKv() {
  benchmark::RegisterBenchmark("BM_AppendPrefill", BM_AppendPrefill)->DenseRange(0, 4);
  benchmark::RegisterBenchmark("BM_BatchOps", BM_BatchOps)->Arg(1024)->Arg(8192)->Arg(32768);
  benchmark::RegisterBenchmark("BM_DecodeStep", BM_DecodeStep)->DenseRange(0, 4);
}

}  // namespace kvtier::bench
