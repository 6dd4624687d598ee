// Shared pieces of the int8 q.k path (attention_int8.cc): the AVX-512
// VNNI target attributes, the K code traits, the query packing, the dot-product and softmax
// helpers and the tile drip. int8_qk.h (scores) and int8_v.h (weighted V) build on it.
// Internal to src/kernels, for attention_int8.cc only (everything is inline or a template,
// compiled with the VNNI target attribute). Stateless; thread-safe.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "quant/format_traits.h"
#include "quant/rot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(KVTIER_NO_INT8)
#define KVTIER_INT8_X86 1
#if !defined(__clang__)
// GCC 12's AVX-512 intrinsics start from self-initialised "undefined" vectors, which
// -W(maybe-)uninitialized reports once they are inlined here (Highway silences it the same way).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>
#else
#define KVTIER_INT8_X86 0
#endif

#if KVTIER_INT8_X86

#define KV_VNNI \
  __attribute__((target("avx2,fma,f16c,bmi,bmi2,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define KV_INL inline __attribute__((always_inline)) KV_VNNI

namespace kvtier::attn::int8 {

// K / V code layouts: the pair table's (dispatch.h).
using Fmt = KvCode;
constexpr uint32_t kTile = 32;

// Row geometry of a format at head_dim kD: quant's row layout (f16 scales: the path serves
// no other affine scale dtype).
using Geo = RowLayout;

constexpr bool IsRot(Fmt f) { return f == Fmt::kRot4 || f == Fmt::kRot3 || f == Fmt::kRot2; }
// Bytes of one 32-value block of a block format (q8_0, q4_0, rot: the scale leads each block).
constexpr size_t BlockBytesOf(Fmt f) {
  return f == Fmt::kQ8_0 ? Q8_0Traits::kBlockBytes
       : f == Fmt::kQ4_0 ? Q4_0Traits::kBlockBytes
                         : RotBlockBytes(CodeBits(f));
}

// K side: where a 32-value sub-block's code bytes are and how they pair with query values.
// Rotated formats (rot4 / rot3 / rot2) are read as quant/rot.h's fixed-point codebook bytes
// u = round(kScale * level) + kOffset (RotPieces16 in int8_qk.h), paired like q8_0's bytes.
template <Fmt F>
struct KTraits {
  static constexpr bool kNibble = F == Fmt::kQ4_0 || F == Fmt::kAffine4;  // lo / hi nibble planes
  static constexpr bool kInterleave = F == Fmt::kAffine4;  // lo nibble of byte i: value 2i
  static constexpr bool kAffine = F == Fmt::kAffine8 || F == Fmt::kAffine4;
  static constexpr bool kRot = IsRot(F);
  static constexpr int kRotBits = F == Fmt::kRot4 ? 4 : F == Fmt::kRot3 ? 3 : 2;
  // Code offsets: q4_0's zero point; q8_0's signed codes are read unsigned after xor 0x80;
  // rot: the fixed-point codebook's.
  static constexpr int kOffset = F == Fmt::kQ4_0 ? Q4_0Traits::kZeroPoint
                               : F == Fmt::kQ8_0 ? 128
                               : kRot            ? RotFixedLevels<kRotBits>::kOffset
                                                 : 0;
  // The value of one code step (rot: 1 / kScale of the block scale).
  static constexpr float kCodeStep = kRot ? 1.0f / static_cast<float>(RotFixedLevels<kRotBits>::kScale) : 1.0f;
  // Byte offset of piece p (16 bytes) of sub-block b.
  static constexpr size_t PieceOff(size_t b, size_t p) {
    return F == Fmt::kQ4_0 ? SubBlockCodes(KvCode::kQ4_0, b)
         : F == Fmt::kQ8_0 ? SubBlockCodes(KvCode::kQ8_0, b) + 16 * p
         : F == Fmt::kAffine8   ? SubBlockCodes(KvCode::kAffine8, b) + 16 * p
                           : SubBlockCodes(KvCode::kAffine4, b);
  }
  // Query value paired with byte i of the lo (p = 0) or hi (p = 1) code vector of sub-block b.
  static constexpr size_t QIndex(size_t b, size_t p, size_t i) {
    return kInterleave ? 32 * b + 2 * i + p : 32 * b + 16 * p + i;
  }
};

// Query vectors of one pass (4), quantized for sub-blocks of 32 values: the codes laid out to
// pair byte for byte with a K row's code pieces (ScoreStep16 broadcasts 4 bytes at a time).
template <size_t kD>
struct alignas(64) QPack {
  static constexpr size_t kSb = kD / 32;
  int8_t q[kSb][2][2][4][16];  // [sub-block][plane: high, low][codes: lo, hi piece][query]
  int32_t bias_hi[kSb][4];     // -offset * sum of a query's high-plane codes
  int32_t bias_low[kSb][4];    // -offset * sum of its low-plane codes
  float sq[kSb][4];            // query scale / 256 x softmax scale
  float qf[kSb][4];            // affine: softmax scale x sum of the float query over each group
};

// Quantizes the pass's 4 query vectors (null: absent, all zero) into p; vectorized (AVX-512),
// once per item and KV head. Values are rounded in f32: q * (127 / amax) is within a few ulps
// of the exact product, far below the low plane's step (1/256 of a code).
template <size_t kD, Fmt F>
KV_VNNI void Quantize(const float* const qv[4], float scale, const Geo& kg, QPack<kD>* p) {
  using T = KTraits<F>;
  std::memset(static_cast<void*>(p), 0, sizeof(*p));
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i even = _mm512_add_epi32(iota, iota);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  // One scale per K scale group for affine (its sub-blocks then add up as integers), per 32
  // values otherwise.
  const size_t span = T::kAffine ? size_t{1} << kg.group_shift : 32;
  for (size_t g = 0; g < 4; ++g) {
    if (qv[g] == nullptr) continue;  // codes, biases and scales stay 0
    const float* q = qv[g];
    for (size_t b = 0; b < QPack<kD>::kSb; ++b) {
      const size_t first = 32 * b / span * span;
      __m512 am = _mm512_setzero_ps();
      for (size_t i = first; i < first + span; i += 16) {
        am = _mm512_max_ps(am, _mm512_and_ps(_mm512_loadu_ps(q + i), abs_mask));
      }
      const float amax = _mm512_reduce_max_ps(am);
      const __m512 inv = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
      __m512 x[2] = {_mm512_loadu_ps(q + 32 * b), _mm512_loadu_ps(q + 32 * b + 16)};
      if constexpr (T::kInterleave) {  // lo codes pair with even values, hi with odd
        const __m512 e = _mm512_permutex2var_ps(x[0], even, x[1]);
        x[1] = _mm512_permutex2var_ps(x[0], odd, x[1]);
        x[0] = e;
      }
      // q = sq * (high + low / 256): high = round(q / sq), low = round(256 * remainder).
      __m512i hi_sum = _mm512_setzero_si512(), low_sum = _mm512_setzero_si512();
      for (size_t h = 0; h < 2; ++h) {
        const __m512 xs = _mm512_mul_ps(x[h], inv);
        const __m512i hi = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(xs), lim), nlim);
        const __m512 rem = _mm512_mul_ps(_mm512_sub_ps(xs, _mm512_cvtepi32_ps(hi)), _mm512_set1_ps(256.0f));
        const __m512i lo = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(rem), lim), nlim);
        hi_sum = _mm512_add_epi32(hi_sum, hi);
        low_sum = _mm512_add_epi32(low_sum, lo);
        _mm_store_si128(reinterpret_cast<__m128i*>(p->q[b][0][h][g]), _mm512_cvtepi32_epi8(hi));
        _mm_store_si128(reinterpret_cast<__m128i*>(p->q[b][1][h][g]), _mm512_cvtepi32_epi8(lo));
      }
      p->bias_hi[b][g] = -T::kOffset * _mm512_reduce_add_epi32(hi_sum);
      p->bias_low[b][g] = -T::kOffset * _mm512_reduce_add_epi32(low_sum);
      p->sq[b][g] = amax / 127.0f / 256.0f * scale * T::kCodeStep;
    }
    if constexpr (T::kAffine) {
      const size_t gs = size_t{1} << kg.group_shift;
      for (size_t gr = 0; gr < kg.n_groups; ++gr) {
        __m512 sum = _mm512_setzero_ps();
        for (size_t i = 0; i < gs; i += 16) sum = _mm512_add_ps(sum, _mm512_loadu_ps(q + gr * gs + i));
        p->qf[gr][g] = _mm512_reduce_add_ps(sum) * scale;
      }
    }
  }
}

