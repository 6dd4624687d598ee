// The CUDA backend against the CPU: quantize-on-append writes the CPU reference quantizer's
// bytes into the same block layout (every byte of the pool compared), and decode attention
// over the device paged view matches the float64 reference (src/kernels/attention_ref) within
// the CPU kernels' bound for their exact paths (relative error < 1e-5), for every format,
// head_dim 64/128/256, GQA ratios 1-8, ragged rows, window, soft-cap and split-K merges.
// Every test skips on a machine without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "cuda/cuda_kv.h"
#include "kernels/attention_ref.h"
#include "kvtier/quant.h"
#include "quant/blocks.h"

namespace kvtier::cuda {
namespace {

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!DeviceAvailable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  }
};

template <class T>
DeviceBuffer ToDevice(const std::vector<T>& v) {
  auto b = DeviceBuffer::Allocate(std::max<size_t>(1, v.size() * sizeof(T)));
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  if (!v.empty()) {
    EXPECT_TRUE(b->CopyFromHost(v.data(), v.size() * sizeof(T)).ok());
  }
  return std::move(*b);
}

// Values of src_dtype from floats (round to nearest even, as the CPU stores them).
std::vector<uint8_t> Encode(const std::vector<float>& x, DType t) {
  std::vector<uint8_t> out(x.size() * DTypeSize(t));
  for (size_t i = 0; i < x.size(); ++i) StoreAs(t, out.data(), i, x[i]);
  return out;
}

// K or V values of n tokens x heads x head_dim, with hard cases among ordinary ones: an
// all-zero token, NaN and Inf, ties of the largest magnitude of both signs, f16 subnormals,
// values past f16's range, and a wide spread of scales.
std::vector<float> TestValues(size_t n_tokens, size_t row, std::mt19937_64* rng) {
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ex(-8, 8);
  std::vector<float> x(n_tokens * row);
  for (size_t t = 0; t < n_tokens; ++t) {
    float* p = x.data() + t * row;
    const float scale = std::exp2(ex(*rng));
    for (size_t i = 0; i < row; ++i) p[i] = nd(*rng) * scale;
    switch (t) {
      case 0: std::fill(p, p + row, 0.0f); break;
      case 1:
        p[3] = std::numeric_limits<float>::quiet_NaN();
        p[40] = std::numeric_limits<float>::infinity();
        p[50] = -std::numeric_limits<float>::infinity();
        break;
      case 2:
        for (size_t i = 0; i < row; ++i) p[i] = (i % 7 == 3) ? 2.0f : ((i % 7 == 5) ? -2.0f : 0.5f);
        break;
      case 3:
        for (size_t i = 0; i < row; ++i) p[i] = nd(*rng) * 1e-6f;
        break;
      case 4:
        for (size_t i = 0; i < row; ++i) p[i] = nd(*rng) * 1e5f;
        break;
      case 5:
        for (size_t i = 0; i < row; ++i) p[i] = (i % 32 == 31) ? -3.0f : ((i % 32 == 0) ? 3.0f : 1.0f);
        break;
      default: break;
    }
  }
  return x;
}

