// SelectAttentionKernel against the pair table and the CPU features it reads, and the generic
// path on the pairs the fast path normally takes (so that both stay tested on every target).
#include "kernels/dispatch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kvtier/thread_pool.h"
#include "kernels/attention_ref.h"
#include "kvtier/attention.h"
#include "kvtier/batch_cache.h"
#include "kvtier/quant.h"

namespace kvtier::attn {
namespace {

CpuFeatures Avx512(bool vnni) {
  CpuFeatures c;
  c.float_lanes = 16;
  c.x86_avx3 = true;
  c.vnni = vnni;
  return c;
}
CpuFeatures Lanes(size_t n) {
  CpuFeatures c;
  c.float_lanes = n;
  return c;
}

TEST(SelectAttentionKernel, PicksThePathOfThePairTable) {
  const Format q8 = Format::Q8_0(), q4 = Format::Q4_0(), f16 = Format::F16();
  // Quantized pairs: int8 with VNNI, else q16; prefill items on the f32 prefill kernel.
  KernelChoice c = SelectAttentionKernel(q8, q4, 128, Avx512(true));
  EXPECT_EQ(c.decode, Path::kInt8);
  EXPECT_EQ(c.prefill, Path::kInt8);
  c = SelectAttentionKernel(q8, q4, 128, Avx512(false));
  EXPECT_EQ(c.decode, Path::kQ16);
  EXPECT_EQ(c.prefill, Path::kPrefill);
  // Plain formats: fast and prefill where 4 | lanes and 4 | head_dim / lanes.
  c = SelectAttentionKernel(f16, f16, 128, Lanes(8));
  EXPECT_EQ(c.decode, Path::kFast);
  EXPECT_EQ(c.prefill, Path::kPrefill);
  c = SelectAttentionKernel(f16, f16, 128, Lanes(4));  // no prefill kernel below 8 lanes
  EXPECT_EQ(c.decode, Path::kFast);
  EXPECT_EQ(c.prefill, Path::kFast);
  c = SelectAttentionKernel(f16, f16, 96, Avx512(true));  // 96 / 16 lanes: not whole groups of 4
  EXPECT_EQ(c.decode, Path::kGeneric);
  c = SelectAttentionKernel(f16, f16, 128, Lanes(1));  // the scalar target
  EXPECT_EQ(c.decode, Path::kGeneric);
  EXPECT_EQ(c.prefill, Path::kGeneric);
  // q16 serves head_dim 96, int8 does not.
  c = SelectAttentionKernel(q8, q8, 96, Avx512(true));
  EXPECT_EQ(c.decode, Path::kQ16);
  // Formats no specialised path reads, and pairs without a row: generic.
  const Format a3 = Format::Affine(3, 32, DType::kF16);
  EXPECT_EQ(SelectAttentionKernel(a3, a3, 128, Avx512(true)).decode, Path::kGeneric);
  EXPECT_EQ(SelectAttentionKernel(q4, q8, 128, Avx512(true)).decode, Path::kGeneric);
  EXPECT_EQ(SelectAttentionKernel(f16, q8, 128, Avx512(true)).decode, Path::kGeneric);
  // Affine: int8 needs f16 scales; q16 and fast need one scale dtype for K and V.
  const Format a8b = Format::Affine(8, 64, DType::kBF16), a8h = Format::Affine(8, 64, DType::kF16);
  EXPECT_EQ(SelectAttentionKernel(a8b, a8b, 128, Avx512(true)).decode, Path::kQ16);
  EXPECT_EQ(SelectAttentionKernel(a8h, a8b, 128, Avx512(true)).decode, Path::kGeneric);
  // Affine groups of 16: the quantized-query paths need whole 32-value sub-blocks.
  const Format a4g16 = Format::Affine(4, 16, DType::kF16);
  EXPECT_EQ(SelectAttentionKernel(a4g16, a4g16, 128, Avx512(true)).decode, Path::kFast);
  // Rot pairs: int8 where VBMI is there too (its code unpacking), else the fast f32 decoders;
  // mixed rot pairs: generic.
  const Format r4 = Format::Rot(4, 0), r3 = Format::Rot(3, 5);
  CpuFeatures vbmi = Avx512(true);
  vbmi.vbmi = true;
  c = SelectAttentionKernel(r4, r4, 128, vbmi);
  EXPECT_EQ(c.decode, Path::kInt8);
  EXPECT_EQ(c.prefill, Path::kInt8);
  EXPECT_EQ(SelectAttentionKernel(r3, r3, 64, vbmi).decode, Path::kInt8);
  EXPECT_EQ(SelectAttentionKernel(r4, r4, 128, Avx512(true)).decode, Path::kFast);
  EXPECT_EQ(SelectAttentionKernel(r4, r3, 128, vbmi).decode, Path::kGeneric);
  // Switches.
  CpuFeatures off = Avx512(true);
  off.int8_enabled = false;
  off.q16_enabled = false;
  off.fast_enabled = false;
  c = SelectAttentionKernel(q8, q8, 128, off);
  EXPECT_EQ(c.decode, Path::kGeneric);
  EXPECT_EQ(c.prefill, Path::kGeneric);
  // No kernels for this head_dim.
  EXPECT_EQ(SelectAttentionKernel(f16, f16, 112, Avx512(true)).decode, Path::kNone);
}

TEST(SelectAttentionKernel, EveryRowOfThePairTableIsServedBySomeSpecialisedPath) {
  for (const PairRow& r : kPairTable) {
    EXPECT_NE(r.paths, 0) << static_cast<int>(r.k) << "/" << static_cast<int>(r.v);
    EXPECT_EQ(PairPaths(r.k, r.v), r.paths);
  }
}

// The generic path on the formats the fast / prefill paths take (with them switched off), on
// every target: decode and prefill rows, every head_dim it shares with them.
class GenericPathTargets : public ::testing::TestWithParam<long long> {
 protected:
  void SetUp() override {
    SetFastPathEnabled(false);
    ASSERT_TRUE(QuantForceSimdTarget(GetParam()));
  }
  void TearDown() override {
    QuantForceSimdTarget(0);
    SetFastPathEnabled(true);
  }
};

TEST_P(GenericPathTargets, PlainFormatsMatchTheReference) {
  ThreadPool pool(2);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd;
  for (const Format& f : {Format::F16(), Format::BF16(), Format::F32()}) {
    for (uint32_t d : {64u, 128u, 256u}) {
      const uint32_t kvh = 2, group = 4;
      BlockPoolOptions o;
      o.shape = KvShape{1, kvh, d};
      o.k_format = f;
      o.v_format = f;
      o.block_tokens = 16;
      o.capacity_bytes = 64ull << 20;
      auto bp = BlockPool::Create(o);
      ASSERT_TRUE(bp.ok());
      const std::vector<uint32_t> lens = {70, 19}, q_lens = {1, 19};
      std::vector<SequenceCache> rows;
      for (uint32_t len : lens) {
        SequenceCache s(*bp);
        std::vector<float> k(size_t{len} * kvh * d), v(k.size());
        for (float& x : k) x = nd(rng);
        for (float& x : v) x = nd(rng);
        ASSERT_TRUE(s.Append(0, DType::kF32, k.data(), v.data(), len).ok());
        rows.push_back(std::move(s));
      }
      auto batch = BatchCache::Merge(std::move(rows));
      ASSERT_TRUE(batch.ok());
      auto view = batch->View(0);
      ASSERT_TRUE(view.ok());
      std::vector<float> q(size_t{20} * kvh * group * d);
      for (float& x : q) x = nd(rng);
      AttentionParams p;
      p.n_heads = kvh * group;
      std::vector<double> want;
      ASSERT_TRUE(ref::Attention(*view, q.data(), q_lens, p, &want).ok());
      std::vector<float> got(q.size());
      ASSERT_TRUE(Attention(*view, q.data(), q_lens, p, got.data(), &pool).ok());
      double num = 0, den = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
      }
      EXPECT_LT(std::sqrt(num / den), 1e-5) << f.name() << " d" << d;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, GenericPathTargets, ::testing::ValuesIn(QuantAvailableSimdTargets()),
                         [](const ::testing::TestParamInfo<long long>& info) {
                           return "target_" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace kvtier::attn
