// SIMD kernels for every row format (Highway, dynamic dispatch at run time).
// The x86 AVX2 and AVX-512 targets run the vector code below; every other target (SSE4,
// emulated, scalar) runs the scalar reference, because Highway's emulated f16/bf16
// demotion truncates instead of rounding. Results equal quant_ref.cc bit for bit:
// same operation order, the same reciprocal for affine codes, FMA in dequantize.
// On AVX-512 the affine, q4_0 and q8_0 quantizers take 16 groups per batch
// (quant_simd_avx512-inl.h); the kBatch code below does what is left, and all of AVX2.
// Pure functions; thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/quant_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "quant/blocks.h"
#include "quant/quant_ref.h"
#include "quant/quant_simd.h"
#include "quant/rot.h"
#include "quant/simd_io-inl.h"
#include "simd/scalar-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// hn, DF, DI, DU, VF, LoadF and StoreF: quant/simd_io-inl.h.

// Quantizers work on kBatch groups (or blocks) at a time, phase by phase (load + min/max,
// reduce, scalar parameters, codes), so the long reduce -> divide -> broadcast chains of
// neighbouring groups overlap instead of running back to back.
constexpr size_t kBatch = 4;

// x86 float -> int32 conversions without Highway's overflow fix-ups (we define the
// out-of-range result): NaN and |v| >= 2^31 give INT32_MIN, as the hardware does.
HWY_INLINE hn::Vec<DI> RoundToInt(VF v) {  // rint (MXCSR default: nearest even)
#if HWY_TARGET <= HWY_AVX3
  return hn::Vec<DI>{_mm512_cvtps_epi32(v.raw)};
#else
  return hn::Vec<DI>{_mm256_cvtps_epi32(v.raw)};
#endif
}
HWY_INLINE hn::Vec<DI> TruncToInt(VF v) {
#if HWY_TARGET <= HWY_AVX3
  return hn::Vec<DI>{_mm512_cvttps_epi32(v.raw)};
#else
  return hn::Vec<DI>{_mm256_cvttps_epi32(v.raw)};
#endif
}

// Stores the low byte of each u32 lane (N bytes). On AVX-512 one vpmovdb; Highway 1.0.3's
// TruncateTo takes a shuffle sequence there.
HWY_INLINE void StoreLowBytes(hn::Vec<DU> v, uint8_t* p) {
#if HWY_TARGET <= HWY_AVX3
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v.raw));
#else
  const hn::Rebind<uint8_t, DU> du8;
  hn::StoreU(hn::TruncateTo(du8, v), du8, p);
#endif
}

// Stores the low byte of each u64 lane (N/2 bytes).
HWY_INLINE void StoreLowBytes64(hn::Vec<hn::Repartition<uint64_t, DU>> v, uint8_t* p) {
#if HWY_TARGET <= HWY_AVX3
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm512_cvtepi64_epi8(v.raw));
#else
  const hn::Rebind<uint8_t, hn::Repartition<uint64_t, DU>> du8;
  hn::StoreU(hn::TruncateTo(du8, v), du8, p);
#endif
}

// Stores one scale or bias in dtype t. f16 goes through the hardware conversion (F16C,
// round to nearest even: the same bits as F32ToF16).
HWY_INLINE void StoreScalar(DType t, uint8_t* base, size_t i, float v) {
  if (t == DType::kF16) {
    const hn::CappedTag<float, 1> d1;
    const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
    hn::StoreU(hn::DemoteTo(dh1, hn::Set(d1, v)), dh1,
               reinterpret_cast<hwy::float16_t*>(base) + i);
  } else {
    StoreAs(t, base, i, v);
  }
}

