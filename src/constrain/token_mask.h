// Token masks over a tokenizer's vocabulary (module constrain; see json_matcher.h).
//
// VocabTrie: the byte trie of every token's piece (control tokens excluded), children stored
// contiguously. Allowed() walks it depth-first with a copy of the matcher per depth, pruning a
// branch at the first byte the matcher rejects, and marks the tokens whose whole piece is
// accepted.
// JsonConstraint: the LogitConstraint of one request: masks logits to the tokens the matcher
// accepts next (the end-of-generation ids only once the value is complete), caches masks by
// matcher state (the state inside a string, between values, ... repeats), and reports the
// output complete when the value is (nothing but whitespace may follow) or an end id came.
//
// Ownership: a VocabTrie copies the pieces (the Tokenizer may go away); it is immutable and
// shared (thread-safe). A JsonConstraint is thread-compatible (one request, scheduler thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "constrain/json_matcher.h"
#include "kvtier/sampler.h"
#include "kvtier/tokenizer.h"

namespace kvtier::constrain {

class VocabTrie {
 public:
  static std::shared_ptr<const VocabTrie> Build(const Tokenizer& tokenizer);
  // Sets bit id of `mask` ([ceil(vocab/64)] words, cleared first) for every token whose piece
  // `m` accepts from its current state.
  void Allowed(const JsonMatcher& m, std::vector<uint64_t>* mask) const;
  size_t vocab_size() const { return vocab_size_; }
  size_t node_count() const { return nodes_.size(); }

  // One trie node: the byte leading to it, its children [first, first + n), and the tokens
  // whose piece ends here: token_ids_[tok, tok + ntok).
  struct Node {
    uint32_t first = 0, n = 0, tok = 0, ntok = 0;
    uint8_t byte = 0;
    uint8_t pad[3] = {0, 0, 0};
  };
  static_assert(sizeof(Node) == 20);

 private:
  size_t vocab_size_ = 0;
  std::vector<Node> nodes_;        // nodes_[0]: the root (empty prefix)
  std::vector<int32_t> token_ids_;
};

class JsonConstraint : public LogitConstraint {
 public:
  // end_ids: the tokens that end generation (allowed once the value is complete).
  JsonConstraint(std::shared_ptr<const JsonGrammar> grammar,
                 std::shared_ptr<const VocabTrie> trie, const Tokenizer& tokenizer,
                 std::vector<int32_t> end_ids,
                 MatchLimits limits = MatchLimits::Generation());
  void Mask(std::span<float> logits) override;
  bool Accept(int32_t token) override;

  const JsonMatcher& matcher() const { return m_; }
  uint64_t cache_hits() const { return hits_; }
  uint64_t cache_misses() const { return misses_; }

 private:
  const std::vector<uint64_t>& Current();

  JsonMatcher m_;
  std::shared_ptr<const VocabTrie> trie_;
  const Tokenizer& tok_;
  std::vector<int32_t> end_ids_;
  std::unordered_map<std::string, std::vector<uint64_t>> cache_;  // state key -> mask
  std::string key_;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace kvtier::constrain
