// The newer families through the engine: a gemma3 model with window layers (window 8, prompts
// of 40+ tokens, chunked prefill of 7) and a phi3 model give the same greedy tokens cold, on
// an exact RAM prefix-cache hit and on a partial hit, as a request run alone without cache; and
// after their blocks spilled to the SSD tier and the tier and cache were reopened (a restart).
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <cstdlib>
#include <set>
#include <unistd.h>

#include "engine/prefill.h"
#include "kvtier/engine.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/ssd_tier.h"
#include "kvtier/test_model.h"
#include "kvtier/thread_pool.h"
#include "model/model_test_util.h"

namespace kvtier {
namespace {

using Loaded = testing::TinyModel;

Loaded Load(const TestModelConfig& c) { return testing::LoadTestModel(c, c.arch).value(); }

TestModelConfig Gemma3() {
  TestModelConfig c;
  c.arch = "gemma3";
  c.hidden = 128;
  c.layers = 4;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 256;
  c.ffn = 384;
  c.vocab = 300;
  c.ctx = 1024;
  c.weight_type = GgmlType::kF32;
  c.weight_std = 0.08f;
  c.seed = 11;
  c.sliding_window = 8;
  c.swa_period = 3;
  c.final_softcap = 30.0;
  c.tied = false;  // tied, a random gemma repeats the last token (embedding scale)
  return c;
}

TestModelConfig Phi3() {
  TestModelConfig c;
  c.arch = "phi3";
  c.hidden = 128;
  c.layers = 2;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 64;
  c.ffn = 256;
  c.vocab = 300;
  c.ctx = 1024;
  c.weight_type = GgmlType::kF32;
  c.weight_std = 0.08f;
  c.seed = 12;
  c.tied = false;
  return c;
}

std::shared_ptr<BlockPool> PoolFor(const Model& m, uint64_t blocks) {
  BlockPoolOptions o;
  o.shape = m.config().kv_shape();
  o.block_tokens = 16;
  o.capacity_bytes =
      blocks * KvBlockLayout::Make(o.shape, o.k_format, o.v_format, 16)->block_stride;
  return BlockPool::Create(o).value();
}

std::vector<int32_t> Prompt(uint32_t n, uint32_t salt) {
  std::vector<int32_t> p(n);
  for (uint32_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>((i * 31 + salt * 7 + 1) % 256);
  return p;
}

std::vector<int32_t> Solo(const Model& m, const std::vector<int32_t>& prompt, uint32_t n) {
  ThreadPool threads(2);
  auto pool = PoolFor(m, 256);
  auto p = engine::Prefill(m, nullptr, pool, prompt, 512, &threads).value();
  return engine::GreedyContinue(m, p.sequence, p.logits, n, &threads).value();
}

struct Sink {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, EngineEvent> last;
  EngineCallback For() {
    return [this](const EngineEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (e.finish == FinishReason::kNone) {
        tokens[e.id].push_back(e.token);
      } else {
        last[e.id] = e;
      }
      cv.notify_all();
      return true;
    };
  }
  void Wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(300), [&] { return last.size() >= n; }));
  }
};

class FamilyEngine : public ::testing::TestWithParam<TestModelConfig (*)()> {};