// Horizontal max of kBatch vectors a[b] and kBatch vectors c[b] at once:
// amax[b] = max over lanes of a[b], cmax[b] = max over lanes of c[b] (NaN-free inputs).
HWY_INLINE void ReduceMaxBatch(const VF* a, const VF* c, float* amax, float* cmax) {
#if HWY_TARGET <= HWY_AVX3
  static_assert(kBatch == 4, "the AVX-512 transposed reduction handles 4 + 4 vectors");
  // 512 -> 256: lanes 0..7 hold a partial of the first input, 8..15 of the second.
  auto halve = [](__m512 x, __m512 y) {
    return _mm512_max_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  };
  // 256 -> 128: 128-bit block k holds a partial of input k (of four).
  auto quarter = [](__m512 xy, __m512 zw) {
    return _mm512_max_ps(_mm512_shuffle_f32x4(xy, zw, 0x88), _mm512_shuffle_f32x4(xy, zw, 0xDD));
  };
  const __m512 s = quarter(halve(a[0].raw, a[1].raw), halve(a[2].raw, a[3].raw));
  const __m512 t = quarter(halve(c[0].raw, c[1].raw), halve(c[2].raw, c[3].raw));
  // Within each block: lane 0 <- max of s's block, lane 1 <- max of t's block.
  __m512 m = _mm512_max_ps(_mm512_unpacklo_ps(s, t), _mm512_unpackhi_ps(s, t));
  m = _mm512_max_ps(m, _mm512_permute_ps(m, 0x4E));
  // Gather lanes 0, 4, 8, 12 (the a maxima) and 1, 5, 9, 13 (the c maxima).
  const __m512i ia = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i ic = _mm512_setr_epi32(1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  _mm_storeu_ps(amax, _mm512_castps512_ps128(_mm512_permutexvar_ps(ia, m)));
  _mm_storeu_ps(cmax, _mm512_castps512_ps128(_mm512_permutexvar_ps(ic, m)));
#else
  const DF df;
  for (size_t b = 0; b < kBatch; ++b) {
    amax[b] = hn::GetLane(hn::MaxOfLanes(df, a[b]));
    cmax[b] = hn::GetLane(hn::MaxOfLanes(df, c[b]));
  }
#endif
}

// Min and max of each of the kBatch runs of kLen values starting at element `first`
// (NaN ignored, as the reference's std::min / std::max scans), reduced together.
template <DType kSrc, size_t kLen>
HWY_INLINE void BatchMinMax(DF df, const void* src, size_t first, float* w_min, float* w_max) {
  constexpr size_t N = HWY_LANES(float);
  VF vmax[kBatch], vneg_min[kBatch];
  for (size_t b = 0; b < kBatch; ++b) {
    VF mx = hn::Set(df, -std::numeric_limits<float>::infinity());
    VF mn = hn::Set(df, std::numeric_limits<float>::infinity());
    for (size_t j = 0; j < kLen; j += N) {
      const VF v = LoadF<kSrc>(df, src, first + b * kLen + j);
      mx = hn::Max(v, mx);  // operand order: NaN v ignored, as std::max(w_max, v)
      mn = hn::Min(v, mn);
    }
    vmax[b] = mx;
    vneg_min[b] = hn::Neg(mn);  // min = -max(-x): one reduction kind for both
  }
  ReduceMaxBatch(vmax, vneg_min, w_max, w_min);
  for (size_t b = 0; b < kBatch; ++b) w_min[b] = -w_min[b];
}

// ---------------------------------------------------------------- affine

// MLX's affine parameters (AffineParamsFromMinMax), lane by lane: the same operations in the
// same order, so the same bits (NaN included: Max(eps, a) keeps a NaN a, as std::max(a, eps)
// does). The reciprocal for the codes is 1 / scale, as the reference's inv_scale.
template <int kBits, class D, class V = hn::Vec<D>>
HWY_INLINE void AffineParamsVec(D d, V lo, V hi, V& scale, V& bias) {
  const auto zero = hn::Zero(d);
  const auto mask = hn::Gt(hn::Abs(lo), hn::Abs(hi));
  auto s = hn::Max(hn::Set(d, 1e-7f),
                   hn::Div(hn::Sub(hi, lo), hn::Set(d, static_cast<float>((1 << kBits) - 1))));
  s = hn::IfThenElse(mask, s, hn::Neg(s));
  const auto edge = hn::IfThenElse(mask, lo, hi);
  const auto q0 = hn::Round(hn::Div(edge, s));
  const auto nonzero = hn::Not(hn::Eq(q0, zero));  // NaN counts as nonzero, as q0 != 0
  scale = hn::IfThenElse(nonzero, hn::Div(edge, q0), s);
  bias = hn::IfThenElseZero(nonzero, edge);
}

// AffineParamsVec for kBatch groups at once, lane b for group b.
template <int kBits>
HWY_INLINE void AffineParamsBatch(const float* w_min, const float* w_max, float* scale,
                                  float* bias, float* inv_scale) {
  const hn::FixedTag<float, kBatch> d4;
  hn::Vec<decltype(d4)> s, b;
  AffineParamsVec<kBits>(d4, hn::LoadU(d4, w_min), hn::LoadU(d4, w_max), s, b);
  hn::StoreU(s, d4, scale);
  hn::StoreU(b, d4, bias);
  hn::StoreU(hn::Div(hn::Set(d4, 1.0f), s), d4, inv_scale);
}

// The first value of a block (32 values of kSrc) whose magnitude is `magnitude` (0 if none),
// as ggml's scan picks.
template <DType kSrc>
HWY_INLINE float FirstOfMagnitude(const uint8_t* block, float magnitude) {
  for (size_t j = 0; j < 32; ++j) {
    const float x = LoadAs(kSrc, block, j);
    if (std::fabs(x) == std::fabs(magnitude)) return x;
  }
  return 0.0f;
}

#if HWY_TARGET <= HWY_AVX3
#include "quant/quant_simd_avx512-inl.h"
#endif

template <int kBits, DType kSrc, size_t kGroup>
void QuantizeAffine(const Format& f, const void* src, size_t n_rows, size_t head_dim,
                    uint8_t* dst) {
  const DF df;
  const DI di;
  constexpr size_t N = HWY_LANES(float);
  static_assert(kGroup % N == 0, "a group is whole vectors");
  const AffineRowLayout l = MakeAffineLayout(f, head_dim);
  const size_t row_bytes = f.row_bytes(head_dim);
  const DU du;
  const hn::Repartition<uint64_t, DU> du64;
  const auto n_bins = hn::Set(di, (1 << kBits) - 1);
  const auto izero = hn::Zero(di);
  HWY_ALIGN uint8_t codes[kGroup];  // codes, for widths packed by scalar code
  HWY_ALIGN float w_min[kBatch], w_max[kBatch], scale[kBatch], bias[kBatch], inv[kBatch];

  const size_t total = n_rows * l.n_groups;  // groups are contiguous in the source
  size_t start = 0;                          // the first group left for kBatch batches
#if HWY_TARGET <= HWY_AVX3
  start = total / avx512::kWide * avx512::kWide;
  avx512::QuantizeAffine16<kBits, kSrc, kGroup>(f, l, row_bytes, src, 0, start, dst);
#endif
  const size_t full = start + (total - start) / kBatch * kBatch;  // by whole batches
  size_t row = start / l.n_groups, gi = start % l.n_groups;  // (row, group in row) of the next
  auto next_group = [&] {
    if (++gi == l.n_groups) {
      gi = 0;
      ++row;
    }
  };
  for (size_t g0 = start; g0 < full; g0 += kBatch) {
    BatchMinMax<kSrc, kGroup>(df, src, g0 * kGroup, w_min, w_max);
    AffineParamsBatch<kBits>(w_min, w_max, scale, bias, inv);
    for (size_t b = 0; b < kBatch; ++b) {
      uint8_t* out = dst + row * row_bytes;
      uint8_t* gout = out + gi * l.group_code_bytes;
      const VF vb = hn::Set(df, bias[b]);
      const VF vinv = hn::Set(df, inv[b]);
      for (size_t j = 0; j < kGroup; j += N) {
        // Codes: clamp(rint((x - bias) * inv_scale), 0, n_bins); NaN -> INT32_MIN -> 0.
        const VF v = LoadF<kSrc>(df, src, (g0 + b) * kGroup + j);
        const auto q = RoundToInt(hn::Mul(hn::Sub(v, vb), vinv));
        const auto c = hn::BitCast(du, hn::Min(hn::Max(q, izero), n_bins));
        if constexpr (kBits == 8) {
          StoreLowBytes(c, gout + j);
        } else if constexpr (kBits == 4) {
          // u64 lane k holds codes 2k (bits 0..3) and 2k+1 (bits 32..35): fold the second
          // next to the first and keep the low byte.
          const auto w = hn::BitCast(du64, c);
          StoreLowBytes64(hn::Or(w, hn::ShiftRight<28>(w)), gout + j / 2);
        } else {
          StoreLowBytes(c, codes + j);
        }
      }
      if constexpr (kBits != 8 && kBits != 4) PackCodes(codes, kGroup, kBits, gout);
      StoreScalar(f.scale_dtype, out + l.scales_off, gi, scale[b]);
      StoreScalar(f.scale_dtype, out + l.biases_off, gi, bias[b]);
      next_group();
    }
  }
  for (size_t g = full; g < total; ++g) {  // fewer than kBatch groups left: the reference
    uint8_t* out = dst + row * row_bytes;
    ref::QuantizeAffineGroup(f, kSrc, static_cast<const uint8_t*>(src) + g * kGroup * DTypeSize(kSrc),
                             out + gi * l.group_code_bytes, out + l.scales_off, out + l.biases_off,
                             gi);
    next_group();
  }
}

template <int kBits, DType kSrc>
void QuantizeAffine(const Format& f, const void* src, size_t n_rows, size_t head_dim,
                    uint8_t* dst) {
  switch (f.group) {
    case 32: return QuantizeAffine<kBits, kSrc, 32>(f, src, n_rows, head_dim, dst);
    case 64: return QuantizeAffine<kBits, kSrc, 64>(f, src, n_rows, head_dim, dst);
    default: return QuantizeAffine<kBits, kSrc, 128>(f, src, n_rows, head_dim, dst);
  }
}

template <int kBits, DType kDst>
void DequantizeAffine(const Format& f, const uint8_t* src, size_t src_stride, size_t n_rows,
                      size_t head_dim, void* dst) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  const AffineRowLayout l = MakeAffineLayout(f, head_dim);
  const size_t dst_row = head_dim * DTypeSize(kDst);
  const size_t group = f.group;
  const hn::Rebind<uint8_t, DF> du8;                  // N lanes
  const hn::Repartition<uint16_t, decltype(du8)> dw;  // N/2 lanes
  const hn::Rebind<uint8_t, decltype(dw)> du8h;       // N/2 lanes
  HWY_ALIGN uint8_t codes[128 + 64];
#if HWY_TARGET <= HWY_AVX3
  [[maybe_unused]] const __m128i kDupBytes =
      _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  [[maybe_unused]] const __m512i kOddBy4 =
      _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
#endif

  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* in = src + r * src_stride;
    uint8_t* out = static_cast<uint8_t*>(dst) + r * dst_row;
    for (size_t g = 0; g < l.n_groups; ++g) {
      const VF vs = hn::Set(df, LoadScalar(f.scale_dtype, in + l.scales_off, g));
      const VF vb = hn::Set(df, LoadScalar(f.scale_dtype, in + l.biases_off, g));
      const uint8_t* gin = in + g * l.group_code_bytes;
      if constexpr (kBits != 8 && kBits != 4) UnpackCodes(gin, group, kBits, codes);
#if HWY_TARGET <= HWY_AVX3
      [[maybe_unused]] const VF table = hn::MulAdd(hn::Iota(df, 0.0f), vs, vb);  // [16]
#endif
      for (size_t j = 0; j < group; j += N) {
        hn::Vec<decltype(du8)> b;
        if constexpr (kBits == 8) {
          b = hn::LoadU(du8, gin + j);
        } else if constexpr (kBits == 4) {
#if HWY_TARGET <= HWY_AVX3
          // 16 codes -> 16 values by table lookup: the table holds fma(c, scale, bias) for
          // c = 0..15 (the reference's values); vpermps reads the low 4 bits of each index
          // lane, so lane 2k = byte k, lane 2k+1 = byte k >> 4 needs no masking.
          const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(gin + j / 2));
          const __m128i dup = _mm_shuffle_epi8(bytes, kDupBytes);  // b0 b0 b1 b1 ... b7 b7
          const __m512i idx = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(dup), kOddBy4);
          StoreF<kDst>(df, VF{_mm512_permutexvar_ps(idx, table.raw)}, out, g * group + j);
          continue;
#else
          const auto w = hn::PromoteTo(dw, hn::LoadU(du8h, gin + j / 2));  // lane k: byte k
          b = hn::BitCast(du8, hn::Or(hn::And(w, hn::Set(dw, 0x000f)),
                                      hn::ShiftLeft<4>(hn::And(w, hn::Set(dw, 0x00f0)))));
#endif
        } else {
          b = hn::LoadU(du8, codes + j);
        }
        const VF q = hn::ConvertTo(df, hn::PromoteTo(di, b));
        StoreF<kDst>(df, hn::MulAdd(q, vs, vb), out, g * group + j);
      }
    }
  }
}

