// PrefixCache: every match kind, sharing, quantize on store, conversions, the seeds'
// regressions, eviction, pinning, the budget, bad input, and concurrent use.
#include "kvtier/prefix_cache.h"

#include <atomic>
#include <random>
#include <thread>

#include "prefix/prefix_test_util.h"

namespace kvtier {
namespace {

using testing::Concat;
using testing::Encoded;
using testing::Expected;
using testing::kModelA;
using testing::kModelB;
using testing::MakePool;
using testing::Range;
using testing::SeqOf;

constexpr KvShape kShape{2, 2, 64};
constexpr uint32_t kBt = 4;  // tokens per block: small, so entries span many blocks

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { pool_ = Pool(Format::F16(), Format::F16()); }
  static std::shared_ptr<BlockPool> Pool(Format k, Format v, uint32_t bt = kBt) {
    return MakePool(kShape, k, v, bt, 64ull << 20);
  }
  uint64_t Block(const std::shared_ptr<BlockPool>& p) const { return p->layout().block_stride; }
  std::unique_ptr<PrefixCache> Make(uint64_t budget, std::optional<Format> store = std::nullopt,
                                    uint32_t min_quantize = 256, EvictionCallback cb = nullptr) {
    PrefixCacheOptions o;
    o.memory_budget_bytes = budget;
    o.store_format = store;
    o.min_quantize_tokens = min_quantize;
    o.on_evict = std::move(cb);
    Result<std::unique_ptr<PrefixCache>> c = PrefixCache::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }
  void StoreOk(PrefixCache& c, const std::vector<int32_t>& t,
               std::shared_ptr<BlockPool> pool = nullptr) {
    Result<PrefixStoreResult> r = c.Store(kModelA, t, SeqOf(pool ? pool : pool_, t));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(c.CheckInvariants().ok()) << c.CheckInvariants().ToString();
  }
  PrefixFetchResult FetchOk(PrefixCache& c, const std::vector<int32_t>& t,
                            std::shared_ptr<BlockPool> pool = nullptr) {
    Result<PrefixFetchResult> r = c.Fetch(kModelA, t, pool ? pool : pool_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(c.CheckInvariants().ok()) << c.CheckInvariants().ToString();
    return r.ok() ? std::move(*r) : PrefixFetchResult{};
  }

  std::shared_ptr<BlockPool> pool_;
};

TEST_F(PrefixCacheTest, MissOnAnEmptyCacheGivesAnEmptySequenceOfThePool) {
  auto c = Make(1 << 20);
  PrefixFetchResult r = FetchOk(*c, Range(1, 9));
  EXPECT_EQ(r.kind, PrefixMatchKind::kMiss);
  EXPECT_EQ(r.reused_tokens, 0u);
  ASSERT_TRUE(r.sequence.valid());
  EXPECT_EQ(r.sequence.pool(), pool_);
  EXPECT_EQ(r.sequence.size(), 0u);
  EXPECT_EQ(c->Stats().hits[0], 1u);
  EXPECT_EQ(c->Stats().lookups, 1u);
}

TEST_F(PrefixCacheTest, ExactHitSharesBlocksAndLeavesOneTokenToCompute) {
  auto c = Make(1 << 20);
  const std::vector<int32_t> t = Range(10, 10);
  SequenceCache stored = SeqOf(pool_, t);
  const std::vector<BlockId> ids(stored.block_ids().begin(), stored.block_ids().end());
  ASSERT_TRUE(c->Store(kModelA, t, stored).ok());
  const uint64_t copied = pool_->Stats().copied_bytes;
  PrefixFetchResult r = FetchOk(*c, t);
  EXPECT_EQ(r.kind, PrefixMatchKind::kExact);
  EXPECT_EQ(r.matched_tokens, 10u);
  EXPECT_EQ(r.reused_tokens, 9u);
  EXPECT_FALSE(r.converted);
  ASSERT_EQ(r.sequence.size(), 9u);
  // In place: the very blocks of the stored sequence, nothing copied.
  EXPECT_TRUE(std::equal(r.sequence.block_ids().begin(), r.sequence.block_ids().end(),
                         ids.begin()));
  EXPECT_EQ(pool_->Stats().copied_bytes, copied);
  EXPECT_EQ(Encoded(r.sequence, 9), Expected(pool_, pool_, pool_, t, 9));
  // Computing the last token copies the shared tail block; the cached one is untouched.
  testing::AppendTokens(r.sequence, t);
  EXPECT_EQ(Encoded(r.sequence, 10), Expected(pool_, pool_, pool_, t, 10));
  PrefixFetchResult again = FetchOk(*c, Concat(t, {99}));
  EXPECT_EQ(again.kind, PrefixMatchKind::kPrefix);
  EXPECT_EQ(Encoded(again.sequence, 10), Expected(pool_, pool_, pool_, t, 10));
}

TEST_F(PrefixCacheTest, EveryMatchKind) {
  auto c = Make(1 << 20);
  const std::vector<int32_t> t = Range(100, 12);
  StoreOk(*c, t);
  struct Case {
    std::vector<int32_t> request;
    PrefixMatchKind kind;
    uint32_t matched, reused;
  };
  const std::vector<Case> cases = {
      {t, PrefixMatchKind::kExact, 12, 11},
      {Concat(t, {7, 8, 9}), PrefixMatchKind::kPrefix, 12, 12},
      {Range(100, 6), PrefixMatchKind::kSupersequence, 6, 5},
      {Range(100, 8), PrefixMatchKind::kSupersequence, 8, 7},  // ends on a block boundary
      {Concat(Range(100, 9), {5, 5}), PrefixMatchKind::kLcp, 9, 9},
      {Concat(Range(100, 4), {5}), PrefixMatchKind::kLcp, 4, 4},
      {{100}, PrefixMatchKind::kMiss, 0, 0},  // one token: nothing may be reused
      {{5, 100}, PrefixMatchKind::kMiss, 0, 0},
  };
  for (const Case& k : cases) {
    PrefixFetchResult r = FetchOk(*c, k.request);
    EXPECT_EQ(r.kind, k.kind) << PrefixMatchKindName(r.kind) << " for " << k.request.size();
    EXPECT_EQ(r.reused_tokens, k.reused);
    if (k.kind != PrefixMatchKind::kMiss) {
      EXPECT_EQ(r.matched_tokens, k.matched);
    }
    EXPECT_EQ(r.sequence.size(), k.reused);
    EXPECT_EQ(Encoded(r.sequence, k.reused), Expected(pool_, pool_, pool_, t, k.reused));
  }
  const PrefixCacheStats s = c->Stats();
  EXPECT_EQ(s.hits[1], 1u);
  EXPECT_EQ(s.hits[2], 1u);
  EXPECT_EQ(s.hits[3], 2u);
  EXPECT_EQ(s.hits[4], 2u);
  EXPECT_EQ(s.hits[0], 2u);
  EXPECT_EQ(s.tokens_reused, 11u + 12 + 5 + 7 + 9 + 4);
}

TEST_F(PrefixCacheTest, TheLongestMatchWinsOverAShorterExactPrefix) {
  auto c = Make(1 << 20);
  StoreOk(*c, {1, 2});
  StoreOk(*c, {1, 2, 3, 4, 5, 6});
  PrefixFetchResult r = FetchOk(*c, {1, 2, 3, 9});
  EXPECT_EQ(r.kind, PrefixMatchKind::kLcp);
  EXPECT_EQ(r.reused_tokens, 3u);
  r = FetchOk(*c, {1, 2, 7});
  EXPECT_EQ(r.kind, PrefixMatchKind::kPrefix);  // {1, 2} is an entry
  EXPECT_EQ(r.reused_tokens, 2u);
}

TEST_F(PrefixCacheTest, EntriesShareBlocksAndShorterEntriesAreMarkers) {
  auto c = Make(1 << 20);
  const std::vector<int32_t> t = Range(1, 10);
  StoreOk(*c, std::vector<int32_t>(t.begin(), t.begin() + 6));  // blocks [0,4) + tail [4,6)
  StoreOk(*c, t);  // the tail becomes the full block [4,8); a new tail [8,10)
  PrefixCacheStats s = c->Stats();
  EXPECT_EQ(s.nodes, 3u);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.bytes, 3 * Block(pool_));
  Result<PrefixStoreResult> r = c->Store(kModelA, Range(1, 7), SeqOf(pool_, Range(1, 7)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->new_blocks, 0u);  // a marker inside [4,8)
  EXPECT_EQ(r->shared_blocks, 2u);
  s = c->Stats();
  EXPECT_EQ(s.nodes, 3u);
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(FetchOk(*c, Range(1, 6)).kind, PrefixMatchKind::kExact);
  EXPECT_EQ(FetchOk(*c, Range(1, 7)).kind, PrefixMatchKind::kExact);
  EXPECT_EQ(FetchOk(*c, Range(1, 5)).kind, PrefixMatchKind::kSupersequence);
  // A branch after the first block shares it.
  const std::vector<int32_t> other = Concat(Range(1, 4), {50, 51, 52, 53, 54});
  r = c->Store(kModelA, other, SeqOf(pool_, other));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shared_blocks, 1u);
  EXPECT_EQ(r->new_blocks, 2u);
  PrefixFetchResult f = FetchOk(*c, Concat(other, {1}));
  EXPECT_EQ(f.kind, PrefixMatchKind::kPrefix);
  EXPECT_EQ(Encoded(f.sequence, 9), Expected(pool_, pool_, pool_, other, 9));
  EXPECT_TRUE(c->CheckInvariants().ok());
}

TEST_F(PrefixCacheTest, QuantizeOnStoreAboveTheThresholdAndConvertOnFetch) {
  Result<Format> q8 = PrefixStoreFormat(8, 64);
  ASSERT_TRUE(q8.ok());
  auto c = Make(4 << 20, *q8, /*min_quantize=*/8);
  const std::vector<int32_t> longer = Range(1, 13), shorter = Range(200, 5);
  Result<PrefixStoreResult> r = c->Store(kModelA, longer, SeqOf(pool_, longer));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->quantized);
  r = c->Store(kModelA, shorter, SeqOf(pool_, shorter));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->quantized);  // under min_quantize_tokens: stays f16
  // The request's f16 copy of the quantized entry is gone: only the short entry's 2 blocks
  // are left in the active pool.
  EXPECT_EQ(pool_->Stats().blocks_in_use, 2u);

  PrefixCacheStats s = c->Stats();
  EXPECT_EQ(s.quantized_stores, 1u);
  ASSERT_EQ(s.by_format.size(), 2u);
  for (const PrefixFormatStats& f : s.by_format) {
    if (f.k_format == *q8) {
      EXPECT_EQ(f.k_format.name(), "affine8g64");
      EXPECT_EQ(f.tokens, 13u);
      EXPECT_EQ(f.blocks, 4u);
    } else {
      EXPECT_EQ(f.k_format, Format::F16());
      EXPECT_EQ(f.tokens, 5u);
    }
  }
  auto q8_pool = Pool(*q8, *q8);
  PrefixFetchResult f = FetchOk(*c, longer);
  EXPECT_EQ(f.kind, PrefixMatchKind::kExact);
  EXPECT_TRUE(f.converted);
  EXPECT_EQ(f.k_format, *q8);
  EXPECT_EQ(f.sequence.pool(), pool_);
  EXPECT_EQ(Encoded(f.sequence, 12), Expected(pool_, q8_pool, pool_, longer, 12));
  // A pool in the store format gets the quantized rows as they are.
  f = FetchOk(*c, longer, q8_pool);
  EXPECT_EQ(f.reused_tokens, 12u);
  EXPECT_EQ(Encoded(f.sequence, 12), Expected(pool_, q8_pool, q8_pool, longer, 12));
  EXPECT_EQ(FetchOk(*c, shorter).converted, false);
}

