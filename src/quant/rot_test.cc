// Rotated codebook rows (rot.h): the rotation against an explicit float64 Hadamard matrix, its
// vector form bit for bit on every target, the ids / names carrying the seed, and the
// quantization error on Gaussian and outlier-channel rows against q4_0 at the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/dtype_io.h"
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

// The cell search of the 16-lane quantizer (RotCellTable) counts the midpoints at or below q
// exactly as RotCodes does: at and around every midpoint and cell edge (a few ulps either
// side), on special values, and on random values in and beyond [-1, 1].
template <int kBits>
void ExpectCellSearchCounts() {
  static constexpr RotMids<kBits> kM;
  static constexpr RotCellTable<kBits> kT;
  auto count = [](float q) {
    int n = 0;
    for (int t = 0; t + 1 < (1 << kBits); ++t) n += q >= kM.m[t];
    return n;
  };
  std::vector<float> qs = {0.0f, -0.0f, 1.0f, -1.0f, 1e30f, -1e30f, 1e-40f, -1e-40f,
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> edges(kM.m, kM.m + (1 << kBits) - 1);
  for (int k = 0; k <= RotCellTable<kBits>::kCells; ++k) edges.push_back(k / RotCellTable<kBits>::kA - 1.0f);
  for (float e : edges) {
    float up = e, down = e;
    for (int i = 0; i < 8; ++i) {
      qs.push_back(up);
      qs.push_back(down);
      up = std::nextafter(up, 10.0f);
      down = std::nextafter(down, -10.0f);
    }
  }
  std::mt19937_64 rng(kBits);
  std::uniform_real_distribution<float> u(-1.6f, 1.6f);
  for (int i = 0; i < 200000; ++i) qs.push_back(u(rng));
  for (float q : qs) ASSERT_EQ(kT.Code(q), count(q)) << kBits << " bits, q = " << q;
}

TEST(Rot, CellSearchCountsTheMidpoints) {
  ExpectCellSearchCounts<4>();
  ExpectCellSearchCounts<3>();
  ExpectCellSearchCounts<2>();
}

// Rows that stress the fit, 16-row lane groups mixing them: Gaussian, outlier channels, zero
// rows and zero blocks, one-hot rows (whose rotation is a block of equal magnitudes of both
// signs: ties for the first largest value), constant rows, tiny (subnormal: 1 / d overflows)
// and huge (the rotation overflows) rows, a NaN or an infinity in one row.
std::vector<float> HardRows(size_t rows, size_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(rows * d);
  for (size_t r = 0; r < rows; ++r) {
    float* p = x.data() + r * d;
    const int kind = static_cast<int>(rng() % 12);
    for (size_t i = 0; i < d; ++i) {
      float v = nd(rng);
      switch (kind) {
        case 0: case 1: break;
        case 2: if (i % 41 == 3) v *= 1000.0f; break;                    // outlier channels
        case 3: v = 0.0f; break;                                          // zero row
        case 4: v = i < 32 ? 0.0f : v; break;                             // a zero block (d = 32)
        case 5: v = i == rng() % d ? 1.5f : 0.0f; break;                  // one-hot: ties
        case 6: v = (i == 3 || i == 9) ? -2.0f : 0.0f; break;             // two-hot: ties
        case 7: v = 0.75f; break;                                         // constant
        case 8: v *= 1e-41f; break;                                       // subnormal
        case 9: v *= 3e38f; break;                                        // overflows to inf
        case 10: if (i == 17) v = std::numeric_limits<float>::quiet_NaN(); break;
        default: if (i == 40) v = -std::numeric_limits<float>::infinity(); break;
      }
      p[i] = v;
    }
    if (kind == 5 && std::all_of(p, p + d, [](float v) { return v == 0.0f; })) p[0] = 1.5f;
  }
  return x;
}

TEST(Rot, SimdQuantizeEqualsTheReferenceOnHardRows) {
  uint64_t seed = 100;
  for (long long t : QuantAvailableSimdTargets()) {
    ASSERT_TRUE(QuantForceSimdTarget(t));
    for (int bits : {4, 3, 2}) {
      for (uint8_t fseed : {uint8_t{0}, uint8_t{7}}) {
        const Format f = Format::Rot(bits, fseed);
        for (size_t d : {32u, 64u, 96u, 128u, 256u, 512u}) {
          for (size_t rows : {1u, 5u, 16u, 17u, 40u}) {
            const std::vector<float> x = HardRows(rows, d, seed++);
            for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
              std::vector<uint8_t> src(x.size() * DTypeSize(dt));
              for (size_t i = 0; i < x.size(); ++i) StoreAs(dt, src.data(), i, x[i]);
              std::vector<uint8_t> want(rows * f.row_bytes(d)), got(want.size(), 0xCD);
              ASSERT_TRUE(QuantizeRowsRef(f, dt, src.data(), rows, d, want.data()).ok());
              ASSERT_TRUE(QuantizeRows(f, dt, src.data(), rows, d, got.data()).ok());
              for (size_t i = 0; i < want.size(); ++i) {
                ASSERT_EQ(got[i], want[i]) << f.name() << " target " << t << " head_dim " << d << " rows "
                                           << rows << " " << DTypeName(dt) << ": byte " << i % f.row_bytes(d)
                                           << " of row " << i / f.row_bytes(d);
              }
            }
          }
        }
      }
    }
  }
  QuantForceSimdTarget(0);
}

}  // namespace
}  // namespace kvtier
