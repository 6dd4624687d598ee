// The int8 q.k path (AVX-512 VNNI) for quantized K; see attention_int8.h and docs/kernels.md.
//
// Per item, each KV head's query vectors are quantized once, 4 at a time ("a pass"): one
// scale per 32 values and two int8 planes, q = scale * (high + low / 256), laid out to pair
// with the K code bytes and replicated over the four 128-bit lanes of a zmm. Scores come 4
// tokens x 4 query vectors at a time: for each 32-value sub-block, the 4 tokens' 16-byte code
// pieces fill the 4 lanes of a zmm and `vpdpbusd` (u8 codes x s8 query: high plane, shift by
// 8, low plane) leaves 4 partial sums per token and query vector; a 4x4 transpose-add reduces
// them to one int32 per (token, query vector), which is scaled by the block scale times the
// query's scale and accumulated in f32. Code offsets (q4_0: 8; q8_0: 128 after xor 0x80) are
// exact: the dot products start from -offset * sum(query codes). Affine biases add
// bias * sum(q) with the float query. The softmax is online per tile of at most 32 tokens
// (scores stored token-major, 4 query vectors per token); V rows are decoded in registers and
// accumulated in f32 as in the Highway fast path (affine4 V in an even/odd value order that is
// restored when the item ends). Nothing here grows with the context.
#include "kernels/attention_int8.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
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