// ---------------------------------------------------------------- q8_0 / q4_0

// max |x| of each of the kBatch 32-value blocks starting at block `b0` (NaN ignored, as the
// reference's std::max(amax, |x|)). The codes pass converts the source again: cheaper than
// keeping an f32 copy.
template <DType kSrc>
HWY_INLINE void BlockAbsMax(DF df, const void* src, size_t b0, float* amax) {
  constexpr size_t N = HWY_LANES(float);
  VF vamax[kBatch];
  for (size_t b = 0; b < kBatch; ++b) {
    VF m = hn::Zero(df);
    for (size_t j = 0; j < 32; j += N) {
      m = hn::Max(hn::Abs(LoadF<kSrc>(df, src, (b0 + b) * 32 + j)), m);
    }
    vamax[b] = m;
  }
  float unused[kBatch];
  ReduceMaxBatch(vamax, vamax, amax, unused);
}

// d (f32, for codes: id = 1 / d, 0 when d is 0) and its f16 bits for kBatch blocks, from
// divisor * d = m; the same operations as the reference (NaN d keeps a NaN id).
HWY_INLINE void BlockScales(const float* m, float divisor, float* id, uint16_t* d_bits) {
  const hn::FixedTag<float, kBatch> d4;
  const hn::Rebind<hwy::float16_t, decltype(d4)> h4;
  const auto d = hn::Div(hn::LoadU(d4, m), hn::Set(d4, divisor));
  const auto nonzero = hn::Not(hn::Eq(d, hn::Zero(d4)));
  hn::StoreU(hn::IfThenElseZero(nonzero, hn::Div(hn::Set(d4, 1.0f), d)), d4, id);
  hn::StoreU(hn::DemoteTo(h4, d), h4, reinterpret_cast<hwy::float16_t*>(d_bits));
}

