// The engine through a StepBackend (kvtier/step_backend.h) on the CPU. MirrorBackend keeps a
// "device" copy of the pool's blocks (bytes of its own, the same block ids), as the GPU's
// backend does: a step first makes the rows' host blocks the device's bytes, runs
// Model::Forward, copies the blocks it wrote to the device and scrambles their host bytes, so
// only SyncToHost makes them valid on the host again, and a block the host wrote reaches the
// step only through HostWritten. With continuous batching, prefix-cache hits, preemption
// into the cache and resumption, every request gets the tokens it gets alone without a cache;
// a backend that drops HostWritten does not (the copy-on-write copies never go up); a row the
// backend fails ends that request alone.
#include "kvtier/step_backend.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "engine/engine_test_util.h"
#include "engine/prefill.h"
#include "gtest/gtest.h"
#include "kvtier/batch_cache.h"
#include "kvtier/engine.h"
#include "kvtier/thread_pool.h"

namespace kvtier {
namespace {

class MirrorBackend : public StepBackend {
 public:
  MirrorBackend(const Model& m, std::shared_ptr<BlockPool> pool, bool forget_host_writes = false)
      : m_(m),
        pool_(std::move(pool)),
        stride_(pool_->layout().block_stride),
        dev_(size_t{pool_->capacity_blocks()} * stride_, 0),
        dirty_(pool_->capacity_blocks(), 0),
        forget_(forget_host_writes),
        threads_(2) {}

  // Rows whose step includes this token fail alone (-1: none).
  int32_t fail_token = -1;

  Status Forward(std::span<SequenceCache> rows, std::span<const std::span<const int32_t>> tokens,
                 float* logits, std::vector<Status>* row_status) override {
    row_status->assign(rows.size(), Status::OK());
    const uint32_t bt = pool_->block_tokens();
    std::vector<uint32_t> before(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      before[i] = rows[i].size();
      for (BlockId b : rows[i].block_ids()) Copy(dev(b), pool_->block_data(b));
    }
    std::vector<SequenceCache> v;
    for (auto& r : rows) v.push_back(std::move(r));
    Result<BatchCache> batch = BatchCache::Merge(std::move(v));
    KVTIER_RETURN_IF_ERROR(batch.status());
    const Status s = m_.Forward(*batch, tokens, false, logits, &threads_);
    for (auto& r : rows) {
      Result<SequenceCache> back = batch->Take(0);
      KVTIER_RETURN_IF_ERROR(back.status());
      r = std::move(*back);
    }
    KVTIER_RETURN_IF_ERROR(s);
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto ids = rows[i].block_ids();
      for (uint32_t b = before[i] / bt; b < (rows[i].size() + bt - 1) / bt; ++b) {
        Copy(pool_->block_data(ids[b]), dev(ids[b]));
        std::memset(pool_->block_data(ids[b]), 0x5A, stride_);  // stale until SyncToHost
        dirty_[ids[b]] = 1;
      }
      if (std::find(tokens[i].begin(), tokens[i].end(), fail_token) != tokens[i].end()) {
        (*row_status)[i] = Status::Internal("mirror: injected fault in row " + std::to_string(i));
      }
    }
    return Status::OK();
  }

  Status SyncToHost(const SequenceCache& seq) override {
    const uint32_t bt = pool_->block_tokens();
    const auto ids = seq.block_ids();
    for (size_t b = 0; b < std::min<size_t>(ids.size(), (size_t{seq.size()} + bt - 1) / bt); ++b) {
      if (dirty_[ids[b]]) Copy(dev(ids[b]), pool_->block_data(ids[b]));
      dirty_[ids[b]] = 0;
    }
    ++syncs;
    return Status::OK();
  }

  Status HostWritten(std::span<const BlockId> ids) override {
    uploads += ids.size();
    if (forget_) return Status::OK();
    for (BlockId b : ids) {
      Copy(pool_->block_data(b), dev(b));
      dirty_[b] = 0;
    }
    return Status::OK();
  }

  std::string name() const override { return "mirror (test)"; }

  uint64_t syncs = 0, uploads = 0;

 private:
  uint8_t* dev(BlockId b) { return dev_.data() + size_t(b) * stride_; }
  void Copy(const uint8_t* from, uint8_t* to) { std::memcpy(to, from, stride_); }

  const Model& m_;
  std::shared_ptr<BlockPool> pool_;
  size_t stride_;
  std::vector<uint8_t> dev_;
  std::vector<uint8_t> dirty_;
  bool forget_;
  ThreadPool threads_;
};

const Model& M() { return *testing::Bundled().model; }

// Tokens per request (the sanitizer builds run the model ~20x slower).
#if defined(KVTIER_SANITIZE)
constexpr uint32_t kTokens = 12;
#else
constexpr uint32_t kTokens = 30;
#endif

std::vector<int32_t> Prompt(int i) {
  static const char* texts[] = {
      "Anne had been a most useful friend to her sister, and ",
      "\"I cannot speak well enough to be unintelligible,\" said Catherine, ",
      "It was a fine morning in May when Mrs. Jennings arrived at the cottage with ",
      "Of all the gentlemen who had ever visited Mansfield Park, Mr. Crawford was ",
  };
  return testing::Bundled().tokenizer->Encode(texts[i % 4], false, false);
}

std::vector<int32_t> Solo(const std::vector<int32_t>& prompt, uint32_t n) {
  ThreadPool threads(2);
  auto pool = testing::BundledPool(4096);
  auto p = engine::Prefill(M(), nullptr, pool, prompt, 512, &threads).value();
  return engine::GreedyContinue(M(), p.sequence, p.logits, n, &threads).value();
}

EngineRequest Greedy(std::vector<int32_t> prompt, uint32_t n) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  return r;
}

