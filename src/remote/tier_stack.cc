// TierStack (kvtier/remote_tier.h): several lower tiers as one, fastest first.
#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "kvtier/remote_tier.h"

namespace kvtier {

namespace {

// Leading tokens of `tokens` a chain covers (its last block may run past them).
size_t Covered(const std::vector<TierBlock>& chain, std::span<const int32_t> tokens) {
  size_t m = 0;
  for (const TierBlock& b : chain) {
    size_t i = 0;
    while (i < b.tokens.size() && m + i < tokens.size() && b.tokens[i] == tokens[m + i]) ++i;
    m += i;
    if (i < b.tokens.size()) break;
  }
  return m;
}

constexpr size_t kSources = 1 << 16;  // blocks whose source tier is remembered

}  // namespace

struct TierStack::Impl {
  std::vector<std::shared_ptr<LowerTier>> tiers;
  std::mutex mu;
  // Block key -> the first tier that listed it in a FindChain (cleared when it grows large).
  std::unordered_map<BlockKey, size_t, Hash128Hasher> source;
};

TierStack::TierStack(std::vector<std::shared_ptr<LowerTier>> tiers)
    : impl_(std::make_unique<Impl>()) {
  impl_->tiers = std::move(tiers);
}
TierStack::~TierStack() = default;

void TierStack::Spill(const EvictedBlock& block) {
  for (const auto& t : impl_->tiers) t->Spill(block);
}

void TierStack::SpillState(const ModelFingerprint& model, const BlockKey& key,
                           std::shared_ptr<const StateSnapshot> snapshot) {
  for (const auto& t : impl_->tiers) t->SpillState(model, key, snapshot);
}

std::shared_ptr<const StateSnapshot> TierStack::FindState(const ModelFingerprint& model,
                                                          std::span<const int32_t> tokens,
                                                          uint32_t min_position,
                                                          uint32_t max_position) {
  std::shared_ptr<const StateSnapshot> best;
  for (const auto& t : impl_->tiers) {
    // A later tier is asked only for snapshots longer than the best so far.
    const uint32_t above = best != nullptr ? best->position : min_position;
    std::shared_ptr<const StateSnapshot> s = t->FindState(model, tokens, above, max_position);
    if (s != nullptr && s->position > above) best = std::move(s);
    if (best != nullptr && best->position == max_position) break;
  }
  return best;
}

std::vector<TierNamespace> TierStack::Namespaces(const ModelFingerprint& model) {
  std::vector<TierNamespace> out;
  for (const auto& t : impl_->tiers) {
    for (const TierNamespace& ns : t->Namespaces(model)) {
      if (std::none_of(out.begin(), out.end(), [&](const TierNamespace& o) { return o.key == ns.key; })) {
        out.push_back(ns);
      }
    }
  }
  return out;
}

std::vector<TierBlock> TierStack::FindChain(const TierNamespace& ns,
                                            std::span<const int32_t> tokens) {
  std::vector<TierBlock> best;
  size_t best_n = 0;
  std::vector<std::pair<BlockKey, size_t>> listed;
  for (size_t i = 0; i < impl_->tiers.size(); ++i) {
    // A later (slower) tier only when the earlier ones leave more than the last token.
    if (i > 0 && best_n + 1 >= tokens.size()) break;
    std::vector<TierBlock> c = impl_->tiers[i]->FindChain(ns, tokens);
    for (const TierBlock& b : c) listed.emplace_back(b.key, i);
    const size_t n = Covered(c, tokens);
    if (n > best_n) {
      best_n = n;
      best = std::move(c);
    }
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->source.size() > kSources) impl_->source.clear();
  for (const auto& [key, tier] : listed) {
    auto [it, fresh] = impl_->source.emplace(key, tier);
    if (!fresh && it->second > tier) it->second = tier;
  }
  return best;
}

Status TierStack::Load(const TierNamespace& ns, const BlockKey& key, BlockPool& pool,
                       BlockId id) {
  size_t first = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->source.find(key);
    if (it != impl_->source.end()) first = it->second;
  }
  Status s = impl_->tiers[first]->Load(ns, key, pool, id);
  for (size_t i = 0; !s.ok() && i < impl_->tiers.size(); ++i) {
    if (i == first || s.code() == StatusCode::kInvalidArgument) continue;
    s = impl_->tiers[i]->Load(ns, key, pool, id);
  }
  return s;
}

}  // namespace kvtier
