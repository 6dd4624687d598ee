// AVX-512 VNNI int8 kernels (see matmul_int8.h). Two 32-value weight blocks per 512-bit
// vector, one vpdpbusd (unsigned weight bytes x signed activation codes) per pair:
//   q8_0: codes xor 0x80 (w + 128, unsigned); natural activation order; lanes 0-7 block 0,
//         8-15 block 1.
//   q4_0: the nibbles as they are (w + 8); activation order [b0 0-15, b1 0-15, b0 16-31,
//         b1 16-31] to match [lo nibbles b0, b1 | hi nibbles b0, b1]; lanes (i / 4) & 1 give
//         the block.
// Each int32 lane starts at -offset * (the sum of its own 4 activation codes), so it ends
// exactly at the signed dot product of its 4 values (no cancellation across lanes in f32).
// The activation layout per token, S = ceil(K / 64) steps (an odd last block pairs with a
// zero block: codes 0, scale 0, the weight bytes never read):
//   codes [S][64] int8 | scales [S][16] f32 (d_x per lane) | init [S][16] int32
// Compiled with a target attribute; run only where DetectIsa() found AVX-512 F/BW/VL/DQ +
// VNNI. Stateless; thread-safe.
#include "kvtier/gguf.h"
#include "model/matmul_int8.h"
#include "quant/format_traits.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if !defined(__clang__)
// GCC 12's AVX-512 intrinsics start from self-initialised "undefined" vectors.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#define MM_VNNI \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define MM_VNNI_INL inline __attribute__((always_inline)) MM_VNNI
#define MM_VNNI_LAMBDA __attribute__((always_inline)) MM_VNNI

namespace kvtier::model::int8 {
namespace {

constexpr size_t kStep = 64;  // values per step (two blocks)

template <class W>
size_t VnniActBytes(size_t K) {  // codes | dxv | init (| xsv for types with a min)
  return (K + kStep - 1) / kStep * (kStep + 64 + 64 + (W::kHasMin ? 64 : 0));
}

struct VQ8_0 {
  static constexpr size_t kBytes = Q8_0Traits::kBlockBytes;
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 128;  // unsigned code = w + 128
  static constexpr size_t CodePos(size_t half, size_t i) { return 32 * half + i; }
  static constexpr size_t LaneBlock(size_t lane) { return lane / 8; }
  static MM_VNNI_INL __m512i Codes(const uint8_t* b0, const uint8_t* b1, bool has1) {
    const __m256i lo = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(b0 + Q8_0Traits::kCodesOffset));
    const __m256i hi =
        has1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + Q8_0Traits::kCodesOffset))
             : _mm256_setzero_si256();
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                            _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};
// The 32-value nibble types: [lo nibbles b0, b1 | hi nibbles b0, b1] from 16 code bytes at
// kQs of each block, then per type: q4_0 as is (offset 8); iq4_nl through the codebook + 128
// (offset 128); q5_0 / q5_1 with the 5th bits (bit i of the uint32 at kQh: value i) as 16
// (offset 16 / 0); q4_1 as is (offset 0). q4_1 / q5_1 add their min m * sum(x) per block.
enum class Nib { kQ4_0, kQ4_1, kQ5_0, kQ5_1, kIQ4_NL };
template <Nib T>
struct VNib {
  static constexpr bool kHasMin = T == Nib::kQ4_1 || T == Nib::kQ5_1;
  static constexpr bool kHigh = T == Nib::kQ5_0 || T == Nib::kQ5_1;
  static constexpr size_t kBytes = T == Nib::kQ4_0 ? 18 : T == Nib::kQ4_1 ? 20 : T == Nib::kQ5_0 ? 22
                                 : T == Nib::kQ5_1 ? 24 : 18;
  static constexpr size_t kQs = kBytes - 16;                  // codes are the last 16 bytes
  static constexpr size_t kQh = T == Nib::kQ5_0 ? 2 : 4;      // q5_*: the 4 high-bit bytes
  static constexpr int kOffset = T == Nib::kQ4_0 ? 8 : T == Nib::kIQ4_NL ? 128 : T == Nib::kQ5_0 ? 16 : 0;
  static constexpr size_t CodePos(size_t half, size_t i) { return (i & 16) * 2 + 16 * half + (i & 15); }
  static constexpr size_t LaneBlock(size_t lane) { return (lane / 4) & 1; }
  static MM_VNNI_INL __m512i Codes(const uint8_t* b0, const uint8_t* b1, bool has1) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + kQs));
    const __m128i hi =
        has1 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + kQs)) : _mm_setzero_si128();
    const __m256i v = _mm256_set_m128i(hi, lo);
    const __m256i m = _mm256_set1_epi8(15);
    const __m256i l = _mm256_and_si256(v, m), h = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
    __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(l), h, 1);
    if constexpr (T == Nib::kIQ4_NL) {
      const __m512i tbl = _mm512_broadcast_i32x4(_mm_setr_epi8(
          1, 24, 45, 63, 79, 93, 106, 118, static_cast<char>(129), static_cast<char>(141),
          static_cast<char>(153), static_cast<char>(166), static_cast<char>(181),
          static_cast<char>(197), static_cast<char>(217), static_cast<char>(241)));
      w = _mm512_shuffle_epi8(tbl, w);
    }
    if constexpr (kHigh) {
      uint32_t h0, h1 = 0;
      std::memcpy(&h0, b0 + kQh, 4);
      if (has1) std::memcpy(&h1, b1 + kQh, 4);
      const uint64_t bits = uint64_t{h0 & 0xffff} | uint64_t{h1 & 0xffff} << 16 |
                            uint64_t{h0 >> 16} << 32 | uint64_t{h1 >> 16} << 48;
      w = _mm512_or_si512(w, _mm512_maskz_mov_epi8(bits, _mm512_set1_epi8(16)));
    }
    return w;
  }
};
using VQ4_0 = VNib<Nib::kQ4_0>;
static_assert(VQ4_0::kBytes == Q4_0Traits::kBlockBytes && VQ4_0::kQs == Q4_0Traits::kCodesOffset);

