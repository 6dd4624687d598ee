// Rotated codebook rows (FormatKind::kRot, issue 32): the seeded rotation and the per-block
// codebook quantizer, as scalar pieces shared by the reference (quant_ref.cc), the SIMD code
// (rot_simd-inl.h) and the attention driver (which rotates queries and outputs).
//
// A row of head_dim values x is stored as y = R x quantized, R = C H S: S flips the signs of
// the values the seed picks, H is the Walsh-Hadamard transform of each power-of-two block of
// the row (head_dim split into its binary digits, largest first: 128 -> [128], 96 -> [64, 32];
// block-diagonal and orthogonal), C = 1/sqrt(block) normalises. R is orthogonal, so
// q.k = (R q).(R k) and sum_t p_t v_t = R^T sum_t p_t (R v_t). After R the values of a block of
// 32 are close to Gaussian whatever the channel outliers were, which is what the codebooks
// below are fitted to.
//
// Each 32-value block: an f16 scale d and 32 codes of kBits bits, a little-endian bit stream
// (value i at bits [i*kBits, (i+1)*kBits)); y_i ~ kRotLevels[code_i] * d. Quantize: d0 = the
// first value of largest magnitude (sign kept), codes = nearest level of y / d0, then d = the
// least-squares scale for those codes, codes again for y / d, d least squares again (the sums
// in RotBlockSum's fixed order, which the SIMD code follows).
// Levels: Lloyd-Max on y / d0 of Gaussian blocks of 32 with the top level fixed at 1
// (docs/formats/kv-row-formats.md says how they were fitted); MSE per unit variance
// measured on 6.4M Gaussian values: 4 bits 0.0058 (q4_0's uniform grid: 0.0074), 3 bits
// 0.0244 (uniform 0.0304), 2 bits 0.105 (uniform 0.131).
//
// Pure functions of their arguments; thread-safe.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "base/half.h"
#include "quant/blocks.h"

namespace kvtier {

// Blocks of 32 rotated values: fp16 scale, then 32 codes as a little-endian bit stream.
struct BlockRot4 {
  uint16_t d;      // fp16 bits
  uint8_t qs[16];  // [32 codes x 4 bits]
};
static_assert(sizeof(BlockRot4) == 18, "rot4 block: 4.5 bits per value");
struct BlockRot3 {
  uint16_t d;
  uint8_t qs[12];  // [32 codes x 3 bits]
};
static_assert(sizeof(BlockRot3) == 14, "rot3 block: 3.5 bits per value");
struct BlockRot2 {
  uint16_t d;
  uint8_t qs[8];  // [32 codes x 2 bits]
};
static_assert(sizeof(BlockRot2) == 10, "rot2 block: 2.5 bits per value");

inline constexpr size_t kRotBlockValues = 32;
constexpr size_t RotBlockBytes(int bits) { return 2 + kRotBlockValues * static_cast<size_t>(bits) / 8; }
static_assert(RotBlockBytes(4) == sizeof(BlockRot4) && RotBlockBytes(3) == sizeof(BlockRot3) &&
                  RotBlockBytes(2) == sizeof(BlockRot2),
              "rot block sizes");

// Codebooks (ascending; the top level is 1). Stored in files by meaning: never change them.
inline constexpr float kRotLevels4[16] = {
    -0.886724f, -0.714459f, -0.571521f, -0.446225f, -0.333068f, -0.227387f, -0.126510f, -0.027824f,
    0.070700f,  0.170677f,  0.274352f,  0.384619f,  0.504816f,  0.640078f,  0.799186f,  1.0f};
inline constexpr float kRotLevels3[8] = {-0.767635f, -0.477910f, -0.247936f, -0.041548f,
                                         0.161430f,  0.378643f,  0.636628f,  1.0f};
inline constexpr float kRotLevels2[4] = {-0.535682f, -0.071617f, 0.361730f, 1.0f};

template <int kBits>
constexpr const float* RotLevels() {
  static_assert(kBits >= 2 && kBits <= 4, "rot bits");
  if constexpr (kBits == 4) return kRotLevels4;
  else if constexpr (kBits == 3) return kRotLevels3;
  else return kRotLevels2;
}
inline const float* RotLevelsOf(int bits) {
  return bits == 4 ? kRotLevels4 : bits == 3 ? kRotLevels3 : kRotLevels2;
}

// Fixed-point codebooks for the int8 attention path (kernels/int8_*.h): level i as the byte
// u_i = round(kScale * L_i) + kOffset, so L_i = (u_i - kOffset) / kScale within 0.5 / kScale.
// kScale is the one (of those that keep every byte in 0..255) with the least mean squared
// rounding error over the levels: 135 (4 bits; mean squared error 3.3e-6, in units of the
// block scale, against the codebook's own ~1.2e-3), 124 (3 bits, 1.6e-6), 155 (2 bits, 1.6e-7).
template <int kBits>
struct RotFixedLevels {
  static constexpr int kScale = kBits == 4 ? 135 : kBits == 3 ? 124 : 155;
  static constexpr int kOffset = kBits == 4 ? 120 : kBits == 3 ? 95 : 83;
  uint8_t u[1 << kBits];
  constexpr RotFixedLevels() : u() {
    for (int i = 0; i < (1 << kBits); ++i) {
      const float x = RotLevels<kBits>()[i] * static_cast<float>(kScale);
      u[i] = static_cast<uint8_t>(static_cast<int>(x + (x >= 0.0f ? 0.5f : -0.5f)) + kOffset);
    }
  }
};
static_assert(RotFixedLevels<4>().u[0] == 0 && RotFixedLevels<4>().u[15] == 255 &&
                  RotFixedLevels<3>().u[0] == 0 && RotFixedLevels<3>().u[7] == 219 &&
                  RotFixedLevels<2>().u[0] == 0 && RotFixedLevels<2>().u[3] == 238,
              "fixed-point rot levels stay within a byte");

// ---------------------------------------------------------------- the rotation

// Whether value i's sign is flipped under `seed` (splitmix64 of (seed, i / 64), bit i % 64).
inline uint64_t RotSignWord(uint8_t seed, size_t word) {
  uint64_t z = (static_cast<uint64_t>(seed) << 32) + word + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline bool RotSignFlipped(uint8_t seed, size_t i) { return (RotSignWord(seed, i / 64) >> (i % 64)) & 1; }

// The normalisation of a Hadamard block of b values, as both paths compute it.
inline float RotNorm(size_t b) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(b))); }

