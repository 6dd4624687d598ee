// Forward-pass building blocks on the GPU; see forward_ops.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_kv.h"
#include "cuda/forward_ops.h"
#include "cuda/matvec.h"

namespace kvtier::cuda {
namespace {

constexpr int kNormThreads = 256;

// One thread block per token: the sum of squares by a block reduction, then the scaled row.
__global__ void RmsNormKernel(const float* x, const float* w, uint32_t n, float eps, float* y) {
  const float* xt = x + static_cast<size_t>(blockIdx.x) * n;
  float* yt = y + static_cast<size_t>(blockIdx.x) * n;
  float ss = 0.0f;
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xt[i], xt[i], ss);
  __shared__ float part[kNormThreads / 32];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kNormThreads / 32; ++i) total += part[i];
  const float inv =
      static_cast<float>(1.0 / sqrt(static_cast<double>(total) / n + static_cast<double>(eps)));
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) yt[i] = xt[i] * inv * w[i];
}

// One thread block per token; a thread per (head, pair).
__global__ void RopeKernel(float* x, uint32_t n_heads, const int32_t* pos, DeviceRope p) {
  const uint32_t t = blockIdx.x, half = p.n_dims / 2;
  const double position = static_cast<double>(pos[t]) * static_cast<double>(p.pos_scale);
  for (uint32_t j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
    const uint32_t h = j / half, i = j % half;
    double theta = position * pow(static_cast<double>(p.theta_base),
                                  -2.0 * static_cast<double>(i) / p.n_dims);
    if (p.freq_factors) theta /= static_cast<double>(p.freq_factors[i]);
    const float c = static_cast<float>(cos(theta)), s = static_cast<float>(sin(theta));
    float* v = x + (static_cast<size_t>(t) * n_heads + h) * p.head_dim;
    const uint32_t a = p.neox ? i : 2 * i, b = p.neox ? i + half : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    v[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
  }
}

__global__ void SwiGluKernel(float* g, const float* u, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float v = g[i];
    g[i] = v / (1.0f + expf(-v)) * u[i];
  }
}

// 32 values of block b of a row, as f32.
template <FormatKind F>
__device__ __forceinline__ void DecodeBlock(const uint8_t* row, uint32_t b, float (&v)[32]) {
  if constexpr (F == FormatKind::kF32) {
    const float* p = reinterpret_cast<const float*>(row) + 32 * b;
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = p[i];
  } else if constexpr (F == FormatKind::kF16) {
    const __half* p = reinterpret_cast<const __half*>(row) + 32 * b;
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = __half2float(p[i]);
  } else if constexpr (F == FormatKind::kBF16) {
    const __nv_bfloat16* p = reinterpret_cast<const __nv_bfloat16*>(row) + 32 * b;
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = __bfloat162float(p[i]);
  } else if constexpr (F == FormatKind::kQ8_0) {
    const uint8_t* p = row + 34 * b;
    const float d = __half2float(__ushort_as_half(static_cast<uint16_t>(p[0] | (p[1] << 8))));
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = static_cast<float>(static_cast<int8_t>(p[2 + i])) * d;
  } else {
    const uint8_t* p = row + 18 * b;
    const float d = __half2float(__ushort_as_half(static_cast<uint16_t>(p[0] | (p[1] << 8))));
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      v[i] = static_cast<float>(static_cast<int>(p[2 + i] & 0x0f) - 8) * d;
      v[i + 16] = static_cast<float>(static_cast<int>(p[2 + i] >> 4) - 8) * d;
    }
  }
}

constexpr int kMvWarps = 4;
constexpr int kMvTokens = 8;  // tokens per pass over a weight row

