// The int8 q.k path (AVX-512 VNNI) for quantized K; see attention_int8.h and docs/kernels.md.
//
// Per item, each KV head's query vectors are quantized once, 4 at a time ("a pass"), with
// AVX-512: one scale per 32 values (affine: per K scale group) and two int8 planes,
// q = scale * (high + low / 256), laid out to pair byte for byte with the K code bytes.
// Scores come 16 tokens x 4 query vectors per step (attention_int8_qk-inl.h): the 16 rows'
// code pieces are transposed so that each int32 lane holds one row, and `vpdpbusd` against
// broadcast query bytes sums each row in its own lane (high plane, low plane), no horizontal
// reductions; the sums are scaled by the rows' block scales times the query's scale. Code
// offsets (q4_0: 8; q8_0: 128 after xor 0x80) are exact: the dot products start from
// -offset * sum(query codes). Affine biases add bias * sum(q) with the float query. Per tile
// of at most 32 tokens, every head's scores come first, step by step with the heads inside (K
// read in address order), into one small buffer per head and pass; then, head by head, the
// online softmax (scores token-major, 4 query vectors per token) and V: each block's scale is
// folded into the softmax weights, which are rounded per tile (int16 for 8-bit V, summed two
// tokens per `vpdpwssd`; int8 for 4-bit V, four tokens per `vpdpbusd`) and the int32 sums
// scaled into f32 accumulators once per tile (attention_int8_v-inl.h; affine4 V in an even /
// odd value order that is restored when the item ends). Items of every KV head (decode) bring
// the next tile into L2 a line or two at a time over the current tile's score and V work
// (TileDrip); L1 prefetches run a score step ahead (see ScoreStep16).
// Nothing here grows with the context. Stateless apart from the on/off switch; thread-safe.
#include "kernels/attention_int8.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "quant/format_traits.h"

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

// Row geometry of a format at head_dim kD: quant's row layout (f16 scales: the path serves
// no other affine scale dtype).
using Geo = RowLayout;