namespace kvtier::attn {
namespace {
std::atomic<bool> g_int8_enabled{true};
}  // namespace

void SetInt8QkEnabled(bool on) { g_int8_enabled.store(on, std::memory_order_relaxed); }
bool Int8QkEnabled() { return g_int8_enabled.load(std::memory_order_relaxed); }

#if KVTIER_INT8_X86
namespace {

#define KV_VNNI \
  __attribute__((target("avx2,fma,f16c,bmi,bmi2,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define KV_INL inline __attribute__((always_inline)) KV_VNNI

bool DetectVnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave || !fma || !f16c) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0xE6) != 0xE6) return false;  // the OS saves xmm, ymm, opmask and zmm state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);  // F DQ BW VL
  const bool avx2_bmi = (b & (1u << 5)) && (b & (1u << 3)) && (b & (1u << 8));
  return (b & avx512) == avx512 && avx2_bmi && (c & (1u << 11));  // AVX512_VNNI
}

enum class Fmt { kQ8_0, kQ4_0, kA8, kA4 };
constexpr uint32_t kTile = 32;

// Row geometry of a format at head_dim kD.
struct Geo {
  size_t scales_off = 0, biases_off = 0;
  uint32_t group_shift = 5;  // log2(values per scale)
  uint32_t n_groups = 0;     // affine: scale groups per row
};

Geo MakeGeo(const Format& f, size_t d) {
  Geo g;
  g.group_shift = static_cast<uint32_t>(__builtin_ctz(f.group));
  g.n_groups = static_cast<uint32_t>(d / f.group);
  if (f.kind == FormatKind::kAffine) {
    g.scales_off = d * f.bits / 8;
    g.biases_off = g.scales_off + 2 * g.n_groups;
  }
  return g;
}

// K side: where a 32-value sub-block's code bytes are and how they pair with query values.
template <Fmt F>
struct KTraits {
  static constexpr bool kNibble = F == Fmt::kQ4_0 || F == Fmt::kA4;  // lo / hi nibble planes
  static constexpr bool kInterleave = F == Fmt::kA4;  // lo nibble of byte i: value 2i
  static constexpr bool kAffine = F == Fmt::kA8 || F == Fmt::kA4;
  static constexpr int kOffset = F == Fmt::kQ4_0 ? 8 : F == Fmt::kQ8_0 ? 128 : 0;
  // Byte offset of piece p (16 bytes) of sub-block b.
  static constexpr size_t PieceOff(size_t b, size_t p) {
    return F == Fmt::kQ4_0 ? 18 * b + 2 : F == Fmt::kQ8_0 ? 34 * b + 2 + 16 * p
                         : F == Fmt::kA8 ? 32 * b + 16 * p : 16 * b;
  }
  // Query value paired with byte i of the lo (p = 0) or hi (p = 1) code vector of sub-block b.
  static constexpr size_t QIndex(size_t b, size_t p, size_t i) {
    return kInterleave ? 32 * b + 2 * i + p : 32 * b + 16 * p + i;
  }
};

// Query vectors of one pass (4), quantized for sub-blocks of 32 values. Lane layouts: code
// vectors repeat 16 bytes per 128-bit lane (one lane per token); float vectors are indexed
// (token j, query g) = 4 j + g.
template <size_t kD>
struct alignas(64) QPack {
  static constexpr size_t kSb = kD / 32;
  int8_t q[kSb][2][2][4][64];  // [sub-block][plane: high, low][codes: lo, hi][query]
  int32_t bias[kSb][4][16];    // -offset * sum of the high-plane codes each int32 lane pairs with
  int32_t bias_low[kSb][16];   // -offset * sum of a query's low-plane codes, lanes (j, g)
  float sq[kSb][16];           // query scale / 256 x softmax scale
  float qf[kSb][16];         // affine: softmax scale x sum of the float query over each group
};

template <size_t kD, Fmt F>
void Quantize(const float* const qv[4], float scale, const Geo& kg, QPack<kD>* p) {
  using T = KTraits<F>;
  std::memset(static_cast<void*>(p), 0, sizeof(*p));
  for (size_t g = 0; g < 4; ++g) {
    for (size_t b = 0; b < QPack<kD>::kSb; ++b) {
      // One scale per K scale group for affine (its sub-blocks then add up as integers),
      // per 32 values otherwise.
      const size_t span = T::kAffine ? size_t{1} << kg.group_shift : 32;
      const size_t first = 32 * b / span * span;
      float amax = 0;
      if (qv[g] != nullptr) {
        for (size_t i = first; i < first + span; ++i) amax = std::max(amax, std::fabs(qv[g][i]));
      }
      // q = sq * (high + low / 256): high = round(q / sq), low = round(256 * remainder).
      const double inv = amax > 0 ? 127.0 / amax : 0.0;
      int8_t qi[2][2][16] = {};  // [plane][codes lo, hi][byte]
      int32_t low_sum = 0;
      for (size_t h = 0; h < 2; ++h) {
        for (size_t i = 0; i < 16 && qv[g] != nullptr; ++i) {
          const double x = qv[g][T::QIndex(b, h, i)] * inv;
          const double hi_q = std::clamp(std::nearbyint(x), -127.0, 127.0);
          const double lo_q = std::clamp(std::nearbyint((x - hi_q) * 256), -127.0, 127.0);
          qi[0][h][i] = static_cast<int8_t>(hi_q);
          qi[1][h][i] = static_cast<int8_t>(lo_q);
          low_sum += qi[1][h][i];
        }
      }
      for (size_t j = 0; j < 4; ++j) {
        for (size_t pl = 0; pl < 2; ++pl) {
          for (size_t h = 0; h < 2; ++h) std::memcpy(&p->q[b][pl][h][g][16 * j], qi[pl][h], 16);
        }
        for (size_t l = 0; l < 4; ++l) {
          int32_t s = 0;
          for (size_t k = 0; k < 4; ++k) s += qi[0][0][4 * l + k] + qi[0][1][4 * l + k];
          p->bias[b][g][4 * j + l] = -T::kOffset * s;
        }
        p->bias_low[b][4 * j + g] = -T::kOffset * low_sum;
        p->sq[b][4 * j + g] = static_cast<float>(amax / 127.0 / 256.0) * scale;
      }
    }
    if constexpr (T::kAffine) {
      const size_t gs = size_t{1} << kg.group_shift;
      for (size_t gr = 0; gr < kg.n_groups; ++gr) {
        double sum = 0;
        for (size_t i = 0; i < gs && qv[g] != nullptr; ++i) sum += qv[g][gr * gs + i];
        for (size_t j = 0; j < 4; ++j) p->qf[gr][4 * j + g] = static_cast<float>(sum) * scale;
      }
    }
  }
}

// The f16 at p (any alignment), as f32 in every lane.
KV_INL __m512 BroadcastF16(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(bits)));
}
KV_INL __m512i Load4(const uint8_t* const r[4], size_t o) {
  __m512i x = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r[0] + o)));
  x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[1] + o)), 1);
  x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[2] + o)), 2);
  return _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[3] + o)), 3);
}

