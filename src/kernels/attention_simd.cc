// Attention inner kernel, compiled for every Highway target and dispatched at run time.
//
// Per item: walk its keys in tiles of at most kTile tokens that stay inside one KV block;
// decode the tile's K and V rows of this KV head into small f32 tiles (fixed size, L1
// resident; the quant module's SIMD decoders, bit-identical to the reference); then for each
// query vector: scores (q.k in f32 FMAs), an online-softmax update and the weighted V sum,
// with the output accumulator held in registers. head_dim is a template parameter.
// Stateless; thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/attention_int8.h"
#include "kernels/attention_prefill-inl.h"
#include "kernels/attention_q16.h"
#include "kernels/attention_simd.h"
#include "kernels/attention_common-inl.h"
#include "quant/format_traits.h"
#include "quant/quant_simd.h"
#include "quant/simd_reduce-inl.h"
#include "quant/simd_scalar-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::attn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr uint32_t kTile = 32;


template <size_t kD>
bool RunItemD(const Job& job, const Item& it, float* partial) {
  const DF df;
  constexpr size_t N = HWY_LANES(float);
  static_assert(kD % N == 0, "head_dim must be a multiple of the vector length");
  static_assert(kTile % N == 0, "tiles are whole vectors of tokens");
  constexpr size_t V = kD / N;  // vectors per row
  const PagedKvView& kv = *job.kv;
  const PagedKvRow& row = kv.rows[it.row];
  const uint32_t G = job.group;
  const uint32_t nq = it.qv_end - it.qv_begin;

  const uint32_t nh = it.head_end - it.head_begin;
  constexpr size_t kStride = kD + 2;  // partial: {m, l, acc[kD]} per (head, query vector)
  ItemQueries qs;
  PrepareItem(job, it, kD, partial, &qs);
  const uint32_t* pos = qs.pos;
  const uint32_t* first = qs.first;
  const size_t* q_off = qs.q_off;
  const uint32_t lo = qs.lo, hi = qs.hi;

  // K and V rows of the tile in f32. V starts 3 cache lines after a 4 KiB multiple from K,
  // so loads of one never alias (modulo 4 KiB) with stores to the other.
  HWY_ALIGN float tiles[2 * kTile * kD + 48];
  float (*kt)[kD] = reinterpret_cast<float (*)[kD]>(tiles);
  float (*vt)[kD] = reinterpret_cast<float (*)[kD]>(tiles + kTile * kD + 48);
  HWY_ALIGN float s[kTile];       // scores, then probabilities
  const VF vscale = hn::Set(df, job.scale);
  const uint32_t bt = kv.block_tokens;
  for (uint32_t t0 = lo; t0 < hi;) {
    const uint32_t t1 = std::min({hi, (t0 / bt + 1) * bt, t0 + kTile});
    const uint32_t nt = t1 - t0;
    const uint32_t nt_pad = static_cast<uint32_t>((nt + N - 1) / N * N);
    const size_t block = static_cast<size_t>(row.block_table[t0 / bt]);
    const size_t slot = t0 % bt;
    // The next tile's K and V rows of these heads are prefetched into L2, a slice per head,
    // while this tile is computed (a burst would stall on the line-fill buffers).
    const uint8_t* kn = nullptr;
    const uint8_t* vn = nullptr;
    size_t kbytes = 0, vbytes = 0;
    if (t1 < hi) {
      const uint32_t n1 = std::min({hi, (t1 / bt + 1) * bt, t1 + kTile}) - t1;
      const size_t b1 = static_cast<size_t>(row.block_table[t1 / bt]);
      const size_t s1 = t1 % bt;
      kn = kv.k_base + b1 * kv.block_stride + s1 * kv.k_token_stride +
           it.head_begin * kv.k_head_stride;
      vn = kv.v_base + b1 * kv.block_stride + s1 * kv.v_token_stride +
           it.head_begin * kv.v_head_stride;
      kbytes = (n1 - 1) * kv.k_token_stride + (it.head_end - it.head_begin) * kv.k_head_stride;
      vbytes = (n1 - 1) * kv.v_token_stride + (it.head_end - it.head_begin) * kv.v_head_stride;
    }
    const size_t k_slice = (kbytes / nh + 63) / 64 * 64;
    const size_t v_slice = (vbytes / nh + 63) / 64 * 64;
    for (uint32_t h = it.head_begin; h < it.head_end; ++h) {
    if (kn != nullptr) {
      const size_t j = h - it.head_begin;
      for (size_t o = j * k_slice; o < std::min(kbytes, (j + 1) * k_slice); o += 64) {
        __builtin_prefetch(kn + o, 0, 2);
      }
      for (size_t o = j * v_slice; o < std::min(vbytes, (j + 1) * v_slice); o += 64) {
        __builtin_prefetch(vn + o, 0, 2);
      }
    }
    const uint8_t* kp = kv.k_base + block * kv.block_stride + slot * kv.k_token_stride +
                        h * kv.k_head_stride;
    const uint8_t* vp = kv.v_base + block * kv.block_stride + slot * kv.v_token_stride +
                        h * kv.v_head_stride;
    if (!simd::DequantizeRowsStrided(kv.k_format, kp, kv.k_token_stride, nt, kD, DType::kF32,
                                     kt) ||
        !simd::DequantizeRowsStrided(kv.v_format, vp, kv.v_token_stride, nt, kD, DType::kF32,
                                     vt)) {
      return false;
    }
    for (uint32_t t = nt; t < nt_pad; ++t) std::fill(kt[t], kt[t] + kD, 0.0f);
    const float* qh = job.q + size_t{h} * G * kD;
    for (uint32_t i = 0; i < nq; ++i) {
      float* st = partial + ((h - it.head_begin) * nq + i) * kStride;
      float* acc_i = st + 2;
      const uint32_t a = std::max(t0, first[i]);
      const uint32_t b = std::min(t1, pos[i] + 1);
      if (a >= b) continue;
      // Scores of N tokens at a time: N independent FMA chains, one batched reduction.
      for (uint32_t g = 0; g < nt_pad; g += static_cast<uint32_t>(N)) {
        VF sacc[N];
        for (size_t j = 0; j < N; ++j) sacc[j] = hn::Zero(df);
        for (size_t k = 0; k < V; ++k) {
          const VF qk = hn::LoadU(df, qh + q_off[i] + k * N);
          for (size_t j = 0; j < N; ++j) {
            sacc[j] = hn::MulAdd(qk, hn::Load(df, &kt[g + j][k * N]), sacc[j]);
          }
        }
        hn::Store(hn::Mul(kvtier::HWY_NAMESPACE::SumBatch(df, sacc), vscale), df, s + g);
      }
      const float corr = SoftmaxStep(df, s, nt_pad, t0, a, b, job.softcap, st);
      VF o[V];
      const VF vc = hn::Set(df, corr);
      for (size_t k = 0; k < V; ++k) o[k] = hn::Mul(hn::LoadU(df, acc_i + k * N), vc);
      for (uint32_t t = a; t < b; ++t) {
        const VF pt = hn::Set(df, s[t - t0]);
        const float* vr = vt[t - t0];
        for (size_t k = 0; k < V; ++k) o[k] = hn::MulAdd(pt, hn::Load(df, vr + k * N), o[k]);
      }
      for (size_t k = 0; k < V; ++k) hn::StoreU(o[k], df, acc_i + k * N);
    }
    }
    t0 = t1;
  }
  return true;
}

