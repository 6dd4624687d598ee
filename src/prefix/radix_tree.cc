// RadixTree (radix_tree.h): walks, store plans, eviction candidates, pins, invariants.
// Not thread-safe: PrefixCache::Impl calls it under its mutex.
#include "prefix/radix_tree.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace kvtier::prefix {

int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

std::span<const int32_t> Sub(std::span<const int32_t> t, size_t from, size_t n) {
  return t.subspan(from, std::min(n, t.size() - from));
}

bool StartsWith(std::span<const int32_t> a, std::span<const int32_t> prefix) {
  return prefix.size() <= a.size() && std::equal(prefix.begin(), prefix.end(), a.begin());
}

// Calls fn(child) for every child of n, full ones first.
template <typename Fn>
void ForEachChild(const Node& n, Fn&& fn) {
  for (const auto& [key, c] : n.full) fn(c.get());
  for (const auto& c : n.tails) fn(c.get());
}

std::string NodeName(const Node& n) {
  return "node [" + std::to_string(n.start) + ", " + std::to_string(n.end()) + ") block " +
         std::to_string(n.block);
}

}  // namespace

uint32_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<uint32_t>(i);
}

bool Node::HasEnd(uint32_t len) const { return std::binary_search(ends.begin(), ends.end(), len); }

void Node::AddEnd(uint32_t len) {
  auto it = std::lower_bound(ends.begin(), ends.end(), len);
  if (it == ends.end() || *it != len) {
    ends.insert(it, len);
    ++ns->entries;
  }
}

RadixTree::~RadixTree() { Clear(); }

Namespace* RadixTree::Find(const BlockKey& ns_key) {
  for (auto& ns : namespaces_) {
    if (ns->key == ns_key) return ns.get();
  }
  return nullptr;
}

Namespace* RadixTree::Add(std::unique_ptr<Namespace> ns) {
  ns->root.ns = ns.get();
  ns->root.key = ns->key;
  namespaces_.push_back(std::move(ns));
  return namespaces_.back().get();
}

Match RadixTree::Walk(Namespace& ns, std::span<const int32_t> tokens) const {
  Match m;
  const uint32_t B = ns.block_tokens;
  const Node* node = &ns.root;
  size_t pos = 0;
  while (pos < tokens.size()) {
    if (tokens.size() - pos >= B) {
      const std::span<const int32_t> block = tokens.subspan(pos, B);
      auto it = node->full.find(ChainBlockKey(node->key, block));
      if (it != node->full.end() && StartsWith(it->second->tokens, block)) {
        node = it->second.get();
        m.path.push_back(const_cast<Node*>(node));
        pos += B;
        continue;
      }
    }
    // No full child continues the tokens: the child sharing the most tokens, if any.
    const std::span<const int32_t> rest = Sub(tokens, pos, B);
    // Among equally long matches, one where an entry ends (siblings may share a prefix).
    Node* best = nullptr;
    uint32_t best_len = 0;
    bool best_end = false;
    ForEachChild(*node, [&](Node* c) {
      const uint32_t l = CommonPrefix(c->tokens, rest);
      const bool end = l > 0 && c->HasEnd(l);
      if (l > best_len || (l == best_len && l > 0 && end && !best_end)) {
        best_len = l;
        best = c;
        best_end = end;
      }
    });
    if (best != nullptr) {
      m.path.push_back(best);
      pos += best_len;
    }
    break;
  }
  m.matched = static_cast<uint32_t>(pos);
  if (!m.path.empty()) {
    const Node* last = m.path.back();
    m.entry_end = last->HasEnd(m.matched - last->start);
  }
  return m;
}

Plan RadixTree::MakePlan(Namespace& ns, std::span<const int32_t> tokens) const {
  Plan plan;
  const uint32_t B = ns.block_tokens;
  const Node* node = &ns.root;
  bool leading = true;
  for (size_t pos = 0; pos < tokens.size(); pos += B) {
    PlanStep step;
    const std::span<const int32_t> block = Sub(tokens, pos, B);
    if (node != nullptr && block.size() == B) {
      auto it = node->full.find(ChainBlockKey(node->key, block));
      if (it != node->full.end() && StartsWith(it->second->tokens, block)) {
        step = {PlanStep::kExisting, it->second.get()};
      } else {
        for (const auto& t : node->tails) {
          if (StartsWith(block, t->tokens)) step = {PlanStep::kUpgrade, t.get()};
        }
      }
    } else if (node != nullptr) {
      ForEachChild(*node, [&](Node* c) {
        if (step.node == nullptr && StartsWith(c->tokens, block)) step = {PlanStep::kMarker, c};
      });
      if (step.node == nullptr) {
        for (const auto& t : node->tails) {
          if (StartsWith(block, t->tokens)) step = {PlanStep::kExtend, t.get()};
        }
      }
    }
    if (step.kind == PlanStep::kNew) ++plan.new_blocks;
    leading = leading && step.kind == PlanStep::kExisting;
    if (leading) ++plan.existing_full;
    // A new node has no children yet: every later step is new too.
    node = step.kind == PlanStep::kNew ? nullptr : step.node;
    plan.steps.push_back(step);
  }
  return plan;
}