// [a, b, c, d] -> per 128-bit lane j: {sum of a's lane j, b's, c's, d's}.
KV_INL __m512i Reduce4(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i v = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(u, v), _mm512_unpackhi_epi64(u, v));
}

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
// accumulators must be scaled by; leaves probabilities in s (0 where masked).
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
    const __m512i t = _mm512_add_epi32(tj, _mm512_set1_epi32(static_cast<int32_t>(t0 + 4 * k)));
    const __mmask16 vis = _mm512_cmpge_epi32_mask(t, va) & _mm512_cmplt_epi32_mask(t, vb);
    x = _mm512_mask_mov_ps(neg_inf, vis, x);
    mx = _mm512_max_ps(mx, x);
    _mm512_store_ps(s + 16 * k, x);
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
    const __mmask16 vis = _mm512_cmp_ps_mask(x, neg_inf, _CMP_NEQ_OQ);
    const __m512 p = _mm512_maskz_mov_ps(vis, Exp(_mm512_sub_ps(x, m_safe)));
    sum = _mm512_add_ps(sum, p);
    _mm512_store_ps(s + 16 * k, p);
  }
  const __m512 l_new = _mm512_fmadd_ps(_mm512_broadcast_f32x4(_mm_loadu_ps(l)), c, GroupSum(sum));
  _mm_storeu_ps(m, _mm512_castps512_ps128(m_new));
  _mm_storeu_ps(l, _mm512_castps512_ps128(l_new));
  _mm_storeu_ps(corr, _mm512_castps512_ps128(c));
}

// V side: Pair decodes values [32 p, 32 p + 32) of a row into two f32 vectors (affine4: the
// even values, then the odd ones).
template <Fmt F>
struct VDec;
template <>
struct VDec<Fmt::kQ4_0> {
  static KV_INL void Pair(const uint8_t* row, size_t p, const Geo&, __m512& a, __m512& b) {
    const uint8_t* blk = row + 18 * p;
    const __m512 d = BroadcastF16(blk);
    const __m512 table = _mm512_mul_ps(
        _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7), d);
    const __m512i w = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
    a = _mm512_permutexvar_ps(w, table);
    b = _mm512_permutexvar_ps(_mm512_srli_epi32(w, 4), table);
  }
};
template <>
struct VDec<Fmt::kQ8_0> {
  static KV_INL void Pair(const uint8_t* row, size_t p, const Geo&, __m512& a, __m512& b) {
    const uint8_t* blk = row + 34 * p;
    const __m512 d = BroadcastF16(blk);
    const __m128i* c = reinterpret_cast<const __m128i*>(blk + 2);
    a = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(c))), d);
    b = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(c + 1))), d);
  }
};
KV_INL void AffineScale(const uint8_t* row, size_t p, const Geo& g, __m512& s, __m512& bi) {
  const size_t gr = (32 * p) >> g.group_shift;
  s = BroadcastF16(row + g.scales_off + 2 * gr);
  bi = BroadcastF16(row + g.biases_off + 2 * gr);
}
template <>
struct VDec<Fmt::kA8> {
  static KV_INL void Pair(const uint8_t* row, size_t p, const Geo& g, __m512& a, __m512& b) {
    __m512 s, bi;
    AffineScale(row, p, g, s, bi);
    const __m128i* c = reinterpret_cast<const __m128i*>(row + 32 * p);
    a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(c))), s, bi);
    b = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(c + 1))), s, bi);
  }
};
template <>
struct VDec<Fmt::kA4> {
  static KV_INL void Pair(const uint8_t* row, size_t p, const Geo& g, __m512& a, __m512& b) {
    __m512 s, bi;
    AffineScale(row, p, g, s, bi);
    const __m512 table = _mm512_fmadd_ps(
        _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), s, bi);
    const __m512i w =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * p)));
    a = _mm512_permutexvar_ps(w, table);  // vpermps reads the low 4 bits of each index
    b = _mm512_permutexvar_ps(_mm512_srli_epi32(w, 4), table);
  }
};

