// The int16 q.k path: quantized K and V without the int8 (VNNI) path, on every Highway target
// with 4 or more float lanes (AVX2, SSE4, NEON, AVX-512 without VNNI). Internal to src/kernels;
// its entry point is in paths.h, its on / off switch in dispatch.h, and dispatch.cc says when it
// runs. Served: K and V q8_0, q4_0 (alike, or K q8_0 / V q4_0), affine8 / affine4 with groups of
// 32 or more (K and V alike, one scale dtype); head_dim 64, 96, 128, 256. Output error against
// the float64 reference on dequantized K/V: relative error < 1e-4 (docs/kernels.md states the
// bound; attention_test.cc tests it).
//
// Per item, each KV head's query vectors are quantized once to int16 with one scale per K
// "unit" (a q8_0 / q4_0 block of 32 values, or an affine scale group), in the lane order of the
// K codes below. Per token and unit, the K codes are widened to int16 in registers (q4_0 minus
// its offset 8; affine codes as they are) and multiplied pairwise with the query codes
// (ReorderWidenMulAccumulate: vpmaddwd on x86), summed in int32, converted once per unit and
// scaled by the K unit scale times the query scale; affine biases add bias x sum(q) per unit
// (each lane a 1 / N share, before the horizontal sums: N / 4 tokens x 4 query vectors at once,
// SumBatch). The online
// softmax is the f32 kernels' (softmax-inl.h). V: each unit's scale is folded into the
// softmax weights once per token (w = p x scale; N / 4 units per vector, the probabilities
// transposed token-major 4 x 4 at a time), the V codes are converted to f32 without
// scaling and accumulated with f32 FMAs, 4 query vectors x kCG chunks of N values per pass;
// q4_0's offset comes back as -8 x sum_t w per block and affine biases as sum_t p x bias, once
// per tile. The next tile's K and V are brought into L2 a few lines per step (Drip).
// Fixed-size buffers only, apart from the item's quantized queries. Stateless apart from the
// on/off switch; thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_q16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "hwy/contrib/math/math-inl.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/dispatch.h"
#include "kernels/job.h"
#include "kernels/paths.h"
#include "kernels/prefetch.h"
#include "kernels/softmax-inl.h"
#include "quant/format_traits.h"
#include "simd/reduce-inl.h"
#include "simd/scalar-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::attn::HWY_NAMESPACE {
#if HWY_TARGET == HWY_SCALAR
// One lane: nothing to pair; the exact paths serve.
bool RunItemQ16Impl(const Job&, const Item&, float*) { return false; }
#else
namespace {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using D16 = hn::Repartition<int16_t, DF>;  // 2N lanes
using DI32 = hn::RebindToSigned<DF>;
constexpr uint32_t kTile = 32;
constexpr size_t kQG = 4;  // query vectors per pass

// K / V code layouts: the pair table's (dispatch.h).
using QK = KvCode;

template <QK F>
constexpr bool kAffine = F == QK::kAffine8 || F == QK::kAffine4;

// What a row's decoders need besides its bytes: quant's row layout (a "unit" is a scale
// group: a q8_0 / q4_0 block, or an affine group).
using RowGeo = RowLayout;
using Q8 = Q8_0Traits;
using Q4 = Q4_0Traits;
static_assert(Q4::kNibbles == NibbleOrder::kSplitHalves && NibblesOf(KvCode::kAffine4) == NibbleOrder::kInterleaved,
              "KCodes / VChunk read q4_0 in split halves and affine4 interleaved");

// Scale (and affine bias) of unit u of a row, as f32 (the affine scale dtype is read at run
// time: one branch per unit, not a kernel per dtype).
template <QK F>
HWY_INLINE float UnitScale(const uint8_t* row, size_t u, const RowGeo& g) {
  if constexpr (F == QK::kQ8_0) {
    return kvtier::HWY_NAMESPACE::LoadScalar(DType::kF16, row + Q8::kBlockBytes * u + Q8::kScaleOffset, 0);
  }
  if constexpr (F == QK::kQ4_0) {
    return kvtier::HWY_NAMESPACE::LoadScalar(DType::kF16, row + Q4::kBlockBytes * u + Q4::kScaleOffset, 0);
  }
  return kvtier::HWY_NAMESPACE::LoadScalar(g.scale_dtype, row + g.scales_off, u);
}
HWY_INLINE float UnitBias(const uint8_t* row, size_t u, const RowGeo& g) {
  return kvtier::HWY_NAMESPACE::LoadScalar(g.scale_dtype, row + g.biases_off, u);
}

// ---------------------------------------------------------------- K codes in int16
//
// A sub-block is 32 values (a q block, or 32 values of an affine group); its codes fill
// 32 / Lanes(D16) int16 vectors. Vector j of sub-block sb holds values 32 sb + j L + l in lane
// l (L = Lanes(D16)), except affine4, whose vector j holds the even values of its range in the
// low half and the odd ones in the high half (the nibbles of a byte); QCodes::Build lays the
// query out in the same order.
template <QK F>
HWY_INLINE hn::Vec<D16> KCodes(const uint8_t* row, size_t sb, size_t j) {
  const D16 d16;
  const hn::RebindToUnsigned<D16> du16;
  constexpr size_t L = HWY_LANES(int16_t);
  if constexpr (F == QK::kQ8_0) {
    const hn::Rebind<int8_t, D16> d8;
    return hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const int8_t*>(row + SubBlockCodes(KvCode::kQ8_0, sb) + j * L)));
  } else if constexpr (F == QK::kAffine8) {
    const hn::Rebind<uint8_t, D16> d8;
    return hn::BitCast(d16, hn::PromoteTo(du16, hn::LoadU(d8, row + SubBlockCodes(KvCode::kAffine8, sb) + j * L)));
  } else if constexpr (F == QK::kQ4_0 && L <= 16) {
    // Values j L .. of the block: low nibbles of bytes 0..15 are values 0..15, high ones 16..31.
    const hn::Rebind<uint8_t, D16> d8;
    const auto w = hn::PromoteTo(du16, hn::LoadU(d8, row + SubBlockCodes(KvCode::kQ4_0, sb) + (j * L) % Q4::kCodeBytes));
    const auto nib = j * L < Q4::kCodeBytes ? hn::And(w, hn::Set(du16, 0x0f)) : hn::ShiftRight<4>(w);
    return hn::Sub(hn::BitCast(d16, nib), hn::Set(d16, Q4::kZeroPoint));
  } else {
    // q4_0 with 32 lanes (the whole block: low nibbles, then high ones) or affine4 (low nibbles
    // = even values in the low half, high nibbles = odd values in the high half).
    const hn::Half<decltype(du16)> dh16;
    const hn::Rebind<uint8_t, decltype(dh16)> d8;
    const uint8_t* p = F == QK::kQ4_0 ? row + SubBlockCodes(KvCode::kQ4_0, sb)
                                      : row + SubBlockCodes(KvCode::kAffine4, sb) + j * L / 2;
    const auto w = hn::PromoteTo(dh16, hn::LoadU(d8, p));
    const auto lo = hn::And(w, hn::Set(dh16, 0x0f));
    const auto hi = hn::ShiftRight<4>(w);
    const auto c = hn::BitCast(d16, hn::Combine(du16, hi, lo));
    if constexpr (F == QK::kQ4_0) return hn::Sub(c, hn::Set(d16, Q4::kZeroPoint));
    return c;
  }
}

