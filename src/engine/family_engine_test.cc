// The newer families through the engine: a gemma3 model with window layers (window 8, prompts
// of 40+ tokens, chunked prefill of 7; its pool drops window rows outside the window) and a
// phi3 model give the same greedy tokens cold, on an exact RAM prefix-cache hit and on a
// partial hit, as a request run alone without cache (a dense pool); after their blocks spilled
// to the SSD tier and the tier and cache were reopened (a restart); on a hit that falls between
// two resume points; and a long prompt's active bytes keep only the window of window layers.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <unistd.h>

#include "engine/prefill.h"
#include "engine/engine_test_util.h"
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

// gemma3's golden shape (window layers), untied: tied, a random gemma repeats the last token
// (its embedding scale).
TestModelConfig Gemma3() { return testing::Gemma3EngineConfig(); }

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

using testing::SaltedPrompt;

std::vector<int32_t> Solo(const Model& m, const std::vector<int32_t>& prompt, uint32_t n) {
  ThreadPool threads(2);
  auto pool = testing::ModelPool(m, 256, /*dense=*/true);
  auto p = engine::Prefill(m, nullptr, pool, prompt, 512, &threads).value();
  return engine::GreedyContinue(m, p.sequence, p.logits, n, &threads).value();
}

using Sink = testing::EventSink;

class FamilyEngine : public ::testing::TestWithParam<TestModelConfig (*)()> {};

