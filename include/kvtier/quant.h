// Quantize and dequantize KV rows (one row = one token of one KV head, head_dim values).
//
// Buffers are dense: src [n_rows, head_dim] elements of `src_dtype`; quantized
// [n_rows, fmt.row_bytes(head_dim)] bytes. Every function validates the format, the head_dim
// and the pointers and returns InvalidArgument naming what is wrong; nothing is written then.
//
// QuantizeRows / DequantizeRows pick the best SIMD target of the running CPU (Highway
// dynamic dispatch: AVX-512, AVX2) and fall back to the scalar reference elsewhere. The *Ref
// functions are the scalar reference; the SIMD results equal them bit for bit (tested).
// All functions are reentrant and thread-safe for disjoint output buffers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kvtier/format.h"
#include "kvtier/status.h"

namespace kvtier {

Status QuantizeRows(const Format& fmt, DType src_dtype, const void* src, size_t n_rows,
                    size_t head_dim, void* dst);
Status DequantizeRows(const Format& fmt, const void* src, size_t n_rows, size_t head_dim,
                      DType dst_dtype, void* dst);

Status QuantizeRowsRef(const Format& fmt, DType src_dtype, const void* src, size_t n_rows,
                       size_t head_dim, void* dst);
Status DequantizeRowsRef(const Format& fmt, const void* src, size_t n_rows, size_t head_dim,
                         DType dst_dtype, void* dst);

// Name of the SIMD target QuantizeRows uses on this CPU, e.g. "AVX3", "AVX2" or "scalar".
std::string QuantSimdTargetName();

// For tests: restrict dispatch to one Highway target bit (0 = the best the CPU supports).
// Returns false if the CPU cannot run it. Not thread-safe with concurrent QuantizeRows.
bool QuantForceSimdTarget(long long target_bit);
// The Highway target bits compiled into this binary and supported by this CPU.
std::vector<long long> QuantAvailableSimdTargets();

}  // namespace kvtier
