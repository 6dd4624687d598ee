// The phi3 and gemma3 families: logits against llama.cpp's on the same random-weight GGUF
// (golden files in testdata/, made as testdata/README.md says), against the float64 reference
// (several KV formats), decode one token at a time against one prefill (gemma3's window across
// decode steps), the window pattern, and the loader's errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kv/kv_test_util.h"
#include "kvtier/test_model.h"
#include "kvtier/thread_pool.h"
#include "model/model_ref.h"
#include "model/model_test_util.h"

namespace kvtier {
namespace {

// phi3's shape testdata/README.md's make-test-model command writes (gemma3's:
// testing::Gemma3GoldenConfig).
TestModelConfig Phi3Config() {
  TestModelConfig c;
  c.arch = "phi3";
  c.hidden = 256;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.ffn = 512;
  c.vocab = 300;
  c.ctx = 512;
  c.rope_theta = 10000.0;
  c.weight_type = GgmlType::kF32;
  c.weight_std = 0.08f;
  c.seed = 3;
  c.tied = false;
  return c;
}

using testing::Gemma3GoldenConfig;
using testing::GoldenLogits;
using testing::MaxAbs;
using testing::MaxAbsDiff;
using testing::PoolFor;
using testing::Prefill;

Result<testing::TinyModel> LoadWriter(const GgufWriter& w) {
  return testing::LoadWriterModel(w, "fam");
}

Result<testing::TinyModel> LoadConfig(const TestModelConfig& c) {
  return testing::LoadTestModel(c, "fam");
}

// Token by token: logits of every position.
std::vector<float> Decode(const Model& m, const std::shared_ptr<BlockPool>& pool,
                          const std::vector<int32_t>& tokens) {
  const size_t V = m.config().n_vocab;
  BatchCache cache(pool);
  EXPECT_TRUE(cache.Add(SequenceCache(pool)).ok());
  std::vector<float> logits(tokens.size() * V);
  for (size_t t = 0; t < tokens.size(); ++t) {
    std::span<const int32_t> rows[1] = {std::span<const int32_t>(&tokens[t], 1)};
    const Status s = m.Forward(cache, rows, false, logits.data() + t * V, nullptr);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return logits;
}

struct ParityCase {
  const char* golden;
  TestModelConfig (*config)();
  // Tolerance on max |Δlogit| against llama.cpp (f32 KV, no flash attention): see
  // testdata/README.md for the measured error and why the bound is what it is.
  double tol;
};

class LlamaCppParity : public ::testing::TestWithParam<ParityCase> {};

TEST_P(LlamaCppParity, LogitsMatchLlamaCpp) {
  const ParityCase& pc = GetParam();
  const GoldenLogits g = testing::ReadGoldenLogits(pc.golden);
  ASSERT_FALSE(g.tokens.empty());
  auto m = LoadConfig(pc.config());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Model& model = *m->model;
  ASSERT_EQ(model.config().n_vocab, g.vocab);
  // The logits must not be flat, or the comparison proves little.
  ASSERT_GT(MaxAbs(g.logits), 1.0);
  ThreadPool tp(2);
  const auto prefill = Prefill(model, PoolFor(model, Format::F32(), Format::F32()), g.tokens, &tp);
  EXPECT_LT(MaxAbsDiff(prefill, g.logits), pc.tol) << "prefill";
  const auto decode = Decode(model, PoolFor(model, Format::F32(), Format::F32()), g.tokens);
  EXPECT_LT(MaxAbsDiff(decode, g.logits), pc.tol) << "decode";
  std::vector<double> ref;
  ASSERT_TRUE(model::ForwardRef(*m->file, model.config(), g.tokens, Format::F32(), Format::F32(),
                                &ref)
                  .ok());
  EXPECT_LT(MaxAbsDiff(ref, g.logits), pc.tol) << "float64 reference";
  std::printf("[ measured ] %s: max |dlogit| prefill %.3g decode %.3g float64-ref %.3g; "
              "max |logit| %.3g\n",
              pc.golden, MaxAbsDiff(prefill, g.logits), MaxAbsDiff(decode, g.logits),
              MaxAbsDiff(ref, g.logits), MaxAbs(g.logits));
  if (model.config().sliding_window > 0) {
    // The comparison sees the window: the same weights without it are far off.
    TestModelConfig global = pc.config();
    global.sliding_window = 0;
    auto mg = LoadConfig(global);
    ASSERT_TRUE(mg.ok()) << mg.status().ToString();
    const auto no_window =
        Prefill(*mg->model, PoolFor(*mg->model, Format::F32(), Format::F32()), g.tokens, &tp);
    EXPECT_GT(MaxAbsDiff(no_window, g.logits), 20 * pc.tol);
  }
  // Every position's argmax agrees with llama.cpp's.
  for (size_t t = 0; t < g.tokens.size(); ++t) {
    const auto* a = prefill.data() + t * g.vocab;
    const auto* b = g.logits.data() + t * g.vocab;
    EXPECT_EQ(std::max_element(a, a + g.vocab) - a, std::max_element(b, b + g.vocab) - b)
        << "position " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, LlamaCppParity,
    ::testing::Values(ParityCase{"phi3_logits.txt", Phi3Config, 5e-5},
                      ParityCase{"gemma3_logits.txt", Gemma3GoldenConfig, 2e-3}),
    [](const auto& info) { return info.param.config().arch; });

struct RefCase {
  TestModelConfig (*config)();
  GgmlType wtype;
  Format kv;
  double tol;  // max |Δlogit| relative to max |logit|
};

class FamilyForward : public ::testing::TestWithParam<RefCase> {};

TEST_P(FamilyForward, MatchesFloat64Reference) {
  const RefCase& rc = GetParam();
  TestModelConfig c = rc.config();
  c.weight_type = rc.wtype;
  auto m = LoadConfig(c);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Model& model = *m->model;
  std::vector<int32_t> tokens(29);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 5) % 300);
  std::vector<double> want;
  ASSERT_TRUE(model::ForwardRef(*m->file, model.config(), tokens, rc.kv, rc.kv, &want).ok());
  ThreadPool tp(2);
  const auto got = Prefill(model, PoolFor(model, rc.kv, rc.kv), tokens, &tp);
  EXPECT_LT(MaxAbsDiff(got, want) / MaxAbs(want), rc.tol) << c.arch << " kv " << rc.kv.name();
}

INSTANTIATE_TEST_SUITE_P(
    Families, FamilyForward,
    ::testing::Values(RefCase{Phi3Config, GgmlType::kF32, Format::F32(), 1e-5},
                      RefCase{Gemma3GoldenConfig, GgmlType::kF32, Format::F32(), 1e-5},
                      RefCase{Phi3Config, GgmlType::kF16, Format::F16(), 1e-3},
                      RefCase{Gemma3GoldenConfig, GgmlType::kF16, Format::F16(), 1e-3},
                      RefCase{Gemma3GoldenConfig, GgmlType::kQ8_0, Format::Q8_0(), 2e-2}),
    [](const auto& info) {
      return info.param.config().arch + "_" +
             GgmlTypeName(static_cast<uint32_t>(info.param.wtype)) + "_" + info.param.kv.name();
    });

TEST(FamilyConfig, Gemma3WindowPatternAndKeys) {
  auto m = LoadConfig(Gemma3GoldenConfig());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = m->model->config();
  EXPECT_EQ(c.arch, ModelArch::kGemma3);
  EXPECT_EQ(ModelArchName(c.arch), "gemma3");
  // Period 3: layers 0, 1 windowed, 2 global, 3 windowed (llama.cpp's set_swa_pattern).
  EXPECT_EQ(c.layer_window(0), 8u);
  EXPECT_EQ(c.layer_window(1), 8u);
  EXPECT_EQ(c.layer_window(2), 0u);
  EXPECT_EQ(c.layer_window(3), 8u);
  EXPECT_FLOAT_EQ(c.rope_theta_swa, 10000.0f);
  EXPECT_FLOAT_EQ(c.rope_theta, 1000000.0f);
  EXPECT_FLOAT_EQ(c.embd_scale, std::sqrt(128.0f));
  EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / 16.0f);
  EXPECT_FLOAT_EQ(c.final_softcap, 5.0f);
  EXPECT_TRUE(c.qk_norm && c.post_norms && c.rope_neox);
  EXPECT_EQ(c.ffn_act, FfnActivation::kGeluTanh);

