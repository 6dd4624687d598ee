// Recurrent-state snapshots in the RAM prefix cache (PrefixCache::StoreState, Fetch with
// recurrent_state): the resume rule (the longest snapshot at or before the reused K/V; the K/V
// after it dropped), match kinds unchanged, the shared budget and LRU eviction, a snapshot in
// use never evicted, spills to a lower tier on eviction and write-through, and bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include <mutex>
#include <utility>

#include "kvtier/prefix_cache.h"
#include "prefix/prefix_test_util.h"

namespace kvtier {
namespace {

using testing::kModelA;
using testing::MakePool;
using testing::Range;
using testing::SeqOf;

constexpr KvShape kShape{2, 2, 64};
constexpr uint32_t kBt = 16;

// A snapshot of `floats` values at `position`, its values derived from the position.
std::shared_ptr<const StateSnapshot> Snap(uint32_t position, uint32_t floats = 256) {
  auto s = std::make_shared<StateSnapshot>();
  s->format = 7;
  s->position = position;
  s->sizes = {floats};
  for (uint32_t i = 0; i < floats; ++i) s->data.push_back(float(position) + 0.001f * i);
  return s;
}

PrefixFetchOptions Recurrent() {
  PrefixFetchOptions o;
  o.recurrent_state = true;
  return o;
}

TEST(PrefixState, ResumesFromTheLongestSnapshotAtOrBeforeTheMatch) {
  auto pool = MakePool(kShape, Format::F16(), Format::F16(), kBt, 64ull << 20);
  PrefixCacheOptions po;
  po.memory_budget_bytes = 16ull << 20;
  auto cache = PrefixCache::Create(po).value();
  const std::vector<int32_t> t = Range(1, 60);
  ASSERT_TRUE(cache->Store(kModelA, t, SeqOf(pool, t)).ok());
  const std::span<const int32_t> ts(t);
  ASSERT_TRUE(cache->StoreState(kModelA, ts.first(20), Snap(20)).ok());
  ASSERT_TRUE(cache->StoreState(kModelA, ts.first(45), Snap(45)).ok());

  // Exact request: K/V reuse 59, snapshots at 20 and 45: resume at 45.
  auto f = cache->Fetch(kModelA, t, pool, Recurrent());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->kind, PrefixMatchKind::kExact);
  EXPECT_EQ(f->matched_tokens, 60u);
  EXPECT_EQ(f->reused_tokens, 45u);
  EXPECT_EQ(f->sequence.size(), 45u);
  EXPECT_EQ(f->state_trimmed_tokens, 14u);
  ASSERT_NE(f->state, nullptr);
  EXPECT_EQ(f->state->position, 45u);
  EXPECT_EQ(f->state->data[0], 45.0f);
  f = Result<PrefixFetchResult>(Status::Internal("released"));

  // An LCP hit at 30 (between the snapshots): resume at 20, kind still lcp.
  std::vector<int32_t> lcp = Range(1, 30);
  lcp.push_back(999);
  f = cache->Fetch(kModelA, lcp, pool, Recurrent());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, PrefixMatchKind::kLcp);
  EXPECT_EQ(f->matched_tokens, 30u);
  EXPECT_EQ(f->reused_tokens, 20u);
  EXPECT_EQ(f->state->position, 20u);
  f = Result<PrefixFetchResult>(Status::Internal("released"));

  // A match shorter than every snapshot reuses nothing (no state to resume from).
  std::vector<int32_t> early = Range(1, 10);
  early.push_back(999);
  f = cache->Fetch(kModelA, early, pool, Recurrent());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, PrefixMatchKind::kLcp);
  EXPECT_EQ(f->reused_tokens, 0u);
  EXPECT_EQ(f->sequence.size(), 0u);
  EXPECT_EQ(f->state, nullptr);
  f = Result<PrefixFetchResult>(Status::Internal("released"));

  // Without the option nothing changes: the K/V alone.
  f = cache->Fetch(kModelA, t, pool);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->reused_tokens, 59u);
  EXPECT_EQ(f->state, nullptr);
  f = Result<PrefixFetchResult>(Status::Internal("released"));

  const PrefixCacheStats s = cache->Stats();
  EXPECT_EQ(s.state_fetches, 3u);
  EXPECT_EQ(s.state_hits, 2u);
  EXPECT_EQ(s.states, 2u);
  EXPECT_EQ(s.state_bytes, Snap(20)->bytes() + Snap(45)->bytes());
  EXPECT_TRUE(cache->CheckInvariants().ok());
}

