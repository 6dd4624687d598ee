// Entry points of the Highway-dispatched chan kernels (chan_simd.cc) and their scalar
// references (chan_ref.cc). Internal to src/quant and the attention kernels: arguments are
// unchecked (quant_chan.cc validates them for the public API). Pure; thread-safe.
//
// One KV head: row0 is the head's row of a group's first token; rows token_stride bytes apart.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/format.h"

namespace kvtier {
namespace ref {
// Quantizes n (1..G) tokens of one head, src_token_stride elements apart in src, into the G
// rows of one group (rows n..G-1: zero codes).
void QuantizeChanHead(const Format& f, DType src_dtype, const void* src, size_t src_token_stride,
                      size_t n, size_t head_dim, uint8_t* row0, size_t token_stride);
// Decodes tokens [first, first + n) (they may run over several groups) of one head into dst
// rows dst_token_stride elements apart.
void DequantizeChanHead(const Format& f, const uint8_t* row0, size_t token_stride, size_t first,
                        size_t n, size_t head_dim, DType dst_dtype, void* dst,
                        size_t dst_token_stride);
}  // namespace ref

namespace simd {
// Packs n codes (each < 2^bits; n a multiple of 16) as ChanPack (quant/chan.h, the scalar
// reference) does, with the dispatched target's vectors (tests).
void ChanPackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out);
void QuantizeChanHead(const Format& f, DType src_dtype, const void* src, size_t src_token_stride,
                      size_t n, size_t head_dim, uint8_t* row0, size_t token_stride);
void DequantizeChanHead(const Format& f, const uint8_t* row0, size_t token_stride, size_t first,
                        size_t n, size_t head_dim, DType dst_dtype, void* dst,
                        size_t dst_token_stride);
}  // namespace simd
}  // namespace kvtier
