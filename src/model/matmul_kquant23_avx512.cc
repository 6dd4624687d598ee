// AVX-512 VNNI decode kernels of Q2_K and Q3_K (the 2-bit / 3-bit K-quants; scale per 16
// values), over their own activation layout (per token, K a multiple of 256):
//   codes [K / 256][4][64] int8 | bsum [K / 16] int16 | d [K / 256] f32
// The codes are ggml's q8_K codes (one scale d per 256 values, round(x * 127 / amax), the same
// codes as QuantizeKAct), reordered per super-block so that step s (0..3) holds values
// [32 s, 32 s + 32) then [128 + 32 s, 128 + 32 s + 32): exactly the 2-bit field s of the
// block's 64 qs bytes (qs[32 n + l] bits 2 s, 2 s + 1 = value 128 n + 32 s + l). So one 64-byte
// load per row and super-block, and per step: shift + and (Q3_K: the hmask bit rotated to bit
// 2 and merged by one vpternlog), vpmaddubsw (codes x int8: pairs within 2 x 7 x 127) and
// vpdpwssd by the step's four 16-value-group scales (one vpshufb of the scale words) into one
// int32 sum per row and token for the super-block. The per-group activation sums (bsum) enter
// once per super-block by one vpmaddwd: Q2_K's mins (x = d sc q - dmin m: - dmin d_x sum_g
// m_g bsum_g) and Q3_K's offset (x = d sc (u - 4), u = q + 4 h: - 4 sum_g sc_g bsum_g, in
// the same int32 sum). Exact int32 sums; one conversion and FMA per super-block (Q2_K two).
// The scalar reference is TileQ23_KRef (matmul_kquant_ref.cc): the same codes and integer sums.
// Compiled with a target attribute; run only where DetectIsa() found AVX-512 VNNI. Stateless;
// thread-safe.
#include "kvtier/gguf.h"
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

size_t Act23Bytes(size_t K) { return (K + K / 8 + K / 64 + 63) / 64 * 64; }
inline const int16_t* Act23Bsum(const uint8_t* act, size_t K) {
  return reinterpret_cast<const int16_t*>(act + K);
}
inline const float* Act23D(const uint8_t* act, size_t K) {
  return reinterpret_cast<const float*>(act + K + K / 8);
}

// One token: per 256 values amax, d = amax / 127, codes = nearest-even round(x * (127 / amax))
// (the f32 products of QuantizeKAct), 16-value sums, codes stored in the step order above.
MM_VNNI void QuantizeAct23(const float* x, size_t K, uint8_t* act) {
  auto* codes = reinterpret_cast<int8_t*>(act);
  auto* bsum = const_cast<int16_t*>(Act23Bsum(act, K));
  auto* dd = const_cast<float*>(Act23D(act, K));
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (size_t i = 0; i < K / kQK; ++i) {
    const float* xb = x + kQK * i;  // [256]
    __m512 m = _mm512_setzero_ps();
    for (size_t c = 0; c < 16; ++c)
      m = _mm512_max_ps(m, _mm512_and_ps(_mm512_loadu_ps(xb + 16 * c), abs_mask));
    const float amax = _mm512_reduce_max_ps(m);
    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    dd[i] = amax / 127.0f;
    for (size_t c = 0; c < 16; ++c) {  // values [16 c, 16 c + 16): half n, field s, 16-run h
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * c), id));
      bsum[16 * i + c] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
      const size_t n = c / 8, s = (c % 8) / 2, h = c % 2;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + kQK * i + 64 * s + 32 * n + 16 * h),
                       _mm512_cvtepi32_epi8(q));
    }
  }
}

// Q3_K's 16 signed 6-bit scales (weights::UnpackQ3KScales) as 16 int8 lanes: low nibbles of
// bytes 0-7 (s < 8) then their high nibbles (s >= 8); bits 2 (s / 4), + 1 of byte 8 + s % 4 on
// top (a variable shift of the 32-bit word of bytes 8-11 by 2 (s / 4) per lane s / 4).
MM_VNNI_INL __m128i Q3KScales(const uint8_t* q) {
  const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
  const __m128i lows =
      _mm_and_si128(_mm_unpacklo_epi64(a, _mm_srli_epi16(a, 4)), _mm_set1_epi8(15));
  uint32_t w;
  std::memcpy(&w, q + 8, 4);
  const __m128i h = _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(w)), _mm_setr_epi32(0, 2, 4, 6));
  const __m128i highs = _mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi8(3)), 4);
  return _mm_sub_epi8(_mm_or_si128(lows, highs), _mm_set1_epi8(32));
}