// Snapshots share the budget with the blocks, leave in LRU order (never one a caller still
// holds) and go to the lower tier when evicted, or alone when larger than the budget.
TEST(PrefixState, BudgetLruInUseAndLowerTier) {
  const uint64_t one = Snap(1, 1000)->bytes();
  auto tier = std::make_shared<testing::StateOnlyTier>();
  PrefixCacheOptions po;
  po.memory_budget_bytes = 3 * one + one / 2;  // three snapshots fit, not four
  po.lower_tier = tier;
  auto cache = PrefixCache::Create(po).value();
  const std::vector<int32_t> t = Range(1, 10);
  const std::span<const int32_t> ts(t);
  for (uint32_t p = 1; p <= 3; ++p) {
    ASSERT_TRUE(cache->StoreState(kModelA, ts.first(p), Snap(p, 1000)).ok());
  }
  EXPECT_EQ(cache->Stats().states, 3u);
  // Touch 1 (storing the same key again touches it): storing 4 must evict 2.
  ASSERT_TRUE(cache->StoreState(kModelA, ts.first(1), Snap(1, 1000)).ok());
  ASSERT_TRUE(cache->StoreState(kModelA, ts.first(4), Snap(4, 1000)).ok());
  PrefixCacheStats s = cache->Stats();
  EXPECT_EQ(s.states, 3u);
  EXPECT_EQ(s.state_evictions, 1u);
  EXPECT_LE(s.bytes, po.memory_budget_bytes);
  {
    std::lock_guard<std::mutex> lock(tier->mu);
    ASSERT_EQ(tier->kept.size(), 1u);
    EXPECT_EQ(tier->kept.begin()->first, 2u) << "the least recently used one";
  }
  EXPECT_TRUE(cache->CheckInvariants().ok());

  // A snapshot larger than the whole budget goes to the lower tier alone.
  ASSERT_TRUE(cache->StoreState(kModelA, ts.first(9), Snap(9, 4000)).ok());
  EXPECT_EQ(cache->Stats().states, 3u);
  {
    std::lock_guard<std::mutex> lock(tier->mu);
    EXPECT_EQ(tier->kept.count(9), 1u);
  }
}

// A snapshot a fetch's caller still holds is never evicted; the others go first.
TEST(PrefixState, HeldSnapshotIsNotEvicted) {
  const uint64_t one = Snap(1, 1000)->bytes();
  auto pool = MakePool(kShape, Format::F16(), Format::F16(), kBt, 64ull << 20);
  const std::vector<int32_t> t = Range(1, 40);
  const std::span<const int32_t> ts(t);
  PrefixCacheOptions po;
  {  // the blocks of t, and room for two snapshots
    auto probe = PrefixCache::Create([&] {
      PrefixCacheOptions p;
      p.memory_budget_bytes = 64ull << 20;
      return p;
    }()).value();
    ASSERT_TRUE(probe->Store(kModelA, t, SeqOf(pool, t)).ok());
    po.memory_budget_bytes = probe->Stats().bytes + 2 * one + one / 2;
  }
  auto cache = PrefixCache::Create(po).value();
  ASSERT_TRUE(cache->Store(kModelA, t, SeqOf(pool, t)).ok());
  ASSERT_TRUE(cache->StoreState(kModelA, ts.first(20), Snap(20, 1000)).ok());
  ASSERT_TRUE(cache->Pin(kModelA, t).ok());  // the blocks stay: only snapshots can go
  auto f = cache->Fetch(kModelA, t, pool, Recurrent());
  ASSERT_TRUE(f.ok());
  ASSERT_NE(f->state, nullptr);
  const std::shared_ptr<const StateSnapshot> held = f->state;  // in use
  ASSERT_TRUE(cache->StoreState(kModelA, ts.first(30), Snap(30, 1000)).ok());
  // A third does not fit: 20 is held, 30 is the only candidate.
  ASSERT_TRUE(cache->StoreState(kModelA, ts.first(35), Snap(35, 1000)).ok());
  const PrefixCacheStats s = cache->Stats();
  EXPECT_EQ(s.states, 2u);
  EXPECT_EQ(s.state_evictions, 1u);
  auto g = cache->Fetch(kModelA, Range(1, 25), pool, Recurrent());
  ASSERT_TRUE(g.ok());
  ASSERT_NE(g->state, nullptr);
  EXPECT_EQ(g->state->position, 20u) << "the held snapshot is still there";
  EXPECT_TRUE(cache->CheckInvariants().ok());
}

