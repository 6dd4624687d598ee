// V side of the int8 q.k path (attention_int8.cc), on int8_common.h (Fmt, Geo, TileDrip, the
// dot products) and int8_qk.h (KEntries). Internal to src/kernels, for attention_int8.cc only.
// Stateless; thread-safe.
//
// Weighted V of one pass of 4 query vectors over n rows: acc[g] = acc[g] * corr[g] +
// sum_t p[4 t + g] * v_t. Each 32-value block's scale is folded into the weights once per token,
// w[t][b][g] = p[4 t + g] * scale(t, b) (lanes 4 b + g, the scales of 4 blocks picked from the
// row's first bytes by one word permute; affine: 4 rows' scales and biases at a time); the
// weights are rounded to int16 per call and the codes of two tokens at a time, widened to int16
// pairs, are multiplied by `vpdpwssd` (two products per 32-bit lane, half the instructions of
// f32 FMAs) into int32 sums that are scaled once per call (AccumulateV: 8-bit V). 4-bit V
// rounds the weights to int8 and takes 4 tokens per `vpdpbusd` (AccumulateV4). q4_0's code
// offset and the affine biases are added per block once per call. The accumulators of affine4
// (even / odd values) and of 8-bit V (in-lane unpack order) are put back in value order when
// the item ends.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/int8_qk.h"

#if KVTIER_INT8_X86
namespace kvtier::attn::int8 {

template <size_t kD>
struct VShape {
  static constexpr size_t kNB = kD / 32;                 // 32-value blocks per row
  static constexpr size_t kVecs = (4 * kNB + 15) / 16;  // weight vectors per token
  static constexpr size_t kW = 16 * kVecs;               // floats of a token's weights
};

// Where the scales of a q8_0 / q4_0 row's blocks are: weight vector v covers blocks 4 v ..
// 4 v + 3, whose f16 scales are words sidx of the 128-byte window at byte win[v] of the row,
// read with masks that stop at the row's end.
template <size_t kD>
struct VScaleMap {
  size_t win[VShape<kD>::kVecs] = {};
  __m512i sidx[VShape<kD>::kVecs];
  __mmask32 m0[VShape<kD>::kVecs] = {}, m1[VShape<kD>::kVecs] = {};
  bool two = false;  // some index reaches the window's second 64 bytes
};

template <size_t kD, Fmt VF>
KV_VNNI VScaleMap<kD> MakeVScaleMap() {
  static_assert(VF == Fmt::kQ8_0 || VF == Fmt::kQ4_0 || IsRot(VF), "block formats (affine: VEntries)");
  constexpr size_t kNB = VShape<kD>::kNB;
  constexpr size_t kBlock = BlockBytesOf(VF);
  static_assert(Q4_0Traits::kScaleOffset == 0 && Q8_0Traits::kScaleOffset == 0 &&
                    offsetof(BlockRot4, d) == 0 && kBlock % 2 == 0,
                "scales lead, on 2-byte boundaries");
  VScaleMap<kD> m;
  for (size_t v = 0; v < VShape<kD>::kVecs; ++v) {
    m.win[v] = 4 * kBlock * v;
    alignas(64) int16_t s[32] = {};
    for (size_t i = 0; i < 16; ++i) {
      const size_t blk = std::min(4 * v + i / 4, kNB - 1);
      s[i] = static_cast<int16_t>(kBlock * blk / 2 - m.win[v] / 2);
      m.two = m.two || s[i] >= 32;
    }
    m.sidx[v] = _mm512_load_si512(s);
    const size_t words = (kBlock * kNB - m.win[v]) / 2;
    m.m0[v] = words >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << words) - 1);
    const size_t w1 = words > 32 ? std::min<size_t>(words - 32, 32) : 0;
    m.m1[v] = w1 >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << w1) - 1);
  }
  return m;
}

// 16 f16 words of the row's window v picked by idx, as f32 (kTwo: m.two).
template <size_t kD, bool kTwo>
KV_INL __m512 PickHalves(const uint8_t* row, const VScaleMap<kD>& m, size_t v, __m512i idx) {
  const __m512i lo = _mm512_maskz_loadu_epi16(m.m0[v], row + m.win[v]);
  if (!kTwo) return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, lo)));
  const __m512i hi = _mm512_maskz_loadu_epi16(m.m1[v], row + m.win[v] + 64);
  return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(lo, idx, hi)));
}

