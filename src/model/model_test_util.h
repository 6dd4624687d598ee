// Test-only: tiny random models of every architecture built in memory with GgufWriter; models
// loaded from a writer or a TestModelConfig, and llama.cpp's golden logits from testdata/.
// Thread-compatible.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kv/kv_test_util.h"
#include "kvtier/batch_cache.h"
#include "kvtier/gguf.h"
#include "kvtier/model.h"
#include "kvtier/quant.h"
#include "kvtier/test_model.h"
#include "kvtier/thread_pool.h"
#include "kvtier/weights.h"
#include "model/matmul.h"

namespace kvtier::testing {

struct TinySpec {
  std::string arch = "llama";
  GgmlType wtype = GgmlType::kF32;
  uint32_t n_embd = 96, n_layers = 2, n_heads = 4, n_kv_heads = 2, head_dim = 64, n_ff = 160;
  uint32_t n_vocab = 50;
  bool tied = false;
  bool rope_freqs = false;
  uint64_t seed = 1;
  std::string skip_tensor;  // leave this tensor out
  std::string bad_tensor;   // give this tensor type q8_1
};

inline GgufWriter TinyModelWriter(const TinySpec& s) {
  GgufWriter w;
  const std::string& a = s.arch;
  TestModelConfig c;
  c.arch = s.arch;
  c.name = "tiny-" + a;
  c.hidden = s.n_embd;
  c.layers = s.n_layers;
  c.heads = s.n_heads;
  c.kv_heads = s.n_kv_heads;
  c.head_dim = s.head_dim;
  c.ffn = s.n_ff;
  c.vocab = s.n_vocab;
  c.ctx = 4096;
  c.rope_theta = 10000.0;
  c.weight_type = s.wtype;
  SetTestModelMetadata(c, &w);
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto tensor = [&](const std::string& name, uint32_t n_in, uint32_t n_out, bool vec,
                    float scale, float offset) {
    if (name == s.skip_tensor) return;
    std::vector<float> v(size_t(n_in) * n_out);
    for (float& x : v) x = nd(rng) * scale + offset;
    GgmlType t = vec ? GgmlType::kF32 : s.wtype;
    std::vector<uint64_t> shape = {n_in};
    if (!vec) shape.push_back(n_out);
    if (name == s.bad_tensor) {  // a type the runtime does not multiply with
      std::vector<uint8_t> b(size_t(n_in) / 32 * 36 * n_out);
      (void)w.AddTensor(name, GgmlType::kQ8_1, shape, std::move(b));
      return;
    }
    std::vector<uint8_t> b(WeightRowBytes(static_cast<uint32_t>(t), n_in).value() * n_out);
    (void)QuantizeWeightRows(static_cast<uint32_t>(t), v.data(), n_out, n_in, b.data());
    (void)w.AddTensor(name, t, shape, std::move(b));
  };
  const uint32_t E = s.n_embd, D = s.head_dim, H = s.n_heads, Hkv = s.n_kv_heads, F = s.n_ff;
  const float ws = 1.0f / std::sqrt(float(E));
  tensor("token_embd.weight", E, s.n_vocab, false, 1.0f, 0.0f);
  if (!s.tied) tensor("output.weight", E, s.n_vocab, false, ws, 0.0f);
  tensor("output_norm.weight", E, 1, true, 0.1f, 1.0f);
  if (s.rope_freqs) tensor("rope_freqs.weight", D / 2, 1, true, 0.5f, 2.0f);
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    tensor(p + "attn_norm.weight", E, 1, true, 0.1f, 1.0f);
    tensor(p + "attn_q.weight", E, H * D, false, ws, 0.0f);
    tensor(p + "attn_k.weight", E, Hkv * D, false, ws, 0.0f);
    tensor(p + "attn_v.weight", E, Hkv * D, false, ws, 0.0f);
    tensor(p + "attn_output.weight", H * D, E, false, 1.0f / std::sqrt(float(H * D)), 0.0f);
    if (a == "qwen2") {
      tensor(p + "attn_q.bias", H * D, 1, true, 0.1f, 0.0f);
      tensor(p + "attn_k.bias", Hkv * D, 1, true, 0.1f, 0.0f);
      tensor(p + "attn_v.bias", Hkv * D, 1, true, 0.1f, 0.0f);
    }
    if (a == "qwen3") {
      tensor(p + "attn_q_norm.weight", D, 1, true, 0.1f, 1.0f);
      tensor(p + "attn_k_norm.weight", D, 1, true, 0.1f, 1.0f);
    }
    tensor(p + "ffn_norm.weight", E, 1, true, 0.1f, 1.0f);
    tensor(p + "ffn_gate.weight", E, F, false, ws, 0.0f);
    tensor(p + "ffn_up.weight", E, F, false, ws, 0.0f);
    tensor(p + "ffn_down.weight", F, E, false, 1.0f / std::sqrt(float(F)), 0.0f);
  }
  return w;
}