void RadixTree::SetTick(Node* n, uint64_t tick) {
  if (n->tick == tick) return;
  const bool leaf = n->is_leaf() && !n->is_root();
  if (leaf) EraseLeaf(n);
  n->tick = tick;
  if (leaf) InsertLeaf(n);
}

void RadixTree::Touch(std::span<Node* const> path, uint64_t tick) {
  const int64_t now_ms = SteadyNowMs();
  for (Node* n : path) {
    SetTick(n, tick);
    n->used_ms = now_ms;
  }
}

Status RadixTree::TakeBlock(Node* n, BlockId block, std::span<const int32_t> tokens) {
  BlockPool& pool = *n->ns->pool;
  if (block != n->block) {
    const BlockId ids[1] = {block};
    KVTIER_RETURN_IF_ERROR(pool.Ref(ids, KvOwner::kPrefixCache));
    const BlockId old[1] = {n->block};
    pool.Unref(old, KvOwner::kPrefixCache);
    n->block = block;
  }
  n->ns->tokens += tokens.size() - n->tokens.size();
  n->tokens.assign(tokens.begin(), tokens.end());
  n->key = ChainBlockKey(n->parent->key, n->tokens);
  return Status::OK();
}

Status RadixTree::Apply(Namespace& ns, const Plan& plan, std::span<const int32_t> tokens,
                        std::span<const BlockId> blocks, uint64_t tick,
                        std::span<const std::vector<int32_t>* const> pin_lists) {
  const uint32_t B = ns.block_tokens;
  if (blocks.size() < plan.steps.size()) {
    return Status::Internal("prefix cache: " + std::to_string(blocks.size()) +
                            " blocks for a plan of " + std::to_string(plan.steps.size()));
  }
  std::vector<uint32_t> pin_lcp;  // [pin list] tokens it shares with `tokens`
  for (const std::vector<int32_t>* p : pin_lists) pin_lcp.push_back(CommonPrefix(*p, tokens));
  auto pins_for = [&](uint32_t start) {
    uint32_t n = 0;
    for (uint32_t l : pin_lcp) n += l > start ? 1 : 0;
    return n;
  };
  std::vector<Node*> path;
  Node* parent = &ns.root;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& step = plan.steps[i];
    const uint32_t start = static_cast<uint32_t>(i * B);
    const std::span<const int32_t> block = Sub(tokens, start, B);
    const bool last = i + 1 == plan.steps.size();
    Node* n = step.node;
    switch (step.kind) {
      case PlanStep::kExisting:
      case PlanStep::kMarker:
        break;
      case PlanStep::kUpgrade: {  // tail -> full: moves from the tails list to the map
        auto it = std::find_if(parent->tails.begin(), parent->tails.end(),
                               [&](const auto& t) { return t.get() == n; });
        if (it == parent->tails.end()) return Status::Internal("prefix cache: lost tail node");
        std::unique_ptr<Node> owned = std::move(*it);
        parent->tails.erase(it);
        KVTIER_RETURN_IF_ERROR(TakeBlock(n, blocks[i], block));
        n->pins = pins_for(start);
        parent->full.emplace(n->key, std::move(owned));
        break;
      }
      case PlanStep::kExtend:
        KVTIER_RETURN_IF_ERROR(TakeBlock(n, blocks[i], block));
        n->pins = pins_for(start);
        break;
      case PlanStep::kNew: {
        const BlockId ids[1] = {blocks[i]};
        KVTIER_RETURN_IF_ERROR(ns.pool->Ref(ids, KvOwner::kPrefixCache));
        auto owned = std::make_unique<Node>();
        n = owned.get();
        n->ns = &ns;
        n->parent = parent;
        n->start = start;
        n->tokens.assign(block.begin(), block.end());
        n->key = ChainBlockKey(parent->key, n->tokens);
        n->block = blocks[i];
        n->tick = tick;
        n->pins = pins_for(start);
        if (parent->is_leaf() && !parent->is_root()) EraseLeaf(parent);
        if (block.size() == B) {
          parent->full.emplace(n->key, std::move(owned));
        } else {
          parent->tails.push_back(std::move(owned));
        }
        InsertLeaf(n);
        ++ns.blocks;
        ns.tokens += n->tokens.size();
        bytes_ += ns.block_bytes;
        break;
      }
    }
    if (last) n->AddEnd(static_cast<uint32_t>(block.size()));
    path.push_back(n);
    parent = n;
  }
  Touch(path, tick);
  return Status::OK();
}

