// SIMD chan (per-channel token-grouped K) kernels (Highway, dynamic dispatch at run time);
// layout in chan.h. As quant_simd.cc: AVX2 and AVX-512 run vector code, every other target
// the scalar reference. Per head and group: the channel min / max over the tokens in
// vectors (channels across lanes), the per-channel parameters through chan.h's scalar
// ChanParamOf (D values per group, so both paths round them identically), then the codes in
// vectors: (x - m) * inv, round to nearest even, clamp, packed into the bit stream in vectors
// (PackCodes; ChanPack is its scalar reference); decode: fma(q, s, m). Bit-identical
// to chan_ref.cc (the same operations in the same order; x86 min / max operand order).
// Pure functions; thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/chan_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/dtype_io.h"
#include "quant/chan.h"
#include "quant/chan_simd.h"
#include "quant/chanmix_ref.h"
#include "quant/simd_io-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// hn, DF, DI, DU, VF, LoadF and StoreF: quant/simd_io-inl.h.

// Packs the codes of v (u8 lanes, each < 2^kBits) into lanes * kBits / 8 bytes at out, as
// chan.h's ChanPack (a little-endian bit stream): neighbours merge in ever wider lanes, each
// step x | x >> (half the lane - the bits already merged), masked; then the low bytes of
// each lane are the stream (3 bytes of each u64 for 3-bit codes).
template <int kBits, class D8>
HWY_INLINE void PackCodes(D8 d8, hn::Vec<D8> v, uint8_t* out) {
  const hn::Repartition<uint16_t, D8> d16;
  auto a = hn::BitCast(d16, v);  // 2 codes per u16 -> 2 kBits bits
  a = hn::And(hn::Or(a, hn::ShiftRight<8 - kBits>(a)), hn::Set(d16, static_cast<uint16_t>((1u << (2 * kBits)) - 1)));
  if constexpr (kBits == 4) {
    const hn::Rebind<uint8_t, decltype(d16)> d8h;
    hn::StoreU(hn::TruncateTo(d8h, a), d8h, out);
  } else {
    const hn::Repartition<uint32_t, D8> d32;
    auto b = hn::BitCast(d32, a);  // 4 codes per u32 -> 4 kBits bits
    b = hn::And(hn::Or(b, hn::ShiftRight<16 - 2 * kBits>(b)), hn::Set(d32, (1u << (4 * kBits)) - 1));
    if constexpr (kBits == 2) {
      const hn::Rebind<uint8_t, decltype(d32)> d8q;
      hn::StoreU(hn::TruncateTo(d8q, b), d8q, out);
    } else {
      static_assert(kBits == 3, "2, 3 or 4 bits");
      const hn::Repartition<uint64_t, D8> d64;
      auto c = hn::BitCast(d64, b);  // 8 codes per u64 -> 24 bits
      c = hn::And(hn::Or(c, hn::ShiftRight<32 - 4 * kBits>(c)), hn::Set(d64, (uint64_t{1} << (8 * kBits)) - 1));
      const hn::Rebind<uint32_t, decltype(d64)> d32h;
      HWY_ALIGN uint32_t w[HWY_MAX_BYTES / 8];
      hn::Store(hn::TruncateTo(d32h, c), d32h, w);
      for (size_t i = 0; i < hn::Lanes(d64); ++i) std::memcpy(out + 3 * i, &w[i], 3);
    }
  }
}

// The SIMD twin of ChanPack (tests): n codes, n a multiple of the f32 lanes.
template <int kBits>
void PackT(const uint8_t* codes, size_t n, uint8_t* out) {
  const hn::Rebind<uint8_t, DF> du8;
  const size_t N = hn::Lanes(du8);
  for (size_t c = 0; c < n; c += N) PackCodes<kBits>(du8, hn::LoadU(du8, codes + c), out + c * kBits / 8);
}
void ChanPackCodesImpl(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  switch (bits) {
    case 4: PackT<4>(codes, n, out); return;
    case 3: PackT<3>(codes, n, out); return;
    default: PackT<2>(codes, n, out); return;
  }
}

