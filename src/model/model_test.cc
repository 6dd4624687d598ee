// The forward pass against the float64 reference (every architecture, weight type and KV
// format), incremental decode against one prefill, ragged batches against single rows, and
// the loader's errors.
#include <gtest/gtest.h>

#include <cmath>

#include "kvtier/thread_pool.h"
#include "kv/kv_test_util.h"
#include "model/model_ref.h"
#include "model/model_test_util.h"
#include "model/matmul.h"

namespace kvtier {
namespace {

using testing::MakeTinyModel;
using testing::PoolFor;
using testing::Prefill;
using testing::TinySpec;

double RelError(const float* got, const double* want, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

std::vector<int32_t> Tokens(size_t n, uint32_t vocab, uint32_t seed) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7 + seed * 13 + 3) % vocab);
  return t;
}

struct Case {
  std::string arch;
  GgmlType wtype;
  Format kv;
  double tol;
  // With int8 matmul kernels (q8_0 / q4_0 weights): each product's activations are rounded to
  // 8 bits per 32-value block, about 0.6% rms of a product (matmul.h's bound); through the
  // tiny models' 2 layers x 7 products and the lm head that gives 1.1e-2 .. 1.7e-2 (q8_0) and
  // up to 7.5e-2 (q4_0 with its 4-bit V, which amplifies it) on these random logits.
  double tol_int8 = 0.0;
};

class ForwardTest : public ::testing::TestWithParam<Case> {};

TEST_P(ForwardTest, MatchesFloat64Reference) {
  const Case& c = GetParam();
  TinySpec spec;
  spec.arch = c.arch;
  spec.wtype = c.wtype;
  spec.rope_freqs = c.arch == "llama";
  spec.tied = c.arch == "qwen3";
  auto tm = MakeTinyModel(spec);
  ASSERT_TRUE(tm.ok()) << tm.status().ToString();
  const Model& m = *tm->model;
  const auto tokens = Tokens(37, m.config().n_vocab, 1);
  std::vector<double> want;
  ASSERT_TRUE(model::ForwardRef(*tm->file, m.config(), tokens, c.kv, c.kv, &want).ok());
  ThreadPool tp(2);
  // The float matmul kernels, then the default (int8 kernels for quantized weights where the
  // CPU has them: activations rounded to int8 per product, hence tol_int8).
  for (auto path : {model::MatMulPath::kFloat, model::MatMulPath::kAuto}) {
    ASSERT_TRUE(model::MatMulForcePath(path));
    const double tol = path == model::MatMulPath::kFloat ? c.tol : c.tol_int8;
    const auto got = Prefill(m, PoolFor(m, c.kv, c.kv), tokens, &tp);
    const size_t V = m.config().n_vocab;
    for (size_t t = 0; t < tokens.size(); ++t) {
      EXPECT_LT(RelError(got.data() + t * V, want.data() + t * V, V), tol)
          << c.arch << " weights " << GgmlTypeName(static_cast<uint32_t>(c.wtype)) << " kv "
          << c.kv.name() << " position " << t << " matmul "
          << model::MatMulKernelName(static_cast<uint32_t>(c.wtype), tokens.size());
    }
  }
  ASSERT_TRUE(model::MatMulForcePath(model::MatMulPath::kAuto));
}

INSTANTIATE_TEST_SUITE_P(
    Models, ForwardTest,
    ::testing::Values(Case{"llama", GgmlType::kF32, Format::F32(), 1e-5, 1e-5},
                      Case{"qwen2", GgmlType::kF32, Format::F32(), 1e-5, 1e-5},
                      Case{"qwen3", GgmlType::kF32, Format::F32(), 1e-5, 1e-5},
                      Case{"llama", GgmlType::kF16, Format::F16(), 1e-4, 1e-4},
                      // kAuto: the bf16 prefill GEMM rounds the activations to bf16
                      // (2^-9 per product term): 2.0e-3 .. 3.3e-3 measured.
                      Case{"qwen3", GgmlType::kBF16, Format::BF16(), 1e-3, 6e-3},
                      Case{"llama", GgmlType::kQ8_0, Format::Q8_0(), 1e-2, 3e-2},
                      // 4-bit V on the attention kernels' int8 path (CPUs with AVX-512
                      // VNNI) rounds the softmax weights to int8: up to 1e-2 on each attention
                      // output (docs/kernels.md), 1.0e-2 .. 1.8e-2 on these logits after two
                      // layers, against 0.1 and more for the q4_0 rows' own rounding.
                      Case{"qwen2", GgmlType::kQ4_0, Format::Q4_0(), 3e-2, 0.1}),
    [](const auto& info) {
      return info.param.arch + "_" + GgmlTypeName(static_cast<uint32_t>(info.param.wtype)) +
             "_" + info.param.kv.name();
    });