// One token: per block amax, codes by nearest-even rounding of x * (127 / amax) (the same
// f32 products as QuantizeNatural), scattered to W's code order; per-lane scales and inits.
template <class W>
MM_VNNI void QuantizeVnni(const float* x, size_t K, uint8_t* act) {
  const size_t S = (K + kStep - 1) / kStep;
  auto* codes = reinterpret_cast<int8_t*>(act);
  auto* dxv = reinterpret_cast<float*>(act + S * kStep);
  auto* init = reinterpret_cast<int32_t*>(act + S * kStep + S * 64);
  auto* xsv = reinterpret_cast<float*>(act + S * kStep + S * 128);  // W::kHasMin only
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (size_t s = 0; s < S; ++s) {
    float d[2] = {0.0f, 0.0f};
    int32_t sum[2] = {0, 0};
    for (size_t h = 0; h < 2; ++h) {
      const size_t k = s * kStep + 32 * h;
      alignas(16) int8_t q[32] = {};
      if (k < K) {
        const __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
        const float amax = _mm512_reduce_max_ps(
            _mm512_max_ps(_mm512_and_ps(x0, abs_mask), _mm512_and_ps(x1, abs_mask)));
        const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));
        d[h] = amax / 127.0f;
        sum[h] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        _mm_store_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(q0));
        _mm_store_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(q1));
      }
      int8_t* c = codes + s * kStep;
      std::memcpy(c + W::CodePos(h, 0), q, 16);
      std::memcpy(c + W::CodePos(h, 16), q + 16, 16);
    }
    for (size_t lane = 0; lane < 16; ++lane) {
      dxv[16 * s + lane] = d[W::LaneBlock(lane)];
      const int8_t* c = codes + s * kStep + 4 * lane;  // the lane's 4 codes
      init[16 * s + lane] = -W::kOffset * (c[0] + c[1] + c[2] + c[3]);
      if constexpr (W::kHasMin) {  // 8 lanes per block: d * sum / 8 each
        xsv[16 * s + lane] = d[W::LaneBlock(lane)] * static_cast<float>(sum[W::LaneBlock(lane)]) * 0.125f;
      }
    }
  }
}

