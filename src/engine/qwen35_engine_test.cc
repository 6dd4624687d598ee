// qwen35 (hybrid Gated DeltaNet) through the engine and every cache tier: greedy tokens equal
// a run without any cache (each request alone) for a cold request, an exact RAM hit, a
// continued conversation (resumes from the conversation's snapshot; its short tail in one
// step, its snapshot at the prompt's end, where a later request leaving its reply resumes), a
// prefix hit that falls between two snapshots (resumes from the earlier one, recomputing the
// K/V after it), several rows batched in one step, preempted rows, and an SSD hit after a
// restart; a corrupted snapshot file is a counted miss with the right tokens.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <unistd.h>

#include "engine/engine_test_util.h"
#include "kvtier/engine.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/ssd_tier.h"
#include "kvtier/test_model.h"
#include "model/model_test_util.h"

namespace kvtier {
namespace {

// qwen35's batch shape (8 layers, attention at 3 and 7; DeltaNet with 2 q/k and 4 v heads of
// 64), loaded once.
const testing::TinyModel& Qwen35() {
  static const testing::TinyModel m = [] {
    TestModelConfig c = testing::Qwen35BatchConfig();
    c.ctx = 1024;
    return testing::LoadTestModel(c, "qwen35").value();
  }();
  return m;
}

using testing::SaltedPrompt;

using Sink = testing::EventSink;

// One request through an engine without a prefix cache: the reference.
std::vector<int32_t> Solo(const std::vector<int32_t>& prompt, uint32_t n) {
  const Model& m = *Qwen35().model;
  EngineOptions o;
  o.pool = testing::ModelPool(m, 256);
  o.threads = 2;
  o.prefill_step = 512;
  auto engine = Engine::Create(m, o).value();
  Sink sink;
  EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  const uint64_t id = engine->Submit(r, sink.For()).value();
  sink.Wait(1);
  EXPECT_EQ(sink.last[id].finish, FinishReason::kLength) << sink.last[id].error.ToString();
  return sink.tokens[id];
}

struct Outcome {
  std::vector<int32_t> tokens;
  uint32_t cached = 0;
};

Outcome Submit(Engine& e, const std::vector<int32_t>& prompt, uint32_t n) {
  Sink sink;
  EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  const uint64_t id = e.Submit(r, sink.For()).value();
  sink.Wait(1);
  EXPECT_EQ(sink.last[id].finish, FinishReason::kLength) << sink.last[id].error.ToString();
  return {sink.tokens[id], sink.last[id].cached_tokens};
}

TEST(Qwen35Engine, RamHitsResumeFromTheLongestSnapshotAtOrBeforeTheMatch) {
  const Model& m = *Qwen35().model;
  PrefixCacheOptions po;
  po.memory_budget_bytes = 64ull << 20;
  auto cache = PrefixCache::Create(po).value();
  EngineOptions o;
  o.pool = testing::ModelPool(m, 512);
  o.prefix_cache = cache.get();
  o.prefill_step = 7;  // several chunks per prompt
  o.threads = 2;
  auto engine = Engine::Create(m, o).value();
  constexpr uint32_t kGen = 12;
  const std::vector<int32_t> a = SaltedPrompt(43, 1);
  const std::vector<int32_t> solo_a = Solo(a, kGen);
  EXPECT_GE(std::set<int32_t>(solo_a.begin(), solo_a.end()).size(), 3u);  // not degenerate

  const Outcome cold = Submit(*engine, a, kGen);
  EXPECT_EQ(cold.cached, 0u);
  EXPECT_EQ(cold.tokens, solo_a) << "cold";
  const Outcome exact = Submit(*engine, a, kGen);  // the prompt's snapshot at 42
  EXPECT_EQ(exact.cached, a.size() - 1);
  EXPECT_EQ(exact.tokens, solo_a) << "exact RAM hit";

  // The conversation went on: a + 11 generated tokens have K/V and a snapshot at 54.
  std::vector<int32_t> b = a;
  b.insert(b.end(), solo_a.begin(), solo_a.end() - 1);
  for (int32_t t : SaltedPrompt(9, 2)) b.push_back(t);
  const uint64_t steps_before = engine->Stats().steps;
  const Outcome next_turn = Submit(*engine, b, kGen);
  EXPECT_EQ(next_turn.cached, a.size() + kGen - 1);
  const std::vector<int32_t> solo_b = Solo(b, kGen);
  EXPECT_EQ(next_turn.tokens, solo_b) << "next turn";
  // Its 9-token tail (<= kShortTailTokens) ran in chunks of prefill_step (7 + 2) with no cut
  // at the prompt's last token but one (7 + 1 + 1), then kGen - 1 decode steps.
  const size_t tail = b.size() - next_turn.cached;
  ASSERT_EQ(tail, 9u);
  EXPECT_EQ(engine->Stats().steps - steps_before, (tail + 6) / 7 + kGen - 1);
  // Its snapshot is at the prompt's end: a request that leaves b's reply after 2 tokens
  // resumes there (not at the conversation's 54).
  std::vector<int32_t> d = b;
  d.insert(d.end(), solo_b.begin(), solo_b.begin() + 2);
  d.push_back((solo_b[2] + 1) % 256);
  d.push_back(5);
  const Outcome off_reply = Submit(*engine, d, kGen);
  EXPECT_EQ(off_reply.cached, b.size()) << "b's snapshot at its prompt's end";
  EXPECT_EQ(off_reply.tokens, Solo(d, kGen)) << "a hit that leaves b's reply";
  // An exact repeat of b: no snapshot at b.size() - 1, so it resumes from the conversation's
  // at 54 and computes the short tail again.
  const Outcome repeat_b = Submit(*engine, b, kGen);
  EXPECT_EQ(repeat_b.cached, a.size() + kGen - 1);
  EXPECT_EQ(repeat_b.tokens, solo_b) << "exact repeat of a short-tail prompt";

  // K/V match 48 tokens (a + 5 generated), snapshots at 42 and 54: resumes from 42.
  std::vector<int32_t> c = a;
  c.insert(c.end(), solo_a.begin(), solo_a.begin() + 5);
  for (int32_t t : SaltedPrompt(6, 3)) c.push_back((t + 1) % 256 == solo_a[5] ? t + 2 : t + 1);
  ASSERT_NE(c[48], solo_a[5]);
  const PrefixCacheStats before = cache->Stats();
  const Outcome between = Submit(*engine, c, kGen);
  EXPECT_EQ(between.cached, a.size() - 1) << "the earlier snapshot";
  EXPECT_EQ(between.tokens, Solo(c, kGen)) << "a hit between two snapshots";
  const PrefixCacheStats after = cache->Stats();
  EXPECT_EQ(after.state_hits, before.state_hits + 1);
  EXPECT_GT(after.states, 0u);
  EXPECT_GT(after.state_bytes, 0u);
  EXPECT_TRUE(cache->CheckInvariants().ok());
}

TEST(Qwen35Engine, BatchedAndPreemptedRowsGiveTheSoloTokens) {
  const Model& m = *Qwen35().model;
  PrefixCacheOptions po;
  po.memory_budget_bytes = 64ull << 20;
  auto cache = PrefixCache::Create(po).value();
  EngineOptions o;
  o.pool = testing::ModelPool(m, 9);  // 144 tokens: four rows of 40-70 tokens cannot all fit
  o.prefix_cache = cache.get();
  o.prefill_step = 16;
  o.threads = 2;
  o.max_num_seqs = 4;
  auto engine = Engine::Create(m, o).value();
  constexpr uint32_t kGen = 16;
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 4; ++i) prompts.push_back(SaltedPrompt(24 + 8 * i, 20 + i));
  Sink sink;
  std::vector<uint64_t> ids;
  for (const auto& p : prompts) {
    EngineRequest r;
    r.prompt = p;
    r.max_tokens = kGen;
    ids.push_back(engine->Submit(r, sink.For()).value());
  }
  sink.Wait(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(sink.last[ids[i]].finish, FinishReason::kLength)
        << sink.last[ids[i]].error.ToString();
    EXPECT_EQ(sink.tokens[ids[i]], Solo(prompts[i], kGen)) << "row " << i;
  }
  EXPECT_GT(engine->Stats().preemptions, 0u) << "the pool was meant to force preemption";
}

TEST(Qwen35Engine, SsdHitAfterARestartAndACorruptSnapshotIsAMiss) {
  const Model& m = *Qwen35().model;
  char tmpl[] = "/tmp/kvtier_qwen35_ssd_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  constexpr uint32_t kGen = 10;
  const std::vector<int32_t> a = SaltedPrompt(40, 7), b = SaltedPrompt(50, 8);
  {  // First process: everything goes down to the SSD tier.
    auto [tier, cache] = testing::OpenTieredCache(dir);
    EngineOptions o;
    o.pool = testing::ModelPool(m, 256);
    o.prefix_cache = cache.get();
    o.threads = 2;
    {
      auto engine = Engine::Create(m, o).value();
      Submit(*engine, a, kGen);
      Submit(*engine, b, kGen);
    }
    cache->Evict(UINT64_MAX);
    tier->Flush();
    EXPECT_GE(tier->Stats().spilled_states, 4u);  // prompt and conversation, each request
  }
  // Damage b's snapshots (every state file whose body holds position 49 or 59).
  auto [tier, cache] = testing::OpenTieredCache(dir);
  EXPECT_GE(tier->Stats().states, 4u);
  EngineOptions o;
  o.pool = testing::ModelPool(m, 256);
  o.prefix_cache = cache.get();
  o.threads = 2;
  auto engine = Engine::Create(m, o).value();
  const Outcome warm = Submit(*engine, a, kGen);
  EXPECT_EQ(warm.cached, a.size() - 1) << "SSD hit: K/V blocks and the prompt's snapshot";
  EXPECT_EQ(warm.tokens, Solo(a, kGen)) << "SSD hit after a restart";
  EXPECT_GE(tier->Stats().loaded_states, 1u);
  // b's prompt snapshot, flipped on disk: a counted miss, still the right tokens.
  const BlockKey key =
      StateSnapshotKey(m.fingerprint(), std::span<const int32_t>(b).first(b.size() - 1));
  const std::string path = dir + "/states/" + key.ToHex() + ".kvst";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    f.seekp(200);
    char ch = 0;
    f.seekg(200);
    f.read(&ch, 1);
    ch ^= 0x08;
    f.seekp(200);
    f.write(&ch, 1);
  }
  const Outcome damaged = Submit(*engine, b, kGen);
  EXPECT_EQ(damaged.cached, 0u) << "no other snapshot of b lies before its prompt's";
  EXPECT_EQ(damaged.tokens, Solo(b, kGen)) << "a corrupt snapshot is never used";
  EXPECT_EQ(tier->Stats().corrupt_states, 1u);
  engine.reset();
  cache.reset();
  tier.reset();
  (void)std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace kvtier