  TestModelConfig plain = Gemma3GoldenConfig();
  plain.sliding_window = 0;  // no window key: every layer global
  auto p = LoadConfig(plain);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (uint32_t l = 0; l < 4; ++l) EXPECT_EQ(p->model->config().layer_window(l), 0u);
  EXPECT_NE(p->model->fingerprint(), m->model->fingerprint());
}

TEST(FamilyConfig, Phi3IsNeoxAndGlobal) {
  auto m = LoadConfig(Phi3Config());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = m->model->config();
  EXPECT_EQ(ModelArchName(c.arch), "phi3");
  EXPECT_TRUE(c.rope_neox);
  EXPECT_EQ(c.layer_window(0), 0u);
}

TEST(FamilyLoad, MissingTensorOrKeyNamesIt) {
  const struct {
    TestModelConfig (*config)();
    const char* drop;
  } cases[] = {
      {Phi3Config, "blk.1.attn_qkv.weight"},  // falls back to attn_q: names that
      {Phi3Config, "blk.0.ffn_up.weight"},
      {Phi3Config, "phi3.attention.layer_norm_rms_epsilon"},
      {Gemma3GoldenConfig, "blk.2.post_ffw_norm.weight"},
      {Gemma3GoldenConfig, "blk.0.post_attention_norm.weight"},
      {Gemma3GoldenConfig, "blk.3.attn_k_norm.weight"},
      {Gemma3GoldenConfig, "gemma3.attention.layer_norm_rms_epsilon"},
  };
  for (const auto& c : cases) {
    std::vector<uint8_t> keep;
    auto w = testing::TestModelWithout(c.config(), c.drop, &keep);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    auto m = LoadWriter(*w);
    ASSERT_FALSE(m.ok()) << c.drop;
    const std::string want = std::string(c.drop) == "blk.1.attn_qkv.weight"
                                 ? "missing tensor blk.1.attn_q.weight"
                                 : std::string(c.drop);
    EXPECT_NE(m.status().message().find(want), std::string::npos) << m.status().ToString();
  }
}

TEST(FamilyLoad, UnsupportedFamilyNamesItselfAndTheSupportedOnes) {
  TestModelConfig c = Gemma3GoldenConfig();
  auto full = BuildTestModel(c);
  ASSERT_TRUE(full.ok());
  std::vector<uint8_t> bytes = full->Serialize();
  auto f = GgufFile::FromMemory(bytes, "x");
  ASSERT_TRUE(f.ok());
  GgufWriter w;
  for (const auto& [key, value] : (*f)->metadata()) w.SetValue(key, value);
  w.SetString("general.architecture", "mamba2");
  auto m = LoadWriter(w);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("'mamba2'"), std::string::npos);
  EXPECT_NE(m.status().message().find("llama, qwen2, qwen3, phi3, gemma3, qwen35"),
            std::string::npos)
      << m.status().ToString();
}

TEST(FamilyLoad, Phi3NeedsHeadsTimesHeadDimEqualHidden) {
  TestModelConfig c = Phi3Config();
  c.hidden = 128;
  const Status s = ValidateTestModelConfig(c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--hidden"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace kvtier
