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
#include <string>
#include <vector>

#include "kvtier/block_pool.h"
#include "kvtier/engine.h"
#include "kvtier/gguf.h"
#include "kvtier/model.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/ssd_tier.h"
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

// A pool of `blocks` blocks of `block_tokens` tokens (f16) in `m`'s KV shape: window layers in
// their own pages, dropped outside the window (as serve makes it), unless `dense` (every row
// kept: the reference a run without cache uses).
inline std::shared_ptr<BlockPool> ModelPool(const Model& m, uint64_t blocks, bool dense = false,
                                            uint32_t block_tokens = 16) {
  BlockPoolOptions o;
  o.shape = m.config().kv_shape();
  o.block_tokens = block_tokens;
  if (!dense) o.layer_window = m.config().layer_windows();
  o.capacity_bytes =
      blocks * KvBlockLayout::Make(o.shape, o.k_format, o.v_format, block_tokens, o.layer_window)
                   ->block_stride;
  return BlockPool::Create(o).value();
}

// A pool of `blocks` blocks of `block_tokens` tokens in the bundled model's KV shape (f16).
inline std::shared_ptr<BlockPool> BundledPool(uint64_t blocks, uint32_t block_tokens = 16) {
  return ModelPool(*Bundled().model, blocks, /*dense=*/false, block_tokens);
}

// n tokens of a pattern that `salt` shifts: token i is (31 i + 7 salt + 1) mod 256.
inline std::vector<int32_t> SaltedPrompt(uint32_t n, uint32_t salt) {
  std::vector<int32_t> p(n);
  for (uint32_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>((i * 31 + salt * 7 + 1) % 256);
  return p;
}

// A RAM prefix cache of `budget_bytes` over an SSD tier in `dir` (its index read from the files
// there, no log lines), as a server opens them; the cache shares the tier.
struct TieredCache {
  std::shared_ptr<SsdTier> tier;
  std::unique_ptr<PrefixCache> cache;
};
inline TieredCache OpenTieredCache(const std::string& dir, uint64_t budget_bytes = 64ull << 20) {
  SsdTierOptions so;
  so.dir = dir;
  so.log = false;
  TieredCache t;
  t.tier = SsdTier::Open(so).value();
  PrefixCacheOptions po;
  po.memory_budget_bytes = budget_bytes;
  po.lower_tier = t.tier;
  t.cache = PrefixCache::Create(po).value();
  return t;
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
