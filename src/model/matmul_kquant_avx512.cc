// AVX-512 VNNI int8 kernels of the K-quants (Q4_K, Q5_K, Q6_K; Q2_K and Q3_K are in
// matmul_kquant23_avx512.cc, IQ4_XS in matmul_iq4xs_avx512.cc) over the K-quant activation layout
// (matmul_int8.h, per 32 values an int8 scale like q8_0). One vpdpbusd per 64 values:
//   Q4_K: the qs bytes of sub-blocks 2k, 2k+1 split into [low nibbles | high nibbles] = the
//         64 values in order (unsigned 0..15); vpmaddubsw + vpdpwssd by the 6-bit scales
//         (int32 sums per super-block, scaled by d * d_x once); the mins enter once per
//         super-block as lanes 0-7 of -(dmin * m_j) * (d_x * sum of codes).
//   Q6_K: [ql & 15 | ql >> 4] with qh's 2-bit pairs shifted to bits 4-5 (unsigned 0..63);
//         each lane starts at -32 * (its 4 activation codes) (init6), so it ends at the exact
//         signed sum; per-lane scale d * sc_g (g = 16-value group) * d_x.
// Block layouts: kquant_layout.h. Compiled with a target attribute; run only where
// DetectIsa() found AVX-512 VNNI. Stateless; thread-safe.
#include "kvtier/gguf.h"
#include "model/kquant_layout.h"
#include "model/matmul_int8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#define MM_VNNI \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define MM_VNNI_INL inline __attribute__((always_inline)) MM_VNNI

namespace kvtier::model::int8 {
namespace {

MM_VNNI_INL float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

MM_VNNI_INL uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Lane index vectors: lane -> lane / 8 + base (Q4_K sub-blocks), lane / 4 + base (Q6_K groups).
MM_VNNI_INL __m512i LaneIdx(int shift, int base) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_add_epi32(_mm512_srli_epi32(iota, static_cast<unsigned>(shift)),
                          _mm512_set1_epi32(base));
}

// int16 lane j of step k's scale vector reads word 2k + j / 16 (sub-block 2k: bytes 0-31 of
// the step's codes, 2k + 1: bytes 32-63).
alignas(64) constexpr uint16_t kQ4KWordIdx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}};