template <DType kSrc>
void QuantizeQ8_0(const void* src, size_t n_rows, size_t head_dim, uint8_t* dst) {
  const DF df;
  constexpr size_t N = HWY_LANES(float);
  const DI di;
  const VF half = hn::Set(df, 0.5f);
  const auto lo127 = hn::Set(di, -127);
  const auto hi127 = hn::Set(di, 127);
  HWY_ALIGN float amax[kBatch], id[kBatch];
  uint16_t d_bits[kBatch];
  const size_t total = n_rows * (head_dim / 32);  // blocks are contiguous in src and dst
  size_t start = 0;  // the first block left for kBatch batches
#if HWY_TARGET <= HWY_AVX3
  start = total / avx512::kWide * avx512::kWide;
  avx512::QuantizeQ8_0x16<kSrc>(src, 0, start, dst);
#endif
  const size_t full = start + (total - start) / kBatch * kBatch;
  for (size_t b0 = start; b0 < full; b0 += kBatch) {
    BlockAbsMax<kSrc>(df, src, b0, amax);
    BlockScales(amax, 127.0f, id, d_bits);
    for (size_t b = 0; b < kBatch; ++b) {
      uint8_t* block = dst + (b0 + b) * sizeof(BlockQ8_0);
      std::memcpy(block, &d_bits[b], 2);
      const VF vid = hn::Set(df, id[b]);
      for (size_t j = 0; j < 32; j += N) {
        const VF v = hn::Mul(LoadF<kSrc>(df, src, (b0 + b) * 32 + j), vid);
        // roundf (half away from zero) as trunc(v + copysign(0.5, v)): exact here because
        // |v| <= 127 * (1 + 2^-22) < 127.5, so the sum never rounds across an integer.
        const auto r = TruncToInt(hn::Add(v, hn::CopySign(half, v)));
        const auto c = hn::Min(hn::Max(r, lo127), hi127);  // NaN -> INT32_MIN -> -127
        StoreLowBytes(hn::BitCast(DU(), c), block + 2 + j);
      }
    }
  }
  for (size_t b = full; b < total; ++b) {  // fewer than kBatch blocks left: the reference
    ref::QuantizeBlockFrom(Format::Q8_0(), kSrc,
                           static_cast<const uint8_t*>(src) + b * 32 * DTypeSize(kSrc),
                           dst + b * sizeof(BlockQ8_0));
  }
}

