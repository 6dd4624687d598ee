// PrefixCache::Hottest (the status page's hottest prefixes): the ranking against a reference
// computed from the fetches the test made, the bound on n, the entries' fields (length,
// blocks, formats, head tokens, in use, pinned, idle time) and Stats(false).
#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "kvtier/prefix_cache.h"
#include "prefix/prefix_test_util.h"

namespace kvtier {
namespace {

using testing::Concat;
using testing::kModelA;
using testing::MakePool;
using testing::Range;
using testing::SeqOf;

constexpr KvShape kShape{2, 2, 64};
constexpr uint32_t kBt = 4;

std::unique_ptr<PrefixCache> Make() {
  PrefixCacheOptions o;
  o.memory_budget_bytes = 64ull << 20;
  return PrefixCache::Create(std::move(o)).value();
}

TEST(PrefixHottestTest, RanksByHitsThenRecencyAgainstAReference) {
  auto pool = MakePool(kShape, Format::F16(), Format::F16(), kBt, 64ull << 20);
  auto c = Make();
  std::mt19937 rng(7);
  // 40 entries with distinct first tokens (no shared blocks), lengths 1..23.
  std::vector<std::vector<int32_t>> entries;
  for (int i = 0; i < 40; ++i) {
    entries.push_back(Range(1000 * (i + 1), 1 + static_cast<int32_t>(rng() % 23)));
    ASSERT_TRUE(c->Store(kModelA, entries.back(), SeqOf(pool, entries.back())).ok());
  }
  // Fetch each a random number of times (exact hits), in a random order; the reference
  // keeps (hits, order of the last fetch) per entry.
  std::vector<uint64_t> hits(entries.size(), 0);
  std::vector<int> last(entries.size(), -1);  // store order counts as older than any fetch
  std::vector<size_t> order;
  for (size_t i = 0; i < entries.size(); ++i) {
    for (uint32_t k = rng() % 5; k > 0; --k) order.push_back(i);
  }
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t f = 0; f < order.size(); ++f) {
    const size_t i = order[f];
    if (entries[i].size() < 2) continue;  // a 1-token request reuses nothing: a miss
    Result<PrefixFetchResult> r = c->Fetch(kModelA, entries[i], pool);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->kind, PrefixMatchKind::kExact);
    ++hits[i];
    last[i] = static_cast<int>(f);
    // A millisecond apart, so the steady clock orders the fetches.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<size_t> ref(entries.size());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = i;
  // Entries never fetched tie on hits 0 and on their store time (one millisecond may hold
  // several stores): among them only the hit count is checked.
  std::stable_sort(ref.begin(), ref.end(), [&](size_t a, size_t b) {
    if (hits[a] != hits[b]) return hits[a] > hits[b];
    return last[a] > last[b];
  });
  for (size_t n : {size_t{1}, size_t{5}, size_t{17}, size_t{40}, size_t{100}}) {
    const std::vector<PrefixEntryInfo> top = c->Hottest(n, 6);
    ASSERT_EQ(top.size(), std::min(n, entries.size())) << n;
    for (size_t r = 0; r < top.size(); ++r) {
      const size_t want = ref[r];
      EXPECT_EQ(top[r].hits, hits[want]) << "n=" << n << " rank " << r;
      if (hits[want] == 0) continue;
      const std::vector<int32_t>& t = entries[want];
      EXPECT_EQ(top[r].tokens, t.size()) << "rank " << r;
      EXPECT_EQ(top[r].blocks, (t.size() + kBt - 1) / kBt);
      EXPECT_EQ(top[r].head, std::vector<int32_t>(t.begin(), t.begin() + std::min<size_t>(6, t.size())));
      EXPECT_EQ(top[r].k_format, Format::F16());
      EXPECT_FALSE(top[r].in_use);
      EXPECT_FALSE(top[r].pinned);
      EXPECT_LT(top[r].idle_ms, 60000u);
    }
  }
  // Without head tokens asked for, none are copied.
  for (const PrefixEntryInfo& e : c->Hottest(40)) EXPECT_TRUE(e.head.empty());
  EXPECT_TRUE(c->Hottest(0).empty());
}

TEST(PrefixHottestTest, SharedPathsMarkersInUsePinsAndFormats) {
  auto pool = MakePool(kShape, Format::F16(), Format::F16(), kBt, 64ull << 20);
  auto c = Make();
  const std::vector<int32_t> a = Concat(Range(1, 4), {70, 71});  // [1..4] [70 71]
  const std::vector<int32_t> b = Concat(Range(1, 8), Range(50, 3));  // shares block 0
  const std::vector<int32_t> m = Range(1, 7);                  // a marker in b's second block
  for (const auto* t : {&a, &b, &m}) ASSERT_TRUE(c->Store(kModelA, *t, SeqOf(pool, *t)).ok());
  EXPECT_EQ(c->Stats().entries, 3u);
  std::vector<PrefixEntryInfo> top = c->Hottest(10, 100);
  ASSERT_EQ(top.size(), 3u);
  std::map<uint32_t, PrefixEntryInfo> by_len;
  for (const auto& e : top) by_len[e.tokens] = e;
  ASSERT_EQ(by_len.size(), 3u);
  EXPECT_EQ(by_len[6].head, a);
  EXPECT_EQ(by_len[7].head, m);
  EXPECT_EQ(by_len[11].head, b);
  EXPECT_EQ(by_len[11].blocks, 3u);
  EXPECT_EQ(by_len[7].blocks, 2u);

  EXPECT_EQ(by_len[6].blocks, 2u);
  // A fetch of b holds its blocks (in use) and counts a hit on each of its nodes; the marker
  // m ends inside b's second block, so it shares that hit; a shares only the first block.
  {
    Result<PrefixFetchResult> r = c->Fetch(kModelA, Concat(b, {9}), pool);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->kind, PrefixMatchKind::kPrefix);
    top = c->Hottest(10);
    ASSERT_EQ(top.size(), 3u);
    EXPECT_EQ(top[0].tokens, 11u);
    EXPECT_EQ(top[0].hits, 1u);
    EXPECT_TRUE(top[0].in_use);
    EXPECT_EQ(top[1].tokens, 7u);
    EXPECT_EQ(top[1].hits, 1u);
    EXPECT_EQ(top[2].tokens, 6u);
    EXPECT_EQ(top[2].hits, 0u);
  }
  top = c->Hottest(1);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_FALSE(top[0].in_use);  // the fetched sequence is gone
  ASSERT_TRUE(c->Pin(kModelA, b).ok());
  EXPECT_TRUE(c->Hottest(1)[0].pinned);

