// `kvtier check-model` and the forward pass's non-finite check (issue 36): a tiny f32 test model
// is clean; with a NaN planted in blk.1.ffn_down.weight, check-model names that tensor (exit 1)
// and generation fails naming layer 1 instead of printing garbage.
#include "cli/check_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <limits>

#include "cli/cli_test_util.h"
#include "kvtier/test_model.h"
#include "test_model/test_model_test_util.h"

namespace kvtier::cli {
namespace {

using testing::RunKvtier;

std::string TinyModel() {
  const std::string path = "/tmp/kvtier_check_model_" + std::to_string(::getpid()) + ".gguf";
  EXPECT_TRUE(WriteTestModel(kvtier::testing::TinyF32ModelConfig(), path).ok());
  return path;
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

  ASSERT_TRUE(kvtier::testing::PlantF32(path, "blk.1.ffn_down.weight", 7,
                                        std::numeric_limits<float>::quiet_NaN()).ok());
  ASSERT_TRUE(kvtier::testing::PlantF32(path, "blk.1.ffn_down.weight", 9,
                                        std::numeric_limits<float>::infinity()).ok());
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