// acc + the pairwise products of a and b (vpdpwssd). g++ 12 does not keep the builtin's
// accumulator in one register across a loop: it copied every accumulator twice per trip of
// AccumulateV's loop (94 instructions a trip instead of ~55); the asm ties it.
KV_INL __m512i DpWssd(__m512i acc, __m512i a, __m512i b) {
#if defined(__clang__)
  return _mm512_dpwssd_epi32(acc, a, b);
#else
  __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
#endif
}

// acc + per int32 lane the sum of the 4 products of a's unsigned bytes with b's signed bytes
// (vpdpbusd); asm as DpWssd above.
KV_INL __m512i DpBusd(__m512i acc, __m512i a, __m512i b) {
#if defined(__clang__)
  return _mm512_dpbusd_epi32(acc, a, b);
#else
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
#endif
}

// acc + per int32 lane the sum of 4 products of a's unsigned bytes with the 4 signed bytes at
// q (broadcast to every lane; vpdpbusd with an embedded broadcast); asm as DpWssd above.
KV_INL __m512i DpBusdBcast(__m512i acc, __m512i a, const int8_t* q) {
#if defined(__clang__)
  int32_t v;
  std::memcpy(&v, q, 4);
  return _mm512_dpbusd_epi32(acc, a, _mm512_set1_epi32(v));
#else
  __asm__("vpdpbusd %2%{1to16%}, %1, %0"
          : "+v"(acc)
          : "v"(a), "m"(*reinterpret_cast<const int8_t(*)[4]>(q)));
  return acc;
#endif
}

