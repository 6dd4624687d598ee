// Google Benchmark: fused attention decode on one thread (no pool), warm caches: one query per
// row, 32 query / 8 KV heads, head_dim 128, per KV format and context. Reports KV bytes/s and
// ns per (token x KV head). `kvtier-bench attention` is the full, cold-cache comparison.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kvtier/attention.h"
#include "micro_formats.h"
#include "kvtier/batch_cache.h"

namespace {

using kvtier::Format;

using kvtier::bench::FormatArg;

void BM_Decode(benchmark::State& state) {
  const Format f = FormatArg(state.range(0));
  const uint32_t ctx = static_cast<uint32_t>(state.range(1));
  const kvtier::KvShape shape{1, 8, 128};
  kvtier::BlockPoolOptions o;
  o.shape = shape;
  o.k_format = f;
  o.v_format = f;
  o.capacity_bytes = 1ull << 30;
  auto pool = *kvtier::BlockPool::Create(o);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> kv(512 * 8 * 128);
  for (float& x : kv) x = nd(rng);
  kvtier::SequenceCache s(pool);
  for (uint32_t t = 0; t < ctx; t += 512) {
    (void)s.Append(0, kvtier::DType::kF32, kv.data(), kv.data(), std::min(512u, ctx - t));
  }
  std::vector<kvtier::SequenceCache> rows;
  rows.push_back(std::move(s));
  auto batch = kvtier::BatchCache::Merge(std::move(rows));
  const kvtier::PagedKvView view = *batch->View(0);
  std::vector<float> q(32 * 128), out(q.size());
  for (float& x : q) x = nd(rng);
  kvtier::AttentionParams p;
  p.n_heads = 32;
  const uint32_t one[] = {1};
  for (auto _ : state) {
    if (!kvtier::Attention(view, q.data(), one, p, out.data(), nullptr).ok()) {
      state.SkipWithError("attention failed");
      break;
    }
  }
  const double token_heads = static_cast<double>(ctx) * 8;
  state.counters["ns_per_token_head"] = benchmark::Counter(
      token_heads * static_cast<double>(state.iterations()) * 1e-9,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * ctx * 8 *
                                               (f.row_bytes(128) * 2)));
  state.SetLabel(f.name());
}

}  // namespace

namespace kvtier::bench {

void RegisterMicroAttention() {
  benchmark::RegisterBenchmark("BM_Decode", BM_Decode)
      ->ArgsProduct({{0, 1, 2, 3, 4}, {1024, 16384}});
}

}  // namespace kvtier::bench