// ---------------------------------------------------------------- fast path
//
// Rows are decoded in registers, N values ("a chunk") at a time, by a decoder per format: no
// f32 copy of K or V. Scores come 4 query vectors x N/4 tokens at a time (N FMA chains, one
// batched reduction); each V chunk is decoded once per token and feeds 4 query vectors'
// accumulators. Needs N a multiple of 4 and head_dim / N a multiple of 4 (head_dim 64, 128,
// 256 on AVX-512); other cases take the tile path above. Values equal the quant module's
// decoders (and so the reference) bit for bit.

// What a decoder needs to know of a row besides its bytes: quant's row layout.
using RowCtx = RowLayout;

HWY_INLINE float HalfAt(const uint8_t* p) { return kvtier::HWY_NAMESPACE::LoadScalar(DType::kF16, p, 0); }
HWY_INLINE float ScaleAt(DType t, const uint8_t* base, size_t i) {
  return kvtier::HWY_NAMESPACE::LoadScalar(t, base, i);
}
HWY_INLINE VF BroadcastHalf(DF, const uint8_t* p) { return kvtier::HWY_NAMESPACE::BroadcastHalf(p); }

template <DType kT>
HWY_INLINE VF BroadcastScale(DF df, const uint8_t* base, size_t i) {
  if constexpr (kT == DType::kF16) {
    return BroadcastHalf(df, base + 2 * i);
  } else {
    return hn::Set(df, ScaleAt(kT, base, i));
  }
}

