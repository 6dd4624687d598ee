// The prefill int8 GEMM on AVX-512 VNNI (see matmul_gemm.h): per-type row unpackers (plain
// C++ compiled for AVX-512, block layouts of weights/blocks.h and kquant_layout.h), the
// activation layout, the 16-row x NT-token kernel and the driver. Compiled with a target
// attribute; RunGemm runs only where DetectIsa() found AVX-512 VNNI. Stateless apart from
// thread_local scratch; thread-safe.
#include "model/matmul_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "kvtier/gguf.h"
#include "kvtier/thread_pool.h"
#include "model/kquant_layout.h"
#include "model/matmul_int8.h"
#include "quant/blocks.h"
#include "quant/format_traits.h"
#include "weights/blocks.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#define GEMM_AVX512 1
#define MM_GEMM \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#else
#define GEMM_AVX512 0
#define MM_GEMM
#endif

namespace kvtier::model::int8 {
namespace {

constexpr size_t kRows = 16;       // rows per kernel call (one int32 lane each)
constexpr size_t kGroupRows = 64;  // rows unpacked per work item
constexpr size_t kNT2 = 6;         // tokens per 32-row kernel call (24 accumulators)

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Unpacks one weight row of K values: u [K] unsigned codes (w = d * (u - z) [+ m]), d and m
// [K / SB] per sub-block (m only for types with a min; the sign is folded in).
using UnpackFn = void (*)(const uint8_t* row, size_t K, uint8_t* u, float* d, float* m);

MM_GEMM void UnpackQ8_0(const uint8_t* row, size_t K, uint8_t* u, float* d, float*) {
  for (size_t b = 0; b < K / 32; ++b) {
    const uint8_t* blk = row + b * Q8_0Traits::kBlockBytes;
    d[b] = F16ToF32(Load16(blk + Q8_0Traits::kScaleOffset));
    for (size_t i = 0; i < 32; ++i) {
      u[32 * b + i] = static_cast<uint8_t>(blk[Q8_0Traits::kCodesOffset + i] ^ 0x80);
    }
  }
}

// The 32-value nibble types: value i is the low nibble of qs[i] (i < 16) or the high nibble
// of qs[i - 16]; q5_*: bit i of the uint32 qh is the 5th bit; iq4_nl through the codebook.
template <class B, bool kMin, bool kHigh, bool kTable>
MM_GEMM void UnpackNib(const uint8_t* row, size_t K, uint8_t* u, float* d, float* m) {
  for (size_t b = 0; b < K / 32; ++b) {
    const uint8_t* blk = row + b * sizeof(B);
    d[b] = F16ToF32(Load16(blk + offsetof(B, d)));
    if constexpr (kMin) m[b] = F16ToF32(Load16(blk + offsetof(B, m)));
    const uint8_t* qs = blk + offsetof(B, qs);
    uint32_t qh = 0;
    if constexpr (kHigh) std::memcpy(&qh, blk + offsetof(B, qh), 4);
    for (size_t i = 0; i < 32; ++i) {
      uint32_t q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
      if constexpr (kHigh) q |= ((qh >> i) & 1) << 4;
      if constexpr (kTable) q = static_cast<uint32_t>(weights::kIq4NlValues[q] + 128);
      u[32 * b + i] = static_cast<uint8_t>(q);
    }
  }
}

// q4_K / q5_K: 8 sub-blocks of 32; x = d sc q - dmin m.
template <bool kFive>
MM_GEMM void UnpackQ45_K(const uint8_t* row, size_t K, uint8_t* u, float* d, float* m) {
  constexpr size_t kBytes = kFive ? kQ5KBytes : kQ4KBytes;
  constexpr size_t kD = kFive ? kQ5KD : kQ4KD, kDmin = kFive ? kQ5KDmin : kQ4KDmin;
  constexpr size_t kScales = kFive ? kQ5KScales : kQ4KScales, kQs = kFive ? kQ5KQs : kQ4KQs;
  for (size_t i = 0; i < K / kQK; ++i) {
    const uint8_t* blk = row + i * kBytes;
    const float dd = F16ToF32(Load16(blk + kD)), dmin = F16ToF32(Load16(blk + kDmin));
    for (size_t j = 0; j < 8; ++j) {
      uint8_t sc, mm;
      Q4KScaleMin(blk + kScales, j, &sc, &mm);
      d[8 * i + j] = dd * sc;
      m[8 * i + j] = -(dmin * mm);
      const uint8_t* qs = blk + kQs + 32 * (j / 2);
      uint8_t* o = u + kQK * i + 32 * j;
      for (size_t l = 0; l < 32; ++l) {
        uint32_t q = (j & 1) ? qs[l] >> 4 : qs[l] & 15;
        if constexpr (kFive) q |= ((blk[kQ5KQh + l] >> j) & 1) << 4;
        o[l] = static_cast<uint8_t>(q);
      }
    }
  }
}

// q6_K: 16 sub-blocks of 16; u = q (0..63), z = 32.
MM_GEMM void UnpackQ6_K(const uint8_t* row, size_t K, uint8_t* u, float* d, float*) {
  for (size_t i = 0; i < K / kQK; ++i) {
    const uint8_t* blk = row + i * kQ6KBytes;
    const float dd = F16ToF32(Load16(blk + kQ6KD));
    const auto* sc = reinterpret_cast<const int8_t*>(blk + kQ6KScales);
    for (size_t g = 0; g < 16; ++g) d[16 * i + g] = dd * sc[g];
    uint8_t* o = u + kQK * i;
    for (size_t n = 0; n < 2; ++n) {
      const uint8_t* ql = blk + kQ6KQl + 64 * n;
      const uint8_t* qh = blk + kQ6KQh + 32 * n;
      for (size_t l = 0; l < 32; ++l) {
        o[128 * n + l] = static_cast<uint8_t>((ql[l] & 15) | (qh[l] & 3) << 4);
        o[128 * n + 32 + l] = static_cast<uint8_t>((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4);
        o[128 * n + 64 + l] = static_cast<uint8_t>((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
        o[128 * n + 96 + l] = static_cast<uint8_t>((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
      }
    }
  }
}

// q2_K (x = d (sc & 15) q - dmin (sc >> 4), z = 0) and q3_K (x = d sc (q + 4 h - 4): u = q +
// 4 h, z = 4): 16 sub-blocks of 16.
template <bool kThree>
MM_GEMM void UnpackQ23_K(const uint8_t* row, size_t K, uint8_t* u, float* d, float* m) {
  constexpr size_t kBytes = kThree ? kQ3KBytes : kQ2KBytes;
  for (size_t i = 0; i < K / kQK; ++i) {
    const uint8_t* blk = row + i * kBytes;
    const float dd = F16ToF32(Load16(blk + (kThree ? kQ3KD : kQ2KD)));
    if constexpr (kThree) {
      int8_t sc3[16];
      weights::UnpackQ3KScales(blk + kQ3KScales, sc3);
      for (size_t g = 0; g < 16; ++g) d[16 * i + g] = dd * sc3[g];
    } else {
      const float dmin = F16ToF32(Load16(blk + kQ2KDmin));
      for (size_t g = 0; g < 16; ++g) {
        const uint8_t sc = blk[kQ2KScales + g];
        d[16 * i + g] = dd * (sc & 15);
        m[16 * i + g] = -(dmin * (sc >> 4));
      }
    }
    const uint8_t* qs = blk + (kThree ? kQ3KQs : kQ2KQs);
    uint8_t* o = u + kQK * i;
    for (size_t n = 0; n < 2; ++n) {
      for (size_t s = 0; s < 4; ++s) {
        for (size_t l = 0; l < 32; ++l) {
          uint32_t q = (qs[32 * n + l] >> (2 * s)) & 3;
          if constexpr (kThree) q += 4 * ((blk[kQ3KHmask + l] >> (4 * n + s)) & 1);
          o[128 * n + 32 * s + l] = static_cast<uint8_t>(q);
        }
      }
    }
  }
}

// iq4_xs: 8 sub-blocks of 32, x = d (ls - 32) kIq4NlValues[q]; u = value + 128.
MM_GEMM void UnpackIQ4_XS(const uint8_t* row, size_t K, uint8_t* u, float* d, float*) {
  for (size_t i = 0; i < K / kQK; ++i) {
    weights::BlockIQ4_XS blk;
    std::memcpy(&blk, row + i * sizeof(blk), sizeof(blk));
    const float dd = F16ToF32(blk.d);
    for (int ib = 0; ib < 8; ++ib) {
      d[8 * i + ib] = dd * static_cast<float>(weights::IQ4XSScale(blk, ib) - 32);
      uint8_t* o = u + kQK * i + 32 * ib;
      for (size_t l = 0; l < 32; ++l) {
        const uint8_t byte = blk.qs[16 * ib + (l & 15)];
        o[l] = static_cast<uint8_t>(weights::kIq4NlValues[l < 16 ? byte & 15 : byte >> 4] + 128);
      }
    }
  }
}

struct GemmType {
  uint32_t type;
  size_t sb;      // values per sub-block (16 or 32)
  int32_t z;      // zero point: w = d * (u - z) [+ m]
  bool has_min;   // m present
  bool kact;      // activations with one scale per 256 (QuantizeKAct), else per 32
  size_t block_bytes, block_values;
  UnpackFn unpack;
};

constexpr GemmType kTypes[] = {
    {static_cast<uint32_t>(GgmlType::kQ8_0), 32, 128, false, false, 34, 32, UnpackQ8_0},
    {static_cast<uint32_t>(GgmlType::kQ4_0), 32, 8, false, false, 18, 32,
     UnpackNib<BlockQ4_0, false, false, false>},
    {static_cast<uint32_t>(GgmlType::kQ4_1), 32, 0, true, false, 20, 32,
     UnpackNib<weights::BlockQ4_1, true, false, false>},
    {static_cast<uint32_t>(GgmlType::kQ5_0), 32, 16, false, false, 22, 32,
     UnpackNib<weights::BlockQ5_0, false, true, false>},
    {static_cast<uint32_t>(GgmlType::kQ5_1), 32, 0, true, false, 24, 32,
     UnpackNib<weights::BlockQ5_1, true, true, false>},
    {static_cast<uint32_t>(GgmlType::kIQ4_NL), 32, 128, false, false, 18, 32,
     UnpackNib<weights::BlockIQ4_NL, false, false, true>},
    {static_cast<uint32_t>(GgmlType::kQ2_K), 16, 0, true, true, kQ2KBytes, 256, UnpackQ23_K<false>},
    {static_cast<uint32_t>(GgmlType::kQ3_K), 16, 4, false, true, kQ3KBytes, 256, UnpackQ23_K<true>},
    {static_cast<uint32_t>(GgmlType::kQ4_K), 32, 0, true, true, kQ4KBytes, 256, UnpackQ45_K<false>},
    {static_cast<uint32_t>(GgmlType::kQ5_K), 32, 0, true, true, kQ5KBytes, 256, UnpackQ45_K<true>},
    {static_cast<uint32_t>(GgmlType::kQ6_K), 16, 32, false, true, kQ6KBytes, 256, UnpackQ6_K},
    {static_cast<uint32_t>(GgmlType::kIQ4_XS), 32, 128, false, true, 136, 256, UnpackIQ4_XS},
};

const GemmType* FindType(uint32_t type) {
  for (const GemmType& t : kTypes) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

// Activation layout per token (SB values per sub-block, S = K / SB):
//   codes [K] int8 | dx [S] f32 | nzx [S] int32 (-z * sum) | xs [S] f32 (dx * sum)
size_t GemmActBytes(size_t K, size_t sb) { return (K + 12 * (K / sb) + 63) / 64 * 64; }

#if GEMM_AVX512
// One token: the codes of QuantizeNatural (gt.kact false: amax per 32 values) or QuantizeKAct
// (amax per 256): the same f32 products x * (127 / amax), rounded to nearest even (the
// default MXCSR mode, as nearbyint), then the per-sub-block sums.
MM_GEMM void QuantizeGemmAct(const GemmType& gt, const float* x, size_t K, uint8_t* act) {
  const size_t G = gt.kact ? 256 : 32, S = K / gt.sb;
  auto* codes = reinterpret_cast<int8_t*>(act);
  auto* dx = reinterpret_cast<float*>(act + K);
  auto* nzx = reinterpret_cast<int32_t*>(act + K + 4 * S);
  auto* xs = reinterpret_cast<float*>(act + K + 8 * S);
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (size_t g = 0; g < K / G; ++g) {
    const float* xg = x + g * G;
    __m512 mx = _mm512_setzero_ps();
    for (size_t v = 0; v < G; v += 16) {
      mx = _mm512_max_ps(mx, _mm512_and_ps(_mm512_loadu_ps(xg + v), abs_mask));
    }
    const float amax = _mm512_reduce_max_ps(mx);
    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const float d = amax / 127.0f;
    for (size_t v = 0; v < G; v += gt.sb) {
      __m512i sum = _mm512_setzero_si512();
      for (size_t l = 0; l < gt.sb; l += 16) {
        const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xg + v + l), id));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + g * G + v + l),
                         _mm512_cvtepi32_epi8(q));
        sum = _mm512_add_epi32(sum, q);
      }
      const int32_t total = _mm512_reduce_add_epi32(sum);
      const size_t s = (g * G + v) / gt.sb;
      dx[s] = d;
      nzx[s] = -gt.z * total;
      xs[s] = d * static_cast<float>(total);
    }
  }
}
#endif

#if GEMM_AVX512
// 16 rows x NT tokens: y[t * ldy + r] for r < nr.
template <size_t SB, bool kZ, bool kMin, size_t NT>
MM_GEMM void GemmTile(const uint8_t* wq, const float* wd, const float* wm, size_t K,
                      const uint8_t* act, size_t stride, float* y, size_t ldy, size_t nr) {
  const size_t S = K / SB;
  __m512 accf[NT];
  for (size_t t = 0; t < NT; ++t) accf[t] = _mm512_setzero_ps();
  const uint8_t* a[NT];
  for (size_t t = 0; t < NT; ++t) a[t] = act + t * stride;
  for (size_t s = 0; s < S; ++s) {
    __m512i ai[NT];
    for (size_t t = 0; t < NT; ++t) {
      if constexpr (kZ) {
        int32_t v;
        std::memcpy(&v, a[t] + K + 4 * S + 4 * s, 4);
        ai[t] = _mm512_set1_epi32(v);
      } else {
        ai[t] = _mm512_setzero_si512();
      }
    }
    const uint8_t* w = wq + s * SB * kRows;
    for (size_t j = 0; j < SB / 4; ++j) {
      const __m512i wv = _mm512_load_si512(w + 64 * j);
      for (size_t t = 0; t < NT; ++t) {
        int32_t xv;
        std::memcpy(&xv, a[t] + s * SB + 4 * j, 4);
        ai[t] = _mm512_dpbusd_epi32(ai[t], wv, _mm512_set1_epi32(xv));
      }
    }
    const __m512 dv = _mm512_load_ps(wd + kRows * s);
    for (size_t t = 0; t < NT; ++t) {
      float dx;
      std::memcpy(&dx, a[t] + K + 4 * s, 4);
      accf[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[t]), _mm512_mul_ps(dv, _mm512_set1_ps(dx)),
                                accf[t]);
    }
    if constexpr (kMin) {
      const __m512 mv = _mm512_load_ps(wm + kRows * s);
      for (size_t t = 0; t < NT; ++t) {
        float xs;
        std::memcpy(&xs, a[t] + K + 8 * S + 4 * s, 4);
        accf[t] = _mm512_fmadd_ps(mv, _mm512_set1_ps(xs), accf[t]);
      }
    }
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << nr) - 1);
  for (size_t t = 0; t < NT; ++t) {
    _mm512_mask_storeu_ps(y + t * ldy, mask, accf[t]);
  }
}

// 32 rows (two 16-row groups: codes q0 / q1, scales d0 / d1, mins m0 / m1) x NT tokens:
// per 4 values two weight loads feed 2 NT vpdpbusd (one 16-row group's would feed NT, and
// the loads, with the NT broadcasts, then bound the loop). y[t * ldy + r] for r < nr (<= 32).
template <size_t SB, bool kZ, bool kMin, size_t NT>
MM_GEMM void GemmTile2(const uint8_t* q0, const float* d0, const float* m0, const uint8_t* q1,
                       const float* d1, const float* m1, size_t K, const uint8_t* act,
                       size_t stride, float* y, size_t ldy, size_t nr) {
  const size_t S = K / SB;
  __m512 f0[NT], f1[NT];
  for (size_t t = 0; t < NT; ++t) {
    f0[t] = _mm512_setzero_ps();
    f1[t] = _mm512_setzero_ps();
  }
  const uint8_t* a[NT];
  for (size_t t = 0; t < NT; ++t) a[t] = act + t * stride;
  for (size_t s = 0; s < S; ++s) {
    __m512i i0[NT], i1[NT];
    for (size_t t = 0; t < NT; ++t) {
      if constexpr (kZ) {
        int32_t v;
        std::memcpy(&v, a[t] + K + 4 * S + 4 * s, 4);
        i0[t] = _mm512_set1_epi32(v);
      } else {
        i0[t] = _mm512_setzero_si512();
      }
      i1[t] = i0[t];
    }
    const uint8_t* w0 = q0 + s * SB * kRows;
    const uint8_t* w1 = q1 + s * SB * kRows;
    for (size_t j = 0; j < SB / 4; ++j) {
      const __m512i v0 = _mm512_load_si512(w0 + 64 * j), v1 = _mm512_load_si512(w1 + 64 * j);
      for (size_t t = 0; t < NT; ++t) {
        int32_t xv;
        std::memcpy(&xv, a[t] + s * SB + 4 * j, 4);
        const __m512i xb = _mm512_set1_epi32(xv);
        i0[t] = _mm512_dpbusd_epi32(i0[t], v0, xb);
        i1[t] = _mm512_dpbusd_epi32(i1[t], v1, xb);
      }
    }
    const __m512 dv0 = _mm512_load_ps(d0 + kRows * s), dv1 = _mm512_load_ps(d1 + kRows * s);
    for (size_t t = 0; t < NT; ++t) {
      float dx;
      std::memcpy(&dx, a[t] + K + 4 * s, 4);
      const __m512 dxv = _mm512_set1_ps(dx);
      f0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0[t]), _mm512_mul_ps(dv0, dxv), f0[t]);
      f1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1[t]), _mm512_mul_ps(dv1, dxv), f1[t]);
    }
    if constexpr (kMin) {
      const __m512 mv0 = _mm512_load_ps(m0 + kRows * s), mv1 = _mm512_load_ps(m1 + kRows * s);
      for (size_t t = 0; t < NT; ++t) {
        float xs;
        std::memcpy(&xs, a[t] + K + 8 * S + 4 * s, 4);
        const __m512 xsv = _mm512_set1_ps(xs);
        f0[t] = _mm512_fmadd_ps(mv0, xsv, f0[t]);
        f1[t] = _mm512_fmadd_ps(mv1, xsv, f1[t]);
      }
    }
  }
  const auto mask1 = static_cast<__mmask16>(nr > 16 ? (1u << (nr - 16)) - 1 : 0);
  for (size_t t = 0; t < NT; ++t) {
    _mm512_storeu_ps(y + t * ldy, f0[t]);
    _mm512_mask_storeu_ps(y + t * ldy + 16, mask1, f1[t]);
  }
}