template <DType kSrc>
void QuantizeQ4_0(const void* src, size_t n_rows, size_t head_dim, uint8_t* dst) {
  const DF df;
  constexpr size_t N = HWY_LANES(float);
  const VF off = hn::Set(df, 8.5f);
  const auto fifteen = hn::Set(DI(), 15);
  const hn::FixedTag<float, kBatch> d4;
  HWY_ALIGN float w_max[kBatch], w_min[kBatch], max[kBatch], id[kBatch];
  uint16_t d_bits[kBatch];
  const size_t total = n_rows * (head_dim / 32);
  size_t start = 0;  // the first block left for kBatch batches
#if HWY_TARGET <= HWY_AVX3
  start = total / avx512::kWide * avx512::kWide;
  avx512::QuantizeQ4_0x16<kSrc>(src, 0, start, dst);
#endif
  const size_t full = start + (total - start) / kBatch * kBatch;
  for (size_t b0 = start; b0 < full; b0 += kBatch) {
    BatchMinMax<kSrc, 32>(df, src, b0 * 32, w_min, w_max);
    // ggml's d comes from the signed value of largest magnitude (first one on a tie): the
    // max or the min, unless both have the same magnitude (then scan), 0 for a zero block.
    const auto hi = hn::Load(d4, w_max);
    const auto neg_lo = hn::Neg(hn::Load(d4, w_min));
    const auto z = hn::Zero(d4);
    auto m = hn::IfThenElse(hn::Gt(neg_lo, hi), hn::Neg(neg_lo), hi);
    m = hn::IfThenZeroElse(hn::And(hn::Eq(hi, z), hn::Eq(neg_lo, z)), m);
    hn::Store(m, d4, max);
    const auto tie = hn::AndNot(hn::Eq(hi, z), hn::Eq(neg_lo, hi));
    if (!hn::AllFalse(d4, tie)) {
      for (size_t b = 0; b < kBatch; ++b) {
        if (-w_min[b] == w_max[b] && w_max[b] != 0.0f) {
          max[b] = FirstOfMagnitude<kSrc>(static_cast<const uint8_t*>(src) +
                                              (b0 + b) * 32 * DTypeSize(kSrc),
                                          w_max[b]);
        }
      }
    }
    BlockScales(max, -8.0f, id, d_bits);
    for (size_t b = 0; b < kBatch; ++b) {
      uint8_t* block = dst + (b0 + b) * sizeof(BlockQ4_0);
      std::memcpy(block, &d_bits[b], 2);
      const VF vid = hn::Set(df, id[b]);
      // min(15, trunc(v * id + 8.5)). v * id + 8.5 >= 0.49 for finite input; a NaN becomes
      // INT32_MIN, whose low byte (and whose << 4) is 0: code 0, as the reference.
      auto code = [&](VF v) {
        return hn::BitCast(DU(), hn::Min(TruncToInt(hn::Add(hn::Mul(v, vid), off)), fifteen));
      };
      for (size_t j = 0; j < 16; j += N) {
        const auto lo = code(LoadF<kSrc>(df, src, (b0 + b) * 32 + j));
        const auto hi16 = code(LoadF<kSrc>(df, src, (b0 + b) * 32 + 16 + j));
        StoreLowBytes(hn::Or(lo, hn::ShiftLeft<4>(hi16)), block + 2 + j);
      }
    }
  }
  for (size_t b = full; b < total; ++b) {
    ref::QuantizeBlockFrom(Format::Q4_0(), kSrc,
                           static_cast<const uint8_t*>(src) + b * 32 * DTypeSize(kSrc),
                           dst + b * sizeof(BlockQ4_0));
  }
}

