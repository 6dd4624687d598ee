// The prefill GEMM for f16 and bf16 weights on AVX-512 (see matmul_gemm.h). Each work item
// unpacks a group of weight rows once into 16-row interleaved form and runs every token of
// the call against it, 16 rows per vector and one broadcast activation value per product:
//   f16:  rows decoded to f32, [K][16 rows] f32; one FMA per 16 products (exact f32 products
//         of the f16 weights, as the float path; only the summation order differs).
//   bf16: rows as they are, [K / 2][16 rows][2] bf16; the activations rounded to bf16
//         (nearest even), one vdpbf16ps per 32 products with f32 accumulation (AVX-512
//         BF16, what llama.cpp's CPU backend does for bf16 weights). Error per product term:
//         the bf16 rounding of x, at most 2^-9 relative.
// Compiled with a target attribute; used only where cpuid reports AVX-512 F/BW/VL/DQ (f16)
// and AVX512_BF16 (bf16). Stateless apart from thread_local scratch; thread-safe.
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "base/half.h"
#include "kvtier/gguf.h"
#include "kvtier/thread_pool.h"
#include "model/matmul_gemm.h"
#include "model/matmul_int8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>
#define GEMMF_X86 1
#define MM_GEMMF \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512bf16")))
#else
#define GEMMF_X86 0
#define MM_GEMMF
#endif

namespace kvtier::model::int8 {
namespace {

constexpr size_t kRows = 16;  // rows per vector
constexpr size_t kNT = 12;    // tokens per kernel call (2 x 12 accumulators)

bool DetectBf16() {
#if GEMMF_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (DetectIsa() != Isa::kAvx512Vnni) return false;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return (a & (1u << 5)) != 0;  // AVX512_BF16
#else
  return false;
#endif
}

uint8_t* Aligned(std::vector<uint8_t>& v, size_t n) {
  if (v.size() < n + 64) v.resize(n + 64);
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(v.data()) + 63) &
                                    ~uintptr_t{63});
}

// f32 nearest-even rounding to bf16 bits (NaN kept a NaN).
uint16_t RoundBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

#if GEMMF_X86
// One f16 row of K values to f32 (F16C, 16 at a time; the tail in scalar code).
MM_GEMMF void RowF16ToF32(const uint8_t* src, size_t K, float* dst) {
  size_t k = 0;
  for (; k + 16 <= K; k += 16) {
    _mm512_storeu_ps(dst + k, _mm512_cvtph_ps(_mm256_loadu_si256(
                                  reinterpret_cast<const __m256i*>(src + 2 * k))));
  }
  for (; k < K; ++k) {
    uint16_t h;
    std::memcpy(&h, src + 2 * k, 2);
    dst[k] = F16ToF32(h);
  }
}

// Rows r < nr (<= 32 with two groups, else <= 16) of NT tokens.
template <bool kTwo, size_t NT>
MM_GEMMF inline void Store(const __m512* a0, const __m512* a1, float* y, size_t ldy, size_t nr) {
  const auto m0 = static_cast<__mmask16>(nr >= 16 ? 0xffffu : (1u << nr) - 1);
  const auto m1 = static_cast<__mmask16>(nr > 16 ? (1u << (nr - 16)) - 1 : 0);
  for (size_t t = 0; t < NT; ++t) {
    _mm512_mask_storeu_ps(y + t * ldy, m0, a0[t]);
    if constexpr (kTwo) _mm512_mask_storeu_ps(y + t * ldy + 16, m1, a1[t]);
  }
}

