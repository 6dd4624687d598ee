// AVX-512 VNNI int8 kernels (see matmul_int8.h). Two 32-value weight blocks per 512-bit
// vector, one vpdpbusd (unsigned weight bytes x signed activation codes) per pair:
//   q8_0: codes xor 0x80 (w + 128, unsigned); natural activation order; lanes 0-7 block 0,
//         8-15 block 1.
//   q4_0 (and the other nibble types): the nibbles as they are (w + 8), [lo b0 | hi b0 |
//         lo b1 | hi b1] = natural activation order; lanes 0-7 block 0, 8-15 block 1.
// Each int32 lane starts at -offset * (the sum of its own 4 activation codes), so it ends
// exactly at the signed dot product of its 4 values; the four rows' lanes are then reduced
// (exact int32 adds) to per-row block sums, converted and scaled once per step.
// The activation layout per token, S = ceil(K / 64) steps (an odd last block pairs with a
// zero block: codes 0, scale 0, the weight bytes never read):
//   codes [S][64] int8 | scales [S][16] f32 (lanes 0-7 d_x of block 0, 8-15 block 1) |
//   init [S][16] int32 (| xs [S][16] f32, d_x * sum of codes per block as the scales, for
//   the types with a min)
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
#include <cstring>

#include "model/matmul_avx512_util.h"  // MM_VNNI, MM_VNNI_INL, LaneSums4
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
// The 32-value nibble types: [lo b0 | hi b0 | lo b1 | hi b1] from the 16 code bytes at
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
  static constexpr size_t CodePos(size_t half, size_t i) { return 32 * half + i; }
  // [b0 | b0 | b1 | b1] (16 code bytes each), the odd 128-bit lanes shifted by 4, masked:
  // [lo b0 | hi b0 | lo b1 | hi b1] = values 0-31 of b0 then b1 (natural order).
  static MM_VNNI_INL __m512i Codes(const uint8_t* b0, const uint8_t* b1, bool has1) {
    const __m512i v0 =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + kQs)));
    const __m512i v =
        has1 ? _mm512_mask_broadcast_i32x4(
                   v0, 0xff00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + kQs)))
             : _mm512_maskz_mov_epi32(0x00ff, v0);
    __m512i w = _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                                 _mm512_set1_epi8(15));
    if constexpr (T == Nib::kIQ4_NL) {
      const __m512i tbl = _mm512_broadcast_i32x4(_mm_setr_epi8(
          1, 24, 45, 63, 79, 93, 106, 118, static_cast<char>(129), static_cast<char>(141),
          static_cast<char>(153), static_cast<char>(166), static_cast<char>(181),
          static_cast<char>(197), static_cast<char>(217), static_cast<char>(241)));
      w = _mm512_shuffle_epi8(tbl, w);
    }
    if constexpr (kHigh) {  // bit i of each block's qh: value i, in the natural order
      uint32_t h0, h1 = 0;
      std::memcpy(&h0, b0 + kQh, 4);
      if (has1) std::memcpy(&h1, b1 + kQh, 4);
      const __mmask64 bits = _cvtu64_mask64(uint64_t{h0} | uint64_t{h1} << 32);
      w = _mm512_mask_add_epi8(w, bits, w, _mm512_set1_epi8(16));
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
      dxv[16 * s + lane] = d[lane / 8];
      const int8_t* c = codes + s * kStep + 4 * lane;  // the lane's 4 codes
      init[16 * s + lane] = -W::kOffset * (c[0] + c[1] + c[2] + c[3]);
      if constexpr (W::kHasMin) {
        xsv[16 * s + lane] = d[lane / 8] * static_cast<float>(sum[lane / 8]);
      }
    }
  }
}

// The f16 at offset off of the blocks 2 s, 2 s + 1 of four rows as f32 lanes 0-3 (block
// 2 s of rows 0-3) and 8-11 (block 2 s + 1), the other lanes 0 (has1 false: block 2 s + 1 0).
template <class W>
MM_VNNI_INL __m512 QuadScales(const uint8_t* const* rows, size_t s, bool has1, size_t off) {
  uint16_t h[8] = {};
  for (size_t r = 0; r < 4; ++r) {
    const uint8_t* b0 = rows[r] + 2 * s * W::kBytes + off;
    std::memcpy(&h[r], b0, 2);
    if (has1) std::memcpy(&h[4 + r], b0 + W::kBytes, 2);
  }
  const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  return _mm512_maskz_insertf32x4(0x0f0f, _mm512_castps128_ps512(_mm256_castps256_ps128(f)),
                                  _mm256_extractf128_ps(f, 1), 2);
}

// 4 rows x NT tokens over K. Per step the rows' int32 lane sums are reduced to one vector of
// per-row block sums (lanes 0-3: block 2 s of rows 0-3, lanes 8-11: block 2 s + 1; exact int32
// adds), converted and scaled once by d_w d_x (QuadScales); the min types add m_w (d_x sum).
template <class W, size_t NT>
MM_VNNI void TileVnni(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                      size_t K, float* y, size_t ldy) {
  constexpr size_t R = 4;
  const size_t S = (K + kStep - 1) / kStep, full = K / kStep;
  __m512 acc[NT];  // lanes 0-3 and 8-11
  for (auto& v : acc) v = _mm512_setzero_ps();
  auto step = [&](size_t s, bool has1) MM_VNNI_LAMBDA {
    __m512i w[R];
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* b0 = rows[r] + 2 * s * W::kBytes;
      w[r] = W::Codes(b0, b0 + W::kBytes, has1);
    }
    const __m512 dw = QuadScales<W>(rows, s, has1, 0);
    __m512 mw;
    if constexpr (W::kHasMin) mw = QuadScales<W>(rows, s, has1, 2);
    for (size_t t = 0; t < NT; ++t) {
      const uint8_t* a = act + t * stride;
      const __m512i q = _mm512_load_si512(a + s * kStep);
      const __m512i i0 = _mm512_load_si512(a + S * kStep + S * 64 + s * 64);
      const __m512 dx = _mm512_load_ps(a + S * kStep + s * 64);
      __m512i p[R];
      for (size_t r = 0; r < R; ++r) p[r] = _mm512_dpbusd_epi32(i0, w[r], q);
      __m512i u = LaneSums4(p[0], p[1], p[2], p[3]);
      u = _mm512_add_epi32(u, _mm512_shuffle_i64x2(u, u, _MM_SHUFFLE(2, 3, 0, 1)));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_mul_ps(dw, dx), acc[t]);
      if constexpr (W::kHasMin) {
        acc[t] = _mm512_fmadd_ps(mw, _mm512_load_ps(a + S * kStep + S * 128 + s * 64), acc[t]);
      }
    }
  };
  for (size_t s = 0; s < full; ++s) step(s, true);
  if (S > full) step(full, false);
  const __mmask8 m = static_cast<__mmask8>((1u << nr) - 1);
  for (size_t t = 0; t < NT; ++t) {
    _mm_mask_storeu_ps(y + t * ldy, m, _mm_add_ps(_mm512_castps512_ps128(acc[t]),
                                                  _mm512_extractf32x4_ps(acc[t], 2)));
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