// Four requests in a pool that cannot hold them all (preemption into the prefix cache and
// resumption), the last ones sharing the first ones' prompts (cache hits); prompt chunks of 5
// beside decode rows. Returns how many requests got their solo tokens.
int RunScenario(MirrorBackend* backend, std::shared_ptr<BlockPool> pool, PrefixCache* cache,
                uint64_t* preemptions) {
  EngineOptions o;
  o.pool = std::move(pool);
  o.prefix_cache = cache;
  o.max_num_seqs = 4;
  o.prefill_step = 5;
  o.threads = 2;
  o.backend = backend;
  auto engine = Engine::Create(M(), o).value();
  testing::EventSink sink;
  // The solo runs come first: computed between the submissions (slow under the sanitizers),
  // they let the engine finish one request before the next arrives, and nothing is preempted.
  std::vector<std::vector<int32_t>> prompts, solos;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(Prompt(i % 2));
    if (i >= 2) prompts.back().push_back(100 + i);  // extends request i - 2's prompt: a hit
    solos.push_back(Solo(prompts.back(), kTokens));
  }
  std::map<uint64_t, std::vector<int32_t>> want;
  for (int i = 0; i < 4; ++i) {
    want[engine->Submit(Greedy(prompts[i], kTokens), sink.For()).value()] = solos[i];
  }
  sink.Wait(4);
  int same = 0;
  for (const auto& [id, w] : want) {
    EXPECT_EQ(sink.last[id].finish, FinishReason::kLength) << sink.last[id].error.ToString();
    same += sink.tokens[id] == w;
  }
  *preemptions = engine->Stats().preemptions;
  return same;
}

uint64_t TightPoolBlocks() {
  // Each request fits alone; together they outgrow the pool while they decode.
  size_t longest = 0;
  for (int i = 0; i < 2; ++i) longest = std::max(longest, Prompt(i).size() + 1);
  return (longest + kTokens + 3) / 4 + 4;
}

TEST(StepBackend, TheEngineThroughAMirroredPoolGivesEveryRequestItsSoloTokens) {
  auto pool = testing::BundledPool(TightPoolBlocks(), 4);
  PrefixCacheOptions po;
  po.memory_budget_bytes = 64ull << 20;
  auto cache = PrefixCache::Create(po).value();
  MirrorBackend backend(M(), pool);
  uint64_t preemptions = 0;
  EXPECT_EQ(RunScenario(&backend, pool, cache.get(), &preemptions), 4);
  EXPECT_GT(preemptions, 0u);
  EXPECT_GT(backend.syncs, 0u);
  EXPECT_GT(backend.uploads, 0u);
  std::printf("%llu preemptions, %llu syncs, %llu blocks up\n",
              static_cast<unsigned long long>(preemptions),
              static_cast<unsigned long long>(backend.syncs),
              static_cast<unsigned long long>(backend.uploads));
}

// The control: without the uploads the device reads blocks the host wrote (copy-on-write
// copies, cache hits) as they were before: some request's tokens differ.
TEST(StepBackend, DroppingHostWritesChangesTheTokens) {
  auto pool = testing::BundledPool(TightPoolBlocks(), 4);
  PrefixCacheOptions po;
  po.memory_budget_bytes = 64ull << 20;
  auto cache = PrefixCache::Create(po).value();
  MirrorBackend backend(M(), pool, /*forget_host_writes=*/true);
  uint64_t preemptions = 0;
  EXPECT_LT(RunScenario(&backend, pool, cache.get(), &preemptions), 4);
}

TEST(StepBackend, ARowTheBackendFailsEndsThatRequestAlone) {
  auto pool = testing::BundledPool(4096);
  MirrorBackend backend(M(), pool);
  backend.fail_token = 7;
  EngineOptions o;
  o.pool = pool;
  o.max_num_seqs = 4;
  o.threads = 2;
  o.backend = &backend;
  auto engine = Engine::Create(M(), o).value();
  testing::EventSink sink;
  std::vector<int32_t> bad = Prompt(0);
  bad.push_back(7);
  const uint64_t a = engine->Submit(Greedy(bad, 8), sink.For()).value();
  const uint64_t b = engine->Submit(Greedy(Prompt(1), 8), sink.For()).value();
  sink.Wait(2);
  EXPECT_EQ(sink.last[a].finish, FinishReason::kError);
  EXPECT_NE(sink.last[a].error.message().find("injected fault"), std::string::npos)
      << sink.last[a].error.ToString();
  EXPECT_EQ(sink.last[b].finish, FinishReason::kLength);
  EXPECT_EQ(sink.tokens[b], Solo(Prompt(1), 8));
}

}  // namespace
}  // namespace kvtier