// K-quant / IQ4 / legacy weights (rows of 256 values): the forward pass equals the float64
// reference over the same blocks.
TEST(Forward, WeightsTypesMatchFloat64Reference) {
  for (GgmlType wtype : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kIQ4_XS, GgmlType::kQ3_K,
                         GgmlType::kQ5_1}) {
    TinySpec spec;
    spec.arch = "qwen3";
    spec.wtype = wtype;
    spec.n_embd = 256;
    spec.n_ff = 512;
    spec.tied = true;
    auto tm = MakeTinyModel(spec);
    ASSERT_TRUE(tm.ok()) << tm.status().ToString();
    const Model& m = *tm->model;
    const auto tokens = Tokens(19, m.config().n_vocab, 4);
    std::vector<double> want;
    ASSERT_TRUE(
        model::ForwardRef(*tm->file, m.config(), tokens, Format::F32(), Format::F32(), &want).ok());
    ThreadPool tp(2);
    // The float kernels (1e-4), then the default: the int8 kernels' activation rounding
    // (matmul.h; one scale per 256 values for the super-block types, as ggml's q8_K) gives
    // about 1e-2 on these logits (0.96e-2 q5_1, 1.35e-2 iq4_xs; 2e-2 allowed).
    for (auto path : {model::MatMulPath::kFloat, model::MatMulPath::kAuto}) {
      ASSERT_TRUE(model::MatMulForcePath(path));
      const double tol = path == model::MatMulPath::kFloat ? 1e-4 : 2e-2;
      const auto got = Prefill(m, PoolFor(m, Format::F32(), Format::F32()), tokens, &tp);
      const size_t V = m.config().n_vocab;
      for (size_t t = 0; t < tokens.size(); ++t) {
        EXPECT_LT(RelError(got.data() + t * V, want.data() + t * V, V), tol) << GgmlTypeName(static_cast<uint32_t>(wtype)) << " position " << t
                          << " matmul "
                          << model::MatMulKernelName(static_cast<uint32_t>(wtype), tokens.size());
      }
    }
    ASSERT_TRUE(model::MatMulForcePath(model::MatMulPath::kAuto));
  }
}

TEST(Forward, DecodeOneByOneEqualsPrefill) {
  TinySpec spec;
  spec.arch = "qwen3";
  auto tm = MakeTinyModel(spec);
  ASSERT_TRUE(tm.ok()) << tm.status().ToString();
  const Model& m = *tm->model;
  const size_t V = m.config().n_vocab;
  const auto tokens = Tokens(20, m.config().n_vocab, 2);
  auto pool = PoolFor(m, Format::F32(), Format::F32());
  const auto full = Prefill(m, pool, tokens, nullptr);

  BatchCache cache(pool);
  ASSERT_TRUE(cache.Add(SequenceCache(pool)).ok());
  std::vector<float> logits(V);
  const std::vector<int32_t> head(tokens.begin(), tokens.begin() + 6);
  std::span<const int32_t> rows[1] = {head};
  ASSERT_TRUE(m.Forward(cache, rows, false, logits.data(), nullptr).ok());
  for (size_t t = 6; t <= tokens.size(); ++t) {
    std::vector<double> want(full.begin() + (t - 1) * V, full.begin() + t * V);
    EXPECT_LT(RelError(logits.data(), want.data(), V), 1e-5) << "position " << t - 1;
    if (t == tokens.size()) break;
    rows[0] = std::span<const int32_t>(&tokens[t], 1);
    ASSERT_TRUE(m.Forward(cache, rows, false, logits.data(), nullptr).ok());
  }
  EXPECT_EQ(cache.length(0), tokens.size());
}

TEST(Forward, RaggedBatchEqualsSingleRows) {
  TinySpec spec;
  spec.arch = "llama";
  spec.wtype = GgmlType::kF16;
  auto tm = MakeTinyModel(spec);
  ASSERT_TRUE(tm.ok()) << tm.status().ToString();
  const Model& m = *tm->model;
  const size_t V = m.config().n_vocab;
  auto pool = PoolFor(m, Format::Q8_0(), Format::Q4_0());
  ThreadPool tp(2);
  // Three rows with histories of 5, 0 and 40 tokens, then 3, 9 and 1 new tokens at once.
  const size_t hist[3] = {5, 0, 40}, fresh[3] = {3, 9, 1};
  std::vector<std::vector<int32_t>> all(3);
  BatchCache batch(pool);
  for (int i = 0; i < 3; ++i) {
    all[i] = Tokens(hist[i] + fresh[i], m.config().n_vocab, 10 + i);
    ASSERT_TRUE(batch.Add(SequenceCache(pool)).ok());
  }
  {  // histories one row at a time
    for (int i = 0; i < 3; ++i) {
      if (hist[i] == 0) continue;
      BatchCache one(pool);
      auto row = batch.Take(0);
      ASSERT_TRUE(row.ok());
      ASSERT_TRUE(one.Add(std::move(*row)).ok());
      std::vector<int32_t> h(all[i].begin(), all[i].begin() + hist[i]);
      std::span<const int32_t> r[1] = {h};
      std::vector<float> lg(V);
      ASSERT_TRUE(m.Forward(one, r, false, lg.data(), &tp).ok());
      auto back = one.Take(0);
      ASSERT_TRUE(back.ok());
      ASSERT_TRUE(batch.Add(std::move(*back)).ok());
    }
    // rows are now in order 1 (empty, untouched), 0, 2 -> restore 0, 1, 2
    const size_t order[3] = {1, 0, 2};
    ASSERT_TRUE(batch.Filter(order).ok());
  }
  std::vector<std::span<const int32_t>> rows;
  for (int i = 0; i < 3; ++i) rows.emplace_back(all[i].data() + hist[i], fresh[i]);
  std::vector<float> got(3 * V);
  ASSERT_TRUE(m.Forward(batch, rows, false, got.data(), &tp).ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(batch.length(i), all[i].size());
    const auto single = Prefill(m, pool, all[i], &tp);
    std::vector<double> want(single.end() - V, single.end());
    EXPECT_LT(RelError(got.data() + i * V, want.data(), V), 1e-4) << "row " << i;
  }
}

