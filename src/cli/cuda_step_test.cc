// `kvtier serve --device cuda`'s engine path without HTTP (label `cuda`): the bundled model
// through OpenCudaStep and the engine with a prefix cache. A prompt cold, then the same prompt
// again (its K/V uploaded from the host pool: a cache hit) and extended by one token: the
// greedy tokens of the repeat equal the cold ones, and several prompts at once give each the
// tokens it gets alone. Skips where OpenCudaStep cannot start (no CUDA backend in the build, no
// usable GPU).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

#include "cli/cuda_step.h"
#include "kvtier/engine.h"
#include "kvtier/gguf.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/tokenizer.h"

namespace kvtier::cli {
namespace {

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
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return last.size() >= n; }));
  }
};

TEST(CudaStep, ACacheHitGivesTheColdTokensAndRowsTheirSoloTokens) {
  std::shared_ptr<GgufFile> f =
      GgufFile::Open(KVTIER_SOURCE_DIR "/models/kvtier-austen-30m.gguf").value();
  auto model = Model::FromGguf(f).value();
  auto tok = Tokenizer::FromGguf(*f).value();
  BlockPoolOptions po;
  po.shape = model->config().kv_shape();
  po.block_tokens = 16;
  po.capacity_bytes = 256ull << 20;
  auto pool = BlockPool::Create(po).value();
  auto backend = OpenCudaStep("cuda", *model, pool, 1024);
  if (!backend.ok()) GTEST_SKIP() << backend.status().ToString();
  PrefixCacheOptions co;
  co.memory_budget_bytes = 64ull << 20;
  auto cache = PrefixCache::Create(co).value();
  EngineOptions o;
  o.pool = pool;
  o.prefix_cache = cache.get();
  o.max_num_seqs = 4;
  o.prefill_step = 64;
  o.backend = backend->get();
  auto engine = Engine::Create(*model, o).value();
  auto greedy = [](std::vector<int32_t> p, uint32_t n) {
    EngineRequest r;
    r.prompt = std::move(p);
    r.max_tokens = n;
    return r;
  };
  const char* texts[] = {
      ("It is a truth universally acknowledged, that a single man in possession of a good "
       "fortune, must be in want of a wife. However little known the feelings or views of "),
      "Captain Wentworth had no fortune. He had been lucky in his profession; but ",
      "The evening passed quietly; Elinor read aloud while Marianne ",
  };
  std::vector<std::vector<int32_t>> prompts;
  for (const char* t : texts) prompts.push_back(tok->Encode(t, false, false));
  // Each prompt alone, cold.
  Sink sink;
  std::vector<uint64_t> alone;
  for (const auto& p : prompts) {
    alone.push_back(engine->Submit(greedy(p, 24), sink.For()).value());
    sink.Wait(alone.size());
  }
  // The first again (a hit on its stored K/V), then all three at once (hits too).
  const uint64_t again = engine->Submit(greedy(prompts[0], 24), sink.For()).value();
  sink.Wait(4);
  EXPECT_GT(sink.last[again].cached_tokens, 0u);
  EXPECT_EQ(sink.tokens[again], sink.tokens[alone[0]]);
  std::vector<uint64_t> batch;
  for (const auto& p : prompts) batch.push_back(engine->Submit(greedy(p, 24), sink.For()).value());
  sink.Wait(7);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(sink.last[batch[i]].finish, FinishReason::kLength)
        << sink.last[batch[i]].error.ToString();
    EXPECT_EQ(sink.tokens[batch[i]], sink.tokens[alone[i]]) << "prompt " << i;
  }
}

}  // namespace
}  // namespace kvtier::cli