// ---- The golden logits' shapes (testdata/README.md's make-test-model commands) ------------

// qwen35: layers 3 and 7 full attention, the other six Gated DeltaNet with 2 q/k heads and 4 v
// heads of 64.
inline TestModelConfig Qwen35GoldenConfig() {
  TestModelConfig c;
  c.arch = "qwen35";
  c.hidden = 256;
  c.layers = 8;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.ffn = 512;
  c.vocab = 300;
  c.ctx = 512;
  c.rope_theta = 10000000.0;
  c.weight_type = GgmlType::kF32;
  c.weight_std = 0.08f;
  c.seed = 5;
  c.tied = false;
  return c;
}

// qwen35's golden shape made small (hidden 64, ffn 128), keeping a head size the fused
// attention kernel takes (64): the batched forward's and the engine's tests.
inline TestModelConfig Qwen35BatchConfig() {
  TestModelConfig c = Qwen35GoldenConfig();
  c.hidden = 64;
  c.ffn = 128;
  return c;
}

// gemma3: window 8 on two layers of each three, GeGLU, post-norms, soft-cap 5.
inline TestModelConfig Gemma3GoldenConfig() {
  TestModelConfig c;
  c.arch = "gemma3";
  c.hidden = 128;
  c.layers = 4;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 256;
  c.ffn = 384;
  c.vocab = 300;
  c.ctx = 512;
  c.rope_theta = 1000000.0;
  c.weight_type = GgmlType::kF32;
  c.weight_std = 0.08f;
  c.seed = 4;
  c.sliding_window = 8;
  c.swa_period = 3;
  c.final_softcap = 5.0;
  return c;
}

// The engine tests' gemma3: the golden shape with room for 1024 tokens, untied (tied, a random
// gemma repeats the last token: its embedding scale), another seed and soft-cap 30.
inline TestModelConfig Gemma3EngineConfig() {
  TestModelConfig c = Gemma3GoldenConfig();
  c.ctx = 1024;
  c.seed = 11;
  c.final_softcap = 30.0;
  c.tied = false;
  return c;
}

// The model and the bytes its GGUF views.
struct TinyModel {
  std::shared_ptr<std::vector<uint8_t>> bytes;
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Model> model;
};

// `w` serialized and loaded from memory (`name`: the file's name in errors).
inline Result<TinyModel> LoadWriterModel(const GgufWriter& w, const std::string& name) {
  TinyModel m;
  m.bytes = std::make_shared<std::vector<uint8_t>>(w.Serialize());
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::FromMemory(*m.bytes, name));
  m.file = std::move(f);
  KVTIER_ASSIGN_OR_RETURN(m.model, Model::FromGguf(m.file));
  return m;
}

inline Result<TinyModel> MakeTinyModel(const TinySpec& s) {
  return LoadWriterModel(TinyModelWriter(s), "tiny");
}