// The size of the block at offset `off` of a row of n values (the largest power of two not
// above what is left).
inline size_t RotBlockAt(size_t n, size_t off) {
  size_t b = 1;
  while (b * 2 <= n - off) b *= 2;
  return b;
}

// Unnormalised Walsh-Hadamard transform of b (a power of two) values in place: stages h = 1,
// 2, 4, ..., each the butterflies (a, c) -> (a + c, a - c) of x[j], x[j + h]. The SIMD code
// runs the same stages with the same operations (bit-identical results).
inline void FwhtRef(float* x, size_t b) {
  for (size_t h = 1; h < b; h *= 2) {
    for (size_t i = 0; i < b; i += 2 * h) {
      for (size_t j = i; j < i + h; ++j) {
        const float a = x[j], c = x[j + h];
        x[j] = a + c;
        x[j + h] = a - c;
      }
    }
  }
}

// y = R x (forward) or x = R^T y (inverse), n values in place.
inline void RotateRef(float* x, size_t n, uint8_t seed, bool inverse) {
  if (!inverse) {
    for (size_t i = 0; i < n; ++i) if (RotSignFlipped(seed, i)) x[i] = -x[i];
  }
  for (size_t off = 0; off < n;) {
    const size_t b = RotBlockAt(n, off);
    FwhtRef(x + off, b);
    const float c = RotNorm(b);
    for (size_t i = off; i < off + b; ++i) x[i] *= c;
    off += b;
  }
  if (inverse) {
    for (size_t i = 0; i < n; ++i) if (RotSignFlipped(seed, i)) x[i] = -x[i];
  }
}

// ---------------------------------------------------------------- one block

// Midpoints between adjacent levels (as the quantizer compares against them).
template <int kBits>
struct RotMids {
  float m[(1 << kBits) - 1];
  constexpr RotMids() : m() {
    for (int t = 0; t + 1 < (1 << kBits); ++t) m[t] = 0.5f * (RotLevels<kBits>()[t] + RotLevels<kBits>()[t + 1]);
  }
};

