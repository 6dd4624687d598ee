// The two segmenters: SentencePiece-style greedy merging by token score and byte-level BPE by
// merge rank. Both keep the candidate pairs in a priority queue over a linked list of symbols;
// a popped pair whose sides changed since it was queued is stale and skipped.
// Thread safety: const methods on an immutable Impl; all working state is local to the call.
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_internal.h"

namespace kvtier {

using tokenizer_internal::Utf8CharLen;

namespace {

struct Symbol {
  int prev;
  int next;
  size_t begin;  // byte offset into the segment's text
  size_t len;    // 0 once merged into its left neighbour
};

// Splits `text` into characters (a malformed byte is a character of its own).
std::vector<Symbol> CharSymbols(std::string_view text) {
  std::vector<Symbol> syms;
  for (size_t off = 0; off < text.size();) {
    const size_t n = Utf8CharLen(text, off);
    const int idx = static_cast<int>(syms.size());
    syms.push_back({idx - 1, off + n < text.size() ? idx + 1 : -1, off, n});
    off += n;
  }
  return syms;
}

void MergeRight(std::vector<Symbol>& syms, int left) {
  Symbol& l = syms[left];
  Symbol& r = syms[l.next];
  l.len += r.len;
  r.len = 0;
  l.next = r.next;
  if (r.next >= 0) syms[r.next].prev = left;
}

struct SpmPair {
  float score;
  int left;
  int right;
  size_t len;
};
// Highest score first; among equal scores the leftmost pair.
struct SpmPairOrder {
  bool operator()(const SpmPair& a, const SpmPair& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

struct BpePair {
  int32_t rank;
  int left;
  int right;
  size_t len;  // of both sides when queued: sides only grow, so a change shows in the sum
};
// Lowest rank first; among equal ranks the leftmost pair.
struct BpePairOrder {
  bool operator()(const BpePair& a, const BpePair& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void Tokenizer::Impl::EmitBytes(std::string_view bytes, std::vector<int32_t>* out) const {
  for (const char c : bytes) {
    const int32_t id = byte_token[static_cast<unsigned char>(c)];
    if (id >= 0) {
      out->push_back(id);
    } else if (unk >= 0) {
      out->push_back(unk);
    }
  }
}

void Tokenizer::Impl::EncodeSpm(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<Symbol> syms = CharSymbols(text);
  if (syms.empty()) return;
  std::priority_queue<SpmPair, std::vector<SpmPair>, SpmPairOrder> queue;
  auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view joined = text.substr(syms[left].begin, syms[left].len + syms[right].len);
    const auto it = to_id.find(joined);
    if (it == to_id.end()) return;
    queue.push({score[it->second], left, right, joined.size()});
  };
  for (int i = 1; i < static_cast<int>(syms.size()); ++i) try_pair(i - 1, i);
  while (!queue.empty()) {
    const SpmPair p = queue.top();
    queue.pop();
    const Symbol& l = syms[p.left];
    const Symbol& r = syms[p.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != p.len) continue;  // stale
    MergeRight(syms, p.left);
    try_pair(syms[p.left].prev, p.left);
    try_pair(p.left, syms[p.left].next);
  }
  // Every merged symbol is a token; a character that never merged may not be (byte fallback).
  for (int i = 0; i != -1; i = syms[i].next) {
    const std::string_view s = text.substr(syms[i].begin, syms[i].len);
    const auto it = to_id.find(s);
    if (it != to_id.end()) {
      out->push_back(it->second);
    } else {
      EmitBytes(s, out);
    }
  }
}

void Tokenizer::Impl::EncodeBpe(std::string_view text, std::vector<int32_t>* out) const {
  std::string key;
  for (std::string_view word : pretok->Split(text)) {
    const std::string mapped = tokenizer_internal::ByteLevelEncode(word);
    if (ignore_merges) {
      const auto it = to_id.find(mapped);
      if (it != to_id.end()) {
        out->push_back(it->second);
        continue;
      }
    }
    const std::string_view m = mapped;
    std::vector<Symbol> syms = CharSymbols(m);
    std::priority_queue<BpePair, std::vector<BpePair>, BpePairOrder> queue;
    auto try_pair = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const std::string_view a = m.substr(syms[left].begin, syms[left].len);
      const std::string_view b = m.substr(syms[right].begin, syms[right].len);
      key.assign(a);
      key.push_back('\x1f');
      key.append(b);
      const auto it = merge_rank.find(key);
      if (it == merge_rank.end()) return;
      queue.push({it->second, left, right, a.size() + b.size()});
    };
    for (int i = 1; i < static_cast<int>(syms.size()); ++i) try_pair(i - 1, i);
    while (!queue.empty()) {
      const BpePair p = queue.top();
      queue.pop();
      const Symbol& l = syms[p.left];
      const Symbol& r = syms[p.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != p.len) continue;
      MergeRight(syms, p.left);
      try_pair(syms[p.left].prev, p.left);
      try_pair(p.left, syms[p.left].next);
    }
    for (int i = 0; i != -1; i = syms[i].next) {
      const std::string_view s = m.substr(syms[i].begin, syms[i].len);
      const auto it = to_id.find(s);
      if (it != to_id.end()) {
        out->push_back(it->second);
        continue;
      }
      // Not a token (a vocabulary without every merge result): one token per mapped byte.
      for (size_t off = 0; off < s.size();) {
        const size_t n = Utf8CharLen(s, off);
        const auto one = to_id.find(s.substr(off, n));
        if (one != to_id.end()) {
          out->push_back(one->second);
        } else if (unk >= 0) {
          out->push_back(unk);
        }
        off += n;
      }
    }
  }
}

}  // namespace kvtier
