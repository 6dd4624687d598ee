// MatMul's float kernels (both paths, every weight type, with and without threads) against the float64
// reference on random weights and activations.
#include "model/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/test_random.h"
#include "kvtier/thread_pool.h"
#include "kvtier/quant.h"

namespace kvtier::model {
namespace {

struct Matrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

Matrix RandomMatrix(GgmlType type, uint32_t n_in, uint32_t n_out, uint64_t seed) {
  Matrix m;
  const Format f = WeightRowFormat(static_cast<uint32_t>(type)).value();
  const auto src = testing::RandomValues(DType::kF32, size_t(n_in) * n_out, seed, 0.5f);
  m.bytes.resize(f.row_bytes(n_in) * n_out);
  EXPECT_TRUE(QuantizeRows(f, DType::kF32, src.data(), n_out, n_in, m.bytes.data()).ok());
  m.w.type = static_cast<uint32_t>(type);
  m.w.n_in = n_in;
  m.w.n_out = n_out;
  m.w.row_bytes = f.row_bytes(n_in);
  m.w.data = m.bytes.data();
  return m;
}

double RelError(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

class MatMulTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatMulTest, MatchesFloat64Reference) {
  const GgmlType type = GetParam();
  const bool plain = type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16;
  std::vector<uint32_t> n_ins = {64, 96, 320};
  if (plain) n_ins.push_back(70);  // a tail shorter than a vector
  ThreadPool pool(3);
  ASSERT_TRUE(MatMulForcePath(MatMulPath::kFloat));  // the int8 path: matmul_int8_test.cc
  for (long long target : QuantAvailableSimdTargets()) {  // every compiled SIMD target
  ASSERT_TRUE(QuantForceSimdTarget(target));
  uint64_t seed = 1;
  for (uint32_t n_in : n_ins) {
    for (uint32_t n_out : {1u, 5u, 37u, 64u, 100u}) {
      const Matrix m = RandomMatrix(type, n_in, n_out, ++seed);
      for (size_t n_tok : {1, 2, 3, 4, 7, 13, 97, 200}) {
        const auto xb = testing::RandomValues(DType::kF32, n_tok * n_in, ++seed);
        const float* x = reinterpret_cast<const float*>(xb.data());
        std::vector<double> want(n_tok * n_out);
        ASSERT_TRUE(MatMulRef(m.w, x, n_tok, want.data()).ok());
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::vector<float> got(n_tok * n_out, std::nanf(""));
          ASSERT_TRUE(MatMul(m.w, x, n_tok, got.data(), p).ok());
          EXPECT_LT(RelError(got, want), 1e-5)
              << MatMulTargetName() << " type " << GgmlTypeName(m.w.type) << " n_in " << n_in
              << " n_out " << n_out << " n_tok " << n_tok << (p ? " threaded" : "");
        }
      }
    }
  }
  }
  ASSERT_TRUE(QuantForceSimdTarget(0));
  ASSERT_TRUE(MatMulForcePath(MatMulPath::kAuto));
}

INSTANTIATE_TEST_SUITE_P(Types, MatMulTest,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                                           GgmlType::kQ8_0, GgmlType::kQ4_0),
                         [](const auto& info) {
                           return std::string(GgmlTypeName(static_cast<uint32_t>(info.param)));
                         });

TEST(MatMul, RejectsUnsupportedTypesAndBadRows) {
  Matrix m = RandomMatrix(GgmlType::kQ8_0, 64, 4, 9);
  std::vector<float> x(64, 1.0f), y(4);
  WeightMatrix w = m.w;
  w.type = static_cast<uint32_t>(GgmlType::kIQ2_XXS);
  Status s = MatMul(w, x.data(), 1, y.data(), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("iq2_xxs"), std::string::npos) << s.message();
  w.type = static_cast<uint32_t>(GgmlType::kQ6_K);  // 64 values: not a whole 256-value block
  s = MatMul(w, x.data(), 1, y.data(), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("q6_K"), std::string::npos) << s.message();
  w = m.w;
  w.row_bytes += 2;
  s = MatMul(w, x.data(), 1, y.data(), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  w = m.w;
  w.n_in = 48;  // not a multiple of the 32-value block
  EXPECT_FALSE(MatMul(w, x.data(), 1, y.data(), nullptr).ok());
}

}  // namespace
}  // namespace kvtier::model