TEST_F(Cuda, AppendWritesTheCpuQuantizersBytes) {
  std::mt19937_64 rng(7);
  int checked = 0;
  // Rotated rows too (rot.cuh): 4, 3 and 2 bits, seeds 0 and 7, head_dim 96 = [64, 32].
  for (const Format& f : {Format::F16(), Format::BF16(), Format::Q8_0(), Format::Q4_0(),
                          Format::F32(), Format::Rot(4, 0), Format::Rot(4, 7), Format::Rot(3, 0),
                          Format::Rot(2, 0)}) {
    for (uint32_t hd : {64u, 96u, 128u, 256u}) {
      for (DType src : {DType::kF32, DType::kF16, DType::kBF16}) {
        const KvShape shape{2, 3, hd};
        const uint32_t bt = 16, n_tokens = 50, n_blocks = 8;
        auto pool_r = DevicePool::Create(shape, f, f, bt, n_blocks);
        ASSERT_TRUE(pool_r.ok()) << pool_r.status().ToString();
        DevicePool& pool = **pool_r;
        const KvBlockLayout& l = pool.layout();
        // Same geometry as the CPU pool.
        auto cpu = KvBlockLayout::Make(shape, f, f, bt);
        ASSERT_TRUE(cpu.ok());
        ASSERT_EQ(cpu->block_stride, l.block_stride);
        ASSERT_EQ(cpu->k_region_bytes, l.k_region_bytes);
        std::vector<int> perm(n_blocks);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        const size_t row = shape.n_kv_heads * hd;
        const std::vector<float> k = TestValues(n_tokens, row, &rng);
        const std::vector<float> v = TestValues(n_tokens, row, &rng);
        const std::vector<uint8_t> ke = Encode(k, src), ve = Encode(v, src);
        std::vector<int64_t> slots(n_tokens);
        std::vector<uint8_t> want(pool.bytes(), 0);
        const size_t esz = DTypeSize(src);
        for (uint32_t t = 0; t < n_tokens; ++t) {
          const int64_t block = perm[t / bt];
          const uint32_t slot = t % bt;
          slots[t] = block * bt + slot;
          for (uint32_t h = 0; h < shape.n_kv_heads; ++h) {
            uint8_t* kd = want.data() + block * l.block_stride + l.k_offset(1) +
                          slot * l.k_token_stride + h * l.k_row_bytes;
            uint8_t* vd = want.data() + block * l.block_stride + l.v_offset(1) +
                          slot * l.v_token_stride + h * l.v_row_bytes;
            ASSERT_TRUE(QuantizeRowsRef(f, src, ke.data() + (t * row + h * hd) * esz, 1, hd, kd).ok());
            ASSERT_TRUE(QuantizeRowsRef(f, src, ve.data() + (t * row + h * hd) * esz, 1, hd, vd).ok());
          }
        }
        DeviceBuffer dk = ToDevice(ke), dv = ToDevice(ve), ds = ToDevice(slots);
        Status st = AppendKv(pool, 1, src, dk.data(), dv.data(), ds.as<int64_t>(), n_tokens);
        ASSERT_TRUE(st.ok()) << st.ToString();
        ASSERT_TRUE(Synchronize().ok());
        std::vector<uint8_t> got(pool.bytes());
        for (uint32_t b = 0; b < n_blocks; ++b) {
          ASSERT_TRUE(pool.CopyBlockToHost(static_cast<BlockId>(b), got.data() + b * l.block_stride).ok());
        }
        size_t diff = 0;
        while (diff < got.size() && got[diff] == want[diff]) ++diff;
        EXPECT_EQ(diff, got.size()) << f.spec() << " d" << hd << " from " << DTypeName(src)
                                    << ": first differing byte at offset " << diff << " (got "
                                    << int(got[diff]) << ", want " << int(want[diff]) << ")";
        ++checked;
      }
    }
  }
  std::printf("append: %d format x head_dim x source dtype cases byte-identical to the CPU\n", checked);
}

struct Case {
  Format f = Format::F16();
  uint32_t head_dim = 128;
  uint32_t n_kv_heads = 2;
  uint32_t group = 2;
  std::vector<uint32_t> lengths = {37};
  uint32_t block_tokens = 16;
  uint32_t window = 0;
  float softcap = 0;
  float scale = 0;
  uint32_t n_splits = 0;  // 0 = the kernel's choice
  bool exact = false;     // the f32 kernel instead of the tensor-core one
  bool per_head = false;  // the per-KV-head tensor-core kernel, not the all-heads one
  uint32_t hpc = 0;       // the all-heads kernel's KV heads per thread block (0: chosen)
  bool separate_merge = false;
  uint32_t wide_variant = 1;  // DecodeOptions::wide_variant
  int calls = 1;          // calls with the same workspace (the last one is checked)
  uint64_t seed = 1;
};

