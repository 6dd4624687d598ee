// Corpus replay of the GGUF fuzz target (gguf_fuzz.cc), so it is compiled and run everywhere:
// writer-made files, their truncations, the vocab files and the saved inputs in
// src/gguf/testdata/gguf_fuzz/ (crashes the fuzzer found, kept as regressions).
// With KVTIER_GGUF_SEED_DIR set, also writes the writer-made seeds there for a fuzzing run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kvtier/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kvtier {
namespace {

std::vector<std::vector<uint8_t>> Seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  GgufWriter w;
  w.SetString("general.architecture", "qwen3");
  w.SetUint32("qwen3.block_count", 1);
  w.SetFloat32("qwen3.rope.freq_base", 1e6f);
  w.SetStringArray("tokenizer.ggml.tokens", {"a", "b"});
  w.SetInt32Array("tokenizer.ggml.token_type", {1, 3});
  w.SetValue("nested", GgufArrayValue(GgufValueType::kArray,
                                      {GgufArrayValue(GgufValueType::kBool, {GgufBoolValue(true)})}));
  seeds.push_back(w.Serialize());
  std::vector<uint8_t> q8(34, 1), f16(8, 2), q6k(210, 3);
  EXPECT_TRUE(w.AddTensor("blk.0.attn_q.weight", GgmlType::kQ8_0, {32, 1}, q8).ok());
  EXPECT_TRUE(w.AddTensor("blk.0.attn_norm.weight", GgmlType::kF16, {4}, f16).ok());
  EXPECT_TRUE(w.AddTensor("output.weight", GgmlType::kQ6_K, {256}, q6k).ok());
  seeds.push_back(w.Serialize());
  // Every other K-quant / IQ4 / legacy weight type (issue 30), one or two blocks each.
  for (GgmlType t : {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                     GgmlType::kIQ4_XS, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                     GgmlType::kIQ4_NL, GgmlType::kIQ2_XXS, GgmlType::kMXFP4}) {
    const GgmlTypeInfo* info = FindGgmlType(static_cast<uint32_t>(t));
    std::vector<uint8_t> b(2 * info->block_bytes, static_cast<uint8_t>(info->block_bytes));
    EXPECT_TRUE(w.AddTensor("t." + std::string(info->name), t, {info->block_values, 2}, b).ok());
  }
  seeds.push_back(w.Serialize());
  w.set_alignment(8);
  seeds.push_back(w.Serialize());
  return seeds;
}

TEST(GgufFuzzReplay, SeedsTruncationsAndSavedInputs) {
  std::vector<std::vector<uint8_t>> inputs = Seeds();
  if (const char* dir = std::getenv("KVTIER_GGUF_SEED_DIR")) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::ofstream out(std::filesystem::path(dir) / ("seed" + std::to_string(i) + ".gguf"),
                        std::ios::binary);
      out.write(reinterpret_cast<const char*>(inputs[i].data()),
                static_cast<std::streamsize>(inputs[i].size()));
    }
  }
  for (size_t i = 0, n = inputs.size(); i < n; ++i) {
    for (size_t cut = 0; cut < inputs[i].size(); cut += 7) {
      inputs.emplace_back(inputs[i].begin(), inputs[i].begin() + static_cast<ptrdiff_t>(cut));
    }
  }
  const std::filesystem::path saved =
      std::filesystem::path(KVTIER_SOURCE_DIR) / "src" / "gguf" / "testdata" / "gguf_fuzz";
  size_t n_saved = 0;
  if (std::filesystem::exists(saved)) {
    for (const auto& e : std::filesystem::directory_iterator(saved)) {
      std::ifstream in(e.path(), std::ios::binary);
      inputs.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      ++n_saved;
    }
  }
  for (const std::vector<uint8_t>& in : inputs) {
    // An exact-size heap copy so ASan flags any read past the end.
    auto copy = std::make_unique<uint8_t[]>(in.size() + 1);
    std::copy(in.begin(), in.end(), copy.get());
    EXPECT_EQ(LLVMFuzzerTestOneInput(copy.get(), in.size()), 0);
  }
  RecordProperty("saved_inputs", static_cast<int>(n_saved));
}

}  // namespace
}  // namespace kvtier