// Decoders: Chunk gives values [k N, (k + 1) N) of a row as f32; Pair gives chunks k and k + 1
// (k even) sharing what they can (one load, one scale conversion).
template <class Dec>
struct PairOf {
  static HWY_INLINE void Pair(DF df, const uint8_t* row, size_t k, const RowCtx& c, VF& a, VF& b) {
    a = Dec::Chunk(df, row, k, c);
    b = Dec::Chunk(df, row, k + 1, c);
  }
};

struct DecF32 : PairOf<DecF32> {
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx&) {
    return hn::LoadU(df, reinterpret_cast<const float*>(row) + k * hn::Lanes(df));
  }
};
struct DecF16 : PairOf<DecF16> {
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx&) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(
        df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + k * hn::Lanes(df)));
  }
};
struct DecBF16 : PairOf<DecBF16> {
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx&) {
    const hn::Rebind<uint16_t, DF> du16;
    const hn::RebindToUnsigned<DF> du;
    const auto w = hn::PromoteTo(
        du, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(row) + k * hn::Lanes(df)));
    return hn::BitCast(df, hn::ShiftLeft<16>(w));
  }
};
// bf16 for the decode fast path: Pair(k) gives the 2N values from k N as two vectors, the even
// values then the odd ones, from one load of N u32 (low halves shifted up, high halves
// masked): one integer op per N values and no shuffle. Its users pair it with queries in the
// same order and put the accumulators back in value order (kEvenOdd). The prefill kernel
// takes DecBF16 (Plain).
struct DecBF16EO {
  static constexpr bool kEvenOdd = true;
  using Plain = DecBF16;
  static HWY_INLINE void Pair(DF df, const uint8_t* row, size_t k, const RowCtx&, VF& a, VF& b) {
    const hn::RebindToUnsigned<DF> du;
    const auto w = hn::LoadU(du, reinterpret_cast<const uint32_t*>(row) + k * hn::Lanes(df) / 2);
    a = hn::BitCast(df, hn::ShiftLeft<16>(w));
    b = hn::BitCast(df, hn::And(w, hn::Set(du, 0xFFFF0000u)));
  }
};
// Decoders in value order by default.
template <class Dec, class = void>
struct EvenOdd {
  static constexpr bool value = false;
  using Plain = Dec;
};
template <class Dec>
struct EvenOdd<Dec, std::void_t<decltype(Dec::kEvenOdd)>> {
  static constexpr bool value = Dec::kEvenOdd;
  using Plain = typename Dec::Plain;
};