// The 16 group scales (int16 words 0-15) of one super-block row: Q2_K sc & 15, Q3_K signed.
template <bool kThree>
MM_VNNI_INL __m256i Scales16(const uint8_t* blk) {
  if constexpr (kThree) return _mm256_cvtepi8_epi16(Q3KScales(blk + kQ3KScales));
  const __m256i b =
      _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ2KScales)));
  return _mm256_and_si256(b, _mm256_set1_epi16(15));
}

// vpshufb control of step s over [W0-7 | W0-7 | W8-15 | W8-15]: 128-bit lane 0 -> word 2 s
// (group 2 s: values 32 s ..+ 16), lane 1 -> 2 s + 1, lane 2 -> 8 + 2 s, lane 3 -> 9 + 2 s.
MM_VNNI_INL __m512i ScaleIdx(int s) {
  const int b0 = 4 * s, b1 = 4 * s + 2;
  const int x0 = b0 | (b0 + 1) << 8 | b0 << 16 | (b0 + 1) << 24;
  const int x1 = b1 | (b1 + 1) << 8 | b1 << 16 | (b1 + 1) << 24;
  return _mm512_setr_epi32(x0, x0, x0, x0, x1, x1, x1, x1, x0, x0, x0, x0, x1, x1, x1, x1);
}

// 4 rows x NT tokens. Per super-block the rows' int32 sums (and Q2_K's min sums) go to one
// vector of per-row sums (LaneSums4 and a fold of the 128-bit lanes), converted and scaled
// once: lanes 0-3 d_r d_x (rows 0-3), Q2_K lanes 8-11 -dmin_r d_x.
template <bool kThree, size_t NT>
MM_VNNI void TileQ23(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                     size_t K, float* y, size_t ldy) {
  constexpr size_t R = 4;
  constexpr size_t kBytes = kThree ? kQ3KBytes : kQ2KBytes;
  constexpr size_t kQs = kThree ? kQ3KQs : kQ2KQs;
  const __m512i m2 = _mm512_set1_epi8(3), m4b = _mm512_set1_epi8(4);
  const __m512i sidx[4] = {ScaleIdx(0), ScaleIdx(1), ScaleIdx(2), ScaleIdx(3)};
  // Left rotations taking hmask bit s (low half: values 32 s + l) and 4 + s (high half) of
  // byte l to bit 2.
  const __m512i hrot[4] = {_mm512_setr_epi64(2, 2, 2, 2, 62, 62, 62, 62),
                           _mm512_setr_epi64(1, 1, 1, 1, 61, 61, 61, 61),
                           _mm512_setr_epi64(0, 0, 0, 0, 60, 60, 60, 60),
                           _mm512_setr_epi64(63, 63, 63, 63, 59, 59, 59, 59)};
  const int8_t* codes[NT];
  const int16_t* bsum[NT];
  const float* dx[NT];
  for (size_t t = 0; t < NT; ++t) {
    codes[t] = ActCodes(act + t * stride);
    bsum[t] = Act23Bsum(act + t * stride, K);
    dx[t] = Act23D(act + t * stride, K);
  }
  __m512 acc[NT];  // lanes 0-3: rows 0-3 (Q2_K: + lanes 8-11, the rows' min terms)
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (size_t i = 0; i < K / kQK; ++i) {
    __m512i qv[R], sw[R], hv[R];
    __m256i s16v[R];
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* blk = rows[r] + i * kBytes;
      qv[r] = _mm512_loadu_si512(blk + kQs);
      s16v[r] = Scales16<kThree>(blk);
      const __m512i s16 = _mm512_castsi256_si512(s16v[r]);
      sw[r] = _mm512_shuffle_i64x2(s16, s16, _MM_SHUFFLE(1, 1, 0, 0));
      if constexpr (kThree) {
        hv[r] = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ3KHmask)));
      }
    }
    __m512i ia[R][NT];
    for (auto& a : ia) {
      for (auto& v : a) v = _mm512_setzero_si512();
    }
    for (int s = 0; s < 4; ++s) {
      __m512i w[R], sk[R];
      for (size_t r = 0; r < R; ++r) {
        w[r] = _mm512_and_si512(s == 0 ? qv[r] : _mm512_srli_epi16(qv[r], 2 * s), m2);
        if constexpr (kThree) {  // w | (rot(h) & 4)
          w[r] = _mm512_ternarylogic_epi64(w[r], _mm512_rolv_epi64(hv[r], hrot[s]), m4b, 0xF8);
        }
        sk[r] = _mm512_shuffle_epi8(sw[r], sidx[s]);
      }
      for (size_t t = 0; t < NT; ++t) {
        const __m512i q = _mm512_load_si512(codes[t] + kQK * i + 64 * s);
        for (size_t r = 0; r < R; ++r) {
          ia[r][t] = _mm512_dpwssd_epi32(ia[r][t], _mm512_maddubs_epi16(w[r], q), sk[r]);
        }
      }
    }
    // Q2_K: the mins (high nibbles); Q3_K: 4 x the scales (the u - 4 offset), for the bsum dot.
    __m256i mw[R];
    for (size_t r = 0; r < R; ++r) {
      if constexpr (kThree) {
        mw[r] = _mm256_slli_epi16(s16v[r], 2);
      } else {
        mw[r] = _mm256_srli_epi16(
            _mm256_cvtepu8_epi16(_mm_loadu_si128(
                reinterpret_cast<const __m128i*>(rows[r] + i * kBytes + kQ2KScales))),
            4);
      }
    }
    const __m128 d4 = Halves4(rows, i, kBytes, kThree ? kQ3KD : kQ2KD);
    __m512 dd = _mm512_castps128_ps512(d4);  // Q2_K: lanes 8-11 -dmin
    if constexpr (!kThree) {
      dd = _mm512_insertf32x4(dd, _mm_sub_ps(_mm_setzero_ps(), Halves4(rows, i, kBytes, kQ2KDmin)),
                              2);
    }
    for (size_t t = 0; t < NT; ++t) {
      const __m256i b16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsum[t] + 16 * i));
      __m512i v[R];
      for (size_t r = 0; r < R; ++r) {
        const __m256i c = _mm256_madd_epi16(mw[r], b16);  // [8] int32
        const __m256i a = _mm256_add_epi32(_mm512_castsi512_si256(ia[r][t]),
                                           _mm512_extracti64x4_epi64(ia[r][t], 1));
        if constexpr (kThree) {
          v[r] = _mm512_castsi256_si512(_mm256_sub_epi32(a, c));
        } else {
          v[r] = _mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1);
        }
      }
      // 128-bit lanes 0, 1: sums; 2, 3: min sums (Q2_K) -> lanes 0 and 2 hold the totals.
      __m512i u = LaneSums4(v[0], v[1], v[2], v[3]);
      u = _mm512_add_epi32(u, _mm512_shuffle_i64x2(u, u, _MM_SHUFFLE(2, 3, 0, 1)));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_mul_ps(dd, _mm512_set1_ps(dx[t][i])),
                               acc[t]);
    }
  }
  const __mmask8 m = static_cast<__mmask8>((1u << nr) - 1);
  for (size_t t = 0; t < NT; ++t) {
    __m128 s = _mm512_castps512_ps128(acc[t]);
    if constexpr (!kThree) s = _mm_add_ps(s, _mm512_extractf32x4_ps(acc[t], 2));
    _mm_mask_storeu_ps(y + t * ldy, m, s);
  }
}

