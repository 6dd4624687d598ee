// The decode GEMV's bandwidth kernels behind MatVecRows (matvec.cu); internal to src/cuda.
// Host API without CUDA headers. Stateless apart from a once-per-kernel attribute; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/format.h"
#include "cuda/forward_ops.h"
#include "kvtier/status.h"

namespace kvtier::cuda {

// Whether MatVecFast takes these rows: w 16-byte aligned and row_stride a multiple of 16; f32,
// f16, bf16 at any k (a multiple of 32), q8_0 / q4_0 at k a multiple of 256.
bool MatVecFastApplies(const Format& format, uint32_t k, size_t row_stride, const void* w);

// The tuning a call runs with: the caller's fields, the open ones (0 / -1) by the measured
// rule (docs/results/cuda.md).
MatVecTuning MatVecDefaults(const Format& format, uint32_t n_out, uint32_t n_tok,
                            MatVecTuning tuning);

// y [n_tok, n_out] = x [n_tok, k] . W^T (shapes checked by the caller; MatVecFastApplies true).
Status MatVecFast(const void* w, const Format& format, uint32_t n_out, uint32_t k,
                  size_t row_stride, const float* x, uint32_t n_tok, float* y,
                  const MatVecTuning& tuning, void* stream);

}  // namespace kvtier::cuda