struct DecQ8_0 {  // ggml blocks: f16 scale, 32 int8 codes (Q8_0Traits)
  using T = Q8_0Traits;
  static HWY_INLINE VF Codes(DF df, const uint8_t* p) {
    const hn::Rebind<int8_t, DF> di8;
    return hn::ConvertTo(
        df, hn::PromoteTo(hn::RebindToSigned<DF>(), hn::LoadU(di8, reinterpret_cast<const int8_t*>(p))));
  }
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx&) {
    const size_t v0 = k * hn::Lanes(df);
    const uint8_t* block = row + (v0 / T::kBlockValues) * T::kBlockBytes;
    return hn::Mul(Codes(df, block + T::kCodesOffset + v0 % T::kBlockValues),
                   BroadcastHalf(df, block + T::kScaleOffset));
  }
  static HWY_INLINE void Pair(DF df, const uint8_t* row, size_t k, const RowCtx&, VF& a, VF& b) {
    const size_t N = hn::Lanes(df);
    const size_t v0 = k * N;
    const uint8_t* block = row + (v0 / T::kBlockValues) * T::kBlockBytes;
    const VF d = BroadcastHalf(df, block + T::kScaleOffset);  // chunks k, k + 1 share the block (N <= 16)
    const uint8_t* codes = block + T::kCodesOffset + v0 % T::kBlockValues;
    a = hn::Mul(Codes(df, codes), d);
    b = hn::Mul(Codes(df, codes + N), d);
  }
};
struct DecQ4_0 {  // ggml blocks: f16 scale; codes in split halves (Q4_0Traits)
  using T = Q4_0Traits;
  static_assert(T::kNibbles == NibbleOrder::kSplitHalves, "low nibbles: first half");
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx&) {
    const size_t v0 = k * hn::Lanes(df);
    const uint8_t* block = row + (v0 / T::kBlockValues) * T::kBlockBytes;
    const size_t o = v0 % T::kBlockValues;
    const hn::Rebind<uint8_t, DF> du8;
    const auto bytes = hn::LoadU(du8, block + T::kCodesOffset + o % T::kCodeBytes);
    const auto nib = o < T::kCodeBytes ? hn::And(bytes, hn::Set(du8, 0x0f)) : hn::ShiftRight<4>(bytes);
    const hn::RebindToSigned<DF> di;
    const auto c = hn::Sub(hn::PromoteTo(di, nib), hn::Set(di, T::kZeroPoint));
    return hn::Mul(hn::ConvertTo(df, c), BroadcastHalf(df, block + T::kScaleOffset));
  }
  static HWY_INLINE void Pair(DF df, const uint8_t* row, size_t k, const RowCtx& ctx, VF& a,
                              VF& b) {
    const size_t N = hn::Lanes(df);
    if (N != 16) {
      a = Chunk(df, row, k, ctx);
      b = Chunk(df, row, k + 1, ctx);
      return;
    }
    // N = 16: chunks k, k + 1 are the low and high nibbles of one block's 16 bytes.
    const uint8_t* block = row + (k / 2) * T::kBlockBytes;
    const hn::Rebind<uint8_t, DF> du8;
    const hn::RebindToSigned<DF> di;
    const auto w = hn::PromoteTo(di, hn::LoadU(du8, block + T::kCodesOffset));  // one byte per lane
    const VF d = BroadcastHalf(df, block + T::kScaleOffset);
#if HWY_TARGET <= HWY_AVX3
    // 16-entry table of (c - 8) * d, the reference's values; vpermps reads only the low 4
    // bits of each index, so the low nibbles need no mask.
    const __m512 table = _mm512_mul_ps(_mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4,
                                                      5, 6, 7),
                                       d.raw);
    a = VF{_mm512_permutexvar_ps(w.raw, table)};
    b = VF{_mm512_permutexvar_ps(_mm512_srli_epi32(w.raw, 4), table)};
#else
    const auto eight = hn::Set(di, T::kZeroPoint);
    a = hn::Mul(hn::ConvertTo(df, hn::Sub(hn::And(w, hn::Set(di, 0x0f)), eight)), d);
    b = hn::Mul(hn::ConvertTo(df, hn::Sub(hn::ShiftRight<4>(w), eight)), d);