// The lower tier is asked only for snapshots longer than RAM's (seed 004's round 2 hit
// between two snapshots read the SSD's copy of RAM's own snapshot, 6.7 MB, for nothing), and
// one it has that is longer wins.
TEST(PrefixState, LowerTierAskedOnlyAboveTheRamSnapshot) {
  auto pool = MakePool(kShape, Format::F16(), Format::F16(), kBt, 64ull << 20);
  auto tier = std::make_shared<testing::StateOnlyTier>();
  PrefixCacheOptions po;
  po.memory_budget_bytes = 16ull << 20;
  po.lower_tier = tier;
  po.write_policy = CacheWritePolicy::kWriteThrough;  // the tier holds RAM's snapshot too
  auto cache = PrefixCache::Create(po).value();
  const std::vector<int32_t> t = Range(1, 60);
  const std::span<const int32_t> ts(t);
  ASSERT_TRUE(cache->Store(kModelA, t, SeqOf(pool, t)).ok());
  ASSERT_TRUE(cache->StoreState(kModelA, ts.first(20), Snap(20)).ok());
  {
    std::lock_guard<std::mutex> lock(tier->mu);
    ASSERT_EQ(tier->kept.count(20), 1u) << "written through";
  }
  auto f = cache->Fetch(kModelA, t, pool, Recurrent());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->reused_tokens, 20u);
  {
    std::lock_guard<std::mutex> lock(tier->mu);
    ASSERT_EQ(tier->asked.size(), 1u);
    EXPECT_EQ(tier->asked[0], std::make_pair(20u, 59u)) << "only positions in (20, 59]";
  }
  EXPECT_EQ(cache->Stats().state_tier_hits, 0u);
  // A longer one only the tier has: found and used.
  tier->SpillState(kModelA, StateSnapshotKey(kModelA, ts.first(45)), Snap(45));
  f = cache->Fetch(kModelA, t, pool, Recurrent());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->reused_tokens, 45u);
  EXPECT_EQ(cache->Stats().state_tier_hits, 1u);
  EXPECT_TRUE(cache->CheckInvariants().ok());
}