using Tile2Fn = void (*)(const uint8_t*, const float*, const float*, const uint8_t*,
                         const float*, const float*, size_t, const uint8_t*, size_t, float*,
                         size_t, size_t);

template <size_t SB, bool kZ, bool kMin>
Tile2Fn PickTile2(size_t nt) {
  switch (nt) {
    case 1: return GemmTile2<SB, kZ, kMin, 1>;
    case 2: return GemmTile2<SB, kZ, kMin, 2>;
    case 3: return GemmTile2<SB, kZ, kMin, 3>;
    case 4: return GemmTile2<SB, kZ, kMin, 4>;
    case 5: return GemmTile2<SB, kZ, kMin, 5>;
    default: return GemmTile2<SB, kZ, kMin, 6>;
  }
}

Tile2Fn FindTile2(const GemmType& gt, size_t nt) {
  const bool z = gt.z != 0;
  if (gt.sb == 16) {
    if (z) return gt.has_min ? PickTile2<16, true, true>(nt) : PickTile2<16, true, false>(nt);
    return gt.has_min ? PickTile2<16, false, true>(nt) : PickTile2<16, false, false>(nt);
  }
  if (z) return gt.has_min ? PickTile2<32, true, true>(nt) : PickTile2<32, true, false>(nt);
  return gt.has_min ? PickTile2<32, false, true>(nt) : PickTile2<32, false, false>(nt);
}

