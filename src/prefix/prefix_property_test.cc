// Property test: thousands of random fetches, stores (fresh sequences and fetched ones carried
// on, as requests do), pins, held sequences and evictions against a simple model of the cache
// (the list of stored token lists). Checked after every step:
//   - a fetch reuses exactly the rows of its tokens, bit for bit (converted when needed);
//   - the match never claims more than the model's longest common prefix, and while nothing
//     was evicted it equals it, with the model's match kind;
//   - the tree's invariants hold and its bytes never exceed the budget;
//   - every reference comes back once the cache and the sequences are gone.
#include <map>
#include <random>

#include "kvtier/prefix_cache.h"
#include "prefix/prefix_test_util.h"

namespace kvtier {
namespace {

using testing::Encoded;
using testing::Expected;
using testing::kModelA;
using testing::MakePool;
using testing::SeqOf;

constexpr KvShape kShape{2, 1, 32};

struct Config {
  const char* name;
  Format k, v;
  std::optional<Format> store;
  uint32_t block_tokens;
  uint64_t budget_blocks;  // 0: unlimited (no eviction: the model's matches must be exact)
};

uint32_t Lcp(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  uint32_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

PrefixMatchKind ModelKind(const std::vector<std::vector<int32_t>>& entries,
                          const std::vector<int32_t>& r, uint32_t* matched) {
  uint32_t m = 0;
  for (const auto& e : entries) m = std::max(m, Lcp(e, r));
  *matched = m;
  const uint32_t n = static_cast<uint32_t>(r.size());
  if (std::min(m, n - 1) == 0) return PrefixMatchKind::kMiss;
  auto is_entry = [&](uint32_t len) {
    for (const auto& e : entries) {
      if (e.size() == len && std::equal(e.begin(), e.end(), r.begin())) return true;
    }
    return false;
  };
  if (m == n) return is_entry(n) ? PrefixMatchKind::kExact : PrefixMatchKind::kSupersequence;
  return is_entry(m) ? PrefixMatchKind::kPrefix : PrefixMatchKind::kLcp;
}

class PrefixPropertyTest : public ::testing::TestWithParam<Config> {};

TEST_P(PrefixPropertyTest, AgreesWithASimpleModel) {
  const Config& cfg = GetParam();
  auto pool = MakePool(kShape, cfg.k, cfg.v, cfg.block_tokens, 256ull << 20);
  std::shared_ptr<BlockPool> store_pool =
      cfg.store ? MakePool(kShape, *cfg.store, *cfg.store, cfg.block_tokens, 1 << 20) : nullptr;
  const uint64_t block = pool->layout().block_stride;
  PrefixCacheOptions o;
  o.memory_budget_bytes = cfg.budget_blocks ? cfg.budget_blocks * block : (1ull << 30);
  o.store_format = cfg.store;
  o.min_quantize_tokens = 10;
  uint64_t evicted_cb = 0;
  o.on_evict = [&](const EvictedBlock&) { ++evicted_cb; };
  std::unique_ptr<PrefixCache> cache = PrefixCache::Create(std::move(o)).value();

  std::mt19937_64 rng(1234);
  std::vector<std::vector<int32_t>> entries;  // every list stored so far (the model)
  std::vector<SequenceCache> held;            // "running requests"
  std::vector<std::vector<int32_t>> pins;
  auto random_tokens = [&]() {
    std::vector<int32_t> t;
    if (!entries.empty() && rng() % 3 != 0) {  // extend or branch off a stored list
      const auto& e = entries[rng() % entries.size()];
      t.assign(e.begin(), e.begin() + static_cast<long>(rng() % (e.size() + 1)));
    }
    for (uint64_t i = 0, n = 1 + rng() % 14; i < n; ++i) t.push_back(static_cast<int32_t>(rng() % 3));
    return t;
  };
  const int kSteps = cfg.budget_blocks ? 1500 : 1000;
  for (int step = 0; step < kSteps; ++step) {
    const uint64_t op = rng() % 100;
    if (op < 40) {  // fetch, then maybe carry the request on and store it
      const std::vector<int32_t> t = random_tokens();
      Result<PrefixFetchResult> f = cache->Fetch(kModelA, t, pool);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      uint32_t model_matched = 0;
      const PrefixMatchKind kind = ModelKind(entries, t, &model_matched);
      ASSERT_LE(f->matched_tokens, model_matched) << "step " << step;
      ASSERT_EQ(f->reused_tokens, std::min<uint32_t>(f->matched_tokens, t.size() - 1));
      if (cache->Stats().evicted_blocks == 0) {
        ASSERT_EQ(f->kind, kind) << "step " << step << ": " << PrefixMatchKindName(f->kind);
        if (kind != PrefixMatchKind::kMiss) {
          ASSERT_EQ(f->matched_tokens, model_matched);
        }
      }
      const uint32_t n = f->reused_tokens;
      const bool quantized = n > 0 && cfg.store && f->k_format == *cfg.store;
      ASSERT_EQ(Encoded(f->sequence, n),
                Expected(pool, quantized ? store_pool : pool, pool, t, n)) << "step " << step;
      if (!cfg.store && rng() % 2) {  // the request computes the rest and stores it all
        testing::AppendTokens(f->sequence, t);
        std::vector<int32_t> stored = t;
        Result<PrefixStoreResult> r = cache->Store(kModelA, stored, std::move(f->sequence));
        ASSERT_TRUE(r.ok() || r.status().code() == StatusCode::kResourceExhausted);
        if (r.ok()) entries.push_back(stored);
      } else if (rng() % 4 == 0) {
        held.push_back(std::move(f->sequence));
      }
    } else if (op < 75) {  // store a freshly computed sequence
      const std::vector<int32_t> t = random_tokens();
      Result<PrefixStoreResult> r = cache->Store(kModelA, t, SeqOf(pool, t));
      ASSERT_TRUE(r.ok() || r.status().code() == StatusCode::kResourceExhausted)
          << r.status().ToString();
      if (r.ok()) entries.push_back(t);
    } else if (op < 82) {
      if (!held.empty()) held.erase(held.begin() + static_cast<long>(rng() % held.size()));
    } else if (op < 88) {
      std::vector<int32_t> t = random_tokens();
      ASSERT_TRUE(cache->Pin(kModelA, t).ok());
      pins.push_back(std::move(t));
    } else if (op < 94) {
      if (!pins.empty()) {
        const size_t i = rng() % pins.size();
        ASSERT_TRUE(cache->Unpin(kModelA, pins[i]).ok());
        pins.erase(pins.begin() + static_cast<long>(i));
      }
    } else if (cfg.budget_blocks) {
      cache->Evict(block * (1 + rng() % 4));
    }
    Status inv = cache->CheckInvariants();
    ASSERT_TRUE(inv.ok()) << "step " << step << ": " << inv.ToString();
  }
  const PrefixCacheStats s = cache->Stats();
  EXPECT_EQ(evicted_cb, s.evicted_blocks);
  if (cfg.budget_blocks) {
    EXPECT_GT(s.evicted_blocks, 0u) << "the budget was never reached";
  }
  EXPECT_GT(s.hits[static_cast<int>(PrefixMatchKind::kExact)] +
                s.hits[static_cast<int>(PrefixMatchKind::kPrefix)],
            0u);
  EXPECT_GT(s.hits[static_cast<int>(PrefixMatchKind::kSupersequence)], 0u);
  EXPECT_GT(s.hits[static_cast<int>(PrefixMatchKind::kLcp)], 0u);
  held.clear();
  cache.reset();
  EXPECT_EQ(pool->TotalRefs(), 0u);
  EXPECT_EQ(pool->Stats().refcount_errors, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, PrefixPropertyTest,
    ::testing::Values(
        Config{"f16_unlimited", Format::F16(), Format::F16(), std::nullopt, 4, 0},
        Config{"f16_budget", Format::F16(), Format::F16(), std::nullopt, 4, 24},
        Config{"q8q4_budget_bt3", Format::Q8_0(), Format::Q4_0(), std::nullopt, 3, 20},
        Config{"f16_store_affine4", Format::F16(), Format::F16(), Format::Affine(4, 32, DType::kF16),
               4, 0},
        Config{"bf16_store_q8_budget", Format::BF16(), Format::BF16(), Format::Q8_0(), 5, 30}),
    [](const ::testing::TestParamInfo<Config>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace kvtier