std::string Describe(const Case& c) {
  std::ostringstream s;
  s << c.f.spec() << " d" << c.head_dim << " kvh" << c.n_kv_heads << " G" << c.group << " bt"
    << c.block_tokens << " splits " << c.n_splits << (c.exact ? " exact" : (c.per_head ? " mma per-head" : " mma")) << " rows";
  if (c.hpc) s << " x" << c.hpc;
  if (c.separate_merge) s << " separate-merge";
  if (c.wide_variant == 0) s << " variant 0";
  if (c.calls > 1) s << " calls " << c.calls;
  for (uint32_t n : c.lengths) s << " " << n;
  if (c.window) s << " window " << c.window;
  if (c.softcap > 0) s << " softcap";
  return s.str();
}

double RelError(const Case& c) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> nd;
  const KvShape shape{2, c.n_kv_heads, c.head_dim};
  uint32_t n_blocks = 0;
  for (uint32_t len : c.lengths) n_blocks += (len + c.block_tokens - 1) / c.block_tokens;
  n_blocks += 3;
  auto pool_r = DevicePool::Create(shape, c.f, c.f, c.block_tokens, n_blocks);
  EXPECT_TRUE(pool_r.ok()) << pool_r.status().ToString();
  if (!pool_r.ok()) return INFINITY;
  DevicePool& pool = **pool_r;
  std::vector<int> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const size_t row = c.n_kv_heads * c.head_dim;
  std::vector<std::vector<BlockId>> tables;
  std::vector<float> k, v;
  std::vector<int64_t> slots;
  size_t next = 0;
  for (uint32_t len : c.lengths) {
    std::vector<BlockId> table;
    for (uint32_t t = 0; t < len; t += c.block_tokens) table.push_back(perm[next++]);
    for (uint32_t t = 0; t < len; ++t) {
      slots.push_back(static_cast<int64_t>(table[t / c.block_tokens]) * c.block_tokens +
                      t % c.block_tokens);
    }
    tables.push_back(table);
  }
  k.resize(slots.size() * row);
  v.resize(k.size());
  for (float& x : k) x = nd(rng);
  for (float& x : v) x = nd(rng);
  {
    DeviceBuffer dk = ToDevice(k), dv = ToDevice(v), ds = ToDevice(slots);
    Status st = AppendKv(pool, 1, DType::kF32, dk.data(), dv.data(), ds.as<int64_t>(),
                         static_cast<uint32_t>(slots.size()));
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(Synchronize().ok());
  }
  // Device rows: block tables and PagedKvRow in device memory.
  std::vector<DeviceBuffer> dtables;
  std::vector<PagedKvRow> drows, hrows;
  uint32_t max_len = 0;
  for (size_t r = 0; r < c.lengths.size(); ++r) {
    dtables.push_back(ToDevice(tables[r]));
    PagedKvRow pr;
    pr.block_table = dtables.back().as<const BlockId>();
    pr.n_blocks = static_cast<uint32_t>(tables[r].size());
    pr.length = c.lengths[r];
    drows.push_back(pr);
    pr.block_table = tables[r].data();
    hrows.push_back(pr);
    max_len = std::max(max_len, c.lengths[r]);
  }
  DeviceBuffer drows_buf = ToDevice(drows);
  const uint32_t n_rows = static_cast<uint32_t>(c.lengths.size());
  const uint32_t n_heads = c.n_kv_heads * c.group;
  std::vector<float> q(static_cast<size_t>(n_rows) * n_heads * c.head_dim);
  for (float& x : q) x = nd(rng);
  DeviceBuffer dq = ToDevice(q);
  auto dout = DeviceBuffer::Allocate(q.size() * sizeof(float));
  EXPECT_TRUE(dout.ok());
  AttentionParams p;
  p.n_heads = n_heads;
  p.window = c.window;
  p.softcap = c.softcap;
  p.scale = c.scale;
  DecodeOptions o;
  o.max_length = max_len;
  o.n_splits = c.n_splits;
  o.exact = c.exact;
  o.per_head = c.per_head;
  o.all_heads = !c.per_head;
  o.heads_per_block = c.hpc;
  o.separate_merge = c.separate_merge;
  o.wide_variant = c.wide_variant;
  DecodeWorkspace ws;
  const PagedKvView dview = pool.View(1, drows_buf.as<const PagedKvRow>(), n_rows);
  Status st;
  for (int call = 0; call < c.calls; ++call) {
    EXPECT_TRUE(dout->Fill(0xFF).ok());  // NaN: every output must be written, every call
    st = DecodeAttention(dview, dq.as<const float>(), p, dout->as<float>(), o, &ws);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(Synchronize().ok());
  }
  std::vector<float> got(q.size());
  EXPECT_TRUE(dout->CopyToHost(got.data(), got.size() * sizeof(float)).ok());
  // The reference reads a host copy of the pool through the same offsets.
  std::vector<uint8_t> host(pool.bytes());
  for (uint32_t b = 0; b < n_blocks; ++b) {
    EXPECT_TRUE(pool.CopyBlockToHost(static_cast<BlockId>(b),
                                     host.data() + b * pool.layout().block_stride).ok());
  }
  PagedKvView hview = dview;
  hview.k_base = host.data() + pool.layout().k_offset(1);
  hview.v_base = host.data() + pool.layout().v_offset(1);
  hview.rows = hrows.data();
  std::vector<uint32_t> q_lens(n_rows, 1);
  std::vector<double> want;
  st = ref::Attention(hview, q.data(), q_lens, p, &want);
  EXPECT_TRUE(st.ok()) << st.ToString();
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The CPU kernels' bounds (src/kernels/attention_test.cc): 1e-5 for their exact f32 paths,
// 1e-3 for the paths that round an operand (the int8 / int16 q.k paths with 8-bit V). The f32
// kernel and the tensor-core kernel on f16 / bf16 rows (hi + lo operands) are held to 1e-5; the
// tensor-core kernel on q8_0 / q4_0 rounds each V value once to f16, so 1e-3.
constexpr double kExactBound = 1e-5;
constexpr double kRoundedBound = 1e-3;
double Bound(const Case& c) { return c.exact || c.f.is_plain() ? kExactBound : kRoundedBound; }