using TileFn = void (*)(const uint8_t*, const float*, const float*, size_t, const uint8_t*,
                        size_t, float*, size_t, size_t);

template <size_t SB, bool kZ, bool kMin>
TileFn PickTile(size_t nt) {
  switch (nt) {
    case 1: return GemmTile<SB, kZ, kMin, 1>;
    case 2: return GemmTile<SB, kZ, kMin, 2>;
    case 3: return GemmTile<SB, kZ, kMin, 3>;
    case 4: return GemmTile<SB, kZ, kMin, 4>;
    case 5: return GemmTile<SB, kZ, kMin, 5>;
    default: return GemmTile<SB, kZ, kMin, 6>;
  }
}

TileFn FindTile(const GemmType& gt, size_t nt) {
  const bool z = gt.z != 0;
  if (gt.sb == 16) {
    if (z) return gt.has_min ? PickTile<16, true, true>(nt) : PickTile<16, true, false>(nt);
    return gt.has_min ? PickTile<16, false, true>(nt) : PickTile<16, false, false>(nt);
  }
  if (z) return gt.has_min ? PickTile<32, true, true>(nt) : PickTile<32, true, false>(nt);
  return gt.has_min ? PickTile<32, false, true>(nt) : PickTile<32, false, false>(nt);
}
#endif

