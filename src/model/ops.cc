// Per-token operations of the forward pass; see ops.h.
#include "model/ops.h"

#include <cmath>
#include <vector>

namespace kvtier::model {

void RmsNorm(const float* x, const float* w, size_t n_tok, size_t n, float eps, float* y) {
  for (size_t t = 0; t < n_tok; ++t) {
    const float* xt = x + t * n;
    double ss = 0.0;
    for (size_t i = 0; i < n; ++i) ss += double(xt[i]) * double(xt[i]);
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / double(n) + double(eps)));
    float* yt = y + t * n;
    for (size_t i = 0; i < n; ++i) yt[i] = xt[i] * inv * w[i];
  }
}

void Rope(float* x, size_t n_tok, size_t n_heads, std::span<const int32_t> pos,
          const RopeParams& p) {
  const size_t half = p.n_dims / 2;
  std::vector<float> cs(2 * half);  // [half][cos, sin] for the current token
  for (size_t t = 0; t < n_tok; ++t) {
    const double position = double(pos[t]) * double(p.pos_scale);
    for (size_t i = 0; i < half; ++i) {
      double theta = position * std::pow(double(p.theta_base), -2.0 * double(i) / p.n_dims);
      if (p.freq_factors != nullptr) theta /= double(p.freq_factors[i]);
      cs[2 * i] = static_cast<float>(std::cos(theta));
      cs[2 * i + 1] = static_cast<float>(std::sin(theta));
    }
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

void SwiGlu(float* g, const float* u, size_t n) {
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
