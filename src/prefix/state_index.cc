// StateIndex (state_index.h): snapshots by key, LRU order, positions per model.
#include "prefix/state_index.h"

namespace kvtier::prefix {

bool StateIndex::Put(const BlockKey& key, const ModelFingerprint& model,
                     std::shared_ptr<const StateSnapshot> s, uint64_t tick) {
  if (map_.count(key) > 0) {
    Touch(key, tick);
    return false;
  }
  Entry e;
  e.key = key;
  e.model = model;
  e.position = s->position;
  e.tick = tick;
  bytes_ += s->bytes();
  e.snapshot = std::move(s);
  lru_.emplace(tick, P(key));
  ++positions_[P(model)][e.position];
  map_.emplace(key, std::move(e));
  return true;
}

const StateIndex::Entry* StateIndex::Find(const BlockKey& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

void StateIndex::Touch(const BlockKey& key, uint64_t tick) {
  auto it = map_.find(key);
  if (it == map_.end()) return;
  lru_.erase({it->second.tick, P(key)});
  it->second.tick = tick;
  lru_.emplace(tick, P(key));
}

std::vector<uint32_t> StateIndex::Positions(const ModelFingerprint& model,
                                            uint32_t max_position) const {
  std::vector<uint32_t> out;
  auto it = positions_.find(P(model));
  if (it == positions_.end()) return out;
  for (const auto& [pos, count] : it->second) {
    if (pos > max_position) break;
    out.push_back(pos);
  }
  return out;
}

const StateIndex::Entry* StateIndex::EvictionCandidate(uint64_t max_tick) const {
  for (const auto& [tick, k] : lru_) {
    if (tick >= max_tick) break;
    const Entry& e = map_.at(BlockKey{k.second, k.first});
    if (e.snapshot.use_count() == 1) return &e;
  }
  return nullptr;
}

StateIndex::Entry StateIndex::Remove(const BlockKey& key_ref) {
  const BlockKey key = key_ref;  // callers may pass the entry's own key, freed by the erase
  auto it = map_.find(key);
  Entry e = std::move(it->second);
  map_.erase(it);
  lru_.erase({e.tick, P(key)});
  auto pm = positions_.find(P(e.model));
  if (--pm->second[e.position] == 0) pm->second.erase(e.position);
  if (pm->second.empty()) positions_.erase(pm);
  bytes_ -= e.snapshot->bytes();
  return e;
}

void StateIndex::Clear() {
  map_.clear();
  lru_.clear();
  positions_.clear();
  bytes_ = 0;
}

}  // namespace kvtier::prefix
