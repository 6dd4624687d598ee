// The DeltaNet kernels (deltanet.h): the Highway versions against their scalar references and
// against float64 (the unfused delta rule: decay the whole state, M k, the rank-1 update,
// M q), over many tokens, several head sizes (with and without a SIMD tail) and values that
// saturate SiLU.
#include "model/deltanet.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace kvtier {
namespace {

std::vector<float> Random(std::mt19937& rng, size_t n, float sd) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// L2-normalised, as the model's q and k heads are.
std::vector<float> Unit(std::mt19937& rng, size_t n) {
  std::vector<float> v = Random(rng, n, 1.0f);
  double ss = 0.0;
  for (float x : v) ss += double(x) * x;
  for (float& x : v) x = static_cast<float>(x / std::sqrt(ss));
  return v;
}

TEST(DeltaRule, SimdAndRefFollowTheFloat64RuleOverManyTokens) {
  std::printf("DeltaNet kernels on %s\n", model::DeltaNetTargetName());
  for (size_t S : {128, 64, 16, 24, 5}) {
    std::mt19937 rng(static_cast<uint32_t>(S));
    std::vector<float> m_simd(S * S, 0.0f), m_ref(S * S, 0.0f);
    std::vector<double> m64(S * S, 0.0);
    const float scale = 1.0f / std::sqrt(static_cast<float>(S));
    double worst_simd = 0.0, worst_ref = 0.0;
    for (int t = 0; t < 40; ++t) {
      const std::vector<float> q = Unit(rng, S), k = Unit(rng, S), v = Random(rng, S, 1.0f);
      const float decay = std::exp(-std::uniform_real_distribution<float>(0.0f, 2.0f)(rng));
      const float beta = std::uniform_real_distribution<float>(0.05f, 0.95f)(rng);
      std::vector<float> out_simd(S), out_ref(S);
      model::DeltaRuleStep(m_simd.data(), S, q.data(), k.data(), v.data(), decay, beta, scale,
                           out_simd.data());
      model::DeltaRuleStepRef(m_ref.data(), S, q.data(), k.data(), v.data(), decay, beta, scale,
                              out_ref.data());
      // float64, unfused: M = decay M; d = (v - M k) beta; M += d k^T; out = M q scale.
      for (double& x : m64) x *= decay;
      std::vector<double> d(S);
      for (size_t j = 0; j < S; ++j) {
        double s = 0.0;
        for (size_t i = 0; i < S; ++i) s += m64[j * S + i] * k[i];
        d[j] = (v[j] - s) * beta;
      }
      for (size_t j = 0; j < S; ++j) {
        for (size_t i = 0; i < S; ++i) m64[j * S + i] += d[j] * k[i];
      }
      for (size_t j = 0; j < S; ++j) {
        double o = 0.0, mag = 0.0;
        for (size_t i = 0; i < S; ++i) {
          o += m64[j * S + i] * q[i];
          mag += std::fabs(m64[j * S + i] * q[i]);
        }
        o *= scale;
        mag = mag * scale + 1e-3;
        worst_simd = std::max(worst_simd, std::fabs(out_simd[j] - o) / mag);
        worst_ref = std::max(worst_ref, std::fabs(out_ref[j] - o) / mag);
      }
    }
    double state_simd = 0.0;
    for (size_t i = 0; i < S * S; ++i) {
      state_simd = std::max(state_simd, std::fabs(m_simd[i] - m64[i]) / (std::fabs(m64[i]) + 1e-2));
    }
    // f32 rounding over 40 tokens of a contracting recurrence (|decay| <= 1, |k| = 1).
    EXPECT_LT(worst_simd, 2e-5) << "S " << S;
    EXPECT_LT(worst_ref, 2e-5) << "S " << S;
    EXPECT_LT(state_simd, 2e-5) << "S " << S;
  }
}

TEST(DeltaRule, ZeroStateGivesBetaTimesVScaledByKDotQ) {
  const size_t S = 128;
  std::mt19937 rng(7);
  std::vector<float> m(S * S, 0.0f), out(S);
  const std::vector<float> q = Unit(rng, S), k = Unit(rng, S), v = Random(rng, S, 1.0f);
  model::DeltaRuleStep(m.data(), S, q.data(), k.data(), v.data(), 0.5f, 0.25f, 1.0f, out.data());
  double kq = 0.0;
  for (size_t i = 0; i < S; ++i) kq += double(k[i]) * q[i];
  for (size_t j = 0; j < S; ++j) {  // M = 0.25 v k^T, so out = 0.25 v (k . q)
    EXPECT_NEAR(out[j], 0.25 * v[j] * kq, 1e-6) << j;
    EXPECT_NEAR(m[j * S + 3], 0.25 * v[j] * k[3], 1e-7) << j;
  }
}

TEST(CausalConvSilu, SimdEqualsFloat64ForFourTapsAndOtherKernels) {
  for (size_t K : {4, 3}) {
    for (size_t C : {6144, 48, 20}) {
      const size_t T = 5;
      std::mt19937 rng(static_cast<uint32_t>(C + K));
      const std::vector<float> x = Random(rng, (K - 1 + T) * C, 3.0f), w = Random(rng, C * K, 1.0f);
      std::vector<float> got(T * C), ref(T * C);
      model::CausalConvSilu(x.data(), w.data(), T, C, K, got.data());
      model::CausalConvSiluRef(x.data(), w.data(), T, C, K, ref.data());
      for (size_t t = 0; t < T; ++t) {
        for (size_t c = 0; c < C; ++c) {
          double s = 0.0, mag = 0.0;
          for (size_t j = 0; j < K; ++j) {
            s += double(x[(t + j) * C + c]) * w[c * K + j];
            mag += std::fabs(double(x[(t + j) * C + c]) * w[c * K + j]);
          }
          const double want = s / (1.0 + std::exp(-s));
          const double tol = 4e-6 * (mag + 1.0);
          ASSERT_NEAR(got[t * C + c], want, tol) << "K " << K << " C " << C << " t " << t << " c " << c;
          ASSERT_NEAR(ref[t * C + c], want, tol) << "K " << K << " C " << C << " t " << t << " c " << c;
        }
      }
    }
  }
}

TEST(MulSilu, SimdEqualsFloat64IncludingSaturatedValuesAndATail) {
  std::vector<float> z = {-200.0f, -90.0f, -30.0f, -1.0f, 0.0f, 1e-8f, 0.5f, 3.0f, 30.0f, 90.0f,
                          200.0f};
  std::mt19937 rng(3);
  for (float x : Random(rng, 30, 4.0f)) z.push_back(x);  // 41 values: a tail after 16 / 32
  std::vector<float> o = Random(rng, z.size(), 1.0f), got = o, ref = o;
  model::MulSilu(got.data(), z.data(), z.size());
  model::MulSiluRef(ref.data(), z.data(), z.size());
  for (size_t i = 0; i < z.size(); ++i) {
    const double want = o[i] * (z[i] / (1.0 + std::exp(-double(z[i]))));
    const double tol = 1.5e-6 * std::fabs(want) + 1e-30;
    EXPECT_TRUE(std::isfinite(got[i])) << "z " << z[i];
    EXPECT_NEAR(got[i], want, tol) << "z " << z[i];
    EXPECT_NEAR(ref[i], want, tol) << "z " << z[i];
  }
}

}  // namespace
}  // namespace kvtier