// Where the scales and biases of 4 affine V rows are and how they reach the weight lanes:
// KEntries (the K side's loader) leaves dm[q] lane 4 j + e = entry 4 q + e of row j (the group
// scales, then the biases), and lane 4 b' + g of row j's weight vector v takes the entry of
// block 4 v + b' from dm[src] or dm[src2] (one vpermt2ps). Affine rows keep their scales and
// biases apart from the codes, where 4 rows at a time paid (1.03-1.05x in one binary); q
// formats' per-row word permute (VScaleMap) measured level with it.
template <size_t kD, Fmt VF>
struct VEntries {
  static_assert(VF == Fmt::kAffine8 || VF == Fmt::kAffine4, "affine formats (q formats: VScaleMap)");
  using S = VShape<kD>;
  KEntries<kD, VF> ke;
  uint32_t s_src[S::kVecs], s_src2[S::kVecs], b_src[S::kVecs], b_src2[S::kVecs];
  __m512i s_idx[4][S::kVecs], b_idx[4][S::kVecs];  // [row j of 4][vector]

  KV_VNNI explicit VEntries(const Geo& vg) : ke(vg) {
    for (size_t v = 0; v < S::kVecs; ++v) {
      for (uint32_t bias = 0; bias < 2; ++bias) {
        uint32_t e[4];
        for (size_t i = 0; i < 4; ++i) {
          const size_t blk = std::min(4 * v + i, S::kNB - 1);
          e[i] = bias * vg.n_groups + static_cast<uint32_t>((32 * blk) >> vg.group_shift);
        }
        const uint32_t src = e[0] / 4;  // the 4 (ascending) entries span at most 2 vectors
        (bias ? b_src : s_src)[v] = src;
        (bias ? b_src2 : s_src2)[v] = std::min(src + 1, ke.n_gath - 1);
        for (uint32_t j = 0; j < 4; ++j) {
          alignas(64) int32_t idx[16];
          for (size_t l = 0; l < 16; ++l) {
            const uint32_t x = e[l / 4];
            idx[l] = static_cast<int32_t>((x / 4 - src) * 16 + 4 * j + x % 4);
          }
          (bias ? b_idx : s_idx)[j][v] = _mm512_load_si512(idx);
        }
      }
    }
  }
};

// What a V path reads the scales (and biases) with.
template <size_t kD, Fmt VF>
using VScales = std::conditional_t<VF == Fmt::kAffine8 || VF == Fmt::kAffine4, VEntries<kD, VF>, VScaleMap<kD>>;

template <size_t kD, Fmt VF>
KV_VNNI VScales<kD, VF> MakeVScales(const Geo& vg) {
  if constexpr (VF == Fmt::kAffine8 || VF == Fmt::kAffine4) {
    return VEntries<kD, VF>(vg);
  } else {
    return MakeVScaleMap<kD, VF>();
  }
}

// The n rows of a call from vr (stride vs), padded to whole quads with repeats of the last row
// (which the V paths weigh 0): rows[0 .. 4 ceil(n / 4)), at most kTile + 3.
inline void CallRows(const uint8_t* vr, size_t vs, uint32_t n, const uint8_t* rows[]) {
  for (uint32_t t = 0; t < (n + 3) / 4 * 4; ++t) rows[t] = vr + size_t{std::min(t, n - 1)} * vs;
}

// Stores a token's weight vector x at w; *wmax = max(*wmax, |x|), with kSumW *wsum += x.
template <bool kSumW>
KV_INL void AddWeight(__m512 x, float* w, __m512* wmax, __m512* wsum) {
  _mm512_store_ps(w, x);
  *wmax = _mm512_max_ps(*wmax, _mm512_and_ps(x, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff))));
  if constexpr (kSumW) *wsum = _mm512_add_ps(*wsum, x);
}

// TileWeights' loop for q formats (below).
template <size_t kD, bool kSumW, bool kTwo>
KV_INL void QWeights(const uint8_t* const* rows, uint32_t n, const float* p, const VScaleMap<kD>& m,
                     float* w, __m512* wmax, __m512* wsum) {
  using S = VShape<kD>;
  for (uint32_t t = 0; t < n; ++t) {
    const __m512 pv = _mm512_broadcast_f32x4(_mm_loadu_ps(p + 4 * t));
    for (size_t v = 0; v < S::kVecs; ++v) {
      const __m512 sc = PickHalves<kD, kTwo>(rows[t], m, v, m.sidx[v]);
      AddWeight<kSumW>(_mm512_mul_ps(sc, pv), w + t * S::kW + 16 * v, &wmax[v], &wsum[v]);
    }
  }
}

