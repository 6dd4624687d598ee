// The scalar reference against float64 models and MLX's published behaviour:
// lossless plain dtypes, affine error bounds, exact edges, bit packing, bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/test_random.h"
#include "kvtier/quant.h"
#include "quant/blocks.h"

namespace kvtier {
namespace {

using testing::RandomValues;
using testing::ValueAt;

TEST(QuantRef, PlainDtypesAreLosslessForTheirOwnValues) {
  std::mt19937_64 rng(7);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    const size_t head_dim = 128, rows = 64;
    std::vector<uint8_t> src(rows * head_dim * DTypeSize(t));
    for (auto& b : src) b = static_cast<uint8_t>(rng());  // every bit pattern, NaN and Inf too
    const Format f = Format::Plain(t);
    std::vector<uint8_t> q(rows * f.row_bytes(head_dim)), back(src.size());
    ASSERT_TRUE(QuantizeRowsRef(f, t, src.data(), rows, head_dim, q.data()).ok());
    ASSERT_TRUE(DequantizeRowsRef(f, q.data(), rows, head_dim, t, back.data()).ok());
    EXPECT_EQ(q, src);
    EXPECT_EQ(back, src);
  }
}

TEST(QuantRef, PlainConversionsRoundToNearestEven) {
  const std::vector<uint8_t> src = RandomValues(DType::kF32, 4096, 11, 3.0f);
  std::vector<uint8_t> h(4096 * 2), b(4096 * 2);
  ASSERT_TRUE(QuantizeRowsRef(Format::F16(), DType::kF32, src.data(), 32, 128, h.data()).ok());
  ASSERT_TRUE(QuantizeRowsRef(Format::BF16(), DType::kF32, src.data(), 32, 128, b.data()).ok());
  for (size_t i = 0; i < 4096; ++i) {
    const double x = ValueAt(DType::kF32, src, i);
    const double xh = ValueAt(DType::kF16, h, i), xb = ValueAt(DType::kBF16, b, i);
    // Round to nearest: error at most half a unit in the last place of the target.
    EXPECT_LE(std::fabs(xh - x), std::ldexp(std::fabs(x), -11) + 1e-12) << x;
    EXPECT_LE(std::fabs(xb - x), std::ldexp(std::fabs(x), -8) + 1e-30) << x;
  }
}

// Bit packing is MLX's: a little-endian bit stream (for 4 bits: element 2k in the low nibble).
TEST(QuantRef, PackingIsALittleEndianBitStream) {
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    std::mt19937 rng(bits);
    std::vector<uint8_t> codes(128), back(128);
    for (auto& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
    std::vector<uint8_t> packed(128 * bits / 8);
    PackCodes(codes.data(), 128, bits, packed.data());
    for (size_t i = 0; i < 128; ++i) {
      uint32_t v = 0;
      for (int k = 0; k < bits; ++k) {
        const size_t bit = i * bits + k;
        v |= ((packed[bit / 8] >> (bit % 8)) & 1u) << k;
      }
      ASSERT_EQ(v, codes[i]) << "bits " << bits << " index " << i;
    }
    UnpackCodes(packed.data(), 128, bits, back.data());
    EXPECT_EQ(back, codes);
  }
  const uint8_t two[2] = {1, 2};
  uint8_t byte = 0;
  PackCodes(two, 2, 4, &byte);
  EXPECT_EQ(byte, 0x21);
}

// A 5-bit group holding 0..31 in f32 is represented exactly: scale -1, bias 31 (MLX's edge).
TEST(QuantRef, AffineRepresentsAnExactGridExactly) {
  const Format f = Format::Affine(5, 32, DType::kF32);
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i);
  std::vector<uint8_t> q(f.row_bytes(32));
  ASSERT_TRUE(QuantizeRowsRef(f, DType::kF32, x.data(), 1, 32, q.data()).ok());
  float scale, bias;
  std::memcpy(&scale, q.data() + 20, 4);
  std::memcpy(&bias, q.data() + 24, 4);
  EXPECT_EQ(scale, -1.0f);
  EXPECT_EQ(bias, 31.0f);
  std::vector<float> y(32);
  ASSERT_TRUE(DequantizeRowsRef(f, q.data(), 1, 32, DType::kF32, y.data()).ok());
  EXPECT_EQ(y, x);
}