#endif
  }
};
template <int kBits, DType kScale>
struct DecAffine {  // codes (little-endian bit stream) | scales | biases
  static HWY_INLINE VF Codes(DF df, const uint8_t* row, size_t v0) {
    const hn::Rebind<uint8_t, DF> du8;
    hn::Vec<decltype(du8)> codes;
    if constexpr (kBits == 8) {
      codes = hn::LoadU(du8, row + v0);
    } else {
      static_assert(kBits == 4, "fast affine decoders: 8 and 4 bits");
      // N/2 bytes -> N nibbles, low nibble first.
      const hn::Repartition<uint16_t, decltype(du8)> dw;  // N/2 lanes
      const hn::Rebind<uint8_t, decltype(dw)> du8h;
      const auto w = hn::PromoteTo(dw, hn::LoadU(du8h, row + v0 / 2));
      codes = hn::BitCast(du8, hn::Or(hn::And(w, hn::Set(dw, 0x000f)),
                                      hn::ShiftLeft<4>(hn::And(w, hn::Set(dw, 0x00f0)))));
    }
    return hn::ConvertTo(df, hn::PromoteTo(hn::RebindToSigned<DF>(), codes));
  }
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx& c) {
    const size_t v0 = k * hn::Lanes(df);
    const size_t g = v0 >> c.group_shift;
    return hn::MulAdd(Codes(df, row, v0), BroadcastScale<kScale>(df, row + c.scales_off, g),
                      BroadcastScale<kScale>(df, row + c.biases_off, g));
  }
  static HWY_INLINE void Pair(DF df, const uint8_t* row, size_t k, const RowCtx& c, VF& a, VF& b) {
    const size_t N = hn::Lanes(df);
    const size_t v0 = k * N;
    if (2 * N > c.group) {
      a = Chunk(df, row, k, c);
      b = Chunk(df, row, k + 1, c);
      return;
    }
    const size_t g = v0 >> c.group_shift;  // both chunks lie in group g (groups >= 2N values)
    const VF sc = BroadcastScale<kScale>(df, row + c.scales_off, g);
    const VF bi = BroadcastScale<kScale>(df, row + c.biases_off, g);
#if HWY_TARGET <= HWY_AVX3
    if constexpr (kBits == 4) {
      // 16-entry table fma(c, scale, bias) (the reference's values); each chunk's 8 bytes are
      // duplicated per nibble and shifted so lane 2j reads byte j, lane 2j + 1 byte j >> 4
      // (vpermps looks at the low 4 bits only).
      const __m512 table = _mm512_fmadd_ps(
          _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), sc.raw, bi.raw);
      const __m128i dup_bytes = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
      const __m512i odd_by_4 = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
      auto chunk = [&](const uint8_t* p) {
        const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
        const __m512i idx =
            _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(bytes, dup_bytes)), odd_by_4);
        return VF{_mm512_permutexvar_ps(idx, table)};
      };
      a = chunk(row + v0 / 2);
      b = chunk(row + v0 / 2 + N / 2);
      return;
    }
#endif
    a = hn::MulAdd(Codes(df, row, v0), sc, bi);
    b = hn::MulAdd(Codes(df, row, v0 + N), sc, bi);
  }
};

