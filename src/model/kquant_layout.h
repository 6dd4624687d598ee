// Byte layouts of the K-quant weight blocks the int8 kernels read (ggml's block_q4_K and
// block_q6_K, 256 values per super-block), as offsets and two small decoders shared by the
// scalar and SIMD kernels. Internal to src/model; header-only, stateless, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier::model::int8 {

constexpr size_t kQK = 256;  // values per super-block

// Q4_K: d f16 | dmin f16 | scales [12] | qs [128]
constexpr size_t kQ4KD = 0, kQ4KDmin = 2, kQ4KScales = 4, kQ4KQs = 16, kQ4KBytes = 144;
// Q6_K: ql [128] | qh [64] | scales [16] int8 | d f16
constexpr size_t kQ6KQl = 0, kQ6KQh = 128, kQ6KScales = 192, kQ6KD = 208, kQ6KBytes = 210;

// Scale and min (6 bits each) of Q4_K sub-block j (0..7) from the 12 packed bytes: j < 4 in
// the low 6 bits of bytes j and j + 4; j >= 4 split between a nibble of byte j + 4 and the
// top 2 bits of bytes j - 4 (scale) and j (min).
inline void Q4KScaleMin(const uint8_t* q, size_t j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The 6-bit code (0..63) of value v (0..255) of a Q6_K block: in each half n of 128 values,
// quarter p = (v % 128) / 32 takes the low (p < 2) or high nibble of ql[64n + 32 (p & 1) + l]
// and bits 2p, 2p + 1 of qh[32n + l], l = v % 32.
inline int32_t Q6KCode(const uint8_t* blk, size_t v) {
  const size_t n = v / 128, r = v % 128, p = r / 32, l = r % 32;
  const uint8_t lo = blk[kQ6KQl + 64 * n + 32 * (p & 1) + l];
  const uint8_t hi = (blk[kQ6KQh + 32 * n + l] >> (2 * p)) & 3;
  return (p < 2 ? lo & 15 : lo >> 4) | (hi << 4);
}

}  // namespace kvtier::model::int8