KV_INL __m512i Load4(const uint8_t* const r[4], size_t o) {
  __m512i x = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r[0] + o)));
  x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[1] + o)), 1);
  x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[2] + o)), 2);
  return _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[3] + o)), 3);
}

// AVX-512 VBMI byte ops for the rot formats, as asm: the path's functions carry the VNNI
// target only (VBMI would shut q4_0 / q8_0 out of CPUs without it), and rot pairs run only where
// Int8RotAvailable() (dispatch.h) found VBMI.
// Per qword, byte j of the result = the 8 bits of x's qword from bit ctrl byte j (vpmultishiftqb).
KV_INL __m512i MultiShift(__m512i ctrl, __m512i x) {
  __m512i r;
  __asm__("vpmultishiftqb %2, %1, %0" : "=v"(r) : "v"(ctrl), "v"(x));
  return r;
}
// Byte i of the result = table byte idx[i] % 64 (vpermb).
KV_INL __m512i PermB(__m512i table, __m512i idx) {
  __m512i r;
  __asm__("vpermb %2, %1, %0" : "=v"(r) : "v"(idx), "v"(table));
  return r;
}

// The constants of a rot format's decode: the multishift controls that take codes 0..3 (a) and
// 4..7 (b) of each dword's 8 codes (kBits apart) into its 4 bytes, and the fixed-point levels
// as a 64-byte table (entry i: level i % 2^kBits, so the bits above a code never matter).
struct alignas(64) Bytes64 {
  uint8_t b[64];
};
template <int kBits>
struct RotConsts {
  static constexpr Bytes64 kTable = [] {
    constexpr RotFixedLevels<kBits> kLevels;
    Bytes64 x{};
    for (int i = 0; i < 64; ++i) x.b[i] = kLevels.u[i % (1 << kBits)];
    return x;
  }();
  static constexpr uint64_t Ctrl(int first) {
    uint64_t c = 0;
    for (int j = 0; j < 8; ++j) c |= static_cast<uint64_t>(32 * (j / 4) + kBits * (first + j % 4)) << (8 * j);
    return c;
  }
  __m512i ctrl_a, ctrl_b, table;
  KV_INL RotConsts()
      : ctrl_a(_mm512_set1_epi64(static_cast<long long>(Ctrl(0)))),
        ctrl_b(_mm512_set1_epi64(static_cast<long long>(Ctrl(4)))),
        table(_mm512_load_si512(kTable.b)) {}
};
struct NoRotConsts {};

