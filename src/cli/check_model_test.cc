// `kvtier check-model` and the forward pass's non-finite check (issue 36): a tiny f32 test model
// is clean; with a NaN planted in blk.1.ffn_down.weight, check-model names that tensor (exit 1)
// and generation fails naming layer 1 instead of printing garbage.
#include "cli/check_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cli/cli_test_util.h"
#include "kvtier/env.h"
#include "kvtier/gguf.h"
#include "kvtier/test_model.h"

namespace kvtier::cli {
namespace {

using testing::RunKvtier;

std::string TinyModel() {
  TestModelConfig c;
  c.arch = "llama";
  c.hidden = 128;
  c.layers = 2;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 64;
  c.ffn = 128;
  c.vocab = 300;
  c.ctx = 256;
  c.weight_type = GgmlType::kF32;
  c.text_fillers = true;
  const std::string path = "/tmp/kvtier_check_model_" + std::to_string(::getpid()) + ".gguf";
  EXPECT_TRUE(WriteTestModel(c, path).ok());
  return path;
}

// Writes `value` over the value at flat index `index` of tensor `name` (f32).
void Plant(const std::string& path, const std::string& name, uint64_t index, float value) {
  std::vector<uint8_t> bytes = Env::Default()->ReadFile(path).value();
  std::unique_ptr<GgufFile> g = GgufFile::FromMemory(bytes, path).value();
  const GgufTensor* t = g->FindTensor(name);
  ASSERT_NE(t, nullptr) << name;
  ASSERT_EQ(t->type, static_cast<uint32_t>(GgmlType::kF32));
  const size_t at = static_cast<size_t>(t->data - bytes.data()) + index * sizeof(float);
  g.reset();
  std::memcpy(bytes.data() + at, &value, sizeof value);
  ASSERT_TRUE(Env::Default()->WriteFileDurably(path, bytes).ok());
}

TEST(CheckModel, ACleanModelPassesAndANanIsNamedByCheckModelAndByTheForwardPass) {
  const std::string path = TinyModel();
  Result<ModelCheck> clean = CheckModel(path);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_EQ(clean->damaged, 0u);
  EXPECT_GT(clean->tensors.size(), 10u);
  std::string out;
  EXPECT_EQ(RunKvtier("check-model --model " + path, &out), 0) << out;
  EXPECT_NE(out.find("0 with non-finite values"), std::string::npos) << out;

  Plant(path, "blk.1.ffn_down.weight", 7, std::numeric_limits<float>::quiet_NaN());
  Plant(path, "blk.1.ffn_down.weight", 9, std::numeric_limits<float>::infinity());
  Result<ModelCheck> bad = CheckModel(path);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->damaged, 1u);
  out.clear();
  EXPECT_EQ(RunKvtier("check-model --model " + path, &out), 1) << out;
  EXPECT_NE(out.find("blk.1.ffn_down.weight (f32): 1 NaN, 1 Inf"), std::string::npos) << out;
  EXPECT_NE(out.find("first at index 7"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunKvtier("check-model --json --model " + path, &out), 1) << out;
  EXPECT_NE(out.find("\"damaged\": 1"), std::string::npos) << out;

  // Generation stops with an error naming the layer, not silent garbage.
  out.clear();
  EXPECT_EQ(RunKvtier("generate --model " + path + " --prompt hello --max-tokens 4", &out), 1)
      << out;
  EXPECT_NE(out.find("non-finite values (NaN or Inf) first appear in layer 1"), std::string::npos)
      << out;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvtier::cli
