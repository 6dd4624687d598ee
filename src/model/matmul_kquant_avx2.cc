// AVX2 int8 kernels of the K-quants and IQ4_XS over the K-quant activation layout
// (matmul_int8.h). One 32-value run per 256-bit vector: vpmaddubsw of the unsigned codes
// (Q2_K 0..3, Q3_K 0..7, Q4_K 0..15, Q5_K 0..31, Q6_K 0..63: pair sums within
// 2 * 63 * 127 < 2^15, no saturation) by the signed activation codes, vpmaddwd to 8 int32
// lanes of 4 values each.
//   Q4_K / Q5_K: one scale d * sc_j * d_x per 32 values; the mins once per super-block in
//         scalar code, dmin * m_j * (d_x * sum of codes). Q5_K's 5th bit as 16.
//   Q2_K / Q3_K: scales per 16 values (lanes 0-3, 4-7); Q3_K's high bit as 4 and each lane
//         starting at init6 / 8 (-4 x its 4 codes); Q2_K's mins per 16 values in scalar code,
//         dmin * m_g * d_x * (sum of the 16 codes, from init6).
//   IQ4_XS: codebook values (signed) times the codes as |w| x sign(x, w), as the AVX2 q4_0
//         kernel; scale d * (ls - 32) * d_x per 32 values.
//   Q6_K: each lane adds init6 (-32 x its 4 codes), so it is the exact signed sum; lanes 0-3
//         and 4-7 are two 16-value groups with their own scale.
// Compiled with a target attribute, run only where DetectIsa() found AVX2 + FMA + F16C.
// Stateless; thread-safe.
#include "kvtier/gguf.h"
#include "model/kquant_layout.h"
#include "model/matmul_int8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#define MM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MM_AVX2_INL inline __attribute__((always_inline)) MM_AVX2

namespace kvtier::model::int8 {
namespace {

MM_AVX2_INL float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

MM_AVX2_INL float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

MM_AVX2_INL __m256i Dot(__m256i u, const int8_t* c) {
  const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(c));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
}

template <bool kFive, size_t NT>
MM_AVX2 void TileQ45_K(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                       size_t K, float* y, size_t ldy) {
  constexpr size_t R = 4;
  constexpr size_t kBytes = kFive ? kQ5KBytes : kQ4KBytes;
  constexpr size_t kD = kFive ? kQ5KD : kQ4KD, kDmin = kFive ? kQ5KDmin : kQ4KDmin;
  constexpr size_t kScales = kFive ? kQ5KScales : kQ4KScales, kQs = kFive ? kQ5KQs : kQ4KQs;
  const __m256i m4 = _mm256_set1_epi8(15), b16 = _mm256_set1_epi8(16);
  __m256 acc[R][NT];
  float macc[R][NT] = {};
  for (auto& a : acc) {
    for (auto& v : a) v = _mm256_setzero_ps();
  }
  for (size_t i = 0; i < K / kQK; ++i) {
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* blk = rows[r] + i * kBytes;
      const float d = Half(blk + kD), dmin = Half(blk + kDmin);
      uint8_t sc[8], mn[8];
      for (size_t j = 0; j < 8; ++j) Q4KScaleMin(blk + kScales, j, &sc[j], &mn[j]);
      for (size_t t = 0; t < NT; ++t) {
        const float* xs = KActXs(act + t * stride, K) + 8 * i;
        float m = 0.0f;
        for (size_t j = 0; j < 8; ++j) m += static_cast<float>(mn[j]) * xs[j];
        macc[r][t] += dmin * m;
      }
      for (size_t k = 0; k < 4; ++k) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQs + 32 * k));
        __m256i lo = _mm256_and_si256(v, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if constexpr (kFive) {  // bit 2k of qh[l] -> value 64k + l, bit 2k + 1 -> 64k + 32 + l
          const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ5KQh));
          const __m128i s0 = _mm_cvtsi32_si128(static_cast<int>(2 * k));
          const __m128i s1 = _mm_cvtsi32_si128(static_cast<int>(2 * k + 1));
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(h, s0), 4), b16));
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(h, s1), 4), b16));
        }
        for (size_t t = 0; t < NT; ++t) {
          const uint8_t* a = act + t * stride;
          const int8_t* c = ActCodes(a) + kQK * i + 64 * k;
          const float* dx = ActScales(a, K) + 8 * i + 2 * k;
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot(lo, c)),
                                      _mm256_set1_ps(d * sc[2 * k] * dx[0]), acc[r][t]);
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot(hi, c + 32)),
                                      _mm256_set1_ps(d * sc[2 * k + 1] * dx[1]), acc[r][t]);
        }
      }
    }
  }
  for (size_t t = 0; t < NT; ++t) {
    for (size_t r = 0; r < nr; ++r) y[t * ldy + r] = HSum(acc[r][t]) - macc[r][t];
  }
}