TEST(PrefixState, BadInputNamesTheProblem) {
  PrefixCacheOptions po;
  po.memory_budget_bytes = 1 << 20;
  auto cache = PrefixCache::Create(po).value();
  const std::vector<int32_t> t = Range(1, 5);
  Status s = cache->StoreState(kModelA, t, Snap(4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("position is 4, expected 5"), std::string::npos) << s.ToString();
  EXPECT_FALSE(cache->StoreState(kModelA, t, nullptr).ok());
  EXPECT_FALSE(cache->StoreState(kModelA, {}, Snap(1)).ok());
  // Too large and no lower tier: ResourceExhausted, nothing kept.
  s = cache->StoreState(kModelA, Range(1, 3), Snap(3, 1 << 20));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(cache->Stats().states, 0u);
}

// --state-type bf16: a stored snapshot costs half the value bytes; a fetch gets f32 values,
// each the bf16 rounding (nearest even) of the stored one.
TEST(PrefixState, Bf16SnapshotsHalveTheBytesAndFetchAsF32) {
  auto pool = MakePool(kShape, Format::F16(), Format::F16(), kBt, 16 << 20);
  auto run = [&](StateType type, std::shared_ptr<const StateSnapshot>* got) {
    PrefixCacheOptions po;
    po.memory_budget_bytes = 8 << 20;
    po.state_type = type;
    auto cache = PrefixCache::Create(po).value();
    const std::vector<int32_t> t = Range(1, 40);
    EXPECT_TRUE(cache->Store(kModelA, t, SeqOf(pool, t)).ok());
    EXPECT_TRUE(cache->StoreState(kModelA, std::span<const int32_t>(t).first(39),
                                  Snap(39, 1001)).ok());
    Result<PrefixFetchResult> f = cache->Fetch(kModelA, t, pool, Recurrent());
    EXPECT_TRUE(f.ok());
    *got = f->state;
    return cache->Stats().state_bytes;
  };
  std::shared_ptr<const StateSnapshot> f32, bf16;
  const uint64_t f32_bytes = run(StateType::kF32, &f32);
  const uint64_t bf16_bytes = run(StateType::kBF16, &bf16);
  ASSERT_NE(f32, nullptr);
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(f32_bytes, 40u + 4 + 4 * 1001);
  EXPECT_EQ(bf16_bytes, 40u + 4 + (2 * 1001 + 2));  // padded to 4
  EXPECT_EQ(bf16->type, StateType::kF32);
  ASSERT_EQ(bf16->data.size(), 1001u);
  const std::shared_ptr<const StateSnapshot> ref = Snap(39, 1001);
  EXPECT_EQ(f32->data, ref->data);
  int differ = 0;
  for (size_t i = 0; i < ref->data.size(); ++i) {
    const float x = ref->data[i];
    uint32_t u;
    std::memcpy(&u, &x, 4);
    const uint32_t rounded = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;  // nearest even
    float want;
    std::memcpy(&want, &rounded, 4);
    EXPECT_EQ(bf16->data[i], want) << i;
    differ += bf16->data[i] != x;
  }
  EXPECT_GT(differ, 900) << "bf16 keeps 8 bits of mantissa: most values change";
}

// The encoded forms: f32 keeps version 1's bytes; bf16 is version 2 (an odd count padded);
// both verify every byte and decode to the same values.
TEST(PrefixState, EncodedSnapshotsOfBothTypesRoundTripAndDetectDamage) {
  const StateSnapshot f32 = *Snap(9, 7);
  const StateSnapshot bf16 = ConvertStateSnapshot(f32, StateType::kBF16);
  const std::vector<uint8_t> a = EncodeStateSnapshot(f32), b = EncodeStateSnapshot(bf16);
  EXPECT_EQ(a[4], 1);
  EXPECT_EQ(a[20], 0);
  EXPECT_EQ(b[4], 2);
  EXPECT_EQ(b[20], 1);
  EXPECT_EQ(a.size(), f32.bytes());
  EXPECT_EQ(b.size(), bf16.bytes());
  EXPECT_EQ(b.size(), 40u + 4 + 16);  // 7 values: 14 bytes, padded to 16
  Result<StateSnapshot> da = DecodeStateSnapshot(a, "a"), db = DecodeStateSnapshot(b, "b");
  ASSERT_TRUE(da.ok() && db.ok()) << da.status().ToString() << db.status().ToString();
  EXPECT_EQ(da->data, f32.data);
  EXPECT_EQ(db->type, StateType::kBF16);
  EXPECT_EQ(db->bf16, bf16.bf16);
  EXPECT_EQ(ConvertStateSnapshot(*db, StateType::kF32).data,
            ConvertStateSnapshot(bf16, StateType::kF32).data);
  for (size_t i = 0; i < b.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = b;
      bad[i] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_FALSE(DecodeStateSnapshot(bad, "flip").ok()) << "byte " << i << " bit " << bit;
    }
  }
  EXPECT_EQ(ParseStateType("bf16").value(), StateType::kBF16);
  EXPECT_EQ(ParseStateType("f16").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
