// chan<bits>g<G> (per-channel token-grouped K): descriptor, a hand-computed golden layout,
// SIMD against the reference bit for bit on every target, the error bound against float64,
// and the errors for bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/dtype_io.h"
#include "kvtier/quant.h"
#include "kvtier/quant_chan.h"
#include "quant/chan.h"
#include "quant/chan_simd.h"

namespace kvtier {
namespace {

TEST(ChanFormat, IdsNamesAndSizes) {
  // Ids are written to disk: these exact values must never change.
  EXPECT_EQ(Format::Chan(4, 64).id(), 0x01060407u);
  EXPECT_EQ(Format::Chan(3, 32).id(), 0x01050307u);
  for (const Format& f : AllTokenGroupedFormats()) {
    if (f.kind != FormatKind::kChan) continue;  // chanmix: chanmix_test.cc
    ASSERT_TRUE(f.Validate().ok()) << f.name();
    EXPECT_TRUE(f.is_token_grouped());
    EXPECT_FALSE(f.is_rotated());
    Result<Format> by_id = Format::FromId(f.id());
    ASSERT_TRUE(by_id.ok()) << by_id.status().ToString();
    EXPECT_EQ(*by_id, f);
    Result<Format> by_name = ParseFormat(f.name());
    ASSERT_TRUE(by_name.ok()) << f.name();
    EXPECT_EQ(*by_name, f);
    // bits + an f16 scale and an f16 min per channel per group of G tokens.
    EXPECT_DOUBLE_EQ(f.bits_per_value(), f.bits + 32.0 / f.group) << f.name();
    EXPECT_EQ(f.row_bytes(128) * 8, static_cast<size_t>(f.bits_per_value() * 128)) << f.name();
  }
  EXPECT_EQ(ParseFormat("chan4g64")->name(), "chan4g64");
  EXPECT_DOUBLE_EQ(Format::Chan(4, 64).bits_per_value(), 4.5);
  EXPECT_DOUBLE_EQ(Format::Chan(3, 64).bits_per_value(), 3.5);
  EXPECT_EQ(Format::Chan(4, 64).row_bytes(128), 64u + 8u);
  for (const Format& f : AllSupportedFormats()) EXPECT_FALSE(f.is_token_grouped()) << f.name();
}

TEST(ChanFormat, BadNamesAndShapesSayWhy) {
  for (const char* bad : {"chan4", "chan5g64", "chan4g48", "chan4gx", "chang64", "chan1g32"}) {
    Result<Format> f = ParseFormat(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_NE(f.status().message().find(bad), std::string::npos) << f.status().message();
  }
  EXPECT_TRUE(Format::Chan(4, 64).CheckHeadDim(80).ok());
  EXPECT_TRUE(Format::Chan(4, 64).CheckHeadDim(96).ok());
  const Status s = Format::Chan(4, 128).CheckHeadDim(80);  // 4 * 80 = 320 bytes over 128 rows
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("head_dim 80"), std::string::npos) << s.message();
  EXPECT_FALSE(Format::Chan(4, 32).CheckHeadDim(40).ok());
  // A bad id is Corruption, not a crash.
  EXPECT_FALSE(Format::FromId(0x01060507u).ok());  // 5 bits
  EXPECT_FALSE(Format::FromId(0x01030407u).ok());  // group 8
}

TEST(ChanFormat, RowFunctionsRefuseIt) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> out(Format::Chan(4, 64).row_bytes(64), 0xab);
  const Status s = QuantizeRows(Format::Chan(4, 64), DType::kF32, x.data(), 1, 64, out.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("QuantizeChanGroups"), std::string::npos) << s.message();
  EXPECT_EQ(out[0], 0xab);
  EXPECT_FALSE(DequantizeRows(Format::Chan(4, 64), out.data(), 1, 64, DType::kF32, x.data()).ok());
}

// chan4g32, head_dim 16, one head, two tokens: x0[c] = c / 2, x1[c] = c / 2 + 1.5. Every
// channel: min c / 2, scale f16(1.5 / 15) = 0x2e66, codes 0 and 15. A row is 8 code bytes and
// a 2-byte slice of P = [scale16 x 16][min16 x 16]: row j's slice is P's element j.
TEST(ChanFormat, GoldenLayout) {
  const Format f = Format::Chan(4, 32);
  constexpr size_t D = 16, R = 10;
  ASSERT_EQ(f.row_bytes(D), R);
  float x[2][D];
  for (size_t c = 0; c < D; ++c) {
    x[0][c] = 0.5f * static_cast<float>(c);
    x[1][c] = x[0][c] + 1.5f;
  }
  std::vector<uint8_t> rows(32 * R, 0xee);
  ASSERT_TRUE(QuantizeChanGroupsRef(f, DType::kF32, x, 2, 1, D, rows.data()).ok());
  auto le16 = [&](size_t row) { return static_cast<uint16_t>(rows[row * R + 8] | rows[row * R + 9] << 8); };
  for (size_t b = 0; b < 8; ++b) {
    EXPECT_EQ(rows[0 * R + b], 0x00) << b;
    EXPECT_EQ(rows[1 * R + b], 0xff) << b;
    EXPECT_EQ(rows[2 * R + b], 0x00) << b;  // absent token: zero codes
  }
  for (size_t j = 0; j < 16; ++j) EXPECT_EQ(le16(j), 0x2e66) << j;         // scales
  EXPECT_EQ(le16(16), 0x0000);                                              // min 0
  EXPECT_EQ(le16(17), 0x3800);                                              // min 0.5
  EXPECT_EQ(le16(18), 0x3c00);                                              // min 1.0
  EXPECT_EQ(le16(31), 0x4780);                                              // min 7.5
  float y[2][D];
  ASSERT_TRUE(DequantizeChanRowsRef(f, rows.data(), 0, 2, 1, D, DType::kF32, y).ok());
  const float s = F16ToF32(0x2e66);
  for (size_t c = 0; c < D; ++c) {
    EXPECT_EQ(y[0][c], x[0][c]);
    EXPECT_EQ(y[1][c], std::fma(15.0f, s, x[0][c]));
  }
}

// K-like data: per-channel offsets far larger than the per-token spread, a few big channels.
std::vector<float> KeyLike(size_t n_tokens, size_t heads, size_t D, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> off(heads * D), amp(heads * D);
  for (size_t i = 0; i < off.size(); ++i) {
    off[i] = 4.0f * nd(rng);
    amp[i] = i % 13 == 0 ? 6.0f : 0.5f + std::fabs(nd(rng));
  }
  std::vector<float> x(n_tokens * heads * D);
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t i = 0; i < heads * D; ++i) x[t * heads * D + i] = off[i] + amp[i] * nd(rng);
  }
  return x;
}