// Model: each dequantized value is (up to the rounding of scale and bias to their dtype)
// the nearest point of its group's grid {bias + k * scale, k = 0 .. 2^bits - 1}; MLX's edge
// handling makes the grid contain the larger-magnitude end exactly, so with f32 scales that
// end comes back exactly.
TEST(QuantRef, AffineValuesAreTheNearestGridPoint) {
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int group : {32, 64, 128}) {
      for (DType sd : {DType::kF32, DType::kF16, DType::kBF16}) {
        const Format f = Format::Affine(bits, group, sd);
        const size_t head_dim = 256, rows = 16;
        const auto src = RandomValues(DType::kF32, rows * head_dim, bits * 1000 + group, 2.0f, 0.3f);
        std::vector<uint8_t> q(rows * f.row_bytes(head_dim));
        std::vector<float> y(rows * head_dim);
        ASSERT_TRUE(QuantizeRowsRef(f, DType::kF32, src.data(), rows, head_dim, q.data()).ok());
        ASSERT_TRUE(DequantizeRowsRef(f, q.data(), rows, head_dim, DType::kF32, y.data()).ok());
        const AffineRowLayout l = MakeAffineLayout(f, head_dim);
        const int max_code = (1 << bits) - 1;
        // Codes are chosen with f32 scale/bias; storing them in f16/bf16 moves a grid point
        // by at most rel * (k * |scale| + |bias|).
        const double rel = sd == DType::kF32 ? 0.0 : (sd == DType::kF16 ? 1.0 / 2048 : 1.0 / 256);
        for (size_t r = 0; r < rows; ++r) {
          const uint8_t* row = q.data() + r * f.row_bytes(head_dim);
          for (size_t g = 0; g < l.n_groups; ++g) {
            const double scale = LoadAs(sd, row + l.scales_off, g);
            const double bias = LoadAs(sd, row + l.biases_off, g);
            double lo = 1e30, hi = -1e30;
            for (int j = 0; j < group; ++j) {
              const double x = ValueAt(DType::kF32, src, r * head_dim + g * group + j);
              lo = std::min(lo, x);
              hi = std::max(hi, x);
            }
            const double tol = 2 * rel * (max_code * std::fabs(scale) + std::fabs(bias)) +
                               1e-6 * (std::fabs(scale) + std::fabs(bias));
            for (int j = 0; j < group; ++j) {
              const size_t i = r * head_dim + g * group + j;
              const double x = ValueAt(DType::kF32, src, i);
              double nearest = 1e30;
              for (int k = 0; k <= max_code; ++k) {
                nearest = std::min(nearest, std::fabs(bias + k * scale - x));
              }
              ASSERT_LE(std::fabs(y[i] - x), nearest + tol)
                  << f.spec() << " row " << r << " group " << g << " x=" << x << " y=" << y[i];
              if (sd == DType::kF32 && std::fabs(x) == std::max(std::fabs(lo), std::fabs(hi))) {
                EXPECT_EQ(y[i], static_cast<float>(x)) << f.spec() << " edge not exact";
              }
            }
          }
        }
      }
    }
  }
}

// MLX's published numbers for standard-normal data, group 64, f32 (seed 003's table):
// mean abs error 0.00456 (8-bit) and 0.0771 (4-bit).
TEST(QuantRef, AffineMeanErrorMatchesMlx) {
  const size_t head_dim = 128, rows = 4096;
  const auto src = RandomValues(DType::kF32, rows * head_dim, 2024);
  for (auto [bits, expected] : {std::pair{8, 0.00456}, std::pair{4, 0.07711}}) {
    const Format f = Format::Affine(bits, 64, DType::kF32);
    std::vector<uint8_t> q(rows * f.row_bytes(head_dim));
    std::vector<float> y(rows * head_dim);
    ASSERT_TRUE(QuantizeRowsRef(f, DType::kF32, src.data(), rows, head_dim, q.data()).ok());
    ASSERT_TRUE(DequantizeRowsRef(f, q.data(), rows, head_dim, DType::kF32, y.data()).ok());
    double sum = 0;
    for (size_t i = 0; i < y.size(); ++i) sum += std::fabs(y[i] - ValueAt(DType::kF32, src, i));
    const double mean = sum / static_cast<double>(y.size());
    EXPECT_NEAR(mean, expected, expected * 0.05) << "bits " << bits;
  }
}

