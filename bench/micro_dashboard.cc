// Google Benchmark: the status page's server time (issue 37: < 200 ms with 10,000 cached
// prefixes). A RAM prefix cache holding N entries that share a 64-token system prompt and
// each add 32 tokens of their own (N * 2 + 4 blocks), then Dashboard::Page (the HTML with
// the snapshot inlined: cache statistics, the hottest 20 entries, the history), Json (what
// the page polls) and PrefixCache::Hottest alone. No engine, no SSD tier: the snapshot's
// other parts are counters. Single-threaded.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "kvtier/prefix_cache.h"
#include "kvtier/sequence_cache.h"
#include "server/dashboard.h"
#include "server/server_metrics.h"

namespace {

using kvtier::BlockPool;
using kvtier::Format;
using kvtier::PrefixCache;
using kvtier::SequenceCache;

const kvtier::KvShape kShape{1, 1, 32};  // small blocks: the tree's size is what matters
const kvtier::ModelFingerprint kModel{0xda5b, 0x0a4d};
constexpr uint32_t kBlockTokens = 16;
constexpr uint32_t kShared = 64, kOwn = 32;

struct Filled {
  std::shared_ptr<BlockPool> pool;
  std::unique_ptr<PrefixCache> cache;
};

// A cache of `n` entries, built once per n.
Filled& CacheOf(int64_t n) {
  static std::map<int64_t, Filled> made;
  Filled& f = made[n];
  if (f.cache != nullptr) return f;
  kvtier::BlockPoolOptions o;
  o.shape = kShape;
  o.k_format = Format::F16();
  o.v_format = Format::F16();
  o.block_tokens = kBlockTokens;
  // Every entry's blocks (2 of its own; the 4 shared ones once) plus one sequence's in flight.
  const uint64_t stride =
      kvtier::KvBlockLayout::Make(kShape, Format::F16(), Format::F16(), kBlockTokens)->block_stride;
  o.capacity_bytes = stride * static_cast<uint64_t>(2 * n + 64);
  f.pool = *BlockPool::Create(o);
  kvtier::PrefixCacheOptions po;
  po.memory_budget_bytes = o.capacity_bytes;
  f.cache = PrefixCache::Create(std::move(po)).value();
  const std::vector<uint16_t> zeros(size_t(kShared + kOwn) * 32, 0);  // [tokens, 1 head, 32]
  std::vector<int32_t> tokens(kShared + kOwn);
  for (uint32_t i = 0; i < kShared; ++i) tokens[i] = static_cast<int32_t>(i + 1);
  for (int64_t e = 0; e < n; ++e) {
    for (uint32_t i = 0; i < kOwn; ++i) {
      tokens[kShared + i] = static_cast<int32_t>(1000 + e * kOwn + i);  // distinct entries
    }
    SequenceCache s(f.pool);
    (void)s.Append(0, kvtier::DType::kF16, zeros.data(), zeros.data(), kShared + kOwn);
    kvtier::Result<kvtier::PrefixStoreResult> r = f.cache->Store(kModel, tokens, std::move(s));
    if (!r.ok()) {
      std::fprintf(stderr, "micro-dashboard: store %lld: %s\n", static_cast<long long>(e),
                   r.status().ToString().c_str());
      std::abort();
    }
  }
  if (f.cache->Stats(false).entries != static_cast<uint64_t>(n)) {  // none may be evicted
    std::fprintf(stderr, "micro-dashboard: %llu of %lld entries cached\n",
                 static_cast<unsigned long long>(f.cache->Stats(false).entries),
                 static_cast<long long>(n));
    std::abort();
  }
  return f;
}

kvtier::server::DashboardOptions Options() {
  kvtier::server::DashboardOptions o;
  o.model_id = "bench";
  o.sample_ms = 0;  // no sampler thread
  return o;
}

kvtier::ServerDeps DepsOf(Filled& f) {
  kvtier::ServerDeps d;
  d.pool = f.pool;
  d.prefix_cache = f.cache.get();
  return d;
}

// Members in order: the dashboard copies deps when it is made.
struct Page {
  explicit Page(int64_t n) : f(CacheOf(n)) {}
  Filled& f;
  kvtier::ServerDeps deps = DepsOf(f);
  kvtier::server::ServerMetrics metrics{deps, 10000};
  kvtier::server::Dashboard dash{deps, metrics, Options()};
};

void BM_DashboardPage(benchmark::State& state) {
  Page p(state.range(0));
  size_t bytes = 0;
  for (auto _ : state) {
    std::string page = p.dash.Page();
    bytes = page.size();
    benchmark::DoNotOptimize(page);
  }
  state.counters["entries"] = static_cast<double>(p.f.cache->Stats(false).entries);
  state.counters["page_bytes"] = static_cast<double>(bytes);
}

void BM_DashboardJson(benchmark::State& state) {
  Page p(state.range(0));
  if (p.dash.Json().find("\"hottest\":[{") == std::string::npos) std::abort();
  for (auto _ : state) benchmark::DoNotOptimize(p.dash.Json());
}

void BM_PrefixHottest(benchmark::State& state) {
  Filled& f = CacheOf(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(f.cache->Hottest(20));
}

}  // namespace

namespace kvtier::bench {

void RegisterMicroDashboard() {
  for (auto* b : {benchmark::RegisterBenchmark("BM_DashboardPage", BM_DashboardPage),
                  benchmark::RegisterBenchmark("BM_DashboardJson", BM_DashboardJson),
                  benchmark::RegisterBenchmark("BM_PrefixHottest", BM_PrefixHottest)}) {
    b->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);
  }
}

}  // namespace kvtier::bench
