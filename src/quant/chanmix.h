// Per-channel token-grouped K with two code widths (FormatKind::kChanMix, issue 32): the
// layout and the scalar pieces of chanmix<b>g<G>, shared by the reference (chanmix_ref.cc),
// the chan dispatchers (chan_ref.cc, chan_simd.cc) and so the attention kernels' generic path.
//
// As chan<b>g<G> (quant/chan.h) it stores a KV head's keys of G consecutive tokens (a group)
// per channel, but per group and head the D/2 channels of largest range get b+1-bit codes and
// the others b bits (b 2 or 3): a group's budget of bits goes where the error is (the squared
// error of a uniform grid is range^2 / 4^bits). The widths are not stored: they follow from
// the stored parameters, so quantizer and decoder derive the same ones.
//
// Parameters of channel c (per group and head): f16 lo_c and f16 hi_c, the channel's min and
// max over the group's tokens. Range r_c = f32(hi_c) - f32(lo_c). Rank: channels by r_c,
// largest first, ties to the lower channel index; the first D/2 are "wide" (w_c = b + 1),
// the others w_c = b. Step s_c = r_c / (2^w_c - 1) (f32), inv_c = s_c != 0 ? 1 / s_c : 0.
// Code q = clamp(round_half_even((x - lo_c) * inv_c), 0, 2^w_c - 1) (chan.h's ChanCode);
// value fma(q, s_c, lo_c).
//
// Row (t, h) of a block, R = D * (2b + 1) / 16 + 4 * D / G bytes:
//
//   [codes of token t: channel c's w_c bits at bit offset sum_{j<c} w_j of a little-endian
//    bit stream; D * b + D / 2 bits in all]
//   [slice j = t % G of head h's group parameters P = [f16 lo[D]][f16 hi[D]]: 4 * D / G bytes]
//
// so a group's rows are self-contained, as chan's. b + 0.5 + 32 / G bits per value
// (chanmix3g64: 4.0, chanmix3g128: 3.75, chanmix2g64: 3.0).
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/half.h"
#include "quant/chan.h"

namespace kvtier {

// Bytes of one token's codes / of one row.
constexpr size_t ChanMixCodeBytes(int bits, size_t head_dim) {
  return head_dim * (2 * static_cast<size_t>(bits) + 1) / 16;
}
constexpr size_t ChanMixRowBytes(int bits, size_t group, size_t head_dim) {
  return ChanMixCodeBytes(bits, head_dim) + ChanSliceBytes(group, head_dim);
}

// Code widths from the stored parameters: w[c] = bits + 1 for the D/2 channels of largest
// f32(hi16) - f32(lo16) (ties to the lower index), bits for the others. O(D^2), once per
// group and head.
inline void ChanMixWidths(const uint16_t* lo16, const uint16_t* hi16, size_t head_dim, int bits,
                          uint8_t* w) {
  float r[kChanMaxHeadDim];
  for (size_t c = 0; c < head_dim; ++c) r[c] = F16ToF32(hi16[c]) - F16ToF32(lo16[c]);
  for (size_t c = 0; c < head_dim; ++c) {
    size_t above = 0;  // channels ranked before c
    for (size_t j = 0; j < head_dim; ++j) above += (r[j] > r[c] || (r[j] == r[c] && j < c)) ? 1 : 0;
    w[c] = static_cast<uint8_t>(above < head_dim / 2 ? bits + 1 : bits);
  }
}

// Packs D codes, channel c w[c] bits wide, into a little-endian bit stream.
inline void ChanMixPack(const uint8_t* codes, const uint8_t* w, size_t head_dim, size_t out_bytes,
                        uint8_t* out) {
  std::memset(out, 0, out_bytes);
  size_t bit = 0;
  for (size_t c = 0; c < head_dim; ++c) {
    const uint32_t v = static_cast<uint32_t>(codes[c]) << (bit % 8);
    out[bit / 8] |= static_cast<uint8_t>(v);
    if ((bit % 8) + w[c] > 8) out[bit / 8 + 1] |= static_cast<uint8_t>(v >> 8);
    bit += w[c];
  }
}

// Unpacks D codes of a ChanMixPack stream.
inline void ChanMixUnpack(const uint8_t* in, const uint8_t* w, size_t head_dim, uint8_t* codes) {
  size_t bit = 0;
  for (size_t c = 0; c < head_dim; ++c) {
    uint32_t v = in[bit / 8];
    if ((bit % 8) + w[c] > 8) v |= static_cast<uint32_t>(in[bit / 8 + 1]) << 8;
    codes[c] = static_cast<uint8_t>((v >> (bit % 8)) & ((1u << w[c]) - 1));
    bit += w[c];
  }
}

// A group's decoded parameters: per channel lo, step, inverse step and width.
struct ChanMixParams {
  float lo[kChanMaxHeadDim], step[kChanMaxHeadDim], inv[kChanMaxHeadDim];
  uint8_t w[kChanMaxHeadDim];
};

inline void ChanMixParamsOf(const uint16_t* lo16, const uint16_t* hi16, size_t head_dim, int bits,
                            ChanMixParams* p) {
  ChanMixWidths(lo16, hi16, head_dim, bits, p->w);
  for (size_t c = 0; c < head_dim; ++c) {
    p->lo[c] = F16ToF32(lo16[c]);
    const float r = F16ToF32(hi16[c]) - p->lo[c];
    p->step[c] = r / static_cast<float>((1 << p->w[c]) - 1);
    p->inv[c] = p->step[c] != 0.0f ? 1.0f / p->step[c] : 0.0f;
  }
}

// Gathers P = [lo16[D]][hi16[D]] from the slices of a group's G rows (row0: the group's first
// row of the head; rows token_stride bytes apart) / scatters it into them.
inline void ChanMixLoadRaw(const uint8_t* row0, size_t token_stride, int bits, size_t group,
                           size_t head_dim, uint16_t* lo16, uint16_t* hi16) {
  uint16_t p[2 * kChanMaxHeadDim];
  const size_t code_bytes = ChanMixCodeBytes(bits, head_dim);
  const size_t slice = ChanSliceBytes(group, head_dim);
  auto* pb = reinterpret_cast<uint8_t*>(p);
  for (size_t j = 0; j < group; ++j) std::memcpy(pb + j * slice, row0 + j * token_stride + code_bytes, slice);
  std::memcpy(lo16, p, head_dim * 2);
  std::memcpy(hi16, p + head_dim, head_dim * 2);
}
inline void ChanMixStoreRaw(const uint16_t* lo16, const uint16_t* hi16, size_t group, int bits,
                            size_t head_dim, uint8_t* row0, size_t token_stride) {
  uint16_t p[2 * kChanMaxHeadDim];
  std::memcpy(p, lo16, head_dim * 2);
  std::memcpy(p + head_dim, hi16, head_dim * 2);
  const size_t code_bytes = ChanMixCodeBytes(bits, head_dim);
  const size_t slice = ChanSliceBytes(group, head_dim);
  const auto* pb = reinterpret_cast<const uint8_t*>(p);
  for (size_t j = 0; j < group; ++j) std::memcpy(row0 + j * token_stride + code_bytes, pb + j * slice, slice);
}

}  // namespace kvtier
