// The int8 kernels of the weights-module types (Q4_K, Q6_K, Q4_1, Q5_0, Q5_1, IQ4_NL): every
// ISA's kernels against a float64 product of the decoded blocks, within the activation-rounding
// bound, and the SIMD kernels against the scalar _ref. Blocks are random bytes (every byte
// pattern is a valid block) with finite f16 scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "base/half.h"
#include "kvtier/gguf.h"
#include "kvtier/thread_pool.h"
#include "model/kquant_layout.h"
#include "kvtier/weights.h"
#include "model/matmul.h"
#include "model/matmul_gemm.h"
#include "model/matmul_int8.h"

namespace kvtier::model::int8 {
namespace {

struct KMatrix {
  std::vector<uint8_t> bytes;
  std::vector<double> deq;   // [n_out][n_in]
  std::vector<double> absw;  // [n_out][n_in] |scale term| + |min term| of each value
  WeightMatrix w;
};

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

// Decodes one super-block from the layout definition (ggml's dequantize_row_q4_K / _q6_K
// formulas written out value by value).
void Decode(GgmlType type, const uint8_t* blk, double* out, double* absw) {
  if (type == GgmlType::kQ4_K) {
    uint16_t hd, hm;
    std::memcpy(&hd, blk + kQ4KD, 2);
    std::memcpy(&hm, blk + kQ4KDmin, 2);
    const double d = F16ToF32(hd), dmin = F16ToF32(hm);
    for (size_t v = 0; v < kQK; ++v) {
      const size_t j = v / 32;
      uint8_t sc, m;
      Q4KScaleMin(blk + kQ4KScales, j, &sc, &m);
      const uint8_t byte = blk[kQ4KQs + 32 * (j / 2) + v % 32];
      const int q = (j & 1) ? byte >> 4 : byte & 15;
      out[v] = d * sc * q - dmin * m;
      absw[v] = std::fabs(d * sc * q) + std::fabs(dmin * m);
    }
  } else {
    uint16_t hd;
    std::memcpy(&hd, blk + kQ6KD, 2);
    const double d = F16ToF32(hd);
    const auto* sc = reinterpret_cast<const int8_t*>(blk + kQ6KScales);
    for (size_t v = 0; v < kQK; ++v) {
      out[v] = d * sc[v / 16] * (Q6KCode(blk, v) - 32);
      absw[v] = std::fabs(out[v]);
    }
  }
}

// Random blocks of any weights-module type: random bytes, then finite f16 scales (and mins)
// at the type's offsets. deq from the weights module's reference dequantizer; absw: |x| plus
// the block's min term (the K-quants: |scale term| + |min term| from Decode).
KMatrix RandomKMatrix(GgmlType type, uint32_t n_in, uint32_t n_out, uint64_t seed) {
  const auto t = static_cast<uint32_t>(type);
  const size_t bv = WeightBlockValues(t), bb = WeightRowBytes(t, bv).value();
  const size_t nb = n_in / bv;
  KMatrix m;
  m.bytes.resize(bb * nb * n_out);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> ud(0.001f, 0.02f);
  for (auto& b : m.bytes) b = static_cast<uint8_t>(rng());
  m.deq.resize(size_t(n_in) * n_out);
  m.absw.resize(size_t(n_in) * n_out);
  std::vector<float> row(bv);
  for (size_t i = 0; i < nb * n_out; ++i) {
    uint8_t* blk = m.bytes.data() + i * bb;
    float min = 0.0f;
    switch (type) {
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K:  // d | dmin | ...
        PutHalf(blk + kQ4KD, ud(rng));
        PutHalf(blk + kQ4KDmin, ud(rng));
        break;
      case GgmlType::kQ6_K: PutHalf(blk + kQ6KD, ud(rng) * 0.1f); break;
      case GgmlType::kQ3_K: PutHalf(blk + kQ3KD, ud(rng)); break;
      case GgmlType::kQ2_K:
        PutHalf(blk + kQ2KD, ud(rng));
        min = ud(rng);
        PutHalf(blk + kQ2KDmin, min);
        min *= 15;  // the largest min term
        break;
      case GgmlType::kQ4_1:
      case GgmlType::kQ5_1:  // d | m | ...
        PutHalf(blk, ud(rng));
        min = -ud(rng) * 8;
        PutHalf(blk + 2, min);
        break;
      default: PutHalf(blk, ud(rng)); break;  // d first: q5_0, iq4_nl, iq4_xs
    }
    if (type == GgmlType::kQ4_K || type == GgmlType::kQ6_K) {
      Decode(type, blk, m.deq.data() + i * bv, m.absw.data() + i * bv);
    } else {
      EXPECT_TRUE(DequantizeWeightRowsRef(t, blk, 1, bv, row.data()).ok());
      for (size_t v = 0; v < bv; ++v) {
        m.deq[i * bv + v] = row[v];
        m.absw[i * bv + v] = std::fabs(row[v]) + std::fabs(min);
      }
    }
  }
  m.w.type = static_cast<uint32_t>(type);
  m.w.n_in = n_in;
  m.w.n_out = n_out;
  m.w.row_bytes = bb * nb;
  m.w.data = m.bytes.data();
  return m;
}

class KQuantInt8Test : public ::testing::TestWithParam<GgmlType> {};

// Values sharing one activation scale: 256 for the super-block types (q8_K-style), else 32.
size_t ActGroup(GgmlType type) { return WeightBlockValues(static_cast<uint32_t>(type)) == 256 ? 256 : 32; }

TEST_P(KQuantInt8Test, WithinActivationRoundingOfFloat64AndEqualsScalar) {
  const GgmlType type = GetParam();
  const Int8Kernels* ref = FindInt8Kernels(static_cast<uint32_t>(type), Isa::kScalar);
  ASSERT_NE(ref, nullptr);
  std::vector<const Int8Kernels*> kernels = {ref};
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512Vnni}) {
    if (const auto* k = FindInt8Kernels(static_cast<uint32_t>(type), isa)) kernels.push_back(k);
  }
  ThreadPool pool(3);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd;
  uint64_t seed = 1;
  for (uint32_t n_in : {96u, 256u, 512u, 1024u}) {  // 96: an odd last 32-value block
    if (n_in % WeightBlockValues(static_cast<uint32_t>(type)) != 0) continue;
    for (uint32_t n_out : {1u, 6u, 37u}) {
      const KMatrix m = RandomKMatrix(type, n_in, n_out, ++seed);
      for (size_t n_tok : {1, 3, 4, 9, 70}) {
        std::vector<float> x(n_tok * n_in);
        for (float& v : x) v = nd(rng);
        // float64 product and the bound: (d_x / 2) * sum |w| per 32-value block (d_x from the
        // amax of the activation group: 256 values for super-block types), plus f32
        // rounding (1e-6 of sum |w x|).
        std::vector<double> want(n_tok * n_out), bound(n_tok * n_out), terms(n_tok * n_out);
        for (size_t t = 0; t < n_tok; ++t) {
          for (size_t o = 0; o < n_out; ++o) {
            double s = 0, b = 0, tm = 0;
            for (size_t blk = 0; blk < n_in / 32; ++blk) {
              float amax = 0;
              const size_t g0 = 32 * blk / ActGroup(type) * ActGroup(type);
              for (size_t i = g0; i < g0 + ActGroup(type); ++i) amax = std::max(amax, std::fabs(x[t * n_in + i]));
              double wsum = 0;
              for (size_t i = 0; i < 32; ++i) {
                const size_t k = 32 * blk + i;
                s += m.deq[o * n_in + k] * x[t * n_in + k];
                wsum += std::fabs(m.deq[o * n_in + k]);
                tm += m.absw[o * n_in + k] * std::fabs(x[t * n_in + k]);
              }
              b += double(amax) / 127.0 / 2.0 * wsum;
            }
            want[t * n_out + o] = s;
            bound[t * n_out + o] = b * 1.0001 + 1e-6 * tm;
            terms[t * n_out + o] = tm;
          }
        }
        std::vector<float> scalar;
        for (const Int8Kernels* k : kernels) {
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> got(n_tok * n_out, std::nanf(""));
            RunInt8(*k, m.w, x.data(), n_tok, got.data(), p);
            const std::string where = std::string(k->name) + " n_in " + std::to_string(n_in) +
                                      " n_out " + std::to_string(n_out) + " n_tok " +
                                      std::to_string(n_tok) + (p ? " threaded" : "");
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_LE(std::fabs(got[i] - want[i]), bound[i]) << where << " output " << i;
            }
            if (k == ref && p == nullptr) scalar = got;
            for (size_t i = 0; i < got.size(); ++i) {  // same integer sums, f32 order only
              ASSERT_LE(std::fabs(got[i] - scalar[i]), 2e-6 * terms[i])
                  << where << " vs scalar, output " << i;
            }
          }
        }
      }
    }
  }
}