template <bool kThree>
void TileQ23Any(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride, size_t nt,
                size_t K, float* y, size_t ldy) {
  switch (nt) {
    case 1:
      return TileQ23<kThree, 1>(rows, nr, act, stride, K, y, ldy);
    case 2:
      return TileQ23<kThree, 2>(rows, nr, act, stride, K, y, ldy);
    case 3:
      return TileQ23<kThree, 3>(rows, nr, act, stride, K, y, ldy);
    default:
      return TileQ23<kThree, 4>(rows, nr, act, stride, K, y, ldy);
  }
}

constexpr Int8Kernels kQ2_K = {"q2_K int8 avx512vnni", 4, 4, Act23Bytes, QuantizeAct23,
                               TileQ23Any<false>};
constexpr Int8Kernels kQ3_K = {"q3_K int8 avx512vnni", 4, 4, Act23Bytes, QuantizeAct23,
                               TileQ23Any<true>};

}  // namespace

const Int8Kernels* Int8KernelsAvx512Q23(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ2_K:
      return &kQ2_K;
    case GgmlType::kQ3_K:
      return &kQ3_K;
    default:
      return nullptr;
  }
}

}  // namespace kvtier::model::int8

#else
namespace kvtier::model::int8 {
const Int8Kernels* Int8KernelsAvx512Q23(uint32_t) { return nullptr; }
}  // namespace kvtier::model::int8
#endif
