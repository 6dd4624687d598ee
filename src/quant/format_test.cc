// Format descriptors: names, stable ids, sizes and the errors for bad input.
#include "kvtier/format.h"
#include "quant/test_formats.h"

#include <gtest/gtest.h>

#include <set>

namespace kvtier {
namespace {

using testing::AllFormats;

TEST(Format, EveryFormatValidatesAndRoundTripsThroughIdAndSpec) {
  std::set<uint32_t> ids;
  for (const Format& f : AllFormats()) {
    ASSERT_TRUE(f.Validate().ok()) << f.spec();
    Result<Format> by_id = Format::FromId(f.id());
    ASSERT_TRUE(by_id.ok()) << by_id.status().ToString();
    EXPECT_EQ(*by_id, f);
    Result<Format> by_name = ParseFormat(f.spec());
    ASSERT_TRUE(by_name.ok()) << f.spec() << ": " << by_name.status().ToString();
    EXPECT_EQ(*by_name, f) << f.spec();
    EXPECT_TRUE(ids.insert(f.id()).second) << "duplicate id for " << f.spec();
  }
}

// Ids are written to disk: these exact values must never change.
TEST(Format, IdsAreStable) {
  EXPECT_EQ(Format::F32().id(), 0x00002000u);
  EXPECT_EQ(Format::F16().id(), 0x01001001u);
  EXPECT_EQ(Format::BF16().id(), 0x02001002u);
  EXPECT_EQ(Format::Q8_0().id(), 0x01050804u);
  EXPECT_EQ(Format::Q4_0().id(), 0x01050405u);
  EXPECT_EQ(Format::Affine(4, 64, DType::kF16).id(), 0x01060403u);
  EXPECT_EQ(Format::Affine(8, 128, DType::kF32).id(), 0x00070803u);
  EXPECT_EQ(Format::Affine(3, 32, DType::kBF16).id(), 0x02050303u);
}

TEST(Format, NamesAndDefaults) {
  Result<Format> a = ParseFormat("affine4", {.group = 64, .scale_dtype = DType::kF32});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->name(), "affine4g64");
  EXPECT_EQ(a->spec(), "affine4g64:f32");
  EXPECT_EQ(a->scale_dtype, DType::kF32);
  Result<Format> b = ParseFormat("affine8g32:bf16");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->group, 32);
  EXPECT_EQ(b->scale_dtype, DType::kBF16);
  EXPECT_EQ(ParseFormat("q4_0")->name(), "q4_0");
  EXPECT_EQ(ParseFormat("bf16")->name(), "bf16");
}

TEST(Format, SizesMatchTheSeedTable) {
  // f32 source: MLX stores f32 scales and biases.
  EXPECT_DOUBLE_EQ(Format::Affine(8, 64, DType::kF32).bits_per_value(), 9.0);
  EXPECT_DOUBLE_EQ(Format::Affine(4, 64, DType::kF32).bits_per_value(), 5.0);
  // f16 source: 8.5 and 4.5 bits per value, the same as q8_0 and q4_0.
  EXPECT_DOUBLE_EQ(Format::Affine(8, 64, DType::kF16).bits_per_value(), 8.5);
  EXPECT_DOUBLE_EQ(Format::Affine(4, 64, DType::kF16).bits_per_value(), 4.5);
  EXPECT_DOUBLE_EQ(Format::Q8_0().bits_per_value(), 8.5);
  EXPECT_DOUBLE_EQ(Format::Q4_0().bits_per_value(), 4.5);
  EXPECT_EQ(Format::Q8_0().row_bytes(128), 4u * 34u);
  EXPECT_EQ(Format::Q4_0().row_bytes(128), 4u * 18u);
  EXPECT_EQ(Format::Affine(4, 64, DType::kF16).row_bytes(128), 64u + 2u * 2u * 2u);
  EXPECT_EQ(Format::Affine(3, 32, DType::kF32).row_bytes(96), 36u + 2u * 3u * 4u);
  EXPECT_EQ(Format::F16().row_bytes(128), 256u);
  for (const Format& f : AllFormats()) {
    for (size_t hd : {128u, 256u}) {
      EXPECT_DOUBLE_EQ(f.row_bytes(hd) * 8.0 / hd, f.bits_per_value()) << f.spec();
    }
  }
}

TEST(Format, UnknownNamesListTheValidOnes) {
  for (const char* bad : {"", "f8", "int4", "affine", "affine7g64", "affine4g48", "affine4g",
                          "affine4g64:f8", "affinexg64", "q5_0", "affine4g64x", "affine-4g64",
                          "affine99999999999g64"}) {
    Result<Format> r = ParseFormat(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("valid formats are f32, f16, bf16, q8_0, q4_0"),
              std::string::npos)
        << r.status().message();
  }
  Result<Format> bits = ParseFormat("affine7g64");
  EXPECT_NE(bits.status().message().find("valid bits are 2, 3, 4, 5, 6, 8"), std::string::npos);
  Result<Format> group = ParseFormat("affine4g48");
  EXPECT_NE(group.status().message().find("valid group sizes are 32, 64, 128"), std::string::npos);
}

TEST(Format, HeadDimMustBeAMultipleOfTheGroup) {
  EXPECT_TRUE(Format::Q4_0().CheckHeadDim(128).ok());
  Status s = Format::Q4_0().CheckHeadDim(80);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("head_dim 80"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("multiple of its group size 32"), std::string::npos) << s.message();
  EXPECT_FALSE(Format::Affine(4, 128, DType::kF16).CheckHeadDim(64).ok());
  EXPECT_TRUE(Format::Affine(4, 32, DType::kF16).CheckHeadDim(96).ok());
  EXPECT_FALSE(Format::F16().CheckHeadDim(0).ok());
  EXPECT_TRUE(Format::F16().CheckHeadDim(80).ok());
}

TEST(Format, CorruptIdsAreRejected) {
  for (uint32_t id : {0xffffffffu, 0x00000006u, 0x01060703u /* affine7 */, 0x01050805u,
                      0x03001001u, 0x01001002u /* bf16 with f16 tag */}) {
    Result<Format> r = Format::FromId(id);
    EXPECT_FALSE(r.ok()) << std::hex << id;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  }
}

TEST(Format, DTypes) {
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("float32"), DType::kF32);
  Result<DType> bad = ParseDType("f64");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("valid dtypes are f32, f16, bf16"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