template <DType kSrc, int kBits>
void QuantizeHeadT(const Format& f, const void* src, size_t src_token_stride, size_t n,
                   size_t D, uint8_t* row0, size_t token_stride) {
  const DF df;
  const DI di;
  const hn::Rebind<uint8_t, DF> du8;
  const size_t N = hn::Lanes(df);
  constexpr int bits = kBits;
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t tb = src_token_stride * DTypeSize(kSrc);  // bytes per source token
  // Token rows in order, the head's row 8 tokens ahead prefetched: the rows are a head's
  // slice of token rows far apart (all heads' values), and their loads waited on DRAM.
  HWY_ALIGN float lo[kChanMaxHeadDim], hi[kChanMaxHeadDim];
  const size_t row_bytes = D * DTypeSize(kSrc);
  for (size_t t = 0; t < std::min<size_t>(n, 8); ++t) {
    for (size_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(s + t * tb + o);
  }
  for (size_t c = 0; c < D; c += N) {
    const VF x = LoadF<kSrc>(df, s, c);
    hn::Store(x, df, lo + c);
    hn::Store(x, df, hi + c);
  }
  for (size_t t = 1; t < n; ++t) {
    if (t + 8 < n) {
      for (size_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(s + (t + 8) * tb + o);
    }
    for (size_t c = 0; c < D; c += N) {
      const VF x = LoadF<kSrc>(df, s + t * tb, c);
      hn::Store(hn::Min(hn::Load(df, lo + c), x), df, lo + c);
      hn::Store(hn::Max(hn::Load(df, hi + c), x), df, hi + c);
    }
  }
  // The parameters as ChanParamOf computes them, in vectors: the f16 roundings are F16C's
  // round-to-nearest-even conversions, which base/half.h's F32ToF16 / F16ToF32 equal bit for
  // bit (the scalar per-channel loop was a third of the quantize time).
  HWY_ALIGN uint16_t scale16[kChanMaxHeadDim], min16[kChanMaxHeadDim];
  HWY_ALIGN float mins[kChanMaxHeadDim], invs[kChanMaxHeadDim];
  {
    const hn::Rebind<hwy::float16_t, DF> dh;
    const VF steps = hn::Set(df, static_cast<float>((1 << bits) - 1)), one = hn::Set(df, 1.0f);
    for (size_t c = 0; c < D; c += N) {
      const auto m16 = hn::DemoteTo(dh, hn::Load(df, lo + c));
      const VF m = hn::PromoteTo(df, m16);
      const auto s16 = hn::DemoteTo(dh, hn::Div(hn::Sub(hn::Load(df, hi + c), m), steps));
      const VF sc = hn::PromoteTo(df, s16);
      hn::Store(m16, dh, reinterpret_cast<hwy::float16_t*>(min16 + c));
      hn::Store(s16, dh, reinterpret_cast<hwy::float16_t*>(scale16 + c));
      hn::Store(m, df, mins + c);
      hn::Store(hn::IfThenZeroElse(hn::Eq(sc, hn::Zero(df)), hn::Div(one, sc)), df, invs + c);
    }
  }
  ChanStoreParams(scale16, min16, f.group, bits, D, row0, token_stride);
  const VF zero = hn::Zero(df);
  const VF top = hn::Set(df, static_cast<float>((1 << bits) - 1));
  for (size_t t = 0; t < f.group; ++t) {
    uint8_t* out = row0 + t * token_stride;
    if (t >= n) {
      std::memset(out, 0, ChanCodeBytes(bits, D));
      continue;
    }
    for (size_t c = 0; c < D; c += N) {
      const VF x = LoadF<kSrc>(df, s + t * tb, c);
      VF q = hn::Round(hn::Mul(hn::Sub(x, hn::Load(df, mins + c)), hn::Load(df, invs + c)));
      q = hn::Min(hn::Max(q, zero), top);
      PackCodes<bits>(du8, hn::DemoteTo(du8, hn::ConvertTo(di, q)), out + c * bits / 8);
    }
  }
}

template <DType kSrc>
void QuantizeHeadBits(const Format& f, const void* src, size_t src_token_stride, size_t n,
                      size_t D, uint8_t* row0, size_t token_stride) {
  switch (f.bits) {
    case 4: QuantizeHeadT<kSrc, 4>(f, src, src_token_stride, n, D, row0, token_stride); return;
    case 3: QuantizeHeadT<kSrc, 3>(f, src, src_token_stride, n, D, row0, token_stride); return;
    default: QuantizeHeadT<kSrc, 2>(f, src, src_token_stride, n, D, row0, token_stride); return;
  }
}

void QuantizeChanHeadImpl(const Format& f, DType src_dtype, const void* src,
                          size_t src_token_stride, size_t n, size_t head_dim, uint8_t* row0,
                          size_t token_stride) {
  switch (src_dtype) {
    case DType::kF32: QuantizeHeadBits<DType::kF32>(f, src, src_token_stride, n, head_dim, row0, token_stride); return;
    case DType::kF16: QuantizeHeadBits<DType::kF16>(f, src, src_token_stride, n, head_dim, row0, token_stride); return;
    case DType::kBF16: QuantizeHeadBits<DType::kBF16>(f, src, src_token_stride, n, head_dim, row0, token_stride); return;
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
void ChanPackCodesImpl(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  ChanPack(codes, n, bits, out);
}
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
HWY_EXPORT(ChanPackCodesImpl);

void ChanPackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(ChanPackCodesImpl)(codes, n, bits, out);
}

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