template <size_t kD, class KDec, class VDec>
void RunItemFast(const Job& job, const Item& it, float* partial) {
  const DF df;
  constexpr size_t N = HWY_LANES(float);
  constexpr size_t V = kD / N;    // chunks per row
  constexpr size_t kQG = 4;       // query vectors per pass
  constexpr size_t kTB = N / kQG;  // tokens per score batch
  // V chunks per accumulator pass: kQG x kCG accumulators must leave registers for the decoded
  // chunks (16 vector registers below AVX-512).
  constexpr size_t kCG = N >= 16 ? 4 : 2;
  // Drip steps (see the tile loop): fine on AVX-512, per score batch / V chunk group below.
  constexpr bool kFine = N >= 16;
  static_assert(N % kQG == 0 && V % kCG == 0, "fast path geometry");
  constexpr size_t kStride = kD + 2;
  const PagedKvView& kv = *job.kv;
  const PagedKvRow& row = kv.rows[it.row];
  const uint32_t G = job.group;
  const uint32_t nq = it.qv_end - it.qv_begin;
  const RowCtx kc = MakeRowLayout(kv.k_format, kD), vc = MakeRowLayout(kv.v_format, kD);
  if constexpr (N >= 8) {
    // Prefill items: all query vectors in the lanes of one vector, each tile decoded once
    // (attention_prefill-inl.h).
    if (UsePrefillKernel(df, job, it)) {
      // Score tokens / V dims per register block: kBlk x kQV accumulators.
      constexpr size_t kQV = PrefillVectors(DF());
      constexpr size_t kBlk = N >= 16 ? 16 : 4;
      RunItemPrefill<kD, kTile, kBlk, kBlk, kQV, typename EvenOdd<KDec>::Plain, typename EvenOdd<VDec>::Plain>(
          df, job, it, partial, kc, vc);
      return;
    }
  }

  ItemQueries qs;
  PrepareItem(job, it, kD, partial, &qs);
  const uint32_t* pos = qs.pos;
  const uint32_t* first = qs.first;
  const size_t* q_off = qs.q_off;
  const uint32_t lo = qs.lo, hi = qs.hi;

  // K in even / odd order: the item's query vectors in that order too ([head][query][kD]).
  constexpr bool kKEO = EvenOdd<KDec>::value, kVEO = EvenOdd<VDec>::value;
  std::vector<float> q_eo;
  if constexpr (kKEO) {
    q_eo.resize(size_t{it.head_end - it.head_begin} * nq * kD);
    for (uint32_t h = it.head_begin; h < it.head_end; ++h) {
      for (uint32_t i = 0; i < nq; ++i) {
        ToEvenOdd(df, job.q + size_t{h} * G * kD + q_off[i],
                  q_eo.data() + (size_t{h - it.head_begin} * nq + i) * kD, kD);
      }
    }
  }
  HWY_ALIGN float s[kQG][kTile + N];  // scores, then probabilities, per query vector of a pass
  HWY_ALIGN float lanes[N];
  HWY_ALIGN float zero_q[kD] = {};     // stands in for missing query vectors of a pass
  HWY_ALIGN float dummy[kD] = {};      // their (discarded) accumulators
  const VF vscale = hn::Set(df, job.scale);
  const uint32_t bt = kv.block_tokens;
  const uint32_t nh = it.head_end - it.head_begin;
  const uint32_t npass = (nq + kQG - 1) / kQG;
  Drip kdrip, vdrip;  // the next tile's K (during the scores) and V (during the V sums)
  for (uint32_t t0 = lo; t0 < hi;) {
    const uint32_t t1 = std::min({hi, (t0 / bt + 1) * bt, t0 + kTile});
    const uint32_t nt = t1 - t0;
    const size_t block = static_cast<size_t>(row.block_table[t0 / bt]);
    const size_t slot = t0 % bt;
    {
      // AVX-512: fine steps, a line or two per K chunk pair and per V token. One step per
      // 4-token score batch and per V chunk group (16 and 64 lines at f16) held the Intel
      // device's fill buffers in bursts (1.1-1.2x slower at 32K). On the AMD AVX2 machine the
      // fine steps were 1.1x slower (and the K step costs the scores' registers): coarse there.
      const uint64_t k_steps = uint64_t{nh} * npass * ((nt + kTB - 1) / std::max<size_t>(kTB, 1)) *
                               (kFine ? V / 2 : 1);
      const uint64_t v_steps = uint64_t{nh} * npass * (V / kCG) * (kFine ? nt : 1);
      const NextTile next = PlanNextTile(kv, row, it, t1, hi, kTile);
      kdrip.Plan(next.k, next.n, kv.k_token_stride, nh * kv.k_head_stride, k_steps);
      vdrip.Plan(next.v, next.n, kv.v_token_stride, nh * kv.v_head_stride, v_steps);
    }
    for (uint32_t h = it.head_begin; h < it.head_end; ++h) {
      const uint8_t* kb = kv.k_base + block * kv.block_stride + slot * kv.k_token_stride +
                          h * kv.k_head_stride;
      const uint8_t* vb = kv.v_base + block * kv.block_stride + slot * kv.v_token_stride +
                          h * kv.v_head_stride;
      const float* qh = job.q + size_t{h} * G * kD;
      for (uint32_t i0 = 0; i0 < nq; i0 += kQG) {
        const uint32_t nqp = std::min<uint32_t>(kQG, nq - i0);
        // Visible keys of the pass.
        uint32_t a = t1, b = t0;
        for (uint32_t g = 0; g < nqp; ++g) {
          a = std::min(a, std::max(t0, first[i0 + g]));
          b = std::max(b, std::min(t1, pos[i0 + g] + 1));
        }
        if (a >= b) continue;
        const float* qv[kQG];
        for (size_t g = 0; g < kQG; ++g) {
          if constexpr (kKEO) {
            qv[g] = g < nqp ? q_eo.data() + (size_t{h - it.head_begin} * nq + i0 + g) * kD : zero_q;
          } else {
            qv[g] = g < nqp ? qh + q_off[i0 + g] : zero_q;
          }
        }
        // Scores: accumulator j = g * kTB + tt holds q_g . k_(t + tt).
        for (uint32_t t = t0; t < t1; t += kTB) {
          if constexpr (!kFine) kdrip.Step();
          VF acc[N];
          for (size_t j = 0; j < N; ++j) acc[j] = hn::Zero(df);
          const uint32_t ntb = std::min<uint32_t>(kTB, t1 - t);
          const uint8_t* kr[kTB];
          for (size_t tt = 0; tt < kTB; ++tt) {
            kr[tt] = kb + (t - t0 + std::min<size_t>(tt, ntb - 1)) * kv.k_token_stride;
          }
          for (size_t k = 0; k < V; k += 2) {
            if constexpr (kFine) kdrip.StepFine();
            VF k0[kTB], k1[kTB];
            for (size_t tt = 0; tt < kTB; ++tt) KDec::Pair(df, kr[tt], k, kc, k0[tt], k1[tt]);
            for (size_t g = 0; g < kQG; ++g) {
              const VF qa = hn::LoadU(df, qv[g] + k * N);
              const VF qb = hn::LoadU(df, qv[g] + (k + 1) * N);
              for (size_t tt = 0; tt < kTB; ++tt) {
                acc[g * kTB + tt] = hn::MulAdd(qb, k1[tt], hn::MulAdd(qa, k0[tt], acc[g * kTB + tt]));
              }
            }
          }
          hn::Store(hn::Mul(kvtier::HWY_NAMESPACE::SumBatch(df, acc), vscale), df, lanes);
          for (size_t g = 0; g < kQG; ++g) {
            for (size_t tt = 0; tt < kTB; ++tt) s[g][t - t0 + tt] = lanes[g * kTB + tt];
          }
        }
        // Online softmax per query vector, N keys at a time.
        const uint32_t nt_pad = static_cast<uint32_t>((nt + N - 1) / N * N);
        float corr[kQG];
        for (uint32_t g = 0; g < nqp; ++g) {
          float* st = partial + ((h - it.head_begin) * nq + i0 + g) * kStride;
          corr[g] = SoftmaxStep(df, s[g], nt_pad, t0, std::max(t0, first[i0 + g]),
                                std::min(t1, pos[i0 + g] + 1), job.softcap, st);
        }
        for (uint32_t g = nqp; g < kQG; ++g) {
          corr[g] = 1.0f;
          for (uint32_t c = 0; c < nt_pad; ++c) s[g][c] = 0.0f;
        }
        // Weighted V: kQG x kCG accumulators per pass over kCG chunks.
        float* acc_ptr[kQG];
        for (size_t g = 0; g < kQG; ++g) {
          acc_ptr[g] = g < nqp ? partial + ((h - it.head_begin) * nq + i0 + g) * kStride + 2 : dummy;
        }
        for (size_t c0 = 0; c0 < V; c0 += kCG) {
          if constexpr (!kFine) vdrip.Step();
          VF o[kQG][kCG];
          for (size_t g = 0; g < kQG; ++g) {
            const VF cg = hn::Set(df, corr[g]);
            for (size_t c = 0; c < kCG; ++c) o[g][c] = hn::Mul(hn::LoadU(df, acc_ptr[g] + (c0 + c) * N), cg);
          }
#pragma GCC unroll 2
          for (uint32_t t = a; t < b; ++t) {
            if constexpr (kFine) vdrip.StepFine();
            const uint8_t* vr = vb + (t - t0) * kv.v_token_stride;
            VF vv[kCG];
            for (size_t c = 0; c < kCG; c += 2) VDec::Pair(df, vr, c0 + c, vc, vv[c], vv[c + 1]);
            for (size_t g = 0; g < kQG; ++g) {
              const VF pg = hn::Set(df, s[g][t - t0]);
              for (size_t c = 0; c < kCG; ++c) o[g][c] = hn::MulAdd(pg, vv[c], o[g][c]);
            }
          }
          for (size_t g = 0; g < kQG; ++g) {
            for (size_t c = 0; c < kCG; ++c) hn::StoreU(o[g][c], df, acc_ptr[g] + (c0 + c) * N);
          }
        }
      }
    }
    kdrip.Finish();
    vdrip.Finish();
    t0 = t1;
  }
  if constexpr (kVEO) {  // accumulators back from even / odd to value order
    for (size_t j = 0; j < size_t{it.head_end - it.head_begin} * nq; ++j) {
      FromEvenOdd(df, partial + j * kStride + 2, kD);
    }
  }
}