// ---------------------------------------------------------------- V codes in f32
//
// Where chunk c (values c N .. c N + N - 1 of a row; affine4: see below) starts (byte offset)
// and, for q4_0 / affine4, which nibble it takes (shift 0: low, 4: high).
template <QK F>
struct VChunk {
  size_t off = 0;
  int shift = 0;
  static VChunk At(size_t c) {
    constexpr size_t N = HWY_LANES(float);
    const size_t v0 = c * N;
    VChunk k;
    if constexpr (F == QK::kQ8_0) k.off = SubBlockCodes(KvCode::kQ8_0, v0 / Q8::kBlockValues) + v0 % Q8::kBlockValues;
    if constexpr (F == QK::kQ4_0) {
      k.off = SubBlockCodes(KvCode::kQ4_0, v0 / Q4::kBlockValues) + v0 % Q4::kCodeBytes;
      k.shift = v0 % Q4::kBlockValues >= Q4::kCodeBytes ? 4 : 0;
    }
    if constexpr (F == QK::kAffine8) k.off = v0;
    if constexpr (F == QK::kAffine4) {  // chunk pair (2p, 2p + 1): the even, then the odd values of N bytes
      k.off = c / 2 * N;
      k.shift = c % 2 == 1 ? 4 : 0;
    }
    return k;
  }
};

