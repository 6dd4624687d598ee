// Per-token operations of the forward pass; see ops.h.
#include "model/ops.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace kvtier::model {

void RmsNorm(const float* x, const float* w, size_t n_tok, size_t n, float eps, float* y) {
  for (size_t t = 0; t < n_tok; ++t) {
    const float* xt = x + t * n;
    // Eight independent double sums (they vectorise; one chain of dependent adds was a serial
    // part of every prefill); the order only moves the double sum's last bits.
    double s8[8] = {};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (size_t j = 0; j < 8; ++j) s8[j] += double(xt[i + j]) * double(xt[i + j]);
    }
    for (; i < n; ++i) s8[0] += double(xt[i]) * double(xt[i]);
    const double ss = ((s8[0] + s8[1]) + (s8[2] + s8[3])) + ((s8[4] + s8[5]) + (s8[6] + s8[7]));
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / double(n) + double(eps)));
    float* yt = y + t * n;
    for (size_t k = 0; k < n; ++k) yt[k] = xt[k] * inv * w[k];
  }
}

namespace {

// The cos / sin table of one Rope call's positions, [n_tok][half][cos, sin]. A forward pass
// rotates q and k of every layer at the same positions with the same parameters, so the
// calling thread keeps the last table and reuses it while they match (before: 3 double
// transcendentals per pair, token, head kind and layer, a serial part of every prefill).
struct RopeTable {
  std::vector<int32_t> pos;
  uint32_t n_dims = 0;
  float theta_base = 0.0f, pos_scale = 0.0f;
  std::vector<float> factors;  // freq_factors' values (empty: none)
  std::vector<float> cs;
};

const float* RopeCosSin(std::span<const int32_t> pos, size_t n_tok, const RopeParams& p) {
  thread_local RopeTable tab;
  const size_t half = p.n_dims / 2;
  const size_t n_fac = p.freq_factors != nullptr ? half : 0;
  if (tab.n_dims == p.n_dims && tab.theta_base == p.theta_base &&
      tab.pos_scale == p.pos_scale && tab.factors.size() == n_fac &&
      (n_fac == 0 || std::memcmp(tab.factors.data(), p.freq_factors, n_fac * 4) == 0) &&
      tab.pos.size() == n_tok &&
      (n_tok == 0 || std::memcmp(tab.pos.data(), pos.data(), n_tok * sizeof(int32_t)) == 0)) {
    return tab.cs.data();
  }
  tab.pos.assign(pos.begin(), pos.begin() + static_cast<std::ptrdiff_t>(n_tok));
  tab.n_dims = p.n_dims;
  tab.theta_base = p.theta_base;
  tab.pos_scale = p.pos_scale;
  tab.factors.assign(p.freq_factors, p.freq_factors + n_fac);
  tab.cs.resize(n_tok * 2 * half);
  std::vector<double> freq(half);
  for (size_t i = 0; i < half; ++i) {
    freq[i] = std::pow(double(p.theta_base), -2.0 * double(i) / p.n_dims);
  }
  for (size_t t = 0; t < n_tok; ++t) {
    const double position = double(pos[t]) * double(p.pos_scale);
    float* cs = tab.cs.data() + t * 2 * half;
    for (size_t i = 0; i < half; ++i) {
      double theta = position * freq[i];
      if (p.freq_factors != nullptr) theta /= double(p.freq_factors[i]);
      cs[2 * i] = static_cast<float>(std::cos(theta));
      cs[2 * i + 1] = static_cast<float>(std::sin(theta));
    }
  }
  return tab.cs.data();
}

}  // namespace

void Rope(float* x, size_t n_tok, size_t n_heads, std::span<const int32_t> pos,
          const RopeParams& p) {
  const size_t half = p.n_dims / 2;
  const float* table = RopeCosSin(pos, n_tok, p);
  for (size_t t = 0; t < n_tok; ++t) {
    const float* cs = table + t * 2 * half;  // [half][cos, sin] of token t
    for (size_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * p.head_dim;
      for (size_t i = 0; i < half; ++i) {
        const size_t a = p.neox ? i : 2 * i;
        const size_t b = p.neox ? i + half : 2 * i + 1;
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }
}

void SwiGluRef(float* g, const float* u, size_t n) {
  for (size_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void GeGlu(float* g, const float* u, size_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f, kCoef = 0.044715f;
  for (size_t i = 0; i < n; ++i) {
    const float x = g[i];
    g[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoef * x * x))) * u[i];
  }
}

void SoftCap(float* x, size_t n, float cap) {
  for (size_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void AddBias(float* x, const float* b, size_t n_tok, size_t n) {
  for (size_t t = 0; t < n_tok; ++t) {
    for (size_t i = 0; i < n; ++i) x[t * n + i] += b[i];
  }
}

}  // namespace kvtier::model
