// The newer families' cache objects through the remote tier (label `redis`: a redis-server on
// a loopback port) and the SSD tier after a restart, each time into a fresh engine, prefix
// cache and tier that share nothing with the first but the Redis (or the directory):
//  - qwen35: a cold request, then on the fresh engine a hit that resumes from the snapshot read
//    from Redis, greedy tokens equal to the cold ones (and to a run without any cache); a
//    snapshot blob truncated or with a payload bit flipped is a counted miss with the right
//    tokens.
//  - gemma3 (window layers): a conversation past the window drops window rows of its early
//    blocks; a later prompt matching into them resumes from the last point whose blocks carry
//    their window rows (the block headers' flag through RAM, SSD and Redis), same tokens.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "engine/engine_test_util.h"
#include "kvtier/engine.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/remote_tier.h"
#include "kvtier/ssd_tier.h"
#include "kvtier/test_model.h"
#include "model/model_test_util.h"
#include "remote/redis_test_util.h"

namespace kvtier {
namespace {

using Loaded = testing::TinyModel;
using testing::ModelPool;
using testing::SaltedPrompt;

Loaded LoadConfig(const TestModelConfig& c) { return testing::LoadTestModel(c, c.arch).value(); }

// 8 layers (attention at 3 and 7), DeltaNet with 2 q/k and 4 v heads of 16.
const Model& Qwen35() {
  static const Loaded m = [] {
    TestModelConfig c = testing::Qwen35BatchConfig();
    c.ctx = 1024;
    return LoadConfig(c);
  }();
  return *m.model;
}

// Window 8 on two of every three layers (the engine tests' gemma3).
const Model& Gemma3() {
  static const Loaded m = LoadConfig(testing::Gemma3EngineConfig());
  return *m.model;
}

struct Outcome {
  std::vector<int32_t> tokens;
  uint32_t cached = 0;
};

Outcome Submit(Engine& e, const std::vector<int32_t>& prompt, uint32_t n) {
  testing::EventSink sink;
  EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  const uint64_t id = e.Submit(r, sink.For()).value();
  sink.Wait(1);
  EXPECT_EQ(sink.last[id].finish, FinishReason::kLength) << sink.last[id].error.ToString();
  return {sink.tokens[id], sink.last[id].cached_tokens};
}

// One request through an engine without a prefix cache (a dense pool): the reference.
std::vector<int32_t> Solo(const Model& m, const std::vector<int32_t>& prompt, uint32_t n) {
  EngineOptions o;
  o.pool = ModelPool(m, 256, /*dense=*/true);
  o.threads = 2;
  o.prefill_step = 512;
  auto engine = Engine::Create(m, o).value();
  return Submit(*engine, prompt, n).tokens;
}

// One replica: a tier (remote, SSD or none), a prefix cache over it, an engine.
struct Replica {
  Replica(const Model& m, std::shared_ptr<LowerTier> lower) : tier(std::move(lower)) {
    PrefixCacheOptions po;
    po.memory_budget_bytes = 64ull << 20;
    po.lower_tier = tier;
    po.write_policy = CacheWritePolicy::kWriteThrough;
    cache = PrefixCache::Create(po).value();
    EngineOptions o;
    o.pool = ModelPool(m, 512);
    o.prefix_cache = cache.get();
    o.prefill_step = 7;  // several chunks per prompt, each past gemma3's window
    o.threads = 2;
    engine = Engine::Create(m, o).value();
  }
  ~Replica() {
    engine.reset();  // the last stores first
    cache.reset();
  }
  std::shared_ptr<LowerTier> tier;
  std::unique_ptr<PrefixCache> cache;
  std::unique_ptr<Engine> engine;
};

std::shared_ptr<RemoteTier> Remote(const std::string& url) {
  RemoteTierOptions o;
  o.url = url;
  o.backoff_min_ms = 20;
  o.backoff_max_ms = 100;
  o.namespace_refresh_ms = 0;
  o.log = false;
  return RemoteTier::Open(o).value();
}

TEST(RemoteEngine, Qwen35HitFromRedisAloneResumesFromTheSnapshot) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisProcess redis;
  const Model& m = Qwen35();
  constexpr uint32_t kGen = 10;
  const std::vector<int32_t> a = SaltedPrompt(40, 7), b = SaltedPrompt(50, 8),
                             c = SaltedPrompt(45, 9);
  std::vector<int32_t> cold_a;
  {  // Replica A computes everything; write-through sends blocks and snapshots to Redis.
    auto tier = Remote(redis.url());
    Replica r(m, tier);
    cold_a = Submit(*r.engine, a, kGen).tokens;
    Submit(*r.engine, b, kGen);
    Submit(*r.engine, c, kGen);
    r.engine.reset();
    tier->Flush();
    EXPECT_GE(tier->Stats().state_written, 6u) << "prompt and conversation, each request";
  }
  EXPECT_EQ(cold_a, Solo(m, a, kGen));
  EXPECT_GE(std::set<int32_t>(cold_a.begin(), cold_a.end()).size(), 3u);  // not degenerate