// Picks the fast kernel for (K kind, V kind) at head_dim kD, or returns false.
template <size_t kD>
bool RunFast(const Job& job, const Item& it, float* partial) {
  constexpr size_t N = HWY_LANES(float);
  if constexpr (N % 4 != 0 || (kD / N) % 4 != 0) {
    return false;
  } else {
    const Format& kf = job.kv->k_format;
    const Format& vf = job.kv->v_format;
    auto same = [&](const Format& a, FormatKind kind, int bits) {
      return a.kind == kind && (kind != FormatKind::kAffine || a.bits == bits);
    };
#define KVTIER_UNPAREN(...) __VA_ARGS__
#define KVTIER_FAST_PAIR(KK, KB, KDEC, VK, VB, VDEC)                                    \
  if (same(kf, FormatKind::KK, KB) && same(vf, FormatKind::VK, VB)) {                   \
    RunItemFast<kD, KVTIER_UNPAREN KDEC, KVTIER_UNPAREN VDEC>(job, it, partial);         \
    return true;                                                                         \
  }
    KVTIER_FAST_PAIR(kF16, 0, (DecF16), kF16, 0, (DecF16))
    KVTIER_FAST_PAIR(kBF16, 0, (DecBF16EO), kBF16, 0, (DecBF16EO))
    KVTIER_FAST_PAIR(kF32, 0, (DecF32), kF32, 0, (DecF32))
    KVTIER_FAST_PAIR(kQ8_0, 0, (DecQ8_0), kQ8_0, 0, (DecQ8_0))
    KVTIER_FAST_PAIR(kQ4_0, 0, (DecQ4_0), kQ4_0, 0, (DecQ4_0))
    KVTIER_FAST_PAIR(kQ8_0, 0, (DecQ8_0), kQ4_0, 0, (DecQ4_0))
    if (kf.scale_dtype == vf.scale_dtype) {
      switch (kf.scale_dtype) {
        case DType::kF16:
          KVTIER_FAST_PAIR(kAffine, 8, (DecAffine<8, DType::kF16>), kAffine, 8, (DecAffine<8, DType::kF16>))
          KVTIER_FAST_PAIR(kAffine, 4, (DecAffine<4, DType::kF16>), kAffine, 4, (DecAffine<4, DType::kF16>))
          break;
        case DType::kBF16:
          KVTIER_FAST_PAIR(kAffine, 8, (DecAffine<8, DType::kBF16>), kAffine, 8, (DecAffine<8, DType::kBF16>))
          KVTIER_FAST_PAIR(kAffine, 4, (DecAffine<4, DType::kBF16>), kAffine, 4, (DecAffine<4, DType::kBF16>))
          break;
        case DType::kF32:
          KVTIER_FAST_PAIR(kAffine, 8, (DecAffine<8, DType::kF32>), kAffine, 8, (DecAffine<8, DType::kF32>))
          KVTIER_FAST_PAIR(kAffine, 4, (DecAffine<4, DType::kF32>), kAffine, 4, (DecAffine<4, DType::kF32>))
          break;
      }
    }
#undef KVTIER_FAST_PAIR
#undef KVTIER_UNPAREN
    return false;
  }
}

