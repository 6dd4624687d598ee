// The prefill GEMM for f16 and bf16 weights on AVX-512 (see matmul_gemm.h). Each work item
// unpacks a group of weight rows once into 16-row interleaved form and runs every token of
// the call against it, 16 rows per vector and one broadcast activation value per product:
//   f16:  int16 codes per 32-value block, weights and activations alike (14-bit codes):
//         [Kp / 2][16 rows][2] int16 + [Kp / 32][16] f32 scales (Kp: K rounded up to 32, zero
//         padded); one vpdpwssd per 32 products, exact int32 block sums (at most
//         32 x 8191^2 < 2^31), one conversion and two float ops per block, 16 rows and token.
//         Activation scale d_x = amax / 8191; weight scale d_w = 2^(E - 12) (E: the exponent
//         of the block's largest |w|), so every weight within a factor 8 of it is exact.
//         Error per block <= d_x / 2 x sum |w| + d_w / 2 x sum |x| + 8 d_w d_x: 6.1e-5 of the
//         block's largest |x| and at most 1.2e-4 of its largest |w| (f16 itself rounds to
//         4.9e-4 relative); llama.cpp instead rounds each activation to f16. Twice the
//         products per instruction of f32 FMAs. KVTIER_GEMM_F16=f32 (read once) keeps the
//         exact f32 form: rows decoded to f32, [K][16 rows] f32, one FMA per 16 products.
//   bf16: rows as they are, [K / 2][16 rows][2] bf16; the activations rounded to bf16
//         (nearest even), one vdpbf16ps per 32 products with f32 accumulation (AVX-512
//         BF16, what llama.cpp's CPU backend does for bf16 weights). Error per product term:
//         the bf16 rounding of x, at most 2^-9 relative.
// Compiled with a target attribute; used only where cpuid reports AVX-512 F/BW/VL/DQ (f16)
// and AVX512_BF16 (bf16). Stateless apart from thread_local scratch; thread-safe.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
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
  __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,avx512vnni")))
#else
#define GEMMF_X86 0
#define MM_GEMMF
#endif

namespace kvtier::model::int8 {
namespace {

constexpr size_t kRows = 16;  // rows per vector
constexpr size_t kNT = 12;    // tokens per kernel call (2 x 12 accumulators)
constexpr size_t kNT16 = 6;   // f16 int16 form: tokens per call (2 x 6 int32 + 2 x 6 f32)
constexpr size_t kBlk16 = 32;     // f16 int16 form: values per scale
constexpr float kMax16 = 8191.0f;  // largest code (32 x 8191^2 < 2^31: no int32 overflow)

// The f16 int16 form unless KVTIER_GEMM_F16=f32 asks for the exact f32 one.
bool F16Int16() {
  static const bool on = [] {
    const char* e = std::getenv("KVTIER_GEMM_F16");
    return e == nullptr || std::strcmp(e, "f32") != 0;
  }();
  return on;
}

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

// 32 values (zero past n) to int16 codes with one scale d, returned: activations (kPow2
// false) amax / 8191; weights (kPow2) 2^(E - 12), E the exponent of amax (codes below 8189),
// so a weight within a factor 8 of the block's largest is exactly code x d. 0 for a zero
// block. pairs [16]: values 2p, 2p + 1 in pair p's low / high half (rounded to nearest even).
template <bool kPow2>
MM_GEMMF inline float QuantI16(const float* v, size_t n, uint32_t* pairs) {
  const __mmask16 m0 = static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(n >= 32 ? 0xffffu : n > 16 ? (1u << (n - 16)) - 1 : 0);
  const __m512 a = _mm512_maskz_loadu_ps(m0, v), b = _mm512_maskz_loadu_ps(m1, v + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  float d = 0.0f, inv = 0.0f;
  if (amax > 0.0f) {
    if constexpr (kPow2) {
      // amax = m 2^E, m in [1, 2) (f16 values are normal f32s): d = 2^(E - 12), from the
      // exponent bits (frexp / ldexp were 2.5% of a prefill's samples).
      uint32_t bits;
      std::memcpy(&bits, &amax, 4);
      const int E = static_cast<int>((bits >> 23) & 0xff) - 127;
      if (E > -126 + 12 && E < 127 - 12) {
        const uint32_t db = static_cast<uint32_t>(E - 12 + 127) << 23;
        const uint32_t ib = static_cast<uint32_t>(12 - E + 127) << 23;
        std::memcpy(&d, &db, 4);
        std::memcpy(&inv, &ib, 4);
      } else {
        int e = 0;
        std::frexp(amax, &e);  // amax = m 2^e, m in [0.5, 1)
        d = std::ldexp(1.0f, e - 13);
        inv = std::ldexp(1.0f, 13 - e);
      }
    } else {
      d = amax / kMax16;
      inv = kMax16 / amax;
    }
  }
  const __m512 id = _mm512_set1_ps(inv);
  const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, id));  // nearest even
  const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, id));
  const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtsepi32_epi16(qa)),
                                       _mm512_cvtsepi32_epi16(qb), 1);
  _mm512_storeu_si512(pairs, q);
  return d;
}