  // Quantize on store: the entry's formats are the store format's.
  PrefixCacheOptions o;
  o.memory_budget_bytes = 64ull << 20;
  o.store_format = PrefixStoreFormat(8, 32).value();
  o.min_quantize_tokens = 1;
  auto q = PrefixCache::Create(std::move(o)).value();
  ASSERT_TRUE(q->Store(kModelA, a, SeqOf(pool, a)).ok());
  top = q->Hottest(5);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].k_format, *q->options().store_format);
  EXPECT_EQ(top[0].v_format, *q->options().store_format);
}

TEST(PrefixHottestTest, StatsWithoutTheWalkMatchesStatsButExclusiveBytes) {
  auto pool = MakePool(kShape, Format::F16(), Format::F16(), kBt, 64ull << 20);
  auto c = Make();
  for (int i = 0; i < 10; ++i) {
    const std::vector<int32_t> t = Range(100 * (i + 1), 3 + i);
    ASSERT_TRUE(c->Store(kModelA, t, SeqOf(pool, t)).ok());
  }
  const PrefixCacheStats full = c->Stats();
  const PrefixCacheStats quick = c->Stats(false);
  EXPECT_EQ(quick.bytes, full.bytes);
  EXPECT_EQ(quick.entries, full.entries);
  EXPECT_EQ(quick.nodes, full.nodes);
  ASSERT_EQ(quick.by_format.size(), full.by_format.size());
  ASSERT_EQ(full.by_format.size(), 1u);
  EXPECT_EQ(quick.by_format[0].bytes, full.by_format[0].bytes);
  EXPECT_EQ(quick.by_format[0].tokens, full.by_format[0].tokens);
  EXPECT_EQ(full.by_format[0].exclusive_bytes, full.bytes);
  EXPECT_EQ(quick.by_format[0].exclusive_bytes, 0u);
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

// Hottest and Stats(false) while other threads fetch, store and evict: every listed entry is
// well formed (tools/test.sh runs this under ThreadSanitizer).
TEST(PrefixHottestTest, ConcurrentWithFetchesStoresAndEvictions) {
  auto pool = testing::MakePool(kShape, Format::F16(), Format::F16(), kBt, 64ull << 20);
  PrefixCacheOptions o;
  o.memory_budget_bytes = 48 * pool->layout().block_stride;  // small: stores evict
  auto c = PrefixCache::Create(std::move(o)).value();
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937 rng(w);
      while (!stop) {
        const std::vector<int32_t> t = testing::Range(100 * static_cast<int32_t>(rng() % 16), 2 + rng() % 14);
        if (rng() % 2) {
          (void)c->Store(testing::kModelA, t, testing::SeqOf(pool, t));
        } else {
          (void)c->Fetch(testing::kModelA, t, pool);
        }
        if (rng() % 16 == 0) c->Evict(pool->layout().block_stride * 4);
      }
    });
  }
  for (int i = 0; i < 200; ++i) {
    for (const PrefixEntryInfo& e : c->Hottest(8, 4)) {
      ASSERT_GE(e.tokens, 1u);
      ASSERT_EQ(e.blocks, (e.tokens + kBt - 1) / kBt);
      ASSERT_EQ(e.head.size(), std::min<size_t>(4, e.tokens));
    }
    const PrefixCacheStats s = c->Stats(false);
    ASSERT_LE(s.bytes, s.budget_bytes);
  }
  stop = true;
  for (std::thread& t : workers) t.join();
  EXPECT_TRUE(c->CheckInvariants().ok());
}

}  // namespace
}  // namespace kvtier
