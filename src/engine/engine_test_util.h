// Test-only: the bundled model with its tokenizer, loaded once per test binary, and a sink for
// an engine's events.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kvtier/block_pool.h"
#include "kvtier/engine.h"
#include "kvtier/gguf.h"
#include "kvtier/model.h"
#include "kvtier/status.h"
#include "kvtier/tokenizer.h"

namespace kvtier::testing {

struct BundledModel {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Loads models/kvtier-austen-30m.gguf (a new copy each call: fork-safe).
inline Result<BundledModel> LoadBundledModel() {
  BundledModel b;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f,
                          GgufFile::Open(KVTIER_SOURCE_DIR "/models/kvtier-austen-30m.gguf"));
  b.file = std::move(f);
  KVTIER_ASSIGN_OR_RETURN(b.model, Model::FromGguf(b.file));
  KVTIER_ASSIGN_OR_RETURN(b.tokenizer, Tokenizer::FromGguf(*b.file));
  return b;
}

// The same, loaded once (the first call must succeed).
inline const BundledModel& Bundled() {
  static const BundledModel b = LoadBundledModel().value();
  return b;
}

// A pool of `blocks` blocks of `block_tokens` tokens in the bundled model's KV shape (f16).
inline std::shared_ptr<BlockPool> BundledPool(uint64_t blocks, uint32_t block_tokens = 16) {
  BlockPoolOptions o;
  o.shape = Bundled().model->config().kv_shape();
  o.block_tokens = block_tokens;
  o.capacity_bytes =
      blocks * KvBlockLayout::Make(o.shape, o.k_format, o.v_format, block_tokens)->block_stride;
  return BlockPool::Create(o).value();
}

// Collects an engine's events per request: the tokens, then the final event; checks the
// callback contract (tokens >= 0, one final event with token -1). Wait(n): n requests ended.
struct EventSink {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, EngineEvent> last;
  EngineCallback For() {
    return [this](const EngineEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (e.finish == FinishReason::kNone) {
        EXPECT_GE(e.token, 0);
        tokens[e.id].push_back(e.token);
      } else {
        EXPECT_EQ(e.token, -1);
        EXPECT_FALSE(last.contains(e.id)) << "two final events";
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

}  // namespace kvtier::testing
