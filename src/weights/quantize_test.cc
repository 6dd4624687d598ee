// kvtier's quantizers: round trips decode to within each type's error bound, and the squared
// error on the golden inputs is within 1.05x of ggml's quantizer on the same inputs (ggml's
// error computed from its committed dequantized output).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kvtier/gguf.h"
#include "kvtier/weights.h"
#include "weights/golden.h"
#include "weights/weight_traits.h"

namespace kvtier::weights {
namespace {

std::vector<const WeightTypeTraits*> QuantTypes() {
  std::vector<const WeightTypeTraits*> v;
  for (const WeightTypeTraits& t : kWeightTypes) {
    if (t.decoder == Decoder::kWeights) v.push_back(&t);
  }
  return v;
}

double SquaredError(const std::vector<float>& a, const std::vector<float>& b, size_t i0,
                    size_t i1) {
  double e = 0;
  for (size_t i = i0; i < i1; ++i) e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return e;
}

// Ours vs ggml's on the golden inputs: total squared error within 1.05x, and per row (one
// distribution each) within 1.05x plus a floor for rows ggml reproduces almost exactly.
TEST(Quantize, ErrorWithin5PercentOfGgmlOnGoldenInputs) {
  for (const WeightTypeTraits* t : QuantTypes()) {
    Golden g;
    std::string err;
    ASSERT_TRUE(LoadGolden(std::string(t->name), &g, &err)) << err;
    const uint32_t type = static_cast<uint32_t>(t->type);
    const size_t n = g.input.size(), rows = n / g.row_values;
    std::vector<uint8_t> q(*WeightRowBytes(type, n));
    ASSERT_TRUE(QuantizeWeightRows(type, g.input.data(), rows, g.row_values, q.data()).ok());
    std::vector<float> ours(n);
    ASSERT_TRUE(DequantizeWeightRowsRef(type, q.data(), rows, g.row_values, ours.data()).ok());
    const double e_ours = SquaredError(ours, g.input, 0, n);
    const double e_ggml = SquaredError(g.output, g.input, 0, n);
    std::printf("%-7s squared error: kvtier %.6g, ggml %.6g (ratio %.4f)\n", t->name.data(),
                e_ours, e_ggml, e_ours / e_ggml);
    EXPECT_LE(e_ours, 1.05 * e_ggml) << t->name;
    for (size_t r = 0; r < rows; ++r) {
      const size_t i0 = r * g.row_values, i1 = i0 + g.row_values;
      const double eo = SquaredError(ours, g.input, i0, i1);
      const double eg = SquaredError(g.output, g.input, i0, i1);
      double energy = 0;
      for (size_t i = i0; i < i1; ++i) energy += double(g.input[i]) * g.input[i];
      EXPECT_LE(eo, 1.05 * eg + 1e-6 * energy) << t->name << " row " << r << ": ours " << eo
                                                << " ggml " << eg;
    }
  }
}

// Round trips on random rows: every type reconstructs within its bits' error (relative RMS
// error bounded by a per-bit budget), and zeros stay exactly zero.
TEST(Quantize, RoundTripErrorShrinksWithBitsAndZerosStayZero) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t n = 1024, rows = 3;
  std::vector<float> x(n * rows);
  for (float& v : x) v = nd(rng);
  for (const WeightTypeTraits* t : QuantTypes()) {
    const uint32_t type = static_cast<uint32_t>(t->type);
    std::vector<uint8_t> q(*WeightRowBytes(type, n) * rows);
    ASSERT_TRUE(QuantizeWeightRows(type, x.data(), rows, n, q.data()).ok());
    std::vector<float> y(n * rows);
    ASSERT_TRUE(DequantizeWeightRows(type, q.data(), rows, n, y.data()).ok());
    const double rel = std::sqrt(SquaredError(y, x, 0, x.size()) / x.size());
    // A b-bit uniform quantizer of N(0,1) over about +-3 sigma: RMS ~ 6 / 2^b / sqrt(12).
    const double bound = 6.0 / std::pow(2.0, t->bits) / std::sqrt(12.0) * 1.6;
    EXPECT_LT(rel, bound) << t->name;
    std::vector<float> zeros(n, 0.0f), back(n, 1.0f);
    ASSERT_TRUE(QuantizeWeightRows(type, zeros.data(), 1, n, q.data()).ok());
    ASSERT_TRUE(DequantizeWeightRows(type, q.data(), 1, n, back.data()).ok());
    for (float v : back) ASSERT_EQ(v, 0.0f) << t->name;
  }
}

TEST(Quantize, RejectsNonFiniteInputNamingTheValue) {
  std::vector<float> x(256, 1.0f);
  x[77] = std::nanf("");
  std::vector<uint8_t> q(144);
  const Status s = QuantizeWeightRows(static_cast<uint32_t>(GgmlType::kQ4_K), x.data(), 1, 256, q.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("value 77 of row 0"), std::string::npos) << s.message();
  EXPECT_EQ(QuantizeWeightRows(16, x.data(), 1, 256, q.data()).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kvtier::weights
