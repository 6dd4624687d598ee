// The forward pass's element-wise operations against float64 formulas: SwiGlu (Highway Exp)
// against its scalar reference, RmsNorm, and Rope's cached cos / sin table across calls whose
// positions and parameters change.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/ops.h"

namespace kvtier::model {
namespace {

std::vector<float> Wave(size_t n, float scale, uint32_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * float(i) + float(seed));
  return v;
}

TEST(Ops, SwiGluMatchesReference) {
  for (size_t n : {1u, 15u, 16u, 17u, 1000u, 4099u}) {
    std::vector<float> g = Wave(n, 12.0f, 1), u = Wave(n, 3.0f, 2);
    g[0] = -90.0f;  // exp(-g) overflows to inf: silu -> -0
    std::vector<float> ref = g;
    const std::vector<float> in = g;
    SwiGlu(g.data(), u.data(), n);
    SwiGluRef(ref.data(), u.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const double x = in[i];
      const double want = x / (1.0 + std::exp(-x)) * double(u[i]);
      EXPECT_NEAR(g[i], ref[i], 4e-7 * (std::fabs(ref[i]) + 1e-30)) << n << " " << i;
      EXPECT_NEAR(g[i], want, 1e-5 * (std::fabs(want) + 1e-6)) << n << " " << i;
    }
  }
}

TEST(Ops, RmsNormMatchesFloat64) {
  const size_t n_tok = 3;
  for (size_t n : {7u, 64u, 1027u}) {
    const std::vector<float> x = Wave(n_tok * n, 2.0f, 3), w = Wave(n, 1.5f, 4);
    std::vector<float> y(n_tok * n);
    RmsNorm(x.data(), w.data(), n_tok, n, 1e-6f, y.data());
    for (size_t t = 0; t < n_tok; ++t) {
      double ss = 0.0;
      for (size_t i = 0; i < n; ++i) ss += double(x[t * n + i]) * x[t * n + i];
      const double inv = 1.0 / std::sqrt(ss / double(n) + 1e-6);
      for (size_t i = 0; i < n; ++i) {
        const double want = double(x[t * n + i]) * inv * w[i];
        EXPECT_NEAR(y[t * n + i], want, 1e-6 * (std::fabs(want) + 1e-6)) << t << " " << i;
      }
    }
  }
}

// Rope against float64, called with changing positions / parameters (the table is reused only
// while they match).
TEST(Ops, RopeTableFollowsPositionsAndParameters) {
  const size_t H = 3, D = 8;
  const std::vector<float> factors = {1.0f, 2.0f, 4.0f, 8.0f};
  struct Call {
    std::vector<int32_t> pos;
    float theta;
    bool neox;
    bool factors;
  };
  const std::vector<Call> calls = {{{0, 1, 2}, 10000.0f, false, false},
                                   {{0, 1, 2}, 10000.0f, false, false},
                                   {{5, 6, 7}, 10000.0f, false, false},
                                   {{5, 6, 7}, 500.0f, true, false},
                                   {{5, 6, 7}, 500.0f, true, true},
                                   {{5, 6}, 500.0f, true, true},
                                   {{0, 1, 2}, 10000.0f, false, false}};
  for (size_t c = 0; c < calls.size(); ++c) {
    const Call& call = calls[c];
    const size_t T = call.pos.size();
    RopeParams p;
    p.head_dim = D;
    p.n_dims = D;
    p.theta_base = call.theta;
    p.neox = call.neox;
    p.freq_factors = call.factors ? factors.data() : nullptr;
    std::vector<float> x = Wave(T * H * D, 1.0f, 5);
    const std::vector<float> x0 = x;
    Rope(x.data(), T, H, call.pos, p);
    for (size_t t = 0; t < T; ++t) {
      for (size_t h = 0; h < H; ++h) {
        for (size_t i = 0; i < D / 2; ++i) {
          double th = call.pos[t] * std::pow(double(call.theta), -2.0 * double(i) / D);
          if (call.factors) th /= factors[i];
          const size_t a = call.neox ? i : 2 * i, b = call.neox ? i + D / 2 : 2 * i + 1;
          const float* v0 = x0.data() + (t * H + h) * D;
          const double wa = v0[a] * std::cos(th) - v0[b] * std::sin(th);
          const double wb = v0[a] * std::sin(th) + v0[b] * std::cos(th);
          EXPECT_NEAR(x[(t * H + h) * D + a], wa, 1e-6) << "call " << c;
          EXPECT_NEAR(x[(t * H + h) * D + b], wb, 1e-6) << "call " << c;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::model