TEST_F(Cuda, DecodeEveryFormatHeadDimAndGqaRatioMatchesTheReference) {
  uint64_t seed = 100;
  double worst[2][2] = {{0, 0}, {0, 0}};  // [exact][quantized]
  int n = 0;
  for (int kernel : {0, 1, 2}) {  // all-heads where it applies, per-head, f32
    const bool exact = kernel == 2;
    for (const Format& f : {Format::F16(), Format::BF16(), Format::Q8_0(), Format::Q4_0()}) {
      for (uint32_t hd : {64u, 128u, 256u}) {
        for (uint32_t g : {1u, 2u, 3u, 4u, 8u}) {
          for (uint32_t splits : {0u, 1u, 7u}) {
            Case c;
            c.f = f;
            c.exact = exact;
            c.per_head = kernel == 1;
            c.head_dim = hd;
            c.group = g;
            c.n_kv_heads = g == 8 ? 1 : 2;
            c.lengths = {300, 1, 77, 40, 1000};
            c.n_splits = splits;
            c.seed = ++seed;
            const double err = RelError(c);
            EXPECT_LT(err, Bound(c)) << Describe(c);
            double& w = worst[exact][f.is_quantized()];
            w = std::max(w, err);
            ++n;
          }
        }
      }
    }
  }
  std::printf("decode: %d cases; worst relative error: tensor cores %.2e (f16/bf16, bound %.0e), "
              "%.2e (q8_0/q4_0, bound %.0e); f32 kernel %.2e / %.2e (bound %.0e)\n",
              n, worst[0][0], kExactBound, worst[0][1], kRoundedBound, worst[1][0], worst[1][1],
              kExactBound);
}

