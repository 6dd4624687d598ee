// Matrix products with a weight matrix in its file type (any type of kvtier/weights.h):
//   y[t][o] = sum_k x[t][k] * W[o][k]
// Weight rows are decoded 16 at a time into an L2-resident f32 buffer (once per block of up to
// 64 tokens) and multiplied by a register-blocked tile of 4 rows x 4 tokens (16 accumulators
// reduced together at the end). Highway dispatch; results equal the float64 reference within
// f32 rounding.
// Stateless; thread-safe (per-thread scratch is thread_local).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/format.h"
#include "kvtier/model.h"
#include "kvtier/status.h"

namespace kvtier {
class ThreadPool;
}

namespace kvtier::model {

// WeightRowFormat (the row Format that decodes a ggml weight type) is public: kvtier/model.h.
using kvtier::WeightRowFormat;

//   x [n_tok, w.n_in] f32, y [n_tok, w.n_out] f32 (overwritten)
Status MatMul(const WeightMatrix& w, const float* x, size_t n_tok, float* y, ThreadPool* pool);

// float64 reference on the dequantized weights (tests): y [n_tok, w.n_out].
Status MatMulRef(const WeightMatrix& w, const float* x, size_t n_tok, double* y);

// The Highway target MatMul runs on this CPU.
const char* MatMulTargetName();

}  // namespace kvtier::model