// The 4 rows' code bytes of sub-block sb paired with the query's lo / hi planes (q4_0 and
// affine4: low / high nibbles of 16 bytes; q8_0: xor 0x80 makes the codes unsigned).
template <Fmt F>
KV_INL void LoadCodes(const uint8_t* const r[4], size_t sb, __m512i low4, __m512i flip,
                      __m512i& lo, __m512i& hi) {
  using T = KTraits<F>;
  (void)low4;
  (void)flip;
  if constexpr (T::kNibble) {
    const __m512i x = Load4(r, T::PieceOff(sb, 0));
    lo = _mm512_and_si512(x, low4);
    hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), low4);
  } else {
    lo = Load4(r, T::PieceOff(sb, 0));
    hi = Load4(r, T::PieceOff(sb, 1));
    if constexpr (F == Fmt::kQ8_0) {
      lo = _mm512_xor_si512(lo, flip);
      hi = _mm512_xor_si512(hi, flip);
    }
  }
}

// Weighted V of one pass: acc[g] = acc[g] * corr[g] + sum_t p[4 t + g] * v_t over n rows from
// vr (stride vs): 4 query vectors x 4 chunks per sweep over the rows. Not inlined, so that its
// 16 accumulators get the registers to themselves.
template <size_t kD, Fmt VF>
__attribute__((noinline)) KV_VNNI void AccumulateV(const uint8_t* vr, size_t vs, uint32_t n,
                                                   const float* p, const float corr[4],
                                                   float* const acc[4], const Geo& vg) {
  constexpr size_t kCG = 4;  // V chunks (16 values) per sweep
  for (size_t c0 = 0; c0 < kD / 16; c0 += kCG) {
    __m512 o[4][kCG];
    for (size_t g = 0; g < 4; ++g) {
      const __m512 cg = _mm512_set1_ps(corr[g]);
      for (size_t c = 0; c < kCG; ++c) o[g][c] = _mm512_mul_ps(_mm512_loadu_ps(acc[g] + (c0 + c) * 16), cg);
    }
    for (uint32_t t = 0; t < n; ++t) {
      __m512 v[kCG];
      for (size_t c = 0; c < kCG; c += 2) VDec<VF>::Pair(vr + t * vs, (c0 + c) / 2, vg, v[c], v[c + 1]);
      for (size_t g = 0; g < 4; ++g) {
        const __m512 pg = _mm512_set1_ps(p[4 * t + g]);
        for (size_t c = 0; c < kCG; ++c) o[g][c] = _mm512_fmadd_ps(pg, v[c], o[g][c]);
      }
    }
    for (size_t g = 0; g < 4; ++g) {
      for (size_t c = 0; c < kCG; ++c) _mm512_storeu_ps(acc[g] + (c0 + c) * 16, o[g][c]);
    }
  }
}