// TileWeights' loop for affine formats (below). kOne: every entry of a row is in dm[0] (at
// most 4 scales and biases), so one single-source permute per lane set, and the index vectors
// are copied into locals: read through the reference with run-time sources, g++ 12 kept dm on
// the stack and reloaded it per token.
template <size_t kD, Fmt VF, bool kSumW, bool kOne>
KV_INL void AffineWeights(const uint8_t* const* rows, uint32_t n, const float* p,
                          const VEntries<kD, VF>& vsc, float* w, __m512* wmax, __m512* wsum,
                          __m512* bsum) {
  using S = VShape<kD>;
  const VEntries<kD, VF> e = vsc;
  for (uint32_t i = 0; 4 * i < n; ++i) {
    const uint8_t* const* r = rows + 4 * i;
    __m512 dm[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                    _mm512_setzero_ps()};
    e.ke.Rows4(r, dm);
    const uint32_t nj = std::min<uint32_t>(4, n - 4 * i);
#pragma GCC unroll 4
    for (uint32_t j = 0; j < 4; ++j) {
      if (j >= nj) break;
      const uint32_t t = 4 * i + j;
      const __m512 pv = _mm512_broadcast_f32x4(_mm_loadu_ps(p + 4 * t));
      for (size_t v = 0; v < S::kVecs; ++v) {
        __m512 sc, bi;
        if constexpr (kOne) {
          sc = _mm512_permutexvar_ps(e.s_idx[j][v], dm[0]);
          bi = _mm512_permutexvar_ps(e.b_idx[j][v], dm[0]);
        } else {
          sc = _mm512_permutex2var_ps(dm[e.s_src[v]], e.s_idx[j][v], dm[e.s_src2[v]]);
          bi = _mm512_permutex2var_ps(dm[e.b_src[v]], e.b_idx[j][v], dm[e.b_src2[v]]);
        }
        AddWeight<kSumW>(_mm512_mul_ps(sc, pv), w + t * S::kW + 16 * v, &wmax[v], &wsum[v]);
        bsum[v] = _mm512_fmadd_ps(bi, pv, bsum[v]);
      }
    }
  }
}

// The weights of a call: w[t][16 v + lane] = p[4 t + g] * scale(t, b), lane 4 b' + g of vector
// v holding block b = 4 v + b', for t < n; per vector wmax = max_t |w|, with kSumW wsum =
// sum_t w, and for affine bsum = sum_t p[4 t + g] * bias(t, b). rows[0 .. 4 ceil(n / 4)): the
// call's rows, the last quad padded with repeats.
template <size_t kD, Fmt VF, bool kSumW>
KV_INL void TileWeights(const uint8_t* const* rows, uint32_t n, const float* p,
                        const VScales<kD, VF>& vsc, float* w, __m512* wmax, __m512* wsum,
                        __m512* bsum) {
  if constexpr (VF == Fmt::kAffine8 || VF == Fmt::kAffine4) {
    if (vsc.ke.n_gath == 1) {
      AffineWeights<kD, VF, kSumW, true>(rows, n, p, vsc, w, wmax, wsum, bsum);
    } else {
      AffineWeights<kD, VF, kSumW, false>(rows, n, p, vsc, w, wmax, wsum, bsum);
    }
  } else {
    // A local copy, and the loop chosen by `two` once: read through the reference, g++ 12
    // reloaded the masks and tested `two` per token (the stores to w might have changed them).
    const VScaleMap<kD> m = vsc;
    if (m.two) {
      QWeights<kD, kSumW, true>(rows, n, p, m, w, wmax, wsum);
    } else {
      QWeights<kD, kSumW, false>(rows, n, p, m, w, wmax, wsum);
    }
  }
}

