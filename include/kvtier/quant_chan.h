// Quantize and dequantize token-grouped K (Format::is_token_grouped: chan<bits>g<G>, per
// channel across G tokens; layout in src/quant/chan.h and docs/formats/kv-row-formats.md).
//
// These formats keep the paged cache's row grid (row (t, h) of a block is fmt.row_bytes(D)
// bytes at slot t, head h), but a row's values depend on its whole group of G tokens, so they
// are written a group at a time. Buffers: src / dst values [n_tokens][n_heads][head_dim] of a
// dtype (token-major, as SequenceCache::Append takes K); rows [tokens][n_heads] of
// fmt.row_bytes(head_dim) bytes (a block's K region of one layer, token stride
// n_heads * row_bytes), starting at the first row of a group.
//
// Every function validates its arguments and returns InvalidArgument naming what is wrong;
// nothing is written then. The SIMD functions pick the best target of the running CPU
// (AVX-512, AVX2; the reference elsewhere) and equal the *Ref functions bit for bit (tested).
// Reentrant and thread-safe for disjoint outputs.
#pragma once

#include <cstddef>

#include "kvtier/format.h"
#include "kvtier/status.h"

namespace kvtier {

// Quantizes n_tokens tokens (token 0 the first of a group) into ceil(n_tokens / G) whole
// groups of rows: every row of those groups is written; a last, partial group is quantized
// over its present tokens and its absent rows get zero codes (they still carry the group's
// parameter slices).
Status QuantizeChanGroups(const Format& fmt, DType src_dtype, const void* src, size_t n_tokens,
                          size_t n_heads, size_t head_dim, void* rows);
Status QuantizeChanGroupsRef(const Format& fmt, DType src_dtype, const void* src,
                             size_t n_tokens, size_t n_heads, size_t head_dim, void* rows);

// Decodes tokens [first, first + n_tokens) of rows that start at a group's first row (the
// groups holding them must be whole: their parameter slices are read) into dst.
Status DequantizeChanRows(const Format& fmt, const void* rows, size_t first, size_t n_tokens,
                          size_t n_heads, size_t head_dim, DType dst_dtype, void* dst);
Status DequantizeChanRowsRef(const Format& fmt, const void* rows, size_t first, size_t n_tokens,
                             size_t n_heads, size_t head_dim, DType dst_dtype, void* dst);

}  // namespace kvtier