TEST_P(FamilyEngine, ColdAndRamHitsGiveTheSoloTokens) {
  const Loaded lm = Load(GetParam()());
  const Model& m = *lm.model;
  PrefixCacheOptions po;
  po.memory_budget_bytes = 64ull << 20;
  auto cache = PrefixCache::Create(po).value();
  EngineOptions o;
  o.pool = testing::ModelPool(m, 512);
  o.prefix_cache = cache.get();
  o.prefill_step = 7;  // prompts take several chunks, each past the window
  o.threads = 2;
  auto engine = Engine::Create(m, o).value();
  constexpr uint32_t kGen = 20;
  const std::vector<int32_t> first = SaltedPrompt(43, 1);
  std::vector<int32_t> longer = first;  // shares first's 43 tokens, then 21 more
  for (int32_t t : SaltedPrompt(21, 2)) longer.push_back(t);
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
  for (uint32_t i = 0; i < 3; ++i) prompts.push_back(SaltedPrompt(40 + 5 * i, 10 + i));
  ThreadPool threads(2);
  auto pool = testing::ModelPool(m, 512);
  {  // First process: each store pushes the previous prompt's blocks to the SSD tier.
    auto [tier, cache] = testing::OpenTieredCache(dir, 4 * pool->layout().block_stride);
    for (const auto& p : prompts) {
      auto out = engine::Prefill(m, cache.get(), pool, p, 512, &threads);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      const auto st = cache->Store(m.fingerprint(), p, std::move(out->sequence));
      ASSERT_TRUE(st.ok()) << st.status().ToString();
    }
    tier->Flush();
  }
  // Second process: the tier's index from its files, a cold RAM cache above it.
  auto [tier, cache] = testing::OpenTieredCache(dir);
  EXPECT_GT(tier->Stats().found_blocks, 0u);
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

// A conversation's blocks past the window lose their window rows; a later prompt that
// matches into them resumes from the last point whose window rows are all there (the end
// of the first prompt's blocks, stored when its prefill finished), not from the match.
TEST_P(FamilyEngine, HitBetweenResumePointsGivesTheSoloTokens) {
  const Loaded lm = Load(GetParam()());
  const Model& m = *lm.model;
  const bool window = !m.config().layer_windows().empty();
  PrefixCacheOptions po;
  po.memory_budget_bytes = 64ull << 20;
  auto cache = PrefixCache::Create(po).value();
  EngineOptions o;
  o.pool = testing::ModelPool(m, 512);
  o.prefix_cache = cache.get();
  o.prefill_step = 7;
  o.threads = 2;
  auto engine = Engine::Create(m, o).value();
  const std::vector<int32_t> first = SaltedPrompt(40, 3);
  Sink sink;
  EngineRequest r;
  r.max_tokens = 60;
  r.prompt = first;
  const uint64_t a = engine->Submit(r, sink.For()).value();
  sink.Wait(1);
  EXPECT_EQ(sink.tokens[a], Solo(m, first, 60)) << "cold, past the window";
  if (window) {
    EXPECT_GT(o.pool->Stats().window_dropped_bytes_total, 0u);
  }
  // first + 35 generated tokens + 6 new: matches 75 tokens of the stored conversation.
  std::vector<int32_t> second = first;
  second.insert(second.end(), sink.tokens[a].begin(), sink.tokens[a].begin() + 35);
  for (int32_t t : SaltedPrompt(6, 4)) second.push_back(t);
  r.prompt = second;
  r.max_tokens = 16;
  const uint64_t b = engine->Submit(r, sink.For()).value();
  sink.Wait(2);
  EXPECT_EQ(sink.tokens[b], Solo(m, second, 16)) << "hit inside the conversation";
  const uint32_t cached = sink.last[b].cached_tokens;
  if (window) {
    EXPECT_GE(cached, 32u) << "the first prompt's blocks are a resume point";
    EXPECT_LT(cached, 75u) << "the match lies where window rows were dropped";
  } else {
    EXPECT_GE(cached, 64u);
  }
}

// Active KV bytes of a long prompt: global layers for every token, window layers only for
// the blocks the window still needs (plus the page padding of each part).
TEST_P(FamilyEngine, ActiveBytesKeepOnlyTheWindowOfWindowLayers) {
  const Loaded lm = Load(GetParam()());
  const Model& m = *lm.model;
  const std::vector<uint32_t> windows = m.config().layer_windows();
  ThreadPool threads(2);
  auto pool = testing::ModelPool(m, 512);
  auto dense = testing::ModelPool(m, 512, /*dense=*/true);
  const std::vector<int32_t> prompt = SaltedPrompt(400, 5);
  auto w = engine::Prefill(m, nullptr, pool, prompt, 64, &threads).value();
  auto d = engine::Prefill(m, nullptr, dense, prompt, 64, &threads).value();
  const KvBlockLayout& l = pool->layout();
  const uint64_t blocks = (400 + 15) / 16;
  EXPECT_EQ(dense->Stats().bytes_in_use, blocks * dense->layout().block_stride);
  if (windows.empty()) {
    EXPECT_EQ(pool->Stats().bytes_in_use, dense->Stats().bytes_in_use) << "dense: no change";
    return;
  }
  // The next query (400) attends window keys from 393: blocks from 24 (tokens 384..) stay.
  const uint64_t kept = blocks - (400 + 1 - l.max_window) / 16;
  EXPECT_EQ(pool->Stats().bytes_in_use, blocks * l.window_offset + kept * l.window_bytes);
  EXPECT_LT(pool->Stats().bytes_in_use, dense->Stats().bytes_in_use / 2);
  // Same tokens from there on.
  EXPECT_EQ(engine::GreedyContinue(m, w.sequence, w.logits, 12, &threads).value(),
            engine::GreedyContinue(m, d.sequence, d.logits, 12, &threads).value());
}

// Admission and the pool count the bytes a row holds: a window model's running rows keep
// window pages only for their last blocks, so a pool runs all six long rows at once without a
// preemption while holding more blocks than capacity / block_stride (a block count would have
// stopped at that); the same model on a dense pool of the same bytes cannot hold them all
// (it preempts or runs fewer at once). Same greedy tokens either way.
TEST(WindowAdmission, AWindowModelRunsMoreRowsThanADensePoolOfTheSameBytes) {
  const Loaded lm = Load(Gemma3());
  const Model& m = *lm.model;
  constexpr uint32_t kRows = 6, kPrompt = 320, kGen = 16, kStep = 64;
  const KvBlockLayout window_layout = testing::ModelPool(m, 1)->layout();
  const KvBlockLayout dense_layout = testing::ModelPool(m, 1, /*dense=*/true)->layout();
  // Room for kRows window rows by RowBytes; not for kRows dense ones.
  const uint64_t bytes = kRows * window_layout.RowBytes(kPrompt + kGen, kStep);
  ASSERT_GT(kRows * ((kPrompt + kGen) / 16) * dense_layout.block_stride, bytes)
      << window_layout.ToString();
  std::map<bool, std::map<uint64_t, std::vector<int32_t>>> out;
  std::map<bool, size_t> peak, peak_blocks;
  std::map<bool, uint64_t> preemptions;
  uint32_t capacity_blocks = 0;
  for (bool dense : {true, false}) {
    BlockPoolOptions po;
    po.shape = m.config().kv_shape();
    po.block_tokens = 16;
    if (!dense) po.layer_window = m.config().layer_windows();
    po.capacity_bytes = bytes;
    EngineOptions o;
    o.pool = BlockPool::Create(po).value();
    if (!dense) capacity_blocks = o.pool->capacity_blocks();
    o.prefill_step = kStep;
    o.max_num_seqs = 16;
    o.threads = 2;
    auto engine = Engine::Create(m, o).value();
    // Rows between their first token and their final event, at most at once.
    std::mutex mu;
    std::condition_variable cv;
    std::set<uint64_t> active;
    size_t done = 0, most = 0, most_blocks = 0;
    std::map<uint64_t, std::vector<int32_t>> tokens;
    auto callback = [&](const EngineEvent& e) {
      const PoolStats ps = o.pool->Stats();
      std::lock_guard<std::mutex> lock(mu);
      most_blocks = std::max<size_t>(most_blocks, ps.blocks_in_use);
      EXPECT_LE(ps.bytes_in_use, ps.capacity_bytes);
      if (e.finish == FinishReason::kNone) {
        tokens[e.id].push_back(e.token);
        active.insert(e.id);
        most = std::max(most, active.size());
      } else {
        EXPECT_EQ(e.finish, FinishReason::kLength) << e.error.ToString();
        active.erase(e.id);
        ++done;
      }
      cv.notify_all();
      return true;
    };
    std::vector<uint64_t> ids;
    for (uint32_t i = 0; i < kRows; ++i) {
      EngineRequest r;
      r.max_tokens = kGen;
      r.prompt = testing::SaltedPrompt(kPrompt, 20 + i);
      ids.push_back(engine->Submit(r, callback).value());
    }
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done == kRows; }));
    preemptions[dense] = engine->Stats().preemptions;
    EXPECT_EQ(o.pool->Stats().refcount_errors, 0u);
    for (uint32_t i = 0; i < kRows; ++i) out[dense][i] = tokens[ids[i]];
    peak[dense] = most;
    peak_blocks[dense] = most_blocks;
  }
  std::printf("dense pool: %zu rows at most at once, %llu preemptions; window pool: %zu rows, "
              "%llu preemptions, up to %zu blocks (capacity %u whole blocks)\n",
              peak[true], static_cast<unsigned long long>(preemptions[true]), peak[false],
              static_cast<unsigned long long>(preemptions[false]), peak_blocks[false],
              capacity_blocks);
  EXPECT_EQ(peak[false], kRows) << "window pool: every row at once";
  EXPECT_EQ(preemptions[false], 0u) << "window pool";
  EXPECT_GT(peak_blocks[false], capacity_blocks) << "dropped blocks hold only global pages";
  EXPECT_TRUE(peak[true] < kRows || preemptions[true] > 0) << "dense pool holds them all?";
  for (uint32_t i = 0; i < kRows; ++i) {
    EXPECT_EQ(out[false][i], out[true][i]) << "row " << i;
    EXPECT_EQ(out[false][i].size(), kGen);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyEngine, ::testing::Values(Gemma3, Phi3),
                         [](const auto& info) { return info.param().arch; });

}  // namespace
}  // namespace kvtier