// Block b's 32 codes of rows r0 and r1 as int16 pairs (r0's, r1's) per 32-bit lane: each row
// widened (q8_0 signed, affine8 not) and the two interleaved in-lane, so that c[0] lane 4 l + i
// holds value 8 l + i and c[1] value 8 l + 4 + i (RunInt8 restores the value order when the
// item ends).
template <Fmt F>
KV_INL void VPairCodes(const uint8_t* r0, const uint8_t* r1, size_t b, __m512i c[2]) {
  static_assert(F == Fmt::kQ8_0 || F == Fmt::kAffine8, "8-bit V formats only (4-bit: QuadBytes)");
  const size_t o = SubBlockCodes(F == Fmt::kQ8_0 ? KvCode::kQ8_0 : KvCode::kAffine8, b);
  const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + o));
  const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + o));
  const __m512i a = F == Fmt::kQ8_0 ? _mm512_cvtepi8_epi16(x0) : _mm512_cvtepu8_epi16(x0);
  const __m512i z = F == Fmt::kQ8_0 ? _mm512_cvtepi8_epi16(x1) : _mm512_cvtepu8_epi16(x1);
  c[0] = _mm512_unpacklo_epi16(a, z);
  c[1] = _mm512_unpackhi_epi16(a, z);
}

// Adds a sweep's int32 sums (accumulator 4 g + c: query vector g, chunk c of blocks b0 and
// b0 + 1) into the f32 accumulators: acc = acc * corr + (kBias: bias) + step * sum, with the
// step and bias of the chunk's block and query vector (lane 4 b + g). With kHiBytes, the odd
// chunks hold 16 x their sums (high nibbles not shifted down).
template <bool kBias, bool kHiBytes = false>
KV_INL void FlushSweep(const __m512i o[16], size_t b0, const float corr[4], float* const acc[4],
                       const float* step, const float* bias) {
  for (size_t g = 0; g < 4; ++g) {
    const __m512 cg = _mm512_set1_ps(corr[g]);
    for (size_t c = 0; c < 4; ++c) {
      const size_t b = b0 + c / 2;
      float* a = acc[g] + (2 * b0 + c) * 16;
      __m512 base = _mm512_mul_ps(_mm512_loadu_ps(a), cg);
      if constexpr (kBias) base = _mm512_add_ps(base, _mm512_set1_ps(bias[4 * b + g]));
      const float st = kHiBytes && c % 2 == 1 ? step[4 * b + g] * 0.0625f : step[4 * b + g];
      _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(o[4 * g + c]), _mm512_set1_ps(st), base));
    }
  }
}

// Weighted V of one pass (see the header comment) over n <= kTile rows from vr (stride vs), p
// the n tokens' probabilities ([n][4]). Not inlined, so that the sweeps' 16 accumulators
// (4 query vectors x 4 chunks) get the registers to themselves. Per call (a tile), each weight
// w[t][b][g] = p[4 t + g] * scale(t, b) is rounded to a multiple of max_t |w| / 32767 (its
// block and query vector's largest), i.e. to 2^-15 of the largest; a pair of tokens' codes is
// interleaved as int16 pairs (VPairCodes), `vpdpwssd`
// against the pair's weights (broadcast) accumulates in int32 (at most 32 * 32767 * 255 * 2 per
// lane: no overflow) and the sums are scaled once per call; affine biases come back as
// sum_t p * bias. 8-bit V only (q8_0, affine8): 4-bit V takes AccumulateV4.
// With kDrip, `drip` (the next tile's lines) steps once per token pair of each sweep.
template <size_t kD, Fmt VF, bool kDrip>
__attribute__((noinline)) KV_VNNI void AccumulateV(const uint8_t* vr, size_t vs, uint32_t n,
                                                   const float* p, const float corr[4],
                                                   float* const acc[4],
                                                   const VScales<kD, VF>& vsc, TileDrip* drip_out) {
  static_assert(VF == Fmt::kQ8_0 || VF == Fmt::kAffine8, "8-bit V formats only");
  TileDrip drip = *drip_out;
  using S = VShape<kD>;
  constexpr size_t kNB = S::kNB;
  constexpr bool kAffine = VF == Fmt::kAffine8;
  alignas(64) float w[(kTile + 1) * S::kW];   // [token][weight lane 4 b + g]
  alignas(64) float step[S::kW], bias[S::kW];  // per lane: the int16 step; affine: the biases
  alignas(64) int32_t wp[kTile / 2 * S::kW];  // [token pair][lane]: (w[2 i], w[2 i + 1]) as int16
  __m512 wmax[S::kVecs], wsum[S::kVecs];
  for (size_t v = 0; v < S::kVecs; ++v) wmax[v] = wsum[v] = _mm512_setzero_ps();
  const uint8_t* rows[kTile + 3];
  CallRows(vr, vs, n, rows);
  TileWeights<kD, VF, false>(rows, n, p, vsc, w, wmax, /*wsum: unused*/ wmax, wsum);
  for (size_t v = 0; v < S::kVecs; ++v) _mm512_store_ps(w + n * S::kW + 16 * v, _mm512_setzero_ps());
  __m512 inv[S::kVecs];
  for (size_t v = 0; v < S::kVecs; ++v) {
    const __mmask16 nz = _mm512_cmp_ps_mask(wmax[v], _mm512_setzero_ps(), _CMP_GT_OQ);
    inv[v] = _mm512_maskz_div_ps(nz, _mm512_set1_ps(32767.0f), wmax[v]);
    _mm512_store_ps(step + 16 * v, _mm512_mul_ps(wmax[v], _mm512_set1_ps(1.0f / 32767.0f)));
    _mm512_store_ps(bias + 16 * v, wsum[v]);
  }
  const uint32_t np = (n + 1) / 2;
  const __m512i low16 = _mm512_set1_epi32(0xffff);
  for (uint32_t i = 0; i < np; ++i) {
    for (size_t v = 0; v < S::kVecs; ++v) {
      const __m512i a = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(w + 2 * i * S::kW + 16 * v), inv[v]));
      const __m512i b = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(w + (2 * i + 1) * S::kW + 16 * v), inv[v]));
      _mm512_store_si512(wp + i * S::kW + 16 * v, _mm512_or_si512(_mm512_and_si512(a, low16), _mm512_slli_epi32(b, 16)));
    }
  }
  // Sweeps unrolled: the weights' offsets are then constants from one pointer (rolled, g++ 12
  // kept 8 pointers, most of them in xmm registers, moved back per token pair).