  // Replica B: a fresh engine, cache and tier; only Redis in common.
  auto tier = Remote(redis.url());
  Replica r(m, tier);
  const Outcome warm = Submit(*r.engine, a, kGen);
  EXPECT_EQ(warm.cached, a.size() - 1) << "K/V blocks and the prompt's snapshot from Redis";
  EXPECT_EQ(warm.tokens, cold_a) << "resumed from the remote snapshot";
  EXPECT_GE(tier->Stats().state_hits, 1u);
  EXPECT_GE(r.cache->Stats().state_tier_hits, 1u);

  // b's prompt snapshot (position 49): a payload bit flipped; c's (44): truncated.
  auto key_of = [&](const std::vector<int32_t>& t) {
    // The remote tier's snapshot key (docs/remote-tier.md): kvt:1:st:<state key>.
    return "kvt:1:st:" +
           StateSnapshotKey(m.fingerprint(), std::span<const int32_t>(t).first(t.size() - 1))
               .ToHex();
  };
  std::string v(redis.Cmd({"GET", key_of(b)}).str());
  ASSERT_GT(v.size(), 1000u);
  v[v.size() / 2] ^= 0x08;
  ASSERT_FALSE(redis.Cmd({"SET", key_of(b), v}).is_error());
  v = std::string(redis.Cmd({"GET", key_of(c)}).str());
  ASSERT_FALSE(redis.Cmd({"SET", key_of(c), v.substr(0, v.size() / 3)}).is_error());
  const Outcome damaged_b = Submit(*r.engine, b, kGen);
  const Outcome damaged_c = Submit(*r.engine, c, kGen);
  EXPECT_EQ(damaged_b.cached, 0u) << "no other snapshot of b lies before its prompt's";
  EXPECT_EQ(damaged_c.cached, 0u);
  EXPECT_EQ(damaged_b.tokens, Solo(m, b, kGen)) << "a corrupt snapshot is never used";
  EXPECT_EQ(damaged_c.tokens, Solo(m, c, kGen)) << "a truncated snapshot is never used";
  EXPECT_EQ(tier->Stats().state_misses_by[static_cast<int>(RemoteMiss::kCorrupt)], 2u);
}

// gemma3: `first` generates 60 tokens (the conversation's early blocks lose their window
// rows); `second` = first + 35 of them + 6 new tokens matches 75 stored tokens, but may
// resume only where the window rows are all there.
struct WindowCase {
  std::vector<int32_t> first, second;
};

WindowCase MakeWindowCase(const Model& m) {
  WindowCase w;
  w.first = SaltedPrompt(40, 3);
  const std::vector<int32_t> gen = Solo(m, w.first, 60);
  w.second = w.first;
  w.second.insert(w.second.end(), gen.begin(), gen.begin() + 35);
  for (int32_t t : SaltedPrompt(6, 4)) w.second.push_back(t);
  return w;
}

void ExpectWindowResume(const Model& m, const WindowCase& w, const Outcome& got,
                        const char* what) {
  EXPECT_EQ(got.tokens, Solo(m, w.second, 16)) << what;
  EXPECT_GE(got.cached, 32u) << what << ": the first prompt's blocks are a resume point";
  EXPECT_LT(got.cached, 75u) << what << ": the match lies where window rows were dropped";
}

TEST(RemoteEngine, Gemma3WindowBlocksThroughRedisResumeWhereTheirRowsAre) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisProcess redis;
  const Model& m = Gemma3();
  const WindowCase w = MakeWindowCase(m);
  {
    auto tier = Remote(redis.url());
    Replica r(m, tier);
    Submit(*r.engine, w.first, 60);
    EXPECT_GT(r.engine->Stats().finished, 0u);
    r.engine.reset();
    tier->Flush();
  }
  auto tier = Remote(redis.url());
  Replica r(m, tier);
  ExpectWindowResume(m, w, Submit(*r.engine, w.second, 16), "remote hit");
  EXPECT_GT(tier->Stats().hits, 0u);
}

TEST(RemoteEngine, Gemma3WindowBlocksThroughSsdAfterARestartResumeWhereTheirRowsAre) {
  const Model& m = Gemma3();
  const WindowCase w = MakeWindowCase(m);
  char tmpl[] = "/tmp/kvtier_window_ssd_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto open = [&] {
    SsdTierOptions so;
    so.dir = dir;
    so.log = false;
    return SsdTier::Open(so).value();
  };
  {
    std::shared_ptr<SsdTier> tier = open();
    Replica r(m, tier);
    Submit(*r.engine, w.first, 60);
    r.engine.reset();
    tier->Flush();
  }
  {
    std::shared_ptr<SsdTier> tier = open();
    Replica r(m, tier);
    ExpectWindowResume(m, w, Submit(*r.engine, w.second, 16), "SSD hit after a restart");
    EXPECT_GT(tier->Stats().loaded_blocks, 0u);
  }
  {  // RAM: the same replica.
    Replica r(m, nullptr);
    Submit(*r.engine, w.first, 60);
    ExpectWindowResume(m, w, Submit(*r.engine, w.second, 16), "RAM hit");
  }
  (void)std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace kvtier