// K side: where a 32-value sub-block's code bytes are and how they pair with query values.
template <Fmt F>
struct KTraits {
  static constexpr bool kNibble = F == Fmt::kQ4_0 || F == Fmt::kA4;  // lo / hi nibble planes
  static constexpr bool kInterleave = F == Fmt::kA4;  // lo nibble of byte i: value 2i
  static constexpr bool kAffine = F == Fmt::kA8 || F == Fmt::kA4;
  // Code offsets: q4_0's zero point; q8_0's signed codes are read unsigned after xor 0x80.
  static constexpr int kOffset = F == Fmt::kQ4_0 ? Q4_0Traits::kZeroPoint : F == Fmt::kQ8_0 ? 128 : 0;
  // Byte offset of piece p (16 bytes) of sub-block b.
  static constexpr size_t PieceOff(size_t b, size_t p) {
    return F == Fmt::kQ4_0 ? SubBlockCodes(KvCode::kQ4_0, b)
         : F == Fmt::kQ8_0 ? SubBlockCodes(KvCode::kQ8_0, b) + 16 * p
         : F == Fmt::kA8   ? SubBlockCodes(KvCode::kAffine8, b) + 16 * p
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
      p->sq[b][g] = amax / 127.0f / 256.0f * scale;
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

#include "kernels/attention_int8_qk-inl.h"
#include "kernels/attention_int8_v-inl.h"

template <size_t kD, Fmt KF, Fmt VF>
KV_VNNI void RunInt8(const Job& job, const Item& it, float* partial) {
  constexpr size_t kStride = kD + 2;
  const PagedKvView& kv = *job.kv;
  const PagedKvRow& row = kv.rows[it.row];
  const uint32_t G = job.group;
  const uint32_t nq = it.qv_end - it.qv_begin;
  const uint32_t nh = it.head_end - it.head_begin;
  const uint32_t npass = (nq + 3) / 4;
  const Geo kg = MakeRowLayout(kv.k_format, kD), vg = MakeRowLayout(kv.v_format, kD);
  const VScales<kD, VF> vsc = MakeVScales<kD, VF>(vg);
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

  const KEntries<kD, KF> kent(kg);

  alignas(64) float dummy[kD] = {};
  const uint32_t bt = kv.block_tokens;
  const size_t ks = kv.k_token_stride, vs = kv.v_token_stride;
  // Per tile: first the scores of every head and pass, a 16-token step at a time with the heads
  // inside, so that K is read in address order (the rows of a step are one contiguous stretch
  // of the block) and the hardware prefetchers stream it; then softmax and V head by head.
  // The next tile goes into L2 over the whole of this one (TileDrip: bursts of it, or a drip
  // during the score steps alone, were slower); L1 prefetches bring the next step's K rows
  // (and, where the tile's V rows were not dripped, this step's V rows) a step ahead.
  struct alignas(64) TileScores {
    float s[kTile * 4];  // [token][query vector of the pass]
  };
  struct PassMask {
    alignas(16) int32_t a[4];  // query g sees keys [a[g], b[g]) of the tile
    alignas(16) int32_t b[4];
    uint32_t lo = 0, hi = 0;   // union of the ranges
    bool whole = false;        // 4 queries that all see the whole tile, of whole quads
  };
  bool v_in_l2 = false;  // this tile's V rows were dripped into L2 during the tile before
  std::unique_ptr<TileScores[]> sc(new TileScores[size_t{nh} * npass]);  // [head][pass]
  std::unique_ptr<PassMask[]> masks(new PassMask[npass]);
  const size_t khs = kv.k_head_stride, vhs = kv.v_head_stride;
  for (uint32_t t0 = qs.lo; t0 < qs.hi;) {
    const uint32_t t1 = std::min({qs.hi, (t0 / bt + 1) * bt, t0 + kTile});
    const uint32_t nt = t1 - t0;
    const size_t block = static_cast<size_t>(row.block_table[t0 / bt]);
    const size_t slot = t0 % bt;
    const NextTile next = PlanNextTile(kv, row, it, t1, qs.hi, kTile);
    const uint32_t n_next = next.n;
    // Rows of the item's first head in this tile.
    const uint8_t* kt = kv.k_base + block * kv.block_stride + slot * ks + it.head_begin * khs;
    const uint8_t* vt = kv.v_base + block * kv.block_stride + slot * vs + it.head_begin * vhs;
    bool any = false;
    for (uint32_t ps = 0; ps < npass; ++ps) {
      PassMask& pm = masks[ps];
      const uint32_t i0 = 4 * ps;
      const uint32_t nqp = std::min<uint32_t>(4, nq - i0);
      pm.lo = t1;
      pm.hi = t0;
      pm.whole = nqp == 4 && nt % 4 == 0;
      for (uint32_t g = 0; g < 4; ++g) {
        pm.a[g] = pm.b[g] = 0;
        if (g >= nqp) continue;
        const uint32_t ag = std::max(t0, qs.first[i0 + g]);
        const uint32_t bg = std::min(t1, qs.pos[i0 + g] + 1);
        pm.whole = pm.whole && ag == t0 && bg == t1;
        if (ag >= bg) continue;
        pm.a[g] = static_cast<int32_t>(ag);
        pm.b[g] = static_cast<int32_t>(bg);
        pm.lo = std::min(pm.lo, ag);
        pm.hi = std::max(pm.hi, bg);
      }
      any = any || pm.lo < pm.hi;
    }
    if (!any) {
      v_in_l2 = false;  // what the tile before dripped was this tile, not the next
      t0 = t1;
      continue;
    }
    // Scores, 16 tokens x 4 query vectors per step, token-major in sc. An item of every KV head
    // reads whole token rows: the prefetches are then lines of contiguous ranges.
    const bool all_heads = nh * khs == ks && nh * vhs == vs;
    // Items of every KV head: the next tile into L2 over this one's score and V slots (a
    // share of the lines per slot). Items of fewer heads (prefill, strided rows) and an item's
    // last tile run the instantiations without it; a tile whose V rows were not dripped gets
    // them by L1 prefetches a step ahead.
    TileDrip drip;
    if (all_heads && n_next > 0) {
      uint64_t passes = 0;
      for (uint32_t ps = 0; ps < npass; ++ps) passes += masks[ps].lo < masks[ps].hi ? 1 : 0;
      const uint64_t score_slots = uint64_t{(nt + 15) / 16} * nh * passes * (kD / 32) * 4;
      const uint64_t v_slots = uint64_t{nh} * passes * (kD / 64) * ((nt + 1) / 2);
      drip.p = next.k;
      drip.left = static_cast<uint32_t>((n_next * ks + 63) / 64);
      drip.p2 = next.v;
      drip.left2 = static_cast<uint32_t>((n_next * vs + 63) / 64);
      const uint64_t slots = score_slots + v_slots;
      drip.rate = static_cast<uint32_t>(((uint64_t{drip.left + drip.left2} << 16) + slots - 1) / slots);
    }
    const bool dripping = drip.rate > 0;  // else the instantiations without it
    TileDrip sdrip = drip;  // the score steps' copy: its address stays here (registers)
    for (uint32_t t = t0; t < t1; t += 16) {
      const uint32_t ntb = std::min<uint32_t>(16, t1 - t);
      alignas(64) int32_t rel[16];  // rows from the head's first row of the tile
      for (uint32_t j = 0; j < 16; ++j) rel[j] = static_cast<int32_t>(t - t0 + std::min(j, ntb - 1));
      // The next step's K rows: this tile's, else the next tile's first ones.
      const uint8_t* kn = nullptr;
      uint32_t n_kn = 0, kn_first = 0;
      if (t + 16 < t1) {
        kn = kt;
        kn_first = t - t0 + 16;
        n_kn = std::min<uint32_t>(16, t1 - t - 16);
      } else if (n_next > 0) {
        kn = next.k;
        n_kn = std::min<uint32_t>(16, n_next);
      }
      const uint32_t k_lines = kn ? static_cast<uint32_t>((n_kn * ks + 63) / 64) : 0;
      const uint32_t v_lines = v_in_l2 ? 0 : static_cast<uint32_t>((ntb * vs + 63) / 64);
      const uint8_t* vstep = vt + size_t{t - t0} * vs;
      for (uint32_t h = 0; h < nh; ++h) {
        const uint8_t* kb = kt + h * khs;
        const uint8_t* r[16];
        for (uint32_t j = 0; j < 16; ++j) r[j] = kb + static_cast<size_t>(rel[j]) * ks;
        L1Ahead ahead;
        if (all_heads) {  // a share of each range per head
          ahead.lines = true;
          const uint32_t k0 = k_lines * h / nh, v0 = v_lines * h / nh;
          ahead.kl = kn ? kn + size_t{kn_first} * ks + 64 * size_t{k0} : nullptr;
          ahead.n_kl = k_lines * (h + 1) / nh - k0;
          ahead.vl = vstep + 64 * size_t{v0};
          ahead.n_vl = v_lines * (h + 1) / nh - v0;
        } else {
          ahead.kbytes = kn ? khs : 0;
          ahead.vbytes = vhs;
          for (uint32_t j = 0; j < 16; ++j) {
            ahead.k[j] = kn ? kn + h * khs + size_t{kn_first + std::min(j, n_kn - 1)} * ks : nullptr;
            ahead.v[j] = vt + h * vhs + static_cast<size_t>(rel[j]) * vs;
          }
        }
        for (uint32_t ps = 0; ps < npass; ++ps) {
          if (masks[ps].lo >= masks[ps].hi) continue;
          const QPack<kD>& qp = packs[size_t{h} * npass + ps];
          float* out = sc[size_t{h} * npass + ps].s + 4 * (t - t0);
          if (dripping) {
            ScoreStep16<kD, KF, true>(r, qp, kent, ahead, &sdrip, kg.group_shift, kg.n_groups, out);
          } else {
            ScoreStep16<kD, KF, false>(r, qp, kent, ahead, &sdrip, kg.group_shift, kg.n_groups, out);
          }
          ahead = L1Ahead{};  // the rows are on their way
        }
      }
    }
    drip = sdrip;
    // Online softmax and V, head by head.
    for (uint32_t h = 0; h < nh; ++h) {
      const uint8_t* vb = vt + h * vhs;
      for (uint32_t ps = 0; ps < npass; ++ps) {
        const PassMask& pm = masks[ps];
        if (pm.lo >= pm.hi) continue;
        const uint32_t i0 = 4 * ps;
        const uint32_t nqp = std::min<uint32_t>(4, nq - i0);
        float* s = sc[size_t{h} * npass + ps].s;
        float m[4], l[4], corr[4];
        float* st[4];
        for (uint32_t g = 0; g < 4; ++g) {
          st[g] = g < nqp ? partial + (size_t{h} * nq + i0 + g) * kStride : nullptr;
          m[g] = st[g] ? st[g][0] : -std::numeric_limits<float>::infinity();
          l[g] = st[g] ? st[g][1] : 0.0f;
        }
        if (pm.whole) {
          Softmax4<false>(s, nt / 4, t0, pm.a, pm.b, job.softcap, m, l, corr);
        } else {
          Softmax4<true>(s, (nt + 3) / 4, t0, pm.a, pm.b, job.softcap, m, l, corr);
        }
        float* acc_ptr[4];
        for (uint32_t g = 0; g < 4; ++g) {
          if (st[g]) {
            st[g][0] = m[g];
            st[g][1] = l[g];
          }
          acc_ptr[g] = st[g] ? st[g] + 2 : dummy;
        }
        const uint8_t* vr = vb + size_t{pm.lo - t0} * vs;
        const float* p = s + 4 * (pm.lo - t0);
        if constexpr (VF == Fmt::kQ4_0 || VF == Fmt::kA4) {
          if (dripping) {
            AccumulateV4<kD, VF, true>(vr, vs, pm.hi - pm.lo, p, corr, acc_ptr, vsc, &drip);
          } else {
            AccumulateV4<kD, VF, false>(vr, vs, pm.hi - pm.lo, p, corr, acc_ptr, vsc, &drip);
          }
        } else if (dripping) {
          AccumulateV<kD, VF, true>(vr, vs, pm.hi - pm.lo, p, corr, acc_ptr, vsc, &drip);
        } else {
          AccumulateV<kD, VF, false>(vr, vs, pm.hi - pm.lo, p, corr, acc_ptr, vsc, &drip);
        }
      }
    }
    v_in_l2 = dripping;
    t0 = t1;
  }
  // Accumulators back to value order: float 16 c + d of a 32-value block (lane d of chunk c)
  // holds value 2 d + c for affine4 (even / odd) and 8 (d / 4) + 4 c + d % 4 for 8-bit V
  // (VPairCodes' in-lane unpack order); q4_0 is in value order.
  if constexpr (VF != Fmt::kQ4_0) {
    for (size_t j = 0; j < size_t{nh} * nq; ++j) {
      float* acc = partial + j * kStride + 2;
      for (size_t p = 0; p < kD; p += 32) {
        float tmp[32];
        std::memcpy(tmp, acc + p, sizeof(tmp));
        for (size_t c = 0; c < 2; ++c) {
          for (size_t d = 0; d < 16; ++d) {
            acc[p + (VF == Fmt::kA4 ? 2 * d + c : 8 * (d / 4) + 4 * c + d % 4)] = tmp[16 * c + d];
          }
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
