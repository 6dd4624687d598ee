// AVX2 int8 kernels of Q4_K and Q6_K (Q4_K_M's two types) over the K-quant activation layout
// (matmul_int8.h). One 32-value run per 256-bit vector: vpmaddubsw of the unsigned codes
// (Q4_K 0..15, Q6_K 0..63: pair sums within 2 * 63 * 127 < 2^15, no saturation) by the signed
// activation codes, vpmaddwd to 8 int32 lanes of 4 values each.
//   Q4_K: one scale d * sc_j * d_x per 32 values; the mins once per super-block in scalar
//         code, dmin * m_j * (d_x * sum of codes).
//   Q6_K: each lane adds init6 (-32 x its 4 codes), so it is the exact signed sum; lanes 0-3
//         and 4-7 are two 16-value groups with their own scale.
// Compiled with a target attribute, run only where DetectIsa() found AVX2 + FMA + F16C.
// Stateless; thread-safe.
#include "kvtier/gguf.h"
#include "model/kquant_layout.h"
#include "model/matmul_int8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

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

template <size_t NT>
MM_AVX2 void TileQ4_K(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                      size_t K, float* y, size_t ldy) {
  constexpr size_t R = 4;
  const __m256i m4 = _mm256_set1_epi8(15);
  __m256 acc[R][NT];
  float macc[R][NT] = {};
  for (auto& a : acc) {
    for (auto& v : a) v = _mm256_setzero_ps();
  }
  for (size_t i = 0; i < K / kQK; ++i) {
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* blk = rows[r] + i * kQ4KBytes;
      const float d = Half(blk + kQ4KD), dmin = Half(blk + kQ4KDmin);
      uint8_t sc[8], mn[8];
      for (size_t j = 0; j < 8; ++j) Q4KScaleMin(blk + kQ4KScales, j, &sc[j], &mn[j]);
      for (size_t t = 0; t < NT; ++t) {
        const float* xs = KActXs(act + t * stride, K) + 8 * i;
        float m = 0.0f;
        for (size_t j = 0; j < 8; ++j) m += static_cast<float>(mn[j]) * xs[j];
        macc[r][t] += dmin * m;
      }
      for (size_t k = 0; k < 4; ++k) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ4KQs + 32 * k));
        const __m256i lo = _mm256_and_si256(v, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
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
                               Any<TileQ4_K<1>, TileQ4_K<2>>};
constexpr Int8Kernels kQ6_K = {"q6_K int8 avx2", 4, 2, KActBytes, QuantizeKAct,
                               Any<TileQ6_K<1>, TileQ6_K<2>>};

}  // namespace

const Int8Kernels* Int8KernelsAvx2KQuant(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ4_K: return &kQ4_K;
    case GgmlType::kQ6_K: return &kQ6_K;
    default: return nullptr;
  }
}

}  // namespace kvtier::model::int8

#else
namespace kvtier::model::int8 {
const Int8Kernels* Int8KernelsAvx2KQuant(uint32_t) { return nullptr; }
}  // namespace kvtier::model::int8
#endif
