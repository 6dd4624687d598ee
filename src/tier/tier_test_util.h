// Test-only helpers for src/tier: a prefix cache over an SsdTier on a given Env, storing and
// spilling entries, and fetches checked bit for bit against the rows the entry was built with.
#pragma once

#include <memory>
#include <vector>

#include "kvtier/ssd_tier.h"
#include "prefix/prefix_test_util.h"

namespace kvtier::testing {

inline constexpr KvShape kTierShape{2, 2, 64};
inline constexpr uint32_t kTierBt = 4;

struct Rig {
  std::shared_ptr<BlockPool> pool;
  std::shared_ptr<SsdTier> tier;
  std::unique_ptr<PrefixCache> cache;
};

// The tests' tier options: directory /ssd on `env`, no log lines.
inline SsdTierOptions TierOptions(Env* env, uint64_t max_bytes = 1ull << 30, uint32_t queue = 8) {
  SsdTierOptions o;
  o.dir = "/ssd";
  o.env = env;
  o.max_bytes = max_bytes;
  o.queue_blocks = queue;
  o.log = false;
  return o;
}

inline Result<std::shared_ptr<SsdTier>> OpenTier(Env* env, uint64_t max_bytes = 1ull << 30,
                                                 uint32_t queue = 8) {
  return SsdTier::Open(TierOptions(env, max_bytes, queue));
}

// A cache of `budget_blocks` blocks over a tier opened with `o`; r.tier is null if it failed.
inline Rig MakeRig(const SsdTierOptions& o, Format k, Format v, uint64_t budget_blocks) {
  Rig r;
  r.pool = MakePool(kTierShape, k, v, kTierBt, 64 << 20);
  Result<std::shared_ptr<SsdTier>> t = SsdTier::Open(o);
  if (!t.ok()) return r;
  r.tier = *t;
  PrefixCacheOptions po;
  po.memory_budget_bytes = budget_blocks * r.pool->layout().block_stride;
  po.lower_tier = r.tier;
  r.cache = PrefixCache::Create(std::move(po)).value();
  return r;
}

inline Rig MakeRig(Env* env, Format k, Format v, uint64_t budget_blocks,
                   uint64_t max_bytes = 1ull << 30) {
  Rig r = MakeRig(TierOptions(env, max_bytes), k, v, budget_blocks);
  EXPECT_NE(r.tier, nullptr);
  return r;
}

inline void StoreAndSpill(Rig& r, const std::vector<std::vector<int32_t>>& entries) {
  for (const auto& t : entries) {
    Result<PrefixStoreResult> s = r.cache->Store(kModelA, t, SeqOf(r.pool, t));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }
  r.cache->Evict(UINT64_MAX);
  r.tier->Flush();
}

// A fetch of `t` must reuse exactly the rows of its tokens; returns the count reused.
inline uint32_t FetchChecked(Rig& r, const std::vector<int32_t>& t) {
  Result<PrefixFetchResult> f = r.cache->Fetch(kModelA, t, r.pool);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) return 0;
  const uint32_t n = f->reused_tokens;
  EXPECT_EQ(Encoded(f->sequence, n), Expected(r.pool, r.pool, r.pool, t, n));
  EXPECT_TRUE(r.cache->CheckInvariants().ok()) << r.cache->CheckInvariants().ToString();
  return n;
}

// Tokens of `t` the tier's index holds as a chain from its start (its blocks were
// acknowledged: durable under their final names).
inline uint32_t IndexedTokens(SsdTier& tier, const std::vector<int32_t>& t) {
  uint32_t n = 0;
  for (const TierNamespace& ns : tier.Namespaces(kModelA)) {
    uint32_t m = 0;
    for (const TierBlock& b : tier.FindChain(ns, t)) {
      if (b.tokens.size() > t.size() - m ||
          !std::equal(b.tokens.begin(), b.tokens.end(), t.begin() + m)) {
        break;
      }
      m += static_cast<uint32_t>(b.tokens.size());
    }
    n = std::max(n, m);
  }
  return n;
}

}  // namespace kvtier::testing