TEST(Forward, RejectsBadCalls) {
  auto tm = MakeTinyModel(TinySpec{});
  ASSERT_TRUE(tm.ok()) << tm.status().ToString();
  const Model& m = *tm->model;
  auto pool = PoolFor(m, Format::F16(), Format::F16());
  BatchCache cache(pool);
  ASSERT_TRUE(cache.Add(SequenceCache(pool)).ok());
  std::vector<float> logits(4 * m.config().n_vocab);
  const std::vector<int32_t> bad = {1, 2, 50};
  std::span<const int32_t> rows[1] = {bad};
  Status s = m.Forward(cache, rows, true, logits.data(), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("id 50"), std::string::npos) << s.message();
  EXPECT_EQ(cache.length(0), 0u);
  const std::vector<int32_t> none;
  rows[0] = none;
  EXPECT_FALSE(m.Forward(cache, rows, true, logits.data(), nullptr).ok());
  // A cache of another shape.
  KvShape other = m.config().kv_shape();
  other.n_layers += 1;
  auto wrong = testing::MakePool(other, Format::F16(), Format::F16(), 16, 8ull << 20);
  BatchCache wc(wrong);
  ASSERT_TRUE(wc.Add(SequenceCache(wrong)).ok());
  const std::vector<int32_t> ok = {1};
  rows[0] = ok;
  s = m.Forward(wc, rows, true, logits.data(), nullptr);
  EXPECT_NE(s.message().find("KV shape"), std::string::npos) << s.message();
}

TEST(ModelLoad, ErrorsNameTheTensorOrKey) {
  TinySpec spec;
  spec.skip_tensor = "blk.1.ffn_up.weight";
  auto r = MakeTinyModel(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing tensor blk.1.ffn_up.weight"), std::string::npos)
      << r.status().message();

  spec = TinySpec{};
  spec.bad_tensor = "blk.0.attn_k.weight";
  r = MakeTinyModel(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unsupported tensor type q8_1 in tensor blk.0.attn_k"),
            std::string::npos)
      << r.status().message();

  spec = TinySpec{};
  spec.arch = "gpt-neox";
  r = MakeTinyModel(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("architecture 'gpt-neox' is not supported"),
            std::string::npos)
      << r.status().message();

  spec = TinySpec{};
  spec.n_kv_heads = 3;
  r = MakeTinyModel(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("head_count_kv 3"), std::string::npos)
      << r.status().message();
}

TEST(ModelLoad, FingerprintNamesWeightsAndShape) {
  auto fp = [](const TinySpec& s) {
    auto m = MakeTinyModel(s);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? m->model->fingerprint() : ModelFingerprint{};
  };
  const TinySpec base;
  const ModelFingerprint a = fp(base);
  EXPECT_FALSE(a.is_zero());
  EXPECT_EQ(fp(base), a);  // the same file: the same fingerprint, every time
  TinySpec other_weights = base;
  other_weights.seed = 2;
  EXPECT_NE(fp(other_weights), a);
  TinySpec other_type = base;
  other_type.wtype = GgmlType::kF16;
  EXPECT_NE(fp(other_type), a);
  TinySpec other_arch = base;
  other_arch.arch = "qwen3";
  EXPECT_NE(fp(other_arch), a);
  // One weight byte changed (in the last tensor's data) changes it.
  auto m = MakeTinyModel(base);
  ASSERT_TRUE(m.ok());
  std::vector<uint8_t> bytes = *m->bytes;
  bytes[bytes.size() - 7] ^= 0x10;
  auto f = GgufFile::FromMemory(bytes, "tiny-flipped");
  ASSERT_TRUE(f.ok());
  auto flipped = Model::FromGguf(std::shared_ptr<const GgufFile>(std::move(*f)));
  ASSERT_TRUE(flipped.ok());
  EXPECT_NE((*flipped)->fingerprint(), a);
}

}  // namespace
}  // namespace kvtier
