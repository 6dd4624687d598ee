// The per-token kernels of qwen35's Gated DeltaNet layers (forward_deltanet.cc): the gated
// delta rule on one v head's state, the short causal conv with SiLU, and the SiLU output gate.
// Each has a Highway version (picked per CPU at run time) and a scalar `_ref` beside it that
// the tests compare it with. Stateless; thread-safe; outputs must not alias inputs unless said.
#pragma once

#include <cstddef>

namespace kvtier::model {

// One token of the gated delta rule on one v head (docs/model.md, qwen35):
//   M = decay * M;  d = (v - M k) * beta;  M += d k^T;  out = (M q) * scale
//   m [S][S] f32 in place (row j: value dim j, column i: key dim i); q, k, v, out [S].
// Row j of the update needs only row j, so both versions run it row by row: every row is
// read and written once per token (one pass over the state, not four). The reference does
// the operations in the unfused order's arithmetic (decay product rounded, then the dot
// products summed in index order); the SIMD version sums the dot products in lanes.
void DeltaRuleStep(float* m, size_t S, const float* q, const float* k, const float* v,
                   float decay, float beta, float scale, float* out);
void DeltaRuleStepRef(float* m, size_t S, const float* q, const float* k, const float* v,
                      float decay, float beta, float scale, float* out);

// Causal depthwise conv of K taps, then SiLU, for T tokens of C channels:
//   out[t][c] = silu(sum_j x[t + j][c] * w[c][j]),  x [K - 1 + T][C] (the K - 1 rows of
//   history first), w [C][K], out [T][C].
void CausalConvSilu(const float* x, const float* w, size_t T, size_t C, size_t K, float* out);
void CausalConvSiluRef(const float* x, const float* w, size_t T, size_t C, size_t K,
                       float* out);

// o[i] *= silu(z[i]) for n values (the DeltaNet output gate).
void MulSilu(float* o, const float* z, size_t n);
void MulSiluRef(float* o, const float* z, size_t n);

// The Highway target DeltaRuleStep runs on ("AVX3_ZEN4", ...).
const char* DeltaNetTargetName();

}  // namespace kvtier::model