// Issue 35's shape (8 KV heads, 4 query heads each): the all-heads kernel takes all 8 KV heads
// in one thread block; 4 KV heads per block with 4 KV heads; both kernels against the reference.
// rot4 rows (rotated 4-bit codebook): appended on the GPU, read in place by the f32 kernel in
// the rotated basis (q rotated before, out rotated back after), against the float64 reference
// over the CPU dequantizer (which rotates each row back): the exact bound.
TEST_F(Cuda, DecodeRot4ExactKernelMatchesTheReference) {
  uint64_t seed = 900;
  double worst = 0;
  int n = 0;
  for (const Format& f : {Format::Rot(4, 0), Format::Rot(4, 7)}) {
    for (uint32_t hd : {64u, 128u, 256u}) {
      for (uint32_t g : {1u, 2u, 3u, 4u, 8u}) {
        for (uint32_t splits : {0u, 1u, 7u}) {
          Case c;
          c.f = f;
          c.head_dim = hd;
          c.group = g;
          c.n_kv_heads = g == 8 ? 1 : 2;
          c.lengths = {300, 1, 77, 40, 1000};
          c.n_splits = splits;
          c.exact = true;
          c.seed = ++seed;
          const double err = RelError(c);
          EXPECT_LT(err, kExactBound) << Describe(c);
          worst = std::max(worst, err);
          ++n;
        }
      }
    }
  }
  Case c;
  c.f = Format::Rot(4, 0);
  c.lengths = {3000, 500};
  c.window = 700;
  c.softcap = 30;
  c.scale = 0.2f;
  c.block_tokens = 1;
  c.exact = true;
  c.seed = 77;
  const double err = RelError(c);
  EXPECT_LT(err, kExactBound) << Describe(c);
  worst = std::max(worst, err);
  std::printf("decode rot4: %d cases, worst relative error %.2e (bound %.0e)\n", n + 1, worst,
              kExactBound);
}

// rot4 on the all-heads tensor-core kernel: K codes as int8 levels plus their rounding
// residual (round(126 level) + r / 256) against Q's two int8 planes, V as f16 levels with the
// block scales folded into P: the rounded-operand bound of q8_0 / q4_0 (1e-3). (With the 8-bit
// levels alone, KVTIER_CUDA_ROT_K16=0, the soft-capped case below read 1.4e-2: that build is
// for speed comparisons only.) 8 / 4 / 2 KV heads (2, 4, 8 per thread block), head_dim 64 /
// 128 / 256, splits chosen / 1 / 5 / 200 (the fused merge and the separate one), a window with
// a soft-cap on 1-token blocks, three calls per workspace.
constexpr double kRot4FastBound = kRoundedBound;

TEST_F(Cuda, DecodeRot4AllHeadsKernelMatchesTheReference) {
  uint64_t seed = 9100;
  double worst = 0, least = 1;
  int n = 0;
  for (const Format& f : {Format::Rot(4, 0), Format::Rot(4, 7)}) {
    for (uint32_t hd : {64u, 128u, 256u}) {
      for (uint32_t kvh : {8u, 4u, 2u}) {
        for (uint32_t hpc : {0u, 2u, 8u}) {
          for (uint32_t splits : {0u, 1u, 5u, 200u}) {
            if (hpc > kvh) continue;
            Case c;
            c.f = f;
            c.head_dim = hd;
            c.n_kv_heads = kvh;
            c.group = kvh == 8 ? 4 : kvh == 4 ? 3 : 2;
            c.block_tokens = kvh == 8 ? 32 : 16;
            c.lengths = splits == 200 ? std::vector<uint32_t>{5000, 1, 300} :
                                        std::vector<uint32_t>{300, 1, 77, 40, 1000, 17};
            c.n_splits = splits;
            c.hpc = hpc;
            c.calls = splits == 200 ? 3 : 1;
            c.seed = ++seed;
            DecodeOptions o;
            o.all_heads = true;
            o.heads_per_block = hpc;
            const std::string kernel = ChooseKernelName(
                static_cast<uint32_t>(c.lengths.size()), kvh, 5000, f, hd, o, c.group);
            const double err = RelError(c);
            EXPECT_LT(err, kRot4FastBound) << Describe(c) << " (" << kernel << ")";
            if (kernel.rfind("all-heads", 0) == 0) {
              worst = std::max(worst, err);
              least = std::min(least, err);
              ++n;
            }
          }
        }
      }
    }
  }
  Case c;
  c.f = Format::Rot(4, 0);
  c.n_kv_heads = 4;
  c.group = 2;
  c.lengths = {3000, 500};
  c.window = 700;
  c.softcap = 30;
  c.scale = 0.2f;
  c.block_tokens = 1;
  c.seed = 78;
  const double err = RelError(c);
  EXPECT_LT(err, kRot4FastBound) << Describe(c);
  worst = std::max(worst, err);
  EXPECT_GT(n, 100) << "the all-heads kernel served too few rot4 cases";
  // A kernel that read the rows exactly would show ~1e-7: the int8 levels must show.
  EXPECT_GT(least, 1e-6) << "the rot4 all-heads kernel did not run";
  std::printf("decode rot4, all-heads kernel: %d cases, relative error %.2e .. %.2e (bound %.0e)\n",
              n + 1, least, worst, kRot4FastBound);
}