// The code search of the 16-lane quantizer (rot_simd_avx512-inl.h) without a compare per
// midpoint: q clamped to [-1, 1] (vrangeps; NaN stays NaN), t = q * kA + kA in [0, kCells)
// truncated is the cell (NaN: 0). kA is kCells / 2 a hair smaller, so q = 1 falls in the
// last cell; each cell is narrower than the gap between two midpoints, so a cell (widened by
// kSlack for the rounding of t) holds at most one: the code is first[cell] (the midpoints
// below the cell) plus (q >= mid[first]) on the unclamped q, the same count as RotCodes'.
// Cell 0 and the last take everything below and above; NaN compares false (code 0).
template <int kBits>
struct RotCellTable {
  static constexpr int kCells = kBits == 4 ? 32 : 16;
  static constexpr float kA = static_cast<float>(kCells / 2) - 1.0f / 1024;
  static constexpr double kSlack = 1e-5;  // t's rounding: under 2^-20 / kA in q
  int32_t first[kCells];                   // [kCells] midpoints below the cell
  float mid[16];                           // [16] midpoints, NaN past the last (never <= q)
  constexpr RotCellTable() : first(), mid() {
    constexpr RotMids<kBits> kM;
    constexpr int kMids = (1 << kBits) - 1;
    for (int t = 0; t < 16; ++t) mid[t] = t < kMids ? kM.m[t] : std::numeric_limits<float>::quiet_NaN();
    for (int k = 0; k < kCells; ++k) {
      int n = 0;
      for (int t = 0; t < kMids; ++t) n += k > 0 && static_cast<double>(kM.m[t]) < Lo(k);
      first[k] = n;
    }
  }
  static constexpr double Lo(int k) { return k / static_cast<double>(kA) - 1.0 - kSlack; }
  static constexpr double Hi(int k) { return (k + 1) / static_cast<double>(kA) - 1.0 + kSlack; }
  // Whether every widened cell holds at most one midpoint.
  constexpr bool Valid() const {
    constexpr RotMids<kBits> kM;
    if (2.0 * kA >= kCells) return false;
    for (int k = 0; k < kCells; ++k) {
      int n = 0;
      for (int t = 0; t + 1 < (1 << kBits); ++t) {
        const double m = kM.m[t];
        n += (k == 0 || m >= Lo(k)) && (k == kCells - 1 || m <= Hi(k));
      }
      if (n > 1) return false;
    }
    return true;
  }
  // The search on one value, as the vector code does it (a test checks it against RotCodes).
  int Code(float q) const {
    const float c = std::isnan(q) || std::fabs(q) <= 1.0f ? q : std::copysign(1.0f, q);
    const float t = std::fma(c, kA, kA);
    const int32_t f = first[std::isnan(t) ? 0 : static_cast<int>(t)];
    return f + (q >= mid[f]);
  }
};
static_assert(RotCellTable<4>().Valid() && RotCellTable<3>().Valid() && RotCellTable<2>().Valid(),
              "rot: a code-search cell holds at most one midpoint");

// Codes of 32 values: the index of the nearest level of y[i] * inv, i.e. the number of
// midpoints at or below it (ties go up; NaN -> 0). Branchless, threshold-major so the compiler
// vectorizes the loop over the 32 values.
template <int kBits>
inline void RotCodes(const float* y, float inv, uint8_t* codes) {
  static constexpr RotMids<kBits> kMids;
  float v[kRotBlockValues];
  for (size_t i = 0; i < kRotBlockValues; ++i) {
    v[i] = y[i] * inv;
    codes[i] = 0;
  }
  for (int t = 0; t + 1 < (1 << kBits); ++t) {
    const float mid = kMids.m[t];
    for (size_t i = 0; i < kRotBlockValues; ++i) codes[i] = static_cast<uint8_t>(codes[i] + (v[i] >= mid));
  }
}

// Sum of 32 values in the fixed order the SIMD code uses (so both paths agree bit for bit):
// p_j = (a[j] + a[16 + j]) + (a[8 + j] + a[24 + j]) for j < 8 (eight independent lanes), then
// ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)).
inline float RotBlockSum8(const float* p) {
  return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}
inline float RotBlockSum(const float* a) {
  float p[8];
  for (size_t j = 0; j < 8; ++j) p[j] = (a[j] + a[16 + j]) + (a[8 + j] + a[24 + j]);
  return RotBlockSum8(p);
}

