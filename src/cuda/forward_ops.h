// Forward-pass building blocks on the GPU (issue 35, the device forward pass's first piece):
// RMSNorm, RoPE, SwiGLU and the dequantizing matrix-vector product, with the CPU forward's
// semantics (src/model/ops.h, src/model/matmul.h) so a device-resident model can be checked
// against it. Host API without CUDA headers; every pointer is device memory unless it says
// otherwise, and work is queued on `stream` (a cudaStream_t; null: the default stream).
// Stateless and thread-safe (distinct streams are independent).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/format.h"
#include "kvtier/status.h"

namespace kvtier::cuda {

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w for n_tok rows of n values (y may be x).
//   x, y [n_tok, n] f32; w [n] f32. The sum of squares in f32 over a thread block
//   (model::RmsNorm sums in double: relative difference ~1e-7).
Status RmsNormRows(const float* x, const float* w, uint32_t n_tok, uint32_t n, float eps,
                   float* y, void* stream = nullptr);

// model::RopeParams with a device pointer for freq_factors ([n_dims / 2] or null).
struct DeviceRope {
  uint32_t head_dim = 0;
  uint32_t n_dims = 0;  // rotated dimensions (<= head_dim, even)
  float theta_base = 10000.0f;
  bool neox = false;  // pairs (i, i + n_dims / 2) instead of (2i, 2i + 1)
  float pos_scale = 1.0f;
  const float* freq_factors = nullptr;
};

// Rotates every head of every token in place: x [n_tok, n_heads, head_dim] f32, pos [n_tok]
// int32. Angles in double, as model::Rope computes them, then cos / sin rounded to f32.
Status RopeRows(float* x, uint32_t n_tok, uint32_t n_heads, const int32_t* pos,
                const DeviceRope& p, void* stream = nullptr);

// g[i] = silu(g[i]) * u[i] for n values (f32).
Status SwiGluRows(float* g, const float* u, size_t n, void* stream = nullptr);

// y [n_tok, n_out] = x [n_tok, k] . W^T for W's n_out rows of k values stored in `format`
// (f32, f16, bf16, q8_0, q4_0: src/quant's row layouts, the same bytes as GGUF's weight
// types), row r at w + r * row_stride; the decode step's dequantizing GEMV, sums in f32, one
// or 8 tokens per pass over the rows. With w 16-byte aligned, row_stride a multiple of 16 (and
// for q8_0 / q4_0 k a multiple of 256) a warp streams 1-4 rows by coalesced 16-byte loads
// (matvec.cu); otherwise a warp per row decodes whole 32-value blocks per lane. k must be a
// multiple of 32, x 16-byte aligned. InvalidArgument names a bad shape.
Status MatVecRows(const void* w, const Format& format, uint32_t n_out, uint32_t k,
                  size_t row_stride, const float* x, uint32_t n_tok, float* y,
                  void* stream = nullptr);

// MatVecRows with its kernel picked by hand (benchmarks, tests): rows_per_warp 1, 2 or 4 for
// the streaming kernel; q8_0 / q4_0: chunk_blocks 16 (4-deep ring) or 32 (3-deep) per warp and
// the shared-memory carve-out in percent (cudaFuncAttributePreferredSharedMemoryCarveout: a
// smaller one leaves L1 to x), x_smem 1: x (every token of a pass) staged once per thread
// block in shared memory (0: each warp loads it); 0 / -1: the default rule. simple: the lane-per-block kernel
// even where the streaming one applies.
struct MatVecTuning {
  uint32_t rows_per_warp = 0;
  bool simple = false;
  uint32_t chunk_blocks = 0;
  int smem_carveout = -1;
  int x_smem = -1;
};
Status MatVecRowsTuned(const void* w, const Format& format, uint32_t n_out, uint32_t k,
                       size_t row_stride, const float* x, uint32_t n_tok, float* y,
                       const MatVecTuning& tuning, void* stream = nullptr);

// Prefill's matrix product through cuBLAS: W's rows are dequantized into the workspace as
// `compute` (f32: an exact SGEMM of the dequantized weights; f16 / bf16: tensor cores with
// f32 accumulation, x rounded to the same type), then y [n_tok, n_out] (f32) = x . W^T.
// Shapes and refusals as MatVecRows. The workspace owns a cuBLAS handle and the scratch
// (grows as needed); one per stream, not thread-safe.
class GemmWorkspace {
 public:
  GemmWorkspace();
  ~GemmWorkspace();
  GemmWorkspace(const GemmWorkspace&) = delete;
  GemmWorkspace& operator=(const GemmWorkspace&) = delete;
  struct Impl;
  Impl* impl() { return impl_; }

 private:
  Impl* impl_;
};

Status GemmRows(const void* w, const Format& format, uint32_t n_out, uint32_t k,
                size_t row_stride, const float* x, uint32_t n_tok, float* y, DType compute,
                GemmWorkspace* ws, void* stream = nullptr);

}  // namespace kvtier::cuda
