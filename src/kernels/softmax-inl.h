// Per-target helpers shared by the f32 kernels (attention_generic / _fast / _q16.cc): the
// online-softmax step over one query vector's scores of a tile, and the even / odd value
// order some decoders produce. Include inside a Highway foreach_target translation unit after
// hwy/highway.h and hwy/contrib/math/math-inl.h. Pure functions; thread-safe.

// Per-target include guard (Highway's convention for -inl.h headers).
#if defined(KVTIER_KERNELS_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVTIER_KERNELS_SOFTMAX_INL_H_
#undef KVTIER_KERNELS_SOFTMAX_INL_H_
#else
#define KVTIER_KERNELS_SOFTMAX_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::attn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One online-softmax step over a tile for one query vector: `s` holds the scaled scores of
// keys t0 .. t0 + n_pad (whole vectors). Applies the soft-cap, masks keys outside [a, b) to
// -inf, updates st = {m, l} and leaves the probabilities exp(s - m) in `s` (0 where masked).
// Returns the factor the accumulator must be scaled by (1 when nothing was visible).
template <class DF>
HWY_INLINE float SoftmaxStep(DF df, float* s, uint32_t n_pad, uint32_t t0, uint32_t a, uint32_t b,
                             float softcap, float* st) {
  constexpr size_t N = HWY_LANES(float);
  const hn::RebindToSigned<DF> di;
  using VF = hn::Vec<DF>;
  const VF vneg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const auto lane = hn::Iota(di, 0);
  VF mx = vneg_inf;
  const bool full = a <= t0 && t0 + n_pad <= b;  // every key of the tile visible: no masks
  for (uint32_t c = 0; c < n_pad; c += static_cast<uint32_t>(N)) {
    VF x = hn::Load(df, s + c);
    if (softcap > 0) {
      // cap * tanh(x / cap), tanh(y) = 1 - 2 / (exp(2y) + 1)
      const VF cap = hn::Set(df, softcap);
      const VF y = hn::Div(x, cap);
      const VF e = hn::Exp(df, hn::Add(y, y));
      const VF one = hn::Set(df, 1.0f);
      x = hn::Mul(cap, hn::Sub(one, hn::Div(hn::Set(df, 2.0f), hn::Add(e, one))));
    }
    if (!full) {
      const auto t_abs = hn::Add(lane, hn::Set(di, static_cast<int32_t>(t0 + c)));
      const auto vis = hn::And(hn::Gt(t_abs, hn::Set(di, static_cast<int32_t>(a) - 1)),
                               hn::Lt(t_abs, hn::Set(di, static_cast<int32_t>(b))));
      x = hn::IfThenElse(hn::RebindMask(df, vis), x, vneg_inf);
    }
    mx = hn::Max(mx, x);
    hn::Store(x, df, s + c);
  }
  const float m_new = std::max(st[0], hn::GetLane(hn::MaxOfLanes(df, mx)));
  if (m_new == -std::numeric_limits<float>::infinity()) {  // nothing visible here
    std::fill(s, s + n_pad, 0.0f);
    return 1.0f;
  }
  const float corr = std::exp(st[0] - m_new);  // 0 on the first visible tile (m = -inf)
  const VF vm = hn::Set(df, m_new);
  VF sum = hn::Zero(df);
  for (uint32_t c = 0; c < n_pad; c += static_cast<uint32_t>(N)) {
    const VF x = hn::Load(df, s + c);
    // exp(-inf) is 0 for masked keys; the select keeps it exact whatever Exp does there.
    const VF e = hn::Exp(df, hn::Sub(x, vm));
    const VF p = full ? e : hn::IfThenElseZero(hn::Gt(x, vneg_inf), e);
    sum = hn::Add(sum, p);
    hn::Store(p, df, s + c);
  }
  st[1] = st[1] * corr + hn::GetLane(hn::SumOfLanes(df, sum));
  st[0] = m_new;
  return corr;
}

// Values [2N s, 2N s + 2N) of src in even / odd order (see DecBF16EO), n values.
template <class DF>
HWY_INLINE void ToEvenOdd(DF df, const float* src, float* dst, size_t n) {
  const size_t N = hn::Lanes(df);
  for (size_t s0 = 0; s0 < n; s0 += 2 * N) {
    for (size_t j = 0; j < N; ++j) {
      dst[s0 + j] = src[s0 + 2 * j];
      dst[s0 + N + j] = src[s0 + 2 * j + 1];
    }
  }
}
// And back, in place.
template <class DF>
HWY_INLINE void FromEvenOdd(DF df, float* x, size_t n) {
  const size_t N = hn::Lanes(df);
  float tmp[2 * HWY_LANES(float)];
  for (size_t s0 = 0; s0 < n; s0 += 2 * N) {
    std::memcpy(tmp, x + s0, 2 * N * sizeof(float));
    for (size_t j = 0; j < N; ++j) {
      x[s0 + 2 * j] = tmp[j];
      x[s0 + 2 * j + 1] = tmp[N + j];
    }
  }
}

}  // namespace kvtier::attn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVTIER_KERNELS_SOFTMAX_INL_H_