TEST_F(Cuda, DecodeAllHeadsKernelMatchesTheReference) {
  uint64_t seed = 5000;
  double worst[2] = {0, 0};  // [quantized]
  int n = 0;
  for (const Format& f : {Format::F16(), Format::BF16(), Format::Q8_0(), Format::Q4_0()}) {
    for (uint32_t hd : {64u, 128u, 256u}) {
      for (uint32_t kvh : {8u, 4u}) {
        for (uint32_t splits : {0u, 1u, 5u}) {
          for (bool per_head : {false, true}) {
            Case c;
            c.f = f;
            c.head_dim = hd;
            c.n_kv_heads = kvh;
            c.group = kvh == 8 ? 4 : 3;
            c.block_tokens = kvh == 8 ? 32 : 16;
            c.lengths = {300, 1, 77, 40, 1000, 17};
            c.n_splits = splits;
            c.per_head = per_head;
            c.seed = ++seed;
            const double err = RelError(c);
            EXPECT_LT(err, Bound(c)) << Describe(c);
            worst[f.is_quantized()] = std::max(worst[f.is_quantized()], err);
            ++n;
          }
        }
      }
    }
  }
  std::printf("decode, 8 and 4 KV heads, both tensor-core kernels: %d cases; worst %.2e (f16/bf16), "
              "%.2e (q8_0/q4_0)\n", n, worst[0], worst[1]);
}

// The fused split merge (the last thread block of a row's KV-head group merges) against the
// reference and against the separate merge kernel: 2, 4 and 8 KV heads per thread block, up to
// 200 splits (rows shorter than that leave splits empty: -inf log-sum-exp), a window, three
// calls on one workspace (the tickets must return to zero: each call's output buffer is set to
// NaN first and the third call's output is checked).
TEST_F(Cuda, DecodeFusedSplitMergeMatchesTheReferenceOverRepeatedCalls) {
  uint64_t seed = 7000;
  double worst[2] = {0, 0};  // [quantized]
  int n = 0;
  for (const Format& f : {Format::BF16(), Format::F16(), Format::Q8_0(), Format::Q4_0()}) {
    for (uint32_t hpc : {0u, 2u, 4u, 8u}) {
      for (uint32_t splits : {0u, 64u, 200u, 201u}) {
        Case c;
        c.f = f;
        c.head_dim = hpc == 4 ? 64 : 128;
        c.n_kv_heads = 8;
        c.group = 4;
        c.block_tokens = 32;
        c.lengths = {5000, 1, 300, 2048};
        c.window = splits == 64 ? 3000 : 0;
        c.n_splits = splits == 201 ? 200 : splits;
        c.hpc = hpc;
        c.separate_merge = splits == 201;
        c.wide_variant = splits == 64 ? 0 : 1;  // q4_0 x4: 3 stages (fused) or 2
        c.calls = 3;
        c.seed = ++seed;
        const double err = RelError(c);
        EXPECT_LT(err, Bound(c)) << Describe(c);
        worst[f.is_quantized()] = std::max(worst[f.is_quantized()], err);
        ++n;
      }
    }
  }
  std::printf("decode, fused and separate split merges, 3 calls each: %d cases; worst %.2e "
              "(f16/bf16), %.2e (q8_0/q4_0)\n", n, worst[0], worst[1]);
}

