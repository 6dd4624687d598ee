// Token sampling from logits: greedy, temperature, top-k, top-p, seeded; OpenAI's presence
// and frequency penalties over the tokens sampled so far.
//
// A Sampler is one request's state (its RNG and the counts of its sampled tokens):
// thread-compatible, one per sequence.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

struct SamplingParams {
  float temperature = 0.0f;       // <= 0: greedy (argmax; ties go to the lowest id)
  float top_p = 1.0f;             // (0, 1]: smallest set of tokens whose probability >= top_p
  uint32_t top_k = 0;             // 0: off
  uint64_t seed = 0;
  float presence_penalty = 0.0f;  // [-2, 2]: minus this once for every token already sampled
  float frequency_penalty = 0.0f; // [-2, 2]: minus this times the count of a sampled token

  // InvalidArgument naming the field and its valid range.
  Status Validate() const;
};

// A per-request restriction of the next token (e.g. constrained JSON output). The engine calls
// Mask on a row's logits before sampling (before penalties, temperature, top-k/top-p, greedy) and
// Accept with the token sampled. Owned by the request (shared_ptr in EngineRequest);
// thread-compatible: the engine calls it from its scheduler thread only.
class LogitConstraint {
 public:
  virtual ~LogitConstraint() = default;
  // Sets logits[id] (logits: [n_vocab]) to -infinity for every token not allowed next.
  virtual void Mask(std::span<float> logits) = 0;
  // Advances over `token`. True when the output is complete: the request ends (finish stop).
  virtual bool Accept(int32_t token) = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks the next token from logits [n_vocab] and records it for the penalties.
  int32_t Sample(std::span<const float> logits);
  // Records a token chosen elsewhere (e.g. a forced one) for the penalties.
  void Accept(int32_t token) { ++counts_[token]; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, uint32_t> counts_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch: (logit, id)
};

}  // namespace kvtier
