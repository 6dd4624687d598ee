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
// Whether the target chosen for this CPU runs vector code (else it runs the reference).
bool ChosenTargetIsVector();

}  // namespace kvtier::simd
