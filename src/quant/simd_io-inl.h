// Per-dtype row loads and stores for the quant SIMD kernels (quant_simd.cc, chan_simd.cc):
// LoadF reads N floats of an f32 / f16 / bf16 row, StoreF writes them back rounding to
// nearest even (bf16: NaN stays a quiet NaN). AVX2 and AVX-512 targets only, as the kernels
// that use them. A Highway per-target header: its include guard is toggled per target
// (HWY_TARGET_TOGGLE), so each pass of hwy/foreach_target.h through an including .cc file
// compiles it again in that target's namespace. Pure functions; thread-safe.
#if defined(KVTIER_QUANT_SIMD_IO_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVTIER_QUANT_SIMD_IO_INL_H_
#undef KVTIER_QUANT_SIMD_IO_INL_H_
#else
#define KVTIER_QUANT_SIMD_IO_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "kvtier/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VF = hn::Vec<DF>;

// N floats from element i of a row of dtype kSrc.
template <DType kSrc>
HWY_INLINE VF LoadF(DF df, const void* p, size_t i) {
  if constexpr (kSrc == DType::kF32) {
    return hn::LoadU(df, static_cast<const float*>(p) + i);
  } else if constexpr (kSrc == DType::kF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, static_cast<const hwy::float16_t*>(p) + i));
  } else {
    const hn::Rebind<uint16_t, DF> du16;
    const DU du;
    const auto w = hn::PromoteTo(du, hn::LoadU(du16, static_cast<const uint16_t*>(p) + i));
    return hn::BitCast(df, hn::ShiftLeft<16>(w));
  }
}

// Stores N floats at element i of a row of dtype kDst, rounding to nearest even.
template <DType kDst>
HWY_INLINE void StoreF(DF df, VF v, void* p, size_t i) {
  if constexpr (kDst == DType::kF32) {
    hn::StoreU(v, df, static_cast<float*>(p) + i);
  } else if constexpr (kDst == DType::kF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    hn::StoreU(hn::DemoteTo(dh, v), dh, static_cast<hwy::float16_t*>(p) + i);
  } else {
    const DU du;
    const DI di;
    const hn::Rebind<uint16_t, DF> du16;
    const auto u = hn::BitCast(du, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1));
    const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(u, hn::Set(du, 0x7fff)), lsb));
    const auto quiet_nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40));
    const auto is_nan = hn::RebindMask(du, hn::IsNaN(v));
    const auto bits = hn::IfThenElse(is_nan, quiet_nan, rounded);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, bits)), du16, static_cast<uint16_t*>(p) + i);
  }
}
#endif  // HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

}  // namespace HWY_NAMESPACE
}  // namespace kvtier
HWY_AFTER_NAMESPACE();

#endif  // KVTIER_QUANT_SIMD_IO_INL_H_
