// AVX2 int8 kernels (see matmul_int8.h): the natural activation layout, one 32-value block per
// 256-bit vector. Signed weight codes (q8_0; q4_0: nibble - 8; q5_0: 5 bits - 16; iq4_nl:
// the codebook, -127..113): vpmaddubsw multiplies |w| (unsigned) by sign(x, w): pair sums
// stay within 2 * 128 * 127 < 2^15, so nothing saturates. Unsigned codes with a min (q4_1,
// q5_1: 0..31): vpmaddubsw multiplies them by x directly, and the block adds m * d_x * (sum
// of the codes). vpmaddwd sums pairs to int32 and one FMA per block applies d_w * d_x.
// Compiled with a target attribute, run only where DetectIsa() found AVX2 + FMA + F16C.
// Stateless; thread-safe.
#include <cstddef>

#include "kvtier/gguf.h"
#include "model/matmul_int8.h"
#include "quant/format_traits.h"
#include "weights/blocks.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstring>

#define MM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MM_AVX2_INL inline __attribute__((always_inline)) MM_AVX2

namespace kvtier::model::int8 {
namespace {

MM_AVX2_INL float ScaleOf(const uint8_t* b) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  return _cvtsh_ss(h);
}

struct A2Q8_0 {
  static constexpr size_t kBytes = Q8_0Traits::kBlockBytes;
  static constexpr bool kHasMin = false;
  static MM_AVX2_INL __m256i Codes(const uint8_t* b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + Q8_0Traits::kCodesOffset));
  }
};
struct A2Q4_0 {
  static constexpr size_t kBytes = Q4_0Traits::kBlockBytes;
  static constexpr bool kHasMin = false;
  static MM_AVX2_INL __m256i Codes(const uint8_t* b) {  // [lo nibbles 0..15, hi nibbles 16..31]
    const __m128i v =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + Q4_0Traits::kCodesOffset));
    const __m256i n = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v),
                                       _mm256_set1_epi8(15));
    return _mm256_sub_epi8(n, _mm256_set1_epi8(Q4_0Traits::kZeroPoint));
  }
};

// Bit i of the little-endian uint32 at p as 16 (or 0) in byte i.
MM_AVX2_INL __m256i HighBits16(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  const __m256i spread = _mm256_shuffle_epi8(  // byte i <- byte i / 8 of qh
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                          _mm256_set1_epi8(16));
}

// The 32-value nibble types of weights/blocks.h: nibbles [lo 0..15 | hi 16..31] at kQs, then
// q5_*: | the 5th bits; q5_0: - 16; iq4_nl: through the codebook. q4_1 / q5_1: unsigned codes
// and a min.
template <class B, bool kHigh, bool kMin, bool kTable>
struct A2Nib {
  static constexpr size_t kBytes = sizeof(B);
  static constexpr bool kHasMin = kMin;
  static MM_AVX2_INL __m256i Codes(const uint8_t* b) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(B, qs)));
    __m256i n = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
    if constexpr (kTable) {
      const __m256i tbl = _mm256_broadcastsi128_si256(_mm_setr_epi8(
          -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
      return _mm256_shuffle_epi8(tbl, n);
    }
    if constexpr (kHigh) {
      n = _mm256_or_si256(n, HighBits16(b + offsetof(B, qh)));
      if constexpr (!kMin) n = _mm256_sub_epi8(n, _mm256_set1_epi8(16));  // q5_0
    }
    return n;
  }
  static MM_AVX2_INL float Min(const uint8_t* b) {
    if constexpr (kMin) {
      return ScaleOf(b + offsetof(B, m));
    } else {
      return 0.0f;
    }
  }
};
using A2Q4_1 = A2Nib<weights::BlockQ4_1, false, true, false>;
using A2Q5_0 = A2Nib<weights::BlockQ5_0, true, false, false>;
using A2Q5_1 = A2Nib<weights::BlockQ5_1, true, true, false>;
using A2IQ4_NL = A2Nib<weights::BlockIQ4_NL, false, false, true>;
static_assert(offsetof(weights::BlockQ4_1, d) == 0 && offsetof(weights::BlockQ5_0, d) == 0 &&
              offsetof(weights::BlockQ5_1, d) == 0 && offsetof(weights::BlockIQ4_NL, d) == 0,
              "ScaleOf reads d at the block start");

