// Matrix products with a weight matrix in its file type (any type of kvtier/weights.h):
//   y[t][o] = sum_k x[t][k] * W[o][k]
// Two families of kernels, chosen per call from the weight type and the CPU (a table lookup):
// - int8 (quantized weights with an int8 kernel on this CPU, matmul_int8.h): the activations
//   are quantized once per call to int8 (one scale per 32 values, ggml's q8_0 rule; per 256
//   for the K-quant / iq4_xs super-blocks, as ggml's q8_K) and multiplied by the
//   weight blocks with integer dot products (AVX-512 VNNI or AVX2). Each product of a weight
//   block and an activation block is off by at most (d_x / 2) * sum |w| over the block
//   (rounding of the activation codes), plus f32 rounding.
// - float (f32 / f16 / bf16, and quantized types without an int8 kernel): few tokens decode
//   the weights in registers; more tokens decode 16 rows at a time into an L2-resident f32
//   buffer and run 4-row x 4-token register tiles. Highway dispatch; results equal the
//   float64 reference within f32 rounding.
// Stateless; thread-safe (per-thread scratch is thread_local); MatMulForcePath is for tests
// and benchmarks and must not race with running products.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

// Which kernels MatMul uses for quantized weights. kAuto: the best int8 kernel this CPU runs,
// else float. The others force one family / ISA (a type without a kernel there uses float);
// kInt8Avx512 includes the prefill GEMM (matmul_gemm.h), kInt8Avx512Tiles does not.
enum class MatMulPath { kAuto, kFloat, kInt8Scalar, kInt8Avx2, kInt8Avx512, kInt8Avx512Tiles };
// Returns false (and changes nothing) when this CPU cannot run `p`.
bool MatMulForcePath(MatMulPath p);
// The paths this CPU runs, kAuto first.
std::vector<MatMulPath> MatMulAvailablePaths();
// The kernel MatMul picks for this type and token count, e.g. "q8_0 int8 avx512vnni".
std::string MatMulKernelName(uint32_t ggml_type, size_t n_tok);

}  // namespace kvtier::model
