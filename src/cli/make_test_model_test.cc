// make-test-model: the binary writes a model that reads back with the asked shape and type;
// bad flags exit 2 naming the flag.
#include "cli/make_test_model.h"

#include "cli/cli_test_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "kvtier/gguf.h"

namespace kvtier::cli {
namespace {

using testing::RunKvtier;

TEST(MakeTestModelBinary, WritesAModelAndRejectsBadFlags) {
  const std::string path =
      ::testing::TempDir() + "/kvtier_mtm_" + std::to_string(getpid()) + ".gguf";
  std::string out;
  ASSERT_EQ(RunKvtier("make-test-model --out " + path +
                          " --arch qwen2 --hidden 64 --layers 1 --heads 2 --kv-heads 1"
                          " --head-dim 32 --ffn 64 --vocab 300 --ctx 128 --weight-type q8_0"
                          " --no-tied --seed 3",
                      &out),
            0)
      << out;
  EXPECT_NE(out.find("wrote " + path + ": qwen2, 1 layers"), std::string::npos) << out;
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "qwen2");
  EXPECT_EQ(*(*f)->GetUint("qwen2.context_length"), 128u);
  const GgufTensor* o = (*f)->FindTensor("output.weight");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->type, static_cast<uint32_t>(GgmlType::kQ8_0));
  EXPECT_EQ(o->shape, (std::vector<uint64_t>{64, 300}));
  ASSERT_NE((*f)->FindTensor("blk.0.attn_q.bias"), nullptr);
  std::filesystem::remove(path);

  out.clear();
  EXPECT_EQ(RunKvtier("make-test-model --out " + path + " --weight-type q9_0", &out), 2);
  EXPECT_NE(out.find("--weight-type: expected f32, f16, bf16, q8_0, q4_0 or a quantization "
                     "preset (Q4_K_M, "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("got 'q9_0'"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunKvtier("make-test-model --out " + path + " --heads 16 --kv-heads 5", &out), 2);
  EXPECT_NE(out.find("--kv-heads: 5 does not divide --heads 16"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(path));
}

// A preset goes through kvtier's quantizer with llama.cpp's per-tensor choices.
TEST(MakeTestModel, WritesQuantizationPresets) {
  MakeTestModelFlags f;
  f.out = ::testing::TempDir() + "/kvtier_mtm_preset_" + std::to_string(getpid()) + ".gguf";
  f.config.arch = "llama";
  f.config.hidden = 256;
  f.config.layers = 2;
  f.config.heads = 2;
  f.config.kv_heads = 1;
  f.config.ffn = 512;
  f.config.vocab = 300;
  f.config.ctx = 64;
  for (const char* preset : {"Q4_K_M", "iq4_xs", "Q5_0"}) {
    f.weight_type = preset;
    std::ostringstream out;
    ASSERT_TRUE(RunMakeTestModel(f, out).ok()) << preset;
    EXPECT_NE(out.str().find(std::string(preset) + " weights ("), std::string::npos) << out.str();
    auto g = GgufFile::Open(f.out);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    const GgufTensor* q = (*g)->FindTensor("blk.0.attn_q.weight");
    const GgufTensor* emb = (*g)->FindTensor("token_embd.weight");
    ASSERT_NE(q, nullptr);
    ASSERT_NE(emb, nullptr);
    const std::string p = preset;
    const GgmlType want_q = p == "Q4_K_M" ? GgmlType::kQ4_K
                            : p == "iq4_xs" ? GgmlType::kIQ4_XS
                                            : GgmlType::kQ5_0;
    EXPECT_EQ(q->type, static_cast<uint32_t>(want_q)) << preset;
    EXPECT_EQ(emb->type, static_cast<uint32_t>(GgmlType::kQ6_K)) << preset;  // tied output head
    EXPECT_EQ((*g)->FindTensor("blk.0.attn_norm.weight")->type, 0u);  // norms stay f32
  }
  std::filesystem::remove(f.out);
}

TEST(MakeTestModel, RunReportsWhatItWrote) {
  MakeTestModelFlags f;
  f.out = ::testing::TempDir() + "/kvtier_mtm_run_" + std::to_string(getpid()) + ".gguf";
  f.config.arch = "llama";
  f.config.hidden = 32;
  f.config.layers = 1;
  f.config.heads = 1;
  f.config.kv_heads = 1;
  f.config.head_dim = 32;
  f.config.ffn = 32;
  f.config.vocab = 259;
  f.weight_type = "q4_0";
  std::ostringstream out;
  ASSERT_TRUE(RunMakeTestModel(f, out).ok());
  EXPECT_NE(out.str().find("of q4_0 weights"), std::string::npos) << out.str();
  EXPECT_TRUE(std::filesystem::exists(f.out));
  std::filesystem::remove(f.out);
  f.out = "/nonexistent-dir/x.gguf";
  EXPECT_EQ(RunMakeTestModel(f, out).code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace kvtier::cli