// The fp16 scale of a ggml block as f32, by the hardware conversion (one lane).
HWY_INLINE float BlockScale(const uint8_t* block) { return LoadScalar(DType::kF16, block, 0); }

template <DType kDst>
void DequantizeQ8_0(const uint8_t* src, size_t src_stride, size_t n_rows, size_t head_dim,
                    void* dst) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  const hn::Rebind<int8_t, DF> di8;
  const size_t row_blocks = head_dim / 32;
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = src + r * src_stride;
    for (size_t rb = 0; rb < row_blocks; ++rb) {
      const uint8_t* block = row + rb * sizeof(BlockQ8_0);
      const size_t b = r * row_blocks + rb;  // output block
      const VF vd = hn::Set(df, BlockScale(block));
      const int8_t* qs = reinterpret_cast<const int8_t*>(block + 2);
      for (size_t j = 0; j < 32; j += N) {
        const VF q = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(di8, qs + j)));
        StoreF<kDst>(df, hn::Mul(q, vd), dst, b * 32 + j);
      }
    }
  }
}

template <DType kDst>
void DequantizeQ4_0(const uint8_t* src, size_t src_stride, size_t n_rows, size_t head_dim,
                    void* dst) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  const hn::Rebind<uint8_t, DF> du8;
  const auto eight = hn::Set(di, 8);
  const auto mask = hn::Set(du8, 0x0f);
  const size_t row_blocks = head_dim / 32;
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = src + r * src_stride;
    for (size_t rb = 0; rb < row_blocks; ++rb) {
      const uint8_t* block = row + rb * sizeof(BlockQ4_0);
      const size_t b = r * row_blocks + rb;  // output block
      const VF vd = hn::Set(df, BlockScale(block));
      for (size_t j = 0; j < 16; j += N) {
        const auto bytes = hn::LoadU(du8, block + 2 + j);
        const auto lo = hn::Sub(hn::PromoteTo(di, hn::And(bytes, mask)), eight);
        const auto hi = hn::Sub(hn::PromoteTo(di, hn::ShiftRight<4>(bytes)), eight);
        StoreF<kDst>(df, hn::Mul(hn::ConvertTo(df, lo), vd), dst, b * 32 + j);
        StoreF<kDst>(df, hn::Mul(hn::ConvertTo(df, hi), vd), dst, b * 32 + 16 + j);
      }
    }
  }
}

// ---------------------------------------------------------------- plain dtypes

template <DType kSrc, DType kDst>
void Convert(const void* src, size_t n, void* dst) {
  const DF df;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) StoreF<kDst>(df, LoadF<kSrc>(df, src, i), dst, i);
  for (; i < n; ++i) StoreAs(kDst, dst, i, LoadAs(kSrc, src, i));
}

template <DType kSrc>
void ConvertFrom(DType to, const void* src, size_t n, void* dst) {
  switch (to) {
    case DType::kF32: return Convert<kSrc, DType::kF32>(src, n, dst);
    case DType::kF16: return Convert<kSrc, DType::kF16>(src, n, dst);
    case DType::kBF16: return Convert<kSrc, DType::kBF16>(src, n, dst);
  }
}

void ConvertDTypes(DType from, DType to, const void* src, size_t n, void* dst) {
  if (from == to) {
    std::memcpy(dst, src, n * DTypeSize(from));
    return;
  }
  switch (from) {
    case DType::kF32: return ConvertFrom<DType::kF32>(to, src, n, dst);
    case DType::kF16: return ConvertFrom<DType::kF16>(to, src, n, dst);
    case DType::kBF16: return ConvertFrom<DType::kBF16>(to, src, n, dst);
  }
}

// ---------------------------------------------------------------- rotated rows

#include "quant/rot_simd-inl.h"

// ---------------------------------------------------------------- dispatch by format

template <DType kSrc>
bool QuantizeAffineBits(const Format& f, const void* src, size_t n_rows, size_t head_dim,
                        uint8_t* dst) {
  switch (f.bits) {
    case 2: QuantizeAffine<2, kSrc>(f, src, n_rows, head_dim, dst); return true;
    case 3: QuantizeAffine<3, kSrc>(f, src, n_rows, head_dim, dst); return true;
    case 4: QuantizeAffine<4, kSrc>(f, src, n_rows, head_dim, dst); return true;
    case 5: QuantizeAffine<5, kSrc>(f, src, n_rows, head_dim, dst); return true;
    case 6: QuantizeAffine<6, kSrc>(f, src, n_rows, head_dim, dst); return true;
    case 8: QuantizeAffine<8, kSrc>(f, src, n_rows, head_dim, dst); return true;
    default: return false;
  }
}