TEST_P(FamilyEngine, ColdAndRamHitsGiveTheSoloTokens) {
  const Loaded lm = Load(GetParam()());
  const Model& m = *lm.model;
  PrefixCacheOptions po;
  po.memory_budget_bytes = 64ull << 20;
  auto cache = PrefixCache::Create(po).value();
  EngineOptions o;
  o.pool = PoolFor(m, 512);
  o.prefix_cache = cache.get();
  o.prefill_step = 7;  // prompts take several chunks, each past the window
  o.threads = 2;
  auto engine = Engine::Create(m, o).value();
  constexpr uint32_t kGen = 20;
  const std::vector<int32_t> first = Prompt(43, 1);
  std::vector<int32_t> longer = first;  // shares first's 43 tokens, then 21 more
  for (int32_t t : Prompt(21, 2)) longer.push_back(t);
  const auto solo_first = Solo(m, first, kGen), solo_longer = Solo(m, longer, kGen);
  // Not a degenerate model: the greedy continuation uses several tokens.
  EXPECT_GE(std::set<int32_t>(solo_first.begin(), solo_first.end()).size(), 3u);

  Sink sink;
  EngineRequest r;
  r.max_tokens = kGen;
  r.prompt = first;
  const uint64_t cold = engine->Submit(r, sink.For()).value();
  sink.Wait(1);
  const uint64_t exact = engine->Submit(r, sink.For()).value();  // exact hit
  sink.Wait(2);
  r.prompt = longer;
  const uint64_t partial = engine->Submit(r, sink.For()).value();  // hit on first's prefix
  sink.Wait(3);
  EXPECT_EQ(sink.last[cold].cached_tokens, 0u);
  EXPECT_EQ(sink.last[exact].cached_tokens, first.size() - 1);
  EXPECT_GE(sink.last[partial].cached_tokens, 32u);
  EXPECT_EQ(sink.tokens[cold], solo_first) << "cold";
  EXPECT_EQ(sink.tokens[exact], solo_first) << "exact RAM hit";
  EXPECT_EQ(sink.tokens[partial], solo_longer) << "partial RAM hit";
}

TEST_P(FamilyEngine, SsdHitAfterARestartGivesTheSoloTokens) {
  const Loaded lm = Load(GetParam()());
  const Model& m = *lm.model;
  char tmpl[] = "/tmp/kvtier_family_ssd_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  constexpr uint32_t kGen = 12;
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 3; ++i) prompts.push_back(Prompt(40 + 5 * i, 10 + i));
  ThreadPool threads(2);
  auto pool = PoolFor(m, 512);
  {  // First process: each store pushes the previous prompt's blocks to the SSD tier.
    SsdTierOptions so;
    so.dir = dir;
    so.log = false;
    std::shared_ptr<SsdTier> tier = SsdTier::Open(so).value();
    PrefixCacheOptions po;
    po.memory_budget_bytes = 4 * pool->layout().block_stride;
    po.lower_tier = tier;
    auto cache = PrefixCache::Create(po).value();
    for (const auto& p : prompts) {
      auto out = engine::Prefill(m, cache.get(), pool, p, 512, &threads);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      const auto st = cache->Store(m.fingerprint(), p, std::move(out->sequence));
      ASSERT_TRUE(st.ok()) << st.status().ToString();
    }
    tier->Flush();
  }
  // Second process: the tier's index from its files, a cold RAM cache above it.
  SsdTierOptions so;
  so.dir = dir;
  so.log = false;
  std::shared_ptr<SsdTier> tier = SsdTier::Open(so).value();
  EXPECT_GT(tier->Stats().found_blocks, 0u);
  PrefixCacheOptions po;
  po.memory_budget_bytes = 64ull << 20;
  po.lower_tier = tier;
  auto cache = PrefixCache::Create(po).value();
  int from_ssd = 0;
  for (const auto& p : prompts) {
    auto warm = engine::Prefill(m, cache.get(), pool, p, 512, &threads);
    ASSERT_TRUE(warm.ok()) << warm.status().ToString();
    from_ssd += warm->reused_tokens >= 32;
    auto tokens = engine::GreedyContinue(m, warm->sequence, warm->logits, kGen, &threads);
    ASSERT_TRUE(tokens.ok());
    EXPECT_EQ(*tokens, Solo(m, p, kGen)) << "reused " << warm->reused_tokens;
  }
  EXPECT_GE(from_ssd, 2) << "too few prompts came back from the SSD tier";
  tier.reset();
  cache.reset();
  (void)std::system(("rm -rf " + dir).c_str());
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyEngine, ::testing::Values(Gemma3, Phi3),
                         [](const auto& info) { return info.param().arch; });

}  // namespace
}  // namespace kvtier
