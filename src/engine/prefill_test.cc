// Prefill through the prefix cache on the bundled model: greedy generation from a cached
// prefix (exact, prefix, supersequence and longest-common-prefix hits) gives the very tokens
// of a cold run, for every active K/V format with entries stored in that format.
#include "engine/prefill.h"

#include <string>

#include "kvtier/thread_pool.h"
#include "gtest/gtest.h"
#include "engine/engine_test_util.h"

namespace kvtier::engine {
namespace {

constexpr uint32_t kGenerate = 16;

const testing::BundledModel& Load() { return testing::Bundled(); }

std::vector<int32_t> Tokens(const std::string& text) {
  return Load().tokenizer->Encode(text, false, false);
}

std::shared_ptr<BlockPool> Pool(const Format& k, const Format& v) {
  BlockPoolOptions o;
  o.shape = Load().model->config().kv_shape();
  o.k_format = k;
  o.v_format = v;
  o.block_tokens = 16;
  o.capacity_bytes = 256ull << 20;
  auto p = BlockPool::Create(o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

struct GenRun {
  PrefixMatchKind kind;
  uint32_t reused;
  std::vector<int32_t> tokens;
};

GenRun Generate(PrefixCache* cache, const std::shared_ptr<BlockPool>& pool,
             const std::vector<int32_t>& prompt, ThreadPool* threads) {
  const Model& m = *Load().model;
  Result<PrefillOutcome> p = Prefill(m, cache, pool, prompt, 512, threads);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  EXPECT_EQ(p->sequence.size(), prompt.size());
  Result<std::vector<int32_t>> g = GreedyContinue(m, p->sequence, p->logits, kGenerate, threads);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return {p->kind, p->reused_tokens, g.ok() ? *g : std::vector<int32_t>{}};
}

// Stores the prefill of `tokens` (computed cold) in `cache`.
void StoreCold(PrefixCache& cache, const std::shared_ptr<BlockPool>& pool,
               const std::vector<int32_t>& tokens, ThreadPool* threads) {
  Result<PrefillOutcome> p = Prefill(*Load().model, nullptr, pool, tokens, 512, threads);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(cache.Store(Load().model->fingerprint(), tokens, std::move(p->sequence)).ok());
}

class PrefillCacheTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PrefillCacheTest, CachedPrefixesGenerateTheColdTokens) {
  const std::string kv = GetParam();
  const size_t slash = kv.find('/');
  auto k = ParseFormat(kv.substr(0, slash));
  auto v = ParseFormat(slash == std::string::npos ? kv : kv.substr(slash + 1));
  ASSERT_TRUE(k.ok() && v.ok());
  auto pool = Pool(*k, *v);
  ThreadPool threads(2);
  const std::vector<int32_t> prompt = Tokens(
      "\"My dear Mr. Bennet,\" said his lady to him one day, \"have you heard that Netherfield "
      "Park is let at last?\" Mr. Bennet replied that he had not. \"But it is,\" returned she; "
      "\"for Mrs. Long has just been here, and she told me all about it.\" Mr. Bennet made no "
      "answer. \"Do you not want to know who has taken it?\" cried his wife impatiently.");
  ASSERT_GT(prompt.size(), 60u);
  const GenRun cold = Generate(nullptr, pool, prompt, &threads);
  ASSERT_EQ(cold.tokens.size(), kGenerate);

  PrefixCacheOptions o;
  o.memory_budget_bytes = 128ull << 20;
  const uint32_t k_len = 37;  // a prefix that ends inside a block
  const std::vector<int32_t> head(prompt.begin(), prompt.begin() + k_len);
  std::vector<int32_t> other = head;  // shares `head`, then goes elsewhere
  for (int32_t t : Tokens(" Elizabeth laughed at the idea of a ball.")) other.push_back(t);
  std::vector<int32_t> longer = prompt;
  for (int32_t t : Tokens(" It was a truth universally acknowledged.")) longer.push_back(t);
  struct Case {
    std::vector<int32_t> stored;
    PrefixMatchKind kind;
    uint32_t reused;
  };
  const std::vector<Case> cases = {
      {prompt, PrefixMatchKind::kExact, static_cast<uint32_t>(prompt.size() - 1)},
      {head, PrefixMatchKind::kPrefix, k_len},
      {other, PrefixMatchKind::kLcp, k_len},
      {longer, PrefixMatchKind::kSupersequence, static_cast<uint32_t>(prompt.size() - 1)},
  };
  for (const Case& c : cases) {
    std::unique_ptr<PrefixCache> cache = PrefixCache::Create(o).value();
    StoreCold(*cache, pool, c.stored, &threads);
    const GenRun warm = Generate(cache.get(), pool, prompt, &threads);
    EXPECT_EQ(warm.kind, c.kind) << PrefixMatchKindName(warm.kind);
    EXPECT_EQ(warm.reused, c.reused);
    EXPECT_EQ(warm.tokens, cold.tokens) << kv << ", " << PrefixMatchKindName(c.kind) << " hit";
    EXPECT_TRUE(cache->CheckInvariants().ok());
  }
}

// The sanitizer build runs the model about 20 times slower: two formats there.
#if defined(__SANITIZE_ADDRESS__) || defined(KVTIER_SANITIZE)
#define KVTIER_PREFILL_KV_TYPES "f16", "q8_0/q4_0"
#else
#define KVTIER_PREFILL_KV_TYPES \
  "f16", "bf16", "f32", "q8_0", "q4_0", "affine8g64", "affine4g64", "q8_0/q4_0"
#endif
INSTANTIATE_TEST_SUITE_P(KvTypes, PrefillCacheTest, ::testing::Values(KVTIER_PREFILL_KV_TYPES),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string s = i.param;
                           for (char& ch : s) {
                             if (ch == '/') ch = '_';
                           }
                           return s;
                         });

TEST(Prefill, RejectsBadInput) {
  auto pool = Pool(Format::F16(), Format::F16());
  const Model& m = *Load().model;
  EXPECT_FALSE(Prefill(m, nullptr, pool, {}, 512, nullptr).ok());
  const std::vector<int32_t> t = {1, 2};
  EXPECT_FALSE(Prefill(m, nullptr, pool, t, 0, nullptr).ok());
  SequenceCache seq(pool);
  EXPECT_FALSE(GreedyContinue(m, seq, std::vector<float>(3), 2, nullptr).ok());
}

}  // namespace
}  // namespace kvtier::engine