Node* RadixTree::EvictionCandidate(uint64_t max_tick) const {
  for (const auto& [tick, n] : leaves_) {
    if (tick >= max_tick) break;
    if (n->pins == 0 && n->ns->pool->RefCount(n->block) == 1) return n;
  }
  return nullptr;
}

uint64_t RadixTree::RemoveLeaf(Node* leaf, const EvictionCallback& on_evict) {
  Namespace& ns = *leaf->ns;
  if (on_evict) {
    EvictedBlock e;
    e.key = leaf->key;
    e.parent_key = leaf->parent->key;
    e.namespace_key = ns.key;
    e.model = ns.model;
    e.first_position = leaf->start;
    e.tokens = leaf->tokens;
    e.entry_ends = leaf->ends;
    e.pool = ns.pool;
    e.block = leaf->block;
    on_evict(e);
  }
  EraseLeaf(leaf);
  const BlockId ids[1] = {leaf->block};
  ns.pool->Unref(ids, KvOwner::kPrefixCache);
  --ns.blocks;
  ns.tokens -= leaf->tokens.size();
  ns.entries -= leaf->ends.size();
  bytes_ -= ns.block_bytes;
  Node* parent = leaf->parent;
  if (leaf->tokens.size() == ns.block_tokens) {
    parent->full.erase(leaf->key);
  } else {
    std::erase_if(parent->tails, [&](const auto& t) { return t.get() == leaf; });
  }
  if (parent->is_leaf() && !parent->is_root()) {
    // The entries that went through the leaf now end here: their cached part is what is left.
    if (parent->ends.empty()) parent->AddEnd(static_cast<uint32_t>(parent->tokens.size()));
    InsertLeaf(parent);
  }
  return ns.block_bytes;
}

void RadixTree::AddPins(const ModelFingerprint& model, std::span<const int32_t> tokens,
                        int delta) {
  for (auto& ns : namespaces_) {
    if (!(ns->model == model)) continue;
    Node* node = &ns->root;
    while (node != nullptr && node->end() < tokens.size()) {
      const int32_t first = tokens[node->end()];
      Node* next = nullptr;
      ForEachChild(*node, [&](Node* c) {
        if (c->tokens[0] != first) return;
        c->pins = static_cast<uint32_t>(static_cast<int64_t>(c->pins) + delta);
        if (c->tokens.size() == ns->block_tokens &&
            StartsWith(tokens.subspan(c->start), c->tokens)) {
          next = c;
        }
      });
      node = next;
    }
  }
}

void RadixTree::DropSubtree(Node* n) {
  ForEachChild(*n, [&](Node* c) { DropSubtree(c); });
  if (!n->is_root()) {
    const BlockId ids[1] = {n->block};
    n->ns->pool->Unref(ids, KvOwner::kPrefixCache);
  }
  n->full.clear();
  n->tails.clear();
}

void RadixTree::Clear() {
  for (auto& ns : namespaces_) {
    DropSubtree(&ns->root);
    ns->root.ends.clear();
    ns->blocks = ns->tokens = ns->entries = 0;
  }
  leaves_.clear();
  bytes_ = 0;
}

uint64_t RadixTree::pinned_bytes() const {
  uint64_t b = 0;
  for (const auto& ns : namespaces_) {
    std::vector<const Node*> stack = {&ns->root};
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!n->is_root() && n->pins > 0) b += ns->block_bytes;
      ForEachChild(*n, [&](const Node* c) { stack.push_back(c); });
    }
  }
  return b;
}

struct RadixTree::CheckTotals {
  uint64_t blocks = 0, tokens = 0, entries = 0, bytes = 0, leaves = 0;
};

