// Golden data from ggml itself (testdata/README.md): kvtier's scalar reference and SIMD
// dequantizers decode ggml's blocks to exactly ggml's floats, on every golden block.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kvtier/gguf.h"
#include "kvtier/weights.h"
#include "weights/dequant_ref.h"
#include "weights/dequant_simd.h"
#include "weights/golden.h"
#include "weights/weight_traits.h"

namespace kvtier::weights {
namespace {

std::vector<const WeightTypeTraits*> GoldenTypes() {
  std::vector<const WeightTypeTraits*> v;
  for (const WeightTypeTraits& t : kWeightTypes) {
    if (t.decoder == Decoder::kWeights) v.push_back(&t);
  }
  return v;
}

TEST(WeightsGolden, FilesMatchTheTraitsTable) {
  for (const WeightTypeTraits* t : GoldenTypes()) {
    Golden g;
    std::string err;
    ASSERT_TRUE(LoadGolden(std::string(t->name), &g, &err)) << err;
    EXPECT_EQ(g.type, static_cast<uint32_t>(t->type)) << t->name;
    EXPECT_EQ(g.block_values, t->block_values) << t->name;
    EXPECT_EQ(g.block_bytes, t->block_bytes) << t->name;
  }
}

// Finds the first value whose bits differ; -1 if none.
long FirstDiff(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) != 0) return static_cast<long>(i);
  }
  return -1;
}

TEST(WeightsGolden, ReferenceDecodesGgmlBlocksBitForBit) {
  for (const WeightTypeTraits* t : GoldenTypes()) {
    Golden g;
    std::string err;
    ASSERT_TRUE(LoadGolden(std::string(t->name), &g, &err)) << err;
    std::vector<float> y(g.output.size(), -7.0f);
    ASSERT_TRUE(DequantBlocksRef(g.type, g.blocks.data(), g.n_blocks, y.data()));
    const long d = FirstDiff(y, g.output);
    EXPECT_EQ(d, -1) << t->name << " value " << d << ": ours " << y[d] << " ggml " << g.output[d];
  }
}

TEST(WeightsGolden, EverySimdTargetDecodesGgmlBlocksBitForBit) {
  for (long long target : WeightsAvailableSimdTargets()) {
    ASSERT_TRUE(WeightsForceSimdTarget(target));
    for (const WeightTypeTraits* t : GoldenTypes()) {
      Golden g;
      std::string err;
      ASSERT_TRUE(LoadGolden(std::string(t->name), &g, &err)) << err;
      std::vector<float> y(g.output.size(), -7.0f);
      ASSERT_TRUE(DequantizeWeightRows(g.type, g.blocks.data(), 1, g.output.size(), y.data()).ok());
      const long d = FirstDiff(y, g.output);
      EXPECT_EQ(d, -1) << t->name << " on " << WeightsSimdTargetName() << " value " << d;
    }
  }
  WeightsForceSimdTarget(0);
}

}  // namespace
}  // namespace kvtier::weights
