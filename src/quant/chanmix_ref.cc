// Scalar kernels of chanmix<b>g<G> (per-channel token-grouped K with two code widths); layout
// in chanmix.h. The chan dispatchers (chan_ref.cc, chan_simd.cc) call these for kChanMix on
// every target: the per-channel widths make the codes a variable-width stream, and the
// vector part of a decode (one fma per value) is not where its time goes (the unpack is).
// Pure functions; thread-safe.
#include "quant/chanmix_ref.h"

#include <cmath>

#include "base/dtype_io.h"
#include "quant/chanmix.h"

namespace kvtier::ref {

void QuantizeChanMixHead(const Format& f, DType src_dtype, const void* src,
                         size_t src_token_stride, size_t n, size_t head_dim, uint8_t* row0,
                         size_t token_stride) {
  const size_t D = head_dim;
  uint16_t lo16[kChanMaxHeadDim], hi16[kChanMaxHeadDim];
  for (size_t c = 0; c < D; ++c) {
    float lo = LoadAs(src_dtype, src, c), hi = lo;
    for (size_t t = 1; t < n; ++t) {
      const float x = LoadAs(src_dtype, src, t * src_token_stride + c);
      lo = lo < x ? lo : x;
      hi = hi > x ? hi : x;
    }
    lo16[c] = F32ToF16(lo);
    hi16[c] = F32ToF16(hi);
  }
  ChanMixStoreRaw(lo16, hi16, f.group, f.bits, D, row0, token_stride);
  ChanMixParams p;
  ChanMixParamsOf(lo16, hi16, D, f.bits, &p);
  const size_t code_bytes = ChanMixCodeBytes(f.bits, D);
  uint8_t codes[kChanMaxHeadDim];
  for (size_t t = 0; t < f.group; ++t) {
    for (size_t c = 0; c < D; ++c) {
      codes[c] = t < n ? ChanCode(LoadAs(src_dtype, src, t * src_token_stride + c), p.lo[c],
                                  p.inv[c], p.w[c])
                       : 0;
    }
    ChanMixPack(codes, p.w, D, code_bytes, row0 + t * token_stride);
  }
}

void DequantizeChanMixHead(const Format& f, const uint8_t* row0, size_t token_stride,
                           size_t first, size_t n, size_t head_dim, DType dst_dtype, void* dst,
                           size_t dst_token_stride) {
  const size_t D = head_dim, G = f.group;
  ChanMixParams p;
  uint8_t codes[kChanMaxHeadDim];
  size_t loaded = SIZE_MAX;  // the group whose parameters are in p
  for (size_t i = 0; i < n; ++i) {
    const size_t t = first + i;
    if (t / G != loaded) {
      loaded = t / G;
      uint16_t lo16[kChanMaxHeadDim], hi16[kChanMaxHeadDim];
      ChanMixLoadRaw(row0 + loaded * G * token_stride, token_stride, f.bits, G, D, lo16, hi16);
      ChanMixParamsOf(lo16, hi16, D, f.bits, &p);
    }
    ChanMixUnpack(row0 + t * token_stride, p.w, D, codes);
    for (size_t c = 0; c < D; ++c) {
      StoreAs(dst_dtype, dst, i * dst_token_stride + c,
              std::fma(static_cast<float>(codes[c]), p.step[c], p.lo[c]));
    }
  }
}

}  // namespace kvtier::ref
