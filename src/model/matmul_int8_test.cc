// MatMul's int8 kernels (every ISA this CPU runs, the scalar _ref included) against the float64
// reference, with the error bound that quantizing the activations implies, and the SIMD kernels
// against the scalar ones (same integer sums: only the f32 summation order differs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/test_random.h"
#include "kvtier/gguf.h"
#include "kvtier/quant.h"
#include "kvtier/thread_pool.h"
#include "model/matmul.h"

namespace kvtier::model {
namespace {

struct Matrix {
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // [n_out][n_in] the weights as the reference sees them
  WeightMatrix w;
};

Matrix RandomMatrix(GgmlType type, uint32_t n_in, uint32_t n_out, uint64_t seed) {
  Matrix m;
  const Format f = WeightRowFormat(static_cast<uint32_t>(type)).value();
  const auto src = testing::RandomValues(DType::kF32, size_t(n_in) * n_out, seed, 0.5f);
  m.bytes.resize(f.row_bytes(n_in) * n_out);
  EXPECT_TRUE(QuantizeRows(f, DType::kF32, src.data(), n_out, n_in, m.bytes.data()).ok());
  m.deq.resize(size_t(n_in) * n_out);
  EXPECT_TRUE(DequantizeRowsRef(f, m.bytes.data(), n_out, n_in, DType::kF32, m.deq.data()).ok());
  m.w.type = static_cast<uint32_t>(type);
  m.w.n_in = n_in;
  m.w.n_out = n_out;
  m.w.row_bytes = f.row_bytes(n_in);
  m.w.data = m.bytes.data();
  return m;
}

// Largest |got - want| / bound over the outputs, where bound is what rounding the activation
// codes can cost: per 32-value block, |x_k - d q_k| <= d / 2 with d = amax / 127, so the block's
// product moves by at most (d / 2) * sum |w_k|; plus f32 rounding of the scaled block sums
// (1e-6 of sum |w_k x_k|, far above K ulps for these sizes).
double WorstRatio(const Matrix& m, const float* x, size_t n_tok, const std::vector<float>& got,
                  const std::vector<double>& want) {
  const size_t K = m.w.n_in;
  double worst = 0.0;
  for (size_t t = 0; t < n_tok; ++t) {
    for (size_t o = 0; o < m.w.n_out; ++o) {
      double bound = 0.0, mag = 0.0;
      for (size_t b = 0; b < K / 32; ++b) {
        float amax = 0.0f;
        for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[t * K + 32 * b + i]));
        double wsum = 0.0;
        for (size_t i = 0; i < 32; ++i) {
          const double wk = m.deq[o * K + 32 * b + i];
          wsum += std::fabs(wk);
          mag += std::fabs(wk * x[t * K + 32 * b + i]);
        }
        bound += double(amax) / 127.0 / 2.0 * wsum;
      }
      bound = bound * 1.0001 + 1e-6 * mag + 1e-30;
      worst = std::max(worst, std::fabs(got[t * m.w.n_out + o] - want[t * m.w.n_out + o]) / bound);
    }
  }
  return worst;
}

double RelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

class MatMulInt8Test : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatMulInt8Test, WithinActivationRoundingOfFloat64AndEqualsScalar) {
  const GgmlType type = GetParam();
  ThreadPool pool(3);
  uint64_t seed = 100;
  for (uint32_t n_in : {32u, 64u, 96u, 320u, 1024u}) {
    for (uint32_t n_out : {1u, 5u, 37u, 64u}) {
      const Matrix m = RandomMatrix(type, n_in, n_out, ++seed);
      for (size_t n_tok : {1, 2, 3, 4, 5, 8, 9, 13, 70, 130}) {
        const auto xb = testing::RandomValues(DType::kF32, n_tok * n_in, ++seed);
        const float* x = reinterpret_cast<const float*>(xb.data());
        std::vector<double> want(n_tok * n_out);
        ASSERT_TRUE(MatMulRef(m.w, x, n_tok, want.data()).ok());
        std::vector<float> scalar;
        for (MatMulPath path : MatMulAvailablePaths()) {
          if (path == MatMulPath::kFloat || path == MatMulPath::kAuto) continue;
          ASSERT_TRUE(MatMulForcePath(path));
          const std::string kernel = MatMulKernelName(m.w.type, n_tok);
          ASSERT_NE(kernel.find("int8"), std::string::npos) << kernel;
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> got(n_tok * n_out, std::nanf(""));
            ASSERT_TRUE(MatMul(m.w, x, n_tok, got.data(), p).ok());
            const std::string where = kernel + " n_in " + std::to_string(n_in) + " n_out " +
                                      std::to_string(n_out) + " n_tok " +
                                      std::to_string(n_tok) + (p ? " threaded" : "");
            EXPECT_LE(WorstRatio(m, x, n_tok, got, want), 1.0) << where;
            if (path == MatMulPath::kInt8Scalar) {
              if (p == nullptr) scalar = got;
            } else {
              EXPECT_LT(RelDiff(got, scalar), 2e-6) << where;
            }
          }
        }
      }
    }
  }
  ASSERT_TRUE(MatMulForcePath(MatMulPath::kAuto));
}

// The bound above is not vacuous: the int8 result differs from the exact one (it does
// quantize the activations), but by far less than the product's size.
TEST(MatMulInt8, ErrorIsActivationRoundingSized) {
  const Matrix m = RandomMatrix(GgmlType::kQ8_0, 1024, 64, 7);
  const auto xb = testing::RandomValues(DType::kF32, 1024, 8);
  const float* x = reinterpret_cast<const float*>(xb.data());
  std::vector<double> want(64);
  ASSERT_TRUE(MatMulRef(m.w, x, 1, want.data()).ok());
  ASSERT_TRUE(MatMulForcePath(MatMulPath::kInt8Scalar));
  std::vector<float> got(64);
  ASSERT_TRUE(MatMul(m.w, x, 1, got.data(), nullptr).ok());
  ASSERT_TRUE(MatMulForcePath(MatMulPath::kAuto));
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < 64; ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  const double rel = std::sqrt(num / den);
  EXPECT_GT(rel, 1e-5);  // f32 alone would be ~1e-7
  EXPECT_LT(rel, 2e-2);  // codes of 8 bits: ~1/250 of a Gaussian block's amax per value
}

INSTANTIATE_TEST_SUITE_P(Types, MatMulInt8Test,
                         ::testing::Values(GgmlType::kQ8_0, GgmlType::kQ4_0),
                         [](const auto& info) {
                           return std::string(GgmlTypeName(static_cast<uint32_t>(info.param)));
                         });

}  // namespace
}  // namespace kvtier::model
