// kvtier_remote_bench: reload throughput of the remote tier, the way a request sees it. Replica
// A stores a prompt's K/V (write-through to Redis); replica B (its own RAM, a fresh RemoteTier)
// fetches the same prompt through its prefix cache: lookup, pipelined reads with read-ahead,
// verification, insertion into RAM. Prints one JSON line per run; tools/bench_remote.sh puts
// it beside redis-benchmark GET of the same value size.
//
//   kvtier_remote_bench --url redis://127.0.0.1:6379 [--tokens 16384] [--format f16]
//                       [--runs 5] [--layers 8 --kv-heads 2 --head-dim 128 --block-tokens 32]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvtier/prefix_cache.h"
#include "kvtier/remote_tier.h"
#include "kvtier/sequence_cache.h"

namespace kvtier {
namespace {

struct Args {
  std::string url;
  uint32_t tokens = 16384;
  std::string format = "f16";
  int runs = 5;
  KvShape shape{8, 2, 128};  // the bundled model's
  uint32_t block_tokens = 32;
};

int Usage(const char* why) {
  std::fprintf(stderr, "kvtier_remote_bench: %s\n", why);
  return 2;
}

int Run(const Args& a) {
  Result<Format> f = ParseFormat(a.format);
  if (!f.ok()) return Usage(f.status().ToString().c_str());
  auto make_pool = [&]() -> std::shared_ptr<BlockPool> {
    BlockPoolOptions po;
    po.shape = a.shape;
    po.k_format = *f;
    po.v_format = *f;
    po.block_tokens = a.block_tokens;
    Result<KvBlockLayout> l = KvBlockLayout::Make(a.shape, *f, *f, a.block_tokens);
    po.capacity_bytes = (a.tokens / a.block_tokens + 4) * l->block_stride;
    return BlockPool::Create(po).value();
  };
  std::mt19937_64 rng(1234);
  // One prompt's K/V, random values (what is measured is bytes, not their meaning).
  const size_t per_token = static_cast<size_t>(a.shape.n_kv_heads) * a.shape.head_dim;
  std::vector<float> k(per_token * a.block_tokens), v(per_token * a.block_tokens);
  for (int run = 0; run < a.runs; ++run) {
    const ModelFingerprint model{rng(), rng()};  // a fresh namespace each run
    std::vector<int32_t> tokens(a.tokens);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % 32000);
    RemoteTierOptions ro;
    ro.url = a.url;
    ro.log = false;
    ro.deadline_ms = 2000;
    ro.queue_blocks = a.tokens / a.block_tokens + 8;  // the bench must not drop writes
    std::shared_ptr<BlockPool> pool_a = make_pool();
    {
      std::shared_ptr<RemoteTier> tier_a = RemoteTier::Open(ro).value();
      PrefixCacheOptions po;
      po.memory_budget_bytes = pool_a->Stats().capacity_bytes;
      po.lower_tier = tier_a;
      po.write_policy = CacheWritePolicy::kWriteThrough;
      std::unique_ptr<PrefixCache> cache_a = PrefixCache::Create(po).value();
      SequenceCache seq(pool_a);
      for (uint32_t at = 0; at < a.tokens; at += a.block_tokens) {
        const uint32_t n = std::min(a.block_tokens, a.tokens - at);
        for (auto& x : k) x = static_cast<float>(rng() % 1000) / 500.0f - 1.0f;
        for (auto& x : v) x = static_cast<float>(rng() % 1000) / 500.0f - 1.0f;
        for (uint32_t l = 0; l < a.shape.n_layers; ++l) {
          Status s = seq.Append(l, DType::kF32, k.data(), v.data(), n);
          if (!s.ok()) return Usage(s.ToString().c_str());
        }
      }
      Result<PrefixStoreResult> st = cache_a->Store(model, tokens, std::move(seq));
      if (!st.ok()) return Usage(st.status().ToString().c_str());
      tier_a->Flush();
      if (tier_a->Stats().write_errors > 0) return Usage("writes to Redis failed");
    }
    std::shared_ptr<BlockPool> pool_b = make_pool();
    {
      // Warm, as a running server's pool is: every block touched once and given back.
      std::vector<BlockId> all;
      const size_t n = pool_b->capacity_blocks();
      if (pool_b->Allocate(n, KvOwner::kActive, &all, "bench warm-up").ok()) {
        pool_b->Unref(all, KvOwner::kActive);
      }
    }
    std::shared_ptr<RemoteTier> tier_b = RemoteTier::Open(ro).value();
    PrefixCacheOptions po;
    po.memory_budget_bytes = pool_b->Stats().capacity_bytes;
    po.lower_tier = tier_b;
    std::unique_ptr<PrefixCache> cache_b = PrefixCache::Create(po).value();
    const auto t0 = std::chrono::steady_clock::now();
    Result<PrefixFetchResult> got = cache_b->Fetch(model, tokens, pool_b);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!got.ok()) return Usage(got.status().ToString().c_str());
    const RemoteTierStats rs = tier_b->Stats();
    const uint64_t misses = rs.misses_by[0] + rs.misses_by[1] + rs.misses_by[2] + rs.misses_by[3];
    std::printf("{\"run\": %d, \"tokens\": %u, \"format\": \"%s\", \"reused_tokens\": %u, "
                "\"blocks\": %llu, \"value_bytes\": %llu, \"bytes\": %llu, \"ms\": %.2f, "
                "\"mb_per_s\": %.1f, \"round_trips\": %llu, \"misses\": %llu, "
                "\"load_ms_sum\": %.1f}\n",
                run, a.tokens, a.format.c_str(), got->reused_tokens,
                static_cast<unsigned long long>(rs.hits),
                static_cast<unsigned long long>(rs.hits ? rs.hit_bytes / rs.hits : 0),
                static_cast<unsigned long long>(rs.hit_bytes), ms,
                static_cast<double>(rs.hit_bytes) / 1e6 / (ms / 1e3),
                static_cast<unsigned long long>(rs.round_trips),
                static_cast<unsigned long long>(misses), rs.load_ms_total);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) {
  kvtier::Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) return kvtier::Usage(("missing value after " + f).c_str());
    const char* v = argv[++i];
    if (f == "--url") a.url = v;
    else if (f == "--tokens") a.tokens = static_cast<uint32_t>(std::atoi(v));
    else if (f == "--format") a.format = v;
    else if (f == "--runs") a.runs = std::atoi(v);
    else if (f == "--layers") a.shape.n_layers = static_cast<uint32_t>(std::atoi(v));
    else if (f == "--kv-heads") a.shape.n_kv_heads = static_cast<uint32_t>(std::atoi(v));
    else if (f == "--head-dim") a.shape.head_dim = static_cast<uint32_t>(std::atoi(v));
    else if (f == "--block-tokens") a.block_tokens = static_cast<uint32_t>(std::atoi(v));
    else return kvtier::Usage(("unknown flag " + f).c_str());
  }
  if (a.url.empty()) return kvtier::Usage("--url redis://HOST:PORT is required");
  if (a.tokens == 0 || a.block_tokens == 0 || a.runs <= 0) return kvtier::Usage("bad sizes");
  return kvtier::Run(a);
}