// A K/V store pair (store_v_format): token-grouped K (chan4g32) with per-token V (q8_0).
// Entries are stored in the pair and fetched into a pool of the pair or converted for
// others; a pair with token-grouped V, or V without K, is refused.
TEST_F(PrefixCacheTest, StoresInAKvPairWithTokenGroupedK) {
  const Format chan = Format::Chan(4, 32), q8 = Format::Q8_0();
  auto f16 = Pool(Format::F16(), Format::F16(), 32);
  PrefixCacheOptions o;
  o.memory_budget_bytes = 8 << 20;
  o.store_format = chan;
  o.store_v_format = q8;
  o.min_quantize_tokens = 8;
  Result<std::unique_ptr<PrefixCache>> c = PrefixCache::Create(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::vector<int32_t> t = Range(1, 70);
  Result<PrefixStoreResult> r = (*c)->Store(kModelA, t, SeqOf(f16, t));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->quantized);
  const PrefixCacheStats s = (*c)->Stats();
  ASSERT_EQ(s.by_format.size(), 1u);
  EXPECT_EQ(s.by_format[0].k_format, chan);
  EXPECT_EQ(s.by_format[0].v_format, q8);
  auto pair_pool = Pool(chan, q8, 32);
  PrefixFetchResult f = FetchOk(**c, t, pair_pool);
  EXPECT_EQ(f.reused_tokens, 69u);
  EXPECT_EQ(f.k_format, chan);
  EXPECT_EQ(f.sequence.pool(), pair_pool);
  f = FetchOk(**c, t, f16);
  EXPECT_TRUE(f.converted);
  EXPECT_EQ(f.k_format, chan);
  EXPECT_EQ(f.v_format, q8);

  o.store_v_format = chan;  // V token-grouped
  Result<std::unique_ptr<PrefixCache>> bad = PrefixCache::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("K only"), std::string::npos) << bad.status().ToString();
  o.store_format = chan;
  o.store_v_format.reset();  // chan for V too
  EXPECT_FALSE(PrefixCache::Create(o).ok());
  o.store_format.reset();
  o.store_v_format = q8;  // V without K
  bad = PrefixCache::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("store_v_format"), std::string::npos) << bad.status().ToString();
}

