// MatMul on every kvtier/weights.h type beyond src/quant's formats (q4_1 .. iq4_xs), against
// the float64 reference over the same blocks, with and without threads; weights quantized by
// kvtier's own quantizers from random rows. The fast per-type kernels are tested where they
// live; this proves any type the loader accepts multiplies correctly.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kvtier/gguf.h"
#include "kvtier/thread_pool.h"
#include "kvtier/weights.h"
#include "model/matmul.h"

namespace kvtier::model {
namespace {

TEST(MatMulWeights, EveryWeightsTypeMatchesFloat64Reference) {
  const GgmlType types[] = {GgmlType::kQ4_1,  GgmlType::kQ5_0, GgmlType::kQ5_1,
                            GgmlType::kIQ4_NL, GgmlType::kQ2_K, GgmlType::kQ3_K,
                            GgmlType::kQ4_K,  GgmlType::kQ5_K, GgmlType::kQ6_K,
                            GgmlType::kIQ4_XS};
  ThreadPool pool(3);
  ASSERT_TRUE(MatMulForcePath(MatMulPath::kFloat));  // the int8 kernels: matmul_kquant_test.cc
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  for (GgmlType type : types) {
    const uint32_t id = static_cast<uint32_t>(type);
    for (uint32_t n_in : {256u, 768u}) {
      for (uint32_t n_out : {1u, 7u, 40u}) {
        std::vector<float> w(size_t{n_in} * n_out);
        for (float& v : w) v = nd(rng);
        const size_t row_bytes = *WeightRowBytes(id, n_in);
        std::vector<uint8_t> bytes(row_bytes * n_out);
        ASSERT_TRUE(QuantizeWeightRows(id, w.data(), n_out, n_in, bytes.data()).ok());
        WeightMatrix m{id, n_in, n_out, row_bytes, bytes.data()};
        for (size_t n_tok : {1, 3, 70}) {
          std::vector<float> x(n_tok * n_in);
          for (float& v : x) v = nd(rng);
          std::vector<double> want(n_tok * n_out);
          ASSERT_TRUE(MatMulRef(m, x.data(), n_tok, want.data()).ok());
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> got(n_tok * n_out, std::nanf(""));
            ASSERT_TRUE(MatMul(m, x.data(), n_tok, got.data(), p).ok());
            double num = 0, den = 0;
            for (size_t i = 0; i < got.size(); ++i) {
              num += (got[i] - want[i]) * (got[i] - want[i]);
              den += want[i] * want[i];
            }
            EXPECT_LT(std::sqrt(num / den), 1e-5)
                << GgmlTypeName(id) << " n_in " << n_in << " n_out " << n_out << " n_tok "
                << n_tok << (p ? " threaded" : "");
          }
        }
      }
    }
  }
  ASSERT_TRUE(MatMulForcePath(MatMulPath::kAuto));
}

}  // namespace
}  // namespace kvtier::model