// The layout helpers (kquant_layout.h) decode exactly what the weights module's reference
// dequantizer (bit-exact with ggml's, golden-tested there) decodes, and MatMul on every path
// stays within the activation-rounding bound of MatMulRef.
TEST_P(KQuantInt8Test, LayoutMatchesWeightsReferenceAndMatMulPaths) {
  const GgmlType type = GetParam();
  const KMatrix m = RandomKMatrix(type, 1024, 23, 77);
  std::vector<float> deq(m.deq.size());
  ASSERT_TRUE(DequantizeWeightRowsRef(m.w.type, m.w.data, m.w.n_out, m.w.n_in, deq.data()).ok());
  ASSERT_NE(FindInt8Kernels(m.w.type, Isa::kScalar), nullptr);
  for (size_t i = 0; i < deq.size(); ++i) {
    ASSERT_EQ(static_cast<double>(deq[i]), static_cast<double>(static_cast<float>(m.deq[i])))
        << "value " << i;
  }
  std::mt19937_64 rng(6);
  std::normal_distribution<float> nd;
  ThreadPool pool(2);
  for (size_t n_tok : {1, 5, 80}) {
    std::vector<float> x(n_tok * 1024);
    for (float& v : x) v = nd(rng);
    std::vector<double> want(n_tok * 23);
    ASSERT_TRUE(MatMulRef(m.w, x.data(), n_tok, want.data()).ok());
    for (MatMulPath path : MatMulAvailablePaths()) {
      ASSERT_TRUE(MatMulForcePath(path));
      std::vector<float> got(n_tok * 23, std::nanf(""));
      ASSERT_TRUE(MatMul(m.w, x.data(), n_tok, got.data(), &pool).ok());
      for (size_t t = 0; t < n_tok; ++t) {
        for (size_t o = 0; o < 23; ++o) {
          double bound = 0, tm = 0;
          for (size_t b = 0; b < 1024 / 32; ++b) {
            float amax = 0;
            double wsum = 0;
            const size_t g0 = 32 * b / ActGroup(type) * ActGroup(type);
            for (size_t i = g0; i < g0 + ActGroup(type); ++i) {
              amax = std::max(amax, std::fabs(x[t * 1024 + i]));
            }
            for (size_t i = 0; i < 32; ++i) {
              wsum += std::fabs(m.deq[o * 1024 + 32 * b + i]);
              tm += m.absw[o * 1024 + 32 * b + i] * std::fabs(x[t * 1024 + 32 * b + i]);
            }
            bound += double(amax) / 127.0 / 2.0 * wsum;
          }
          ASSERT_LE(std::fabs(got[t * 23 + o] - want[t * 23 + o]), bound * 1.0001 + 1e-6 * tm)
              << MatMulKernelName(m.w.type, n_tok) << " n_tok " << n_tok << " t " << t
              << " o " << o;
        }
      }
    }
  }
  ASSERT_TRUE(MatMulForcePath(MatMulPath::kAuto));
}

