// Rotated codebook rows (FormatKind::kRot, src/quant/rot.h) on the GPU: the seeded rotation
// R = C H S and the per-block codebook quantizer of quant_ref.cc, one warp per row, every
// float operation the reference's own (explicitly rounded intrinsics, no FMA contraction) in
// the same order, so a row's bytes equal QuantizeRowsRef's. The butterflies of a Hadamard stage
// are independent, so the warp may run them in any order; RotBlockSum's fixed tree is a chain
// of shuffles. Internal to src/cuda; pure device functions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_common.cuh"

namespace kvtier::cuda {

inline constexpr uint32_t kRotMaxHeadDim = 256;  // a row staged in shared memory

// One rot format's constants, filled on the host from src/quant/rot.h (levels, and the
// midpoints exactly as RotMids computes them).
struct RotConsts {
  float levels[16];
  float mids[15];
  int n_levels = 0;  // 1 << bits
  int bits = 0;
  uint32_t seed = 0;
};

namespace dev {

// RotSignFlipped: bit i % 64 of splitmix64 of (seed, i / 64).
__device__ __forceinline__ bool RotFlipped(uint32_t seed, uint32_t i) {
  uint64_t z = (static_cast<uint64_t>(seed) << 32) + i / 64 + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z = z ^ (z >> 31);
  return (z >> (i % 64)) & 1;
}

// y = R y (inverse: y = R^T y) for n values (a multiple of 32, <= kRotMaxHeadDim) in
// warp-private shared memory; RotateRef's steps.
__device__ __forceinline__ void RotateRowWarp(float* y, uint32_t n, uint32_t seed, int lane,
                                              bool inverse = false) {
  if (!inverse) {
    for (uint32_t i = lane; i < n; i += 32) {
      if (RotFlipped(seed, i)) y[i] = -y[i];
    }
    __syncwarp();
  }
  for (uint32_t off = 0; off < n;) {
    uint32_t b = 1;
    while (b * 2 <= n - off) b *= 2;
    for (uint32_t h = 1; h < b; h *= 2) {
      for (uint32_t p = lane; p < b / 2; p += 32) {
        const uint32_t i = off + (p / h) * 2 * h + p % h;
        const float a = y[i], c = y[i + h];
        y[i] = __fadd_rn(a, c);
        y[i + h] = __fsub_rn(a, c);
      }
      __syncwarp();
    }
    const float c = static_cast<float>(1.0 / sqrt(static_cast<double>(b)));  // RotNorm
    for (uint32_t i = off + lane; i < off + b; i += 32) y[i] = __fmul_rn(y[i], c);
    __syncwarp();
    off += b;
  }
  if (inverse) {
    for (uint32_t i = lane; i < n; i += 32) {
      if (RotFlipped(seed, i)) y[i] = -y[i];
    }
    __syncwarp();
  }
}

// RotBlockSum of one value per lane: (a[j] + a[16 + j]) + (a[8 + j] + a[24 + j]) = p_j, then
// ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)); every lane gets it.
__device__ __forceinline__ float RotBlockSumWarp(float a) {
  const unsigned full = 0xffffffffu;
  a = __fadd_rn(a, __shfl_down_sync(full, a, 16));
  a = __fadd_rn(a, __shfl_down_sync(full, a, 8));
  a = __fadd_rn(a, __shfl_down_sync(full, a, 4));
  a = __fadd_rn(a, __shfl_down_sync(full, a, 2));
  a = __fadd_rn(a, __shfl_down_sync(full, a, 1));
  return __shfl_sync(full, a, 0);
}

// QuantizeRotBlock with value `lane` of the block in y: writes 2 + 4 * bits bytes at dst.
__device__ __forceinline__ void QuantizeRotBlockWarp(float y, const RotConsts& rc, uint8_t* dst,
                                                     int lane) {
  const unsigned full = 0xffffffffu;
  // The first value of largest magnitude (NaN never wins; all zero: none).
  const float ay = fabsf(y);
  float key = isnan(ay) ? -1.0f : ay;
  int idx = lane;
  for (int o = 16; o > 0; o >>= 1) {
    const float ok = __shfl_xor_sync(full, key, o);
    const int oi = __shfl_xor_sync(full, idx, o);
    if (ok > key || (ok == key && oi < idx)) {
      key = ok;
      idx = oi;
    }
  }
  const float m = __shfl_sync(full, y, idx);
  const float am = key > 0.0f ? key : 0.0f;
  uint32_t code = 0;
  float d = 0.0f;
  if (am > 0.0f && isfinite(am)) {
    d = m;
    for (int pass = 0; pass < 2; ++pass) {
      const float v = __fmul_rn(y, __fdiv_rn(1.0f, d));
      code = 0;
      for (int t = 0; t + 1 < rc.n_levels; ++t) code += v >= rc.mids[t] ? 1u : 0u;
      const float l = rc.levels[code];
      const float sxl = RotBlockSumWarp(__fmul_rn(y, l));
      const float sll = RotBlockSumWarp(__fmul_rn(l, l));
      d = sll > 0.0f ? __fdiv_rn(sxl, sll) : d;
    }
  }
  // The little-endian bit stream: value i at bits [i * bits, (i + 1) * bits).
  uint32_t planes[4] = {};
  for (int b = 0; b < rc.bits; ++b) planes[b] = __ballot_sync(full, (code >> b) & 1u);
  if (lane < 4 * rc.bits) {
    uint32_t byte = 0;
    for (int j = 0; j < 8; ++j) {
      const int s = 8 * lane + j;
      byte |= ((planes[s % rc.bits] >> (s / rc.bits)) & 1u) << j;
    }
    dst[2 + lane] = static_cast<uint8_t>(byte);
  }
  if (lane == 0) {
    const uint16_t dh = F32ToF16(d);
    dst[0] = static_cast<uint8_t>(dh);
    dst[1] = static_cast<uint8_t>(dh >> 8);
  }
}

}  // namespace dev
}  // namespace kvtier::cuda