// Q4_K (kFive false) and Q5_K (plus the 5th bit of value 64 k + 32 h + l from bit 2 k + h of
// qh[l], moved to bit 4). Per 64-value step: vpmaddubsw (codes 0..31 x int8: pairs within
// 2 x 31 x 128 < 2^15) then vpdpwssd by the sub-block's 6-bit scale as int16, into one int32
// sum per row and token for the whole super-block (exact: at most 4 x 2 x 7936 x 63 per
// lane); one conversion and FMA by d x d_x per super-block (d_x is one per 256 values).
template <bool kFive, size_t NT>
MM_VNNI void TileQ45_K(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                       size_t K, float* y, size_t ldy) {
  constexpr size_t R = 4;
  constexpr size_t kBytes = kFive ? kQ5KBytes : kQ4KBytes;
  constexpr size_t kD = kFive ? kQ5KD : kQ4KD, kDmin = kFive ? kQ5KDmin : kQ4KDmin;
  constexpr size_t kScales = kFive ? kQ5KScales : kQ4KScales, kQs = kFive ? kQ5KQs : kQ4KQs;
  const __m512i m4z = _mm512_set1_epi8(15), b16z = _mm512_set1_epi8(16);
  const __m512i nib_shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
  // Left rotations taking qh bit 2k (low half) and 2k + 1 (high half) to bit 4.
  const __m512i hrot[4] = {_mm512_setr_epi64(4, 4, 4, 4, 3, 3, 3, 3),
                           _mm512_setr_epi64(2, 2, 2, 2, 1, 1, 1, 1),
                           _mm512_setr_epi64(0, 0, 0, 0, 63, 63, 63, 63),
                           _mm512_setr_epi64(62, 62, 62, 62, 61, 61, 61, 61)};
  const int8_t* codes[NT];
  const float* dxv[NT];
  const float* xs[NT];
  for (size_t t = 0; t < NT; ++t) {
    codes[t] = ActCodes(act + t * stride);
    dxv[t] = KActDxv(act + t * stride, K);
    xs[t] = KActXs(act + t * stride, K);
  }
  // f32 sums in a stack tile, updated once per super-block (beside the R x NT int32 sums they
  // would not all fit in registers).
  alignas(64) float fa[R][NT][16] = {};
  for (size_t i = 0; i < K / kQK; ++i) {
    __m512i sc16[R];
    float dr[R];
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* blk = rows[r] + i * kBytes;
      const uint8_t* q = blk + kScales;
      const uint32_t a0 = Load32(q), a1 = Load32(q + 4), a2 = Load32(q + 8);
      const uint32_t sc_lo = a0 & 0x3f3f3f3f, m_lo = a1 & 0x3f3f3f3f;
      const uint32_t sc_hi = (a2 & 0x0f0f0f0f) | (((a0 >> 6) & 0x03030303) << 4);
      const uint32_t m_hi = ((a2 >> 4) & 0x0f0f0f0f) | (((a1 >> 6) & 0x03030303) << 4);
      const __m128i sm = _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi),
                                        static_cast<int>(m_lo), static_cast<int>(m_hi));
      sc16[r] = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(sm));  // words 0-7 sc, 8-15 m
      dr[r] = Half(blk + kD);
      // Mins: lanes 8..15 of the scales / mins times dmin, moved to lanes 0..7, the rest 0.
      const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sm));
      const __m512 dm = _mm512_maskz_permutexvar_ps(
          0xff, LaneIdx(0, 8), _mm512_mul_ps(f, _mm512_set1_ps(Half(blk + kDmin))));
      for (size_t t = 0; t < NT; ++t) {
        const __m512 x8 = _mm512_maskz_loadu_ps(0xff, xs[t] + 8 * i);
        _mm512_store_ps(fa[r][t], _mm512_fnmadd_ps(dm, x8, _mm512_load_ps(fa[r][t])));
      }
    }
    __m512i ia[R][NT];
    for (auto& a : ia) {
      for (auto& v : a) v = _mm512_setzero_si512();
    }
    for (size_t k = 0; k < 4; ++k) {
      const __m512i widx = _mm512_load_si512(kQ4KWordIdx[k]);
      __m512i w[R], sk[R];
      for (size_t r = 0; r < R; ++r) {
        const uint8_t* blk = rows[r] + i * kBytes;
        // The 32 bytes in both halves: low nibbles (values 64k..64k+31) | high nibbles.
        const __m512i v = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQs + 32 * k)));
        w[r] = _mm512_and_si512(_mm512_srlv_epi64(v, nib_shift), m4z);
        if constexpr (kFive) {  // qh bit 2k (low half) / 2k + 1 (high half) rotated to bit 4
          const __m512i h = _mm512_broadcast_i64x4(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ5KQh)));
          w[r] = _mm512_or_si512(w[r], _mm512_and_si512(_mm512_rolv_epi64(h, hrot[k]), b16z));
        }
        sk[r] = _mm512_permutexvar_epi16(widx, sc16[r]);
      }
      for (size_t t = 0; t < NT; ++t) {
        const __m512i q = _mm512_load_si512(codes[t] + kQK * i + 64 * k);
        for (size_t r = 0; r < R; ++r) {
          ia[r][t] = _mm512_dpwssd_epi32(ia[r][t], _mm512_maddubs_epi16(w[r], q), sk[r]);
        }
      }
    }
    for (size_t t = 0; t < NT; ++t) {
      const float dx = dxv[t][64 * i];  // the super-block's activation scale (every lane)
      for (size_t r = 0; r < R; ++r) {
        _mm512_store_ps(fa[r][t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r][t]),
                                                  _mm512_set1_ps(dr[r] * dx),
                                                  _mm512_load_ps(fa[r][t])));
      }
    }
  }
  for (size_t t = 0; t < NT; ++t) {
    for (size_t r = 0; r < nr; ++r) y[t * ldy + r] = _mm512_reduce_add_ps(_mm512_load_ps(fa[r][t]));
  }
}

