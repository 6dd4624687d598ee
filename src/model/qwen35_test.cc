// The qwen35 family (hybrid Gated DeltaNet + gated full attention): the float64 reference
// forward against llama.cpp's logits on the same random-weight GGUF (testdata/qwen35_logits.txt,
// made as testdata/README.md says), the layer pattern, the loader's errors for missing tensors
// and keys, and the batched forward's refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kv/kv_test_util.h"
#include "kvtier/test_model.h"
#include "model/model_ref.h"
#include "model/model_test_util.h"

namespace kvtier {
namespace {

using testing::GoldenLogits;
using testing::MaxAbsDiff;
using testing::Qwen35BatchConfig;
using testing::Qwen35GoldenConfig;
using testing::ReadGoldenLogits;

Result<testing::TinyModel> LoadWriter(const GgufWriter& w) {
  return testing::LoadWriterModel(w, "q35");
}

// `c`'s model without the tensor or metadata key `drop`: the load status.
Status LoadWithout(const TestModelConfig& c, const std::string& drop) {
  std::vector<uint8_t> keep;
  KVTIER_ASSIGN_OR_RETURN(GgufWriter w, testing::TestModelWithout(c, drop, &keep));
  return LoadWriter(w).status();
}

// A small copy of the shape (loads are fast; the fingerprint reads every weight byte).
TestModelConfig SmallQwen35() {
  TestModelConfig c = Qwen35BatchConfig();
  c.head_dim = 16;
  return c;
}

// kvtier's f32 single-sequence forward against llama.cpp: one prefill, one token at a time
// (the conv window and delta state carried across calls), and uneven chunks; and against the
// float64 reference. Bound: see testdata/README.md.
TEST(Qwen35, ForwardSequenceMatchesLlamaCpp) {
  const GoldenLogits g = ReadGoldenLogits("qwen35_logits.txt");
  auto m = LoadWriter(*BuildTestModel(Qwen35GoldenConfig()));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Model& model = *m->model;
  const size_t V = g.vocab, T = g.tokens.size();
  std::vector<double> ref;
  ASSERT_TRUE(model::ForwardQwen35Ref(*m->file, model.config(), g.tokens, &ref).ok());

  std::vector<float> prefill(T * V);
  HybridSeqState s1;
  Status s = model.ForwardSequence(&s1, g.tokens, true, prefill.data(), nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(s1.n_past, T);

  std::vector<float> decode(T * V);
  HybridSeqState s2;
  for (size_t t = 0; t < T; ++t) {
    s = model.ForwardSequence(&s2, std::span<const int32_t>(&g.tokens[t], 1), false,
                              decode.data() + t * V, nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  std::vector<float> chunked(T * V);  // chunks of 5, 1, 11, 7 tokens
  HybridSeqState s3;
  size_t at = 0;
  for (size_t n : {5, 1, 11, 7}) {
    s = model.ForwardSequence(&s3, std::span<const int32_t>(g.tokens).subspan(at, n), true,
                              chunked.data() + at * V, nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
    at += n;
  }
  ASSERT_EQ(at, T);

  auto diff = [](const std::vector<float>& a, const std::vector<double>& b) {
    return MaxAbsDiff(std::vector<double>(a.begin(), a.end()), b);
  };
  const double d_prefill = diff(prefill, g.logits), d_decode = diff(decode, g.logits);
  const double d_chunk = diff(chunked, g.logits), d_ref = diff(prefill, ref);
  std::printf("qwen35 vs llama.cpp: prefill %.3g, decode %.3g, chunks %.3g; vs float64 %.3g\n",
              d_prefill, d_decode, d_chunk, d_ref);
  EXPECT_LT(d_prefill, 5e-5);
  EXPECT_LT(d_decode, 5e-5);
  EXPECT_LT(d_chunk, 5e-5);
  EXPECT_LT(d_ref, 5e-5);
  // llama.cpp decoding one token per llama_decode (its autoregressive path, 1.6e-5 from its own
  // prefill) against kvtier's token-by-token decode.
  const GoldenLogits gd = ReadGoldenLogits("qwen35_decode_logits.txt");
  ASSERT_EQ(gd.tokens, g.tokens);
  const double d_llama_decode = diff(decode, gd.logits);
  std::printf("qwen35 decode vs llama.cpp decode: %.3g\n", d_llama_decode);
  EXPECT_LT(d_llama_decode, 5e-5);
}

// A state that forgets (zeroed delta state or conv window between calls) misses llama.cpp by
// far more than the bound: the recurrence really carries the sequence.
TEST(Qwen35, LosingTheStateIsDetected) {
  const GoldenLogits g = ReadGoldenLogits("qwen35_logits.txt");
  auto m = LoadWriter(*BuildTestModel(Qwen35GoldenConfig()));
  ASSERT_TRUE(m.ok());
  const size_t V = g.vocab, T = g.tokens.size();
  for (int which = 0; which < 2; ++which) {
    HybridSeqState st;
    std::vector<float> logits(T * V);
    for (size_t t = 0; t < T; ++t) {
      ASSERT_TRUE(m->model->ForwardSequence(&st, std::span<const int32_t>(&g.tokens[t], 1),
                                            false, logits.data() + t * V, nullptr).ok());
      for (size_t l = 0; l < st.conv.size(); ++l) {
        auto& v = which == 0 ? st.delta[l] : st.conv[l];
        std::fill(v.begin(), v.end(), 0.0f);
      }
    }
    const double d = MaxAbsDiff(std::vector<double>(logits.begin(), logits.end()), g.logits);
    EXPECT_GT(d, 20 * 5e-5) << (which == 0 ? "delta state" : "conv window");
  }
}

TEST(Qwen35, ForwardSequenceBadInput) {
  auto m = LoadWriter(*BuildTestModel(SmallQwen35()));
  ASSERT_TRUE(m.ok());
  HybridSeqState st;
  std::vector<float> logits(300);
  const std::vector<int32_t> bad = {1, 300};
  const Status s = m->model->ForwardSequence(&st, bad, false, logits.data(), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token 1 has id 300"), std::string::npos) << s.ToString();
  EXPECT_EQ(st.n_past, 0u);
  EXPECT_FALSE(m->model->ForwardSequence(&st, {}, false, logits.data(), nullptr).ok());
}


TEST(Qwen35, ConfigAndLayerPattern) {
  auto m = LoadWriter(*BuildTestModel(Qwen35GoldenConfig()));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = m->model->config();
  EXPECT_EQ(c.arch, ModelArch::kQwen35);
  EXPECT_EQ(ModelArchName(c.arch), "qwen35");
  EXPECT_EQ(c.rope_dims, 16u);  // a quarter of head_dim rotates
  EXPECT_EQ(c.ssm_conv_kernel, 4u);
  EXPECT_EQ(c.ssm_state, 64u);
  EXPECT_EQ(c.ssm_k_heads, 2u);
  EXPECT_EQ(c.ssm_v_heads, 4u);
  for (uint32_t l = 0; l < 8; ++l) EXPECT_EQ(c.recurrent_layer(l), l != 3 && l != 7) << l;
}

// llama.cpp's logits (one prefill of 24 tokens, f32 weights and K/V) against the float64
// reference. Bound: see testdata/README.md.
TEST(Qwen35, ReferenceMatchesLlamaCpp) {
  const GoldenLogits g = ReadGoldenLogits("qwen35_logits.txt");
  auto m = LoadWriter(*BuildTestModel(Qwen35GoldenConfig()));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(g.vocab, m->model->config().n_vocab);
  std::vector<double> ref;
  const Status s = model::ForwardQwen35Ref(*m->file, m->model->config(), g.tokens, &ref);
  ASSERT_TRUE(s.ok()) << s.ToString();
  double max_abs = 0.0;
  for (double v : g.logits) max_abs = std::max(max_abs, std::abs(v));
  const double diff = MaxAbsDiff(ref, g.logits);
  std::printf("qwen35: max |logit| %.3g, max |ref - llama.cpp| %.3g\n", max_abs, diff);
  EXPECT_GT(max_abs, 1.0);  // the logits are not flat: the comparison has something to compare
  EXPECT_LT(diff, 5e-5);
}

// Prefixes agree: the reference on the first n tokens gives the same logits as the first n
// positions of the full run (causal conv, recurrence and attention see no future token).
TEST(Qwen35, ReferenceIsCausal) {
  const GoldenLogits g = ReadGoldenLogits("qwen35_logits.txt");
  auto m = LoadWriter(*BuildTestModel(Qwen35GoldenConfig()));
  ASSERT_TRUE(m.ok());
  const std::vector<int32_t> head(g.tokens.begin(), g.tokens.begin() + 10);
  std::vector<double> full, part;
  ASSERT_TRUE(model::ForwardQwen35Ref(*m->file, m->model->config(), g.tokens, &full).ok());
  ASSERT_TRUE(model::ForwardQwen35Ref(*m->file, m->model->config(), head, &part).ok());
  full.resize(part.size());
  EXPECT_LT(MaxAbsDiff(full, part), 1e-12);
}

TEST(Qwen35, MissingTensorOrKeyNamesIt) {
  const TestModelConfig c = SmallQwen35();
  for (const char* drop : {"blk.0.ssm_a", "blk.1.ssm_conv1d.weight", "blk.2.attn_gate.weight",
                           "blk.0.ssm_norm.weight", "blk.3.attn_q.weight",
                           "blk.7.attn_k_norm.weight", "blk.5.post_attention_norm.weight"}) {
    const Status s = LoadWithout(c, drop);
    EXPECT_FALSE(s.ok()) << drop;
    EXPECT_NE(s.message().find(std::string("missing tensor ") + drop), std::string::npos)
        << s.ToString();
  }
  for (const char* drop : {"qwen35.ssm.conv_kernel", "qwen35.ssm.state_size",
                           "qwen35.ssm.group_count", "qwen35.ssm.time_step_rank",
                           "qwen35.ssm.inner_size", "qwen35.rope.dimension_sections",
                           "qwen35.attention.layer_norm_rms_epsilon"}) {
    const Status s = LoadWithout(c, drop);
    EXPECT_FALSE(s.ok()) << drop;
    EXPECT_NE(s.message().find(std::string("missing metadata key ") + drop), std::string::npos)
        << s.ToString();
  }
}

TEST(Qwen35, WrongShapesFailNamingTheTensor) {
  TestModelConfig c = SmallQwen35();
  c.ssm_conv_kernel = 3;  // metadata and tensors agree: loads
  auto ok = LoadWriter(*BuildTestModel(c));
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  // Every-layer attention pattern against DeltaNet tensors: layer 0 lacks attn_q.
  auto w = BuildTestModel(SmallQwen35());
  ASSERT_TRUE(w.ok());
  w->SetUint32("qwen35.full_attention_interval", 1);
  auto bad = LoadWriter(*w);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("missing tensor blk.0.attn_q.weight"), std::string::npos)
      << bad.status().ToString();
}

TEST(Qwen35, PlainForwardAsksForStates) {
  auto m = LoadWriter(*BuildTestModel(SmallQwen35()));
  ASSERT_TRUE(m.ok());
  std::vector<float> logits(300);
  const std::vector<int32_t> toks = {1, 2};
  std::span<const int32_t> rows[1] = {toks};
  auto pool = testing::MakePool(m->model->config().kv_shape(), Format::F32(), Format::F32(), 16,
                                8ull << 20);
  BatchCache cache(pool);
  ASSERT_TRUE(cache.Add(SequenceCache(pool)).ok());
  const Status s = m->model->Forward(cache, rows, false, logits.data(), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("recurrent state"), std::string::npos) << s.ToString();
  EXPECT_EQ(cache.offset(0), 0u);  // nothing appended
  // A state at the wrong position is refused naming both positions.
  HybridSeqState st;
  st.n_past = 3;
  HybridSeqState* states[1] = {&st};
  const Status w = m->model->Forward(cache, rows, false, logits.data(), nullptr, states);
  EXPECT_EQ(w.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.message().find("at token 3, its K/V at 0"), std::string::npos) << w.ToString();
}

// Only the full-attention layers have K/V in the cache: 8 layers, interval 4 -> 2.
TEST(Qwen35, KvShapeCountsAttentionLayers) {
  auto m = LoadWriter(*BuildTestModel(SmallQwen35()));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->model->config().kv_shape().n_layers, 2u);
}

// The batched forward over the BatchCache (f32 K/V), rows of different lengths, chunked
// prefill then batched decode, against ForwardSequence of each row alone; and a row run
// alone in the batched forward equals it inside the batch.
TEST(Qwen35, BatchedForwardMatchesEachRowAlone) {
  auto m = LoadWriter(*BuildTestModel(Qwen35BatchConfig()));
  ASSERT_TRUE(m.ok());
  const Model& model = *m->model;
  const size_t V = model.config().n_vocab;
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 17, 99, 3, 250, 41, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21},
      {1, 2, 3},
      {200, 100, 50, 25, 12, 6, 3, 1, 0, 299}};
  const size_t B = prompts.size();
  auto pool = testing::MakePool(model.config().kv_shape(), Format::F32(), Format::F32(), 16,
                                32ull << 20);
  BatchCache cache(pool);
  std::vector<HybridSeqState> st(B);
  std::vector<HybridSeqState*> sp;
  for (size_t i = 0; i < B; ++i) {
    ASSERT_TRUE(cache.Add(SequenceCache(pool)).ok());
    sp.push_back(&st[i]);
  }
  std::vector<std::vector<int32_t>> all = prompts;
  std::vector<std::vector<float>> batched(B);  // per row: logits after each step's last token
  std::vector<float> logits(B * V);
  // Prefill in chunks of at most 4 tokens (rows finish at different steps; a finished row
  // decodes its greedy token meanwhile), then decode 6 steps.
  std::vector<size_t> done(B, 0);
  for (int step = 0; step < 14; ++step) {
    std::vector<std::span<const int32_t>> rows;
    for (size_t i = 0; i < B; ++i) {
      const size_t n = std::min<size_t>(4, all[i].size() - done[i]);
      rows.emplace_back(all[i].data() + done[i], n);
    }
    const Status fs = model.Forward(cache, rows, false, logits.data(), nullptr, sp);
    ASSERT_TRUE(fs.ok()) << fs.ToString();
    for (size_t i = 0; i < B; ++i) {
      done[i] += rows[i].size();
      if (done[i] == all[i].size()) {  // greedy next token
        const float* row = logits.data() + i * V;
        all[i].push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
        batched[i].insert(batched[i].end(), row, row + V);
      }
    }
  }
  for (size_t i = 0; i < B; ++i) {
    EXPECT_EQ(st[i].n_past, done[i]);
    EXPECT_EQ(cache.offset(i), done[i]);
    // ForwardSequence over the same tokens, one call per generated token.
    HybridSeqState one;
    std::vector<float> ref(V);
    std::vector<float> want;
    const size_t P = prompts[i].size();
    ASSERT_TRUE(model.ForwardSequence(&one, std::span<const int32_t>(all[i]).first(P), false,
                                      ref.data(), nullptr).ok());
    want.insert(want.end(), ref.begin(), ref.end());
    for (size_t t = P; t + 1 < all[i].size(); ++t) {
      ASSERT_TRUE(model.ForwardSequence(&one, std::span<const int32_t>(&all[i][t], 1), false,
                                        ref.data(), nullptr).ok());
      want.insert(want.end(), ref.begin(), ref.end());
    }
    ASSERT_EQ(want.size(), batched[i].size()) << i;
    double d = 0.0;
    for (size_t j = 0; j < want.size(); ++j) {
      d = std::max(d, static_cast<double>(std::abs(want[j] - batched[i][j])));
    }
    EXPECT_LT(d, 1e-4) << "row " << i;  // f32 K/V; the fused kernel sums in another order
  }
}

// A snapshot (SaveState, encoded, decoded, LoadState) resumes a sequence bit for bit; a
// damaged one is refused; another model's format is refused naming it.
TEST(Qwen35, StateSnapshotRoundTrip) {
  auto m = LoadWriter(*BuildTestModel(Qwen35BatchConfig()));
  ASSERT_TRUE(m.ok());
  const Model& model = *m->model;
  const size_t V = model.config().n_vocab;
  const std::vector<int32_t> toks = {4, 8, 15, 16, 23, 42, 7, 9};
  auto pool = testing::MakePool(model.config().kv_shape(), Format::F32(), Format::F32(), 16,
                                8ull << 20);
  HybridSeqState a;
  HybridSeqState* sa[1] = {&a};
  BatchCache ca(pool);
  ASSERT_TRUE(ca.Add(SequenceCache(pool)).ok());
  std::vector<float> la(V), lb(V);
  std::span<const int32_t> first[1] = {std::span<const int32_t>(toks).first(5)};
  ASSERT_TRUE(model.Forward(ca, first, false, la.data(), nullptr, sa).ok());
  const StateSnapshot snap = model.SaveState(a);
  EXPECT_EQ(snap.position, 5u);
  EXPECT_NE(snap.format, 0u);
  const std::vector<uint8_t> bytes = EncodeStateSnapshot(snap);
  EXPECT_EQ(bytes.size(), snap.bytes());
  auto back = DecodeStateSnapshot(bytes, "test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  auto b = model.LoadState(*back);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  // Continue both: the original state, and the reloaded one over the same K/V.
  auto kv = ca.Extract(0);
  ASSERT_TRUE(kv.ok());
  BatchCache cb(pool);
  ASSERT_TRUE(cb.Add(std::move(*kv)).ok());
  ASSERT_TRUE(ca.TrimRow(0, 0).ok());
  HybridSeqState* sb[1] = {&*b};
  std::span<const int32_t> rest[1] = {std::span<const int32_t>(toks).subspan(5)};
  ASSERT_TRUE(model.Forward(ca, rest, false, la.data(), nullptr, sa).ok());
  ASSERT_TRUE(model.Forward(cb, rest, false, lb.data(), nullptr, sb).ok());
  EXPECT_EQ(la, lb);
  // Every single-bit flip of the encoded form is detected.
  for (size_t byte = 0; byte < bytes.size(); byte += 7) {
    std::vector<uint8_t> bad = bytes;
    bad[byte] ^= 0x10;
    EXPECT_FALSE(DecodeStateSnapshot(bad, "flip").ok()) << byte;
  }
  EXPECT_FALSE(DecodeStateSnapshot(std::span<const uint8_t>(bytes).first(bytes.size() - 4),
                                   "short").ok());
  StateSnapshot other = *back;
  other.format ^= 1;
  const Status s = model.LoadState(other).status();
  EXPECT_NE(s.message().find("format"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace kvtier
