// Test models: a tiny model of each architecture written and read back (every tensor's name,
// shape, type; metadata; tokenizer), weights with the asked statistics, seeds reproducible,
// shapes llama.cpp could not load rejected naming the flag.
#include "kvtier/test_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "base/half.h"
#include "kvtier/format.h"
#include "kvtier/quant.h"

namespace kvtier {
namespace {

TestModelConfig Tiny(const std::string& arch, GgmlType wt) {
  TestModelConfig c;
  c.arch = arch;
  c.hidden = 64;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 32;  // heads x head_dim = 128 != hidden
  c.ffn = 96;
  c.vocab = 300;
  c.ctx = 256;
  c.rope_theta = 10000.0;
  c.weight_type = wt;
  c.tied = arch != "llama";
  c.seed = 5;
  return c;
}

// Values of a tensor as float (f32 / f16 / bf16 / q8_0 / q4_0).
std::vector<float> Values(const GgufTensor& t) {
  std::vector<float> out(t.n_values);
  const GgmlType type = static_cast<GgmlType>(t.type);
  if (type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0) {
    const Format f = type == GgmlType::kQ8_0 ? Format::Q8_0() : Format::Q4_0();
    EXPECT_TRUE(DequantizeRows(f, t.data, t.n_values / t.shape[0], t.shape[0], DType::kF32,
                               out.data())
                    .ok());
    return out;
  }
  for (uint64_t i = 0; i < t.n_values; ++i) {
    uint16_t h = 0;
    switch (type) {
      case GgmlType::kF32: std::memcpy(&out[i], t.data + 4 * i, 4); break;
      case GgmlType::kF16:
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = F16ToF32(h);
        break;
      case GgmlType::kBF16:
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = BF16ToF32(h);
        break;
      default: ADD_FAILURE() << t.name;
    }
  }
  return out;
}

void CheckModel(const TestModelConfig& c, const GgufFile& f) {
  const std::string& a = c.arch;
  EXPECT_EQ(*f.GetString("general.architecture"), a);
  EXPECT_EQ(*f.GetString("general.name"), std::string("kvtier-test-") + a);
  EXPECT_EQ(*f.GetUint(a + ".context_length"), c.ctx);
  EXPECT_EQ(*f.GetUint(a + ".embedding_length"), c.hidden);
  EXPECT_EQ(*f.GetUint(a + ".block_count"), c.layers);
  EXPECT_EQ(*f.GetUint(a + ".feed_forward_length"), c.ffn);
  EXPECT_EQ(*f.GetUint(a + ".attention.head_count"), c.heads);
  EXPECT_EQ(*f.GetUint(a + ".attention.head_count_kv"), c.kv_heads);
  EXPECT_EQ(*f.GetUint(a + ".attention.key_length"), c.head_dim);
  EXPECT_EQ(*f.GetUint(a + ".attention.value_length"), c.head_dim);
  EXPECT_EQ(*f.GetFloat(a + ".rope.freq_base"), c.rope_theta);
  EXPECT_EQ(f.Find(a + ".rope.freq_base")->type, GgufValueType::kFloat32);
  EXPECT_EQ(*f.GetFloat(a + ".attention.layer_norm_rms_epsilon"), static_cast<double>(1e-6f));
  EXPECT_EQ(f.Find(a + ".block_count")->type, GgufValueType::kUint32);

  // Tokenizer.
  EXPECT_EQ(*f.GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*f.GetString("tokenizer.ggml.pre"), a == "llama" ? "llama-bpe" : "qwen2");
  const auto tokens = *f.GetStringArray("tokenizer.ggml.tokens");
  const auto types = *f.GetIntArray("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), c.vocab);
  ASSERT_EQ(types.size(), c.vocab);
  EXPECT_EQ(std::set<std::string>(tokens.begin(), tokens.end()).size(), c.vocab);  // unique
  EXPECT_EQ(tokens[0], "!");
  EXPECT_EQ(tokens[188], "\xc4\x80");  // byte 0 -> U+0100
  EXPECT_EQ(types[0], 1);
  EXPECT_EQ(tokens[c.vocab - 3], "<|endoftext|>");
  EXPECT_EQ(types[c.vocab - 3], 3);
  EXPECT_EQ(*f.GetUint("tokenizer.ggml.eos_token_id"), c.vocab - 3);
  EXPECT_EQ(*f.GetUint("tokenizer.ggml.bos_token_id"), c.vocab - 3);
  EXPECT_TRUE(f.GetStringArray("tokenizer.ggml.merges")->empty());

  // Tensors: exactly the expected set, shapes in ggml order, types.
  struct Want {
    std::string name;
    std::vector<uint64_t> shape;
    bool weight;
  };
  const uint64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  std::vector<Want> want = {{"token_embd.weight", {c.hidden, c.vocab}, true},
                            {"output_norm.weight", {c.hidden}, false}};
  if (!c.tied) want.push_back({"output.weight", {c.hidden, c.vocab}, true});
  for (uint32_t l = 0; l < c.layers; ++l) {
    const std::string p = std::string("blk.") + std::to_string(l) + ".";
    want.push_back({p + "attn_norm.weight", {c.hidden}, false});
    want.push_back({p + "attn_q.weight", {c.hidden, q}, true});
    want.push_back({p + "attn_k.weight", {c.hidden, kv}, true});
    want.push_back({p + "attn_v.weight", {c.hidden, kv}, true});
    want.push_back({p + "attn_output.weight", {q, c.hidden}, true});
    want.push_back({p + "ffn_norm.weight", {c.hidden}, false});
    want.push_back({p + "ffn_gate.weight", {c.hidden, c.ffn}, true});
    want.push_back({p + "ffn_up.weight", {c.hidden, c.ffn}, true});
    want.push_back({p + "ffn_down.weight", {c.ffn, c.hidden}, true});
    if (a == "qwen3") {
      want.push_back({p + "attn_q_norm.weight", {c.head_dim}, false});
      want.push_back({p + "attn_k_norm.weight", {c.head_dim}, false});
    }
    if (a == "qwen2") {
      want.push_back({p + "attn_q.bias", {q}, false});
      want.push_back({p + "attn_k.bias", {kv}, false});
      want.push_back({p + "attn_v.bias", {kv}, false});
    }
  }
  EXPECT_EQ(f.tensors().size(), want.size());
  for (const Want& w : want) {
    SCOPED_TRACE(w.name);
    const GgufTensor* t = f.FindTensor(w.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, w.shape);
    EXPECT_EQ(t->type, static_cast<uint32_t>(w.weight ? c.weight_type : GgmlType::kF32));
    const std::vector<float> v = Values(*t);
    const bool is_norm = w.name.find("norm") != std::string::npos;
    double sum = 0, sum2 = 0;
    for (float x : v) {
      if (is_norm) {
        ASSERT_EQ(x, 1.0f);
      }
      sum += x;
      sum2 += double{x} * x;
    }
    if (!is_norm && v.size() >= 2048) {
      const double mean = sum / v.size(), sd = std::sqrt(sum2 / v.size() - mean * mean);
      EXPECT_NEAR(mean, 0.0, 0.002);
      EXPECT_NEAR(sd, 0.02, c.weight_type == GgmlType::kQ4_0 ? 0.003 : 0.001);
    }
  }
}

class TestModelArch : public ::testing::TestWithParam<std::pair<const char*, GgmlType>> {};

TEST_P(TestModelArch, WritesAndReadsBack) {
  const TestModelConfig c = Tiny(GetParam().first, GetParam().second);
  const std::string path = ::testing::TempDir() + "/kvtier_tm_" + c.arch + "_" +
                           std::to_string(getpid()) + ".gguf";
  ASSERT_TRUE(WriteTestModel(c, path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  CheckModel(c, **f);
  uint64_t bytes = 0;
  for (const GgufTensor& t : (*f)->tensors()) bytes += t.n_bytes;
  EXPECT_EQ(bytes, TestModelTensorBytes(c));
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(
    All, TestModelArch,
    ::testing::Values(std::make_pair("qwen3", GgmlType::kQ8_0), std::make_pair("qwen3", GgmlType::kF16),
                      std::make_pair("qwen2", GgmlType::kBF16), std::make_pair("qwen2", GgmlType::kQ4_0),
                      std::make_pair("llama", GgmlType::kF32), std::make_pair("llama", GgmlType::kQ8_0)),
    [](const auto& info) {
      return std::string(info.param.first) + "_" + GgmlTypeName(static_cast<uint32_t>(info.param.second));
    });

TEST(TestModel, SeedsAreReproducible) {
  TestModelConfig c = Tiny("qwen3", GgmlType::kQ8_0);
  auto a = BuildTestModel(c), b = BuildTestModel(c);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->Serialize(), b->Serialize());
  c.seed = 6;
  auto d = BuildTestModel(c);
  EXPECT_NE(a->Serialize(), d->Serialize());
}

TEST(TestModel, TextFillersAreUserDefinedTokens) {
  for (const bool text : {false, true}) {
    TestModelConfig c = Tiny("qwen3", GgmlType::kQ8_0);
    c.text_fillers = text;
    auto w = BuildTestModel(c);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    const std::vector<uint8_t> bytes = w->Serialize();
    auto f = GgufFile::FromMemory(bytes, "tiny");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const auto tokens = *(*f)->GetStringArray("tokenizer.ggml.tokens");
    const auto types = *(*f)->GetIntArray("tokenizer.ggml.token_type");
    ASSERT_EQ(types.size(), c.vocab);
    EXPECT_EQ(tokens[256], "<|filler_256|>");
    for (uint32_t i = 0; i < c.vocab; ++i) {
      const int want = i < 256 ? 1 : (i < c.vocab - 3 && text) ? 4 : 3;
      ASSERT_EQ(types[i], want) << "token " << i << " text_fillers " << text;
    }
  }
}

TEST(TestModel, ByteTokensCoverEveryByteOnce) {
  std::vector<uint8_t> bytes;
  const std::vector<std::string> t = ByteLevelBpeTokens(&bytes);
  ASSERT_EQ(t.size(), 256u);
  EXPECT_EQ(std::set<uint8_t>(bytes.begin(), bytes.end()).size(), 256u);
  EXPECT_EQ(std::set<std::string>(t.begin(), t.end()).size(), 256u);
  EXPECT_EQ(t[93], "~");
  EXPECT_EQ(bytes[93], '~');
  EXPECT_EQ(t[94], "\xc2\xa1");  // U+00A1
  EXPECT_EQ(bytes[188], 0);
  EXPECT_EQ(bytes[188 + 32], ' ');  // space -> U+0120 "Ġ"
  EXPECT_EQ(t[188 + 32], "\xc4\xa0");
}

TEST(TestModel, RejectsBadShapesNamingTheFlag) {
  auto expect = [](TestModelConfig c, const std::string& what) {
    const Status s = ValidateTestModelConfig(c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  TestModelConfig c = Tiny("qwen3", GgmlType::kQ8_0);
  EXPECT_TRUE(ValidateTestModelConfig(c).ok());
  EXPECT_TRUE(ValidateTestModelConfig(TestModelConfig{}).ok());  // Qwen3-0.6B shape
  TestModelConfig bad = c;
  bad.arch = "gpt2";
  expect(bad, "--arch: expected llama, qwen2, qwen3, phi3, gemma3 or qwen35, got 'gpt2'");
  bad = c;
  bad.hidden = 0;
  expect(bad, "--hidden: expected 1..65536, got 0");
  bad = c;
  bad.kv_heads = 3;
  expect(bad, "--kv-heads: 3 does not divide --heads 4");
  bad = c;
  bad.ffn = 100;
  expect(bad, "--ffn: 100 is not a multiple of 32, the block size of --weight-type q8_0");
  bad.weight_type = GgmlType::kF16;
  EXPECT_TRUE(ValidateTestModelConfig(bad).ok());
  bad = c;
  bad.vocab = 10;
  expect(bad, "--vocab: expected 259..");
  bad = c;
  bad.weight_type = GgmlType::kQ4_K;
  expect(bad, "--weight-type");
  EXPECT_EQ(*ParseTestModelWeightType("bf16"), GgmlType::kBF16);
  EXPECT_EQ(ParseTestModelWeightType("q4_K").status().message(),
            "--weight-type: expected f32, f16, bf16, q8_0 or q4_0, got 'q4_K'");
  bad = c;
  bad.hidden = 65536;
  bad.ffn = 1u << 20;
  bad.layers = 1024;
  expect(bad, "bytes of weights; the limit is");
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

// qwen35: the ssm / RoPE-section keys llama.cpp's loader requires, DeltaNet tensors on layers
// 0-2 and gated attention on layer 3, ssm_a negative (-exp(A_log)), and the head_dim check.
TEST(TestModel, Qwen35KeysAndTensors) {
  TestModelConfig c;
  c.arch = "qwen35";
  c.hidden = 64;
  c.layers = 4;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.ffn = 128;
  c.vocab = 300;
  c.ctx = 256;
  c.weight_type = GgmlType::kF32;
  auto w = BuildTestModel(c);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::vector<uint8_t> bytes = w->Serialize();
  auto f = GgufFile::FromMemory(bytes, "q35");
  ASSERT_TRUE(f.ok());
  const GgufFile& g = **f;
  EXPECT_EQ(*g.GetUint("qwen35.ssm.conv_kernel"), 4u);
  EXPECT_EQ(*g.GetUint("qwen35.ssm.state_size"), 16u);
  EXPECT_EQ(*g.GetUint("qwen35.ssm.group_count"), 2u);
  EXPECT_EQ(*g.GetUint("qwen35.ssm.time_step_rank"), 4u);
  EXPECT_EQ(*g.GetUint("qwen35.ssm.inner_size"), 64u);
  EXPECT_EQ(*g.GetUint("qwen35.full_attention_interval"), 4u);
  EXPECT_EQ(*g.GetUint("qwen35.rope.dimension_count"), 4u);
  EXPECT_EQ(*g.GetIntArray("qwen35.rope.dimension_sections"), (std::vector<int64_t>{2, 0, 0, 0}));
  for (int l = 0; l < 3; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const GgufTensor* qkv = g.FindTensor(p + "attn_qkv.weight");
    ASSERT_NE(qkv, nullptr);
    EXPECT_EQ(qkv->shape, (std::vector<uint64_t>{64, 2 * 32 + 64}));
    const GgufTensor* a = g.FindTensor(p + "ssm_a");
    ASSERT_NE(a, nullptr);
    const float* av = reinterpret_cast<const float*>(a->data);
    for (int h = 0; h < 4; ++h) EXPECT_LT(av[h], 0.0f) << l << " " << h;
    EXPECT_EQ(g.FindTensor(p + "attn_q.weight"), nullptr);
    EXPECT_EQ(g.FindTensor(p + "ffn_norm.weight"), nullptr);
  }
  const GgufTensor* q = g.FindTensor("blk.3.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (std::vector<uint64_t>{64, 2 * 4 * 16}));  // query + gate per head
  EXPECT_EQ(g.FindTensor("blk.3.attn_qkv.weight"), nullptr);
  c.head_dim = 12;
  EXPECT_NE(ValidateTestModelConfig(c).message().find("multiple of 8"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
