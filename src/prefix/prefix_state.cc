// PrefixCache's recurrent-state snapshots (kvtier/prefix_cache.h: StoreState, Fetch with
// recurrent_state): kept in a StateIndex beside the tree, in the same budget and LRU order,
// spilled to the lower tier after the lock is released. The rule a fetch applies: resume from
// the longest snapshot at or before the reused K/V; the K/V after it is dropped (recomputed).
#include <algorithm>
#include <string>

#include "prefix/prefix_cache_impl.h"

namespace kvtier {

uint64_t PrefixCache::Impl::EvictState(const BlockKey& key) {
  prefix::StateIndex::Entry e = states.Remove(key);
  const uint64_t b = e.snapshot->bytes();
  ++stats.state_evictions;
  if (opt.lower_tier) state_spills.emplace_back(std::move(e), false);
  return b;
}

uint64_t PrefixCache::Impl::EvictAny(uint64_t max_tick, bool* block) {
  const Node* leaf = tree.EvictionCandidate(max_tick);
  const prefix::StateIndex::Entry* st = states.EvictionCandidate(max_tick);
  if (st != nullptr && (leaf == nullptr || st->tick <= leaf->tick)) {
    *block = false;
    return EvictState(st->key);
  }
  *block = leaf != nullptr;
  return leaf == nullptr ? 0 : EvictOne(max_tick);
}

void PrefixCache::Impl::DrainStateSpills() {
  if (!opt.lower_tier) return;
  std::vector<std::pair<prefix::StateIndex::Entry, bool>> out;
  {
    std::lock_guard<std::mutex> lock(mu);
    out.swap(state_spills);
  }
  for (auto& [e, through] : out) opt.lower_tier->SpillState(e.model, e.key, e.snapshot);
}

Status PrefixCache::StoreState(const ModelFingerprint& model, std::span<const int32_t> tokens,
                               std::shared_ptr<const StateSnapshot> snapshot) {
  if (snapshot == nullptr) return Status::InvalidArgument("prefix cache store state: no snapshot");
  if (tokens.empty() || snapshot->position != tokens.size()) {
    return Status::InvalidArgument("prefix cache store state: the snapshot's position is " +
                                   std::to_string(snapshot->position) + ", expected " +
                                   std::to_string(tokens.size()) + " (its tokens), >= 1");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0) {
      return Status::InvalidArgument("prefix cache store state: token " + std::to_string(i) +
                                     " is " + std::to_string(tokens[i]) + " (ids are >= 0)");
    }
  }
  Impl& m = *impl_;
  if (m.opt.state_type == StateType::kBF16 && snapshot->type == StateType::kF32) {
    snapshot = std::make_shared<const StateSnapshot>(
        ConvertStateSnapshot(*snapshot, StateType::kBF16));
  }
  const BlockKey key = StateSnapshotKey(model, tokens);
  const uint64_t need = snapshot->bytes();
  Status result = Status::OK();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.states.Find(key) != nullptr) {
      m.states.Touch(key, ++m.tick);
      return Status::OK();
    }
    const uint64_t stamp = ++m.tick;
    uint32_t evicted = 0;
    const bool fits = need <= m.opt.memory_budget_bytes && m.MakeRoom(need, stamp, &evicted);
    if (fits) {
      m.states.Put(key, model, snapshot, stamp);
      ++m.stats.state_stores;
      if (m.opt.lower_tier && m.opt.write_policy == CacheWritePolicy::kWriteThrough) {
        prefix::StateIndex::Entry e;
        e.key = key;
        e.model = model;
        e.position = snapshot->position;
        e.snapshot = snapshot;
        m.state_spills.emplace_back(std::move(e), true);
      }
    } else if (m.opt.lower_tier) {
      prefix::StateIndex::Entry e;
      e.key = key;
      e.model = model;
      e.position = snapshot->position;
      e.snapshot = snapshot;
      m.state_spills.emplace_back(std::move(e), true);
      ++m.stats.state_stores;
    } else {
      ++m.stats.failed_stores;
      result = Status::ResourceExhausted(
          "prefix cache store state: a snapshot of " + std::to_string(need) +
          " bytes does not fit the budget of " + std::to_string(m.opt.memory_budget_bytes) +
          " bytes (the rest is pinned or in use)");
    }
  }
  m.DrainStateSpills();
  return result;
}

Result<PrefixFetchResult> PrefixCache::Fetch(const ModelFingerprint& model,
                                             std::span<const int32_t> tokens,
                                             const std::shared_ptr<BlockPool>& pool) {
  Result<PrefixFetchResult> r = impl_->FetchBlocks(model, tokens, pool);
  impl_->DrainStateSpills();
  return r;
}

Result<PrefixFetchResult> PrefixCache::Fetch(const ModelFingerprint& model,
                                             std::span<const int32_t> tokens,
                                             const std::shared_ptr<BlockPool>& pool,
                                             const PrefixFetchOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(PrefixFetchResult r, Fetch(model, tokens, pool));
  if (!options.recurrent_state) return r;
  Impl& m = *impl_;
  const uint32_t reused = r.reused_tokens;
  uint32_t best = 0;
  std::shared_ptr<const StateSnapshot> snap;
  bool from_tier = false;
  using Clock = std::chrono::steady_clock;
  if (reused > 0) {
    const Clock::time_point t0 = Clock::now();
    {
      std::lock_guard<std::mutex> lock(m.mu);
      const std::vector<uint32_t> pos = m.states.Positions(model, reused);
      const std::vector<BlockKey> keys = StateSnapshotKeys(model, tokens, pos);
      for (size_t i = pos.size(); i-- > 0;) {
        if (const prefix::StateIndex::Entry* e = m.states.Find(keys[i])) {
          snap = e->snapshot;
          best = pos[i];
          m.states.Touch(keys[i], ++m.tick);
          break;
        }
      }
    }
    r.times.state_us = prefix::MicrosSince(t0);
    if (m.opt.lower_tier && best < reused) {
      const Clock::time_point t1 = Clock::now();
      std::shared_ptr<const StateSnapshot> t =
          m.opt.lower_tier->FindState(model, tokens, best, reused);
      if (t != nullptr && t->position > best && t->position <= reused) {
        snap = t;
        best = t->position;
        from_tier = true;
      }
      r.times.state_tier_us = prefix::MicrosSince(t1);
    }
  }
  if (best < reused) {
    KVTIER_RETURN_IF_ERROR(r.sequence.Trim(reused - best).status());
    r.state_trimmed_tokens = reused - best;
    r.reused_tokens = best;
  }
  // The caller's copy in f32 (what a model reads); the cached one stays as it is.
  const Clock::time_point t_widen = Clock::now();
  r.state = snap == nullptr || snap->type == StateType::kF32
                ? snap
                : std::make_shared<const StateSnapshot>(ConvertStateSnapshot(*snap, StateType::kF32));
  r.times.state_widen_us = prefix::MicrosSince(t_widen);
  {
    std::lock_guard<std::mutex> lock(m.mu);
    ++m.stats.state_fetches;
    m.stats.state_hits += snap != nullptr;
    m.stats.state_tier_hits += from_tier;
    m.stats.tokens_reused -= reused - best;
  }
  if (from_tier) {
    // Promoted like blocks: the next fetch finds it in RAM (best effort).
    (void)StoreState(model, tokens.first(best), snap);
  }
  return r;
}

}  // namespace kvtier