TEST_F(Cuda, DecodeWindowSoftcapBlockSizesAndLongRows) {
  uint64_t seed = 900;
  double worst = 0;
  int n = 0;
  for (const Format& f : {Format::F16(), Format::BF16(), Format::Q8_0(), Format::Q4_0()}) {
    std::vector<Case> cases;
    Case c;
    c.f = f;
    c.lengths = {4099, 33, 512, 1};
    c.window = 700;
    c.softcap = 30.0f;
    c.scale = 0.2f;
    cases.push_back(c);
    c = Case();
    c.f = f;
    c.block_tokens = 1;
    c.lengths = {70, 5};
    cases.push_back(c);
    c.block_tokens = 32;
    c.lengths = {32768, 100};
    c.n_kv_heads = 2;
    c.group = 4;
    cases.push_back(c);
    c.block_tokens = 256;
    c.lengths = {5000, 3};
    c.n_splits = 64;
    cases.push_back(c);
    for (int kernel : {0, 1, 2}) {  // all-heads where it applies, per-head, f32
      for (Case k : cases) {
        k.seed = ++seed;
        k.exact = kernel == 2;
        k.per_head = kernel == 1;
        const double err = RelError(k);
        EXPECT_LT(err, Bound(k)) << Describe(k);
        worst = std::max(worst, err);
        ++n;
      }
    }
  }
  std::printf("decode (window, soft-cap, block sizes, long rows): %d cases, worst %.2e\n", n, worst);
}

TEST_F(Cuda, DecodeRefusesWhatItDoesNotServe) {
  auto pool = DevicePool::Create(KvShape{1, 2, 128}, Format::Q8_0(), Format::Q4_0(), 16, 4);
  ASSERT_TRUE(pool.ok());
  PagedKvRow row;
  PagedKvView view = (*pool)->View(0, &row, 1);
  AttentionParams p;
  p.n_heads = 4;
  DecodeWorkspace ws;
  float dummy = 0;
  Status st = DecodeAttention(view, &dummy, p, &dummy, DecodeOptions(), &ws);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.ToString();
  auto pool2 = DevicePool::Create(KvShape{1, 1, 128}, Format::Q8_0(), Format::Q8_0(), 16, 4);
  ASSERT_TRUE(pool2.ok());
  view = (*pool2)->View(0, &row, 1);
  p.n_heads = 16;
  st = DecodeAttention(view, &dummy, p, &dummy, DecodeOptions(), &ws);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.ToString();
  p.n_heads = 3;
  p.out_dtype = DType::kBF16;
  st = DecodeAttention(view, &dummy, p, &dummy, DecodeOptions(), &ws);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.ToString();
  auto rot3 = DevicePool::Create(KvShape{1, 1, 128}, Format::Rot(3, 0), Format::Rot(3, 0), 16, 4);
  ASSERT_TRUE(rot3.ok());
  view = (*rot3)->View(0, &row, 1);
  p.out_dtype = DType::kF32;
  st = DecodeAttention(view, &dummy, p, &dummy, DecodeOptions(), &ws);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.ToString();
  auto affine = DevicePool::Create(KvShape{1, 1, 128}, Format::Affine(4, 64, DType::kF16),
                                   Format::Affine(4, 64, DType::kF16), 16, 4);
  ASSERT_TRUE(affine.ok());
  int64_t slot = 0;
  st = AppendKv(**affine, 0, DType::kF32, &dummy, &dummy, &slot, 1);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.ToString();
}

}  // namespace
}  // namespace kvtier::cuda