// The chunk's codes as f32, unscaled: q8_0 signed, q4_0 the nibble (0..15: its offset 8 is
// taken off once per tile), affine the code. Affine4 chunks come in even / odd value order
// (VChunk); the accumulators are put back in value order when the item ends.
template <QK F>
HWY_INLINE VF VCodes(const uint8_t* p, int shift) {
  const DF df;
  const DI32 di;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint8_t, DF> d8;
  if constexpr (F == QK::kQ8_0) {
    const hn::Rebind<int8_t, DF> ds8;
    return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(ds8, reinterpret_cast<const int8_t*>(p))));
  } else if constexpr (F == QK::kAffine8) {
    return hn::ConvertTo(df, hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(d8, p))));
  } else {  // q4_0, affine4: one nibble of N bytes
    const auto w = hn::PromoteTo(du, hn::LoadU(d8, p));
    return hn::ConvertTo(df, hn::BitCast(di, hn::And(hn::ShiftRightSame(w, shift), hn::Set(du, 0x0f))));
  }
}

// ---------------------------------------------------------------- the query
//
// Query vectors of an item quantized to int16 with one scale per vector (max |q| / 32767: a
// step of about 1e-4 of the largest value, far below the 1e-4 output bound), codes
// [head][vector][kD] in the K codes' lane order, scales [head][vector] (times the softmax
// scale) and, for affine K, each scale group's sum of the float values over N x the vector's
// scale, broadcast [head][vector][unit][N] (TokenScores adds bias x this to each lane).
// Vectors past nq (a pass's padding) are zero.
template <size_t kD, QK KF>
struct QCodes {
  hwy::AlignedFreeUniquePtr<int16_t[]> codes;
  hwy::AlignedFreeUniquePtr<float[]> scale, bias;

