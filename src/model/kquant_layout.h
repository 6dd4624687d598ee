// Byte offsets into the K-quant weight blocks the int8 kernels read (weights/blocks.h's
// BlockQ4_K and BlockQ6_K, 256 values per super-block) and two small decoders shared by the
// scalar and SIMD kernels and their tests. Internal to src/model; header-only, stateless,
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weights/blocks.h"
#include "weights/weight_traits.h"

namespace kvtier::model::int8 {

using weights::BlockQ4_K;
using weights::BlockQ6_K;
constexpr size_t kQK = weights::kQK_K;  // values per super-block

// Q4_K: d f16 | dmin f16 | scales [12] | qs [128]
constexpr size_t kQ4KD = offsetof(BlockQ4_K, d), kQ4KDmin = offsetof(BlockQ4_K, dmin),
                 kQ4KScales = offsetof(BlockQ4_K, scales), kQ4KQs = offsetof(BlockQ4_K, qs),
                 kQ4KBytes = weights::BlockTraits<GgmlType::kQ4_K>::kBlockBytes;
// Q6_K: ql [128] | qh [64] | scales [16] int8 | d f16
constexpr size_t kQ6KQl = offsetof(BlockQ6_K, ql), kQ6KQh = offsetof(BlockQ6_K, qh),
                 kQ6KScales = offsetof(BlockQ6_K, scales), kQ6KD = offsetof(BlockQ6_K, d),
                 kQ6KBytes = weights::BlockTraits<GgmlType::kQ6_K>::kBlockBytes;
// Q5_K: d f16 | dmin f16 | scales [12] | qh [32] | qs [128]
using weights::BlockQ5_K;
constexpr size_t kQ5KD = offsetof(BlockQ5_K, d), kQ5KDmin = offsetof(BlockQ5_K, dmin),
                 kQ5KScales = offsetof(BlockQ5_K, scales), kQ5KQh = offsetof(BlockQ5_K, qh),
                 kQ5KQs = offsetof(BlockQ5_K, qs),
                 kQ5KBytes = weights::BlockTraits<GgmlType::kQ5_K>::kBlockBytes;
// Q3_K: hmask [32] | qs [64] | scales [12] | d f16;  Q2_K: scales [16] | qs [64] | d | dmin
using weights::BlockQ2_K;
using weights::BlockQ3_K;
constexpr size_t kQ3KHmask = offsetof(BlockQ3_K, hmask), kQ3KQs = offsetof(BlockQ3_K, qs),
                 kQ3KScales = offsetof(BlockQ3_K, scales), kQ3KD = offsetof(BlockQ3_K, d),
                 kQ3KBytes = weights::BlockTraits<GgmlType::kQ3_K>::kBlockBytes;
constexpr size_t kQ2KScales = offsetof(BlockQ2_K, scales), kQ2KQs = offsetof(BlockQ2_K, qs),
                 kQ2KD = offsetof(BlockQ2_K, d), kQ2KDmin = offsetof(BlockQ2_K, dmin),
                 kQ2KBytes = weights::BlockTraits<GgmlType::kQ2_K>::kBlockBytes;

// The 2-bit code (0..3) of value v of a Q2_K / Q3_K block's qs: in half n = v / 128, field
// s = (v % 128) / 32 (bits 2s, 2s + 1) of qs[32 n + v % 32].
inline int32_t Q2Code(const uint8_t* qs, size_t v) {
  return (qs[32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3;
}
// Q3_K's high bit of value v: bit 4 n + s of hmask[v % 32] (n, s as above).
inline int32_t Q3HighBit(const uint8_t* hmask, size_t v) {
  return (hmask[v % 32] >> (4 * (v / 128) + (v % 128) / 32)) & 1;
}

// The SIMD kernels load 32-byte qs rows and 64-byte ql halves at these offsets.
static_assert(kQ4KQs == 16 && kQ4KBytes == 144 && kQ6KQh == 128 && kQ6KD == 208 &&
              kQ6KBytes == 210, "K-quant layouts the int8 kernels were written for");

// Scale and min (6 bits each) of Q4_K sub-block j (0..7) from the 12 packed bytes: j < 4 in
// the low 6 bits of bytes j and j + 4; j >= 4 split between a nibble of byte j + 4 and the
// top 2 bits of bytes j - 4 (scale) and j (min).
inline void Q4KScaleMin(const uint8_t* q, size_t j, uint8_t* sc, uint8_t* m) {
  weights::UnpackScaleMinK4(static_cast<int>(j), q, sc, m);
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