// f16 int16 form: w0 / w1 [Kp / 2][16][2] int16 with scales s0 / s1 [Kp / 32][16]; act
// [Kp / 2][kNT16] int16 pairs with dx [Kp / 32][kNT16] (the tile transposed).
template <bool kTwo, size_t NT>
MM_GEMMF void TileI16(const uint32_t* w0, const uint32_t* w1, const float* s0, const float* s1,
                      size_t Kp, const uint32_t* act, const float* dx, float* y, size_t ldy,
                      size_t nr) {
  // The f32 sums live in this buffer, read and written once per 32-value block: in registers
  // next to the 2 x NT int32 sums, g++ 12 shuffled every accumulator between registers on
  // each pair (half the vpdpwssd rate).
  alignas(64) float fa[2][NT][kRows] = {};
  for (size_t b = 0; b < Kp / kBlk16; ++b) {
    __m512i i0[NT], i1[NT];
    for (size_t t = 0; t < NT; ++t) i0[t] = i1[t] = _mm512_setzero_si512();
    const uint32_t* wp0 = w0 + kRows * (b * kBlk16 / 2);
    const uint32_t* wp1 = w1 + kRows * (b * kBlk16 / 2);
    const uint32_t* ap = act + kNT16 * (b * kBlk16 / 2);
#pragma GCC unroll 16
    for (size_t p = 0; p < kBlk16 / 2; ++p) {
      const __m512i v0 = _mm512_load_si512(wp0 + kRows * p);
      const __m512i v1 = kTwo ? _mm512_load_si512(wp1 + kRows * p) : v0;
      for (size_t t = 0; t < NT; ++t) {
        const __m512i xb = _mm512_set1_epi32(static_cast<int>(ap[kNT16 * p + t]));
        i0[t] = _mm512_dpwssd_epi32(i0[t], v0, xb);
        if constexpr (kTwo) i1[t] = _mm512_dpwssd_epi32(i1[t], v1, xb);
      }
    }
    const __m512 d0 = _mm512_load_ps(s0 + kRows * b);
    const __m512 d1 = kTwo ? _mm512_load_ps(s1 + kRows * b) : d0;
    for (size_t t = 0; t < NT; ++t) {
      const __m512 dxb = _mm512_set1_ps(dx[kNT16 * b + t]);
      _mm512_store_ps(fa[0][t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0[t]), _mm512_mul_ps(d0, dxb),
                                                _mm512_load_ps(fa[0][t])));
      if constexpr (kTwo) {
        _mm512_store_ps(fa[1][t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1[t]),
                                                  _mm512_mul_ps(d1, dxb), _mm512_load_ps(fa[1][t])));
      }
    }
  }
  __m512 a0[NT], a1[NT];
  for (size_t t = 0; t < NT; ++t) {
    a0[t] = _mm512_load_ps(fa[0][t]);
    a1[t] = _mm512_load_ps(fa[1][t]);
  }
  Store<kTwo, NT>(a0, a1, y, ldy, nr);
}

using TileI16Fn = void (*)(const uint32_t*, const uint32_t*, const float*, const float*, size_t,
                          const uint32_t*, const float*, float*, size_t, size_t);
template <bool kTwo, size_t... I>
constexpr std::array<TileI16Fn, sizeof...(I)> MakeI16(std::index_sequence<I...>) {
  return {TileI16<kTwo, I + 1>...};
}
const auto kTilesI16 = MakeI16<false>(std::make_index_sequence<kNT16>());
const auto kTilesI16x2 = MakeI16<true>(std::make_index_sequence<kNT16>());