// The model `c` describes (kvtier/test_model.h), loaded.
inline Result<TinyModel> LoadTestModel(const TestModelConfig& c, const std::string& name) {
  KVTIER_ASSIGN_OR_RETURN(GgufWriter w, BuildTestModel(c));
  return LoadWriterModel(w, name);
}

// A copy of `c`'s model without the tensor or metadata key `drop`; *keep_alive holds the
// bytes the copy's metadata may view.
inline Result<GgufWriter> TestModelWithout(const TestModelConfig& c, const std::string& drop,
                                           std::vector<uint8_t>* keep_alive) {
  KVTIER_ASSIGN_OR_RETURN(GgufWriter full, BuildTestModel(c));
  *keep_alive = full.Serialize();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::FromMemory(*keep_alive, "x"));
  GgufWriter w;
  for (const auto& [key, value] : f->metadata()) {
    if (key != drop) w.SetValue(key, value);
  }
  for (const GgufTensor& t : f->tensors()) {
    if (t.name == drop) continue;
    KVTIER_RETURN_IF_ERROR(w.AddTensor(t.name, static_cast<GgmlType>(t.type), t.shape,
                                       std::vector<uint8_t>(t.data, t.data + t.n_bytes)));
  }
  return w;
}

// A 64 MiB pool of 16-token blocks in `m`'s KV shape with K format `k` and V format `v`.
inline std::shared_ptr<BlockPool> PoolFor(const Model& m, Format k, Format v) {
  return MakePool(m.config().kv_shape(), k, v, 16, 64ull << 20);
}

// One row prefilled with all of `tokens` in one forward call:
//   logits [tokens.size(), n_vocab] (every position)
inline std::vector<float> Prefill(const Model& m, const std::shared_ptr<BlockPool>& pool,
                                  const std::vector<int32_t>& tokens, ThreadPool* tp) {
  BatchCache cache(pool);
  EXPECT_TRUE(cache.Add(SequenceCache(pool)).ok());
  std::vector<float> logits(tokens.size() * m.config().n_vocab);
  std::span<const int32_t> rows[1] = {tokens};
  const Status s = m.Forward(cache, rows, true, logits.data(), tp);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return logits;
}

// ---- llama.cpp's logits (src/model/testdata/README.md says how they were made) ----------

struct GoldenLogits {
  std::vector<int32_t> tokens;
  size_t vocab = 0;
  std::vector<double> logits;  // [tokens, vocab]
};

// testdata/<name>: "# tokens a,b,..." and "# P positions x V logits" lines, then P rows.
// A missing file or rows that disagree with the header fail the calling test.
inline GoldenLogits ReadGoldenLogits(const std::string& name) {
  GoldenLogits g;
  std::ifstream in(std::string(KVTIER_SOURCE_DIR) + "/src/model/testdata/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::string line;
  size_t positions = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# tokens ", 0) == 0) {
      std::stringstream s(line.substr(9));
      std::string tok;
      while (std::getline(s, tok, ',')) g.tokens.push_back(std::stoi(tok));
    } else if (line.find(" positions x ") != std::string::npos) {
      std::sscanf(line.c_str(), "# %zu positions x %zu logits", &positions, &g.vocab);
    } else if (!line.empty() && line[0] != '#') {
      std::stringstream s(line);
      double v;
      while (s >> v) g.logits.push_back(v);
    }
  }
  EXPECT_EQ(positions, g.tokens.size()) << name;
  EXPECT_EQ(g.logits.size(), positions * g.vocab) << name;
  return g;
}

// max |a[i] - b[i]|; infinity when the sizes differ.
template <typename A, typename B>
double MaxAbsDiff(const A& a, const B& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(double(a[i]) - double(b[i])));
  return d;
}

// max |a[i]|.
template <typename A>
double MaxAbs(const A& a) {
  double d = 0.0;
  for (const auto& x : a) d = std::max(d, std::abs(double(x)));
  return d;
}

}  // namespace kvtier::testing
