// SIMD kernels against the scalar reference, bit for bit, on every SIMD target this CPU
// can run, for every format, source/destination dtype, head_dim and many kinds of data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/dtype_io.h"
#include "base/test_random.h"
#include "kvtier/quant.h"
#include "quant/quant_simd.h"
#include "quant/test_formats.h"

namespace kvtier {
namespace {

using testing::RandomValues;

using testing::AllFormats;

// Rows that stress edges: constants, zeros of both signs, ties, huge and tiny values.
std::vector<uint8_t> EdgeRows(DType t, size_t head_dim, size_t* rows_out) {
  std::vector<std::vector<float>> rows;
  auto row = [&](auto gen) {
    std::vector<float> r(head_dim);
    for (size_t i = 0; i < head_dim; ++i) r[i] = gen(i);
    rows.push_back(r);
  };
  row([](size_t) { return 0.0f; });
  row([](size_t) { return -0.0f; });
  row([](size_t) { return 0.75f; });
  row([](size_t) { return -3.0f; });
  row([](size_t i) { return static_cast<float>(i % 17) - 8.0f; });
  row([](size_t i) { return (i % 2 ? -1.0f : 1.0f) * static_cast<float>(i % 32) * 0.5f; });
  row([](size_t i) { return static_cast<float>(i) * 1e-6f; });
  row([](size_t i) { return (i % 3 == 0 ? 6.0e4f : -5.0e4f) * (1.0f + static_cast<float>(i) / 512); });
  row([](size_t i) { return i == 5 ? 1.0f : 0.0f; });
  row([](size_t i) { return i == 7 ? -2.0f : (i == 3 ? 2.0f : 0.1f); });
  row([](size_t i) { return 100.0f + static_cast<float>(i % 5) * 0.001f; });
  // Non-finite input: not meaningful, but reference and SIMD must agree byte for byte.
  row([](size_t i) { return i == 9 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(i) * 0.1f; });
  row([](size_t i) { return i == 33 ? std::numeric_limits<float>::infinity() : -static_cast<float>(i % 7); });
  row([](size_t i) { return i % 2 ? -std::numeric_limits<float>::infinity() : 1.0f; });
  row([](size_t) { return std::numeric_limits<float>::quiet_NaN(); });
  std::vector<uint8_t> out(rows.size() * head_dim * DTypeSize(t));
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t i = 0; i < head_dim; ++i) StoreAs(t, out.data(), r * head_dim + i, rows[r][i]);
  }
  *rows_out = rows.size();
  return out;
}

class QuantSimd : public ::testing::TestWithParam<long long> {
 protected:
  void SetUp() override { ASSERT_TRUE(QuantForceSimdTarget(GetParam())); }
  void TearDown() override { QuantForceSimdTarget(0); }
};

void ExpectSameAsRef(const Format& f, DType src_dtype, const std::vector<uint8_t>& src, size_t rows,
                     size_t head_dim, const std::string& what) {
  const size_t rb = f.row_bytes(head_dim);
  std::vector<uint8_t> q_ref(rows * rb), q_simd(rows * rb, 0xCD);
  ASSERT_TRUE(QuantizeRowsRef(f, src_dtype, src.data(), rows, head_dim, q_ref.data()).ok());
  ASSERT_TRUE(QuantizeRows(f, src_dtype, src.data(), rows, head_dim, q_simd.data()).ok());
  for (size_t i = 0; i < q_ref.size(); ++i) {
    ASSERT_EQ(q_simd[i], q_ref[i]) << what << " quantized byte " << i << " (row " << i / rb
                                   << ", byte " << i % rb << ")";
  }
  for (DType dst : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<uint8_t> y_ref(rows * head_dim * DTypeSize(dst)), y_simd(y_ref.size(), 0xCD);
    ASSERT_TRUE(DequantizeRowsRef(f, q_ref.data(), rows, head_dim, dst, y_ref.data()).ok());
    ASSERT_TRUE(DequantizeRows(f, q_ref.data(), rows, head_dim, dst, y_simd.data()).ok());
    const size_t es = DTypeSize(dst);
    for (size_t i = 0; i < rows * head_dim; ++i) {
      uint32_t a = 0, b = 0;
      std::memcpy(&a, y_simd.data() + i * es, es);
      std::memcpy(&b, y_ref.data() + i * es, es);
      ASSERT_EQ(a, b) << what << " dequantized to " << DTypeName(dst) << ": element " << i
                      << std::hex << " simd 0x" << a << " ref 0x" << b;
    }
    // Rows spread out (one KV head of consecutive tokens in a block): same values.
    const size_t stride = rb * 3 + 8;
    std::vector<uint8_t> spread(rows * stride, 0xEE), y_str(y_ref.size(), 0xCD);
    for (size_t r = 0; r < rows; ++r) std::memcpy(&spread[r * stride], &q_ref[r * rb], rb);
    ASSERT_TRUE(simd::DequantizeRowsStrided(f, spread.data(), stride, rows, head_dim, dst,
                                            y_str.data()));
    ASSERT_EQ(y_str, y_ref) << what << " strided, to " << DTypeName(dst);
  }
}