TEST_F(PrefixCacheTest, QuantizedEntriesKeepTheirOffsetOnSupersequenceAndLcpMatches) {
  // Seed 003: _trim_cache_offset skipped quantized layers, so a trimmed quantized entry kept
  // its full length. Here the fetched sequence is exactly the shared part, and computing on
  // from it continues at that position.
  Result<Format> q4 = PrefixStoreFormat(4, 64);
  ASSERT_TRUE(q4.ok());
  auto c = Make(4 << 20, *q4, 8);
  auto q4_pool = Pool(*q4, *q4);
  const std::vector<int32_t> t = Range(300, 20);
  ASSERT_TRUE(c->Store(kModelA, t, SeqOf(pool_, t)).ok());
  const std::vector<int32_t> sub = Range(300, 11);
  PrefixFetchResult f = FetchOk(*c, sub);
  EXPECT_EQ(f.kind, PrefixMatchKind::kSupersequence);
  ASSERT_EQ(f.sequence.size(), 10u);
  EXPECT_EQ(Encoded(f.sequence, 10), Expected(pool_, q4_pool, pool_, t, 10));
  std::vector<uint8_t> k(pool_->layout().k_token_stride), v(pool_->layout().v_token_stride);
  EXPECT_FALSE(f.sequence.ReadEncoded(0, 10, 1, k.data(), v.data()).ok());  // nothing past 10
  const std::vector<int32_t> fork = Concat(Range(300, 14), {1, 2, 3});
  f = FetchOk(*c, fork);
  EXPECT_EQ(f.kind, PrefixMatchKind::kLcp);
  ASSERT_EQ(f.sequence.size(), 14u);
  // Continue the request from position 14 and store it: positions line up.
  testing::AppendTokens(f.sequence, fork);
  ASSERT_EQ(f.sequence.size(), fork.size());
  const std::vector<uint8_t> got = Encoded(f.sequence, 17);
  Result<SequenceCache> q4_rows = ConvertSequence(SeqOf(pool_, Range(300, 14)), q4_pool);
  ASSERT_TRUE(q4_rows.ok());
  Result<SequenceCache> conv_r = ConvertSequence(*q4_rows, pool_);
  ASSERT_TRUE(conv_r.ok());
  SequenceCache conv = std::move(*conv_r);
  testing::AppendTokens(conv, fork);
  EXPECT_EQ(got, Encoded(conv, 17));
}