#pragma GCC unroll 4
  for (size_t b0 = 0; b0 < kNB; b0 += 2) {  // 2 blocks (4 chunks of 16 values) per sweep
    // Accumulator 4 g + c: query vector g, chunk c (DpWssd keeps each in one register).
    __m512i o[16];
    for (size_t j = 0; j < 16; ++j) o[j] = _mm512_setzero_si512();
    for (uint32_t i = 0; i < np; ++i) {
      const uint8_t* r0 = rows[2 * i];
      const uint8_t* r1 = rows[2 * i + 1];
      const int32_t* wi = wp + i * S::kW;
      if constexpr (kDrip) drip.Step();
      for (size_t bb = 0; bb < 2; ++bb) {
        __m512i c[2];
        VPairCodes<VF>(r0, r1, b0 + bb, c);
        for (size_t g = 0; g < 4; ++g) {
          const __m512i wv = _mm512_set1_epi32(wi[4 * (b0 + bb) + g]);
          o[4 * g + 2 * bb] = DpWssd(o[4 * g + 2 * bb], c[0], wv);
          o[4 * g + 2 * bb + 1] = DpWssd(o[4 * g + 2 * bb + 1], c[1], wv);
        }
      }
    }
    FlushSweep<kAffine>(o, b0, corr, acc, step, bias);
  }
  *drip_out = drip;
}