bool RunItemImpl(const Job& job, const Item& item, float* partial) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // AVX-512 targets: quantized K takes the int8 q.k path where the CPU has VNNI.
  if (Int8QkEnabled() && RunItemInt8(job, item, partial)) return true;
#endif
  // Quantized K and V: the int16 q.k path, but for prefill items the micro-kernel takes.
  if constexpr (HWY_LANES(float) >= 8) {
    if (!UsePrefillKernel(DF(), job, item) && RunItemQ16(job, item, partial)) return true;
  } else {
    if (RunItemQ16(job, item, partial)) return true;
  }
  switch (job.kv->head_dim) {
    case 64: return RunFast<64>(job, item, partial) || RunItemD<64>(job, item, partial);
    case 80: return RunItemD<80>(job, item, partial);
    case 96: return RunItemD<96>(job, item, partial);
    case 128: return RunFast<128>(job, item, partial) || RunItemD<128>(job, item, partial);
    case 256: return RunFast<256>(job, item, partial) || RunItemD<256>(job, item, partial);
    default: return false;
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace kvtier::attn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::attn {

HWY_EXPORT(RunItemImpl);
HWY_EXPORT(TargetNameImpl);

bool RunItem(const Job& job, const Item& item, float* partial) {
  return HWY_DYNAMIC_DISPATCH(RunItemImpl)(job, item, partial);
}

std::string TargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace kvtier::attn
#endif  // HWY_ONCE
