// Per-target horizontal reductions shared by the SIMD kernels of src/kernels and src/model
// (module kvtier_simd, src/simd: Highway helpers below quant, kernels and model). Include after
// hwy/highway.h in a Highway foreach_target translation unit; pure functions, thread-safe.

// Per-target include guard (Highway's convention for -inl.h headers).
#if defined(KVTIER_SIMD_REDUCE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVTIER_SIMD_REDUCE_INL_H_
#undef KVTIER_SIMD_REDUCE_INL_H_
#else
#define KVTIER_SIMD_REDUCE_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::HWY_NAMESPACE {

// Horizontal sums of N vectors at once: lane j of the result = sum of the lanes of acc[j].
template <class DF, class VF = hwy::HWY_NAMESPACE::Vec<DF>>
HWY_INLINE VF SumBatch(DF df, const VF* acc) {
  namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET <= HWY_AVX3
  (void)df;
  // 512 -> 256 bits: lanes 0..7 hold a partial of x, 8..15 of y.
  auto halve = [](__m512 x, __m512 y) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  };
  // 256 -> 128 bits: 128-bit block k holds 4 partials of input k.
  auto quarter = [](__m512 xy, __m512 zw) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(xy, zw, 0x88), _mm512_shuffle_f32x4(xy, zw, 0xDD));
  };
  // Q[m]'s block k holds input m + 4k.
  __m512 q[4];
  for (int m = 0; m < 4; ++m) {
    q[m] = quarter(halve(acc[m].raw, acc[m + 4].raw), halve(acc[m + 8].raw, acc[m + 12].raw));
  }
  // Sum the 4 lanes of every block, block k lane m <- Q[m] block k: input 4k + m.
  const __m512 u0 = _mm512_add_ps(_mm512_unpacklo_ps(q[0], q[1]), _mm512_unpackhi_ps(q[0], q[1]));
  const __m512 u1 = _mm512_add_ps(_mm512_unpacklo_ps(q[2], q[3]), _mm512_unpackhi_ps(q[2], q[3]));
  const __m512 v = _mm512_add_ps(
      _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(u0), _mm512_castps_pd(u1))),
      _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(u0), _mm512_castps_pd(u1))));
  return VF{v};
#elif HWY_TARGET == HWY_AVX2
  (void)df;
  // Pairwise horizontal adds: after two rounds, 128-bit half h of s0123 holds the partial sums
  // of inputs 0..3 over their half h (s4567 likewise for 4..7); the halves then add up.
  const __m256 s01 = _mm256_hadd_ps(acc[0].raw, acc[1].raw);
  const __m256 s23 = _mm256_hadd_ps(acc[2].raw, acc[3].raw);
  const __m256 s45 = _mm256_hadd_ps(acc[4].raw, acc[5].raw);
  const __m256 s67 = _mm256_hadd_ps(acc[6].raw, acc[7].raw);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23);
  const __m256 s4567 = _mm256_hadd_ps(s45, s67);
  return VF{_mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                          _mm256_permute2f128_ps(s0123, s4567, 0x31))};
#else
  constexpr size_t N = HWY_LANES(float);
  HWY_ALIGN float sums[N];
  for (size_t j = 0; j < N; ++j) sums[j] = hn::GetLane(hn::SumOfLanes(df, acc[j]));
  return hn::Load(df, sums);
#endif
}

}  // namespace kvtier::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVTIER_SIMD_REDUCE_INL_H_
