// IEEE binary16 (f16) and bfloat16 (bf16) <-> f32 conversion, scalar reference.
// Rounding is round-to-nearest-even; Inf stays Inf; NaN stays NaN (sign and the top
// payload bits kept, quiet bit set, as x86 F16C does in both directions).
// Pure functions; thread-safe. SIMD paths elsewhere must match these bit for bit.
#pragma once

#include <bit>
#include <cstdint>

namespace kvtier {

inline uint32_t F32Bits(float f) { return std::bit_cast<uint32_t>(f); }
inline float F32FromBits(uint32_t u) { return std::bit_cast<float>(u); }

inline uint16_t F32ToF16(float f) {
  const uint32_t x = F32Bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // Inf or NaN
    if (a == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to Inf
  if (a < 0x38800000u) {                        // below 2^-14: f16 subnormal or zero
    // Adding 0.5f puts the f16 subnormal unit (2^-24) at the f32 ulp of the sum, so the
    // FPU's own round-to-nearest-even does the rounding.
    const float sum = F32FromBits(a) + 0.5f;
    return static_cast<uint16_t>(sign | (F32Bits(sum) - 0x3f000000u));
  }
  const uint32_t odd = (a >> 13) & 1u;
  a += 0xc8000fffu + odd;  // rebias exponent (127 -> 15) and round to nearest even
  return static_cast<uint16_t>(sign | (a >> 13));
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  if (em > 0x7c00u) return F32FromBits(sign | 0x7fc00000u | ((em & 0x3ffu) << 13));  // quiet NaN
  if (em == 0x7c00u) return F32FromBits(sign | 0x7f800000u);
  if (em >= 0x0400u) return F32FromBits(sign | ((em << 13) + 0x38000000u));
  const float v = static_cast<float>(em) * 5.9604644775390625e-08f;  // em * 2^-24, exact
  return F32FromBits(sign | F32Bits(v));
}

inline uint16_t F32ToBF16(float f) {
  const uint32_t x = F32Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

inline float BF16ToF32(uint16_t b) { return F32FromBits(static_cast<uint32_t>(b) << 16); }

}  // namespace kvtier