// kvtier computes affine codes with x * (1 / scale); MLX divides. Model: MLX's division.
// The codes may differ only at near-ties, by one step, and rarely.
TEST(QuantRef, AffineCodesMatchMlxDivisionExceptRareNearTies) {
  const size_t head_dim = 128, rows = 8192;
  const auto src = RandomValues(DType::kF32, rows * head_dim, 77);
  for (int bits : {4, 8}) {
    const Format f = Format::Affine(bits, 64, DType::kF32);
    std::vector<uint8_t> q(rows * f.row_bytes(head_dim));
    ASSERT_TRUE(QuantizeRowsRef(f, DType::kF32, src.data(), rows, head_dim, q.data()).ok());
    const AffineRowLayout l = MakeAffineLayout(f, head_dim);
    size_t differ = 0;
    std::vector<uint8_t> codes(64);
    for (size_t r = 0; r < rows; ++r) {
      const uint8_t* row = q.data() + r * f.row_bytes(head_dim);
      for (size_t g = 0; g < l.n_groups; ++g) {
        UnpackCodes(row + g * l.group_code_bytes, 64, bits, codes.data());
        float w_min = 1e30f, w_max = -1e30f;
        for (size_t j = 0; j < 64; ++j) {
          const float x = ValueAt(DType::kF32, src, r * head_dim + g * 64 + j);
          w_min = std::min(w_min, x);
          w_max = std::max(w_max, x);
        }
        const AffineParams p = AffineParamsFromMinMax(w_min, w_max, bits);
        for (size_t j = 0; j < 64; ++j) {
          const float x = ValueAt(DType::kF32, src, r * head_dim + g * 64 + j);
          const float mlx = std::fmin(std::fmax(std::rint((x - p.bias) / p.scale), 0.0f),
                                      static_cast<float>((1 << bits) - 1));
          if (static_cast<float>(codes[j]) != mlx) {
            ++differ;
            ASSERT_EQ(std::fabs(static_cast<float>(codes[j]) - mlx), 1.0f);
            const double exact = (static_cast<double>(x) - p.bias) / p.scale;
            ASSERT_LT(std::fabs(std::fabs(exact - std::floor(exact)) - 0.5), 1e-4) << "not a near-tie";
          }
        }
      }
    }
    EXPECT_LT(static_cast<double>(differ) / (rows * head_dim), 1e-5) << "bits " << bits << ": " << differ;
  }
}

// ggml semantics beyond the golden vectors: q8_0 error <= d/2, q4_0 error <= |d|/2 except the
// clamped +8 code, which is off by at most one step.
TEST(QuantRef, GgmlBlocksErrorBounds) {
  const size_t head_dim = 128, rows = 64;
  const auto src = RandomValues(DType::kF32, rows * head_dim, 5, 1.5f);
  for (const Format& f : {Format::Q8_0(), Format::Q4_0()}) {
    std::vector<uint8_t> q(rows * f.row_bytes(head_dim));
    std::vector<float> y(rows * head_dim);
    ASSERT_TRUE(QuantizeRowsRef(f, DType::kF32, src.data(), rows, head_dim, q.data()).ok());
    ASSERT_TRUE(DequantizeRowsRef(f, q.data(), rows, head_dim, DType::kF32, y.data()).ok());
    const size_t bb = f.kind == FormatKind::kQ8_0 ? 34 : 18;
    for (size_t b = 0; b < rows * head_dim / 32; ++b) {
      uint16_t dh;
      std::memcpy(&dh, q.data() + b * bb, 2);
      const double d = std::fabs(F16ToF32(dh));
      for (size_t j = 0; j < 32; ++j) {
        const double x = ValueAt(DType::kF32, src, b * 32 + j);
        const double err = std::fabs(y[b * 32 + j] - x);
        const double bound = (f.kind == FormatKind::kQ8_0 ? 0.5 : 1.0) * d + std::fabs(x) / 1000;
        ASSERT_LE(err, bound) << f.name() << " block " << b << " x=" << x;
      }
    }
  }
}

TEST(QuantRef, BadArgumentsAreRejectedWithoutWriting) {
  std::vector<uint8_t> src(256 * 4, 1), dst(2048, 0xAB);
  const std::vector<uint8_t> untouched = dst;
  Status s = QuantizeRowsRef(Format::Q4_0(), DType::kF32, src.data(), 1, 80, dst.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("head_dim 80"), std::string::npos) << s.message();
  s = QuantizeRows(Format::Affine(7, 64, DType::kF16), DType::kF32, src.data(), 1, 128, dst.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("valid bits"), std::string::npos) << s.message();
  s = QuantizeRows(Format::Q8_0(), DType::kF32, nullptr, 1, 128, dst.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("null src"), std::string::npos) << s.message();
  s = DequantizeRows(Format::Q8_0(), src.data(), 1, 128, static_cast<DType>(9), dst.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("dtype 9 invalid"), std::string::npos) << s.message();
  s = DequantizeRows(Format::Q8_0(), src.data(), 2, 128, DType::kF32, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("null dst"), std::string::npos) << s.message();
  EXPECT_EQ(dst, untouched);
  EXPECT_TRUE(QuantizeRows(Format::Q8_0(), DType::kF32, nullptr, 0, 128, nullptr).ok());
}

}  // namespace
}  // namespace kvtier
