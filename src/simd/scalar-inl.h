// Per-target scalar helpers shared by the SIMD kernels of src/quant, src/kernels and src/model
// (module kvtier_simd, src/simd): an f16, bf16 or f32 element as f32 without a call into base/
// (in a vector loop each such call costs a vzeroupper), and an f16 broadcast to a whole vector. Include after hwy/highway.h in a
// Highway foreach_target translation unit; pure functions, thread-safe.

// Per-target include guard (Highway's convention for -inl.h headers).
#if defined(KVTIER_SIMD_SCALAR_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVTIER_SIMD_SCALAR_INL_H_
#undef KVTIER_SIMD_SCALAR_INL_H_
#else
#define KVTIER_SIMD_SCALAR_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kvtier/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::HWY_NAMESPACE {

// Element i of a dtype array as f32; f16 goes through the hardware conversion.
HWY_INLINE float LoadScalar(DType t, const uint8_t* base, size_t i) {
  namespace hn = hwy::HWY_NAMESPACE;
  if (t == DType::kF16) {
    const hn::CappedTag<hwy::float16_t, 1> dh1;
    const hn::CappedTag<float, 1> df1;
    return hn::GetLane(
        hn::PromoteTo(df1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(base) + i)));
  }
  if (t == DType::kBF16) {
    uint16_t h;
    std::memcpy(&h, base + 2 * i, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  float f;
  std::memcpy(&f, base + 4 * i, 4);
  return f;
}

// The f16 at p, converted and broadcast to every lane of a full float vector.
HWY_INLINE hwy::HWY_NAMESPACE::Vec<hwy::HWY_NAMESPACE::ScalableTag<float>> BroadcastHalf(
    const uint8_t* p) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> df;
#if HWY_TARGET <= HWY_AVX3
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return hn::Vec<decltype(df)>{_mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(bits)))};
#else
  return hn::Set(df, LoadScalar(DType::kF16, p, 0));
#endif
}

}  // namespace kvtier::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVTIER_SIMD_SCALAR_INL_H_
