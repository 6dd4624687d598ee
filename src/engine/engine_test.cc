// Engine on the bundled model: continuous batching gives every request the tokens it gets
// alone; prefix-cache admission reports cached tokens; a pool far too small still completes
// every request through preemption; cancellation frees the request's blocks; bad requests are
// refused by field.
#include "kvtier/engine.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>

#include "kvtier/thread_pool.h"
#include "engine/prefill.h"
#include "gtest/gtest.h"
#include "engine/engine_test_util.h"

namespace kvtier {
namespace {

// Tokens per request in the preemption test (the sanitizer builds run the model ~20x slower).
#if defined(KVTIER_SANITIZE)
constexpr uint32_t kPreemptTokens = 12;
#else
constexpr uint32_t kPreemptTokens = 40;
#endif

struct BundledRef {
  const Model* model;
  const Tokenizer* tok;
};
BundledRef B() { return {testing::Bundled().model.get(), testing::Bundled().tokenizer.get()}; }

std::shared_ptr<BlockPool> Pool(uint64_t blocks, uint32_t block_tokens = 16) {
  return testing::BundledPool(blocks, block_tokens);
}

std::vector<int32_t> Prompt(int i) {
  static const char* texts[] = {
      "Anne had been a most useful friend to her sister, and ",
      "\"I cannot speak well enough to be unintelligible,\" said Catherine, ",
      "It was a fine morning in May when Mrs. Jennings arrived at the cottage with ",
      "Of all the gentlemen who had ever visited Mansfield Park, Mr. Crawford was ",
      "The evening passed quietly; Elinor read aloud while Marianne ",
      "Captain Wentworth had no fortune. He had been lucky in his profession; but ",
  };
  return B().tok->Encode(texts[i % 6], false, false);
}

// The tokens a request gets when it runs alone, without any cache.
std::vector<int32_t> Solo(const std::vector<int32_t>& prompt, uint32_t n) {
  ThreadPool threads(2);
  auto pool = Pool(4096);
  auto p = engine::Prefill(*B().model, nullptr, pool, prompt, 512, &threads).value();
  return engine::GreedyContinue(*B().model, p.sequence, p.logits, n, &threads).value();
}

// Collects every request's events.
using Sink = testing::EventSink;

EngineRequest Greedy(std::vector<int32_t> prompt, uint32_t n) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  return r;
}

TEST(Engine, ContinuousBatchingGivesEveryRequestItsSoloTokens) {
  EngineOptions o;
  o.pool = Pool(4096);
  o.max_num_seqs = 3;
  o.prefill_step = 7;  // prompts take several steps, mixed with other rows' decode
  o.threads = 2;
  auto engine = Engine::Create(*B().model, o).value();
  Sink sink;
  std::map<uint64_t, int> which;
  for (int i = 0; i < 6; ++i) {
    which[engine->Submit(Greedy(Prompt(i), 10 + i), sink.For()).value()] = i;
  }
  sink.Wait(6);
  for (const auto& [id, i] : which) {
    EXPECT_EQ(sink.tokens[id], Solo(Prompt(i), 10 + i)) << "request " << i;
    EXPECT_EQ(sink.last[id].finish, FinishReason::kLength);
    EXPECT_EQ(sink.last[id].generated_tokens, 10u + i);
  }
  EXPECT_EQ(engine->Stats().finished, 6u);
  EXPECT_EQ(engine->Stats().preemptions, 0u);
}

// Forces a fixed token sequence (one allowed id per step) and reports completion at its end.
class ForcedTokens : public LogitConstraint {
 public:
  explicit ForcedTokens(std::vector<int32_t> seq) : seq_(std::move(seq)) {}
  void Mask(std::span<float> logits) override {
    for (size_t i = 0; i < logits.size(); ++i) {
      if (static_cast<int32_t>(i) != seq_[at_]) logits[i] = -INFINITY;
    }
  }
  bool Accept(int32_t token) override {
    EXPECT_EQ(token, seq_[at_]);
    return ++at_ == seq_.size();
  }

