// Rotated codebook rows (rot.h): the rotation against an explicit float64 Hadamard matrix, its
// vector form bit for bit on every target, the ids / names carrying the seed, and the
// quantization error on Gaussian and outlier-channel rows against q4_0 at the same bits.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "kvtier/quant.h"
#include "quant/quant_ref.h"
#include "quant/quant_simd.h"
#include "quant/rot.h"

namespace kvtier {
namespace {

// R x in float64 from the definition: signs, then per power-of-two block the Sylvester
// Hadamard matrix H[i][j] = (-1)^popcount(i & j) over sqrt(block).
std::vector<double> RotateF64(const std::vector<float>& x, uint8_t seed) {
  const size_t n = x.size();
  std::vector<double> sx(n), y(n, 0.0);
  for (size_t i = 0; i < n; ++i) sx[i] = RotSignFlipped(seed, i) ? -x[i] : x[i];
  size_t off = 0;
  for (size_t b : {size_t{256}, size_t{128}, size_t{64}, size_t{32}}) {
    if (n - off < b) continue;
    for (size_t i = 0; i < b; ++i) {
      for (size_t j = 0; j < b; ++j) {
        y[off + i] += ((std::popcount(i & j) & 1) ? -1.0 : 1.0) * sx[off + j];
      }
      y[off + i] /= std::sqrt(static_cast<double>(b));
    }
    off += b;
  }
  EXPECT_EQ(off, n);
  return y;
}

std::vector<float> Gaussian(size_t n, uint64_t seed, float sd = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// The fixed-point codebooks the int8 attention path reads: every level within half a step of
// its byte, the bytes ascending (so distinct) within 0..255, and their mean squared rounding
// error (in block-scale units) at most 0.3% of the codebook's own on Gaussian blocks (rot.h:
// 0.0058 / 0.0244 / 0.105 per unit variance, a block scale of ~2.2 standard deviations).
template <int kBits>
void CheckFixedLevels(double codebook_mse) {
  constexpr RotFixedLevels<kBits> f;
  const float* L = RotLevels<kBits>();
  double mse = 0;
  for (int i = 0; i < (1 << kBits); ++i) {
    const double back = (static_cast<double>(f.u[i]) - f.kOffset) / f.kScale;
    EXPECT_LE(std::fabs(back - L[i]), 0.5 / f.kScale + 1e-9) << kBits << " bits, level " << i;
    if (i > 0) {
      EXPECT_LT(f.u[i - 1], f.u[i]) << kBits << " bits, level " << i;
    }
    mse += (back - L[i]) * (back - L[i]) / (1 << kBits);
  }
  EXPECT_LT(mse * 2.2 * 2.2, 0.003 * codebook_mse) << kBits << " bits";
}

TEST(Rot, FixedPointLevelsAreWithinHalfAStep) {
  CheckFixedLevels<4>(0.0058);
  CheckFixedLevels<3>(0.0244);
  CheckFixedLevels<2>(0.105);
}

TEST(Rot, RotationIsTheSeededHadamardAndInvertsOnEveryTarget) {
  for (size_t n : {32, 64, 96, 128, 160, 256}) {
    for (uint8_t seed : {0, 1, 200}) {
      const std::vector<float> x = Gaussian(n, n + seed);
      const std::vector<double> want = RotateF64(x, seed);
      std::vector<float> ref = x;
      RotateRef(ref.data(), n, seed, false);
      for (size_t i = 0; i < n; ++i) ASSERT_NEAR(ref[i], want[i], 1e-5) << "n " << n << " i " << i;
      for (long long t : QuantAvailableSimdTargets()) {
        ASSERT_TRUE(QuantForceSimdTarget(t));
        std::vector<float> v = x;
        simd::RotateRows(seed, v.data(), 1, n, false);
        ASSERT_EQ(0, std::memcmp(v.data(), ref.data(), n * 4)) << "n " << n << " target " << t;
        simd::RotateRows(seed, v.data(), 1, n, true);
        std::vector<float> back = ref;
        RotateRef(back.data(), n, seed, true);
        ASSERT_EQ(0, std::memcmp(v.data(), back.data(), n * 4)) << "inverse, n " << n;
        for (size_t i = 0; i < n; ++i) ASSERT_NEAR(back[i], x[i], 1e-5);
      }
      QuantForceSimdTarget(0);
    }
  }
  // Different seeds are different rotations.
  std::vector<float> a = Gaussian(128, 5), b = a;
  RotateRef(a.data(), 128, 0, false);
  RotateRef(b.data(), 128, 1, false);
  EXPECT_NE(0, std::memcmp(a.data(), b.data(), 128 * 4));
}

TEST(Rot, SeedIsPartOfTheIdAndTheName) {
  for (int bits : {2, 3, 4}) {
    for (int seed : {0, 1, 255}) {
      const Format f = Format::Rot(bits, seed);
      ASSERT_TRUE(f.Validate().ok());
      EXPECT_EQ(f.name(), "rot" + std::to_string(bits) + "s" + std::to_string(seed));
      Result<Format> p = ParseFormat(f.name());
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ(*p, f);
      Result<Format> back = Format::FromId(f.id());
      ASSERT_TRUE(back.ok());
      EXPECT_EQ(*back, f);
      EXPECT_EQ(f.id() >> 24, static_cast<uint32_t>(seed));
      EXPECT_DOUBLE_EQ(f.bits_per_value(), bits + 0.5);
      EXPECT_EQ(f.row_bytes(128), 4 * RotBlockBytes(bits));
    }
  }
  EXPECT_EQ(*ParseFormat("rot3"), Format::Rot(3, 0));
  EXPECT_EQ(Format::Rot(4, 7).id(), 0x07050406u);
  EXPECT_NE(Format::Rot(4, 0).id(), Format::Rot(4, 1).id());
  for (const char* bad : {"rot5", "rot4s256", "rot4s", "rot", "rot4sx"}) {
    Result<Format> r = ParseFormat(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("rot<bits>"), std::string::npos) << r.status().message();
  }
  Format wrong = Format::Rot(4, 0);
  wrong.group = 64;
  EXPECT_FALSE(wrong.Validate().ok());
  EXPECT_FALSE(Format::FromId(wrong.id()).ok());
  EXPECT_FALSE(Format::Rot(4, 0).CheckHeadDim(80).ok());
  Format q = Format::Q4_0();
  q.seed = 3;
  EXPECT_FALSE(q.Validate().ok());
}

// Relative squared error of a quantize / dequantize round trip.
double RelErr(const Format& f, const std::vector<float>& x, size_t head_dim) {
  const size_t rows = x.size() / head_dim;
  std::vector<uint8_t> q(rows * f.row_bytes(head_dim));
  std::vector<float> y(x.size());
  EXPECT_TRUE(QuantizeRows(f, DType::kF32, x.data(), rows, head_dim, q.data()).ok());
  EXPECT_TRUE(DequantizeRows(f, q.data(), rows, head_dim, DType::kF32, y.data()).ok());
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (double{y[i]} - x[i]) * (double{y[i]} - x[i]);
    s += double{x[i]} * x[i];
  }
  return e / s;
}

TEST(Rot, ErrorOnGaussianRowsMatchesTheCodebookAndBeatsTheUniformGrid) {
  const size_t d = 128;
  const std::vector<float> x = Gaussian(d * 4096, 11);
  // Expected per-unit-variance MSE of the codebooks (rot.h), with slack for the f16 scale.
  EXPECT_LT(RelErr(Format::Rot(4, 0), x, d), 0.0062);
  EXPECT_LT(RelErr(Format::Rot(3, 0), x, d), 0.0255);
  EXPECT_LT(RelErr(Format::Rot(2, 0), x, d), 0.110);
  EXPECT_LT(RelErr(Format::Rot(4, 0), x, d), 0.85 * RelErr(Format::Q4_0(), x, d));
}

TEST(Rot, RotationSpreadsOutlierChannels) {
  // Keys with a few huge channels (as real K caches have): q4_0's blocks holding them lose
  // the small channels; after the rotation every block sees a Gaussian-like mix.
  const size_t d = 128;
  std::vector<float> x = Gaussian(d * 2048, 3);
  for (size_t r = 0; r < 2048; ++r) {
    x[r * d + 5] *= 25.0f;
    x[r * d + 70] = 12.0f + x[r * d + 70];
  }
  const double q4 = RelErr(Format::Q4_0(), x, d);
  const double r4 = RelErr(Format::Rot(4, 0), x, d);
  const double r3 = RelErr(Format::Rot(3, 0), x, d);
  EXPECT_LT(r4, 0.8 * q4) << "rot4 " << r4 << " q4_0 " << q4;
  EXPECT_LT(r3, 4.5 * r4);
}

TEST(Rot, StoredBasisDecodeIsTheRotatedRow) {
  const size_t d = 96, rows = 9;
  const Format f = Format::Rot(3, 42);
  const std::vector<float> x = Gaussian(d * rows, 8);
  std::vector<uint8_t> q(rows * f.row_bytes(d));
  ASSERT_TRUE(QuantizeRows(f, DType::kF32, x.data(), rows, d, q.data()).ok());
  std::vector<float> y(d * rows), stored(d * rows), ref(d);
  ASSERT_TRUE(DequantizeRows(f, q.data(), rows, d, DType::kF32, y.data()).ok());
  for (long long t : QuantAvailableSimdTargets()) {
    ASSERT_TRUE(QuantForceSimdTarget(t));
    ASSERT_TRUE(simd::DequantizeRowsStridedStored(f, q.data(), f.row_bytes(d), rows, d, stored.data()));
    for (size_t r = 0; r < rows; ++r) {
      ref::DequantizeRotRowStored(f, q.data() + r * f.row_bytes(d), d, ref.data());
      ASSERT_EQ(0, std::memcmp(ref.data(), stored.data() + r * d, d * 4)) << "target " << t;
      std::vector<float> back(stored.begin() + r * d, stored.begin() + (r + 1) * d);
      RotateRef(back.data(), d, f.seed, true);
      for (size_t i = 0; i < d; ++i) ASSERT_NEAR(back[i], y[r * d + i], 1e-5);
    }
  }
  QuantForceSimdTarget(0);
}

}  // namespace
}  // namespace kvtier