// A warp per output row; lane l takes the row's 32-value blocks l, l + 32, ...; tokens in
// passes of kMvTokens.
template <FormatKind F>
__global__ void MatVecKernel(const uint8_t* w, uint32_t n_out, uint32_t k, size_t row_stride,
                             const float* x, uint32_t n_tok, float* y) {
  const uint32_t row = blockIdx.x * kMvWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= n_out) return;
  const uint8_t* wr = w + row * row_stride;
  const uint32_t n_blocks = k / 32;
  for (uint32_t t0 = 0; t0 < n_tok; t0 += kMvTokens) {
    float acc[kMvTokens] = {};
    for (uint32_t b = lane; b < n_blocks; b += 32) {
      float v[32];
      DecodeBlock<F>(wr, b, v);
#pragma unroll
      for (int j = 0; j < kMvTokens; ++j) {
        if (t0 + j < n_tok) {
          const float4* xp = reinterpret_cast<const float4*>(x + (t0 + j) * static_cast<size_t>(k) + 32 * b);
          float s = 0.0f;
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            const float4 xv = xp[q];
            s = fmaf(v[4 * q], xv.x, s);
            s = fmaf(v[4 * q + 1], xv.y, s);
            s = fmaf(v[4 * q + 2], xv.z, s);
            s = fmaf(v[4 * q + 3], xv.w, s);
          }
          acc[j] += s;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kMvTokens; ++j) {
      float s = acc[j];
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0 && t0 + j < n_tok) y[(t0 + j) * static_cast<size_t>(n_out) + row] = s;
    }
  }
}

template <class T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// A thread per 32-value block: out [n_rows, k] of T.
template <FormatKind F, class T>
__global__ void DequantRowsKernel(const uint8_t* w, uint32_t n_rows, uint32_t k,
                                  size_t row_stride, T* out) {
  const uint32_t bpr = k / 32;
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(n_rows) * bpr) return;
  const size_t r = i / bpr;
  const uint32_t b = static_cast<uint32_t>(i % bpr);
  float v[32];
  DecodeBlock<F>(w + r * row_stride, b, v);
  T* o = out + r * k + 32 * b;
#pragma unroll
  for (int j = 0; j < 32; ++j) o[j] = FromFloat<T>(v[j]);
}

template <class T>
__global__ void ConvertKernel(const float* x, size_t n, T* out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = FromFloat<T>(x[i]);
  }
}

template <class T>
Status DequantRows(const uint8_t* w, FormatKind f, uint32_t n_rows, uint32_t k,
                   size_t row_stride, T* out, cudaStream_t s) {
  const size_t n = static_cast<size_t>(n_rows) * (k / 32);
  const unsigned grid = static_cast<unsigned>((n + 127) / 128);
  switch (f) {
    case FormatKind::kF32: DequantRowsKernel<FormatKind::kF32, T><<<grid, 128, 0, s>>>(w, n_rows, k, row_stride, out); break;
    case FormatKind::kF16: DequantRowsKernel<FormatKind::kF16, T><<<grid, 128, 0, s>>>(w, n_rows, k, row_stride, out); break;
    case FormatKind::kBF16: DequantRowsKernel<FormatKind::kBF16, T><<<grid, 128, 0, s>>>(w, n_rows, k, row_stride, out); break;
    case FormatKind::kQ8_0: DequantRowsKernel<FormatKind::kQ8_0, T><<<grid, 128, 0, s>>>(w, n_rows, k, row_stride, out); break;
    case FormatKind::kQ4_0: DequantRowsKernel<FormatKind::kQ4_0, T><<<grid, 128, 0, s>>>(w, n_rows, k, row_stride, out); break;
    default: return Status::Unimplemented("CUDA GEMM: weight format (f32, f16, bf16, q8_0, q4_0 so far)");
  }
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

const char* CublasName(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
  }
}

// The weight rows GemmRows and MatVecRows read: k whole 32-value blocks, rows at least a row apart.
Status CheckRows(const std::string& what, const Format& format, uint32_t k, size_t row_stride) {
  if (k == 0 || k % 32 != 0) {
    return Status::InvalidArgument(what + "k " + std::to_string(k) + " must be a multiple of 32");
  }
  if (row_stride < format.row_bytes(k)) {
    return Status::InvalidArgument(what + "row_stride " + std::to_string(row_stride) +
                                   " is below the " + std::to_string(format.row_bytes(k)) +
                                   " bytes of a " + format.spec() + " row of " +
                                   std::to_string(k) + " values");
  }
  return Status::OK();
}

}  // namespace

struct GemmWorkspace::Impl {
  cublasHandle_t handle = nullptr;
  DeviceBuffer w, x;
};

GemmWorkspace::GemmWorkspace() : impl_(new Impl) {}
GemmWorkspace::~GemmWorkspace() {
  if (impl_->handle) cublasDestroy(impl_->handle);
  delete impl_;
}