template <DType kSrc>
bool QuantizeFrom(const Format& f, const void* src, size_t n_rows, size_t head_dim,
                  uint8_t* dst) {
  switch (f.kind) {
    case FormatKind::kAffine: return QuantizeAffineBits<kSrc>(f, src, n_rows, head_dim, dst);
    case FormatKind::kQ8_0: QuantizeQ8_0<kSrc>(src, n_rows, head_dim, dst); return true;
    case FormatKind::kQ4_0: QuantizeQ4_0<kSrc>(src, n_rows, head_dim, dst); return true;
    case FormatKind::kRot: return QuantizeRotBits<kSrc>(f, src, n_rows, head_dim, dst);
    case FormatKind::kChan:  // token-grouped: chan_simd.cc
    case FormatKind::kChanMix: return false;
    case FormatKind::kF32:
    case FormatKind::kF16:
    case FormatKind::kBF16:
      ConvertDTypes(kSrc, f.scale_dtype, src, n_rows * head_dim, dst);
      return true;
  }
  return false;
}

template <DType kDst>
bool DequantizeTo(const Format& f, const uint8_t* src, size_t src_stride, size_t n_rows,
                  size_t head_dim, void* dst) {
  const size_t s = src_stride;
  switch (f.kind) {
    case FormatKind::kAffine:
      switch (f.bits) {
        case 2: DequantizeAffine<2, kDst>(f, src, s, n_rows, head_dim, dst); return true;
        case 3: DequantizeAffine<3, kDst>(f, src, s, n_rows, head_dim, dst); return true;
        case 4: DequantizeAffine<4, kDst>(f, src, s, n_rows, head_dim, dst); return true;
        case 5: DequantizeAffine<5, kDst>(f, src, s, n_rows, head_dim, dst); return true;
        case 6: DequantizeAffine<6, kDst>(f, src, s, n_rows, head_dim, dst); return true;
        case 8: DequantizeAffine<8, kDst>(f, src, s, n_rows, head_dim, dst); return true;
        default: return false;
      }
    case FormatKind::kQ8_0: DequantizeQ8_0<kDst>(src, s, n_rows, head_dim, dst); return true;
    case FormatKind::kQ4_0: DequantizeQ4_0<kDst>(src, s, n_rows, head_dim, dst); return true;
    case FormatKind::kRot: return DequantizeRotBits<kDst>(f, src, s, n_rows, head_dim, true, dst);
    case FormatKind::kChan:  // token-grouped: chan_simd.cc
    case FormatKind::kChanMix: return false;
    case FormatKind::kF32:
    case FormatKind::kF16:
    case FormatKind::kBF16: {
      const size_t row_bytes = f.row_bytes(head_dim);
      if (s == row_bytes) {
        ConvertDTypes(f.scale_dtype, kDst, src, n_rows * head_dim, dst);
        return true;
      }
      const size_t dst_row = head_dim * DTypeSize(kDst);
      for (size_t r = 0; r < n_rows; ++r) {
        ConvertDTypes(f.scale_dtype, kDst, src + r * s, head_dim,
                      static_cast<uint8_t*>(dst) + r * dst_row);
      }
      return true;
    }
  }
  return false;
}
#endif  // HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

bool QuantizeRowsImpl(const Format& f, DType src_dtype, const void* src, size_t n_rows,
                      size_t head_dim, uint8_t* dst) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if (f.is_rotated() && head_dim > 512) {  // beyond RotSigns: the reference
    for (size_t r = 0; r < n_rows; ++r) {
      ref::QuantizeRow(f, src_dtype, static_cast<const uint8_t*>(src) + r * head_dim * DTypeSize(src_dtype),
                       head_dim, dst + r * f.row_bytes(head_dim));
    }
    return true;
  }
  switch (src_dtype) {
    case DType::kF32: return QuantizeFrom<DType::kF32>(f, src, n_rows, head_dim, dst);
    case DType::kF16: return QuantizeFrom<DType::kF16>(f, src, n_rows, head_dim, dst);
    case DType::kBF16: return QuantizeFrom<DType::kBF16>(f, src, n_rows, head_dim, dst);
  }
  return false;
#else
  const size_t src_row = head_dim * DTypeSize(src_dtype);
  const size_t row_bytes = f.row_bytes(head_dim);
  for (size_t r = 0; r < n_rows; ++r) {
    ref::QuantizeRow(f, src_dtype, static_cast<const uint8_t*>(src) + r * src_row, head_dim,
                     dst + r * row_bytes);
  }
  return true;
