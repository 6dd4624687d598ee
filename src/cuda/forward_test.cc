// The GPU forward-pass building blocks (forward_ops.h) against the CPU forward's own functions
// (src/model/ops.h) and a float64 matrix-vector reference over the CPU dequantizer: RMSNorm,
// RoPE (normal and NeoX pairs, partial rotation, frequency factors, positions to 10^6),
// SwiGLU, and the dequantizing matvec for f32 / f16 / bf16 / q8_0 / q4_0 weights (token counts
// around the 8-token pass, strided rows), plus its refusals. Skips without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/cuda_kv.h"
#include "cuda/forward_ops.h"
#include "kvtier/quant.h"
#include "model/ops.h"

namespace kvtier::cuda {
namespace {

class CudaForward : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!DeviceAvailable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  }
};

template <class T>
DeviceBuffer ToDevice(const std::vector<T>& v) {
  auto b = DeviceBuffer::Allocate(std::max<size_t>(v.size() * sizeof(T), 16));
  EXPECT_TRUE(b.ok());
  if (!v.empty()) {
    EXPECT_TRUE(b->CopyFromHost(v.data(), v.size() * sizeof(T)).ok());
  }
  return std::move(*b);
}

std::vector<float> FromDevice(const DeviceBuffer& b, size_t n) {
  std::vector<float> v(n);
  EXPECT_TRUE(b.CopyToHost(v.data(), n * sizeof(float)).ok());
  return v;
}