TEST_F(PrefixCacheTest, AnOversizedSequenceIsChargedItsRealSize) {
  // Seed 003: entries stored with their whole preallocated buffer. Reserved blocks past the
  // sequence's end are never taken.
  auto c = Make(1 << 20);
  const std::vector<int32_t> t = Range(1, 6);
  SequenceCache s = SeqOf(pool_, t);
  ASSERT_TRUE(s.Reserve(64).ok());
  ASSERT_GT(s.n_blocks(), 2u);
  ASSERT_TRUE(c->Store(kModelA, t, s).ok());
  EXPECT_EQ(c->Stats().bytes, 2 * Block(pool_));
  EXPECT_EQ(c->Stats().by_format[0].tokens, 6u);
}

TEST_F(PrefixCacheTest, StoresTheShorterOfTokensAndSequence) {
  auto c = Make(1 << 20);
  const std::vector<int32_t> t = Range(1, 9);
  // The last sampled token has no K/V yet: 9 tokens, 8 computed.
  Result<PrefixStoreResult> r = c->Store(kModelA, t, SeqOf(pool_, Range(1, 8)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stored_tokens, 8u);
  // Fewer tokens than the sequence holds: only those.
  const std::vector<int32_t> u = Range(50, 12);
  r = c->Store(kModelA, Range(50, 5), SeqOf(pool_, u));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stored_tokens, 5u);
  EXPECT_EQ(FetchOk(*c, Range(50, 12)).reused_tokens, 5u);
  EXPECT_EQ(FetchOk(*c, Range(1, 9)).kind, PrefixMatchKind::kPrefix);
}