template <size_t kD, Fmt KF, Fmt VF>
KV_VNNI void RunInt8(const Job& job, const Item& it, float* partial) {
  using KT = KTraits<KF>;
  constexpr size_t kSb = kD / 32;
  constexpr size_t kStride = kD + 2;
  const PagedKvView& kv = *job.kv;
  const PagedKvRow& row = kv.rows[it.row];
  const uint32_t G = job.group;
  const uint32_t nq = it.qv_end - it.qv_begin;
  const uint32_t nh = it.head_end - it.head_begin;
  const uint32_t npass = (nq + 3) / 4;
  const Geo kg = MakeGeo(kv.k_format, kD), vg = MakeGeo(kv.v_format, kD);
  ItemQueries qs;
  PrepareItem(job, it, kD, partial, &qs);

  std::unique_ptr<QPack<kD>[]> packs(new QPack<kD>[size_t{nh} * npass]);
  for (uint32_t h = 0; h < nh; ++h) {
    const float* qh = job.q + size_t{it.head_begin + h} * G * kD;
    for (uint32_t ps = 0; ps < npass; ++ps) {
      const float* qv[4];
      for (uint32_t g = 0; g < 4; ++g) {
        qv[g] = 4 * ps + g < nq ? qh + qs.q_off[4 * ps + g] : nullptr;
      }
      Quantize<kD, KF>(qv, job.scale, kg, &packs[size_t{h} * npass + ps]);
    }
  }

  // Scale entries of a K row: q formats one f16 per sub-block; affine the scales, then the
  // biases (read 2 bytes early and shifted down, so no read passes the row's end).
  const uint32_t n_ent = KT::kAffine ? 2 * kg.n_groups : static_cast<uint32_t>(kSb);
  const uint32_t n_gath = (n_ent + 3) / 4;
  alignas(64) int32_t ent_off[4][16];
  for (uint32_t q = 0; q < 4; ++q) {
    for (uint32_t l = 0; l < 16; ++l) {
      const uint32_t e = std::min(4 * q + l % 4, n_ent - 1);
      size_t off;
      if constexpr (KT::kAffine) {
        off = (e < kg.n_groups ? kg.scales_off + 2 * e : kg.biases_off + 2 * (e - kg.n_groups)) - 2;
      } else {
        off = KF == Fmt::kQ4_0 ? 18 * e : 34 * e;
      }
      ent_off[q][l] = static_cast<int32_t>(off);
    }
  }
  const __m512i lane_j = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  // q4_0 scales (words 9 b of a row) of rows A, B into words 4 j + b (j: 0 for A, 1 for B)
  // and, for the second pair, 8 + 4 j + b.
  alignas(64) int16_t q4_words[32];
  for (int w = 0; w < 32; ++w) {
    const int j = (w / 4) % 2, b = std::min<int>(w % 4, static_cast<int>(kSb) - 1);
    q4_words[w] = static_cast<int16_t>(32 * j + 9 * b);
  }
  const __m512i q4_idx = _mm512_load_si512(q4_words);
  // q8_0 scales (bytes 34 b of a row, b < 4) as dwords of its first 128 bytes (lo: 0..63, hi:
  // 64..127): 0 and 8 of lo, 1 and 9 of hi; odd blocks' scales are the dword's high half.
  const __m512i q8_idx = kD == 64 ? _mm512_setr_epi32(0, 8, 8, 8, 0, 8, 8, 8, 0, 8, 8, 8, 0, 8, 8, 8)
                                  : _mm512_setr_epi32(0, 8, 17, 25, 0, 8, 17, 25, 0, 8, 17, 25,
                                                      0, 8, 17, 25);
  const __m512i q8_shift = _mm512_setr_epi32(0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));

  alignas(64) float s[kTile * 4];
  alignas(64) float dummy[kD] = {};
  const uint32_t bt = kv.block_tokens;
  const size_t ks = kv.k_token_stride, vs = kv.v_token_stride;
  for (uint32_t t0 = qs.lo; t0 < qs.hi;) {
    const uint32_t t1 = std::min({qs.hi, (t0 / bt + 1) * bt, t0 + kTile});
    const uint32_t nt = t1 - t0;
    const size_t block = static_cast<size_t>(row.block_table[t0 / bt]);
    const size_t slot = t0 % bt;
    const NextTile next = PlanNextTile(kv, row, it, t1, qs.hi, kTile);
    for (uint32_t h = it.head_begin; h < it.head_end; ++h) {
      PrefetchSlice(next, h - it.head_begin);
      const uint8_t* kb = kv.k_base + block * kv.block_stride + slot * ks + h * kv.k_head_stride;
      const uint8_t* vb = kv.v_base + block * kv.block_stride + slot * vs + h * kv.v_head_stride;
      for (uint32_t ps = 0; ps < npass; ++ps) {
        const uint32_t i0 = 4 * ps;
        const uint32_t nqp = std::min<uint32_t>(4, nq - i0);
        alignas(16) int32_t va[4], vb_[4];
        uint32_t a = t1, b = t0;
        for (uint32_t g = 0; g < 4; ++g) {
          va[g] = vb_[g] = 0;
          if (g >= nqp) continue;
          const uint32_t ag = std::max(t0, qs.first[i0 + g]);
          const uint32_t bg = std::min(t1, qs.pos[i0 + g] + 1);
          if (ag >= bg) continue;
          va[g] = static_cast<int32_t>(ag);
          vb_[g] = static_cast<int32_t>(bg);
          a = std::min(a, ag);
          b = std::max(b, bg);
        }
        if (a >= b) continue;
        const QPack<kD>& qp = packs[size_t{h - it.head_begin} * npass + ps];
        // Scores, 4 tokens x 4 query vectors per step, token-major in s.
        for (uint32_t t = t0; t < t1; t += 4) {
          const uint32_t ntb = std::min<uint32_t>(4, t1 - t);
          const uint8_t* r[4];
          for (uint32_t j = 0; j < 4; ++j) r[j] = kb + (t - t0 + std::min(j, ntb - 1)) * ks;
          // Into L1 ahead of use (the tile is in L2): K rows two steps on, this step's V rows.
          for (uint32_t j = 0; j < 4; ++j) {
            const uint8_t* kp = kb + std::min<size_t>(t - t0 + 8 + j, nt - 1) * ks;
            const uint8_t* vp = vb + (t - t0 + std::min(j, ntb - 1)) * vs;
            for (size_t o = 0; o < kv.k_head_stride; o += 64) _mm_prefetch(reinterpret_cast<const char*>(kp + o), _MM_HINT_T0);
            for (size_t o = 0; o < kv.v_head_stride; o += 64) _mm_prefetch(reinterpret_cast<const char*>(vp + o), _MM_HINT_T0);
          }
          const __m512i rowoff = _mm512_mullo_epi32(
              _mm512_min_epi32(lane_j, _mm512_set1_epi32(static_cast<int32_t>(ntb - 1))),
              _mm512_set1_epi32(static_cast<int32_t>(ks)));
          __m512 dm[4];
          if (KF == Fmt::kQ4_0 && kD <= 128) {
            // Scales at words 0, 9, 18, 27 of each row's first 64 bytes: two 2-row permutes.
            const __m512i w01 = _mm512_permutex2var_epi16(_mm512_loadu_si512(r[0]), q4_idx,
                                                          _mm512_loadu_si512(r[1]));
            const __m512i w23 = _mm512_permutex2var_epi16(_mm512_loadu_si512(r[2]), q4_idx,
                                                          _mm512_loadu_si512(r[3]));
            dm[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_mask_blend_epi16(0xFF00, w01, w23)));
          } else if (KF == Fmt::kQ8_0 && kD <= 128) {
            // One permute per row (its scales into lanes 4 j + b), merged into row j's lanes.
            __m512i x = _mm512_setzero_si512();
            for (uint32_t j = 0; j < 4; ++j) {
              const __m512i lo = _mm512_loadu_si512(r[j]);
              const __m512i y = kD == 64 ? _mm512_permutexvar_epi32(q8_idx, lo)
                                         : _mm512_permutex2var_epi32(lo, q8_idx, _mm512_loadu_si512(r[j] + 64));
              x = _mm512_mask_mov_epi32(x, static_cast<__mmask16>(0xF << (4 * j)), y);
            }
            dm[0] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srlv_epi32(x, q8_shift)));
          } else if (KT::kAffine && n_ent == 4) {
            // Two scales and two biases, 8 contiguous bytes per row.
            const size_t so = kg.scales_off;
            const __m128i x01 = _mm_unpacklo_epi64(
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r[0] + so)),
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r[1] + so)));
            const __m128i x23 = _mm_unpacklo_epi64(
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r[2] + so)),
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r[3] + so)));
            dm[0] = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(x01), x23, 1));
          } else {
          for (uint32_t q = 0; q < n_gath; ++q) {
            __m512i e = _mm512_i32gather_epi32(_mm512_add_epi32(rowoff, _mm512_load_si512(ent_off[q])),
                                               r[0], 1);
            if constexpr (KT::kAffine) e = _mm512_srli_epi32(e, 16);
            dm[q] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(e));
          }
          }
          __m512 sc = _mm512_setzero_ps();
          // Sub-blocks sharing a K scale (affine groups) add up as integers before the
          // reduction; q8_0 / q4_0 blocks are one sub-block each.
          const size_t span = KT::kAffine ? size_t{1} << (kg.group_shift - 5) : 1;
          for (size_t sb0 = 0; sb0 < kSb; sb0 += span) {
            __m512i acc[4];
            if (span == 1) {
              __m512i lo, hi;
              LoadCodes<KF>(r, sb0, low4, flip, lo, hi);
              // 256 x (codes . high plane) + codes . low plane, offsets included.
              for (size_t g = 0; g < 4; ++g) {
                acc[g] = _mm512_dpbusd_epi32(_mm512_load_si512(qp.bias[sb0][g]), lo,
                                             _mm512_load_si512(qp.q[sb0][0][0][g]));
                acc[g] = _mm512_dpbusd_epi32(acc[g], hi, _mm512_load_si512(qp.q[sb0][0][1][g]));
                acc[g] = _mm512_slli_epi32(acc[g], 8);
                acc[g] = _mm512_dpbusd_epi32(acc[g], lo, _mm512_load_si512(qp.q[sb0][1][0][g]));
                acc[g] = _mm512_dpbusd_epi32(acc[g], hi, _mm512_load_si512(qp.q[sb0][1][1][g]));
              }
            } else {  // affine: no code offset
              __m512i ah[4], al[4];
              for (size_t g = 0; g < 4; ++g) ah[g] = al[g] = _mm512_setzero_si512();
              for (size_t sb = sb0; sb < sb0 + span; ++sb) {
                __m512i lo, hi;
                LoadCodes<KF>(r, sb, low4, flip, lo, hi);
                for (size_t g = 0; g < 4; ++g) {
                  ah[g] = _mm512_dpbusd_epi32(ah[g], lo, _mm512_load_si512(qp.q[sb][0][0][g]));
                  ah[g] = _mm512_dpbusd_epi32(ah[g], hi, _mm512_load_si512(qp.q[sb][0][1][g]));
                  al[g] = _mm512_dpbusd_epi32(al[g], lo, _mm512_load_si512(qp.q[sb][1][0][g]));
                  al[g] = _mm512_dpbusd_epi32(al[g], hi, _mm512_load_si512(qp.q[sb][1][1][g]));
                }
              }
              for (size_t g = 0; g < 4; ++g) acc[g] = _mm512_add_epi32(_mm512_slli_epi32(ah[g], 8), al[g]);
            }
            __m512i isum = Reduce4(acc[0], acc[1], acc[2], acc[3]);
            if constexpr (!KT::kAffine) isum = _mm512_add_epi32(isum, _mm512_load_si512(qp.bias_low[sb0]));
            const uint32_t e = KT::kAffine ? static_cast<uint32_t>((32 * sb0) >> kg.group_shift)
                                           : static_cast<uint32_t>(sb0);
            const __m512 d = _mm512_permutexvar_ps(
                _mm512_add_epi32(_mm512_slli_epi32(lane_j, 2), _mm512_set1_epi32(static_cast<int32_t>(e % 4))),
                dm[e / 4]);
            sc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, _mm512_load_ps(qp.sq[sb0])), sc);
          }
          if constexpr (KT::kAffine) {
            for (uint32_t gr = 0; gr < kg.n_groups; ++gr) {
              const uint32_t e = kg.n_groups + gr;
              const __m512 bias = _mm512_permutexvar_ps(
                  _mm512_add_epi32(_mm512_slli_epi32(lane_j, 2), _mm512_set1_epi32(static_cast<int32_t>(e % 4))),
                  dm[e / 4]);
              sc = _mm512_fmadd_ps(bias, _mm512_load_ps(qp.qf[gr]), sc);
            }
          }
          _mm512_store_ps(s + 4 * (t - t0), sc);
        }
        // Online softmax.
        float m[4], l[4], corr[4];
        float* st[4];
        for (uint32_t g = 0; g < 4; ++g) {
          st[g] = g < nqp ? partial + (size_t{h - it.head_begin} * nq + i0 + g) * kStride : nullptr;
          m[g] = st[g] ? st[g][0] : -std::numeric_limits<float>::infinity();
          l[g] = st[g] ? st[g][1] : 0.0f;
        }
        Softmax4(s, (nt + 3) / 4, t0, va, vb_, job.softcap, m, l, corr);
        float* acc_ptr[4];
        for (uint32_t g = 0; g < 4; ++g) {
          if (st[g]) {
            st[g][0] = m[g];
            st[g][1] = l[g];
          }
          acc_ptr[g] = st[g] ? st[g] + 2 : dummy;
        }
        AccumulateV<kD, VF>(vb + size_t{a - t0} * vs, vs, b - a, s + 4 * (a - t0), corr, acc_ptr, vg);
      }
    }
    t0 = t1;
  }
  if constexpr (VF == Fmt::kA4) {  // accumulators back from even / odd order to value order
    for (size_t j = 0; j < size_t{nh} * nq; ++j) {
      float* acc = partial + j * kStride + 2;
      for (size_t p = 0; p < kD; p += 32) {
        float tmp[32];
        std::memcpy(tmp, acc + p, sizeof(tmp));
        for (size_t i = 0; i < 16; ++i) {
          acc[p + 2 * i] = tmp[i];
          acc[p + 2 * i + 1] = tmp[16 + i];
        }
      }
    }
  }
}

