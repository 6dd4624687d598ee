// DeltaNet kernels (deltanet.h): Highway versions compiled for every target and dispatched at
// run time, and the scalar references. Stateless; thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/deltanet_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include <cmath>

#include "model/deltanet.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::model::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;  // state rows are 128 floats: 8 vectors of 16
using VF = hn::Vec<DF>;

// silu(x) = x / (1 + exp(-x)); exp's argument capped at 80 (the quotient is then 0 to f32
// precision anyway) so it never overflows.
HWY_INLINE VF DnSilu(DF df, VF x) {
  const VF e = hn::Exp(df, hn::Min(hn::Neg(x), hn::Set(df, 80.0f)));
  return hn::Div(x, hn::Add(hn::Set(df, 1.0f), e));
}

HWY_INLINE float DnSum(DF df, VF v) { return hn::GetLane(hn::SumOfLanes(df, v)); }

// Rows [j0, j0 + kRows) of the delta rule (see deltanet.h), interleaved so the rows' dot
// products overlap.
template <size_t kRows>
HWY_INLINE void DeltaRows(float* m, size_t j0, size_t S, const float* q, const float* k,
                          const float* v, float decay, float beta, float scale, float* out) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF vd = hn::Set(df, decay);
  VF acc[kRows];
  for (size_t r = 0; r < kRows; ++r) acc[r] = hn::Zero(df);
  for (size_t i = 0; i < S; i += N) {  // s_j = (decay m_j) . k
    const VF ki = hn::LoadU(df, k + i);
    for (size_t r = 0; r < kRows; ++r) {
      acc[r] = hn::MulAdd(hn::Mul(hn::LoadU(df, m + (j0 + r) * S + i), vd), ki, acc[r]);
    }
  }
  VF d[kRows];
  for (size_t r = 0; r < kRows; ++r) {
    d[r] = hn::Set(df, (v[j0 + r] - DnSum(df, acc[r])) * beta);
    acc[r] = hn::Zero(df);
  }
  for (size_t i = 0; i < S; i += N) {  // m_j = decay m_j + d_j k; out_j = m_j . q
    const VF ki = hn::LoadU(df, k + i), qi = hn::LoadU(df, q + i);
    for (size_t r = 0; r < kRows; ++r) {
      float* row = m + (j0 + r) * S + i;
      const VF mi = hn::MulAdd(d[r], ki, hn::Mul(hn::LoadU(df, row), vd));
      hn::StoreU(mi, df, row);
      acc[r] = hn::MulAdd(mi, qi, acc[r]);
    }
  }
  for (size_t r = 0; r < kRows; ++r) out[j0 + r] = DnSum(df, acc[r]) * scale;
}

void DeltaRuleStepImpl(float* m, size_t S, const float* q, const float* k, const float* v,
                       float decay, float beta, float scale, float* out) {
  const size_t N = hn::Lanes(DF());
  if (S % N != 0) {
    DeltaRuleStepRef(m, S, q, k, v, decay, beta, scale, out);
    return;
  }
  size_t j = 0;
  for (; j + 4 <= S; j += 4) DeltaRows<4>(m, j, S, q, k, v, decay, beta, scale, out);
  for (; j < S; ++j) DeltaRows<1>(m, j, S, q, k, v, decay, beta, scale, out);
}

void CausalConvSiluImpl(const float* x, const float* w, size_t T, size_t C, size_t K,
                        float* out) {
  const DF df;
  const size_t N = hn::Lanes(df);
  if (K != 4 || C % N != 0) {  // the 4-tap conv of every qwen35 file; others stay scalar
    CausalConvSiluRef(x, w, T, C, K, out);
    return;
  }
  for (size_t c = 0; c < C; c += N) {
    VF w0, w1, w2, w3;  // tap j of channels c .. c + N
    hn::LoadInterleaved4(df, w + c * 4, w0, w1, w2, w3);
    for (size_t t = 0; t < T; ++t) {
      const float* xt = x + t * C + c;
      VF s = hn::Mul(hn::LoadU(df, xt), w0);
      s = hn::MulAdd(hn::LoadU(df, xt + C), w1, s);
      s = hn::MulAdd(hn::LoadU(df, xt + 2 * C), w2, s);
      s = hn::MulAdd(hn::LoadU(df, xt + 3 * C), w3, s);
      hn::StoreU(DnSilu(df, s), df, out + t * C + c);
    }
  }
}

void MulSiluImpl(float* o, const float* z, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::Mul(hn::LoadU(df, o + i), DnSilu(df, hn::LoadU(df, z + i))), df, o + i);
  }
  if (i < n) MulSiluRef(o + i, z + i, n - i);
}

const char* DeltaNetTargetImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace kvtier::model::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::model {
namespace {
float SiluRef(float v) { return v / (1.0f + std::exp(-v)); }
}  // namespace

HWY_EXPORT(DeltaRuleStepImpl);
HWY_EXPORT(CausalConvSiluImpl);
HWY_EXPORT(MulSiluImpl);
HWY_EXPORT(DeltaNetTargetImpl);

void DeltaRuleStep(float* m, size_t S, const float* q, const float* k, const float* v,
                   float decay, float beta, float scale, float* out) {
  HWY_DYNAMIC_DISPATCH(DeltaRuleStepImpl)(m, S, q, k, v, decay, beta, scale, out);
}

void CausalConvSilu(const float* x, const float* w, size_t T, size_t C, size_t K, float* out) {
  HWY_DYNAMIC_DISPATCH(CausalConvSiluImpl)(x, w, T, C, K, out);
}

void MulSilu(float* o, const float* z, size_t n) { HWY_DYNAMIC_DISPATCH(MulSiluImpl)(o, z, n); }

const char* DeltaNetTargetName() { return HWY_DYNAMIC_DISPATCH(DeltaNetTargetImpl)(); }

void DeltaRuleStepRef(float* m, size_t S, const float* q, const float* k, const float* v,
                      float decay, float beta, float scale, float* out) {
  for (size_t j = 0; j < S; ++j) {
    float* row = m + j * S;
    float s = 0.0f;
    for (size_t i = 0; i < S; ++i) {
      row[i] *= decay;
      s += row[i] * k[i];
    }
    const float d = (v[j] - s) * beta;
    float o = 0.0f;
    for (size_t i = 0; i < S; ++i) {
      row[i] += d * k[i];
      o += row[i] * q[i];
    }
    out[j] = o * scale;
  }
}

void CausalConvSiluRef(const float* x, const float* w, size_t T, size_t C, size_t K,
                       float* out) {
  for (size_t t = 0; t < T; ++t) {
    for (size_t c = 0; c < C; ++c) {
      float s = 0.0f;
      for (size_t j = 0; j < K; ++j) s += x[(t + j) * C + c] * w[c * K + j];
      out[t * C + c] = SiluRef(s);
    }
  }
}

void MulSiluRef(float* o, const float* z, size_t n) {
  for (size_t i = 0; i < n; ++i) o[i] *= SiluRef(z[i]);
}

}  // namespace kvtier::model
#endif  // HWY_ONCE