// Q2_K (kThree false) and Q3_K, 32-value runs: run s of half n is bits 2s, 2s + 1 of
// qs[32 n + l] (kquant_layout.h's Q2Code); Q3_K's high bit 4 n + s of hmask[l].
template <bool kThree, size_t NT>
MM_AVX2 void TileQ23_K(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                       size_t K, float* y, size_t ldy) {
  constexpr size_t R = 4;
  constexpr size_t kBytes = kThree ? kQ3KBytes : kQ2KBytes;
  constexpr size_t kQs = kThree ? kQ3KQs : kQ2KQs;
  const __m256i m2 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
  __m256 acc[R][NT];
  float macc[R][NT] = {};
  for (auto& a : acc) {
    for (auto& v : a) v = _mm256_setzero_ps();
  }
  for (size_t i = 0; i < K / kQK; ++i) {
    // Q2_K's mins: per token, the sums of each 16 codes (from init6 = -32 x each 4).
    int32_t csum[NT][16] = {};
    (void)csum;
    if constexpr (!kThree) {
      for (size_t t = 0; t < NT; ++t) {
        const int32_t* i6 = KActInit6(act + t * stride, K) + kQK * i / 4;
        for (size_t g = 0; g < 16; ++g) {
          csum[t][g] = -(i6[4 * g] + i6[4 * g + 1] + i6[4 * g + 2] + i6[4 * g + 3]) / 32;
        }
      }
    }
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* blk = rows[r] + i * kBytes;
      const float d = Half(blk + (kThree ? kQ3KD : kQ2KD));
      float sc[16];
      if constexpr (kThree) {
        int8_t s3[16];
        weights::UnpackQ3KScales(blk + kQ3KScales, s3);
        for (size_t g = 0; g < 16; ++g) sc[g] = d * static_cast<float>(s3[g]);
      } else {
        const float dmin = Half(blk + kQ2KDmin);
        for (size_t g = 0; g < 16; ++g) sc[g] = d * static_cast<float>(blk[kQ2KScales + g] & 15);
        for (size_t t = 0; t < NT; ++t) {
          const float dx = ActScales(act + t * stride, K)[8 * i];  // one per super-block
          float m = 0.0f;
          for (size_t g = 0; g < 16; ++g) {
            m += static_cast<float>(blk[kQ2KScales + g] >> 4) * static_cast<float>(csum[t][g]);
          }
          macc[r][t] += dmin * dx * m;
        }
      }
      for (size_t n = 0; n < 2; ++n) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQs + 32 * n));
        for (size_t s = 0; s < 4; ++s) {
          const __m128i sh = _mm_cvtsi32_si128(static_cast<int>(2 * s));
          __m256i u = _mm256_and_si256(_mm256_srl_epi16(q, sh), m2);
          if constexpr (kThree) {
            const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ3KHmask));
            const __m128i hb = _mm_cvtsi32_si128(static_cast<int>(4 * n + s));
            u = _mm256_or_si256(u, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(h, hb), m1), 2));
          }
          const size_t v0 = 128 * n + 32 * s;  // first value of the run
          for (size_t t = 0; t < NT; ++t) {
            const uint8_t* a = act + t * stride;
            __m256i dot = Dot(u, ActCodes(a) + kQK * i + v0);
            if constexpr (kThree) {
              dot = _mm256_add_epi32(dot, _mm256_srai_epi32(_mm256_loadu_si256(
                  reinterpret_cast<const __m256i*>(KActInit6(a, K) + (kQK * i + v0) / 4)), 3));
            }
            const float dx = ActScales(a, K)[(kQK * i + v0) / 32];
            const __m256 sv = _mm256_set_m128(_mm_set1_ps(sc[v0 / 16 + 1] * dx),
                                              _mm_set1_ps(sc[v0 / 16] * dx));
            acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), sv, acc[r][t]);
          }
        }
      }
    }
  }
  for (size_t t = 0; t < NT; ++t) {
    for (size_t r = 0; r < nr; ++r) y[t * ldy + r] = HSum(acc[r][t]) - macc[r][t];
  }
}

// IQ4_XS: sub-block ib's 16 qs bytes hold values 0-15 (low nibbles) and 16-31 (high).
template <size_t NT>
MM_AVX2 void TileIQ4_XS(const uint8_t* const* rows, size_t nr, const uint8_t* act,
                        size_t stride, size_t K, float* y, size_t ldy) {
  constexpr size_t R = 4;
  constexpr size_t kBytes = sizeof(weights::BlockIQ4_XS);
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i tbl = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][NT];
  for (auto& a : acc) {
    for (auto& v : a) v = _mm256_setzero_ps();
  }
  for (size_t i = 0; i < K / kQK; ++i) {
    for (size_t r = 0; r < R; ++r) {
      weights::BlockIQ4_XS blk;
      std::memcpy(&blk, rows[r] + i * kBytes, kBytes);
      const float d = Half(rows[r] + i * kBytes + offsetof(weights::BlockIQ4_XS, d));
      for (int ib = 0; ib < 8; ++ib) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs + 16 * ib));
        const __m256i w = _mm256_shuffle_epi8(
            tbl, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4));
        const __m256i aw = _mm256_sign_epi8(w, w);
        const float sc = d * static_cast<float>(weights::IQ4XSScale(blk, ib) - 32);
        for (size_t t = 0; t < NT; ++t) {
          const uint8_t* a = act + t * stride;
          const __m256i q = _mm256_load_si256(
              reinterpret_cast<const __m256i*>(ActCodes(a) + kQK * i + 32 * ib));
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(q, w)), ones);
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
                                      _mm256_set1_ps(sc * ActScales(a, K)[8 * i + ib]), acc[r][t]);
        }
      }
    }
  }
  for (size_t t = 0; t < NT; ++t) {
    for (size_t r = 0; r < nr; ++r) y[t * ldy + r] = HSum(acc[r][t]);
  }
}