MM_AVX2_INL float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 4 rows x NT tokens.
template <class W, size_t NT>
MM_AVX2 void TileAvx2(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                      size_t K, float* y, size_t ldy) {
  constexpr size_t R = 4;
  __m256 acc[R][NT];
  for (auto& a : acc) {
    for (auto& v : a) v = _mm256_setzero_ps();
  }
  const __m256i ones = _mm256_set1_epi16(1);
  float mins[R][NT] = {};  // W::kHasMin: sum over blocks of m * d_x * (sum of x codes)
  for (size_t b = 0; b < K / 32; ++b) {
    __m256i aq[NT];
    float dx[NT], xs[NT] = {};
    (void)xs;
    for (size_t t = 0; t < NT; ++t) {
      const uint8_t* a = act + t * stride;
      aq[t] = _mm256_load_si256(reinterpret_cast<const __m256i*>(ActCodes(a) + 32 * b));
      dx[t] = ActScales(a, K)[b];
      if constexpr (W::kHasMin) xs[t] = dx[t] * static_cast<float>(ActSums(a, K)[b]);
    }
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* blk = rows[r] + b * W::kBytes;
      const __m256i w = W::Codes(blk);
      const float dw = ScaleOf(blk);
      if constexpr (W::kHasMin) {  // unsigned codes (at most 31): x's signs as they are
        const float m = W::Min(blk);
        for (size_t t = 0; t < NT; ++t) {
          const __m256i p16 = _mm256_maddubs_epi16(w, aq[t]);
          const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
          acc[r][t] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * dx[t]), acc[r][t]);
          mins[r][t] += m * xs[t];
        }
      } else {
        const __m256i aw = _mm256_sign_epi8(w, w);
        for (size_t t = 0; t < NT; ++t) {
          const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(aq[t], w));
          const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
          acc[r][t] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * dx[t]), acc[r][t]);
        }
      }
    }
  }
  for (size_t t = 0; t < NT; ++t) {
    for (size_t r = 0; r < nr; ++r) y[t * ldy + r] = HSum(acc[r][t]) + mins[r][t];
  }
}

template <class W>
void Tile(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride, size_t nt,
          size_t K, float* y, size_t ldy) {
  switch (nt) {
    case 1: return TileAvx2<W, 1>(rows, nr, act, stride, K, y, ldy);
    default: return TileAvx2<W, 2>(rows, nr, act, stride, K, y, ldy);
  }
}

constexpr Int8Kernels kQ8_0 = {"q8_0 int8 avx2", 4, 2, NaturalActBytes, QuantizeNatural,
                               Tile<A2Q8_0>};
constexpr Int8Kernels kQ4_0 = {"q4_0 int8 avx2", 4, 2, NaturalActBytes, QuantizeNatural,
                               Tile<A2Q4_0>};
constexpr Int8Kernels kQ4_1 = {"q4_1 int8 avx2", 4, 2, NaturalActBytes, QuantizeNatural,
                               Tile<A2Q4_1>};
constexpr Int8Kernels kQ5_0 = {"q5_0 int8 avx2", 4, 2, NaturalActBytes, QuantizeNatural,
                               Tile<A2Q5_0>};
constexpr Int8Kernels kQ5_1 = {"q5_1 int8 avx2", 4, 2, NaturalActBytes, QuantizeNatural,
                               Tile<A2Q5_1>};
constexpr Int8Kernels kIQ4_NL = {"iq4_nl int8 avx2", 4, 2, NaturalActBytes, QuantizeNatural,
                                 Tile<A2IQ4_NL>};

}  // namespace

const Int8Kernels* Int8KernelsAvx2(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ8_0: return &kQ8_0;
    case GgmlType::kQ4_0: return &kQ4_0;
    case GgmlType::kQ4_1: return &kQ4_1;
    case GgmlType::kQ5_0: return &kQ5_0;
    case GgmlType::kQ5_1: return &kQ5_1;
    case GgmlType::kIQ4_NL: return &kIQ4_NL;
    default: return nullptr;
  }
}

}  // namespace kvtier::model::int8

#else
namespace kvtier::model::int8 {
const Int8Kernels* Int8KernelsAvx2(uint32_t) { return nullptr; }
}  // namespace kvtier::model::int8
#endif