// 64-byte aligned view of a thread-local byte vector of at least n bytes.
uint8_t* Aligned(std::vector<uint8_t>& v, size_t n) {
  if (v.size() < n + 64) v.resize(n + 64);
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(v.data()) + 63) &
                                    ~uintptr_t{63});
}

}  // namespace

bool GemmSupports(uint32_t ggml_type) {
  return GEMM_AVX512 && DetectIsa() == Isa::kAvx512Vnni && FindType(ggml_type) != nullptr;
}

void RunGemm(const WeightMatrix& w, const float* x, size_t n_tok, float* y, ThreadPool* pool) {
#if GEMM_AVX512
  const GemmType& gt = *FindType(w.type);
  const size_t K = w.n_in, n_out = w.n_out, S = K / gt.sb;
  const size_t stride = GemmActBytes(K, gt.sb);
  thread_local std::vector<uint8_t> act_buf;
  uint8_t* act = Aligned(act_buf, n_tok * stride);  // [n_tok][stride]
  auto quantize = [&](size_t t0, size_t t1) {
    for (size_t t = t0; t < t1; ++t) QuantizeGemmAct(gt, x + t * K, K, act + t * stride);
  };
  if (pool != nullptr) {
    pool->ParallelFor(n_tok, 0, quantize);
  } else {
    quantize(0, n_tok);
  }
  const size_t n_items = (n_out + kGroupRows - 1) / kGroupRows;
  constexpr size_t kSub = kGroupRows / kRows;
  // Per 16-row group: codes [K / 4][16][4] | d [S][16] | m [S][16]
  const size_t group_bytes = K * kRows + 2 * S * kRows * sizeof(float);
  auto run = [&](size_t i0, size_t i1) {
    thread_local std::vector<uint8_t> wbuf, ubuf;
    uint8_t* wb = Aligned(wbuf, kSub * group_bytes);
    uint8_t* u = Aligned(ubuf, K + 2 * S * sizeof(float));  // one row: codes | d | m
    auto* ud = reinterpret_cast<float*>(u + K);
    float* um = ud + S;
    for (size_t item = i0; item < i1; ++item) {
      const size_t o0 = item * kGroupRows;
      const size_t rows = std::min(kGroupRows, n_out - o0);
      const size_t n_sub = (rows + kRows - 1) / kRows;
      for (size_t g = 0; g < n_sub; ++g) {
        uint8_t* gq = wb + g * group_bytes;
        auto* gd = reinterpret_cast<float*>(gq + K * kRows);
        float* gm = gd + S * kRows;
        for (size_t r = 0; r < kRows; ++r) {
          const size_t o = o0 + g * kRows + r;
          if (o < n_out) {
            gt.unpack(w.data + o * w.row_bytes, K, u, ud, um);
          } else {
            std::memset(u, 0, K);
            std::fill(ud, ud + 2 * S, 0.0f);
          }
          for (size_t kk = 0; kk < K / 4; ++kk) std::memcpy(gq + 64 * kk + 4 * r, u + 4 * kk, 4);
          for (size_t s = 0; s < S; ++s) {
            gd[kRows * s + r] = ud[s];
            gm[kRows * s + r] = gt.has_min ? um[s] : 0.0f;
          }
        }
      }
      // Pairs of 16-row groups (32 rows x kNT2 tokens); an odd last group alone.
      for (size_t t = 0; t < n_tok; t += kNT2) {
        const size_t nt = std::min(kNT2, n_tok - t);
        const Tile2Fn tile2 = FindTile2(gt, nt);
        for (size_t g = 0; g < n_sub; g += 2) {
          const uint8_t* gq = wb + g * group_bytes;
          const auto* gd = reinterpret_cast<const float*>(gq + K * kRows);
          const size_t r0 = o0 + g * kRows, nr = std::min(2 * kRows, n_out - r0);
          if (g + 1 < n_sub) {
            const uint8_t* gq1 = gq + group_bytes;
            const auto* gd1 = reinterpret_cast<const float*>(gq1 + K * kRows);
            tile2(gq, gd, gd + S * kRows, gq1, gd1, gd1 + S * kRows, K, act + t * stride,
                  stride, y + t * n_out + r0, n_out, nr);
          } else {
            FindTile(gt, nt)(gq, gd, gd + S * kRows, K, act + t * stride, stride,
                             y + t * n_out + r0, n_out, std::min(kRows, nr));
          }
        }
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(n_items, 1, run);
  } else {
    run(0, n_items);
  }
#else
  (void)w, (void)x, (void)n_tok, (void)y, (void)pool;
#endif
}

}  // namespace kvtier::model::int8