struct Case {
  Format f;
  size_t D, n;
};
std::vector<Case> Cases() {
  std::vector<Case> v;
  for (const Format& f : AllTokenGroupedFormats()) {
    if (f.kind != FormatKind::kChan) continue;  // chanmix: chanmix_test.cc
    for (size_t D : {64, 80, 96, 128, 256}) {
      if (!f.CheckHeadDim(D).ok()) continue;
      for (size_t n : {size_t{1}, size_t{f.group} - 1, size_t{f.group}, 2 * size_t{f.group} + 5}) {
        v.push_back({f, D, n});
      }
    }
  }
  return v;
}

// Every value within the group's quantization step of float64 truth: half a step, plus what
// rounding the min and the scale to f16 moves the grid by.
TEST(ChanFormat, ErrorWithinTheStepOfEveryChannel) {
  constexpr size_t H = 2;
  for (const Case& k : Cases()) {
    const size_t G = k.f.group, D = k.D, n = k.n;
    const std::vector<float> x = KeyLike(n, H, D, static_cast<uint32_t>(D + n));
    const size_t groups = (n + G - 1) / G;
    std::vector<uint8_t> rows(groups * G * H * k.f.row_bytes(D));
    ASSERT_TRUE(QuantizeChanGroupsRef(k.f, DType::kF32, x.data(), n, H, D, rows.data()).ok());
    std::vector<float> y(n * H * D);
    ASSERT_TRUE(DequantizeChanRowsRef(k.f, rows.data(), 0, n, H, D, DType::kF32, y.data()).ok());
    const double top = (1 << k.f.bits) - 1;
    for (size_t g0 = 0; g0 < n; g0 += G) {
      const size_t m = std::min(G, n - g0);
      for (size_t i = 0; i < H * D; ++i) {
        double lo = 1e30, hi = -1e30;
        for (size_t t = g0; t < g0 + m; ++t) {
          lo = std::min(lo, double{x[t * H * D + i]});
          hi = std::max(hi, double{x[t * H * D + i]});
        }
        const double m16 = F16ToF32(F32ToF16(static_cast<float>(lo)));
        const double s = F16ToF32(F32ToF16(static_cast<float>((hi - m16) / top)));
        const double bound = 0.5 * s + std::fabs(m16 - lo) + top * std::fabs(s - (hi - m16) / top) +
                             1e-6 * (std::fabs(lo) + std::fabs(hi));
        for (size_t t = g0; t < g0 + m; ++t) {
          ASSERT_LE(std::fabs(double{y[t * H * D + i]} - x[t * H * D + i]), bound)
              << k.f.name() << " D " << D << " n " << n << " token " << t << " channel " << i;
        }
      }
    }
  }
}