template <size_t NT>
MM_AVX2 void TileQ6_K(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                      size_t K, float* y, size_t ldy) {
  constexpr size_t R = 4;
  const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
  __m256 acc[R][NT];
  for (auto& a : acc) {
    for (auto& v : a) v = _mm256_setzero_ps();
  }
  for (size_t i = 0; i < K / kQK; ++i) {
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* blk = rows[r] + i * kQ6KBytes;
      const float d = Half(blk + kQ6KD);
      const auto* sc = reinterpret_cast<const int8_t*>(blk + kQ6KScales);
      for (size_t n = 0; n < 2; ++n) {
        const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ6KQl + 64 * n));
        const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ6KQl + 64 * n + 32));
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ6KQh + 32 * n));
        // The four 32-value quarters of this half, in value order.
        const __m256i u[4] = {
            _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4)),
            _mm256_or_si256(_mm256_and_si256(l1, m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4))};
        for (size_t p = 0; p < 4; ++p) {
          const size_t v0 = 128 * n + 32 * p;  // first value of the quarter
          const float s0 = d * sc[v0 / 16], s1 = d * sc[v0 / 16 + 1];
          for (size_t t = 0; t < NT; ++t) {
            const uint8_t* a = act + t * stride;
            const __m256i init = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(KActInit6(a, K) + (kQK * i + v0) / 4));
            const __m256i dot = _mm256_add_epi32(Dot(u[p], ActCodes(a) + kQK * i + v0), init);
            const float dx = ActScales(a, K)[(kQK * i + v0) / 32];
            const __m256 s = _mm256_set_m128(_mm_set1_ps(s1 * dx), _mm_set1_ps(s0 * dx));
            acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), s, acc[r][t]);
          }
        }
      }
    }
  }
  for (size_t t = 0; t < NT; ++t) {
    for (size_t r = 0; r < nr; ++r) y[t * ldy + r] = HSum(acc[r][t]);
  }
}

template <void (*F1)(const uint8_t* const*, size_t, const uint8_t*, size_t, size_t, float*,
                     size_t),
          void (*F2)(const uint8_t* const*, size_t, const uint8_t*, size_t, size_t, float*,
                     size_t)>
void Any(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride, size_t nt,
         size_t K, float* y, size_t ldy) {
  if (nt == 1) return F1(rows, nr, act, stride, K, y, ldy);
  return F2(rows, nr, act, stride, K, y, ldy);
}

constexpr Int8Kernels kQ4_K = {"q4_K int8 avx2", 4, 2, KActBytes, QuantizeKAct,
                               Any<TileQ45_K<false, 1>, TileQ45_K<false, 2>>};
constexpr Int8Kernels kQ5_K = {"q5_K int8 avx2", 4, 2, KActBytes, QuantizeKAct,
                               Any<TileQ45_K<true, 1>, TileQ45_K<true, 2>>};
constexpr Int8Kernels kQ2_K = {"q2_K int8 avx2", 4, 2, KActBytes, QuantizeKAct,
                               Any<TileQ23_K<false, 1>, TileQ23_K<false, 2>>};
constexpr Int8Kernels kQ3_K = {"q3_K int8 avx2", 4, 2, KActBytes, QuantizeKAct,
                               Any<TileQ23_K<true, 1>, TileQ23_K<true, 2>>};
constexpr Int8Kernels kIQ4_XS = {"iq4_xs int8 avx2", 4, 2, KActBytes, QuantizeKAct,
                                 Any<TileIQ4_XS<1>, TileIQ4_XS<2>>};
constexpr Int8Kernels kQ6_K = {"q6_K int8 avx2", 4, 2, KActBytes, QuantizeKAct,
                               Any<TileQ6_K<1>, TileQ6_K<2>>};

}  // namespace

const Int8Kernels* Int8KernelsAvx2KQuant(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ4_K: return &kQ4_K;
    case GgmlType::kQ5_K: return &kQ5_K;
    case GgmlType::kQ2_K: return &kQ2_K;
    case GgmlType::kQ3_K: return &kQ3_K;
    case GgmlType::kQ6_K: return &kQ6_K;
    case GgmlType::kIQ4_XS: return &kIQ4_XS;
    default: return nullptr;
  }
}

}  // namespace kvtier::model::int8

#else
namespace kvtier::model::int8 {
const Int8Kernels* Int8KernelsAvx2KQuant(uint32_t) { return nullptr; }
}  // namespace kvtier::model::int8
#endif