// sqrt(sum (a - b)^2 / sum b^2)
double RelErr(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

TEST_F(CudaForward, RmsNormMatchesTheCpu) {
  double worst = 0;
  for (uint32_t n : {64u, 576u, 2048u, 5120u}) {
    const uint32_t n_tok = 5;
    std::vector<float> x = Random(n_tok * n, n), w = Random(n, n + 1);
    x[3] = 300.0f;  // one large value
    std::vector<float> want(x.size());
    model::RmsNorm(x.data(), w.data(), n_tok, n, 1e-6f, want.data());
    DeviceBuffer dx = ToDevice(x), dw = ToDevice(w);
    ASSERT_TRUE(RmsNormRows(dx.as<float>(), dw.as<float>(), n_tok, n, 1e-6f, dx.as<float>()).ok());
    const std::vector<float> got = FromDevice(dx, x.size());
    const double e = RelErr(got, std::vector<double>(want.begin(), want.end()));
    EXPECT_LT(e, 1e-6) << "n " << n;
    worst = std::max(worst, e);
  }
  std::printf("rmsnorm: worst relative error %.2e against model::RmsNorm\n", worst);
}

TEST_F(CudaForward, RopeMatchesTheCpu) {
  double worst = 0;
  int n = 0;
  for (uint32_t hd : {64u, 128u}) {
    for (uint32_t dims : {hd, hd / 2}) {
      for (bool neox : {false, true}) {
        for (bool factors : {false, true}) {
          const uint32_t n_tok = 7, n_heads = 3;
          std::vector<float> x = Random(n_tok * n_heads * hd, hd + dims + neox);
          const std::vector<int32_t> pos = {0, 1, 2, 17, 4095, 131071, 1000000};
          std::vector<float> ff(dims / 2);
          for (uint32_t i = 0; i < dims / 2; ++i) ff[i] = 1.0f + 0.37f * static_cast<float>(i % 5);
          model::RopeParams cp;
          cp.head_dim = hd;
          cp.n_dims = dims;
          cp.theta_base = 500000.0f;
          cp.neox = neox;
          cp.pos_scale = 0.25f;
          cp.freq_factors = factors ? ff.data() : nullptr;
          std::vector<float> want = x;
          model::Rope(want.data(), n_tok, n_heads, pos, cp);
          DeviceBuffer dx = ToDevice(x), dpos = ToDevice(pos), dff = ToDevice(ff);
          DeviceRope p;
          p.head_dim = hd;
          p.n_dims = dims;
          p.theta_base = cp.theta_base;
          p.neox = neox;
          p.pos_scale = cp.pos_scale;
          p.freq_factors = factors ? dff.as<float>() : nullptr;
          ASSERT_TRUE(RopeRows(dx.as<float>(), n_tok, n_heads, dpos.as<int32_t>(), p).ok());
          const std::vector<float> got = FromDevice(dx, x.size());
          const double e = RelErr(got, std::vector<double>(want.begin(), want.end()));
          EXPECT_LT(e, 1e-6) << "hd " << hd << " dims " << dims << " neox " << neox;
          worst = std::max(worst, e);
          ++n;
        }
      }
    }
  }
  DeviceRope bad;
  bad.head_dim = 64;
  bad.n_dims = 65;
  float dummy = 0;
  int32_t pos = 0;
  EXPECT_EQ(RopeRows(&dummy, 1, 1, &pos, bad).code(), StatusCode::kInvalidArgument);
  std::printf("rope: %d cases, worst relative error %.2e against model::Rope\n", n, worst);
}

TEST_F(CudaForward, SwiGluMatchesTheCpu) {
  std::vector<float> g = Random(10007, 3, 4.0f), u = Random(10007, 4);
  std::vector<float> want = g;
  model::SwiGlu(want.data(), u.data(), want.size());
  DeviceBuffer dg = ToDevice(g), du = ToDevice(u);
  ASSERT_TRUE(SwiGluRows(dg.as<float>(), du.as<float>(), g.size()).ok());
  const double e = RelErr(FromDevice(dg, g.size()), std::vector<double>(want.begin(), want.end()));
  EXPECT_LT(e, 1e-6);
  std::printf("swiglu: relative error %.2e against model::SwiGlu\n", e);
}

TEST_F(CudaForward, MatVecMatchesTheDequantizedFloat64Product) {
  // Each shape through every kernel: the streaming one (matvec.cu) at 1, 2 and 4 rows per warp,
  // q8_0 / q4_0 chunks of 16 and 32 blocks, x per warp or per thread block, and
  // its default, and the lane-per-block one; row strides a multiple of 16 (streaming where
  // the format allows: q8_0 / q4_0 need k a multiple of 256, k 1280 ends in a partial chunk)
  // and not (lane-per-block only).
  double worst = 0;
  int n = 0;
  for (const Format& f :
       {Format::F32(), Format::F16(), Format::BF16(), Format::Q8_0(), Format::Q4_0()}) {
    for (uint32_t k : {96u, 1280u, 2048u}) {
      for (uint32_t n_tok : {1u, 3u, 8u, 9u, 17u}) {
        for (size_t pad : {size_t{16}, size_t{4}}) {
          const uint32_t n_out = 37;
          const size_t rb = f.row_bytes(k), stride = rb + pad;
          std::vector<float> wf = Random(static_cast<size_t>(n_out) * k, k + n_tok);
          std::vector<uint8_t> wq(n_out * stride, 0);
          for (uint32_t r = 0; r < n_out; ++r) {
            ASSERT_TRUE(QuantizeRowsRef(f, DType::kF32, wf.data() + static_cast<size_t>(r) * k, 1,
                                        k, wq.data() + r * stride)
                            .ok());
          }
          std::vector<float> wd(static_cast<size_t>(n_out) * k);
          for (uint32_t r = 0; r < n_out; ++r) {
            ASSERT_TRUE(DequantizeRowsRef(f, wq.data() + r * stride, 1, k, DType::kF32,
                                          wd.data() + static_cast<size_t>(r) * k)
                            .ok());
          }
          const std::vector<float> x = Random(static_cast<size_t>(n_tok) * k, 7 * k + n_tok);
          std::vector<double> want(static_cast<size_t>(n_tok) * n_out);
          for (uint32_t t = 0; t < n_tok; ++t) {
            for (uint32_t r = 0; r < n_out; ++r) {
              double s = 0;
              for (uint32_t i = 0; i < k; ++i) {
                s += double(wd[static_cast<size_t>(r) * k + i]) *
                     double(x[static_cast<size_t>(t) * k + i]);
              }
              want[static_cast<size_t>(t) * n_out + r] = s;
            }
          }
          DeviceBuffer dw = ToDevice(wq), dx = ToDevice(x);
          auto dy = DeviceBuffer::Allocate(want.size() * sizeof(float));
          ASSERT_TRUE(dy.ok());
          const MatVecTuning tunings[] = {
              {0, false, 0, -1, -1}, {0, true, 0, -1, -1},   {1, false, 0, -1, -1},
              {2, false, 0, -1, -1}, {4, false, 0, -1, -1},  {1, false, 16, -1, -1},
              {2, false, 16, 44, 0}, {4, false, 32, 44, 0},  {1, false, 16, -1, 1},
              {2, false, 32, -1, 1}, {4, false, 16, -1, 1},  {1, false, 32, -1, 1}};
          for (const MatVecTuning& tu : tunings) {
            ASSERT_TRUE(dy->Fill(0xFF).ok());
            const Status st = MatVecRowsTuned(dw.data(), f, n_out, k, stride, dx.as<float>(),
                                              n_tok, dy->as<float>(), tu);
            ASSERT_TRUE(st.ok()) << st.ToString();
            const double e = RelErr(FromDevice(*dy, want.size()), want);
            EXPECT_LT(e, 1e-6) << f.spec() << " k " << k << " tokens " << n_tok << " stride "
                               << stride << " rows " << tu.rows_per_warp << " simple "
                               << tu.simple << " chunk " << tu.chunk_blocks << " x_smem "
                               << tu.x_smem;
            worst = std::max(worst, e);
            ++n;
          }
        }
      }
    }
  }
  std::printf("matvec: %d cases, worst relative error %.2e against the float64 product of the "
              "CPU-dequantized weights\n", n, worst);
}

// Prefill's dequantize-then-GEMM (cuBLAS) against the same float64 product: f32 compute is an
// exact SGEMM of the dequantized weights (bound 1e-6); f16 / bf16 round x and W once more
// (bounds 2e-3 and 1.5e-2, a few units of their 11- and 8-bit mantissas over random sums).
TEST_F(CudaForward, GemmMatchesTheDequantizedFloat64Product) {
  GemmWorkspace ws;
  double worst[3] = {0, 0, 0};
  int n = 0;
  for (const Format& f : {Format::F16(), Format::BF16(), Format::Q8_0(), Format::Q4_0()}) {
    for (DType ct : {DType::kF32, DType::kF16, DType::kBF16}) {
      const uint32_t n_out = 200, k = 1024, n_tok = 33;
      const size_t stride = f.row_bytes(k);
      std::vector<float> wf = Random(static_cast<size_t>(n_out) * k, 11 + n);
      std::vector<uint8_t> wq(n_out * stride);
      ASSERT_TRUE(QuantizeRowsRef(f, DType::kF32, wf.data(), n_out, k, wq.data()).ok());
      std::vector<float> wd(wf.size());
      ASSERT_TRUE(DequantizeRowsRef(f, wq.data(), n_out, k, DType::kF32, wd.data()).ok());
      const std::vector<float> x = Random(static_cast<size_t>(n_tok) * k, 13 + n);
      std::vector<double> want(static_cast<size_t>(n_tok) * n_out);
      for (uint32_t t = 0; t < n_tok; ++t) {
        for (uint32_t r = 0; r < n_out; ++r) {
          double acc = 0;
          for (uint32_t i = 0; i < k; ++i) {
            acc += double(wd[static_cast<size_t>(r) * k + i]) * double(x[static_cast<size_t>(t) * k + i]);
          }
          want[static_cast<size_t>(t) * n_out + r] = acc;
        }
      }
      DeviceBuffer dw = ToDevice(wq), dx = ToDevice(x);
      auto dy = DeviceBuffer::Allocate(want.size() * sizeof(float));
      ASSERT_TRUE(dy.ok());
      ASSERT_TRUE(dy->Fill(0xFF).ok());
      const Status st = GemmRows(dw.data(), f, n_out, k, stride, dx.as<float>(), n_tok,
                                 dy->as<float>(), ct, &ws);
      ASSERT_TRUE(st.ok()) << st.ToString();
      const double e = RelErr(FromDevice(*dy, want.size()), want);
      const int c = ct == DType::kF32 ? 0 : ct == DType::kF16 ? 1 : 2;
      const double bound = c == 0 ? 1e-6 : c == 1 ? 2e-3 : 1.5e-2;
      EXPECT_LT(e, bound) << f.spec() << " compute " << c;
      worst[c] = std::max(worst[c], e);
      ++n;
    }
  }
  std::printf("gemm: %d cases, worst relative error f32 %.2e, f16 %.2e, bf16 %.2e\n", n,
              worst[0], worst[1], worst[2]);
}

TEST_F(CudaForward, MatVecRefusesBadShapes) {
  auto b = DeviceBuffer::Allocate(4096);
  ASSERT_TRUE(b.ok());
  float* x = b->as<float>();
  Status st = MatVecRows(b->data(), Format::Q8_0(), 4, 48, 64, x, 1, x);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  st = MatVecRows(b->data(), Format::Q8_0(), 4, 64, 60, x, 1, x);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.ToString().find("row_stride 60"), std::string::npos) << st.ToString();
  st = MatVecRows(b->data(), Format::Affine(4, 32, DType::kF16), 4, 64, 64, x, 1, x);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.ToString();
  st = MatVecRowsTuned(b->data(), Format::BF16(), 4, 64, 128, x, 1, x, MatVecTuning{3, false});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.ToString().find("rows_per_warp 3"), std::string::npos) << st.ToString();
  st = MatVecRowsTuned(b->data(), Format::BF16(), 4, 64, 128, x, 2, x, MatVecTuning{8, false});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  st = MatVecRowsTuned(b->data(), Format::Q8_0(), 4, 256, 272, x, 1, x, MatVecTuning{1, false, 8});
  EXPECT_NE(st.ToString().find("chunk_blocks 8"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace kvtier::cuda