TEST_F(PrefixCacheTest, ATrimmedEntryNeverShowsStaleTokens) {
  auto c = Make(1 << 20);
  const std::vector<int32_t> a = Range(1, 10);
  SequenceCache s = SeqOf(pool_, a);
  ASSERT_TRUE(s.Trim(4).ok());  // tokens [0, 6) remain; slots 6.. of block 1 held stale rows
  const std::vector<int32_t> b = Concat(Range(1, 6), {70, 71, 72});
  testing::AppendTokens(s, b);
  ASSERT_TRUE(c->Store(kModelA, b, s).ok());
  PrefixFetchResult f = FetchOk(*c, Concat(b, {0}));
  ASSERT_EQ(f.reused_tokens, 9u);
  EXPECT_EQ(Encoded(f.sequence, 9), Expected(pool_, pool_, pool_, b, 9));
  // The old tokens are not cached at all.
  EXPECT_EQ(FetchOk(*c, a).reused_tokens, 6u);
}

TEST_F(PrefixCacheTest, EvictsLeastRecentlyUsedLeavesAndReportsThem) {
  std::vector<std::vector<int32_t>> evicted;
  auto c = Make(3 * Block(pool_), std::nullopt, 256, [&](const EvictedBlock& e) {
    evicted.emplace_back(e.tokens.begin(), e.tokens.end());
    EXPECT_EQ(e.key, ChainBlockKey(e.parent_key, e.tokens));
    EXPECT_EQ(e.pool->RefCount(e.block), 1u);
  });
  const std::vector<int32_t> a = {1, 1}, b = {2, 2}, d = {3, 3}, e = {4, 4};
  StoreOk(*c, a);
  StoreOk(*c, b);
  StoreOk(*c, d);
  FetchOk(*c, Concat(a, {9}));  // a is now the most recent
  StoreOk(*c, e);               // evicts b, the least recent
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], b);
  EXPECT_EQ(FetchOk(*c, Concat(b, {9})).kind, PrefixMatchKind::kMiss);
  EXPECT_EQ(FetchOk(*c, Concat(a, {9})).kind, PrefixMatchKind::kPrefix);
  EXPECT_EQ(c->Stats().evicted_blocks, 1u);
  EXPECT_LE(c->Stats().bytes, 3 * Block(pool_));
}

TEST_F(PrefixCacheTest, EvictionTrimsAnEntryFromItsEnd) {
  auto c = Make(1 << 20);
  const std::vector<int32_t> t = Range(1, 12);  // three full blocks
  StoreOk(*c, t);
  EXPECT_EQ(c->Evict(1), Block(pool_));
  ASSERT_TRUE(c->CheckInvariants().ok()) << c->CheckInvariants().ToString();
  PrefixFetchResult f = FetchOk(*c, t);
  EXPECT_EQ(f.kind, PrefixMatchKind::kPrefix);  // the 8 tokens left are an entry
  EXPECT_EQ(f.reused_tokens, 8u);
  EXPECT_EQ(Encoded(f.sequence, 8), Expected(pool_, pool_, pool_, t, 8));
}