  void Build(const Job& job, const Item& it, const ItemQueries& qs, size_t unit, uint32_t nvec) {
    const DF df;
    constexpr size_t N = HWY_LANES(float);
    const uint32_t nh = it.head_end - it.head_begin;
    const uint32_t nq = it.qv_end - it.qv_begin;
    const size_t n_units = kD / unit;
    codes = hwy::AllocateAligned<int16_t>(size_t{nh} * nvec * kD);
    scale = hwy::AllocateAligned<float>(size_t{nh} * nvec);
    bias = hwy::AllocateAligned<float>(kAffine<KF> ? size_t{nh} * nvec * n_units * N : 1);
    const hn::Rebind<int16_t, DF> d16n;  // N lanes
    for (uint32_t h = 0; h < nh; ++h) {
      for (uint32_t i = 0; i < nvec; ++i) {
        const size_t v = size_t{h} * nvec + i;
        int16_t* c = codes.get() + v * kD;
        float* qb = bias.get() + (kAffine<KF> ? v * n_units * N : 0);
        if (i >= nq) {
          std::fill(c, c + kD, int16_t{0});
          if constexpr (kAffine<KF>) std::fill(qb, qb + n_units * N, 0.0f);
          scale[v] = 0.0f;
          continue;
        }
        const float* q = job.q + size_t{it.head_begin + h} * job.group * kD + qs.q_off[i];
        VF am = hn::Zero(df);
        for (size_t k = 0; k < kD; k += N) am = hn::Max(am, hn::Abs(hn::LoadU(df, q + k)));
        const float amax = hn::GetLane(hn::MaxOfLanes(df, am));
        scale[v] = amax / 32767.0f * job.scale;
        const VF inv = hn::Set(df, amax > 0 ? 32767.0f / amax : 0.0f);
        for (size_t k = 0; k < kD; k += 2 * N) {  // 2N values: one int16 vector of codes
          VF x0 = hn::LoadU(df, q + k), x1 = hn::LoadU(df, q + k + N);
          if constexpr (KF == QK::kAffine4) {  // even values, then odd ones
            const VF e = hn::ConcatEven(df, x1, x0);
            x1 = hn::ConcatOdd(df, x1, x0);
            x0 = e;
          }
          hn::StoreU(hn::DemoteTo(d16n, hn::NearestInt(hn::Mul(x0, inv))), d16n, c + k);
          hn::StoreU(hn::DemoteTo(d16n, hn::NearestInt(hn::Mul(x1, inv))), d16n, c + k + N);
        }
        if constexpr (kAffine<KF>) {
          // sum(q) x softmax scale / (N x scale[v]), as the lanes' share.
          const float share = amax > 0 ? 32767.0f / (static_cast<float>(N) * amax) : 0.0f;
          for (size_t u = 0; u < n_units; ++u) {
            VF su = hn::Zero(df);
            for (size_t k = u * unit; k < (u + 1) * unit; k += N) su = hn::Add(su, hn::LoadU(df, q + k));
            hn::Store(hn::Set(df, hn::GetLane(hn::SumOfLanes(df, su)) * share), df, qb + u * N);
          }
        }
      }
    }
  }
};

// ---------------------------------------------------------------- the kernel

// Per token: sum over K units of unit scale x (int16 codes . query codes), for the pass's 4
// query vectors, into acc[g] (f32, N lanes each: summed across lanes later, then scaled by the
// query scale). q formats: one unit per 32-value block (kUnits, a constant); affine: units of
// 2^spu_shift blocks, and each unit's bias times qb[g][u] (every lane: the query's group sum
// over N x its scale, so that the lanes' sum times the query scale adds bias x sum(q)).
template <size_t kD, QK KF, size_t kUnits>
HWY_INLINE void TokenScores(const uint8_t* kr, const int16_t* qcodes, const float* qb, size_t n_units,
                            uint32_t spu_shift, const RowGeo& kg, VF acc[kQG]) {
  const DF df;
  const D16 d16;
  const DI32 di32;
  constexpr size_t N = HWY_LANES(float);
  constexpr size_t L = 2 * N;
  constexpr size_t kNv = 32 / L;  // int16 vectors per 32-value block
  const size_t spu_mask = kUnits > 0 ? 0 : (size_t{1} << spu_shift) - 1;
  hn::Vec<DI32> isum[kQG], isum1[kQG];
  for (size_t g = 0; g < kQG; ++g) {
    acc[g] = hn::Zero(df);
    isum[g] = isum1[g] = hn::Zero(di32);
  }
#pragma GCC unroll 8
  for (size_t sb = 0; sb < kD / 32; ++sb) {
    for (size_t j = 0; j < kNv; ++j) {
      const auto kc = KCodes<KF>(kr, sb, j);
      for (size_t g = 0; g < kQG; ++g) {
        const auto qv = hn::Load(d16, qcodes + g * kD + 32 * sb + j * L);
        isum[g] = hn::ReorderWidenMulAccumulate(di32, kc, qv, isum[g], isum1[g]);
      }
    }
    if ((sb & spu_mask) != spu_mask) continue;  // the unit goes on
    const size_t u = sb >> spu_shift;
    const VF dk = hn::Set(df, UnitScale<KF>(kr, u, kg));
    for (size_t g = 0; g < kQG; ++g) {
      acc[g] = hn::MulAdd(hn::ConvertTo(df, hn::RearrangeToOddPlusEven(isum[g], isum1[g])), dk, acc[g]);
      isum[g] = isum1[g] = hn::Zero(di32);
    }
    if constexpr (kAffine<KF>) {
      const VF bu = hn::Set(df, UnitBias(kr, u, kg));
      for (size_t g = 0; g < kQG; ++g) acc[g] = hn::MulAdd(bu, hn::Load(df, qb + (g * n_units + u) * N), acc[g]);
    }
  }
}

