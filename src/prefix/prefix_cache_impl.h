// PrefixCache::Impl: shared by prefix_cache.cc (blocks) and prefix_state.cc (recurrent-state
// snapshots). Internal to src/prefix. `mu` guards everything but `opt` and `evict_cb`.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "kvtier/prefix_cache.h"
#include "prefix/radix_tree.h"
#include "prefix/state_index.h"

namespace kvtier {

namespace prefix {
// Microseconds since t0, saturated (PrefixFetchResult::Times).
inline uint32_t MicrosSince(std::chrono::steady_clock::time_point t0) {
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  return us < 0 ? 0 : us > 0xffffffffll ? 0xffffffffu : static_cast<uint32_t>(us);
}
}  // namespace prefix

using prefix::Match;
using prefix::Namespace;
using prefix::Node;
using prefix::Plan;
using prefix::PlanStep;
using prefix::RadixTree;

struct PrefixCache::Impl {
  explicit Impl(PrefixCacheOptions o) : opt(std::move(o)) {
    if (opt.lower_tier) {
      evict_cb = [user = opt.on_evict, tier = opt.lower_tier](const EvictedBlock& b) {
        if (user) user(b);
        tier->Spill(b);
      };
    } else {
      evict_cb = opt.on_evict;
    }
  }

  // The namespace for these formats and block size, created (with its own pool when
  // `pool` is null) if missing. Requires mu.
  Result<Namespace*> GetNamespace(const ModelFingerprint& model, const KvShape& shape,
                                  const Format& k, const Format& v, uint32_t block_tokens,
                                  std::shared_ptr<BlockPool> pool);
  // Evicts LRU leaves older than max_tick until bytes + reserved + need <= budget. Requires mu.
  bool MakeRoom(uint64_t need, uint64_t max_tick, uint32_t* evicted);
  uint64_t EvictOne(uint64_t max_tick);
  // Evicts the older of the LRU leaf and the LRU snapshot (tick < max_tick); returns the bytes
  // freed (0: nothing could go) and sets *block when a block went. Requires mu.
  uint64_t EvictAny(uint64_t max_tick, bool* block);
  // Removes snapshot `key`, queueing it for the lower tier. Requires mu.
  uint64_t EvictState(const BlockKey& key);
  // Hands the queued snapshots to the lower tier. Takes mu itself; call without it.
  void DrainStateSpills();
  // Touches the nodes `plan` uses (a root-first chain) with `stamp`. Requires mu.
  void ProtectPlan(const Plan& plan, uint64_t stamp) {
    std::vector<Node*> path;
    for (const PlanStep& s : plan.steps) {
      if (s.node != nullptr) path.push_back(s.node);
    }
    tree.Touch(path, stamp);
  }
  std::vector<const std::vector<int32_t>*> PinLists(const ModelFingerprint& model) const;
  Result<PrefixStoreResult> Store(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                  const SequenceCache& seq);
  Status Fail(Status s) {
    ++stats.failed_stores;
    return s;
  }

  // Longest RAM match of `tokens` over the model's namespaces of pool's shape. Requires mu.
  uint32_t RamMatch(const ModelFingerprint& model, std::span<const int32_t> tokens,
                    const BlockPool& pool);
  // Reads the lower tier's longest chain for `tokens` into RAM when it beats `ram` tokens.
  // Best effort: failures only count. Takes mu itself. When the chain was read but RAM
  // cannot take it (larger than the budget, or the rest pinned or in use), *direct gets it
  // as a sequence (owner kPrefixCache, of the chain's pool) of *direct_matched request
  // tokens, and *direct_end tells whether a stored entry ends there.
  void Promote(const ModelFingerprint& model, std::span<const int32_t> tokens,
               const std::shared_ptr<BlockPool>& pool, uint32_t ram, SequenceCache* direct,
               uint32_t* direct_matched, bool* direct_end);
  // Hands the first tokens.size() tokens of `seq` to the lower tier, block by block, in its
  // own pool's formats (an entry RAM cannot hold). Requires mu and a lower tier.
  uint32_t SpillSequence(const ModelFingerprint& model, std::span<const int32_t> tokens,
                         const SequenceCache& seq);
  // Hands the nodes of `path` whose plan step took a block to the lower tier (write-through).
  // Requires mu and a lower tier.
  uint32_t SpillPlan(const Plan& plan, const std::vector<Node*>& path);

  // Fetch without the snapshot rule (PrefixCache::Fetch adds it). Takes mu itself.
  Result<PrefixFetchResult> FetchBlocks(const ModelFingerprint& model,
                                        std::span<const int32_t> tokens,
                                        const std::shared_ptr<BlockPool>& pool);
  // A fetch answered from lower-tier blocks RAM could not keep (see Promote).
  Result<PrefixFetchResult> FetchDirect(std::span<const int32_t> tokens,
                                        const std::shared_ptr<BlockPool>& pool,
                                        SequenceCache direct, uint32_t matched, bool entry_end);

  const PrefixCacheOptions opt;
  EvictionCallback evict_cb;  // opt.on_evict, then the lower tier's Spill
  mutable std::mutex mu;
  RadixTree tree;
  prefix::StateIndex states;  // recurrent-state snapshots, in the same budget and LRU
  // Snapshots evicted (or written through) under mu, spilled after it is released.
  std::vector<std::pair<prefix::StateIndex::Entry, bool>> state_spills;
  uint64_t tick = 0;
  uint64_t reserved = 0;  // bytes promised to stores converting outside the lock
  std::vector<std::pair<ModelFingerprint, std::vector<int32_t>>> pins;
  PrefixCacheStats stats;
};

}  // namespace kvtier
