// chanmix<b>g<G> (per-channel token-grouped K, two code widths): descriptor and stable ids, a
// hand-computed golden layout, the widths and the error bound against float64 (widths derived
// here independently), the dispatched entry points against the reference, and its gain over
// chan at the same bits per value on key-like data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "base/dtype_io.h"
#include "base/half.h"
#include "kvtier/quant.h"
#include "kvtier/quant_chan.h"

namespace kvtier {
namespace {

std::vector<Format> MixFormats() {
  std::vector<Format> v;
  for (const Format& f : AllTokenGroupedFormats()) {
    if (f.kind == FormatKind::kChanMix) v.push_back(f);
  }
  return v;
}

TEST(ChanMixFormat, IdsNamesAndSizes) {
  // Ids are written to disk: these exact values must never change.
  EXPECT_EQ(Format::ChanMix(3, 64).id(), 0x01060308u);
  EXPECT_EQ(Format::ChanMix(2, 32).id(), 0x01050208u);
  ASSERT_EQ(MixFormats().size(), 6u);
  for (const Format& f : MixFormats()) {
    ASSERT_TRUE(f.Validate().ok()) << f.name();
    EXPECT_TRUE(f.is_token_grouped());
    EXPECT_FALSE(f.is_rotated());
    Result<Format> by_id = Format::FromId(f.id());
    ASSERT_TRUE(by_id.ok()) << by_id.status().ToString();
    EXPECT_EQ(*by_id, f);
    Result<Format> by_name = ParseFormat(f.name());
    ASSERT_TRUE(by_name.ok()) << f.name();
    EXPECT_EQ(*by_name, f);
    // bits + half a bit (half the channels one bit wider) + f16 min and max per group.
    EXPECT_DOUBLE_EQ(f.bits_per_value(), f.bits + 0.5 + 32.0 / f.group) << f.name();
    EXPECT_EQ(f.row_bytes(128) * 8, static_cast<size_t>(f.bits_per_value() * 128)) << f.name();
  }
  EXPECT_EQ(ParseFormat("chanmix3g64")->name(), "chanmix3g64");
  EXPECT_DOUBLE_EQ(Format::ChanMix(3, 64).bits_per_value(), 4.0);
  EXPECT_DOUBLE_EQ(Format::ChanMix(3, 128).bits_per_value(), 3.75);
  EXPECT_EQ(Format::ChanMix(3, 64).row_bytes(128), 56u + 8u);
  // chan names still parse as chan.
  EXPECT_EQ(ParseFormat("chan3g64")->kind, FormatKind::kChan);
}

TEST(ChanMixFormat, BadNamesIdsAndShapesSayWhy) {
  for (const char* bad : {"chanmix4g64", "chanmix3g48", "chanmix1g32", "chanmixg64", "chanmix3"}) {
    Result<Format> f = ParseFormat(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_NE(f.status().message().find(bad), std::string::npos) << f.status().message();
  }
  EXPECT_FALSE(Format::FromId(0x01060408u).ok());  // 4 bits
  EXPECT_FALSE(Format::FromId(0x01030308u).ok());  // group 8
  EXPECT_FALSE(Format::FromId(0x01060309u).ok());  // kind 9
  EXPECT_TRUE(Format::ChanMix(3, 64).CheckHeadDim(80).ok());
  EXPECT_FALSE(Format::ChanMix(3, 32).CheckHeadDim(40).ok());
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> out(Format::ChanMix(3, 64).row_bytes(64), 0xab);
  const Status s = QuantizeRows(Format::ChanMix(3, 64), DType::kF32, x.data(), 1, 64, out.data());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(out[0], 0xab);
}

// chanmix2g32, head_dim 16, one head, three tokens: x0[c] = 0, x1[c] = r_c = (c + 1) / 4,
// x2[c] = r_c / 3. Channels 8..15 have the larger ranges: 3-bit codes (step r / 7), 0..7
// 2-bit (step r / 3). Codes: token 0 all 0; token 1 all top (3, 7); token 2: 1 (2 bits),
// round(7 / 3) = 2 (3 bits). A row: 5 code bytes (8 x 2 + 8 x 3 bits), then a 2-byte slice
// of P = [lo16 x 16][hi16 x 16].
TEST(ChanMixFormat, GoldenLayout) {
  const Format f = Format::ChanMix(2, 32);
  constexpr size_t D = 16, R = 7;
  ASSERT_EQ(f.row_bytes(D), R);
  float x[3][D];
  for (size_t c = 0; c < D; ++c) {
    x[0][c] = 0.0f;
    x[1][c] = 0.25f * static_cast<float>(c + 1);
    x[2][c] = x[1][c] / 3.0f;
  }
  std::vector<uint8_t> rows(32 * R, 0xee);
  ASSERT_TRUE(QuantizeChanGroupsRef(f, DType::kF32, x, 3, 1, D, rows.data()).ok());
  const std::vector<uint8_t> zero(5, 0x00), top(5, 0xff);
  // token 2: 0b01 x 8 = 0x55 0x55; 0b010 x 8 little-endian = 0x492492 = 0x92 0x24 0x49.
  const std::vector<uint8_t> mid = {0x55, 0x55, 0x92, 0x24, 0x49};
  EXPECT_EQ(std::vector<uint8_t>(rows.begin(), rows.begin() + 5), zero);
  EXPECT_EQ(std::vector<uint8_t>(rows.begin() + R, rows.begin() + R + 5), top);
  EXPECT_EQ(std::vector<uint8_t>(rows.begin() + 2 * R, rows.begin() + 2 * R + 5), mid);
  EXPECT_EQ(std::vector<uint8_t>(rows.begin() + 3 * R, rows.begin() + 3 * R + 5), zero);  // absent
  auto le16 = [&](size_t row) { return static_cast<uint16_t>(rows[row * R + 5] | rows[row * R + 6] << 8); };
  for (size_t j = 0; j < 16; ++j) EXPECT_EQ(le16(j), 0x0000) << j;  // lo 0
  EXPECT_EQ(le16(16), 0x3400);                                       // hi 0.25
  EXPECT_EQ(le16(19), 0x3c00);                                       // hi 1.0
  EXPECT_EQ(le16(31), 0x4400);                                       // hi 4.0
  float y[3][D];
  ASSERT_TRUE(DequantizeChanRowsRef(f, rows.data(), 0, 3, 1, D, DType::kF32, y).ok());
  for (size_t c = 0; c < D; ++c) {
    EXPECT_EQ(y[0][c], 0.0f);
    EXPECT_EQ(y[1][c], x[1][c]);
    const float step = x[1][c] / (c < 8 ? 3.0f : 7.0f);
    EXPECT_EQ(y[2][c], std::fma(c < 8 ? 1.0f : 2.0f, step, 0.0f)) << c;
  }
}

// K-like data: per-channel offsets, amplitudes that differ a lot between channels.
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

// Every value within half a step of float64 truth (plus the f16 rounding of lo and hi), the
// step from a width this test derives: bits + 1 for the D/2 channels of largest f16 range.
TEST(ChanMixFormat, ErrorWithinTheStepOfItsWidth) {
  constexpr size_t H = 2;
  for (const Format& f : MixFormats()) {
    for (size_t D : {64, 80, 96, 128, 256}) {
      if (!f.CheckHeadDim(D).ok()) continue;
      const size_t G = f.group;
      for (size_t n : {size_t{1}, G - 1, G, 2 * G + 5}) {
        const std::vector<float> x = KeyLike(n, H, D, static_cast<uint32_t>(D + n));
        std::vector<uint8_t> rows((n + G - 1) / G * G * H * f.row_bytes(D));
        ASSERT_TRUE(QuantizeChanGroupsRef(f, DType::kF32, x.data(), n, H, D, rows.data()).ok());
        std::vector<float> y(n * H * D);
        ASSERT_TRUE(DequantizeChanRowsRef(f, rows.data(), 0, n, H, D, DType::kF32, y.data()).ok());
        for (size_t g0 = 0; g0 < n; g0 += G) {
          const size_t m = std::min(G, n - g0);
          for (size_t h = 0; h < H; ++h) {
            std::vector<double> lo(D, 1e30), hi(D, -1e30), r16(D);
            for (size_t c = 0; c < D; ++c) {
              for (size_t t = g0; t < g0 + m; ++t) {
                lo[c] = std::min(lo[c], double{x[(t * H + h) * D + c]});
                hi[c] = std::max(hi[c], double{x[(t * H + h) * D + c]});
              }
              r16[c] = double{F16ToF32(F32ToF16(static_cast<float>(hi[c])))} -
                       F16ToF32(F32ToF16(static_cast<float>(lo[c])));
            }
            std::vector<size_t> order(D);
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return r16[a] > r16[b]; });
            std::vector<int> w(D, f.bits);
            for (size_t i = 0; i < D / 2; ++i) w[order[i]] = f.bits + 1;
            for (size_t c = 0; c < D; ++c) {
              const double lo16 = F16ToF32(F32ToF16(static_cast<float>(lo[c])));
              const double hi16 = F16ToF32(F32ToF16(static_cast<float>(hi[c])));
              const double step = (hi16 - lo16) / ((1 << w[c]) - 1);
              const double bound = 0.5 * step + std::fabs(lo16 - lo[c]) + std::fabs(hi16 - hi[c]) +
                                   1e-6 * (std::fabs(lo[c]) + std::fabs(hi[c]));
              for (size_t t = g0; t < g0 + m; ++t) {
                const size_t i = (t * H + h) * D + c;
                ASSERT_LE(std::fabs(double{y[i]} - x[i]), bound)
                    << f.name() << " D " << D << " n " << n << " token " << t << " channel " << c
                    << " width " << w[c];
              }
            }
          }
        }
      }
    }
  }
}

// The dispatched entry points (what the cache and the attention kernels call) equal the
// reference bit for bit on every target, source / destination dtype and decode start.
TEST(ChanMixFormat, DispatchedMatchesTheReferenceOnEveryTarget) {
  constexpr size_t H = 3, D = 128;
  for (long long target : QuantAvailableSimdTargets()) {
    ASSERT_TRUE(QuantForceSimdTarget(target));
    for (const Format& f : MixFormats()) {
      const size_t n = 2 * f.group + 3, G = f.group, R = f.row_bytes(D);
      std::vector<float> x = KeyLike(n, H, D, static_cast<uint32_t>(n));
      for (size_t t = 0; t < n; ++t) x[t * H * D] = 0.75f;  // a constant channel
      for (DType sd : {DType::kF32, DType::kF16, DType::kBF16}) {
        std::vector<uint8_t> src(x.size() * DTypeSize(sd));
        for (size_t i = 0; i < x.size(); ++i) StoreAs(sd, src.data(), i, x[i]);
        std::vector<uint8_t> a((n + G - 1) / G * G * H * R, 0x5a), b(a.size(), 0xa5);
        ASSERT_TRUE(QuantizeChanGroupsRef(f, sd, src.data(), n, H, D, a.data()).ok());
        ASSERT_TRUE(QuantizeChanGroups(f, sd, src.data(), n, H, D, b.data()).ok());
        ASSERT_EQ(a, b) << f.name() << " target " << target;
        for (size_t first : {size_t{0}, n / 3}) {
          const size_t m = n - first;
          std::vector<uint8_t> ya(m * H * D * 4, 1), yb(m * H * D * 4, 2);
          ASSERT_TRUE(DequantizeChanRowsRef(f, a.data(), first, m, H, D, DType::kF32, ya.data()).ok());
          ASSERT_TRUE(DequantizeChanRows(f, a.data(), first, m, H, D, DType::kF32, yb.data()).ok());
          ASSERT_EQ(ya, yb) << f.name() << " target " << target << " first " << first;
        }
      }
    }
  }
  QuantForceSimdTarget(0);
}

// The point of the format: at the same 4.0 bits per value, chanmix3g64 (half the channels at
// 4 bits, groups of 64) has less squared error than chan3g32 (3 bits, groups of 32) on keys
// whose channel amplitudes differ; and it is between chan3g64 and chan4g64.
TEST(ChanMixFormat, BeatsChanAtTheSameBitsOnKeyLikeData) {
  constexpr size_t H = 2, D = 128, n = 256;
  const std::vector<float> x = KeyLike(n, H, D, 11);
  auto mse = [&](const Format& f) {
    std::vector<uint8_t> q(n * H * f.row_bytes(D));
    std::vector<float> y(x.size());
    EXPECT_TRUE(QuantizeChanGroups(f, DType::kF32, x.data(), n, H, D, q.data()).ok());
    EXPECT_TRUE(DequantizeChanRows(f, q.data(), 0, n, H, D, DType::kF32, y.data()).ok());
    double e = 0;
    for (size_t i = 0; i < x.size(); ++i) e += (double{y[i]} - x[i]) * (double{y[i]} - x[i]);
    return e / static_cast<double>(x.size());
  };
  const double mix = mse(Format::ChanMix(3, 64));
  EXPECT_LT(mix, 0.8 * mse(Format::Chan(3, 32))) << "chanmix3g64 vs chan3g32";
  EXPECT_LT(mix, mse(Format::Chan(3, 64)));
  EXPECT_GT(mix, mse(Format::Chan(4, 64)));
}

}  // namespace
}  // namespace kvtier