// One V pass over tokens [0, n) of a tile: o[g][c] += w[t][unit of chunk c][g] x codes of
// chunk c0 + c of row t, for kCG chunks; chunk c has the weights of unit c / kCPU of the pass
// (w points at the first one), so each weight is broadcast once per token.
template <QK F, size_t kCG, size_t kCPU, size_t kWT>
HWY_INLINE void VPass(const uint8_t* vr, size_t vs, uint32_t n, const float* w, const VChunk<F> ch[kCG],
                      VF o[kQG][kCG]) {
  const DF df;
  constexpr size_t kU = (kCG + kCPU - 1) / kCPU;  // units of the pass
#pragma GCC unroll 2
  for (uint32_t t = 0; t < n; ++t, vr += vs, w += kWT) {
    VF vv[kCG];
    for (size_t c = 0; c < kCG; ++c) vv[c] = VCodes<F>(vr + ch[c].off, ch[c].shift);
    for (size_t u = 0; u < kU; ++u) {
      for (size_t g = 0; g < kQG; ++g) {
        const VF wg = hn::Set(df, w[u * kQG + g]);
        for (size_t c = u * kCPU; c < std::min(kCG, (u + 1) * kCPU); ++c) o[g][c] = hn::MulAdd(wg, vv[c], o[g][c]);
      }
    }
  }
}

// Rows a, b, c, d of a 4 x 4 block, transposed: out[4 j + i] = row i, column j.
template <class D4>
HWY_INLINE void Transpose4x4(D4 d4, const float* a, const float* b, const float* c, const float* d, float* out) {
  const hn::Repartition<uint64_t, D4> d64;
  const auto ra = hn::LoadU(d4, a), rb = hn::LoadU(d4, b), rc = hn::LoadU(d4, c), rd = hn::LoadU(d4, d);
  const auto ab0 = hn::BitCast(d64, hn::InterleaveLower(d4, ra, rb));  // a0 b0 a1 b1
  const auto ab1 = hn::BitCast(d64, hn::InterleaveUpper(d4, ra, rb));  // a2 b2 a3 b3
  const auto cd0 = hn::BitCast(d64, hn::InterleaveLower(d4, rc, rd));
  const auto cd1 = hn::BitCast(d64, hn::InterleaveUpper(d4, rc, rd));
  hn::StoreU(hn::BitCast(d4, hn::InterleaveLower(d64, ab0, cd0)), d4, out);
  hn::StoreU(hn::BitCast(d4, hn::InterleaveUpper(d64, ab0, cd0)), d4, out + 4);
  hn::StoreU(hn::BitCast(d4, hn::InterleaveLower(d64, ab1, cd1)), d4, out + 8);
  hn::StoreU(hn::BitCast(d4, hn::InterleaveUpper(d64, ab1, cd1)), d4, out + 12);
}

// The scales (kBias: affine biases) of V units k N / 4 .. k N / 4 + N / 4 - 1 of a row, each in
// 4 lanes (one per query vector of a pass); units past n_units repeat the last one.
template <QK F, bool kBias>
HWY_INLINE VF UnitValues(const uint8_t* row, size_t k, size_t n_units, const RowGeo& g) {
  constexpr size_t N = HWY_LANES(float);
  const auto one = [&](size_t u) {
    u = std::min(u, n_units - 1);
    if constexpr (kBias) return UnitBias(row, u, g);
    return UnitScale<F>(row, u, g);
  };
  const hn::CappedTag<float, 4> d4;
  if constexpr (N == 4) {
    return hn::Set(d4, one(k));
  } else if constexpr (N == 8) {
    const DF df;
    return hn::Combine(df, hn::Set(d4, one(2 * k + 1)), hn::Set(d4, one(2 * k)));
  } else {  // 16 lanes (RunItemQ16Impl serves 4 to 16)
    const DF df;
    const hn::Half<DF> dh;
    return hn::Combine(df, hn::Combine(dh, hn::Set(d4, one(4 * k + 3)), hn::Set(d4, one(4 * k + 2))),
                       hn::Combine(dh, hn::Set(d4, one(4 * k + 1)), hn::Set(d4, one(4 * k))));
  }
}

