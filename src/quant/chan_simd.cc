// SIMD chan (per-channel token-grouped K) kernels (Highway, dynamic dispatch at run time);
// layout in chan.h. As quant_simd.cc: AVX2 and AVX-512 run vector code, every other target
// the scalar reference. Per head and group: the channel min / max over the tokens in
// vectors (channels across lanes), the per-channel parameters through chan.h's scalar
// ChanParamOf (D values per group, so both paths round them identically), then the codes in
// vectors: (x - m) * inv, round to nearest even, clamp; decode: fma(q, s, m). Bit-identical
// to chan_ref.cc (the same operations in the same order; x86 min / max operand order).
// Pure functions; thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/chan_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstdint>
#include <cstring>

#include "base/dtype_io.h"
#include "quant/chan.h"
#include "quant/chan_simd.h"
#include "quant/chanmix_ref.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VF = hn::Vec<DF>;

// N floats of token row p (dtype kSrc) from element c.
template <DType kSrc>
HWY_INLINE VF LoadF(DF df, const uint8_t* p, size_t c) {
  if constexpr (kSrc == DType::kF32) {
    return hn::LoadU(df, reinterpret_cast<const float*>(p) + c);
  } else if constexpr (kSrc == DType::kF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p) + c));
  } else {
    const hn::Rebind<uint16_t, DF> du16;
    const DU du;
    const auto w = hn::PromoteTo(du, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p) + c));
    return hn::BitCast(df, hn::ShiftLeft<16>(w));
  }
}

template <DType kSrc>
void QuantizeHeadT(const Format& f, const void* src, size_t src_token_stride, size_t n,
                   size_t D, uint8_t* row0, size_t token_stride) {
  const DF df;
  const DI di;
  const hn::Rebind<uint8_t, DF> du8;
  const size_t N = hn::Lanes(df);
  const int bits = f.bits;
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t tb = src_token_stride * DTypeSize(kSrc);  // bytes per source token
  HWY_ALIGN float lo[kChanMaxHeadDim], hi[kChanMaxHeadDim];
  for (size_t c = 0; c < D; c += N) {
    VF vlo = LoadF<kSrc>(df, s, c), vhi = vlo;
    for (size_t t = 1; t < n; ++t) {
      const VF x = LoadF<kSrc>(df, s + t * tb, c);
      vlo = hn::Min(vlo, x);
      vhi = hn::Max(vhi, x);
    }
    hn::Store(vlo, df, lo + c);
    hn::Store(vhi, df, hi + c);
  }
  uint16_t scale16[kChanMaxHeadDim], min16[kChanMaxHeadDim];
  HWY_ALIGN float mins[kChanMaxHeadDim], invs[kChanMaxHeadDim];
  for (size_t c = 0; c < D; ++c) {
    const ChanParam p = ChanParamOf(lo[c], hi[c], bits);
    scale16[c] = p.scale16;
    min16[c] = p.min16;
    mins[c] = p.min;
    invs[c] = p.inv;
  }
  ChanStoreParams(scale16, min16, f.group, bits, D, row0, token_stride);
  const VF zero = hn::Zero(df);
  const VF top = hn::Set(df, static_cast<float>((1 << bits) - 1));
  HWY_ALIGN uint8_t codes[kChanMaxHeadDim + 64];
  for (size_t t = 0; t < f.group; ++t) {
    if (t < n) {
      for (size_t c = 0; c < D; c += N) {
        const VF x = LoadF<kSrc>(df, s + t * tb, c);
        VF q = hn::Round(hn::Mul(hn::Sub(x, hn::Load(df, mins + c)), hn::Load(df, invs + c)));
        q = hn::Min(hn::Max(q, zero), top);
        hn::StoreU(hn::DemoteTo(du8, hn::ConvertTo(di, q)), du8, codes + c);
      }
    } else {
      std::memset(codes, 0, D);
    }
    ChanPack(codes, D, bits, row0 + t * token_stride);
  }
}

