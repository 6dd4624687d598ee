// Attention kernels against the float64 reference (every format, head_dim, GQA ratio, mask,
// window, soft-cap and batch mix), against a dense left-padded batch with mlx-lm's masks, and
// clear errors for bad shapes.
#include "kvtier/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "base/dtype_io.h"
#include "base/half.h"
#include "kvtier/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/paths.h"
#include "kernels/attention_ref.h"
#include "kvtier/batch_cache.h"
#include "kvtier/quant.h"
#include "quant/test_formats.h"

namespace kvtier {
namespace {

struct Case {
  Format k = Format::F16(), v = Format::F16();
  uint32_t head_dim = 128;
  uint32_t n_kv_heads = 2;
  uint32_t group = 2;
  std::vector<uint32_t> lengths = {37};
  std::vector<uint32_t> q_lens = {1};
  uint32_t block_tokens = 16;
  uint32_t window = 0;
  // Per-layer window: the pool's layer 1 is a window layer (layer 0 global), the kernel takes
  // the window from the view (params.window 0); with drop, the rows before every query's
  // window go back to the OS first (DropOutsideWindow, as after a forward pass).
  bool view_window = false;
  bool drop = false;
  float softcap = 0;
  float scale = 0;
  float kv_scale = 1.0f;  // magnitude of K/V values
  uint64_t seed = 1;
};

// Turns the paths that quantize the query (int8, int16) off for the tests of the exact (f32)
// paths, and back on after.
void SetQuantizedQk(bool on) {
  attn::SetInt8QkEnabled(on);
  attn::SetInt16QkEnabled(on);
}
struct ExactQk {
  ExactQk() { SetQuantizedQk(false); }
  ~ExactQk() { SetQuantizedQk(true); }
};

// ||got - want|| / ||want|| (||got - want|| where want is all zero); infinite if got is not
// finite.
template <class Got, class Want>
double RelDiff(const Got& got, const Want& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    if (!std::isfinite(g)) return INFINITY;
    num += (g - w) * (g - w);
    den += w * w;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Builds the cache (2 layers; layer 1 is used), runs both, returns ||out - ref|| / ||ref||.
double RelError(const Case& c, ThreadPool* pool, DType out_dtype = DType::kF32,
                std::vector<float>* out_copy = nullptr) {
  const KvShape shape{2, c.n_kv_heads, c.head_dim};
  BlockPoolOptions o;
  o.shape = shape;
  o.k_format = c.k;
  o.v_format = c.v;
  o.block_tokens = c.block_tokens;
  o.capacity_bytes = 256ull << 20;
  if (c.view_window) o.layer_window = {0, c.window};
  auto pool_r = BlockPool::Create(o);
  EXPECT_TRUE(pool_r.ok()) << pool_r.status().ToString();
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> nd;
  std::vector<SequenceCache> rows;
  for (size_t r = 0; r < c.lengths.size(); ++r) {
    const uint32_t len = c.lengths[r];
    SequenceCache s(*pool_r);
    std::vector<float> k(size_t{len} * c.n_kv_heads * c.head_dim), v(k.size());
    for (float& x : k) x = nd(rng) * c.kv_scale;
    for (float& x : v) x = nd(rng) * c.kv_scale;
    // With drop: the context first, dropped as a forward pass leaves it, then the queries'.
    const uint32_t ctx = c.drop ? len - c.q_lens[r] : len;
    const size_t off = size_t{ctx} * c.n_kv_heads * c.head_dim;
    for (uint32_t l = 0; l < 2; ++l) EXPECT_TRUE(s.Append(l, DType::kF32, k.data(), v.data(), ctx).ok());
    if (c.drop) {
      EXPECT_GT(s.DropOutsideWindow(), 0u) << "a case too short to drop anything";
      for (uint32_t l = 0; l < 2; ++l) {
        EXPECT_TRUE(s.Append(l, DType::kF32, k.data() + off, v.data() + off, len - ctx).ok());
      }
    }
    rows.push_back(std::move(s));
  }
  auto batch = BatchCache::Merge(std::move(rows));
  EXPECT_TRUE(batch.ok());
  auto view = batch->View(1);
  EXPECT_TRUE(view.ok());
  const uint32_t n_heads = c.n_kv_heads * c.group;
  size_t total_q = 0;
  for (uint32_t n : c.q_lens) total_q += n;
  std::vector<float> q(total_q * n_heads * c.head_dim);
  for (float& x : q) x = nd(rng);
  AttentionParams p;
  p.n_heads = n_heads;
  p.window = c.view_window ? 0 : c.window;
  p.softcap = c.softcap;
  p.scale = c.scale;
  p.out_dtype = out_dtype;
  std::vector<double> want;
  Status st = ref::Attention(*view, q.data(), c.q_lens, p, &want);
  EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<uint8_t> out(q.size() * DTypeSize(out_dtype), 0xFF);
  st = Attention(*view, q.data(), c.q_lens, p, out.data(), pool);
  EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<double> got(q.size());
  for (size_t i = 0; i < q.size(); ++i) got[i] = LoadAs(out_dtype, out.data(), i);
  if (out_copy) out_copy->assign(got.begin(), got.end());
  return RelDiff(got, want);
}

std::string Describe(const Case& c) {
  std::ostringstream s;
  s << "K " << c.k.spec() << " V " << c.v.spec() << " d" << c.head_dim << " kvh" << c.n_kv_heads
    << " G" << c.group << " bt" << c.block_tokens << " rows";
  for (size_t i = 0; i < c.lengths.size(); ++i) s << " " << c.q_lens[i] << "/" << c.lengths[i];
  if (c.window) s << " window " << c.window;
  if (c.softcap > 0) s << " softcap";
  return s.str();
}

// Every SIMD target this CPU runs (AVX-512, AVX2, SSE4, ...): the fast and the tile paths.
class AttentionTargets : public ::testing::TestWithParam<long long> {
 protected:
  void SetUp() override {
    SetQuantizedQk(false);
    ASSERT_TRUE(QuantForceSimdTarget(GetParam()));
  }
  void TearDown() override {
    QuantForceSimdTarget(0);
    SetQuantizedQk(true);
  }
};

TEST_P(AttentionTargets, EveryFormatMatchesTheReference) {
  ThreadPool pool(2);
  uint64_t seed = 1;
  for (const Format& f : testing::AllFormats()) {
    Case c;
    c.k = c.v = f;
    c.head_dim = f.group > 64 ? 128 : 64;
    c.lengths = {70, 5, 33};
    c.q_lens = {1, 5, 3};
    c.seed = ++seed;
    EXPECT_LT(RelError(c, &pool), 1e-5) << Describe(c);
  }
}

TEST_P(AttentionTargets, MixedFormatsHeadDimsAndGqaRatios) {
  ThreadPool pool(2);
  const std::pair<Format, Format> pairs[] = {
      {Format::Q8_0(), Format::Q4_0()},
      {Format::F16(), Format::Affine(4, 32, DType::kBF16)},
      {Format::BF16(), Format::F32()},
      // Rotated formats (the query and the output rotated by the driver), alone and mixed.
      {Format::Rot(4, 1), Format::Rot(3, 0)},
      {Format::Q8_0(), Format::Rot(4, 0)},
      {Format::Rot(2, 9), Format::F16()},
      {Format::Rot(3, 2), Format::Rot(3, 2)},  // the rot3 / rot2 register decoders
      {Format::Rot(2, 0), Format::Rot(2, 0)},
  };
  uint64_t seed = 100;
  for (const auto& [kf, vf] : pairs) {
    for (uint32_t d : {64u, 80u, 96u, 128u, 256u}) {
      if (!kf.CheckHeadDim(d).ok() || !vf.CheckHeadDim(d).ok()) continue;
      for (uint32_t g : {1u, 3u, 4u, 8u}) {
        Case c;
        c.k = kf;
        c.v = vf;
        c.head_dim = d;
        c.group = g;
        c.n_kv_heads = g == 8 ? 1 : 2;
        c.lengths = {45, 1, 17};
        c.q_lens = {1, 1, 17};
        c.block_tokens = 8;
        c.seed = ++seed;
        EXPECT_LT(RelError(c, &pool), 1e-5) << Describe(c);
      }
    }
  }
  // Plain formats at head_dim 80 (the block formats need multiples of 32).
  Case c;
  c.k = Format::F16();
  c.v = Format::BF16();
  c.head_dim = 80;
  c.lengths = {50};
  c.q_lens = {9};
  EXPECT_LT(RelError(c, &pool), 1e-5) << Describe(c);
}

TEST_P(AttentionTargets, MasksWindowsSoftcapAndScales) {
  ThreadPool pool(2);
  uint64_t seed = 200;
  for (uint32_t window : {0u, 1u, 7u, 40u}) {
    for (float softcap : {0.0f, 5.0f}) {
      Case c;
      c.k = Format::Q8_0();
      c.v = Format::Q8_0();
      c.lengths = {90, 64, 3};
      c.q_lens = {20, 64, 2};
      c.window = window;
      c.softcap = softcap;
      c.scale = softcap > 0 ? 0.3f : 0.0f;
      c.seed = ++seed;
      EXPECT_LT(RelError(c, &pool), 1e-5) << Describe(c);
    }
  }
}

// Prefill chunks with 8..16 query vectors per item (the prefill micro-kernel on targets with
// 8 or 16 float lanes): plain formats, every fast head_dim, GQA 2 / 4 / 8, partial tiles
// (block sizes not multiples of the tile), windows, soft-cap and K/V 4x larger.
TEST_P(AttentionTargets, PrefillChunksMatchTheReference) {
  ThreadPool pool(2);
  struct Shape {
    Format k, v;
    uint32_t head_dim, group, block_tokens, window;
    float softcap, kv_scale;
  };
  const Shape shapes[] = {
      {Format::F16(), Format::F16(), 128, 4, 48, 0, 0.0f, 1.0f},
      {Format::F16(), Format::F16(), 128, 4, 32, 29, 4.0f, 1.0f},
      {Format::F16(), Format::F16(), 64, 8, 16, 0, 0.0f, 4.0f},
      {Format::F16(), Format::F16(), 256, 2, 16, 40, 0.0f, 1.0f},
      {Format::BF16(), Format::BF16(), 128, 8, 48, 13, 0.0f, 1.0f},
      {Format::BF16(), Format::BF16(), 64, 4, 32, 0, 5.0f, 4.0f},
      {Format::F32(), Format::F32(), 256, 4, 48, 0, 0.0f, 1.0f},
      {Format::Q8_0(), Format::Q4_0(), 128, 2, 16, 29, 0.0f, 1.0f},
  };
  uint64_t seed = 300;
  for (const Shape& sh : shapes) {
    Case c;
    c.k = sh.k;
    c.v = sh.v;
    c.head_dim = sh.head_dim;
    c.group = sh.group;
    c.lengths = {150, 19};
    c.q_lens = {70, 19};
    c.block_tokens = sh.block_tokens;
    c.window = sh.window;
    c.softcap = sh.softcap;
    c.kv_scale = sh.kv_scale;
    c.seed = ++seed;
    EXPECT_LT(RelError(c, &pool), 1e-5) << Describe(c);
  }
}

// Token-grouped K (chan: per channel across a block's tokens, read from each group's rows in
// place), with V per token: decode and prefill, partial groups, every head_dim it stores.
TEST_P(AttentionTargets, TokenGroupedKMatchesTheReference) {
  ThreadPool pool(2);
  const std::pair<Format, Format> pairs[] = {
      {Format::Chan(4, 64), Format::Rot(4, 0)},
      {Format::Chan(3, 64), Format::Rot(3, 0)},
      {Format::Chan(2, 32), Format::F16()},
      {Format::Chan(4, 128), Format::Q8_0()},
      {Format::ChanMix(3, 64), Format::Rot(3, 0)},
      {Format::ChanMix(2, 32), Format::F16()},
      {Format::ChanMix(3, 128), Format::Rot(2, 0)},
  };
  uint64_t seed = 300;
  for (const auto& [kf, vf] : pairs) {
    for (uint32_t d : {64u, 80u, 96u, 128u, 256u}) {
      if (!kf.CheckHeadDim(d).ok() || !vf.CheckHeadDim(d).ok()) continue;
      for (uint32_t g : {1u, 4u}) {
        Case c;
        c.k = kf;
        c.v = vf;
        c.head_dim = d;
        c.group = g;
        c.lengths = {150, 1, 64, 70};
        c.q_lens = {1, 1, 17, 70};
        c.block_tokens = kf.group == 128 ? 128 : 2 * kf.group;
        c.seed = ++seed;
        EXPECT_LT(RelError(c, &pool), 1e-5) << Describe(c);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, AttentionTargets,
                         ::testing::ValuesIn(QuantAvailableSimdTargets()),
                         [](const ::testing::TestParamInfo<long long>& info) {
                           return "target_" + std::to_string(info.param);
                         });

// A long row with one KV head splits its keys across threads; the merge matches.
// Per-layer windows from the view (a window pool's layout), with the rows before every
// window dropped: decode rows long enough to split keys, a prefill chunk, several rows.
TEST(Attention, PerLayerWindowFromTheViewMatchesTheReference) {
  ExactQk exact;
  ThreadPool pool(2);
  for (const Format& f : {Format::F16(), Format::Q8_0()}) {
    for (uint32_t window : {16u, 100u, 512u}) {
      Case c;
      c.k = c.v = f;
      c.n_kv_heads = 1;
      c.group = 4;
      c.head_dim = 256;
      c.lengths = {3000, 700, 2000};
      c.q_lens = {1, 37, 1};
      c.block_tokens = 32;
      c.window = window;
      c.view_window = true;
      c.drop = true;
      EXPECT_LT(RelError(c, &pool), 1e-5) << Describe(c) << " (view window, dropped)";
      c.drop = false;
      EXPECT_LT(RelError(c, nullptr), 1e-5) << Describe(c) << " (view window, no pool)";
    }
  }
}

TEST(Attention, SplitKeysMergeExactly) {
  ExactQk exact;
  ThreadPool pool(2);
  for (const Format& f : {Format::F16(), Format::Q4_0(), Format::Affine(8, 64, DType::kF16)}) {
    Case c;
    c.k = c.v = f;
    c.n_kv_heads = 1;
    c.group = 4;
    c.lengths = {3000};
    c.q_lens = {1};
    c.block_tokens = 32;
    EXPECT_LT(RelError(c, &pool), 1e-5) << Describe(c);
    EXPECT_LT(RelError(c, nullptr), 1e-5) << Describe(c) << " (no pool)";
  }
}

TEST(Attention, HugeLogitsStayFiniteAndOutputDtypes) {
  ExactQk exact;
  ThreadPool pool(2);
  Case c;
  c.k = Format::F32();
  c.v = Format::F32();
  c.kv_scale = 300.0f;  // scores in the thousands: softmax must not overflow
  c.lengths = {64, 10};
  c.q_lens = {8, 1};
  EXPECT_LT(RelError(c, &pool), 1e-5);
  c.kv_scale = 1.0f;
  std::vector<float> f32, f16, bf16;
  EXPECT_LT(RelError(c, &pool, DType::kF32, &f32), 1e-5);
  EXPECT_LT(RelError(c, &pool, DType::kF16, &f16), 1e-3);
  EXPECT_LT(RelError(c, &pool, DType::kBF16, &bf16), 1e-2);
  ASSERT_EQ(f16.size(), f32.size());
  for (size_t i = 0; i < f32.size(); ++i) {
    ASSERT_EQ(f16[i], F16ToF32(F32ToF16(f32[i]))) << i;
    ASSERT_EQ(bf16[i], BF16ToF32(F32ToBF16(f32[i]))) << i;
  }
}

// Seed 002's case: GQA with left-padded histories. A dense [B, kv_heads, T, D] batch with left
// padding and mlx-lm's mask (key column j of row b visible to a query at column c iff
// left_padding[b] <= j <= c) gives the same outputs as the paged kernel.
TEST(Attention, DenseLeftPaddedBatchWithMlxMasks) {
  ExactQk exact;
  const uint32_t d = 64, kvh = 2, G = 4, H = kvh * G;
  const std::vector<uint32_t> lengths = {5, 19, 12};
  const std::vector<uint32_t> q_lens = {1, 1, 1};
  BlockPoolOptions o;
  o.shape = {1, kvh, d};
  o.k_format = Format::Q4_0();
  o.v_format = Format::Q4_0();
  o.block_tokens = 4;
  o.capacity_bytes = 16 << 20;
  auto pool = *BlockPool::Create(o);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd;
  std::vector<SequenceCache> rows;
  const uint32_t T = 19;
  // Dense, left-padded, already dequantized K/V: [B][kvh][T][d].
  std::vector<double> dk(3 * kvh * T * d, 0.0), dv(dk.size(), 0.0);
  for (uint32_t b = 0; b < 3; ++b) {
    SequenceCache s(pool);
    std::vector<float> k(size_t{lengths[b]} * kvh * d), v(k.size());
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    ASSERT_TRUE(s.Append(0, DType::kF32, k.data(), v.data(), lengths[b]).ok());
    std::vector<float> kd(k.size()), vd(v.size());
    ASSERT_TRUE(s.ReadDense(0, 0, lengths[b], DType::kF32, kd.data(), vd.data()).ok());
    const uint32_t pad = T - lengths[b];
    for (uint32_t t = 0; t < lengths[b]; ++t) {
      for (uint32_t h = 0; h < kvh; ++h) {
        for (uint32_t j = 0; j < d; ++j) {
          dk[((b * kvh + h) * T + pad + t) * d + j] = kd[(t * kvh + h) * d + j];
          dv[((b * kvh + h) * T + pad + t) * d + j] = vd[(t * kvh + h) * d + j];
        }
      }
    }
    rows.push_back(std::move(s));
  }
  auto batch = BatchCache::Merge(std::move(rows));
  ASSERT_TRUE(batch.ok());
  std::vector<float> q(3 * H * d);
  for (float& x : q) x = nd(rng);
  AttentionParams p;
  p.n_heads = H;
  std::vector<float> out(q.size());
  ThreadPool tp(2);
  ASSERT_TRUE(Attention(*batch->View(0), q.data(), q_lens, p, out.data(), &tp).ok());
  for (uint32_t b = 0; b < 3; ++b) {
    EXPECT_EQ(batch->left_padding(b), T - lengths[b]);
    for (uint32_t h = 0; h < H; ++h) {
      // The query broadcasts over the GQA group (mlx-lm's [B, kvh, G, 1, T] scores).
      const uint32_t kh = h / G, c = T - 1, pad = batch->left_padding(b);
      std::vector<double> s(T, -INFINITY);
      double mx = -INFINITY;
      for (uint32_t j = pad; j <= c; ++j) {
        double dot = 0;
        for (uint32_t e = 0; e < d; ++e) dot += q[(b * H + h) * d + e] * dk[((b * kvh + kh) * T + j) * d + e];
        s[j] = dot / std::sqrt(double{d});
        mx = std::max(mx, s[j]);
      }
      double l = 0;
      for (uint32_t j = pad; j <= c; ++j) l += std::exp(s[j] - mx);
      for (uint32_t e = 0; e < d; ++e) {
        double o = 0;
        for (uint32_t j = pad; j <= c; ++j) o += std::exp(s[j] - mx) / l * dv[((b * kvh + kh) * T + j) * d + e];
        EXPECT_NEAR(out[(b * H + h) * d + e], o, 1e-5 * (1 + std::fabs(o))) << b << " " << h << " " << e;
      }
    }
  }
}

// The int8 q.k path (AVX-512 VNNI CPUs): the query is quantized (two int8 planes) and V's
// softmax weights are rounded per tile, to int16 for 8-bit V and to int8 for 4-bit V, so the
// bounds are the ones docs/kernels.md states against the float64 reference on the dequantized
// K/V: relative error < 1e-3 with 8-bit V and < 1e-2 with 4-bit V (the issue allows 1e-2 where
// the kernel quantizes the query), for every format, head_dim and GQA ratio it serves. The
// errors seen are 1.6e-5 .. 6.4e-5 with 8-bit V and up to 4.2e-3 with 4-bit V; a path that
// did not run would show ~1e-7, so the test also checks that it ran.
constexpr double kInt8Bound = 1e-3;
constexpr double kInt8Bound4BitV = 1e-2;

// Rot V (int8 weights as 4-bit V, against fixed-point levels): the weights' rounding gives the
// errors of 4-bit V, 1.0e-2 .. 1.2e-2 on the single 3,000- and 30,000-token rows where q4_0
// sees 7.6e-3 .. 9.6e-3 (its centred codes span 16 steps, the levels 255), 8e-3 on short rows;
// `perplexity --kld` shows what it costs (docs/results/kv-cache.md, 2026-11-27).
constexpr double kInt8BoundRotV = 1.5e-2;

double Int8Bound(const Format& v) {
  return v.is_rotated() ? kInt8BoundRotV : v.bits <= 4 ? kInt8Bound4BitV : kInt8Bound;
}

std::vector<std::pair<Format, Format>> Int8Pairs() {
  std::vector<std::pair<Format, Format>> v = {{Format::Q8_0(), Format::Q8_0()},
                                              {Format::Q4_0(), Format::Q4_0()},
                                              {Format::Q8_0(), Format::Q4_0()}};
  for (int bits : {8, 4}) {
    for (int group : {32, 64, 128}) {
      const Format f = Format::Affine(bits, group, DType::kF16);
      v.push_back({f, f});
    }
  }
  // Rot formats (with AVX-512 VBMI): their fixed-point levels (quant/rot.h) are within half a
  // step (1 / 270 .. 1 / 310 of the block scale) of the codebook's, which the bound takes.
  if (attn::Int8RotAvailable()) {
    for (const Format& f : {Format::Rot(4, 0), Format::Rot(3, 1), Format::Rot(2, 7)}) v.push_back({f, f});
  }
  return v;
}

TEST(AttentionInt8, EveryServedFormatHeadDimAndGqaRatio) {
  if (!attn::Int8QkAvailable()) GTEST_SKIP() << "int8 path not available (no AVX-512 VNNI, or built without it)";
  ThreadPool pool(2);
  uint64_t seed = 500;
  double worst[2] = {0, 0}, least = 1;  // [4-bit V]
  for (const auto& [kf, vf] : Int8Pairs()) {
    for (uint32_t d : {64u, 128u, 256u}) {
      if (!kf.CheckHeadDim(d).ok() || !vf.CheckHeadDim(d).ok()) continue;
      for (uint32_t g : {1u, 2u, 3u, 4u, 8u}) {
        Case c;
        c.k = kf;
        c.v = vf;
        c.head_dim = d;
        c.group = g;
        c.n_kv_heads = g == 8 ? 1 : 2;
        c.lengths = {300, 1, 77, 40};
        c.q_lens = {1, 1, 1, 6};
        c.block_tokens = 16;
        c.seed = ++seed;
        const double err = RelError(c, &pool);
        EXPECT_LT(err, Int8Bound(vf)) << Describe(c);
        worst[vf.bits <= 4] = std::max(worst[vf.bits <= 4], err);
        least = std::min(least, err);
      }
    }
  }
  EXPECT_GT(least, 1e-6) << "the int8 path did not run";
  std::printf("int8 q.k: relative error %.2e .. %.2e with 8-bit V (bound %.0e), up to %.2e "
              "with 4-bit V (bound %.0e)\n",
              least, worst[0], kInt8Bound, worst[1], kInt8Bound4BitV);
}

// Masks, windows, soft-cap and an explicit scale on two formats, then one long row split
// across threads with K/V at scale 1 and 2 (a sharper softmax), against `bound`. With
// `expect_ran`, the long rows' errors must also show the quantized query (above 1e-6).
void QuantizedQkMasksAndSplits(std::initializer_list<Format> formats, double bound, uint64_t seed,
                               bool expect_ran) {
  ThreadPool pool(2);
  for (const Format& f : formats) {
    for (uint32_t window : {0u, 1u, 7u, 40u}) {
      for (float softcap : {0.0f, 5.0f}) {
        Case c;
        c.k = c.v = f;
        c.lengths = {90, 64, 3};
        c.q_lens = {20, 1, 2};
        c.window = window;
        c.softcap = softcap;
        c.scale = softcap > 0 ? 0.3f : 0.0f;
        c.seed = ++seed;
        EXPECT_LT(RelError(c, &pool), bound) << Describe(c);
      }
    }
    for (float kv_scale : {1.0f, 2.0f}) {
      Case c;
      c.k = c.v = f;
      c.n_kv_heads = 1;
      c.group = 4;
      c.lengths = {3000};
      c.block_tokens = 32;
      c.kv_scale = kv_scale;
      c.seed = ++seed;
      const double err = RelError(c, &pool);
      EXPECT_LT(err, bound) << Describe(c);
      if (expect_ran) {
        EXPECT_GT(err, 1e-6) << Describe(c) << ": the quantized-query path did not run";
      }
      EXPECT_LT(RelError(c, nullptr), bound) << Describe(c) << " (no pool)";
    }
  }
}

TEST(AttentionInt8, MasksWindowsSoftcapSplitsAndScales) {
  if (!attn::Int8QkAvailable()) GTEST_SKIP() << "int8 path not available (no AVX-512 VNNI, or built without it)";
  QuantizedQkMasksAndSplits({Format::Q4_0(), Format::Affine(4, 64, DType::kF16)}, kInt8Bound4BitV, 700, true);
  QuantizedQkMasksAndSplits({Format::Q8_0(), Format::Affine(8, 64, DType::kF16)}, kInt8Bound, 800, true);
  if (attn::Int8RotAvailable()) {
    QuantizedQkMasksAndSplits({Format::Rot(4, 3), Format::Rot(3, 0), Format::Rot(2, 0)}, kInt8BoundRotV, 850, true);
  }
}

// The int16 q.k path (every target with 4 or more float lanes; AVX-512 VNNI CPUs take the
// int8 path for the formats both serve, so it is off here): the query is quantized to int16,
// one scale per vector, so the bound is docs/kernels.md's, relative error < 1e-3 against the
// float64 reference on the dequantized K/V, as for the int8 path. The errors seen are ~1e-5;
// a path that did not run would show ~1e-7, so the test also checks that it ran (but on the
// one-lane target, which it does not serve).
class AttentionInt16Targets : public ::testing::TestWithParam<long long> {
 protected:
  void SetUp() override {
    attn::SetInt8QkEnabled(false);
    ASSERT_TRUE(QuantForceSimdTarget(GetParam()));
  }
  void TearDown() override {
    QuantForceSimdTarget(0);
    attn::SetInt8QkEnabled(true);
  }
  bool Served() const { return GetParam() != (1LL << 62); }  // HWY_SCALAR: one lane
};

constexpr double kInt16Bound = 1e-3;

TEST_P(AttentionInt16Targets, EveryServedFormatHeadDimAndGqaRatio) {
  ThreadPool pool(2);
  std::vector<std::pair<Format, Format>> pairs = {{Format::Q8_0(), Format::Q8_0()},
                                                  {Format::Q4_0(), Format::Q4_0()},
                                                  {Format::Q8_0(), Format::Q4_0()}};
  const DType scale_dtypes[] = {DType::kF16, DType::kBF16, DType::kF32};
  for (int bits : {8, 4}) {
    for (int group : {32, 64, 128}) {
      const Format f = Format::Affine(bits, group, scale_dtypes[(bits + group / 32) % 3]);
      pairs.push_back({f, f});
    }
  }
  uint64_t seed = 900;
  double worst = 0, least = 1;
  for (const auto& [kf, vf] : pairs) {
    for (uint32_t d : {64u, 96u, 128u, 256u}) {
      if (!kf.CheckHeadDim(d).ok() || !vf.CheckHeadDim(d).ok()) continue;
      for (uint32_t g : {1u, 3u, 4u, 8u}) {
        Case c;
        c.k = kf;
        c.v = vf;
        c.head_dim = d;
        c.group = g;
        c.n_kv_heads = g == 8 ? 1 : 2;
        c.lengths = {150, 1, 40};
        c.q_lens = {1, 1, 3};
        c.block_tokens = 16;
        c.seed = ++seed;
        const double err = RelError(c, &pool);
        EXPECT_LT(err, kInt16Bound) << Describe(c);
        worst = std::max(worst, err);
        least = std::min(least, err);
      }
    }
  }
  if (Served()) {
    EXPECT_GT(least, 1e-6) << "the int16 path did not run";
  }
  std::printf("int16 q.k: relative error %.2e .. %.2e (bound %.0e)\n", least, worst, kInt16Bound);
}

TEST_P(AttentionInt16Targets, MasksWindowsSoftcapSplitsAndScales) {
  QuantizedQkMasksAndSplits({Format::Q4_0(), Format::Affine(4, 64, DType::kBF16)}, kInt16Bound, 1000, Served());
}

INSTANTIATE_TEST_SUITE_P(AllTargets, AttentionInt16Targets,
                         ::testing::ValuesIn(QuantAvailableSimdTargets()),
                         [](const ::testing::TestParamInfo<long long>& info) {
                           return "target_" + std::to_string(info.param);
                         });

TEST(Attention, BadShapesAreErrors) {
  BlockPoolOptions o;
  o.shape = {1, 2, 48};
  o.k_format = Format::F16();
  o.v_format = Format::F16();
  o.capacity_bytes = 1 << 20;
  auto pool = *BlockPool::Create(o);
  SequenceCache s(pool);
  std::vector<float> kv(4 * 2 * 48, 0.5f);
  ASSERT_TRUE(s.Append(0, DType::kF32, kv.data(), kv.data(), 4).ok());
  std::vector<SequenceCache> rows;
  rows.push_back(std::move(s));
  auto batch = BatchCache::Merge(std::move(rows));
  PagedKvView view = *batch->View(0);
  std::vector<float> q(8 * 4 * 48, 1.0f), out(q.size());
  AttentionParams p;
  p.n_heads = 4;
  const uint32_t one[] = {1};
  Status st = Attention(view, q.data(), one, p, out.data(), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("head_dim 48"), std::string::npos);
  std::vector<double> ref_out;
  EXPECT_TRUE(ref::Attention(view, q.data(), one, p, &ref_out).ok());  // the reference takes any
  const uint32_t five[] = {5};
  st = Attention(view, q.data(), five, p, out.data(), nullptr);
  EXPECT_NE(st.message().find("row 0 has 5 queries but only 4 tokens"), std::string::npos);
  p.n_heads = 3;
  st = Attention(view, q.data(), one, p, out.data(), nullptr);
  EXPECT_NE(st.message().find("n_heads 3 must be a positive multiple of the 2 KV heads"),
            std::string::npos);
  p.n_heads = 4;
  const uint32_t two_rows[] = {1, 1};
  st = Attention(view, q.data(), two_rows, p, out.data(), nullptr);
  EXPECT_NE(st.message().find("q_lens has 2 entries for a view of 1 rows"), std::string::npos);
  st = Attention(view, nullptr, one, p, out.data(), nullptr);
  EXPECT_NE(st.message().find("null query"), std::string::npos);
}

// The int8 path's own error beside the format's: one decode row (GQA 4, head_dim 128) of 300,
// 3,000 and 30,000 tokens, against the float64 reference on the dequantized K/V (the kernel's
// error) and against the same path on f32 K/V (the format's error on the output: the K/V
// codes' rounding). The kernel's error must stay within the bound, far below the format's
// (4-bit V: its int8 weights' rounding; 8-bit V: its int16 weights') and flat in the length
// (rounded per tile, nothing accumulates across tiles).
TEST(AttentionInt8, ErrorFarBelowTheFormatsOwnAndFlatInLength) {
  if (!attn::Int8QkAvailable()) {
    GTEST_SKIP() << "int8 path not available (no AVX-512 VNNI, or built without it)";
  }
  ThreadPool pool(2);
  std::vector<Format> formats = {Format::Q4_0(), Format::Affine(4, 64, DType::kF16), Format::Q8_0(),
                                 Format::Affine(8, 64, DType::kF16)};
  if (attn::Int8RotAvailable()) {
    for (int bits : {4, 3, 2}) formats.push_back(Format::Rot(bits, 0));
  }
  for (const Format& f : formats) {
    std::vector<double> errs;
    for (uint32_t len : {300u, 3000u, 30000u}) {
      Case c;
      c.k = c.v = f;
      c.n_kv_heads = 1;
      c.group = 4;
      c.lengths = {len};
      c.block_tokens = 32;
      c.seed = 900 + len;
      std::vector<float> got, exact;
      const double err = RelError(c, &pool, DType::kF32, &got);
      Case cf = c;
      cf.k = cf.v = Format::F32();
      EXPECT_LT(RelError(cf, &pool, DType::kF32, &exact), 1e-5);
      ASSERT_EQ(got.size(), exact.size());
      const double fmt_err = RelDiff(got, exact);
      EXPECT_LT(err, Int8Bound(f)) << Describe(c);
      // Rot4: its own error is the smallest of the 4-bit formats (0.11 against q4_0's 0.13).
      EXPECT_LT(err, (f.is_rotated() ? 0.15 : f.bits <= 4 ? 0.1 : 0.02) * fmt_err) << Describe(c);
      EXPECT_GT(err, 1e-6) << Describe(c) << ": the int8 path did not run";
      std::printf("int8 %-14s %5u tokens: kernel error %.2e, format error on the output %.2e\n",
                  f.spec().c_str(), len, err, fmt_err);
      errs.push_back(err);
    }
    EXPECT_LT(errs.back(), 1.5 * errs.front()) << f.spec() << ": error grows with the length";
  }
}

}  // namespace
}  // namespace kvtier
