// Element-wise and per-token operations of the transformer forward pass (RMSNorm, RoPE,
// SwiGLU, GeGLU, soft-cap, bias). Plain loops (SwiGlu: Highway) on the calling thread: they
// cost O(hidden) per token against O(hidden^2) for the matrix products, but run serially
// while the products use every core. Rope keeps the calling thread's last cos / sin table
// (thread_local); otherwise stateless; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvtier::model {

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, for n_tok rows of n values (y may be x).
//   x, y [n_tok, n], w [n]
void RmsNorm(const float* x, const float* w, size_t n_tok, size_t n, float eps, float* y);

struct RopeParams {
  uint32_t head_dim = 0;
  uint32_t n_dims = 0;       // rotated dimensions (<= head_dim, even)
  float theta_base = 10000.0f;
  bool neox = false;         // pairs (i, i + n_dims/2) instead of (2i, 2i+1)
  float pos_scale = 1.0f;    // linear position scaling (1 / factor)
  const float* freq_factors = nullptr;  // [n_dims / 2] divisors of each frequency, or null
};
// Rotates every head of every token in place: x [n_tok, n_heads, head_dim], pos [n_tok].
void Rope(float* x, size_t n_tok, size_t n_heads, std::span<const int32_t> pos,
          const RopeParams& p);

// g[i] = silu(g[i]) * u[i] for n values: SwiGlu with Highway's Exp (ops_simd.cc), SwiGluRef
// the scalar reference (std::exp); they agree to a few ulp.
void SwiGlu(float* g, const float* u, size_t n);
void SwiGluRef(float* g, const float* u, size_t n);

// g[i] = gelu(g[i]) * u[i] for n values (gelu's tanh approximation, as gemma and ggml use).
void GeGlu(float* g, const float* u, size_t n);

// x[i] = cap * tanh(x[i] / cap) for n values (cap > 0).
void SoftCap(float* x, size_t n, float cap);

// x[t] += b for n_tok rows of n values.
void AddBias(float* x, const float* b, size_t n_tok, size_t n);

}  // namespace kvtier::model