template <size_t NT>
MM_VNNI void TileQ6_K(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                      size_t K, float* y, size_t ldy) {
  constexpr size_t R = 4;
  const __m512i idx[4] = {LaneIdx(2, 0), LaneIdx(2, 4), LaneIdx(2, 8), LaneIdx(2, 12)};
  const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3);
  const int8_t* codes[NT];
  const float* dxv[NT];
  const int32_t* init[NT];
  for (size_t t = 0; t < NT; ++t) {
    codes[t] = ActCodes(act + t * stride);
    dxv[t] = KActDxv(act + t * stride, K);
    init[t] = KActInit6(act + t * stride, K);
  }
  __m512 acc[R][NT];
  for (auto& a : acc) {
    for (auto& v : a) v = _mm512_setzero_ps();
  }
  for (size_t i = 0; i < K / kQK; ++i) {
    __m512 dsc[R];
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* blk = rows[r] + i * kQ6KBytes;
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ6KScales));
      dsc[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)),
                             _mm512_set1_ps(Half(blk + kQ6KD)));
    }
    for (size_t n = 0; n < 2; ++n) {
      __m512i L[R], Hz[R];
      for (size_t r = 0; r < R; ++r) {
        const uint8_t* blk = rows[r] + i * kQ6KBytes;
        L[r] = _mm512_loadu_si512(blk + kQ6KQl + 64 * n);
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ6KQh + 32 * n));
        Hz[r] = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
      }
      for (size_t half = 0; half < 2; ++half) {
        const size_t j = 2 * n + half;  // 64-value step within the super-block
        const size_t s = 4 * i + j;     // step within the row
        __m512i w[R];
        __m512 sk[R];
        for (size_t r = 0; r < R; ++r) {
          const __m512i lo = half == 0 ? _mm512_and_si512(L[r], m4)
                                       : _mm512_and_si512(_mm512_srli_epi16(L[r], 4), m4);
          const __m512i hb = half == 0 ? _mm512_and_si512(Hz[r], m2)
                                       : _mm512_and_si512(_mm512_srli_epi16(Hz[r], 4), m2);
          w[r] = _mm512_or_si512(lo, _mm512_slli_epi16(hb, 4));
          sk[r] = _mm512_permutexvar_ps(idx[j], dsc[r]);
        }
        for (size_t t = 0; t < NT; ++t) {
          const __m512i q = _mm512_load_si512(codes[t] + 64 * s);
          const __m512i i0 = _mm512_loadu_si512(init[t] + 16 * s);
          const __m512 dx = _mm512_load_ps(dxv[t] + 16 * s);
          for (size_t r = 0; r < R; ++r) {
            const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(i0, w[r], q));
            acc[r][t] = _mm512_fmadd_ps(p, _mm512_mul_ps(sk[r], dx), acc[r][t]);
          }
        }
      }
    }
  }
  for (size_t t = 0; t < NT; ++t) {
    for (size_t r = 0; r < nr; ++r) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

#define KVTIER_TILE_SWITCH(NAME)                                                             \
  void NAME##Any(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,   \
                 size_t nt, size_t K, float* y, size_t ldy) {                                \
    switch (nt) {                                                                            \
      case 1: return NAME<1>(rows, nr, act, stride, K, y, ldy);                              \
      case 2: return NAME<2>(rows, nr, act, stride, K, y, ldy);                              \
      case 3: return NAME<3>(rows, nr, act, stride, K, y, ldy);                              \
      default: return NAME<4>(rows, nr, act, stride, K, y, ldy);                             \
    }                                                                                        \
  }
template <size_t NT>
MM_VNNI void TileQ4_K(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                      size_t K, float* y, size_t ldy) {
  TileQ45_K<false, NT>(rows, nr, act, stride, K, y, ldy);
}
template <size_t NT>
MM_VNNI void TileQ5_K(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                      size_t K, float* y, size_t ldy) {
  TileQ45_K<true, NT>(rows, nr, act, stride, K, y, ldy);
}
KVTIER_TILE_SWITCH(TileQ4_K)
KVTIER_TILE_SWITCH(TileQ5_K)
KVTIER_TILE_SWITCH(TileQ6_K)
#undef KVTIER_TILE_SWITCH

constexpr Int8Kernels kQ4_K = {"q4_K int8 avx512vnni", 4, 4, KActBytes, QuantizeKAct,
                               TileQ4_KAny};
constexpr Int8Kernels kQ5_K = {"q5_K int8 avx512vnni", 4, 4, KActBytes, QuantizeKAct,
                               TileQ5_KAny};
constexpr Int8Kernels kQ6_K = {"q6_K int8 avx512vnni", 4, 4, KActBytes, QuantizeKAct,
                               TileQ6_KAny};

}  // namespace

const Int8Kernels* Int8KernelsAvx512KQuant(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ4_K: return &kQ4_K;
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K: return Int8KernelsAvx512Q23(ggml_type);
    case GgmlType::kQ5_K: return &kQ5_K;
    case GgmlType::kQ6_K: return &kQ6_K;
    case GgmlType::kIQ4_XS: return Int8KernelsAvx512IQ4XS();
    default: return nullptr;
  }
}

}  // namespace kvtier::model::int8

#else
namespace kvtier::model::int8 {
const Int8Kernels* Int8KernelsAvx512KQuant(uint32_t) { return nullptr; }
}  // namespace kvtier::model::int8
#endif
