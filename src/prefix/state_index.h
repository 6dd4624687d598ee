// StateIndex: the prefix cache's recurrent-state snapshots (kvtier/state_snapshot.h), kept
// beside the radix tree's blocks: by key, in LRU order, with the positions each model has
// snapshots at (so a fetch hashes only those prefixes of its tokens). Internal to src/prefix.
// Not thread-safe: PrefixCache::Impl's mutex guards it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvtier/state_snapshot.h"

namespace kvtier::prefix {

class StateIndex {
 public:
  struct Entry {
    BlockKey key;
    ModelFingerprint model;
    uint32_t position = 0;
    std::shared_ptr<const StateSnapshot> snapshot;
    uint64_t tick = 0;  // last touch (the tree's tick counter)
  };

  // Adds the snapshot (or, when the key is present, only touches it). True when added.
  bool Put(const BlockKey& key, const ModelFingerprint& model,
           std::shared_ptr<const StateSnapshot> s, uint64_t tick);
  const Entry* Find(const BlockKey& key) const;
  void Touch(const BlockKey& key, uint64_t tick);
  // Positions <= max_position with a snapshot of `model`, ascending.
  std::vector<uint32_t> Positions(const ModelFingerprint& model, uint32_t max_position) const;
  // Least recently used entry with tick < max_tick whose snapshot nobody else holds
  // (use_count 1); null when none.
  const Entry* EvictionCandidate(uint64_t max_tick) const;
  // Removes the entry; returns it.
  Entry Remove(const BlockKey& key);
  void Clear();

  uint64_t bytes() const { return bytes_; }
  size_t size() const { return map_.size(); }

 private:
  using Pair = std::pair<uint64_t, uint64_t>;
  static Pair P(const Hash128& h) { return {h.hi, h.lo}; }
  std::unordered_map<BlockKey, Entry, Hash128Hasher> map_;
  std::set<std::pair<uint64_t, Pair>> lru_;                // (tick, key)
  std::map<Pair, std::map<uint32_t, uint32_t>> positions_;  // model -> position -> count
  uint64_t bytes_ = 0;
};

}  // namespace kvtier::prefix
