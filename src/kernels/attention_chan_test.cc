// The chan path (attention_chan.cc, chan_qk.h): its score step against the scalar reference
// of the factored score (ChanScoresRef), and whole attention calls over chan K against the
// float64 reference on the dequantized K/V (every bit width and group, V q8_0 / q4_0 / rot,
// head_dim 64 / 128 / 256, batch 1 and 8, GQA, partial last groups, prefill, windows,
// soft-cap, key splits), with the bounds of the int8 path for the same V.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#include "kernels/attention_ref.h"
#include "kernels/chan_qk.h"
#include "kernels/dispatch.h"
#include "kvtier/attention.h"
#include "kvtier/batch_cache.h"
#include "kvtier/quant_chan.h"
#include "kvtier/thread_pool.h"

namespace kvtier {
namespace {

bool ChanPathHere(const Format& k, const Format& v, uint32_t d) {
  return attn::SelectAttentionKernel(k, v, d, attn::DetectCpuFeatures()).decode == attn::Path::kChan;
}

#if KVTIER_INT8_X86
// Scores of tokens [first, first + n) of one group (n <= 16) against one query on the SIMD step.
template <size_t kD, int kBits>
KV_VNNI void StepScores(const float* q, float scale, const uint8_t* row0, size_t ts, size_t group,
                        size_t first, size_t n, float* out) {
  auto pr = std::make_unique<attn::chan::ChanParams<kD>>();
  attn::chan::LoadChanParams<kD>(row0, ts, kBits, group, pr.get());
  auto pk = std::make_unique<attn::chan::ChanPack<kD>>();
  const float* qv[4] = {nullptr, q, nullptr, nullptr};  // query vector 1 of the pass
  attn::chan::BuildChanPack<kD, kBits>(qv, scale, *pr, pk.get());
  const uint8_t* r[16];
  for (size_t j = 0; j < 16; ++j) r[j] = row0 + (first + std::min(j, n - 1)) * ts;
  alignas(64) float s[64];
  attn::int8::TileDrip drip;
  attn::chan::ChanScoreStep16<kD, kBits, false>(r, *pk, attn::int8::L1Ahead{}, &drip, s);
  for (size_t t = 0; t < n; ++t) out[t] = s[4 * t + 1];
}

template <size_t kD, int kBits>
void CheckStep(size_t group, uint64_t seed, double* worst) {
  const Format f = Format::Chan(kBits, static_cast<int>(group));
  const size_t n_heads = 2, R = f.row_bytes(kD), ts = n_heads * R;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> k(group * n_heads * kD);
  // Channels with large offsets and spreads (as keys have), so the scales differ widely.
  std::vector<float> off(kD), spread(kD);
  for (size_t c = 0; c < kD; ++c) {
    off[c] = 4 * nd(rng);
    spread[c] = std::exp(nd(rng));
  }
  for (size_t i = 0; i < k.size(); ++i) k[i] = off[i % kD] + spread[i % kD] * nd(rng);
  const size_t n_tok = group - 5;  // a partial group
  std::vector<uint8_t> rows(group * ts);
  ASSERT_TRUE(QuantizeChanGroups(f, DType::kF32, k.data(), n_tok, n_heads, kD, rows.data()).ok());
  std::vector<float> q(kD);
  for (float& x : q) x = nd(rng);
  const float scale = 0.125f;
  for (size_t h = 0; h < n_heads; ++h) {
    const uint8_t* row0 = rows.data() + h * R;
    std::vector<double> want(n_tok);
    attn::chan::ChanScoresRef(q.data(), scale, row0, ts, kBits, group, kD, n_tok, want.data());
    for (size_t t0 = 0; t0 < n_tok; t0 += 16) {
      const size_t n = std::min<size_t>(16, n_tok - t0);
      float got[16];
      StepScores<kD, kBits>(q.data(), scale, row0, ts, group, t0, n, got);
      for (size_t i = 0; i < n; ++i) {
        const size_t t = t0 + i;
        double mag = 0;  // the size of the terms: sum |q_c * k_c| * scale
        for (size_t c = 0; c < kD; ++c) mag += std::fabs(q[c] * k[t * n_heads * kD + h * kD + c]) * scale;
        const double err = std::fabs(got[i] - want[t]) / mag;
        *worst = std::max(*worst, err);
        EXPECT_LT(err, 2e-4) << f.spec() << " d" << kD << " head " << h << " token " << t << ": got "
                             << got[i] << " want " << want[t];
      }
    }
  }
}

TEST(AttentionChan, ScoreStepMatchesTheScalarReference) {
  if (!attn::Int8RotAvailable()) GTEST_SKIP() << "needs AVX-512 VNNI and VBMI";
  double worst = 0;
  uint64_t seed = 40;
  for (size_t group : {32u, 64u, 128u}) {
    CheckStep<64, 4>(group, ++seed, &worst);
    CheckStep<128, 4>(group, ++seed, &worst);
    CheckStep<256, 4>(group, ++seed, &worst);
    CheckStep<64, 3>(group, ++seed, &worst);
    CheckStep<128, 3>(group, ++seed, &worst);
    CheckStep<256, 3>(group, ++seed, &worst);
    CheckStep<64, 2>(group, ++seed, &worst);
    CheckStep<128, 2>(group, ++seed, &worst);
    CheckStep<256, 2>(group, ++seed, &worst);
  }
  EXPECT_GT(worst, 0.0) << "scores exact: the step did not quantize w";
  std::printf("chan score step: error up to %.2e of sum |q k| (bound 2e-4)\n", worst);
}
#endif  // KVTIER_INT8_X86

struct Case {
  Format k, v;
  uint32_t head_dim = 128;
  uint32_t n_kv_heads = 2;
  uint32_t group = 4;
  std::vector<uint32_t> lengths;
  std::vector<uint32_t> q_lens;
  uint32_t block_tokens = 64;
  uint32_t window = 0;
  float softcap = 0;
  float scale = 0;
  uint64_t seed = 1;
};

// Builds the cache (keys with per-channel offsets), runs the kernel and the float64 reference,
// returns ||out - ref|| / ||ref||.
double RelError(const Case& c, ThreadPool* pool) {
  BlockPoolOptions o;
  o.shape = KvShape{1, c.n_kv_heads, c.head_dim};
  o.k_format = c.k;
  o.v_format = c.v;
  o.block_tokens = c.block_tokens;
  o.capacity_bytes = 256ull << 20;
  auto pool_r = BlockPool::Create(o);
  EXPECT_TRUE(pool_r.ok()) << pool_r.status().ToString();
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> nd;
  std::vector<float> off(size_t{c.n_kv_heads} * c.head_dim);
  for (float& x : off) x = 2 * nd(rng);
  std::vector<SequenceCache> rows;
  for (uint32_t len : c.lengths) {
    SequenceCache s(*pool_r);
    std::vector<float> k(size_t{len} * off.size()), v(k.size());
    for (size_t i = 0; i < k.size(); ++i) k[i] = off[i % off.size()] + nd(rng);
    for (float& x : v) x = nd(rng);
    // Appended in pieces, so that groups are written partial first and completed later.
    for (uint32_t t = 0; t < len;) {
      const uint32_t n = std::min<uint32_t>(len - t, 1 + static_cast<uint32_t>(rng() % 50));
      EXPECT_TRUE(s.Append(0, DType::kF32, k.data() + size_t{t} * off.size(), v.data() + size_t{t} * off.size(), n).ok());
      t += n;
    }
    rows.push_back(std::move(s));
  }
  auto batch = BatchCache::Merge(std::move(rows));
  EXPECT_TRUE(batch.ok());
  auto view = batch->View(0);
  EXPECT_TRUE(view.ok());
  const uint32_t n_heads = c.n_kv_heads * c.group;
  size_t total_q = 0;
  for (uint32_t n : c.q_lens) total_q += n;
  std::vector<float> q(total_q * n_heads * c.head_dim);
  for (float& x : q) x = nd(rng);
  AttentionParams p;
  p.n_heads = n_heads;
  p.window = c.window;
  p.softcap = c.softcap;
  p.scale = c.scale;
  std::vector<double> want;
  Status st = ref::Attention(*view, q.data(), c.q_lens, p, &want);
  EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<float> got(q.size(), NAN);
  st = Attention(*view, q.data(), c.q_lens, p, got.data(), pool);
  EXPECT_TRUE(st.ok()) << st.ToString();
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

std::string Describe(const Case& c) {
  std::ostringstream s;
  s << "K " << c.k.spec() << " V " << c.v.spec() << " d" << c.head_dim << " G" << c.group << " rows";
  for (size_t i = 0; i < c.lengths.size(); ++i) s << " " << c.q_lens[i] << "/" << c.lengths[i];
  if (c.window) s << " window " << c.window;
  if (c.softcap > 0) s << " softcap";
  return s.str();
}

// The int8 path's bounds for the same V (attention_test.cc): 8-bit V 1e-3, q4_0 1e-2, rot V
// 1.5e-2 (V's softmax weights rounded to int8 / int16 per tile).
double Bound(const Format& v) { return v.is_rotated() ? 1.5e-2 : v.bits <= 4 ? 1e-2 : 1e-3; }

TEST(AttentionChan, EveryServedPairHeadDimBatchAndGqaRatio) {
  if (!ChanPathHere(Format::Chan(4, 64), Format::Q8_0(), 128)) GTEST_SKIP() << "chan path not available";
  ThreadPool pool(2);
  uint64_t seed = 900;
  double least = 1, worst = 0;
  int ran = 0;
  const std::pair<Format, Format> pairs[] = {
      {Format::Chan(4, 64), Format::Rot(4, 0)}, {Format::Chan(4, 32), Format::Q8_0()},
      {Format::Chan(4, 128), Format::Q4_0()},   {Format::Chan(3, 64), Format::Rot(3, 0)},
      {Format::Chan(2, 32), Format::Rot(2, 5)}, {Format::Chan(3, 128), Format::Q8_0()},
      {Format::Chan(2, 64), Format::Rot(4, 1)},
  };
  for (const auto& [kf, vf] : pairs) {
    for (uint32_t d : {64u, 128u, 256u}) {
      if (!ChanPathHere(kf, vf, d)) continue;  // 3- / 2-bit K and rot V need VBMI
      for (uint32_t g : {1u, 4u, 8u}) {
        for (bool batch8 : {false, true}) {
          Case c;
          c.k = kf;
          c.v = vf;
          c.head_dim = d;
          c.group = g;
          c.n_kv_heads = g == 8 ? 1 : 2;
          c.block_tokens = kf.group == 128 ? 128 : 2 * kf.group;
          if (batch8) {  // 8 decode rows, partial last groups, one of a single token
            c.lengths = {300, 1, 77, 64, 129, 200, 31, 65};
            c.q_lens = {1, 1, 1, 1, 1, 1, 1, 1};
          } else {  // one decode row and prefill rows (a whole chunk, a partial one)
            c.lengths = {450, 70, 90};
            c.q_lens = {1, 70, 20};
          }
          c.seed = ++seed;
          const double err = RelError(c, &pool);
          EXPECT_LT(err, Bound(vf)) << Describe(c);
          least = std::min(least, err);
          worst = std::max(worst, err);
          ++ran;
        }
      }
    }
  }
  EXPECT_GT(ran, 0);
  EXPECT_GT(least, 1e-7) << "exact to f32: the chan path did not run";
  std::printf("chan path: %d cases, relative error %.2e .. %.2e\n", ran, least, worst);
}

TEST(AttentionChan, MasksWindowsSoftcapSplitsAndScales) {
  const Format kf = Format::Chan(4, 64), vf = Format::Q8_0();
  if (!ChanPathHere(kf, vf, 128)) GTEST_SKIP() << "chan path not available";
  ThreadPool pool(2);
  uint64_t seed = 1200;
  for (uint32_t window : {0u, 1u, 7u, 40u, 100u}) {
    for (float softcap : {0.0f, 5.0f}) {
      Case c;
      c.k = kf;
      c.v = vf;
      c.lengths = {190, 64, 3};
      c.q_lens = {20, 1, 2};
      c.window = window;
      c.softcap = softcap;
      c.scale = softcap > 0 ? 0.3f : 0.0f;
      c.seed = ++seed;
      EXPECT_LT(RelError(c, &pool), Bound(vf)) << Describe(c);
    }
  }
  // One long row: its keys split across threads, merged; with and without a pool.
  Case c;
  c.k = kf;
  c.v = vf;
  c.n_kv_heads = 1;
  c.group = 4;
  c.lengths = {5000};
  c.q_lens = {1};
  c.seed = ++seed;
  EXPECT_LT(RelError(c, &pool), Bound(vf)) << Describe(c);
  EXPECT_LT(RelError(c, nullptr), Bound(vf)) << Describe(c) << " (no pool)";
}

// Off switch: with the int8 path turned off, chan pairs go back to the generic path.
TEST(AttentionChan, FollowsTheInt8Switch) {
  attn::SetInt8QkEnabled(false);
  const attn::KernelChoice c =
      attn::SelectAttentionKernel(Format::Chan(4, 64), Format::Rot(4, 0), 128, attn::DetectCpuFeatures());
  attn::SetInt8QkEnabled(true);
  EXPECT_EQ(c.decode, attn::Path::kGeneric);
  attn::CpuFeatures cpu;
  cpu.float_lanes = 16;
  cpu.x86_avx3 = cpu.vnni = true;
  cpu.vbmi = false;
  // Without VBMI: 4-bit K with q formats only.
  EXPECT_EQ(attn::ChanPathServes(Format::Chan(4, 64), Format::Q4_0(), 128, cpu), KVTIER_INT8_X86 != 0);
  EXPECT_FALSE(attn::ChanPathServes(Format::Chan(4, 64), Format::Rot(4, 0), 128, cpu));
  EXPECT_FALSE(attn::ChanPathServes(Format::Chan(3, 64), Format::Q4_0(), 128, cpu));
  EXPECT_FALSE(attn::ChanPathServes(Format::Chan(4, 64), Format::Q4_0(), 96, cpu));
  EXPECT_FALSE(attn::ChanPathServes(Format::Q4_0(), Format::Q4_0(), 128, cpu));
}

}  // namespace
}  // namespace kvtier