// f16 weights decoded to f32: w0 / w1 [K][16] f32 (two 16-row groups; kTwo false: w0
// only); xt [K][kNT] f32 (the token tile transposed, so the broadcasts read one cache line
// per k, not NT rows that alias in L1). Two weight vectors per k feed 2 NT FMAs (one would
// feed NT, and the loads with the NT broadcasts then bound the loop).
template <bool kTwo, size_t NT>
MM_GEMMF void TileF32(const float* w0, const float* w1, size_t K, const float* xt, float* y,
                      size_t ldy, size_t nr) {
  __m512 a0[NT], a1[NT];
  for (size_t t = 0; t < NT; ++t) a0[t] = a1[t] = _mm512_setzero_ps();
  for (size_t k = 0; k < K; ++k) {
    const __m512 v0 = _mm512_load_ps(w0 + kRows * k);
    const __m512 v1 = kTwo ? _mm512_load_ps(w1 + kRows * k) : v0;
    for (size_t t = 0; t < NT; ++t) {
      const __m512 xb = _mm512_set1_ps(xt[kNT * k + t]);
      a0[t] = _mm512_fmadd_ps(v0, xb, a0[t]);
      if constexpr (kTwo) a1[t] = _mm512_fmadd_ps(v1, xb, a1[t]);
    }
  }
  Store<kTwo, NT>(a0, a1, y, ldy, nr);
}

// bf16: w0 / w1 [K / 2][16][2] bf16; act [K / 2][kNT] uint32 (bf16 pairs, the tile transposed).
template <bool kTwo, size_t NT>
MM_GEMMF void TileBf16(const uint16_t* w0, const uint16_t* w1, size_t K, const uint32_t* act,
                       float* y, size_t ldy, size_t nr) {
  __m512 a0[NT], a1[NT];
  for (size_t t = 0; t < NT; ++t) a0[t] = a1[t] = _mm512_setzero_ps();
  for (size_t p = 0; p < K / 2; ++p) {
    const __m512bh v0 = (__m512bh)_mm512_load_si512(w0 + 2 * kRows * p);
    const __m512bh v1 = kTwo ? (__m512bh)_mm512_load_si512(w1 + 2 * kRows * p) : v0;
    for (size_t t = 0; t < NT; ++t) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(static_cast<int>(act[kNT * p + t]));
      a0[t] = _mm512_dpbf16_ps(a0[t], v0, xb);
      if constexpr (kTwo) a1[t] = _mm512_dpbf16_ps(a1[t], v1, xb);
    }
  }
  Store<kTwo, NT>(a0, a1, y, ldy, nr);
}

using TileF32Fn = void (*)(const float*, const float*, size_t, const float*, float*, size_t,
                          size_t);
using TileBf16Fn = void (*)(const uint16_t*, const uint16_t*, size_t, const uint32_t*, float*,
                           size_t, size_t);

template <bool kTwo, size_t... I>
constexpr std::array<TileF32Fn, sizeof...(I)> MakeF32(std::index_sequence<I...>) {
  return {TileF32<kTwo, I + 1>...};
}
template <bool kTwo, size_t... I>
constexpr std::array<TileBf16Fn, sizeof...(I)> MakeBf16(std::index_sequence<I...>) {
  return {TileBf16<kTwo, I + 1>...};
}
const auto kTilesF32 = MakeF32<false>(std::make_index_sequence<kNT>());
const auto kTilesF32x2 = MakeF32<true>(std::make_index_sequence<kNT>());
const auto kTilesBf16 = MakeBf16<false>(std::make_index_sequence<kNT>());
const auto kTilesBf16x2 = MakeBf16<true>(std::make_index_sequence<kNT>());
#endif

}  // namespace

bool GemmFloatSupports(uint32_t ggml_type, size_t n_in) {
  static const bool bf16 = DetectBf16();
  static const bool f16 = GEMMF_X86 && DetectIsa() == Isa::kAvx512Vnni;
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kF16: return f16;
    case GgmlType::kBF16: return bf16 && n_in % 2 == 0;
    default: return false;
  }
}