// 32 codes -> the block's code bytes (the little-endian bit stream of PackCodes).
template <int kBits>
inline void PackRotCodes(const uint8_t* codes, uint8_t* out) {
  if constexpr (kBits == 4) {
    for (size_t k = 0; k < 16; ++k) out[k] = static_cast<uint8_t>(codes[2 * k] | codes[2 * k + 1] << 4);
  } else if constexpr (kBits == 2) {
    for (size_t k = 0; k < 8; ++k) {
      out[k] = static_cast<uint8_t>(codes[4 * k] | codes[4 * k + 1] << 2 | codes[4 * k + 2] << 4 |
                                    codes[4 * k + 3] << 6);
    }
  } else {
    for (size_t k = 0; k < 4; ++k) {  // 8 codes per 3 bytes
      uint32_t w = 0;
      for (size_t j = 0; j < 8; ++j) w |= static_cast<uint32_t>(codes[8 * k + j]) << (3 * j);
      out[3 * k] = static_cast<uint8_t>(w);
      out[3 * k + 1] = static_cast<uint8_t>(w >> 8);
      out[3 * k + 2] = static_cast<uint8_t>(w >> 16);
    }
  }
}

// The least-squares scale of y for the levels of `codes` (keep `d` when all levels are 0):
// sum y_i l_i / sum l_i^2, both sums in RotBlockSum's order.
template <int kBits>
inline float RotLeastSquares(const float* y, const uint8_t* codes, float d) {
  const float* L = RotLevels<kBits>();
  float xl[kRotBlockValues], ll[kRotBlockValues];
  for (size_t i = 0; i < kRotBlockValues; ++i) {
    xl[i] = y[i] * L[codes[i]];
    ll[i] = L[codes[i]] * L[codes[i]];
  }
  const float sxl = RotBlockSum(xl), sll = RotBlockSum(ll);
  return sll > 0.0f ? sxl / sll : d;
}

// 32 rotated values y -> one block (RotBlockBytes(kBits) bytes).
template <int kBits>
inline void QuantizeRotBlock(const float* y, uint8_t* block) {
  float m = 0.0f, am = 0.0f;
  for (size_t i = 0; i < kRotBlockValues; ++i) {
    if (std::fabs(y[i]) > am) {
      am = std::fabs(y[i]);
      m = y[i];
    }
  }
  uint8_t codes[kRotBlockValues] = {};
  float d = 0.0f;
  if (am > 0.0f && std::isfinite(am)) {
    d = m;
    for (int pass = 0; pass < 2; ++pass) {
      RotCodes<kBits>(y, 1.0f / d, codes);
      d = RotLeastSquares<kBits>(y, codes, d);
    }
  }
  const uint16_t dh = F32ToF16(d);
  std::memcpy(block, &dh, 2);
  PackRotCodes<kBits>(codes, block + 2);
}

// One block -> its 32 codes and its scale.
template <int kBits>
inline float UnpackRotBlock(const uint8_t* block, uint8_t* codes) {
  uint16_t dh;
  std::memcpy(&dh, block, 2);
  if constexpr (kBits == 4) {
    for (size_t k = 0; k < 16; ++k) {
      codes[2 * k] = block[2 + k] & 0x0f;
      codes[2 * k + 1] = block[2 + k] >> 4;
    }
  } else if constexpr (kBits == 2) {
    for (size_t k = 0; k < 8; ++k) {
      const uint8_t b = block[2 + k];
      codes[4 * k] = b & 3;
      codes[4 * k + 1] = (b >> 2) & 3;
      codes[4 * k + 2] = (b >> 4) & 3;
      codes[4 * k + 3] = b >> 6;
    }
  } else {
    for (size_t k = 0; k < 4; ++k) {  // 8 codes per 3 bytes
      const uint8_t* p = block + 2 + 3 * k;
      const uint32_t w = p[0] | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16;
      for (size_t j = 0; j < 8; ++j) codes[8 * k + j] = (w >> (3 * j)) & 7;
    }
  }
  return F16ToF32(dh);
}

// One block -> 32 rotated values (levels[code] * d).
template <int kBits>
inline void DequantizeRotBlock(const uint8_t* block, float* y) {
  uint8_t codes[kRotBlockValues];
  const float d = UnpackRotBlock<kBits>(block, codes);
  const float* L = RotLevels<kBits>();
  for (size_t i = 0; i < kRotBlockValues; ++i) y[i] = L[codes[i]] * d;
}

}  // namespace kvtier
