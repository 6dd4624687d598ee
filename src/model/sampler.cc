// Sampler: see include/kvtier/sampler.h.
#include "kvtier/sampler.h"

#include <algorithm>
#include <cmath>

namespace kvtier {

Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f && temperature <= 100.0f)) {
    return Status::InvalidArgument("temperature must be in [0, 100], got " +
                                   std::to_string(temperature));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return Status::InvalidArgument("top_p must be in (0, 1], got " + std::to_string(top_p));
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return Status::InvalidArgument("presence_penalty must be in [-2, 2], got " +
                                   std::to_string(presence_penalty));
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return Status::InvalidArgument("frequency_penalty must be in [-2, 2], got " +
                                   std::to_string(frequency_penalty));
  }
  return Status::OK();
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}

int32_t Sampler::Sample(std::span<const float> logits) {
  cand_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    float l = logits[i];
    if (std::isnan(l)) l = -INFINITY;
    cand_[i] = {l, static_cast<int32_t>(i)};
  }
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
    for (const auto& [id, n] : counts_) {
      if (id >= 0 && static_cast<size_t>(id) < cand_.size()) {
        cand_[id].first -= p_.presence_penalty + p_.frequency_penalty * float(n);
      }
    }
  }
  // Highest logit first; ties by lowest id (deterministic).
  auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  int32_t token;
  if (p_.temperature <= 0.0f) {
    token = std::min_element(cand_.begin(), cand_.end(), better)->second;
  } else {
    size_t n = cand_.size();
    if (p_.top_k > 0 && p_.top_k < n) n = p_.top_k;
    std::partial_sort(cand_.begin(), cand_.begin() + n, cand_.end(), better);
    // Softmax over the n best at this temperature (in double), then the top-p cut.
    std::vector<double> prob(n);
    const double mx = cand_[0].first;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      prob[i] = std::exp((double(cand_[i].first) - mx) / double(p_.temperature));
      sum += prob[i];
    }
    size_t keep = n;
    if (p_.top_p < 1.0f) {
      double acc = 0.0;
      for (size_t i = 0; i < n; ++i) {
        acc += prob[i] / sum;
        if (acc >= double(p_.top_p)) {
          keep = i + 1;
          break;
        }
      }
    }
    double kept = 0.0;
    for (size_t i = 0; i < keep; ++i) kept += prob[i];
    // 53 random bits -> [0, 1), the same on every platform for a seed.
    const double u = double(rng_() >> 11) * 0x1.0p-53 * kept;
    double acc = 0.0;
    token = cand_[keep - 1].second;
    for (size_t i = 0; i < keep; ++i) {
      acc += prob[i];
      if (u < acc) {
        token = cand_[i].second;
        break;
      }
    }
  }
  Accept(token);
  return token;
}

}  // namespace kvtier
