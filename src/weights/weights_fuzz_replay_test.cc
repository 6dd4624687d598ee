// Corpus replay of the weight-decoder fuzz target (weights_fuzz.cc), so it runs everywhere:
// writer-made files with random blocks of every kvtier weight type (finite and arbitrary
// bytes, so NaN / Inf scales too) and of types kvtier refuses, and their truncations.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kvtier/gguf.h"
#include "weights/weight_traits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kvtier::weights {
namespace {

TEST(WeightsFuzzReplay, EveryTypeRandomBlocksAndTruncations) {
  std::vector<std::vector<uint8_t>> inputs;
  std::mt19937 rng(11);
  for (int round = 0; round < 3; ++round) {
    GgufWriter w;
    w.SetString("general.architecture", "llama");
    for (const WeightTypeTraits& t : kWeightTypes) {
      std::vector<uint8_t> b(3 * t.block_bytes);
      for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
      EXPECT_TRUE(w.AddTensor("t." + std::string(t.name), t.type, {t.block_values, 3}, b).ok());
    }
    for (GgmlType t : {GgmlType::kIQ2_XXS, GgmlType::kTQ1_0, GgmlType::kMXFP4}) {
      const GgmlTypeInfo* info = FindGgmlType(static_cast<uint32_t>(t));
      std::vector<uint8_t> b(info->block_bytes, 7);
      EXPECT_TRUE(w.AddTensor("u." + std::string(info->name), t, {info->block_values}, b).ok());
    }
    inputs.push_back(w.Serialize());
    const auto parsed = GgufFile::FromMemory(inputs.back(), "seed.gguf");
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    ASSERT_EQ((*parsed)->tensors().size(), std::size(kWeightTypes) + 3);
  }
  for (size_t i = 0, n = inputs.size(); i < n; ++i) {
    for (size_t cut = 0; cut < inputs[i].size(); cut += 97) {
      inputs.emplace_back(inputs[i].begin(), inputs[i].begin() + static_cast<ptrdiff_t>(cut));
    }
  }
  for (const std::vector<uint8_t>& in : inputs) {
    auto copy = std::make_unique<uint8_t[]>(in.size() + 1);  // exact size for ASan
    std::copy(in.begin(), in.end(), copy.get());
    EXPECT_EQ(LLVMFuzzerTestOneInput(copy.get(), in.size()), 0);
  }
}

}  // namespace
}  // namespace kvtier::weights