Status GemmRows(const void* w, const Format& format, uint32_t n_out, uint32_t k,
                size_t row_stride, const float* x, uint32_t n_tok, float* y, DType compute,
                GemmWorkspace* ws, void* stream) {
  const std::string what = "CUDA GEMM: ";
  KVTIER_RETURN_IF_ERROR(CheckRows(what, format, k, row_stride));
  if (compute != DType::kF32 && compute != DType::kF16 && compute != DType::kBF16) {
    return Status::InvalidArgument(what + "compute type must be f32, f16 or bf16");
  }
  if (n_out == 0 || n_tok == 0) return Status::OK();
  if (!w || !x || !y || !ws) return Status::InvalidArgument(what + "null pointer");
  GemmWorkspace::Impl& im = *ws->impl();
  const auto s = static_cast<cudaStream_t>(stream);
  if (!im.handle) {
    const cublasStatus_t st = cublasCreate(&im.handle);
    if (st != CUBLAS_STATUS_SUCCESS) {
      im.handle = nullptr;
      return Status::Internal(what + "cublasCreate: " + CublasName(st));
    }
  }
  cublasSetStream(im.handle, s);
  const size_t esize = compute == DType::kF32 ? 4 : 2;
  const size_t wbytes = static_cast<size_t>(n_out) * k * esize;
  const size_t xbytes = static_cast<size_t>(n_tok) * k * esize;
  if (im.w.size() < wbytes) {
    im.w = DeviceBuffer();
    KVTIER_ASSIGN_OR_RETURN(im.w, DeviceBuffer::Allocate(wbytes));
  }
  if (compute != DType::kF32 && im.x.size() < xbytes) {
    im.x = DeviceBuffer();
    KVTIER_ASSIGN_OR_RETURN(im.x, DeviceBuffer::Allocate(xbytes));
  }
  const auto* wb = static_cast<const uint8_t*>(w);
  const size_t nx = static_cast<size_t>(n_tok) * k;
  const unsigned cgrid = static_cast<unsigned>(std::min<size_t>((nx + 255) / 256, 4096));
  const void* xa = x;
  cudaDataType_t ab = CUDA_R_32F;
  if (compute == DType::kF32) {
    KVTIER_RETURN_IF_ERROR(DequantRows(wb, format.kind, n_out, k, row_stride, im.w.as<float>(), s));
  } else if (compute == DType::kF16) {
    KVTIER_RETURN_IF_ERROR(DequantRows(wb, format.kind, n_out, k, row_stride, im.w.as<__half>(), s));
    ConvertKernel<__half><<<cgrid, 256, 0, s>>>(x, nx, im.x.as<__half>());
    xa = im.x.data();
    ab = CUDA_R_16F;
  } else {
    KVTIER_RETURN_IF_ERROR(
        DequantRows(wb, format.kind, n_out, k, row_stride, im.w.as<__nv_bfloat16>(), s));
    ConvertKernel<__nv_bfloat16><<<cgrid, 256, 0, s>>>(x, nx, im.x.as<__nv_bfloat16>());
    xa = im.x.data();
    ab = CUDA_R_16BF;
  }
  KVTIER_CUDA_RETURN(cudaGetLastError());
  // Row-major y [n_tok, n_out] = x . W^T is column-major Y^T = W^T' . X: A = W (k x n_out,
  // transposed), B = x (k x n_tok).
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t st = cublasGemmEx(
      im.handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_out), static_cast<int>(n_tok),
      static_cast<int>(k), &one, im.w.data(), ab, static_cast<int>(k), xa, ab,
      static_cast<int>(k), &zero, y, CUDA_R_32F, static_cast<int>(n_out),
      compute == DType::kF32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) return Status::Internal(what + "cublasGemmEx: " + CublasName(st));
  return Status::OK();
}

Status RmsNormRows(const float* x, const float* w, uint32_t n_tok, uint32_t n, float eps,
                   float* y, void* stream) {
  if (n_tok == 0) return Status::OK();
  if (n == 0 || !x || !w || !y) return Status::InvalidArgument("CUDA RMSNorm: empty row or null");
  RmsNormKernel<<<n_tok, kNormThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, w, n, eps, y);
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