// Bytes o .. o + 15 of rows r[0..3] with 4 rows per 32-bit lane: lane k holds byte k of rows
// 0..3 (one dword permute and one in-lane byte shuffle after the 4-row load).
KV_INL __m512i QuadBytes(const uint8_t* const r[4], size_t o) {
  const __m512i didx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i bshuf = _mm512_broadcast_i32x4(
      _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  return _mm512_shuffle_epi8(_mm512_permutexvar_epi32(didx, Load4(r, o)), bshuf);
}

// The int8 weights of a call for `vpdpbusd` (AccumulateV4, AccumulateVRot), from the f32
// weights w ([token][lane 4 b + g], t < n) and TileWeights' wmax / wsum / psum: pads the last
// quad (tokens n .. 4 ceil(n / 4)) with weight 0, rounds each lane to steps of max_t |w| / 127
// into wq ([quad][lane][token of the quad]), and stores per lane step = code_step x max_t |w| /
// 127 and bias = -off x step x (the rounded weights' sum), so that the rounding errors multiply
// centred codes; kCentre adds off x the exact weights' sum (affine4), kPSum adds psum.
template <size_t kD, bool kCentre, bool kPSum>
KV_INL void RoundWeights4(float* w, uint32_t n, const __m512 wmax[], const __m512 wsum[],
                          const __m512 psum[], float code_step, float off, int8_t* wq, float* step,
                          float* bias) {
  using S = VShape<kD>;
  const uint32_t nq4 = (n + 3) / 4;
  for (uint32_t t = n; t < 4 * nq4; ++t) {  // the last quad's padding: weight 0
    for (size_t v = 0; v < S::kVecs; ++v) _mm512_store_ps(w + t * S::kW + 16 * v, _mm512_setzero_ps());
  }
  __m512 inv[S::kVecs];
  __m512i isum[S::kVecs];  // sum_t of the rounded weights
  for (size_t v = 0; v < S::kVecs; ++v) {
    const __mmask16 nz = _mm512_cmp_ps_mask(wmax[v], _mm512_setzero_ps(), _CMP_GT_OQ);
    inv[v] = _mm512_maskz_div_ps(nz, _mm512_set1_ps(127.0f), wmax[v]);
    isum[v] = _mm512_setzero_si512();
  }
  // 4 tokens' int32 weights to bytes: the two saturating packs (|w| <= 127: exact) leave byte
  // 4 k + i of each 128-bit lane = token k's dword i of the lane; the shuffle puts the 4
  // tokens' bytes of dword i together.
  const __m512i quad = _mm512_broadcast_i32x4(
      _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  const __m512i ones = _mm512_set1_epi8(1);
  for (uint32_t i = 0; i < nq4; ++i) {
    for (size_t v = 0; v < S::kVecs; ++v) {
      __m512i a[4];
      for (uint32_t k = 0; k < 4; ++k) {
        const __m512 x = _mm512_load_ps(w + (4 * i + k) * S::kW + 16 * v);
        a[k] = _mm512_cvtps_epi32(_mm512_mul_ps(x, inv[v]));
      }
      const __m512i packed = _mm512_shuffle_epi8(
          _mm512_packs_epi16(_mm512_packs_epi32(a[0], a[1]), _mm512_packs_epi32(a[2], a[3])), quad);
      _mm512_store_si512(wq + 4 * (i * S::kW + 16 * v), packed);
      isum[v] = DpBusd(isum[v], ones, packed);
    }
  }
  for (size_t v = 0; v < S::kVecs; ++v) {
    const __m512 st = _mm512_mul_ps(wmax[v], _mm512_set1_ps(code_step / 127.0f));
    _mm512_store_ps(step + 16 * v, st);
    __m512 b = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[v]), _mm512_mul_ps(st, _mm512_set1_ps(-off)));
    if constexpr (kCentre) b = _mm512_fmadd_ps(wsum[v], _mm512_set1_ps(off), b);
    if constexpr (kPSum) b = _mm512_add_ps(b, psum[v]);
    _mm512_store_ps(bias + 16 * v, b);
  }
}

