// Traits, row geometry, errors, and SIMD == scalar reference for every compiled target.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "hwy/targets.h"
#include "kvtier/gguf.h"
#include "kvtier/weights.h"
#include "weights/dequant_ref.h"
#include "weights/dequant_simd.h"
#include "weights/weight_traits.h"
#include "weights/weights_test_util.h"

namespace kvtier::weights {
namespace {

TEST(WeightTraits, AgreeWithGgufGeometry) {
  for (const WeightTypeTraits& t : kWeightTypes) {
    const GgmlTypeInfo* g = FindGgmlType(static_cast<uint32_t>(t.type));
    ASSERT_NE(g, nullptr) << t.name;
    EXPECT_EQ(g->name, t.name);
    EXPECT_EQ(g->block_values, t.block_values) << t.name;
    EXPECT_EQ(g->block_bytes, t.block_bytes) << t.name;
    EXPECT_EQ(FindWeightType(static_cast<uint32_t>(t.type)), &t);
    EXPECT_EQ(t.block_values % t.sub_block_values, 0u) << t.name;
    // bits per value: codes plus the per-block scale overhead, never below the code bits.
    EXPECT_GE(8.0 * t.block_bytes / t.block_values, t.bits) << t.name;
  }
}

TEST(WeightTypes, UnsupportedTypesNameTheType) {
  for (uint32_t id : {16u, 17u, 18u, 19u, 21u, 22u, 29u, 34u, 35u, 39u, 40u, 9u, 15u}) {
    const Status s = CheckWeightType(id);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << id;
    EXPECT_NE(s.message().find("type " + GgmlTypeName(id) + " "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("iq4_xs"), std::string::npos) << s.message();  // lists the valid
  }
  EXPECT_NE(CheckWeightType(99).message().find("type 99"), std::string::npos);
}

TEST(WeightTypes, RowBytesAndBadRowLengths) {
  EXPECT_EQ(*WeightRowBytes(static_cast<uint32_t>(GgmlType::kQ4_K), 512), 288u);
  EXPECT_EQ(*WeightRowBytes(static_cast<uint32_t>(GgmlType::kIQ4_XS), 256), 136u);
  EXPECT_EQ(*WeightRowBytes(static_cast<uint32_t>(GgmlType::kQ5_0), 64), 44u);
  EXPECT_EQ(*WeightRowBytes(static_cast<uint32_t>(GgmlType::kF16), 3), 6u);
  const auto bad = WeightRowBytes(static_cast<uint32_t>(GgmlType::kQ6_K), 384);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("384"), std::string::npos);
  EXPECT_NE(bad.status().message().find("q6_K"), std::string::npos);
  EXPECT_NE(bad.status().message().find("256"), std::string::npos);
  EXPECT_EQ(WeightBlockValues(static_cast<uint32_t>(GgmlType::kQ3_K)), 256u);
  EXPECT_EQ(WeightBlockValues(16), 0u);
}

class WeightsSimd : public ::testing::TestWithParam<long long> {
 protected:
  void SetUp() override { ASSERT_TRUE(WeightsForceSimdTarget(GetParam())); }
  void TearDown() override { WeightsForceSimdTarget(0); }
};

TEST_P(WeightsSimd, EqualsReferenceBitForBit) {
  for (const WeightTypeTraits& t : kWeightTypes) {
    if (t.decoder != Decoder::kWeights) continue;
    const size_t nb = 37;
    const std::vector<uint8_t> blocks = RandomBlocks(t, nb, 1234 + t.block_bytes);
    std::vector<float> ref(nb * t.block_values), simd(nb * t.block_values, -1.0f);
    ASSERT_TRUE(DequantBlocksRef(static_cast<uint32_t>(t.type), blocks.data(), nb, ref.data()));
    ASSERT_TRUE(DequantBlocks(static_cast<uint32_t>(t.type), blocks.data(), nb, simd.data()));
    ASSERT_EQ(std::memcmp(ref.data(), simd.data(), ref.size() * sizeof(float)), 0)
        << t.name << " on " << WeightsSimdTargetName();
  }
}

std::string TargetName(const ::testing::TestParamInfo<long long>& info) {
  std::string s = hwy::TargetName(info.param);
  for (char& c : s) {
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

INSTANTIATE_TEST_SUITE_P(Targets, WeightsSimd, ::testing::ValuesIn(WeightsAvailableSimdTargets()),
                         TargetName);

}  // namespace
}  // namespace kvtier::weights