TEST_P(QuantSimd, EveryFormatMatchesTheReferenceBitForBit) {
  uint64_t seed = 1;
  for (const Format& f : AllFormats()) {
    for (size_t head_dim : {32u, 64u, 96u, 128u, 256u}) {
      if (!f.CheckHeadDim(head_dim).ok()) continue;
      for (DType src_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        const std::string what = f.spec() + " from " + std::string(DTypeName(src_dtype)) +
                                 " head_dim " + std::to_string(head_dim);
        for (float scale : {1.0f, 0.01f, 300.0f}) {
          // 9 rows: remainders only for small rows; 37: several 16-group AVX-512 batches.
          const size_t rows = scale == 1.0f ? 37 : 9;
          const auto src = RandomValues(src_dtype, rows * head_dim, seed++, scale, scale * 0.1f);
          ExpectSameAsRef(f, src_dtype, src, rows, head_dim, what);
          if (HasFatalFailure()) return;
        }
        size_t rows = 0;
        auto edge = EdgeRows(src_dtype, head_dim, &rows);
        // Three copies, so every edge row also lands inside a 16-group batch.
        const std::vector<uint8_t> once = edge;
        for (int copy = 0; copy < 2; ++copy) edge.insert(edge.end(), once.begin(), once.end());
        rows *= 3;
        ExpectSameAsRef(f, src_dtype, edge, rows, head_dim, what + " (edge rows)");
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Half sources, whose AVX-512 min / max run on the raw bits with a fallback for batches that
// hold a one-signed group or a NaN: runs of 32 values (a q4_0 block, half or a quarter of an
// affine group) of mixed kinds, so batches mix the fast and the fallback cases.
TEST_P(QuantSimd, HalfSourcesOfMixedSignsZerosAndNaNsMatchTheReference) {
  std::mt19937_64 rng(static_cast<uint64_t>(GetParam()) * 7 + 3);  // a target bit: may be 2^62
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Format& f : AllFormats()) {
    for (size_t head_dim : {32u, 64u, 128u, 256u}) {
      if (!f.CheckHeadDim(head_dim).ok()) continue;
      const size_t rows = 40;
      std::vector<uint8_t> src(rows * head_dim * 2);
      for (size_t run = 0; run < rows * head_dim / 32; ++run) {
        const int kind = static_cast<int>(rng() % 8);
        for (size_t j = 0; j < 32; ++j) {
          const size_t i = run * 32 + j;
          float x = nd(rng);
          uint16_t h = 0;
          bool raw = false;
          switch (kind) {
            case 0: break;                                           // mixed signs
            case 1: x = std::fabs(x); break;                         // >= 0 only
            case 2: x = -std::fabs(x); break;                        // <= 0 only
            case 3: x = j % 5 == 0 ? std::fabs(x) : (rng() % 2 ? 0.0f : -0.0f); break;  // zeros, > 0
            case 4: x = j % 5 == 0 ? -std::fabs(x) : (rng() % 2 ? 0.0f : -0.0f); break;  // zeros, < 0
            case 5:  // one NaN (either sign, any payload) or infinity among mixed values
              if (j == rng() % 32) {
                raw = true;
                const uint16_t specials[] = {0x7C00, 0xFC00, 0x7C01, 0xFC01, 0x7E00, 0xFFFF, 0x7FFF};
                h = specials[rng() % 7];
              }
              break;
            case 6: raw = true; h = static_cast<uint16_t>(rng()); break;  // any bits
            default: x = (j % 2 ? -1.0f : 1.0f) * static_cast<float>(j % 4); break;  // ties
          }
          if (raw) std::memcpy(src.data() + 2 * i, &h, 2);
          else StoreAs(DType::kF16, src.data(), i, x);
        }
      }
      ExpectSameAsRef(f, DType::kF16, src, rows, head_dim,
                      f.spec() + " from mixed f16 head_dim " + std::to_string(head_dim));
      if (HasFatalFailure()) return;
    }
  }
}

// Plain conversions over raw bit patterns: NaN, Inf, subnormals and ties included.
TEST_P(QuantSimd, PlainConversionsMatchOnEveryBitPattern) {
  std::mt19937_64 rng(GetParam());
  for (DType src_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const size_t head_dim = 128, rows = 512;
    std::vector<uint8_t> src(rows * head_dim * DTypeSize(src_dtype));
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    if (src_dtype != DType::kF32) {
      // Cover all 65536 half patterns in order once.
      for (size_t i = 0; i < 65536; ++i) {
        const uint16_t h = static_cast<uint16_t>(i);
        std::memcpy(src.data() + 2 * i, &h, 2);
      }
    }
    for (const Format& f : {Format::F32(), Format::F16(), Format::BF16()}) {
      ExpectSameAsRef(f, src_dtype, src, rows, head_dim,
                      f.name() + " from raw " + std::string(DTypeName(src_dtype)));
      if (HasFatalFailure()) return;
    }
  }
}

std::string TargetName(const ::testing::TestParamInfo<long long>& info) {
  std::string name = "target_" + std::to_string(info.param);
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllTargets, QuantSimd,
                         ::testing::ValuesIn(QuantAvailableSimdTargets()), TargetName);

TEST(QuantSimdDispatch, ReportsATarget) {
  const std::string name = QuantSimdTargetName();
  EXPECT_FALSE(name.empty());
  EXPECT_FALSE(QuantAvailableSimdTargets().empty());
}

}  // namespace
}  // namespace kvtier