// Weighted V as AccumulateV, for 4-bit V (q4_0, affine4): the weights w = p x scale(t, b),
// signed, are rounded to int8 (steps of max_t |w| / 127, per call, block and query vector) and
// 4 tokens' code bytes share a 32-bit lane, so one `vpdpbusd` (codes unsigned, the 4 tokens'
// weights signed and broadcast from memory) takes 4 tokens x 16 values: half the multiply-adds
// of the int16 pairs. The low nibbles are masked; the high ones are not shifted down: the whole
// bytes (lo + 16 hi) are summed and the low sums taken off after the sweep (exact in int32).
// Per lane the code offset comes back as -8 x step x the rounded weights' sum plus (8 - off) x
// the exact weights' sum (q4_0: off 8; affine4: 0; plus affine's sum_t p x bias), so that the
// rounding errors multiply centred codes (c - 8). Relative error below 1e-2 against the dequantized reference
// (docs/kernels.md), against the 4-bit codes' own error of up to 1/15 of a block's range; 8-bit
// V keeps AccumulateV's int16 weights.
template <size_t kD, Fmt VF, bool kDrip>
__attribute__((noinline)) KV_VNNI void AccumulateV4(const uint8_t* vr, size_t vs, uint32_t n,
                                                    const float* p, const float corr[4],
                                                    float* const acc[4],
                                                    const VScales<kD, VF>& vsc, TileDrip* drip_out) {
  static_assert(VF == Fmt::kQ4_0 || VF == Fmt::kAffine4, "4-bit V formats only");
  TileDrip drip = *drip_out;
  using S = VShape<kD>;
  constexpr size_t kNB = S::kNB;
  constexpr bool kCentre = VF == Fmt::kAffine4;  // 8 - off is 8 (affine4) or 0 (q4_0)
  alignas(64) float w[(kTile + 3) * S::kW];      // [token][lane 4 b + g]: p x scale(t, b)
  alignas(64) float step[S::kW], bias[S::kW];    // per lane: the int8 step; the offsets
  alignas(64) int8_t wq[kTile / 4 * S::kW * 4];  // [quad][lane][token of the quad]: int8 weights
  __m512 wmax[S::kVecs], wsum[S::kVecs], psum[S::kVecs];  // max |w|, sum w, affine: sum p bias
  for (size_t v = 0; v < S::kVecs; ++v) wmax[v] = wsum[v] = psum[v] = _mm512_setzero_ps();
  const uint32_t nq4 = (n + 3) / 4;
  const uint8_t* rows[kTile + 3];
  CallRows(vr, vs, n, rows);
  TileWeights<kD, VF, kCentre>(rows, n, p, vsc, w, wmax, wsum, psum);
  RoundWeights4<kD, kCentre, true>(w, n, wmax, wsum, psum, 1.0f, 8.0f, wq, step, bias);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4  // as in AccumulateV
  for (size_t b0 = 0; b0 < kNB; b0 += 2) {  // 2 blocks (4 chunks of 16 values) per sweep
    // Accumulator 4 g + c: query vector g, chunk c (2 bb: low nibbles, 2 bb + 1: whole bytes).
    __m512i o[16];
    for (size_t j = 0; j < 16; ++j) o[j] = _mm512_setzero_si512();
    for (uint32_t i = 0; i < nq4; ++i) {
      const uint8_t* const* r = rows + 4 * i;
      const int8_t* wi = wq + 4 * i * S::kW;
      if constexpr (kDrip) drip.Step(2);  // the slots of two token pairs
      for (size_t bb = 0; bb < 2; ++bb) {
        const size_t b = b0 + bb;
        const __m512i z = QuadBytes(r, SubBlockCodes(VF == Fmt::kQ4_0 ? KvCode::kQ4_0 : KvCode::kAffine4, b));
        const __m512i lo = _mm512_and_si512(z, low4);
        for (size_t g = 0; g < 4; ++g) {
          o[4 * g + 2 * bb] = DpBusdBcast(o[4 * g + 2 * bb], lo, wi + 4 * (4 * b + g));
          o[4 * g + 2 * bb + 1] = DpBusdBcast(o[4 * g + 2 * bb + 1], z, wi + 4 * (4 * b + g));
        }
      }
    }
    for (size_t j = 1; j < 16; j += 2) o[j] = _mm512_sub_epi32(o[j], o[j - 1]);  // 16 x high
    FlushSweep<true, true>(o, b0, corr, acc, step, bias);
  }
  *drip_out = drip;
}