void RunGemmFloat(const WeightMatrix& w, const float* x, size_t n_tok, float* y,
                  ThreadPool* pool) {
#if GEMMF_X86
  const size_t K = w.n_in, n_out = w.n_out;
  const bool bf16 = w.type == static_cast<uint32_t>(GgmlType::kBF16);
  // Rows per item: the unpacked rows stay in L2 (f32: 4 bytes a value, bf16: 2).
  const size_t group_rows = bf16 ? 64 : 32;  // pairs of 16-row groups
  const size_t group_bytes = kRows * K * (bf16 ? 2 : 4);  // one 16-row group
  // The activations per tile of kNT tokens, transposed: f16: [K][kNT] f32; bf16: [K / 2][kNT]
  // bf16 pairs (nearest-even); tokens past n_tok are zeros.
  const size_t n_tiles = (n_tok + kNT - 1) / kNT;
  // [n_tiles][K][kNT] 4-byte words; the calling thread's, reused (every word is written below)
  // (A pointer, not the thread_local itself, goes into the lambdas: pool threads would see
  // their own instance.)
  thread_local std::vector<uint32_t> act_buf;
  if (act_buf.size() < n_tiles * K * kNT) act_buf.resize(n_tiles * K * kNT);
  uint32_t* const act = act_buf.data();
  auto prep = [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) {
      uint32_t* a = act + i * K * kNT;
      for (size_t t = 0; t < kNT; ++t) {
        const size_t tok = i * kNT + t;
        const float* xr = x + tok * K;
        if (bf16) {
          for (size_t p = 0; p < K / 2; ++p) {
            a[kNT * p + t] = tok < n_tok ? uint32_t{RoundBf16(xr[2 * p])} |
                                               uint32_t{RoundBf16(xr[2 * p + 1])} << 16
                                         : 0u;
          }
        } else {
          for (size_t k = 0; k < K; ++k) {
            float v = 0.0f;
            if (tok < n_tok) v = xr[k];
            std::memcpy(&a[kNT * k + t], &v, 4);
          }
        }
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(n_tiles, 1, prep);
  } else {
    prep(0, n_tiles);
  }
  const size_t n_items = (n_out + group_rows - 1) / group_rows;
  auto run = [&](size_t i0, size_t i1) {
    thread_local std::vector<uint8_t> wbuf, rbuf;
    uint8_t* wb = Aligned(wbuf, (group_rows / kRows) * group_bytes);
    auto* row = reinterpret_cast<float*>(Aligned(rbuf, K * sizeof(float)));  // [K]
    for (size_t item = i0; item < i1; ++item) {
      const size_t o0 = item * group_rows;
      const size_t rows = std::min(group_rows, n_out - o0);
      const size_t n_sub = (rows + kRows - 1) / kRows;
      for (size_t g = 0; g < n_sub; ++g) {
        for (size_t r = 0; r < kRows; ++r) {
          const size_t o = o0 + g * kRows + r;
          const uint8_t* src = w.data + std::min(o, n_out - 1) * w.row_bytes;
          if (bf16) {
            auto* dst = reinterpret_cast<uint32_t*>(wb + g * group_bytes);
            for (size_t p = 0; p < K / 2; ++p) {
              uint32_t v = 0;
              if (o < n_out) std::memcpy(&v, src + 4 * p, 4);
              dst[kRows * p + r] = v;
            }
          } else {
            auto* dst = reinterpret_cast<float*>(wb + g * group_bytes);
            if (o < n_out) {
              RowF16ToF32(src, K, row);
            } else {
              std::fill(row, row + K, 0.0f);
            }
            for (size_t k = 0; k < K; ++k) dst[kRows * k + r] = row[k];
          }
        }
      }
      for (size_t t = 0; t < n_tok; t += kNT) {
        const size_t nt = std::min(kNT, n_tok - t);
        for (size_t g = 0; g < n_sub; g += 2) {
          const size_t r0 = o0 + g * kRows, nr = std::min(2 * kRows, n_out - r0);
          const bool two = g + 1 < n_sub;
          const uint8_t* g0 = wb + g * group_bytes;
          const uint8_t* g1 = two ? g0 + group_bytes : g0;
          if (bf16) {
            (two ? kTilesBf16x2 : kTilesBf16)[nt - 1](
                reinterpret_cast<const uint16_t*>(g0), reinterpret_cast<const uint16_t*>(g1), K,
                act + t * K, y + t * n_out + r0, n_out, nr);
          } else {
            (two ? kTilesF32x2 : kTilesF32)[nt - 1](
                reinterpret_cast<const float*>(g0), reinterpret_cast<const float*>(g1), K,
                reinterpret_cast<const float*>(act + t * K), y + t * n_out + r0, n_out,
                nr);
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