TEST_F(PrefixCacheTest, BlocksHeldByARunningRequestAreNotEvicted) {
  auto c = Make(2 * Block(pool_));
  StoreOk(*c, {1, 1});
  StoreOk(*c, {2, 2});
  PrefixFetchResult held = FetchOk(*c, {1, 1, 5});  // a running request shares {1, 1}
  FetchOk(*c, {2, 2, 5});                          // {1, 1} is now the least recent
  StoreOk(*c, {3, 3});
  EXPECT_EQ(FetchOk(*c, {1, 1, 5}).reused_tokens, 2u);  // kept: in use
  EXPECT_EQ(FetchOk(*c, {2, 2, 5}).reused_tokens, 0u);  // evicted instead
  // Everything in the cache in use: a store fails and changes nothing.
  PrefixFetchResult held3 = FetchOk(*c, {3, 3, 5});
  Result<PrefixStoreResult> r = c->Store(kModelA, std::vector<int32_t>{4, 4},
                                         SeqOf(pool_, std::vector<int32_t>{4, 4}));
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c->Stats().failed_stores, 1u);
  EXPECT_EQ(c->Stats().nodes, 2u);
  EXPECT_TRUE(c->CheckInvariants().ok());
}

TEST_F(PrefixCacheTest, PinnedPrefixesStay) {
  auto c = Make(3 * Block(pool_));
  const std::vector<int32_t> system = {7, 7, 7, 7, 8, 8};
  ASSERT_TRUE(c->Pin(kModelA, system).ok());  // pinned before it is stored
  StoreOk(*c, system);
  EXPECT_EQ(c->Stats().pinned_bytes, 2 * Block(pool_));
  for (int32_t i = 0; i < 5; ++i) StoreOk(*c, {i, i});  // churn through the one free block
  EXPECT_EQ(FetchOk(*c, Concat(system, {1})).reused_tokens, 6u);
  // Too big for what is left beside the pins: refused before evicting anything.
  Result<PrefixStoreResult> r = c->Store(kModelA, Range(40, 8), SeqOf(pool_, Range(40, 8)));
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c->Unpin(kModelA, std::vector<int32_t>{1, 2}).code(), StatusCode::kNotFound);
  ASSERT_TRUE(c->Unpin(kModelA, system).ok());
  EXPECT_EQ(c->Stats().pinned_bytes, 0u);
  ASSERT_TRUE(c->CheckInvariants().ok());
  StoreOk(*c, Range(40, 8));
  StoreOk(*c, Range(60, 4));
  EXPECT_EQ(FetchOk(*c, Concat(system, {1})).reused_tokens, 0u);
}

TEST_F(PrefixCacheTest, PinningAStoredPrefixPinsItsBlocksOnly) {
  auto c = Make(1 << 20);
  StoreOk(*c, Range(1, 12));
  ASSERT_TRUE(c->Pin(kModelA, Range(1, 6)).ok());  // enters blocks [0,4) and [4,8)
  EXPECT_EQ(c->Stats().pinned_bytes, 2 * Block(pool_));
  EXPECT_EQ(c->Evict(UINT64_MAX), Block(pool_));
  EXPECT_EQ(c->Stats().nodes, 2u);
  ASSERT_TRUE(c->CheckInvariants().ok());
}

TEST_F(PrefixCacheTest, AnEntryLargerThanTheBudgetIsRefusedWithoutEvicting) {
  auto c = Make(2 * Block(pool_));
  StoreOk(*c, {1, 1});
  Result<PrefixStoreResult> r = c->Store(kModelA, Range(1, 12), SeqOf(pool_, Range(1, 12)));
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("budget"), std::string::npos) << r.status().message();
  EXPECT_EQ(c->Stats().nodes, 1u);
  EXPECT_EQ(c->Stats().evicted_blocks, 0u);
}