// Weighted V as AccumulateV4, for the rot formats: the weights w = p x scale(t, b) rounded to
// int8 the same way (steps of max_t |w| / 127 per call, block and query vector), against the
// fixed-point level bytes u (quant/rot.h's RotFixedLevels: level = (u - off) / s) of 4 tokens
// per `vpdpbusd`. Per quad of rows and block: the codes as dwords of 8 codes (RotCodes4), codes
// 0..3 and 4..7 of each dword to bytes (vpmultishiftqb), the bytes to their levels and to the
// 4-rows-per-lane order (two vpermb): chunk c lane k holds value 8 (k / 4) + 4 c + k % 4, the
// order of 8-bit V, which RunInt8 restores when the item ends. The offset comes back as
// -off x step x the rounded weights' sum, so the weights' rounding errors multiply centred levels.
template <size_t kD, Fmt VF, bool kDrip>
__attribute__((noinline)) KV_VNNI void AccumulateVRot(const uint8_t* vr, size_t vs, uint32_t n,
                                                      const float* p, const float corr[4],
                                                      float* const acc[4],
                                                      const VScales<kD, VF>& vsc, TileDrip* drip_out) {
  static_assert(IsRot(VF), "rot V formats only");
  using KT = KTraits<VF>;
  constexpr int kBits = KT::kRotBits;
  TileDrip drip = *drip_out;
  using S = VShape<kD>;
  constexpr size_t kNB = S::kNB;
  alignas(64) float w[(kTile + 3) * S::kW];      // [token][lane 4 b + g]: p x scale(t, b)
  alignas(64) float step[S::kW], bias[S::kW];    // per lane: the int8 step / s; the offsets
  alignas(64) int8_t wq[kTile / 4 * S::kW * 4];  // [quad][lane][token of the quad]: int8 weights
  __m512 wmax[S::kVecs], wsum[S::kVecs], psum[S::kVecs];
  for (size_t v = 0; v < S::kVecs; ++v) wmax[v] = wsum[v] = psum[v] = _mm512_setzero_ps();
  const uint32_t nq4 = (n + 3) / 4;
  const uint8_t* rows[kTile + 3];
  CallRows(vr, vs, n, rows);
  TileWeights<kD, VF, false>(rows, n, p, vsc, w, wmax, wsum, psum);
  RoundWeights4<kD, false, false>(w, n, wmax, wsum, psum, KT::kCodeStep,
                                  static_cast<float>(KT::kOffset), wq, step, bias);
  const RotConsts<kBits> rc;
  // Byte 4 k + r of a chunk = byte 16 r + k of the decoded rows (row r in 128-bit lane r).
  static constexpr Bytes64 kToQuads = [] {
    Bytes64 x{};
    for (int k = 0; k < 16; ++k) {
      for (int r = 0; r < 4; ++r) x.b[4 * k + r] = static_cast<uint8_t>(16 * r + k);
    }
    return x;
  }();
  const __m512i to_quads = _mm512_load_si512(kToQuads.b);
  using Q = RotVQuads<kBits>;
  const __m512i idx0 = _mm512_load_si512(Q::kIdx0.b), idx1 = _mm512_load_si512(Q::kIdx1.b);
  const __m512i ctrl0 = _mm512_load_si512(Q::kCtrl0.b), ctrl1 = _mm512_load_si512(Q::kCtrl1.b);
#pragma GCC unroll 4  // as in AccumulateV
  for (size_t b0 = 0; b0 < kNB; b0 += 2) {  // 2 blocks (4 chunks of 16 values) per sweep
    __m512i o[16];  // accumulator 4 g + c: query vector g, chunk c
    for (size_t j = 0; j < 16; ++j) o[j] = _mm512_setzero_si512();
    for (uint32_t i = 0; i < nq4; ++i) {
      const uint8_t* const* r = rows + 4 * i;
      const int8_t* wi = wq + 4 * i * S::kW;
      if constexpr (kDrip) drip.Step(2);  // the slots of two token pairs
      for (size_t bb = 0; bb < 2; ++bb) {
        const size_t b = b0 + bb;
        __m512i z0, z1;
        if constexpr (kBits == 4) {
          const __m512i x = RotCodes4<kBits>(r, RotBlockBytes(kBits) * b + 2);
          z0 = PermB(rc.table, PermB(MultiShift(rc.ctrl_a, x), to_quads));
          z1 = PermB(rc.table, PermB(MultiShift(rc.ctrl_b, x), to_quads));
        } else {  // no spreading: the 2-byte windows straight to quad order (RotVQuads)
          const __m512i x = RotRaw4<kBits>(r, RotBlockBytes(kBits) * b + 2, b == kNB - 1);
          z0 = PermB(rc.table, MultiShift(ctrl0, PermB(x, idx0)));
          z1 = PermB(rc.table, MultiShift(ctrl1, PermB(x, idx1)));
        }
        for (size_t g = 0; g < 4; ++g) {
          o[4 * g + 2 * bb] = DpBusdBcast(o[4 * g + 2 * bb], z0, wi + 4 * (4 * b + g));
          o[4 * g + 2 * bb + 1] = DpBusdBcast(o[4 * g + 2 * bb + 1], z1, wi + 4 * (4 * b + g));
        }
      }
    }
    FlushSweep<true>(o, b0, corr, acc, step, bias);
  }
  *drip_out = drip;
}

}  // namespace kvtier::attn::int8
#endif  // KVTIER_INT8_X86