bool ToFmt(const Format& f, Fmt* out) {
  switch (f.kind) {
    case FormatKind::kQ8_0: *out = Fmt::kQ8_0; return true;
    case FormatKind::kQ4_0: *out = Fmt::kQ4_0; return true;
    case FormatKind::kAffine:
      if (f.scale_dtype != DType::kF16 || f.group < 32) return false;
      if (f.bits == 8) *out = Fmt::kA8;
      else if (f.bits == 4) *out = Fmt::kA4;
      else return false;
      return true;
    default: return false;
  }
}

template <size_t kD>
bool RunD(const Job& job, const Item& it, float* partial, Fmt k, Fmt v) {
#define KVTIER_INT8_PAIR(KF, VF)                             \
  if (k == Fmt::KF && v == Fmt::VF) {                        \
    RunInt8<kD, Fmt::KF, Fmt::VF>(job, it, partial);         \
    return true;                                             \
  }
  KVTIER_INT8_PAIR(kQ8_0, kQ8_0)
  KVTIER_INT8_PAIR(kQ4_0, kQ4_0)
  KVTIER_INT8_PAIR(kA8, kA8)
  KVTIER_INT8_PAIR(kA4, kA4)
  KVTIER_INT8_PAIR(kQ8_0, kQ4_0)
#undef KVTIER_INT8_PAIR
  return false;
}

}  // namespace

bool Int8QkAvailable() {
  static const bool available = DetectVnni();
  return available;
}

bool RunItemInt8(const Job& job, const Item& it, float* partial) {
  if (!Int8QkAvailable()) return false;
  const PagedKvView& kv = *job.kv;
  Fmt k, v;
  if (!ToFmt(kv.k_format, &k) || !ToFmt(kv.v_format, &v)) return false;
  switch (kv.head_dim) {
    case 64: return RunD<64>(job, it, partial, k, v);
    case 128: return RunD<128>(job, it, partial, k, v);
    case 256: return RunD<256>(job, it, partial, k, v);
    default: return false;
  }
}

#else  // !KVTIER_INT8_X86

bool Int8QkAvailable() { return false; }
bool RunItemInt8(const Job&, const Item&, float*) { return false; }

#endif  // KVTIER_INT8_X86

}  // namespace kvtier::attn