TEST_F(PrefixCacheTest, MixedFormatsConvertBetweenPools) {
  auto q = Pool(Format::Q8_0(), Format::Q4_0());
  auto bf = Pool(Format::BF16(), Format::BF16(), 8);
  auto c = Make(8 << 20);
  const std::vector<int32_t> t = Range(1, 14);
  StoreOk(*c, t, q);
  PrefixFetchResult f = FetchOk(*c, t, q);
  EXPECT_FALSE(f.converted);
  EXPECT_EQ(Encoded(f.sequence, 13), Expected(q, q, q, t, 13));
  f = FetchOk(*c, t, pool_);
  EXPECT_TRUE(f.converted);
  EXPECT_EQ(Encoded(f.sequence, 13), Expected(q, q, pool_, t, 13));
  f = FetchOk(*c, t, bf);  // another block size too
  EXPECT_TRUE(f.converted);
  EXPECT_EQ(Encoded(f.sequence, 13), Expected(q, q, bf, t, 13));
  // The same tokens in the active format: fetched in place, the tie goes to the own pool.
  StoreOk(*c, t);
  f = FetchOk(*c, t, pool_);
  EXPECT_FALSE(f.converted);
  EXPECT_EQ(Encoded(f.sequence, 13), Expected(pool_, pool_, pool_, t, 13));
  // A second pool in the same formats stores by copying into the namespace's pool.
  auto q2 = Pool(Format::Q8_0(), Format::Q4_0());
  const std::vector<int32_t> u = Range(90, 7);
  StoreOk(*c, u, q2);
  f = FetchOk(*c, u, q);
  EXPECT_FALSE(f.converted);
  EXPECT_EQ(Encoded(f.sequence, 6), Expected(q, q, q, u, 6));
}

TEST_F(PrefixCacheTest, ModelsAndShapesDoNotMix) {
  auto c = Make(1 << 20);
  StoreOk(*c, Range(1, 8));
  Result<PrefixFetchResult> r = c->Fetch(kModelB, Range(1, 8), pool_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, PrefixMatchKind::kMiss);
  auto other = MakePool(KvShape{2, 2, 128}, Format::F16(), Format::F16(), kBt, 1 << 20);
  r = c->Fetch(kModelA, Range(1, 8), other);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, PrefixMatchKind::kMiss);
}

TEST_F(PrefixCacheTest, BadInputIsRejectedWithClearErrors) {
  EXPECT_FALSE(PrefixCache::Create(PrefixCacheOptions{}).ok());
  auto c = Make(1 << 20);
  EXPECT_EQ(c->Fetch(kModelA, {}, pool_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Fetch(kModelA, Range(1, 3), nullptr).status().code(),
            StatusCode::kInvalidArgument);
  const std::vector<int32_t> bad = {1, -5, 2};
  Result<PrefixFetchResult> f = c->Fetch(kModelA, bad, pool_);
  EXPECT_NE(f.status().message().find("token 1 is -5"), std::string::npos)
      << f.status().message();
  EXPECT_FALSE(c->Store(kModelA, bad, SeqOf(pool_, Range(1, 3))).ok());
  EXPECT_FALSE(c->Store(kModelA, Range(1, 3), SequenceCache()).ok());
  SequenceCache half(pool_);
  std::vector<uint8_t> kv(kShape.n_kv_heads * kShape.head_dim * 4);
  ASSERT_TRUE(half.Append(0, DType::kF32, kv.data(), kv.data(), 1).ok());
  EXPECT_NE(c->Store(kModelA, Range(1, 3), half).status().message().find("half way"),
            std::string::npos);
  EXPECT_FALSE(c->Pin(kModelA, {}).ok());
  EXPECT_FALSE(PrefixStoreFormat(3, 64).ok());
  EXPECT_FALSE(PrefixStoreFormat(8, 48).ok());
  EXPECT_FALSE(PrefixCacheBudgetBytes(0, 0).ok());
  EXPECT_FALSE(PrefixCacheBudgetBytes(10, 5).ok());
  EXPECT_FALSE(PrefixCacheBudgetBytes(0, 150).ok());
  EXPECT_EQ(*PrefixCacheBudgetBytes(10, 0), 10u << 20);
  Result<uint64_t> pct = PrefixCacheBudgetBytes(0, 1);
  ASSERT_TRUE(pct.ok());
  EXPECT_GT(*pct, 0u);
  EXPECT_EQ(c->Stats().nodes, 0u);
}

TEST_F(PrefixCacheTest, EveryReferenceIsReturned) {
  Result<Format> q4 = PrefixStoreFormat(4, 64);
  std::shared_ptr<BlockPool> store_pool;
  {
    auto c = Make(1 << 20, *q4, 6, [&](const EvictedBlock& e) { store_pool = e.pool; });
    for (int i = 0; i < 6; ++i) StoreOk(*c, Range(i * 3, 4 + i * 2));
    PrefixFetchResult f = FetchOk(*c, Range(0, 9));
    c->Evict(UINT64_MAX);
    EXPECT_GT(pool_->TotalRefs(), 0u);
    c->Clear();
    EXPECT_EQ(c->Stats().nodes, 0u);
    EXPECT_TRUE(c->CheckInvariants().ok());
  }
  EXPECT_EQ(pool_->TotalRefs(), 0u);
  EXPECT_EQ(pool_->Stats().refcount_errors, 0u);
  ASSERT_NE(store_pool, nullptr);
  EXPECT_EQ(store_pool->TotalRefs(), 0u);
  EXPECT_EQ(store_pool->Stats().resident_bytes, 0u);  // evicted blocks went back to the OS
}

TEST_F(PrefixCacheTest, AnEvictionCallbackMayKeepTheBlockForATier) {
  std::vector<std::pair<std::shared_ptr<BlockPool>, BlockId>> kept;
  auto c = Make(1 << 20, std::nullopt, 256, [&](const EvictedBlock& e) {
    ASSERT_TRUE(e.pool->Ref(std::span<const BlockId>(&e.block, 1), KvOwner::kTier).ok());
    kept.emplace_back(e.pool, e.block);
  });
  const std::vector<int32_t> t = Range(1, 4);
  StoreOk(*c, t);
  c->Evict(UINT64_MAX);
  ASSERT_EQ(kept.size(), 1u);
  Result<SequenceCache> s = SequenceCache::FromBlocks(kept[0].first, {&kept[0].second, 1}, 4,
                                                      KvOwner::kTier);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Encoded(*s, 4), Expected(pool_, pool_, pool_, t, 4));
  kept[0].first->Unref({&kept[0].second, 1}, KvOwner::kTier);
}