void QuantizeChanHeadImpl(const Format& f, DType src_dtype, const void* src,
                          size_t src_token_stride, size_t n, size_t head_dim, uint8_t* row0,
                          size_t token_stride) {
  switch (src_dtype) {
    case DType::kF32: QuantizeHeadT<DType::kF32>(f, src, src_token_stride, n, head_dim, row0, token_stride); return;
    case DType::kF16: QuantizeHeadT<DType::kF16>(f, src, src_token_stride, n, head_dim, row0, token_stride); return;
    case DType::kBF16: QuantizeHeadT<DType::kBF16>(f, src, src_token_stride, n, head_dim, row0, token_stride); return;
  }
}

void DequantizeChanHeadImpl(const Format& f, const uint8_t* row0, size_t token_stride,
                            size_t first, size_t n, size_t head_dim, DType dst_dtype, void* dst,
                            size_t dst_token_stride) {
  const DF df;
  const DI di;
  const hn::Rebind<uint8_t, DF> du8;
  const size_t N = hn::Lanes(df);
  const size_t D = head_dim, G = f.group;
  HWY_ALIGN float scale[kChanMaxHeadDim], min[kChanMaxHeadDim], y[kChanMaxHeadDim];
  HWY_ALIGN uint8_t codes[kChanMaxHeadDim + 64];
  size_t loaded = SIZE_MAX;
  for (size_t i = 0; i < n; ++i) {
    const size_t t = first + i;
    if (t / G != loaded) {
      loaded = t / G;
      ChanLoadParams(row0 + loaded * G * token_stride, token_stride, f.bits, G, D, scale, min);
    }
    ChanUnpack(row0 + t * token_stride, D, f.bits, codes);
    float* out = dst_dtype == DType::kF32 ? static_cast<float*>(dst) + i * dst_token_stride : y;
    for (size_t c = 0; c < D; c += N) {
      const VF q = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(du8, codes + c)));
      hn::StoreU(hn::MulAdd(q, hn::Load(df, scale + c), hn::Load(df, min + c)), df, out + c);
    }
    if (dst_dtype != DType::kF32) {
      for (size_t c = 0; c < D; ++c) StoreAs(dst_dtype, dst, i * dst_token_stride + c, y[c]);
    }
  }
}
#else
void QuantizeChanHeadImpl(const Format& f, DType src_dtype, const void* src,
                          size_t src_token_stride, size_t n, size_t head_dim, uint8_t* row0,
                          size_t token_stride) {
  ref::QuantizeChanHead(f, src_dtype, src, src_token_stride, n, head_dim, row0, token_stride);
}
void DequantizeChanHeadImpl(const Format& f, const uint8_t* row0, size_t token_stride,
                            size_t first, size_t n, size_t head_dim, DType dst_dtype, void* dst,
                            size_t dst_token_stride) {
  ref::DequantizeChanHead(f, row0, token_stride, first, n, head_dim, dst_dtype, dst,
                          dst_token_stride);
}
#endif  // HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

}  // namespace HWY_NAMESPACE
}  // namespace kvtier
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::simd {

HWY_EXPORT(QuantizeChanHeadImpl);
HWY_EXPORT(DequantizeChanHeadImpl);

void QuantizeChanHead(const Format& f, DType src_dtype, const void* src, size_t src_token_stride,
                      size_t n, size_t head_dim, uint8_t* row0, size_t token_stride) {
  if (f.kind == FormatKind::kChanMix) {  // scalar on every target (chanmix_ref.cc)
    return ref::QuantizeChanMixHead(f, src_dtype, src, src_token_stride, n, head_dim, row0,
                                    token_stride);
  }
  HWY_DYNAMIC_DISPATCH(QuantizeChanHeadImpl)(f, src_dtype, src, src_token_stride, n, head_dim,
                                             row0, token_stride);
}
void DequantizeChanHead(const Format& f, const uint8_t* row0, size_t token_stride, size_t first,
                        size_t n, size_t head_dim, DType dst_dtype, void* dst,
                        size_t dst_token_stride) {
  if (f.kind == FormatKind::kChanMix) {
    return ref::DequantizeChanMixHead(f, row0, token_stride, first, n, head_dim, dst_dtype, dst,
                                      dst_token_stride);
  }
  HWY_DYNAMIC_DISPATCH(DequantizeChanHeadImpl)(f, row0, token_stride, first, n, head_dim,
                                               dst_dtype, dst, dst_token_stride);
}

}  // namespace kvtier::simd
#endif  // HWY_ONCE
