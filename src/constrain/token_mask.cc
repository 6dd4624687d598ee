// VocabTrie and JsonConstraint: see token_mask.h.
#include "constrain/token_mask.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kvtier::constrain {
namespace {

constexpr size_t kMaxCachedMasks = 4096;

struct Piece {
  std::string bytes;
  int32_t id;
};

}  // namespace

std::shared_ptr<const VocabTrie> VocabTrie::Build(const Tokenizer& tokenizer) {
  auto t = std::make_shared<VocabTrie>();
  t->vocab_size_ = tokenizer.vocab_size();
  std::vector<Piece> pieces;
  for (size_t id = 0; id < t->vocab_size_; ++id) {
    const auto i = static_cast<int32_t>(id);
    if (tokenizer.IsControl(i)) continue;
    std::string p = tokenizer.TokenPiece(i);
    if (!p.empty()) pieces.push_back({std::move(p), i});
  }
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.bytes < b.bytes || (a.bytes == b.bytes && a.id < b.id); });
  t->nodes_.emplace_back();
  // Breadth-first: each node's children are appended together. Work items: (node, range, depth).
  struct Item {
    uint32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Item> work = {{0, 0, pieces.size(), 0}};
  for (size_t w = 0; w < work.size(); ++w) {
    const Item it = work[w];
    size_t i = it.lo;
    t->nodes_[it.node].tok = static_cast<uint32_t>(t->token_ids_.size());
    while (i < it.hi && pieces[i].bytes.size() == it.depth) {  // sorted: ending here come first
      t->token_ids_.push_back(pieces[i].id);
      ++i;
    }
    t->nodes_[it.node].ntok = static_cast<uint32_t>(t->token_ids_.size()) - t->nodes_[it.node].tok;
    const auto first = static_cast<uint32_t>(t->nodes_.size());
    uint32_t n = 0;
    while (i < it.hi) {
      const char c = pieces[i].bytes[it.depth];
      size_t j = i;
      while (j < it.hi && pieces[j].bytes[it.depth] == c) ++j;
      Node child;
      child.byte = static_cast<uint8_t>(c);
      t->nodes_.push_back(child);
      work.push_back({first + n, i, j, it.depth + 1});
      ++n;
      i = j;
    }
    t->nodes_[it.node].first = first;
    t->nodes_[it.node].n = n;
  }
  return t;
}

void VocabTrie::Allowed(const JsonMatcher& m, std::vector<uint64_t>* mask) const {
  mask->assign((vocab_size_ + 63) / 64, 0);
  // Depth-first over the children of the root; at[d]: the matcher after d bytes.
  std::vector<JsonMatcher> at;
  at.reserve(64);
  at.push_back(m);
  struct Pos {
    uint32_t next, end;  // children of the node at this depth still to visit
  };
  std::vector<Pos> stack = {{nodes_[0].first, nodes_[0].first + nodes_[0].n}};
  while (!stack.empty()) {
    Pos& p = stack.back();
    if (p.next == p.end) {
      stack.pop_back();
      continue;
    }
    const Node& node = nodes_[p.next++];
    const size_t d = stack.size();  // the child's depth; at[d - 1] is its parent's matcher
    if (at.size() <= d) {
      at.push_back(at[d - 1]);
    } else {
      at[d] = at[d - 1];
    }
    if (!at[d].FeedByte(node.byte)) continue;  // prune the whole branch
    for (uint32_t k = 0; k < node.ntok; ++k) {
      const int32_t id = token_ids_[node.tok + k];
      (*mask)[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    }
    if (node.n > 0) stack.push_back({node.first, node.first + node.n});
  }
}

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> grammar,
                               std::shared_ptr<const VocabTrie> trie, const Tokenizer& tokenizer,
                               std::vector<int32_t> end_ids, MatchLimits limits)
    : m_(std::move(grammar), limits),
      trie_(std::move(trie)),
      tok_(tokenizer),
      end_ids_(std::move(end_ids)) {}

const std::vector<uint64_t>& JsonConstraint::Current() {
  key_.clear();
  m_.StateKey(&key_);
  auto it = cache_.find(key_);
  if (it != cache_.end()) {
    ++hits_;
    return it->second;
  }
  ++misses_;
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  std::vector<uint64_t> mask;
  trie_->Allowed(m_, &mask);
  const bool can_end = m_.CanEnd();
  bool any = false;
  for (uint64_t w : mask) any = any || w != 0;
  // End ids once complete; also when nothing continues the value (a vocabulary that cannot
  // spell it): the output then ends unparsed rather than running on.
  if (can_end || !any) {
    for (int32_t id : end_ids_) {
      if (id >= 0 && static_cast<size_t>(id) < trie_->vocab_size()) {
        mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
      }
    }
  }
  return cache_.emplace(key_, std::move(mask)).first->second;
}

void JsonConstraint::Mask(std::span<float> logits) {
  const std::vector<uint64_t>& mask = Current();
  const size_t n = std::min(logits.size(), trie_->vocab_size());
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = mask[w];
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i) {
      if (!(bits >> (i & 63) & 1)) logits[i] = -INFINITY;
    }
  }
  for (size_t i = n; i < logits.size(); ++i) logits[i] = -INFINITY;  // ids past the vocabulary
}

bool JsonConstraint::Accept(int32_t token) {
  if (std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end()) return true;
  if (!m_.Feed(tok_.TokenPiece(token))) return true;  // cannot happen after Mask; ends anyway
  return m_.Done();
}

}  // namespace kvtier::constrain