// The codes of one rot block of rows r[0..3] (block codes at byte o of each row): 128-bit lane
// i holds row i's 32 codes, dword j codes 8 j .. 8 j + 7, kBits apart from bit 0 (rot4: the
// 16 code bytes as they are; rot3: 3 bytes per dword; rot2: 2). Loads stop at the block's end
// where `last` (the row's last block); other blocks take plain 16-byte loads.
template <int kBits>
KV_INL __m512i RotCodes4(const uint8_t* const r[4], size_t o, bool last = true) {
  if constexpr (kBits == 4) {
    return Load4(r, o);
  } else {
    constexpr __mmask16 kMask = kBits == 3 ? 0x0fff : 0x00ff;
    __m512i x;
    if (last) {
      x = _mm512_castsi128_si512(_mm_maskz_loadu_epi8(kMask, r[0] + o));
      x = _mm512_inserti32x4(x, _mm_maskz_loadu_epi8(kMask, r[1] + o), 1);
      x = _mm512_inserti32x4(x, _mm_maskz_loadu_epi8(kMask, r[2] + o), 2);
      x = _mm512_inserti32x4(x, _mm_maskz_loadu_epi8(kMask, r[3] + o), 3);
    } else {
      x = Load4(r, o);  // the bytes past the codes go nowhere (the spread skips them)
    }
    const __m128i spread = kBits == 3 ? _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1)
                                      : _mm_setr_epi8(0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7, -1, -1);
    return _mm512_shuffle_epi8(x, _mm512_broadcast_i32x4(spread));
  }
}

// Rot V (3 and 2 bits) without spreading the codes: rows r[0..3]'s raw code bytes of one
// block in 128-bit lane r (16-byte loads; masked to the block's code bytes for the last block
// of a row, so no read passes the row's end), and per chunk c the vpermb index and the
// vpmultishiftqb control that put, for each dword k of the chunk, the code of value
// v = 8 (k / 4) + 4 c + k % 4 of row r into byte r (AccumulateVRot's order): qword m (dwords
// 2 m, 2 m + 1: values v, v + 1) first gets the 2-byte window of each row that holds both
// codes (bytes 2 r, 2 r + 1), then each code goes to its byte.
template <int kBits>
KV_INL __m512i RotRaw4(const uint8_t* const r[4], size_t o, bool last) {
  if (!last) return Load4(r, o);
  constexpr __mmask16 kMask = static_cast<__mmask16>((1u << (32 * kBits / 8)) - 1);
  __m512i x = _mm512_castsi128_si512(_mm_maskz_loadu_epi8(kMask, r[0] + o));
  x = _mm512_inserti32x4(x, _mm_maskz_loadu_epi8(kMask, r[1] + o), 1);
  x = _mm512_inserti32x4(x, _mm_maskz_loadu_epi8(kMask, r[2] + o), 2);
  return _mm512_inserti32x4(x, _mm_maskz_loadu_epi8(kMask, r[3] + o), 3);
}
template <int kBits>
struct RotVQuads {
  static constexpr int Value(int m, int c) { return 8 * (2 * m / 4) + 4 * c + (2 * m) % 4; }
  static constexpr Bytes64 Idx(int c) {
    Bytes64 x{};
    for (int m = 0; m < 8; ++m) {
      const int at = kBits * Value(m, c) / 8;
      for (int r = 0; r < 4; ++r) {
        for (int e = 0; e < 2; ++e) x.b[8 * m + 2 * r + e] = static_cast<uint8_t>(16 * r + at + e);
      }
    }
    return x;
  }
  static constexpr Bytes64 Ctrl(int c) {
    Bytes64 x{};
    for (int m = 0; m < 8; ++m) {
      const int s = kBits * Value(m, c) % 8;
      static_assert(kBits <= 4, "two codes in a 2-byte window");
      for (int e = 0; e < 2; ++e) {
        for (int r = 0; r < 4; ++r) x.b[8 * m + 4 * e + r] = static_cast<uint8_t>(16 * r + s + kBits * e);
      }
    }
    return x;
  }
  static constexpr Bytes64 kIdx0 = Idx(0), kIdx1 = Idx(1), kCtrl0 = Ctrl(0), kCtrl1 = Ctrl(1);
};

