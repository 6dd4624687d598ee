// AVX-512 VNNI decode kernel of IQ4_XS (256-value super-blocks of eight 32-value sub-blocks,
// 4-bit codebook indices, a signed 6-bit scale per sub-block) over its own activation layout
// (per token, K a multiple of 256):
//   codes [K / 128][2][64] int8 | init [K / 128][16] int32 | d [K / 256] f32
// The codes are ggml's q8_K codes (one scale d per 256 values, the same codes as
// QuantizeKAct), ordered per 128 values (sub-blocks 4 h .. 4 h + 3) as [values 0-15 of each
// sub-block][values 16-31 of each]: exactly the low / high nibbles of the 64 qs bytes of the
// four sub-blocks. So per row and 128 values: one 64-byte load, and / shift, two vpshufb
// through the codebook + 128 (unsigned), two vpdpbusd into one int32 vector that starts at
// init (-128 x the lane's 8 activation codes), so it ends at the exact signed sum, and int32
// lane m belongs to sub-block 4 h + m / 4: one vpmulld by the lanes' scales (ls - 32) and an
// add into the super-block's int32 sum. The four rows' sums are reduced to one vector and
// scaled once per super-block by d_r d_x. The scalar reference is TileIQ4_XSRef
// (matmul_kquant_ref.cc): the same codes and integer sums. Compiled with a target attribute;
// run only where DetectIsa() found AVX-512 VNNI. Stateless; thread-safe.
#include <cstddef>

#include "kvtier/gguf.h"
#include "kvtier/weights.h"
#include "model/kquant_layout.h"
#include "model/matmul_int8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "model/matmul_avx512_util.h"

namespace kvtier::model::int8 {
namespace {

using weights::BlockIQ4_XS;
constexpr size_t kXsBytes = sizeof(BlockIQ4_XS);

size_t ActXsBytes(size_t K) { return (K + K / 2 + K / 64 + 63) / 64 * 64; }
inline const int32_t* ActXsInit(const uint8_t* act, size_t K) {
  return reinterpret_cast<const int32_t*>(act + K);
}
inline const float* ActXsD(const uint8_t* act, size_t K) {
  return reinterpret_cast<const float*>(act + K + K / 2);
}

// One token: per 256 values amax, d = amax / 127, codes = nearest-even round(x * (127 / amax))
// (the f32 products of QuantizeKAct) in the order above, and the init lanes.
MM_VNNI void QuantizeActXs(const float* x, size_t K, uint8_t* act) {
  auto* codes = reinterpret_cast<int8_t*>(act);
  auto* init = const_cast<int32_t*>(ActXsInit(act, K));
  auto* dd = const_cast<float*>(ActXsD(act, K));
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512i ones = _mm512_set1_epi8(1);
  for (size_t i = 0; i < K / kQK; ++i) {
    const float* xb = x + kQK * i;  // [256]
    __m512 m = _mm512_setzero_ps();
    for (size_t c = 0; c < 16; ++c)
      m = _mm512_max_ps(m, _mm512_and_ps(_mm512_loadu_ps(xb + 16 * c), abs_mask));
    const float amax = _mm512_reduce_max_ps(m);
    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    dd[i] = amax / 127.0f;
    for (size_t c = 0; c < 16; ++c) {  // values [16 c, 16 c + 16): sub-block c / 2, g = c % 2
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * c), id));
      const size_t sb = c / 2, g = c % 2, h = sb / 4, j = sb % 4;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + kQK * i + 128 * h + 64 * g + 16 * j),
                       _mm512_cvtepi32_epi8(q));
    }
    for (size_t h = 0; h < 2; ++h) {
      const int8_t* c = codes + kQK * i + 128 * h;
      const __m512i s4 = _mm512_dpbusd_epi32(
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(c)), ones,
          _mm512_loadu_si512(c + 64));
      _mm512_storeu_si512(init + 32 * i + 16 * h, _mm512_mullo_epi32(s4, _mm512_set1_epi32(-128)));
    }
  }
}

// Row r's 8 sub-block scales (ls - 32) as int32 lanes 0-7.
MM_VNNI_INL __m256i XsScales(const uint8_t* blk) {
  uint32_t sl;
  uint16_t sh;
  std::memcpy(&sl, blk + offsetof(BlockIQ4_XS, scales_l), 4);
  std::memcpy(&sh, blk + offsetof(BlockIQ4_XS, scales_h), 2);
  const __m256i lo =
      _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(sl)),
                                         _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                       _mm256_set1_epi32(15));
  const __m256i hi =
      _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(uint32_t{sh} << 4)),
                                         _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                       _mm256_set1_epi32(0x30));
  return _mm256_sub_epi32(_mm256_or_si256(lo, hi), _mm256_set1_epi32(32));
}

