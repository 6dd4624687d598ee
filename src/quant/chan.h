// Per-channel token-grouped K (FormatKind::kChan, issue 32): the layout and the scalar pieces
// shared by the reference (chan_ref.cc), the SIMD code (chan_simd.cc) and the attention
// kernels (which read the codes in place).
//
// chan<bits>g<G> stores a KV head's keys of G consecutive tokens (a "group"; a KV block holds
// block_tokens / G of them) per channel: for each channel c an f16 scale s_c and an f16 min m_c
// over the group's tokens, and per token a bits-wide code q_tc, x_tc ~ m_c + q_tc * s_c. Keys
// have large per-channel offsets (KIVI); grouping per channel across tokens takes them out,
// where per-token groups pay for them in every scale.
//
// It keeps the paged cache's row grid: row (t, h) of a block (t the token's slot, h the KV
// head; head_dim D) is R = D*bits/8 + 4*D/G bytes:
//
//   [codes of token t: D codes, a little-endian bit stream, channel c at bits [c*bits, ...)]
//   [slice j = t % G of head h's group parameters: 4*D/G bytes]
//
// The group parameters of head h are P = [f16 scale[D]][f16 min[D]] (4*D bytes), cut into G
// slices in order, slice j at the end of the group's row j. So a whole group (G rows of a
// head) is self-contained, a whole block is, and row (t, h) sits where every other format's
// does (PagedKvView::k_row): only the parameters need the group's first row.
//
// Quantize (a group of n <= G present tokens; rows n..G-1 get zero codes and still carry
// their parameter slices): per channel lo = min, hi = max over the present tokens;
// m = f16(lo), s = f16((hi - m) / (2^bits - 1)), inv = s != 0 ? 1 / s : 0;
// q = clamp(round_half_even((x - m) * inv), 0, 2^bits - 1). Dequantize: fma(q, s, m).
// bits + 32/G bits per value (chan4g64: 4.5).
//
// Pure functions; thread-safe.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/half.h"

namespace kvtier {

// Bytes of one token's codes / of one row's parameter slice / of one row.
constexpr size_t ChanCodeBytes(int bits, size_t head_dim) { return head_dim * static_cast<size_t>(bits) / 8; }
constexpr size_t ChanSliceBytes(size_t group, size_t head_dim) { return 4 * head_dim / group; }
constexpr size_t ChanRowBytes(int bits, size_t group, size_t head_dim) {
  return ChanCodeBytes(bits, head_dim) + ChanSliceBytes(group, head_dim);
}
// Largest head_dim the chan helpers take (buffers on the stack are sized by it).
inline constexpr size_t kChanMaxHeadDim = 256;

// Packs n codes (each < 2^bits) into a little-endian bit stream of n*bits/8 bytes.
inline void ChanPack(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  if (bits == 4) {
    for (size_t i = 0; i < n / 2; ++i) {
      out[i] = static_cast<uint8_t>(codes[2 * i] | codes[2 * i + 1] << 4);
    }
    return;
  }
  std::memset(out, 0, n * static_cast<size_t>(bits) / 8);
  for (size_t i = 0; i < n; ++i) {
    const size_t bit = i * static_cast<size_t>(bits);
    const uint32_t v = static_cast<uint32_t>(codes[i]) << (bit % 8);
    out[bit / 8] |= static_cast<uint8_t>(v);
    if ((bit % 8) + static_cast<size_t>(bits) > 8) out[bit / 8 + 1] |= static_cast<uint8_t>(v >> 8);
  }
}

// Unpacks n codes of a ChanPack stream.
inline void ChanUnpack(const uint8_t* in, size_t n, int bits, uint8_t* codes) {
  if (bits == 4) {
    for (size_t i = 0; i < n / 2; ++i) {
      codes[2 * i] = in[i] & 0xf;
      codes[2 * i + 1] = in[i] >> 4;
    }
    return;
  }
  const uint32_t mask = (1u << bits) - 1;
  for (size_t i = 0; i < n; ++i) {
    const size_t bit = i * static_cast<size_t>(bits);
    uint32_t w = in[bit / 8];
    if ((bit % 8) + static_cast<size_t>(bits) > 8) w |= static_cast<uint32_t>(in[bit / 8 + 1]) << 8;
    codes[i] = static_cast<uint8_t>((w >> (bit % 8)) & mask);
  }
}

// The group parameters of one head: gathers P (4*D bytes) from the slices of the group's G
// rows (row0: the group's first row of this head; rows token_stride bytes apart) and decodes
// scale[D] and min[D] to f32.
inline void ChanLoadParams(const uint8_t* row0, size_t token_stride, int bits, size_t group,
                           size_t head_dim, float* scale, float* min) {
  uint16_t p[2 * kChanMaxHeadDim];
  const size_t code_bytes = ChanCodeBytes(bits, head_dim);
  const size_t slice = ChanSliceBytes(group, head_dim);
  auto* pb = reinterpret_cast<uint8_t*>(p);
  for (size_t j = 0; j < group; ++j) std::memcpy(pb + j * slice, row0 + j * token_stride + code_bytes, slice);
  for (size_t c = 0; c < head_dim; ++c) {
    scale[c] = F16ToF32(p[c]);
    min[c] = F16ToF32(p[head_dim + c]);
  }
}

// Scatters P = [scale16[D]][min16[D]] into the slices of the group's G rows.
inline void ChanStoreParams(const uint16_t* scale16, const uint16_t* min16, size_t group,
                            int bits, size_t head_dim, uint8_t* row0, size_t token_stride) {
  uint16_t p[2 * kChanMaxHeadDim];
  std::memcpy(p, scale16, head_dim * 2);
  std::memcpy(p + head_dim, min16, head_dim * 2);
  const size_t code_bytes = ChanCodeBytes(bits, head_dim);
  const size_t slice = ChanSliceBytes(group, head_dim);
  const auto* pb = reinterpret_cast<const uint8_t*>(p);
  for (size_t j = 0; j < group; ++j) std::memcpy(row0 + j * token_stride + code_bytes, pb + j * slice, slice);
}

// One channel's parameters from its min and max over the group (see the header comment).
struct ChanParam {
  uint16_t scale16, min16;
  float scale, min, inv;
};
inline ChanParam ChanParamOf(float lo, float hi, int bits) {
  ChanParam p;
  p.min16 = F32ToF16(lo);
  p.min = F16ToF32(p.min16);
  p.scale16 = F32ToF16((hi - p.min) / static_cast<float>((1 << bits) - 1));
  p.scale = F16ToF32(p.scale16);
  p.inv = p.scale != 0.0f ? 1.0f / p.scale : 0.0f;
  return p;
}

// One code (the vector code does the same operations in the same order).
inline uint8_t ChanCode(float x, float min, float inv, int bits) {
  float v = std::nearbyint((x - min) * inv);
  v = v > 0.0f ? v : 0.0f;  // NaN -> 0, as x86 max(v, 0)
  const float top = static_cast<float>((1 << bits) - 1);
  v = v < top ? v : top;
  return static_cast<uint8_t>(v);
}

}  // namespace kvtier