Status RadixTree::CheckNode(const Node& n, std::vector<int32_t>& path,
                            std::span<const std::vector<int32_t>* const> pins,
                            CheckTotals& t) const {
  const Namespace& ns = *n.ns;
  const uint32_t B = ns.block_tokens;
  const std::string name = NodeName(n);
  if (!n.is_root()) {
    if (n.tokens.empty() || n.tokens.size() > B) return Status::Internal(name + ": bad size");
    if (n.start != n.parent->end()) return Status::Internal(name + ": start != parent end");
    if (n.tick > n.parent->tick && !n.parent->is_root()) {
      return Status::Internal(name + ": newer than its parent");
    }
    if (!(n.key == ChainBlockKey(n.parent->key, n.tokens))) {
      return Status::Internal(name + ": key is not ChainBlockKey(parent, tokens)");
    }
    if (ns.pool->RefCount(n.block) == 0) return Status::Internal(name + ": block not live");
    if (n.tokens.size() < B && !n.is_leaf()) return Status::Internal(name + ": tail with children");
    for (size_t i = 0; i < n.ends.size(); ++i) {
      if (n.ends[i] == 0 || n.ends[i] > n.tokens.size() || (i > 0 && n.ends[i] <= n.ends[i - 1])) {
        return Status::Internal(name + ": bad entry ends");
      }
    }
    if (n.is_leaf() && n.ends.empty()) return Status::Internal(name + ": leaf without an entry");
    if (n.is_leaf() != leaves_.contains({n.tick, const_cast<Node*>(&n)})) {
      return Status::Internal(name + ": leaf set disagrees");
    }
    path.insert(path.end(), n.tokens.begin(), n.tokens.end());
    uint32_t want_pins = 0;
    for (const std::vector<int32_t>* p : pins) want_pins += CommonPrefix(*p, path) > n.start;
    if (n.pins != want_pins) {
      return Status::Internal(name + ": " + std::to_string(n.pins) + " pins, expected " +
                              std::to_string(want_pins));
    }
    ++t.blocks;
    t.tokens += n.tokens.size();
    t.entries += n.ends.size();
    t.bytes += ns.block_bytes;
    t.leaves += n.is_leaf();
  }
  std::vector<const Node*> kids;
  for (const auto& [key, c] : n.full) {
    if (!(key == c->key) || c->tokens.size() != B) return Status::Internal(name + ": bad full child");
    kids.push_back(c.get());
  }
  for (const auto& c : n.tails) {
    if (c->tokens.size() >= B) return Status::Internal(name + ": full node among the tails");
    kids.push_back(c.get());
  }
  for (size_t i = 0; i < kids.size(); ++i) {
    if (kids[i]->parent != &n || kids[i]->ns != &ns) return Status::Internal(name + ": bad child link");
    for (size_t j = 0; j < kids.size(); ++j) {
      if (i != j && StartsWith(kids[j]->tokens, kids[i]->tokens)) {
        return Status::Internal(name + ": children are not prefix-free");
      }
    }
    KVTIER_RETURN_IF_ERROR(CheckNode(*kids[i], path, pins, t));
  }
  if (!n.is_root()) path.resize(path.size() - n.tokens.size());
  return Status::OK();
}

Status RadixTree::CheckInvariants(
    std::span<const std::pair<ModelFingerprint, std::vector<int32_t>>> pins) const {
  CheckTotals all;
  for (const auto& ns : namespaces_) {
    std::vector<const std::vector<int32_t>*> lists;
    for (const auto& [model, list] : pins) {
      if (model == ns->model) lists.push_back(&list);
    }
    CheckTotals t;
    std::vector<int32_t> path;
    KVTIER_RETURN_IF_ERROR(CheckNode(ns->root, path, lists, t));
    if (t.blocks != ns->blocks || t.tokens != ns->tokens || t.entries != ns->entries) {
      return Status::Internal("prefix cache: namespace counters disagree with its tree");
    }
    all.bytes += t.bytes;
    all.leaves += t.leaves;
  }
  if (all.bytes != bytes_) {
    return Status::Internal("prefix cache: " + std::to_string(bytes_) + " bytes counted, " +
                            std::to_string(all.bytes) + " in the tree");
  }
  if (all.leaves != leaves_.size()) return Status::Internal("prefix cache: stale leaf entries");
  return Status::OK();
}

}  // namespace kvtier::prefix
