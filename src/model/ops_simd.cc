// Highway SIMD forms of the forward pass's element-wise operations (see ops.h; ops.cc keeps
// the scalar `_ref` forms they are tested against in ops_test.cc). Compiled for every Highway
// target and dispatched at run time. Stateless; thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/ops_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include <cstddef>

#include "model/ops.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::model::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// g[i] = g[i] / (1 + exp(-g[i])) * u[i]; Highway's Exp (a few ulp from std::exp).
void SwiGluImpl(float* g, const float* u, size_t n) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const auto one = hn::Set(df, 1.0f);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto x = hn::LoadU(df, g + i);
    const auto e = hn::Exp(df, hn::Neg(x));
    hn::StoreU(hn::Mul(hn::Div(x, hn::Add(one, e)), hn::LoadU(df, u + i)), df, g + i);
  }
  if (i < n) SwiGluRef(g + i, u + i, n - i);
}

}  // namespace kvtier::model::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::model {

HWY_EXPORT(SwiGluImpl);

void SwiGlu(float* g, const float* u, size_t n) { HWY_DYNAMIC_DISPATCH(SwiGluImpl)(g, u, n); }

}  // namespace kvtier::model
#endif  // HWY_ONCE