// Per-channel groups take out the channel offsets that per-token formats pay for: on K-like
// data chan4g64 (4.5 bits) beats q4_0 and rot4s0 (4.5 bits) by a wide margin.
TEST(ChanFormat, BeatsPerTokenFormatsOnKeyLikeData) {
  constexpr size_t H = 2, D = 128, n = 256;
  const std::vector<float> x = KeyLike(n, H, D, 7);
  auto mse_rows = [&](const Format& f) {
    std::vector<uint8_t> q(n * H * f.row_bytes(D));
    std::vector<float> y(x.size());
    EXPECT_TRUE(QuantizeRows(f, DType::kF32, x.data(), n * H, D, q.data()).ok());
    EXPECT_TRUE(DequantizeRows(f, q.data(), n * H, D, DType::kF32, y.data()).ok());
    double e = 0;
    for (size_t i = 0; i < x.size(); ++i) e += (double{y[i]} - x[i]) * (double{y[i]} - x[i]);
    return e / static_cast<double>(x.size());
  };
  const Format c = Format::Chan(4, 64);
  std::vector<uint8_t> q(n * H * c.row_bytes(D));
  std::vector<float> y(x.size());
  ASSERT_TRUE(QuantizeChanGroups(c, DType::kF32, x.data(), n, H, D, q.data()).ok());
  ASSERT_TRUE(DequantizeChanRows(c, q.data(), 0, n, H, D, DType::kF32, y.data()).ok());
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += (double{y[i]} - x[i]) * (double{y[i]} - x[i]);
  e /= static_cast<double>(x.size());
  const double e_q4 = mse_rows(Format::Q4_0()), e_rot4 = mse_rows(Format::Rot(4, 0));
  EXPECT_LT(e, 0.5 * e_q4) << "chan4g64 " << e << " q4_0 " << e_q4;
  EXPECT_LT(e, 0.5 * e_rot4) << "chan4g64 " << e << " rot4s0 " << e_rot4;
}

class ChanSimd : public ::testing::TestWithParam<long long> {
 protected:
  void SetUp() override { ASSERT_TRUE(QuantForceSimdTarget(GetParam())); }
  void TearDown() override { QuantForceSimdTarget(0); }
};