Status RopeRows(float* x, uint32_t n_tok, uint32_t n_heads, const int32_t* pos,
                const DeviceRope& p, void* stream) {
  if (n_tok == 0) return Status::OK();
  if (p.n_dims == 0 || p.n_dims % 2 != 0 || p.n_dims > p.head_dim) {
    return Status::InvalidArgument("CUDA RoPE: n_dims " + std::to_string(p.n_dims) +
                                   " must be even and within head_dim " +
                                   std::to_string(p.head_dim));
  }
  if (!x || !pos) return Status::InvalidArgument("CUDA RoPE: null pointer");
  RopeKernel<<<n_tok, 128, 0, static_cast<cudaStream_t>(stream)>>>(x, n_heads, pos, p);
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

Status SwiGluRows(float* g, const float* u, size_t n, void* stream) {
  if (n == 0) return Status::OK();
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 4096));
  SwiGluKernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(g, u, n);
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

Status MatVecRows(const void* w, const Format& format, uint32_t n_out, uint32_t k,
                  size_t row_stride, const float* x, uint32_t n_tok, float* y, void* stream) {
  return MatVecRowsTuned(w, format, n_out, k, row_stride, x, n_tok, y, MatVecTuning{}, stream);
}

Status MatVecRowsTuned(const void* w, const Format& format, uint32_t n_out, uint32_t k,
                       size_t row_stride, const float* x, uint32_t n_tok, float* y,
                       const MatVecTuning& tuning, void* stream) {
  const std::string what = "CUDA matvec: ";
  KVTIER_RETURN_IF_ERROR(CheckRows(what, format, k, row_stride));
  if (n_out == 0 || n_tok == 0) return Status::OK();
  if (!w || !x || !y) return Status::InvalidArgument(what + "null pointer");
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    return Status::InvalidArgument(what + "x must be 16-byte aligned");
  }
  const uint32_t rows = tuning.rows_per_warp;
  if (rows > 4 || rows == 3) {
    return Status::InvalidArgument(what + "rows_per_warp " + std::to_string(rows) +
                                   " (1, 2 or 4)");
  }
  if (tuning.chunk_blocks != 0 && tuning.chunk_blocks != 16 && tuning.chunk_blocks != 32) {
    return Status::InvalidArgument(what + "chunk_blocks " + std::to_string(tuning.chunk_blocks) +
                                   " (16 or 32)");
  }
  if (tuning.smem_carveout > 100) {
    return Status::InvalidArgument(what + "smem_carveout " +
                                   std::to_string(tuning.smem_carveout) + " (percent, -1..100)");
  }
  if (!tuning.simple && MatVecFastApplies(format, k, row_stride, w)) {
    return MatVecFast(w, format, n_out, k, row_stride, x, n_tok, y, tuning, stream);
  }
  const auto* wb = static_cast<const uint8_t*>(w);
  const dim3 grid((n_out + kMvWarps - 1) / kMvWarps);
  const auto s = static_cast<cudaStream_t>(stream);
  switch (format.kind) {
    case FormatKind::kF32:
      MatVecKernel<FormatKind::kF32><<<grid, 32 * kMvWarps, 0, s>>>(wb, n_out, k, row_stride, x, n_tok, y);
      break;
    case FormatKind::kF16:
      MatVecKernel<FormatKind::kF16><<<grid, 32 * kMvWarps, 0, s>>>(wb, n_out, k, row_stride, x, n_tok, y);
      break;
    case FormatKind::kBF16:
      MatVecKernel<FormatKind::kBF16><<<grid, 32 * kMvWarps, 0, s>>>(wb, n_out, k, row_stride, x, n_tok, y);
      break;
    case FormatKind::kQ8_0:
      MatVecKernel<FormatKind::kQ8_0><<<grid, 32 * kMvWarps, 0, s>>>(wb, n_out, k, row_stride, x, n_tok, y);
      break;
    case FormatKind::kQ4_0:
      MatVecKernel<FormatKind::kQ4_0><<<grid, 32 * kMvWarps, 0, s>>>(wb, n_out, k, row_stride, x, n_tok, y);
      break;
    default:
      return Status::Unimplemented(what + "weight format " + format.spec() +
                                   " (f32, f16, bf16, q8_0, q4_0 so far)");
  }
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

}  // namespace kvtier::cuda
