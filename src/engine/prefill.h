// Prefill through the prefix cache, and greedy continuation: how a request's prompt meets the
// cache. The fetch reuses the longest cached prefix (shared blocks, or converted), and only
// the remaining tokens run through the model. The scheduler (issue 8) builds on these; the
// prefix cache's model tests and `kvtier bench-prefix` use them directly.
// Stateless functions; thread-safe for distinct sequences (Model and PrefixCache are).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/block_pool.h"
#include "kvtier/model.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/sequence_cache.h"
#include "kvtier/status.h"

namespace kvtier {
class ThreadPool;
}

namespace kvtier::engine {

struct PrefillOutcome {
  PrefixMatchKind kind = PrefixMatchKind::kMiss;
  uint32_t reused_tokens = 0;    // prompt tokens whose K/V came from the cache
  bool converted = false;        // the cached entry was in another format
  SequenceCache sequence;        // every prompt token, in `pool`
  std::vector<float> logits;     // [n_vocab] after the last prompt token
  double fetch_ms = 0.0;         // the cache lookup, conversion included
  double compute_ms = 0.0;       // the model over the remaining tokens
};

// Prefills `prompt` (non-empty) into a new sequence of `pool`, reusing what `cache` (may be
// null) holds for model.fingerprint(); runs the rest in chunks of `ubatch` tokens.
Result<PrefillOutcome> Prefill(const Model& model, PrefixCache* cache,
                               const std::shared_ptr<BlockPool>& pool,
                               std::span<const int32_t> prompt, uint32_t ubatch,
                               ThreadPool* threads);

// Greedy decoding of n tokens after `logits` (the logits of seq's last token): the argmax
// (lowest id on ties), fed back through the model; every generated token but the last is
// appended to `seq`.
Result<std::vector<int32_t>> GreedyContinue(const Model& model, SequenceCache& seq,
                                            std::vector<float> logits, uint32_t n,
                                            ThreadPool* threads);

}  // namespace kvtier::engine