 private:
  std::vector<int32_t> seq_;
  size_t at_ = 0;
};

TEST(Engine, ALogitConstraintMasksItsRowOnlyAndEndsTheRequest) {
  EngineOptions o;
  o.pool = Pool(4096);
  o.threads = 2;
  auto engine = Engine::Create(*B().model, o).value();
  Sink sink;
  // Tokens the model would not pick: the ids counting down from the top of the vocabulary.
  const auto V = static_cast<int32_t>(B().model->config().n_vocab);
  const std::vector<int32_t> forced = {V - 1, V - 2, V - 3, V - 4, V - 5};
  for (int32_t t : Solo(Prompt(2), 5)) ASSERT_NE(t, V - 1);
  EngineRequest constrained = Greedy(Prompt(2), 50);
  constrained.constraint = std::make_shared<ForcedTokens>(forced);
  const uint64_t a = engine->Submit(std::move(constrained), sink.For()).value();
  const uint64_t b = engine->Submit(Greedy(Prompt(3), 9), sink.For()).value();
  sink.Wait(2);
  EXPECT_EQ(sink.tokens[a], forced);
  EXPECT_EQ(sink.last[a].finish, FinishReason::kStop);  // complete: ends before max_tokens
  EXPECT_EQ(sink.tokens[b], Solo(Prompt(3), 9));        // the other row of the batch: unmasked
  EXPECT_EQ(sink.last[b].finish, FinishReason::kLength);
}

TEST(Engine, APromptSharingACachedPrefixReportsCachedTokens) {
  PrefixCacheOptions po;
  po.memory_budget_bytes = 64ull << 20;
  auto cache = PrefixCache::Create(po).value();
  EngineOptions o;
  o.pool = Pool(4096);
  o.prefix_cache = cache.get();
  o.threads = 2;
  auto engine = Engine::Create(*B().model, o).value();
  std::vector<int32_t> system = B().tok->Encode(
      "You are a careful narrator of Regency novels. Describe each scene in the manner of the "
      "author, with attention to manners, letters and long walks. ", false, false);
  std::vector<int32_t> first = system, second = system;
  for (int32_t t : Prompt(0)) first.push_back(t);
  for (int32_t t : Prompt(1)) second.push_back(t);
  Sink sink;
  const uint64_t a = engine->Submit(Greedy(first, 8), sink.For()).value();
  sink.Wait(1);
  const uint64_t b = engine->Submit(Greedy(second, 8), sink.For()).value();
  sink.Wait(2);
  EXPECT_EQ(sink.last[a].cached_tokens, 0u);
  EXPECT_GE(sink.last[b].cached_tokens, system.size() - 1);
  EXPECT_EQ(sink.tokens[b], Solo(second, 8));
  // The same prompt again: an exact hit, all but one token cached.
  const uint64_t c = engine->Submit(Greedy(second, 8), sink.For()).value();
  sink.Wait(3);
  EXPECT_EQ(sink.last[c].cached_tokens, second.size() - 1);
  EXPECT_EQ(sink.tokens[c], sink.tokens[b]);
}

TEST(Engine, APoolFarTooSmallStillCompletesEveryRequest) {
  PrefixCacheOptions po;
  po.memory_budget_bytes = 64ull << 20;
  auto cache = PrefixCache::Create(po).value();
  // Admission reserves a request's prompt blocks and two more, so the first two requests both
  // go in; each fits the pool alone, but together they outgrow it while they decode, so one of
  // them must be preempted.
  constexpr uint32_t kBlock = 4;
  auto need = [](size_t tokens) { return tokens / kBlock + 2; };
  auto grown = [](size_t tokens) { return (tokens + kPreemptTokens + kBlock - 1) / kBlock; };
  const size_t p0 = Prompt(0).size(), p1 = Prompt(1).size();
  uint64_t capacity = need(p0) + need(p1);
  for (int i = 0; i < 6; ++i) capacity = std::max<uint64_t>(capacity, grown(Prompt(i).size()));
  ASSERT_GT(grown(p0) + grown(p1), capacity);
  EngineOptions o;
  o.pool = Pool(capacity, kBlock);
  o.prefix_cache = cache.get();
  o.max_num_seqs = 6;
  o.threads = 2;
  auto engine = Engine::Create(*B().model, o).value();
  Sink sink;
  std::map<uint64_t, int> which;
  for (int i = 0; i < 6; ++i) {
    which[engine->Submit(Greedy(Prompt(i), kPreemptTokens), sink.For()).value()] = i;
  }
  sink.Wait(6);
  for (const auto& [id, i] : which) {
    EXPECT_EQ(sink.last[id].finish, FinishReason::kLength) << sink.last[id].error.ToString();
    EXPECT_EQ(sink.tokens[id], Solo(Prompt(i), kPreemptTokens)) << "request " << i;
  }
  EXPECT_GT(engine->Stats().preemptions, 0u);
  std::printf("%llu preemptions\n", static_cast<unsigned long long>(engine->Stats().preemptions));
  EXPECT_LE(o.pool->Stats().blocks_in_use, o.pool->capacity_blocks());
}

TEST(Engine, ARequestTooBigForThePoolFailsAlone) {
  EngineOptions o;
  o.pool = Pool(2);  // 32 tokens
  o.threads = 1;
  auto engine = Engine::Create(*B().model, o).value();
  Sink sink;
  std::vector<int32_t> longp;
  for (int i = 0; i < 4; ++i) for (int32_t t : Prompt(i)) longp.push_back(t);
  const uint64_t big = engine->Submit(Greedy(longp, 4), sink.For()).value();
  const uint64_t small = engine->Submit(Greedy(Prompt(0), 4), sink.For()).value();
  sink.Wait(2);
  EXPECT_EQ(sink.last[big].finish, FinishReason::kError);
  EXPECT_EQ(sink.last[big].error.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(sink.last[small].finish, FinishReason::kLength);
  EXPECT_EQ(sink.tokens[small], Solo(Prompt(0), 4));
}

TEST(Engine, CancelFreesTheRequestsBlocks) {
  EngineOptions o;
  o.pool = Pool(4096);
  o.threads = 1;
  auto engine = Engine::Create(*B().model, o).value();
  Sink sink;
  std::atomic<int> seen{0};
  const uint64_t id = engine->Submit(Greedy(Prompt(2), 100000), [&](const EngineEvent& e) {
    if (e.finish == FinishReason::kNone) return ++seen < 5;  // the 5th token says stop
    std::lock_guard<std::mutex> lock(sink.mu);
    sink.last[e.id] = e;
    sink.cv.notify_all();
    return true;
  }).value();
  sink.Wait(1);
  EXPECT_EQ(sink.last[id].finish, FinishReason::kCancelled);
  EXPECT_EQ(seen.load(), 5);
  EXPECT_EQ(o.pool->Stats().blocks_in_use, 0u);
  // Cancel() from another thread.
  const uint64_t id2 = engine->Submit(Greedy(Prompt(3), 100000), sink.For()).value();
  engine->Cancel(id2);
  sink.Wait(2);
  EXPECT_EQ(sink.last[id2].finish, FinishReason::kCancelled);
  EXPECT_EQ(engine->Stats().cancelled, 2u);
}

TEST(Engine, BadRequestsAreRefusedByField) {
  EngineOptions o;
  o.pool = Pool(64);
  auto engine = Engine::Create(*B().model, o).value();
  auto cb = [](const EngineEvent&) { return true; };
  EXPECT_NE(engine->Submit(Greedy({}, 4), cb).status().message().find("prompt"), std::string::npos);
  EXPECT_NE(engine->Submit(Greedy({1, 999999}, 4), cb).status().message().find("token 1"),
            std::string::npos);
  EXPECT_NE(engine->Submit(Greedy({1}, 0), cb).status().message().find("max_tokens"),
            std::string::npos);
  EngineRequest bad = Greedy({1}, 4);
  bad.sampling.top_p = 2.0f;
  EXPECT_FALSE(engine->Submit(bad, cb).ok());
  o.max_num_seqs = 0;
  EXPECT_FALSE(Engine::Create(*B().model, o).ok());
  EXPECT_EQ(engine->Stats().submitted, 0u);
}

}  // namespace
}  // namespace kvtier
