// The f16 / bf16 prefill GEMM (matmul_gemm.h) against the float64 reference: f16 within the
// rounding of its 14-bit block codes (per 32-value block: d_x / 2 x sum |w| + d_w / 2 x
// sum |x| + 8 d_x d_w, d_x = amax_x / 8191, d_w <= amax_w / 4096), or f32 rounding in its
// exact form (KVTIER_GEMM_F16=f32); bf16 within the bf16 rounding of the activations (2^-9 of
// each |w x| term) that it makes on purpose; ragged row, token and K counts, with and without
// threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "base/test_random.h"
#include "kvtier/gguf.h"
#include "kvtier/quant.h"
#include "kvtier/thread_pool.h"
#include "kvtier/weights.h"
#include "model/matmul.h"
#include "model/matmul_gemm.h"

namespace kvtier::model::int8 {
namespace {

class GemmFloatTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GemmFloatTest, MatchesFloat64Reference) {
  const auto type = static_cast<uint32_t>(GetParam());
  if (!GemmFloatSupports(type, 64)) GTEST_SKIP() << "no AVX-512 (BF16) on this CPU";
  const Format f = WeightRowFormat(type).value();
  // Relative bound per |w x| term: f32 accumulation only (f16) or the bf16 activations.
  const bool f16 = type == static_cast<uint32_t>(GgmlType::kF16);
  const double rel = f16 ? 1e-6 : 1.0 / 256;
  const char* env = std::getenv("KVTIER_GEMM_F16");
  const bool f16_codes = f16 && (env == nullptr || std::string(env) != "f32");
  ThreadPool pool(3);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd;
  uint64_t seed = 10;
  for (uint32_t n_in : {64u, 70u, 320u}) {
    for (uint32_t n_out : {5u, 37u, 100u}) {
      const auto src = testing::RandomValues(DType::kF32, size_t(n_in) * n_out, ++seed, 0.5f);
      std::vector<uint8_t> bytes(f.row_bytes(n_in) * n_out);
      ASSERT_TRUE(QuantizeRows(f, DType::kF32, src.data(), n_out, n_in, bytes.data()).ok());
      std::vector<float> deq(size_t(n_in) * n_out);
      ASSERT_TRUE(DequantizeWeightRowsRef(type, bytes.data(), n_out, n_in, deq.data()).ok());
      WeightMatrix w;
      w.type = type;
      w.n_in = n_in;
      w.n_out = n_out;
      w.row_bytes = f.row_bytes(n_in);
      w.data = bytes.data();
      for (size_t n_tok : {5, 21, 40, 200}) {
        // MatMul itself takes the GEMM from these counts on (matmul_gemm.h).
        const bool via_gemm =
            n_tok >= (type == static_cast<uint32_t>(GgmlType::kF16) ? kGemmF16MinTokens
                                                                    : kGemmMinTokens);
        std::vector<float> x(n_tok * n_in);
        for (float& v : x) v = nd(rng);
        std::vector<double> want(n_tok * n_out);
        ASSERT_TRUE(MatMulRef(w, x.data(), n_tok, want.data()).ok());
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::vector<float> got(n_tok * n_out, std::nanf(""));
          RunGemmFloat(w, x.data(), n_tok, got.data(), p);
          std::vector<float> via(n_tok * n_out, std::nanf(""));
          ASSERT_TRUE(MatMul(w, x.data(), n_tok, via.data(), p).ok());
          ASSERT_EQ(MatMulKernelName(type, n_tok).find("gemm") != std::string::npos, via_gemm);
          for (size_t t = 0; t < n_tok; ++t) {
            for (size_t o = 0; o < n_out; ++o) {
              double terms = 0, codes = 0;
              for (size_t k0 = 0; k0 < n_in; k0 += 32) {
                double aw = 0, ax = 0, sw = 0, sx = 0;
                for (size_t k = k0; k < std::min<size_t>(n_in, k0 + 32); ++k) {
                  const double wk = deq[o * n_in + k], xk = x[t * n_in + k];
                  terms += std::fabs(wk * xk);
                  aw = std::max(aw, std::fabs(wk));
                  ax = std::max(ax, std::fabs(xk));
                  sw += std::fabs(wk);
                  sx += std::fabs(xk);
                }
                const double dx = ax / 8191 * 1.0001, dw = aw / 4096;
                codes += dx / 2 * sw + dw / 2 * sx + 8 * dx * dw;
              }
              const size_t i = t * n_out + o;
              const double bound = rel * terms + (f16_codes ? 1.01 * codes : 0.0) + 1e-30;
              ASSERT_LE(std::fabs(got[i] - want[i]), bound)
                  << GgmlTypeName(type) << " n_in " << n_in << " n_out " << n_out << " n_tok "
                  << n_tok << " t " << t << " o " << o << (p ? " threaded" : "");
              if (via_gemm) {
                ASSERT_EQ(got[i], via[i]) << "MatMul must run the GEMM, output " << i;
              }
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GemmFloatTest, ::testing::Values(GgmlType::kF16, GgmlType::kBF16),
                         [](const auto& info) {
                           return std::string(GgmlTypeName(static_cast<uint32_t>(info.param)));
                         });

}  // namespace
}  // namespace kvtier::model::int8
