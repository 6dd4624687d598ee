// Shared device helpers of src/cuda: error handling, and f16 / bf16 conversions that equal
// src/base/half.h bit for bit (round to nearest even, NaN payloads kept, no flush to zero), so
// device quantizers write the CPU reference's bytes. Internal to src/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kvtier/dtype.h"
#include "kvtier/status.h"

namespace kvtier::cuda {

inline Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::OK();
  return Status::Internal(std::string("CUDA: ") + what + ": " + cudaGetErrorName(e) + " (" +
                          cudaGetErrorString(e) + ")");
}

#define KVTIER_CUDA_RETURN(call)                                                  \
  do {                                                                            \
    const cudaError_t kvtier_cuda_e_ = (call);                                    \
    if (kvtier_cuda_e_ != cudaSuccess) return CudaStatus(kvtier_cuda_e_, #call);  \
  } while (0)

namespace dev {

__device__ __forceinline__ uint32_t F32Bits(float f) { return __float_as_uint(f); }
__device__ __forceinline__ float F32FromBits(uint32_t u) { return __uint_as_float(u); }

// half.h F32ToF16, step for step.
__device__ __forceinline__ uint16_t F32ToF16(float f) {
  const uint32_t x = F32Bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {
    if (a == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  if (a >= 0x477ff000u) return sign | 0x7c00u;
  if (a < 0x38800000u) {
    const float sum = __fadd_rn(F32FromBits(a), 0.5f);
    return static_cast<uint16_t>(sign | (F32Bits(sum) - 0x3f000000u));
  }
  const uint32_t odd = (a >> 13) & 1u;
  a += 0xc8000fffu + odd;
  return static_cast<uint16_t>(sign | (a >> 13));
}

__device__ __forceinline__ float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  if (em > 0x7c00u) return F32FromBits(sign | 0x7fc00000u | ((em & 0x3ffu) << 13));
  if (em == 0x7c00u) return F32FromBits(sign | 0x7f800000u);
  if (em >= 0x0400u) return F32FromBits(sign | ((em << 13) + 0x38000000u));
  const float v = __fmul_rn(static_cast<float>(em), 5.9604644775390625e-08f);
  return F32FromBits(sign | F32Bits(v));
}

__device__ __forceinline__ uint16_t F32ToBF16(float f) {
  const uint32_t x = F32Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

__device__ __forceinline__ float BF16ToF32(uint16_t b) {
  return F32FromBits(static_cast<uint32_t>(b) << 16);
}

__device__ __forceinline__ float LoadAs(DType t, const void* p, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16: return BF16ToF32(static_cast<const uint16_t*>(p)[i]);
  }
  return 0.0f;
}

__device__ __forceinline__ void StoreAs(DType t, void* p, size_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = F32ToF16(v); break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = F32ToBF16(v); break;
  }
}

// quant_ref.cc's ToInt32OrMin: x86 semantics, NaN and out of range give INT32_MIN.
__device__ __forceinline__ int32_t ToInt32OrMin(float q) {
  if (!(q >= -2147483648.0f && q < 2147483648.0f)) return INT32_MIN;
  return static_cast<int32_t>(q);
}

}  // namespace dev
}  // namespace kvtier::cuda