template <size_t NT>
MM_VNNI void TileIQ4_XS(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                        size_t K, float* y, size_t ldy) {
  constexpr size_t R = 4;
  const __m512i m4 = _mm512_set1_epi8(15);
  const __m512i tbl = _mm512_broadcast_i32x4(
      _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, static_cast<char>(129), static_cast<char>(141),
                    static_cast<char>(153), static_cast<char>(166), static_cast<char>(181),
                    static_cast<char>(197), static_cast<char>(217), static_cast<char>(241)));
  // int32 lane m of half h -> sub-block 4 h + m / 4.
  const __m512i sidx[2] = {_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                           _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7)};
  const int8_t* codes[NT];
  const int32_t* init[NT];
  const float* dx[NT];
  for (size_t t = 0; t < NT; ++t) {
    codes[t] = ActCodes(act + t * stride);
    init[t] = ActXsInit(act + t * stride, K);
    dx[t] = ActXsD(act + t * stride, K);
  }
  __m128 acc[NT];  // rows 0-3
  for (auto& v : acc) v = _mm_setzero_ps();
  for (size_t i = 0; i < K / kQK; ++i) {
    __m512i ia[R][NT];
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* blk = rows[r] + i * kXsBytes;
      const __m512i ls = _mm512_castsi256_si512(XsScales(blk));
      for (size_t t = 0; t < NT; ++t) ia[r][t] = _mm512_setzero_si512();
      for (size_t h = 0; h < 2; ++h) {
        const __m512i v = _mm512_loadu_si512(blk + offsetof(BlockIQ4_XS, qs) + 64 * h);
        const __m512i lo = _mm512_shuffle_epi8(tbl, _mm512_and_si512(v, m4));
        const __m512i hi = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
        const __m512i sk = _mm512_permutexvar_epi32(sidx[h], ls);
        for (size_t t = 0; t < NT; ++t) {
          const int8_t* c = codes[t] + kQK * i + 128 * h;
          __m512i p = _mm512_loadu_si512(init[t] + 32 * i + 16 * h);
          p = _mm512_dpbusd_epi32(p, lo, _mm512_load_si512(c));
          p = _mm512_dpbusd_epi32(p, hi, _mm512_load_si512(c + 64));
          ia[r][t] = _mm512_add_epi32(ia[r][t], _mm512_mullo_epi32(p, sk));
        }
      }
    }
    const __m128 d4 = Halves4(rows, i, kXsBytes, offsetof(BlockIQ4_XS, d));
    for (size_t t = 0; t < NT; ++t) {
      const __m128i s = RowSums4(ia[0][t], ia[1][t], ia[2][t], ia[3][t]);
      acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(d4, _mm_set1_ps(dx[t][i])), acc[t]);
    }
  }
  const __mmask8 m = static_cast<__mmask8>((1u << nr) - 1);
  for (size_t t = 0; t < NT; ++t) _mm_mask_storeu_ps(y + t * ldy, m, acc[t]);
}

void TileIQ4_XSAny(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                   size_t nt, size_t K, float* y, size_t ldy) {
  switch (nt) {
    case 1:
      return TileIQ4_XS<1>(rows, nr, act, stride, K, y, ldy);
    case 2:
      return TileIQ4_XS<2>(rows, nr, act, stride, K, y, ldy);
    case 3:
      return TileIQ4_XS<3>(rows, nr, act, stride, K, y, ldy);
    default:
      return TileIQ4_XS<4>(rows, nr, act, stride, K, y, ldy);
  }
}

constexpr Int8Kernels kIQ4_XS = {
    "iq4_xs int8 avx512vnni", 4, 4, ActXsBytes, QuantizeActXs, TileIQ4_XSAny};

}  // namespace

const Int8Kernels* Int8KernelsAvx512IQ4XS() { return &kIQ4_XS; }

}  // namespace kvtier::model::int8

#else
namespace kvtier::model::int8 {
const Int8Kernels* Int8KernelsAvx512IQ4XS() { return nullptr; }
}  // namespace kvtier::model::int8
#endif
