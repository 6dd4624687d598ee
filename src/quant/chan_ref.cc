// Scalar reference of the chan (per-channel token-grouped K) kernels; layout in chan.h.
// Pure functions; thread-safe.
#include <cmath>

#include "base/dtype_io.h"
#include "quant/chan.h"
#include "quant/chan_simd.h"
#include "quant/chanmix_ref.h"

namespace kvtier::ref {

void QuantizeChanHead(const Format& f, DType src_dtype, const void* src, size_t src_token_stride,
                      size_t n, size_t head_dim, uint8_t* row0, size_t token_stride) {
  if (f.kind == FormatKind::kChanMix) {
    return QuantizeChanMixHead(f, src_dtype, src, src_token_stride, n, head_dim, row0, token_stride);
  }
  const size_t D = head_dim;
  const int bits = f.bits;
  uint16_t scale16[kChanMaxHeadDim], min16[kChanMaxHeadDim];
  float mins[kChanMaxHeadDim], invs[kChanMaxHeadDim];
  for (size_t c = 0; c < D; ++c) {
    float lo = LoadAs(src_dtype, src, c), hi = lo;
    for (size_t t = 1; t < n; ++t) {
      const float x = LoadAs(src_dtype, src, t * src_token_stride + c);
      lo = lo < x ? lo : x;  // the operand order of x86 min / max
      hi = hi > x ? hi : x;
    }
    const ChanParam p = ChanParamOf(lo, hi, bits);
    scale16[c] = p.scale16;
    min16[c] = p.min16;
    mins[c] = p.min;
    invs[c] = p.inv;
  }
  ChanStoreParams(scale16, min16, f.group, bits, D, row0, token_stride);
  uint8_t codes[kChanMaxHeadDim];
  for (size_t t = 0; t < f.group; ++t) {
    for (size_t c = 0; c < D; ++c) {
      codes[c] = t < n ? ChanCode(LoadAs(src_dtype, src, t * src_token_stride + c), mins[c], invs[c], bits)
                       : 0;
    }
    ChanPack(codes, D, bits, row0 + t * token_stride);
  }
}

void DequantizeChanHead(const Format& f, const uint8_t* row0, size_t token_stride, size_t first,
                        size_t n, size_t head_dim, DType dst_dtype, void* dst,
                        size_t dst_token_stride) {
  if (f.kind == FormatKind::kChanMix) {
    return DequantizeChanMixHead(f, row0, token_stride, first, n, head_dim, dst_dtype, dst,
                                 dst_token_stride);
  }
  const size_t D = head_dim, G = f.group;
  float scale[kChanMaxHeadDim], min[kChanMaxHeadDim];
  uint8_t codes[kChanMaxHeadDim];
  size_t loaded = SIZE_MAX;  // the group whose parameters are in scale / min
  for (size_t i = 0; i < n; ++i) {
    const size_t t = first + i;
    if (t / G != loaded) {
      loaded = t / G;
      ChanLoadParams(row0 + loaded * G * token_stride, token_stride, f.bits, G, D, scale, min);
    }
    ChanUnpack(row0 + t * token_stride, D, f.bits, codes);
    for (size_t c = 0; c < D; ++c) {
      StoreAs(dst_dtype, dst, i * dst_token_stride + c, std::fma(static_cast<float>(codes[c]), scale[c], min[c]));
    }
  }
}

}  // namespace kvtier::ref