template <size_t kD, QK KF, QK VF_>
void RunQ16(const Job& job, const Item& it, float* partial) {
  const DF df;
  const hn::CappedTag<float, 4> d4;
  constexpr size_t N = HWY_LANES(float);
  constexpr size_t kTB = N / kQG;      // tokens per horizontal-sum step (N vectors)
  constexpr size_t V = kD / N;         // V chunks per row
  constexpr size_t kCG = N >= 16 && V % 4 == 0 ? 4 : 2;  // V chunks per accumulator pass
  constexpr size_t kKUnits = kAffine<KF> ? 0 : kD / 32;  // K units, when constant
  constexpr size_t kWT = (kD / 32 * kQG + N - 1) / N * N;  // floats of a token's V weights (padded)
  static_assert(kTB >= 1 && 32 % (2 * N) == 0 && V % kCG == 0, "int16 path geometry");
  constexpr size_t kStride = kD + 2;
  const PagedKvView& kv = *job.kv;
  const PagedKvRow& row = kv.rows[it.row];
  const uint32_t nh = it.head_end - it.head_begin;
  const uint32_t nq = it.qv_end - it.qv_begin;
  const uint32_t npass = static_cast<uint32_t>((nq + kQG - 1) / kQG);
  const RowGeo kg = MakeRowLayout(kv.k_format, kD), vg = MakeRowLayout(kv.v_format, kD);
  const size_t k_units = kD >> kg.group_shift, v_units = kD >> vg.group_shift;
  ItemQueries qs;
  PrepareItem(job, it, kD, partial, &qs);
  const size_t nvec = size_t{npass} * kQG;
  QCodes<kD, KF> qc;
  qc.Build(job, it, qs, size_t{1} << kg.group_shift, static_cast<uint32_t>(nvec));

  // V chunks of each pass: byte offsets, nibble shifts and weight offsets (unit x 4).
  VChunk<VF_> chunk[V];
  size_t uoff[V];
  for (size_t c = 0; c < V; ++c) {
    chunk[c] = VChunk<VF_>::At(c);
    uoff[c] = ((c * N) >> vg.group_shift) * kQG;
  }

  HWY_ALIGN float part[kTile + kTB][kQG][N];  // per token: the 4 vectors' unsummed scores
  HWY_ALIGN float s[kQG][kTile + N];           // scores, then probabilities, per query vector
  HWY_ALIGN float lanes[N];
  HWY_ALIGN float w[kTile][kWT];               // V weights p x unit scale [token][unit][vector]
  HWY_ALIGN float off[kWT];                    // per V unit: what the offset / biases add
  HWY_ALIGN float pt[kTile + 4][kQG];          // probabilities, token-major
  HWY_ALIGN float dummy[kD] = {};              // accumulators of a pass's missing vectors
  const uint32_t bt = kv.block_tokens;
  const size_t ks = kv.k_token_stride, vs = kv.v_token_stride;
  Drip kdrip, vdrip;
  for (uint32_t t0 = qs.lo; t0 < qs.hi;) {
    const uint32_t t1 = std::min({qs.hi, (t0 / bt + 1) * bt, t0 + kTile});
    const uint32_t nt = t1 - t0;
    const size_t block = static_cast<size_t>(row.block_table[t0 / bt]);
    const size_t slot = t0 % bt;
    const NextTile next = PlanNextTile(kv, row, it, t1, qs.hi, kTile);
    kdrip.Plan(next.k, next.n, ks, nh * kv.k_head_stride, uint64_t{nh} * npass * ((nt + 3) / 4));
    vdrip.Plan(next.v, next.n, vs, nh * kv.v_head_stride, uint64_t{nh} * npass * (V / kCG));
    for (uint32_t h = 0; h < nh; ++h) {
      const uint8_t* kb = kv.k_base + block * kv.block_stride + slot * ks + (it.head_begin + h) * kv.k_head_stride;
      const uint8_t* vb = kv.v_base + block * kv.block_stride + slot * vs + (it.head_begin + h) * kv.v_head_stride;
      for (uint32_t ps = 0; ps < npass; ++ps) {
        const uint32_t i0 = ps * static_cast<uint32_t>(kQG);
        const uint32_t nqp = std::min<uint32_t>(kQG, nq - i0);
        uint32_t a = t1, b = t0;  // keys any vector of the pass sees
        for (uint32_t g = 0; g < nqp; ++g) {
          a = std::min(a, std::max(t0, qs.first[i0 + g]));
          b = std::max(b, std::min(t1, qs.pos[i0 + g] + 1));
        }
        if (a >= b) continue;
        const size_t qv0 = size_t{h} * nvec + i0;  // first vector of the pass in qc
        const int16_t* qcodes = qc.codes.get() + qv0 * kD;  // [vector][kD]
        // [vector][unit][N]; q formats have none (their buffer is a single float)
        const float* qbias = kAffine<KF> ? qc.bias.get() + qv0 * k_units * N : nullptr;
        // Scores: per token the 4 vectors' lane partials, then kTB tokens x 4 vectors summed
        // across lanes at once and scaled by each vector's query scale.
        for (uint32_t t = 0; t < nt; ++t) {
          if (t % 4 == 0) kdrip.Step();  // every 4 tokens
          VF acc[kQG];
          TokenScores<kD, KF, kKUnits>(kb + size_t{t} * ks, qcodes, qbias, k_units, kg.group_shift - 5, kg, acc);
          for (size_t g = 0; g < kQG; ++g) hn::Store(acc[g], df, part[t][g]);
        }
        for (uint32_t t = nt; t % kTB != 0; ++t) {
          for (size_t g = 0; g < kQG; ++g) hn::Store(hn::Zero(df), df, part[t][g]);
        }
        HWY_ALIGN float qscale[N];  // lane g kTB + tt: vector g's scale
        for (size_t j = 0; j < N; ++j) qscale[j] = qc.scale[qv0 + j / kTB];
        const VF vqs = hn::Load(df, qscale);
        for (uint32_t t = 0; t < nt; t += static_cast<uint32_t>(kTB)) {
          VF in[N];
          for (size_t g = 0; g < kQG; ++g) {
            for (size_t tt = 0; tt < kTB; ++tt) in[g * kTB + tt] = hn::Load(df, part[t + tt][g]);
          }
          hn::Store(hn::Mul(kvtier::HWY_NAMESPACE::SumBatch(df, in), vqs), df, lanes);
          for (size_t tt = 0; tt < kTB; ++tt) {
            for (size_t g = 0; g < kQG; ++g) s[g][t + tt] = lanes[g * kTB + tt];
          }
        }
        // Online softmax per query vector.
        const uint32_t nt_pad = static_cast<uint32_t>((nt + N - 1) / N * N);
        HWY_ALIGN float corr[kQG];
        float* acc_ptr[kQG];
        for (uint32_t g = 0; g < kQG; ++g) {
          if (g < nqp) {
            float* st = partial + (size_t{h} * nq + i0 + g) * kStride;
            corr[g] = SoftmaxStep(df, s[g], nt_pad, t0, std::max(t0, qs.first[i0 + g]),
                                  std::min(t1, qs.pos[i0 + g] + 1), job.softcap, st);
            acc_ptr[g] = st + 2;
          } else {
            corr[g] = 1.0f;
            std::fill(s[g], s[g] + nt_pad, 0.0f);
            acc_ptr[g] = dummy;
          }
        }
        // V weights (unit scale folded in) and what each unit's offset or bias adds, N / 4 units
        // at a time: the probabilities token-major first (4 x 4 transposes).
        for (uint32_t t = (a - t0) / 4 * 4; t < b - t0; t += 4) {
          Transpose4x4(d4, s[0] + t, s[1] + t, s[2] + t, s[3] + t, pt[t]);
        }
        // Weight vectors per token (q formats: a constant, so that offv stays in registers).
        const size_t nvw = kAffine<VF_> ? (v_units * kQG + N - 1) / N : kWT / N;
        VF offv[kWT / N];
        for (size_t k = 0; k < nvw; ++k) offv[k] = hn::Zero(df);
        for (uint32_t t = a; t < b; ++t) {
          const uint8_t* vr = vb + size_t{t - t0} * vs;
          const VF pv = hn::LoadDup128(df, pt[t - t0]);
          for (size_t k = 0; k < nvw; ++k) {
            const VF x = hn::Mul(pv, UnitValues<VF_, false>(vr, k, v_units, vg));
            hn::Store(x, df, w[t - t0] + k * N);
            if constexpr (VF_ == QK::kQ4_0) {
              offv[k] = hn::MulAdd(x, hn::Set(df, -8.0f), offv[k]);
            } else if constexpr (kAffine<VF_>) {
              offv[k] = hn::MulAdd(pv, UnitValues<VF_, true>(vr, k, v_units, vg), offv[k]);
            }
          }
        }
        for (size_t k = 0; k < nvw; ++k) hn::Store(offv[k], df, off + k * N);
        // Weighted V: 4 x kCG accumulators per pass over kCG chunks.
        for (size_t c0 = 0; c0 < V; c0 += kCG) {
          vdrip.Step();
          VF o[kQG][kCG];
          for (size_t g = 0; g < kQG; ++g) {
            const VF cg = hn::Set(df, corr[g]);
            for (size_t c = 0; c < kCG; ++c) {
              o[g][c] = hn::MulAdd(hn::LoadU(df, acc_ptr[g] + (c0 + c) * N), cg, hn::Set(df, off[uoff[c0 + c] + g]));
            }
          }
          const float* wa = w[a - t0] + uoff[c0];
          if (kCG * N <= size_t{1} << vg.group_shift) {  // one unit
            VPass<VF_, kCG, kCG, kWT>(vb + size_t{a - t0} * vs, vs, b - a, wa, chunk + c0, o);
          } else {  // 32-value units (q formats, affine groups of 32)
            VPass<VF_, kCG, 32 / N, kWT>(vb + size_t{a - t0} * vs, vs, b - a, wa, chunk + c0, o);
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
  if constexpr (VF_ == QK::kAffine4) {  // accumulators back from even / odd to value order
    for (size_t j = 0; j < size_t{nh} * nq; ++j) FromEvenOdd(df, partial + j * kStride + 2, kD);
  }
}

template <size_t kD>
bool RunD(const Job& job, const Item& it, float* partial) {
  return VisitPair<kServeQ16>(job.kernel.k, job.kernel.v, [&]<KvCode K, KvCode V>() {
    RunQ16<kD, K, V>(job, it, partial);
  });
}

}  // namespace

bool RunItemQ16Impl(const Job& job, const Item& it, float* partial) {
  constexpr size_t N = HWY_LANES(float);
  if constexpr (N < 4 || N > 16) {
    return false;
  } else {
    switch (job.kernel.head_dim) {
      case 64: return RunD<64>(job, it, partial);
      case 96: return RunD<96>(job, it, partial);
      case 128: return RunD<128>(job, it, partial);
      case 256: return RunD<256>(job, it, partial);
      default: return false;
    }
  }
}
#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace kvtier::attn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::attn {
HWY_EXPORT(RunItemQ16Impl);

bool RunItemQ16(const Job& job, const Item& item, float* partial) {
  return HWY_DYNAMIC_DISPATCH(RunItemQ16Impl)(job, item, partial);
}

}  // namespace kvtier::attn
#endif  // HWY_ONCE
