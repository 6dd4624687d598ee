// f16 / bf16 conversion checked against a float64 model of IEEE round-to-nearest-even.
#include "base/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace kvtier {
namespace {

// Value of a finite f16 bit pattern, computed in double from its fields.
double F16Value(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

// Model: nearest f16 to x (ties to even mantissa), Inf beyond the rounding boundary.
uint16_t ModelF32ToF16(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(x) || a >= 65520.0) return sign | 0x7c00;
  // Candidates are consecutive non-negative patterns; find the largest h with value <= a.
  uint16_t lo = 0, hi = 0x7bff;
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (F16Value(mid) <= a) lo = mid; else hi = mid - 1;
  }
  if (F16Value(lo) == a) return sign | lo;
  const uint16_t up = lo + 1;  // 0x7c00 (Inf) is excluded above: a < 65520
  const double dlo = a - F16Value(lo), dup = F16Value(up) - a;
  if (dlo < dup) return sign | lo;
  if (dup < dlo) return sign | up;
  return sign | ((lo & 1) ? up : lo);
}

uint16_t ModelF32ToBF16(float x) {
  const uint32_t u = F32Bits(x);
  const uint32_t down = u & 0xffff0000u;
  const double a = static_cast<double>(x);
  const double vd = static_cast<double>(F32FromBits(down));
  // The next bf16 away from zero; at the top of the finite range it is Inf.
  const uint32_t up_bits = down + 0x10000u;
  const double vu = ((up_bits & 0x7f800000u) == 0x7f800000u)
                        ? std::ldexp(std::signbit(x) ? -1.0 : 1.0, 128)
                        : static_cast<double>(F32FromBits(up_bits));
  const double ddown = std::fabs(a - vd), dup = std::fabs(vu - a);
  uint32_t pick;
  if (ddown < dup) pick = down;
  else if (dup < ddown) pick = up_bits;
  else pick = ((down >> 16) & 1) ? up_bits : down;
  return static_cast<uint16_t>(pick >> 16);
}

TEST(Half, F16ToF32MatchesFieldModelForEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    const float f = F16ToF32(b);
    const int exp = (h >> 10) & 0x1f;
    if (exp == 0x1f) {
      if (h & 0x3ff) {
        EXPECT_TRUE(std::isnan(f)) << h;
      } else {
        EXPECT_TRUE(std::isinf(f)) << h;
      }
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), F16Value(b)) << h;
    EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
  }
}

TEST(Half, F16RoundTripIsExactForEveryNonSignalingPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    const bool signaling_nan = ((h & 0x7c00) == 0x7c00) && (h & 0x3ff) && !(h & 0x200);
    const uint16_t back = F32ToF16(F16ToF32(b));
    if (signaling_nan) {
      EXPECT_EQ(back, b | 0x200) << h;  // quieted, payload kept
    } else {
      EXPECT_EQ(back, b) << h;
    }
  }
}

TEST(Half, F32ToF16MatchesRoundToNearestEvenModel) {
  std::mt19937_64 rng(1234);
  std::vector<float> xs = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e-8f, 2.98e-8f,
                           2.9802322e-8f, 5.96e-8f, 6.1035156e-5f, 6.1e-5f, 1.0f + 1.0f / 2048,
                           1.0f + 3.0f / 2048, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::denorm_min(), 3.0e38f};
  // Every tie between consecutive f16 values, and its neighbours, both signs.
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const double mid = (F16Value(h) + F16Value(h + 1)) / 2;
    const float m = static_cast<float>(mid);
    xs.push_back(m);
    xs.push_back(std::nextafter(m, 0.0f));
    xs.push_back(std::nextafter(m, 1e9f));
    xs.push_back(-m);
  }
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns concentrated where f16 lives (exponents 100..150).
    uint32_t u = static_cast<uint32_t>(rng());
    const uint32_t exp = 100 + static_cast<uint32_t>(rng() % 51);
    u = (u & 0x807fffffu) | (exp << 23);
    xs.push_back(F32FromBits(u));
  }
  for (float x : xs) {
    ASSERT_EQ(F32ToF16(x), ModelF32ToF16(x)) << "x=" << x << " bits=" << std::hex << F32Bits(x);
  }
}

TEST(Half, F32ToF16KeepsNaN) {
  for (uint32_t payload : {1u, 0x1000u, 0x400000u, 0x7fffffu}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float nan = F32FromBits(sign | 0x7f800000u | payload);
      const uint16_t h = F32ToF16(nan);
      EXPECT_EQ(h & 0x7c00, 0x7c00);
      EXPECT_NE(h & 0x3ff, 0) << "NaN became Inf";
      EXPECT_EQ((h & 0x8000) != 0, sign != 0);
    }
  }
}

TEST(Half, BF16MatchesRoundToNearestEvenModel) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 500000; ++i) {
    const float x = F32FromBits(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    ASSERT_EQ(F32ToBF16(x), ModelF32ToBF16(x)) << std::hex << F32Bits(x);
  }
  // Ties, both parities, and the overflow boundary.
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x7f7f8000u, 0x7f7f7fffu, 0xff7f8000u, 0x00008000u,
                     0x00018000u}) {
    const float x = F32FromBits(u);
    ASSERT_EQ(F32ToBF16(x), ModelF32ToBF16(x)) << std::hex << u;
  }
}

TEST(Half, BF16RoundTripAndNaN) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    const bool nan = ((h & 0x7f80) == 0x7f80) && (h & 0x7f);
    const uint16_t back = F32ToBF16(BF16ToF32(b));
    if (nan) {
      EXPECT_TRUE(std::isnan(BF16ToF32(back))) << h;
      EXPECT_EQ(back & 0x8000, b & 0x8000);
    } else {
      EXPECT_EQ(back, b) << h;
    }
  }
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(F32FromBits(0x7f800001u)))));
  EXPECT_TRUE(std::isinf(BF16ToF32(F32ToBF16(std::numeric_limits<float>::infinity()))));
}

}  // namespace
}  // namespace kvtier