// Fetches, stores (quantized and not), pins and evictions from several threads; run under
// TSan by tools/test.sh. Every fetch must return exactly the rows of its tokens.
TEST_F(PrefixCacheTest, ConcurrentFetchStoreEvict) {
  Result<Format> q8 = PrefixStoreFormat(8, 64);
  auto c = Make(40 * Block(pool_), *q8, 10);
  auto q8_pool = Pool(*q8, *q8);
  std::atomic<int> failures{0};
  auto worker = [&](int id) {
    std::mt19937 rng(id);
    for (int it = 0; it < 60; ++it) {
      // A few shared prefixes, so threads hit each other's entries.
      std::vector<int32_t> t = Range(1000 * (rng() % 3), 4 + rng() % 10);
      for (uint32_t j = 0, n = rng() % 8; j < n; ++j) t.push_back(static_cast<int32_t>(rng() % 4));
      switch (rng() % 5) {
        case 0:
        case 1: {
          Result<PrefixFetchResult> f = c->Fetch(kModelA, t, pool_);
          if (!f.ok()) {
            ++failures;
            break;
          }
          const uint32_t n = f->reused_tokens;
          const bool quantized = n > 0 && f->k_format == *q8;
          if (Encoded(f->sequence, n) != Expected(pool_, quantized ? q8_pool : pool_, pool_, t, n)) {
            ++failures;
          }
          break;
        }
        case 2:
        case 3: {
          Result<PrefixStoreResult> r = c->Store(kModelA, t, SeqOf(pool_, t));
          if (!r.ok() && r.status().code() != StatusCode::kResourceExhausted) ++failures;
          break;
        }
        default:
          if (rng() % 2) {
            c->Evict(Block(pool_) * (1 + rng() % 3));
          } else if (c->Pin(kModelA, t).ok()) {
            std::this_thread::yield();
            if (!c->Unpin(kModelA, t).ok()) ++failures;
          }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(worker, i);
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(c->CheckInvariants().ok()) << c->CheckInvariants().ToString();
  EXPECT_LE(c->Stats().bytes, 40 * Block(pool_));
  EXPECT_GT(c->Stats().lookups, 0u);
}

}  // namespace
}  // namespace kvtier