#endif
}

bool DequantizeRowsImpl(const Format& f, const uint8_t* src, size_t src_stride, size_t n_rows,
                        size_t head_dim, DType dst_dtype, void* dst) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const size_t s = src_stride;
  if (f.is_rotated() && head_dim > 512) {  // beyond RotSigns: the reference
    const size_t dst_row = head_dim * DTypeSize(dst_dtype);
    for (size_t r = 0; r < n_rows; ++r) {
      ref::DequantizeRow(f, src + r * s, head_dim, dst_dtype, static_cast<uint8_t*>(dst) + r * dst_row);
    }
    return true;
  }
  switch (dst_dtype) {
    case DType::kF32: return DequantizeTo<DType::kF32>(f, src, s, n_rows, head_dim, dst);
    case DType::kF16: return DequantizeTo<DType::kF16>(f, src, s, n_rows, head_dim, dst);
    case DType::kBF16: return DequantizeTo<DType::kBF16>(f, src, s, n_rows, head_dim, dst);
  }
  return false;
#else
  const size_t dst_row = head_dim * DTypeSize(dst_dtype);
  for (size_t r = 0; r < n_rows; ++r) {
    ref::DequantizeRow(f, src + r * src_stride, head_dim, dst_dtype,
                       static_cast<uint8_t*>(dst) + r * dst_row);
  }
  return true;
#endif
}

// Rows as f32 in the format's stored basis (rot: not rotated back; others: DequantizeRowsImpl).
bool DequantizeRowsStoredImpl(const Format& f, const uint8_t* src, size_t src_stride,
                              size_t n_rows, size_t head_dim, float* dst) {
  if (!f.is_rotated()) {
    return DequantizeRowsImpl(f, src, src_stride, n_rows, head_dim, DType::kF32, dst);
  }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if (head_dim <= 512) {
    return DequantizeRotBits<DType::kF32>(f, src, src_stride, n_rows, head_dim, false, dst);
  }
#endif
  for (size_t r = 0; r < n_rows; ++r) {
    ref::DequantizeRotRowStored(f, src + r * src_stride, head_dim, dst + r * head_dim);
  }
  return true;
}

// n_rows vectors of n floats, rotated in place by R (rot.h) or back by R^T.
void RotateRowsImpl(uint8_t seed, float* x, size_t n_rows, size_t n, bool inverse) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if (n <= 512 && n % 32 == 0) {
    RotSigns s;
    s.Fill(seed, n);
    for (size_t r = 0; r < n_rows; ++r) RotateVec(x + r * n, n, s, inverse);
    return;
  }
#endif
  for (size_t r = 0; r < n_rows; ++r) RotateRef(x + r * n, n, seed, inverse);
}

bool IsVectorTarget() { return HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2; }

}  // namespace HWY_NAMESPACE
}  // namespace kvtier
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::simd {

HWY_EXPORT(QuantizeRowsImpl);
HWY_EXPORT(DequantizeRowsImpl);
HWY_EXPORT(IsVectorTarget);
HWY_EXPORT(DequantizeRowsStoredImpl);
HWY_EXPORT(RotateRowsImpl);

bool DequantizeRowsStridedStored(const Format& f, const uint8_t* src, size_t src_stride,
                                 size_t n_rows, size_t head_dim, float* dst) {
  return HWY_DYNAMIC_DISPATCH(DequantizeRowsStoredImpl)(f, src, src_stride, n_rows, head_dim, dst);
}

void RotateRows(uint8_t seed, float* x, size_t n_rows, size_t n, bool inverse) {
  HWY_DYNAMIC_DISPATCH(RotateRowsImpl)(seed, x, n_rows, n, inverse);
}

bool QuantizeRows(const Format& f, DType src_dtype, const void* src, size_t n_rows,
                  size_t head_dim, uint8_t* dst) {
  return HWY_DYNAMIC_DISPATCH(QuantizeRowsImpl)(f, src_dtype, src, n_rows, head_dim, dst);
}

bool DequantizeRows(const Format& f, const uint8_t* src, size_t n_rows, size_t head_dim,
                    DType dst_dtype, void* dst) {
  return HWY_DYNAMIC_DISPATCH(DequantizeRowsImpl)(f, src, f.row_bytes(head_dim), n_rows,
                                                  head_dim, dst_dtype, dst);
}

bool DequantizeRowsStrided(const Format& f, const uint8_t* src, size_t src_stride, size_t n_rows,
                           size_t head_dim, DType dst_dtype, void* dst) {
  return HWY_DYNAMIC_DISPATCH(DequantizeRowsImpl)(f, src, src_stride, n_rows, head_dim,
                                                  dst_dtype, dst);
}

bool ChosenTargetIsVector() { return HWY_DYNAMIC_DISPATCH(IsVectorTarget)(); }

}  // namespace kvtier::simd
#endif  // HWY_ONCE
