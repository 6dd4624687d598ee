// The prefix cache's write policies over a real SsdTier (in-memory Env): an entry larger than
// the RAM budget, or any entry while RAM is full of pinned blocks, is written through to the
// tier instead of being dropped and then served from it; write-through sends every stored
// entry down at once. Fetched rows are checked bit for bit (FetchChecked).
#include <memory>

#include "tier/tier_test_util.h"

namespace kvtier {
namespace {

using testing::FetchChecked;
using testing::kModelA;
using testing::MakeRig;
using testing::Range;
using testing::Rig;
using testing::SeqOf;

TEST(WritePolicy, AnEntryLargerThanTheBudgetGoesToTheLowerTier) {
  for (const Format& f : {Format::Q8_0(), Format::F16()}) {
    std::unique_ptr<MemEnv> env = MemEnv::Create(3);
    Rig r = MakeRig(env.get(), f, f, 2);  // RAM holds 2 blocks of 4 tokens
    const std::vector<int32_t> t = Range(10, 41);  // 11 blocks
    Result<PrefixStoreResult> s = r.cache->Store(kModelA, t, SeqOf(r.pool, t));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE(s->lower_tier_only);
    EXPECT_EQ(s->new_blocks, 0u);
    EXPECT_EQ(s->written_through_blocks, 11u);
    r.tier->Flush();
    EXPECT_EQ(r.tier->Stats().blocks, 11u);
    EXPECT_EQ(r.cache->Stats().nodes, 0u);
    EXPECT_EQ(r.pool->Stats().blocks_in_use, 0u) << "the tier gave its references back";
    // The same request again: served from the tier's blocks, RAM still empty.
    EXPECT_EQ(FetchChecked(r, t), t.size() - 1) << f.spec();
    const PrefixCacheStats cs = r.cache->Stats();
    EXPECT_EQ(cs.direct_tier_fetches, 1u);
    EXPECT_EQ(cs.lower_only_stores, 1u);
    EXPECT_EQ(cs.failed_stores, 0u);
    EXPECT_EQ(cs.nodes, 0u);
    // A longer request sharing the first 30 tokens reuses those 30.
    std::vector<int32_t> longer = Range(10, 30);
    longer.insert(longer.end(), {7, 7, 7, 7, 7});
    EXPECT_EQ(FetchChecked(r, longer), 30u);
  }
}

TEST(WritePolicy, RamFullOfPinnedBlocksWritesThrough) {
  std::unique_ptr<MemEnv> env = MemEnv::Create(4);
  Rig r = MakeRig(env.get(), Format::Q8_0(), Format::Q8_0(), 4);
  const std::vector<int32_t> pinned = Range(100, 16);  // exactly the budget
  ASSERT_TRUE(r.cache->Pin(kModelA, pinned).ok());
  ASSERT_TRUE(r.cache->Store(kModelA, pinned, SeqOf(r.pool, pinned)).ok());
  const std::vector<int32_t> t = Range(500, 9);
  Result<PrefixStoreResult> s = r.cache->Store(kModelA, t, SeqOf(r.pool, t));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->lower_tier_only);
  EXPECT_EQ(s->written_through_blocks, 3u);
  r.tier->Flush();
  EXPECT_EQ(FetchChecked(r, t), t.size() - 1);
  EXPECT_EQ(FetchChecked(r, pinned), pinned.size() - 1);
}

TEST(WritePolicy, WithoutALowerTierTheOversizedEntryIsStillRefused) {
  std::shared_ptr<BlockPool> pool =
      testing::MakePool(testing::kTierShape, Format::Q8_0(), Format::Q8_0(), testing::kTierBt,
                        16 << 20);
  PrefixCacheOptions po;
  po.memory_budget_bytes = 2 * pool->layout().block_stride;
  std::unique_ptr<PrefixCache> cache = PrefixCache::Create(po).value();
  const std::vector<int32_t> t = Range(10, 41);
  Result<PrefixStoreResult> s = cache->Store(kModelA, t, SeqOf(pool, t));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.status().message().find("budget"), std::string::npos) << s.status().message();
}

TEST(WritePolicy, WriteThroughSendsEveryNewBlockDownAtOnce) {
  std::unique_ptr<MemEnv> env = MemEnv::Create(5);
  for (CacheWritePolicy p : {CacheWritePolicy::kWriteBack, CacheWritePolicy::kWriteThrough}) {
    Rig r = MakeRig(env.get(), Format::Q8_0(), Format::Q8_0(), 64);
    PrefixCacheOptions po = r.cache->options();
    po.write_policy = p;
    r.cache = PrefixCache::Create(po).value();
    ASSERT_TRUE(r.tier->Clear().ok());
    const std::vector<int32_t> a = Range(1, 19);                      // 5 blocks
    const std::vector<int32_t> b = testing::Concat(Range(1, 16), {3, 3});  // shares 4
    ASSERT_TRUE(r.cache->Store(kModelA, a, SeqOf(r.pool, a)).ok());
    Result<PrefixStoreResult> s = r.cache->Store(kModelA, b, SeqOf(r.pool, b));
    ASSERT_TRUE(s.ok());
    r.tier->Flush();
    const bool through = p == CacheWritePolicy::kWriteThrough;
    EXPECT_EQ(s->written_through_blocks, through ? 1u : 0u);
    EXPECT_EQ(r.tier->Stats().blocks, through ? 6u : 0u) << CacheWritePolicyName(p);
    EXPECT_EQ(r.cache->Stats().nodes, 6u);  // RAM keeps them either way
    // Under write-through a second cache over the same tier (another process) finds both.
    if (through) {
      r.cache->Clear();
      EXPECT_EQ(FetchChecked(r, a), a.size() - 1);
      EXPECT_EQ(FetchChecked(r, b), b.size() - 1);
    }
  }
}

TEST(WritePolicy, PolicyNamesParse) {
  EXPECT_EQ(ParseCacheWritePolicy("write-back").value(), CacheWritePolicy::kWriteBack);
  EXPECT_EQ(ParseCacheWritePolicy("write-through").value(), CacheWritePolicy::kWriteThrough);
  Result<CacheWritePolicy> bad = ParseCacheWritePolicy("lazy");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'lazy'"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