// The f16 int16 form of RunGemmFloat (see the top of the file).
void RunGemmF16I16(const WeightMatrix& w, const float* x, size_t n_tok, float* y,
                   ThreadPool* pool) {
  const size_t K = w.n_in, n_out = w.n_out;
  const size_t Kp = (K + kBlk16 - 1) / kBlk16 * kBlk16, nb = Kp / kBlk16;
  const size_t group_rows = 32;  // two 16-row groups per item
  // One 16-row group: codes [Kp / 2][16] uint32, then scales [nb][16] f32.
  const size_t group_words = kRows * (Kp / 2) + kRows * nb;
  const size_t tile_words = kNT16 * (Kp / 2) + kNT16 * nb;  // act then dx, per token tile
  const size_t n_tiles = (n_tok + kNT16 - 1) / kNT16;
  thread_local std::vector<uint32_t> act_buf;  // [n_tiles][tile_words]
  if (act_buf.size() < n_tiles * tile_words + 16) act_buf.resize(n_tiles * tile_words + 16);
  uint32_t* const act = reinterpret_cast<uint32_t*>(
      (reinterpret_cast<uintptr_t>(act_buf.data()) + 63) & ~uintptr_t{63});
  auto prep = [&](size_t i0, size_t i1) {
    alignas(64) uint32_t pairs[kBlk16 / 2];
    for (size_t i = i0; i < i1; ++i) {
      uint32_t* a = act + i * tile_words;
      auto* dx = reinterpret_cast<float*>(a + kNT16 * (Kp / 2));
      for (size_t t = 0; t < kNT16; ++t) {
        const size_t tok = i * kNT16 + t;
        for (size_t b = 0; b < nb; ++b) {
          const size_t n = tok < n_tok ? std::min(kBlk16, K - b * kBlk16) : 0;
          dx[kNT16 * b + t] = QuantI16<false>(n > 0 ? x + tok * K + b * kBlk16 : x, n, pairs);
          for (size_t p = 0; p < kBlk16 / 2; ++p) a[kNT16 * (b * kBlk16 / 2 + p) + t] = pairs[p];
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
    auto* wb = reinterpret_cast<uint32_t*>(Aligned(wbuf, 2 * group_words * 4));
    auto* row = reinterpret_cast<float*>(Aligned(rbuf, Kp * sizeof(float)));  // [Kp]
    alignas(64) uint32_t pairs[kBlk16 / 2];
    for (size_t item = i0; item < i1; ++item) {
      const size_t o0 = item * group_rows;
      const size_t rows = std::min(group_rows, n_out - o0);
      const size_t n_sub = (rows + kRows - 1) / kRows;
      for (size_t g = 0; g < n_sub; ++g) {
        uint32_t* codes = wb + g * group_words;
        auto* sc = reinterpret_cast<float*>(codes + kRows * (Kp / 2));
        for (size_t r = 0; r < kRows; ++r) {
          const size_t o = o0 + g * kRows + r;
          const size_t n = o < n_out ? K : 0;
          if (n > 0) RowF16ToF32(w.data + o * w.row_bytes, K, row);
          for (size_t b = 0; b < nb; ++b) {
            sc[kRows * b + r] =
                QuantI16<true>(row + b * kBlk16, n > b * kBlk16 ? std::min(kBlk16, n - b * kBlk16) : 0,
                         pairs);
            for (size_t p = 0; p < kBlk16 / 2; ++p) {
              codes[kRows * (b * kBlk16 / 2 + p) + r] = pairs[p];
            }
          }
        }
      }
      for (size_t t = 0; t < n_tok; t += kNT16) {
        const size_t nt = std::min(kNT16, n_tok - t);
        const uint32_t* a = act + (t / kNT16) * tile_words;
        const auto* dx = reinterpret_cast<const float*>(a + kNT16 * (Kp / 2));
        for (size_t g = 0; g < n_sub; g += 2) {
          const size_t r0 = o0 + g * kRows, nr = std::min(2 * kRows, n_out - r0);
          const bool two = g + 1 < n_sub;
          const uint32_t* c0 = wb + g * group_words;
          const uint32_t* c1 = two ? c0 + group_words : c0;
          (two ? kTilesI16x2 : kTilesI16)[nt - 1](
              c0, c1, reinterpret_cast<const float*>(c0 + kRows * (Kp / 2)),
              reinterpret_cast<const float*>(c1 + kRows * (Kp / 2)), Kp, a, dx,
              y + t * n_out + r0, n_out, nr);
        }
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(n_items, 1, run);
  } else {
    run(0, n_items);
  }
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
  if (!bf16 && F16Int16()) {
    RunGemmF16I16(w, x, n_tok, y, pool);
    return;
  }
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
