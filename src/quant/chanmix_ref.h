// chanmix<b>g<G> head kernels (chanmix_ref.cc; layout in chanmix.h). Internal to src/quant:
// the chan dispatchers (chan_ref.cc, chan_simd.cc) route FormatKind::kChanMix here, with the
// arguments of chan_simd.h's functions (unchecked). Pure; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/format.h"

namespace kvtier::ref {
void QuantizeChanMixHead(const Format& f, DType src_dtype, const void* src,
                         size_t src_token_stride, size_t n, size_t head_dim, uint8_t* row0,
                         size_t token_stride);
void DequantizeChanMixHead(const Format& f, const uint8_t* row0, size_t token_stride,
                           size_t first, size_t n, size_t head_dim, DType dst_dtype, void* dst,
                           size_t dst_token_stride);
}  // namespace kvtier::ref