// SIMD quantize and dequantize equal the reference bit for bit: every format, head_dim,
// partial groups, source and destination dtypes, edge values (constants, ties, huge ranges),
// and decodes that start mid-group and run over several groups.
TEST_P(ChanSimd, MatchesTheReferenceBitForBit) {
  constexpr size_t H = 3;
  for (const Case& k : Cases()) {
    const size_t D = k.D, n = k.n, G = k.f.group, R = k.f.row_bytes(D);
    std::vector<float> x = KeyLike(n, H, D, static_cast<uint32_t>(3 * D + n));
    for (size_t i = 0; i < x.size(); i += 7) x[i] = std::nearbyint(x[i]);  // ties of the grid
    if (n > 2) for (size_t c = 0; c < D; ++c) x[c] = x[H * D + c];        // equal tokens
    for (size_t t = 0; t < n; ++t) x[t * H * D] = 0.75f;                   // a constant channel
    for (DType sd : {DType::kF32, DType::kF16, DType::kBF16}) {
      std::vector<uint8_t> src(x.size() * DTypeSize(sd));
      for (size_t i = 0; i < x.size(); ++i) StoreAs(sd, src.data(), i, x[i]);
      const size_t groups = (n + G - 1) / G;
      std::vector<uint8_t> a(groups * G * H * R, 0x5a), b(groups * G * H * R, 0xa5);
      ASSERT_TRUE(QuantizeChanGroupsRef(k.f, sd, src.data(), n, H, D, a.data()).ok());
      ASSERT_TRUE(QuantizeChanGroups(k.f, sd, src.data(), n, H, D, b.data()).ok());
      ASSERT_EQ(a, b) << k.f.name() << " D " << D << " n " << n << " src " << DTypeName(sd);
      for (DType dd : {DType::kF32, DType::kF16, DType::kBF16}) {
        for (size_t first : {size_t{0}, n / 3}) {
          const size_t m = n - first;
          std::vector<uint8_t> ya(m * H * D * DTypeSize(dd), 1), yb(m * H * D * DTypeSize(dd), 2);
          ASSERT_TRUE(DequantizeChanRowsRef(k.f, a.data(), first, m, H, D, dd, ya.data()).ok());
          ASSERT_TRUE(DequantizeChanRows(k.f, a.data(), first, m, H, D, dd, yb.data()).ok());
          ASSERT_EQ(ya, yb) << k.f.name() << " D " << D << " n " << n << " first " << first
                            << " dst " << DTypeName(dd);
        }
      }
    }
  }
}

// The vector code packer against ChanPack (the scalar reference): random codes of every width,
// all-ones codes (every bit set), and lengths of one to several vectors.
TEST_P(ChanSimd, PackerMatchesTheScalarPack) {
  std::mt19937 rng(7);
  for (int bits : {2, 3, 4}) {
    for (size_t n : {16u, 48u, 64u, 128u, 256u}) {
      std::vector<uint8_t> codes(n);
      for (int pass = 0; pass < 2; ++pass) {
        for (uint8_t& c : codes) c = pass == 0 ? static_cast<uint8_t>(rng() % (1u << bits)) : (1u << bits) - 1;
        std::vector<uint8_t> want(n * bits / 8 + 4, 0xee), got(n * bits / 8 + 4, 0xee);
        ChanPack(codes.data(), n, bits, want.data());
        simd::ChanPackCodes(codes.data(), n, bits, got.data());
        ASSERT_EQ(got, want) << bits << " bits, " << n << " codes, pass " << pass;
        std::vector<uint8_t> back(n);
        ChanUnpack(got.data(), n, bits, back.data());
        ASSERT_EQ(back, codes);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, ChanSimd, ::testing::ValuesIn(QuantAvailableSimdTargets()),
                         [](const ::testing::TestParamInfo<long long>& i) {
                           return "target_" + std::to_string(i.param);
                         });

TEST(ChanFormat, BadArgumentsWriteNothing) {
  const Format f = Format::Chan(4, 64);
  std::vector<float> x(64 * 2 * 64, 1.0f);
  std::vector<uint8_t> rows(64 * 2 * f.row_bytes(64), 0xab);
  auto untouched = [&] { return std::all_of(rows.begin(), rows.end(), [](uint8_t v) { return v == 0xab; }); };
  EXPECT_FALSE(QuantizeChanGroups(f, DType::kF32, nullptr, 64, 2, 64, rows.data()).ok());
  EXPECT_FALSE(QuantizeChanGroups(f, DType::kF32, x.data(), 64, 2, 64, nullptr).ok());
  EXPECT_FALSE(QuantizeChanGroups(f, DType::kF32, x.data(), 64, 0, 64, rows.data()).ok());
  EXPECT_FALSE(QuantizeChanGroups(f, DType::kF32, x.data(), 64, 2, 40, rows.data()).ok());
  EXPECT_FALSE(QuantizeChanGroups(f, static_cast<DType>(9), x.data(), 64, 2, 64, rows.data()).ok());
  const Status s = QuantizeChanGroups(Format::Q4_0(), DType::kF32, x.data(), 64, 2, 64, rows.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("q4_0"), std::string::npos) << s.message();
  EXPECT_FALSE(QuantizeChanGroups(f, DType::kF32, x.data(), 64, 2, 512, rows.data()).ok());
  EXPECT_TRUE(untouched());
  EXPECT_FALSE(DequantizeChanRows(f, rows.data(), 0, 64, 2, 64, DType::kF32, nullptr).ok());
}

}  // namespace
}  // namespace kvtier
