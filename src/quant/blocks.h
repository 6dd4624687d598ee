// On-the-wire layouts of the quantized row formats (ggml-style plain structs), the affine
// row layout helpers, and shared scalar pieces used by both reference and SIMD code.
// Everything here is a layout fact: changing it breaks files on disk and GGUF compatibility.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/dtype_io.h"
#include "base/half.h"
#include "kvtier/format.h"

namespace kvtier {

// ggml block_q8_0: d (fp16) then 32 signed codes; x = qs[i] * d.
struct BlockQ8_0 {
  uint16_t d;     // fp16 bits
  int8_t qs[32];  // [32]
};
static_assert(sizeof(BlockQ8_0) == 34, "q8_0 block must match GGUF");

// ggml block_q4_0: d (fp16) then 16 bytes; byte j holds x[j] (low nibble) and x[j+16]
// (high nibble) as unsigned codes; x = (code - 8) * d.
struct BlockQ4_0 {
  uint16_t d;      // fp16 bits
  uint8_t qs[16];  // [16]
};
static_assert(sizeof(BlockQ4_0) == 18, "q4_0 block must match GGUF");

// Affine row: [codes: head_dim*bits/8 bytes, little-endian bit stream, value i at bits
// [i*bits, (i+1)*bits)] [scales: n_groups x scale_dtype] [biases: n_groups x scale_dtype].
struct AffineRowLayout {
  size_t code_bytes;   // head_dim * bits / 8
  size_t group_code_bytes;  // group * bits / 8
  size_t n_groups;     // head_dim / group
  size_t scale_size;   // bytes of one scale / bias
  size_t scales_off;   // == code_bytes
  size_t biases_off;   // == code_bytes + n_groups * scale_size
};

inline AffineRowLayout MakeAffineLayout(const Format& f, size_t head_dim) {
  AffineRowLayout l;
  l.code_bytes = head_dim * f.bits / 8;
  l.group_code_bytes = static_cast<size_t>(f.group) * f.bits / 8;
  l.n_groups = head_dim / f.group;
  l.scale_size = DTypeSize(f.scale_dtype);
  l.scales_off = l.code_bytes;
  l.biases_off = l.code_bytes + l.n_groups * l.scale_size;
  return l;
}

// MLX affine group parameters from the group's min and max (MLX's edge handling: the end
// with the larger magnitude is represented exactly by code 0; eps floors the scale).
// Codes are rint((x - bias) * inv_scale): MLX divides by scale instead. The two differ only
// when (x - bias) / scale lies within about an ulp of a half-integer (measured rate below
// 1e-5 on normal data, each such code off by one; quant_ref_test checks it). Multiplying
// keeps the SIMD kernel off the divider, the slowest unit it would otherwise use.
struct AffineParams {
  float scale;      // in f32; stored in the scale dtype
  float bias;
  float inv_scale;  // 1 / scale, used to compute codes
};

inline AffineParams AffineParamsFromMinMax(float w_min, float w_max, int bits) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const float eps = 1e-7f;
  const bool mask = std::fabs(w_min) > std::fabs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, eps);
  scale = mask ? scale : -scale;
  const float edge = mask ? w_min : w_max;
  const float q0 = std::rint(edge / scale);
  float bias = 0.0f;
  if (q0 != 0.0f) {
    scale = edge / q0;
    bias = edge;
  }
  return {scale, bias, 1.0f / scale};
}

// Little-endian bit-stream packing of `n` codes (each < 2^bits) into bytes.
inline void PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  uint64_t acc = 0;
  int filled = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; ++i) {
    acc |= static_cast<uint64_t>(codes[i]) << filled;
    filled += bits;
    while (filled >= 8) {
      out[o++] = static_cast<uint8_t>(acc);
      acc >>= 8;
      filled -= 8;
    }
  }
}

inline void UnpackCodes(const uint8_t* in, size_t n, int bits, uint8_t* codes) {
  uint64_t acc = 0;
  int filled = 0;
  size_t o = 0;
  const uint64_t mask = (1u << bits) - 1;
  for (size_t i = 0; i < n; ++i) {
    while (filled < bits) {
      acc |= static_cast<uint64_t>(in[o++]) << filled;
      filled += 8;
    }
    codes[i] = static_cast<uint8_t>(acc & mask);
    acc >>= bits;
    filled -= bits;
  }
}

}  // namespace kvtier