// The two blocks' f16 scales as per-lane f32 (lane -> block as W::LaneBlock).
template <class W>
MM_VNNI_INL __m512 PairScales(const uint8_t* b0, const uint8_t* b1, bool has1, __m512i perm,
                              size_t off = 0) {
  uint16_t s0, s1 = 0;
  std::memcpy(&s0, b0 + off, 2);
  if (has1) std::memcpy(&s1, b1 + off, 2);
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(s0 | (uint32_t{s1} << 16))));
  return _mm512_permutexvar_ps(perm, _mm512_castps128_ps512(f));
}

// 4 rows x NT tokens over K.
template <class W, size_t NT>
MM_VNNI void TileVnni(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                      size_t K, float* y, size_t ldy) {
  constexpr size_t R = 4;
  const size_t S = (K + kStep - 1) / kStep, full = K / kStep;
  alignas(64) int32_t perm_idx[16];
  for (size_t lane = 0; lane < 16; ++lane) perm_idx[lane] = static_cast<int32_t>(W::LaneBlock(lane));
  const __m512i perm = _mm512_load_si512(perm_idx);
  __m512 acc[R][NT];
  for (auto& a : acc) {
    for (auto& v : a) v = _mm512_setzero_ps();
  }
  auto step = [&](size_t s, bool has1) MM_VNNI_LAMBDA {
    __m512i w[R];
    __m512 dw[R], mw[R];
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* b0 = rows[r] + 2 * s * W::kBytes;
      w[r] = W::Codes(b0, b0 + W::kBytes, has1);
      dw[r] = PairScales<W>(b0, b0 + W::kBytes, has1, perm);
      if constexpr (W::kHasMin) mw[r] = PairScales<W>(b0, b0 + W::kBytes, has1, perm, 2);
    }
    for (size_t t = 0; t < NT; ++t) {
      const uint8_t* a = act + t * stride;
      const __m512i q = _mm512_load_si512(a + s * kStep);
      const __m512i i0 = _mm512_load_si512(a + S * kStep + S * 64 + s * 64);
      const __m512 dx = _mm512_load_ps(a + S * kStep + s * 64);
      for (size_t r = 0; r < R; ++r) {
        const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(i0, w[r], q));
        acc[r][t] = _mm512_fmadd_ps(p, _mm512_mul_ps(dw[r], dx), acc[r][t]);
      }
      if constexpr (W::kHasMin) {
        const __m512 xs = _mm512_load_ps(a + S * kStep + S * 128 + s * 64);
        for (size_t r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(mw[r], xs, acc[r][t]);
      }
    }
  };
  for (size_t s = 0; s < full; ++s) step(s, true);
  if (S > full) step(full, false);
  for (size_t t = 0; t < NT; ++t) {
    for (size_t r = 0; r < nr; ++r) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

template <class W>
void Tile(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride, size_t nt,
          size_t K, float* y, size_t ldy) {
  switch (nt) {
    case 1: return TileVnni<W, 1>(rows, nr, act, stride, K, y, ldy);
    case 2: return TileVnni<W, 2>(rows, nr, act, stride, K, y, ldy);
    case 3: return TileVnni<W, 3>(rows, nr, act, stride, K, y, ldy);
    default: return TileVnni<W, 4>(rows, nr, act, stride, K, y, ldy);
  }
}

#define KVTIER_VNNI_KERNELS(VAR, NAME, W) \
  constexpr Int8Kernels VAR = {NAME " int8 avx512vnni", 4, 4, VnniActBytes<W>, QuantizeVnni<W>, Tile<W>}
KVTIER_VNNI_KERNELS(kQ8_0, "q8_0", VQ8_0);
KVTIER_VNNI_KERNELS(kQ4_0, "q4_0", VQ4_0);
KVTIER_VNNI_KERNELS(kQ4_1, "q4_1", VNib<Nib::kQ4_1>);
KVTIER_VNNI_KERNELS(kQ5_0, "q5_0", VNib<Nib::kQ5_0>);
KVTIER_VNNI_KERNELS(kQ5_1, "q5_1", VNib<Nib::kQ5_1>);
KVTIER_VNNI_KERNELS(kIQ4_NL, "iq4_nl", VNib<Nib::kIQ4_NL>);
#undef KVTIER_VNNI_KERNELS

}  // namespace

const Int8Kernels* Int8KernelsAvx512(uint32_t ggml_type) {
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
const Int8Kernels* Int8KernelsAvx512(uint32_t) { return nullptr; }
}  // namespace kvtier::model::int8
#endif