// exp(x) for x <= 88 (relative error ~2e-7); callers mask -inf inputs.
KV_INL __m512 Exp(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Per 4-lane group: every group gets the max / sum over the 4 groups of each lane position.
KV_INL __m512 GroupMax(__m512 v) {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
}
KV_INL __m512 GroupSum(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
}

// Online softmax over a tile for 4 query vectors; s is token-major ([token][4]), nv vectors of
// 4 tokens from t0. Query g sees keys [a[g], b[g]). Updates m, l and returns the factors the
// accumulators must be scaled by; leaves probabilities in s (0 where masked). kMasked false:
// every query sees all 4 nv tokens (the masks are skipped).
template <bool kMasked>
KV_INL void Softmax4(float* s, uint32_t nv, uint32_t t0, const int32_t a[4], const int32_t b[4],
                     float softcap, float m[4], float l[4], float corr[4]) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512i tj = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i va = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  const __m512i vb = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  __m512 mx = neg_inf;
  for (uint32_t k = 0; k < nv; ++k) {
    __m512 x = _mm512_load_ps(s + 16 * k);
    if (softcap > 0) {  // cap * tanh(x / cap), tanh(y) = 1 - 2 / (exp(2y) + 1)
      const __m512 cap = _mm512_set1_ps(softcap), one = _mm512_set1_ps(1.0f);
      const __m512 e = Exp(_mm512_mul_ps(x, _mm512_set1_ps(2.0f / softcap)));
      x = _mm512_mul_ps(cap, _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f),
                                                              _mm512_add_ps(e, one))));
    }
    if constexpr (kMasked) {
      const __m512i t = _mm512_add_epi32(tj, _mm512_set1_epi32(static_cast<int32_t>(t0 + 4 * k)));
      const __mmask16 vis = _mm512_cmpge_epi32_mask(t, va) & _mm512_cmplt_epi32_mask(t, vb);
      x = _mm512_mask_mov_ps(neg_inf, vis, x);
    }
    mx = _mm512_max_ps(mx, x);
    if (kMasked || softcap > 0) _mm512_store_ps(s + 16 * k, x);
  }
  const __m512 m_old = _mm512_broadcast_f32x4(_mm_loadu_ps(m));
  const __m512 m_new = _mm512_max_ps(m_old, GroupMax(mx));
  const __mmask16 none = _mm512_cmp_ps_mask(m_new, neg_inf, _CMP_EQ_OQ);
  const __m512 m_safe = _mm512_mask_mov_ps(m_new, none, _mm512_setzero_ps());
  const __mmask16 had = _mm512_cmp_ps_mask(m_old, neg_inf, _CMP_NEQ_OQ);
  const __m512 c = _mm512_maskz_mov_ps(had, Exp(_mm512_sub_ps(m_old, m_safe)));
  __m512 sum = _mm512_setzero_ps();
  for (uint32_t k = 0; k < nv; ++k) {
    const __m512 x = _mm512_load_ps(s + 16 * k);
    __m512 p = Exp(_mm512_sub_ps(x, m_safe));
    if constexpr (kMasked) p = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, neg_inf, _CMP_NEQ_OQ), p);
    sum = _mm512_add_ps(sum, p);
    _mm512_store_ps(s + 16 * k, p);
  }
  const __m512 l_new = _mm512_fmadd_ps(_mm512_broadcast_f32x4(_mm_loadu_ps(l)), c, GroupSum(sum));
  _mm_storeu_ps(m, _mm512_castps512_ps128(m_new));
  _mm_storeu_ps(l, _mm512_castps512_ps128(l_new));
  _mm_storeu_ps(corr, _mm512_castps512_ps128(c));
}

// The next tile's K and V lines (two contiguous ranges, K first), brought into L2 a line or
// two at a time over the whole of the current tile: a step per score slot (a sub-block and
// query vector of a score step; the score step takes a sub-block's 4 at once) and per V slot
// (a token pair of a V sweep), which take about the same time. A software prefetch that misses
// holds a line-fill buffer for a DRAM latency: in bursts they stall the tile's own loads, and
// drips during the score steps alone left DRAM idle through the V pass (docs/kernels.md).
struct TileDrip {
  const uint8_t* p = nullptr;   // next line of the current range
  const uint8_t* p2 = nullptr;  // the V range, once K is done
  uint32_t left = 0, left2 = 0;  // lines
  uint32_t rate = 0, credit = 0;  // lines per slot and owed, 16.16 fixed point
  KV_INL void Step(uint32_t slots = 1) {
    credit += slots * rate;
    while (credit >= (1u << 16) && left > 0) {
      _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
      p += 64;
      credit -= 1u << 16;
      if (--left == 0) {
        p = p2;
        left = left2;
        left2 = 0;
      }
    }
  }
};

}  // namespace kvtier::attn::int8

#endif  // KVTIER_INT8_X86