// The prefill GEMM (matmul_gemm.h) against the scalar _ref kernels: the same integer sums per
// sub-block, so only the f32 summation order differs (2e-6 of sum |w x|), for ragged row
// counts (past a 16-row group and a 64-row item) and token counts (past an 8-token tile).
TEST_P(KQuantInt8Test, GemmEqualsScalar) {
  const GgmlType type = GetParam();
  const auto t32 = static_cast<uint32_t>(type);
  if (!GemmSupports(t32)) GTEST_SKIP() << "no AVX-512 VNNI";
  const Int8Kernels* ref = FindInt8Kernels(t32, Isa::kScalar);
  ThreadPool pool(3);
  std::mt19937_64 rng(9);
  std::normal_distribution<float> nd;
  uint64_t seed = 50;
  for (uint32_t n_in : {256u, 768u}) {
    for (uint32_t n_out : {5u, 16u, 70u, 131u}) {
      const KMatrix m = RandomKMatrix(type, n_in, n_out, ++seed);
      for (size_t n_tok : {16, 19, 45}) {
        std::vector<float> x(n_tok * n_in);
        for (float& v : x) v = nd(rng);
        std::vector<float> want(n_tok * n_out), got(n_tok * n_out, std::nanf(""));
        RunInt8(*ref, m.w, x.data(), n_tok, want.data(), nullptr);
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::fill(got.begin(), got.end(), std::nanf(""));
          RunGemm(m.w, x.data(), n_tok, got.data(), p);
          for (size_t t = 0; t < n_tok; ++t) {
            for (size_t o = 0; o < n_out; ++o) {
              double terms = 0;
              for (size_t k = 0; k < n_in; ++k) {
                terms += m.absw[o * n_in + k] * std::fabs(x[t * n_in + k]);
              }
              ASSERT_LE(std::fabs(got[t * n_out + o] - want[t * n_out + o]), 2e-6 * terms + 1e-30)
                  << GgmlTypeName(t32) << " n_in " << n_in << " n_out " << n_out << " n_tok "
                  << n_tok << " t " << t << " o " << o << (p ? " threaded" : "");
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, KQuantInt8Test,
                         ::testing::Values(GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ4_1,
                                           GgmlType::kQ5_0, GgmlType::kQ5_1,
                                           GgmlType::kIQ4_NL, GgmlType::kIQ4_XS),
                         [](const auto& info) {
                           return std::string(GgmlTypeName(static_cast<uint32_t>(info.param)));
                         });

}  // namespace
}  // namespace kvtier::model::int8
