// The decode GEMV's bandwidth kernels behind MatVecRows (matvec.cu); internal to src/cuda.
// Host API without CUDA headers. Stateless apart from a once-per-kernel attribute; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/format.h"
#include "kvtier/status.h"

namespace kvtier::cuda {

// Whether MatVecFast takes these rows: w 16-byte aligned and row_stride a multiple of 16; f32,
// f16, bf16 at any k (a multiple of 32), q8_0 / q4_0 at k a multiple of 256.
bool MatVecFastApplies(const Format& format, uint32_t k, size_t row_stride, const void* w);

// Rows per warp when the caller leaves it open: 2 from 2048 rows, else 1.
uint32_t MatVecDefaultRows(uint32_t n_out, uint32_t n_tok);

// y [n_tok, n_out] = x [n_tok, k] . W^T (shapes checked by the caller; MatVecFastApplies true).
// rows: weight rows per warp, 1, 2 or 4 (0: MatVecDefaultRows).
Status MatVecFast(const void* w, const Format& format, uint32_t n_out, uint32_t k,
                  size_t row_stride, const float* x, uint32_t n_tok, float* y, uint32_t rows,
                  void* stream);

}  // namespace kvtier::cuda
