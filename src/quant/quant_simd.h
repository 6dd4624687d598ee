// Entry points of the Highway-dispatched kernels in quant_simd.cc. Internal to src/quant:
// arguments are validated by quant.cc before these are called. Return false only for a
// format the kernels do not know (a bug: the caller reports it as Internal).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/format.h"

namespace kvtier::simd {

bool QuantizeRows(const Format& f, DType src_dtype, const void* src, size_t n_rows,
                  size_t head_dim, uint8_t* dst);
bool DequantizeRows(const Format& f, const uint8_t* src, size_t n_rows, size_t head_dim,
                    DType dst_dtype, void* dst);
// As DequantizeRows, with rows src_stride bytes apart (e.g. one KV head of consecutive tokens
// in a KV block). For the attention kernels; arguments unchecked.
bool DequantizeRowsStrided(const Format& f, const uint8_t* src, size_t src_stride, size_t n_rows,
                           size_t head_dim, DType dst_dtype, void* dst);
// As DequantizeRowsStrided to f32, but in the format's stored basis: rotated formats
// (Format::is_rotated) give R x (rot.h), not x; every other format as DequantizeRowsStrided.
// For the attention kernels, which rotate the query and the output instead of every row.
bool DequantizeRowsStridedStored(const Format& f, const uint8_t* src, size_t src_stride,
                                 size_t n_rows, size_t head_dim, float* dst);
// Rotates n_rows vectors of n floats (n a multiple of 32) in place by rot.h's R under `seed`
// (inverse: by R^T). Bit-identical to RotateRef on every target.
void RotateRows(uint8_t seed, float* x, size_t n_rows, size_t n, bool inverse);
// Whether the target chosen for this CPU runs vector code (else it runs the reference).
bool ChosenTargetIsVector();

}  // namespace kvtier::simd
