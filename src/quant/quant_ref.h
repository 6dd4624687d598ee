// Scalar reference kernels, one row at a time. Internal to src/quant: callers go through
// kvtier/quant.h, which validates arguments first. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/format.h"

namespace kvtier::ref {

// src: [head_dim] of src_dtype; dst: fmt.row_bytes(head_dim) bytes.
void QuantizeRow(const Format& fmt, DType src_dtype, const void* src, size_t head_dim,
                 uint8_t* dst);
// src: fmt.row_bytes(head_dim) bytes; dst: [head_dim] of dst_dtype.
void DequantizeRow(const Format& fmt, const uint8_t* src, size_t head_dim, DType dst_dtype,
                   void* dst);

// One affine group: `src` points at its first value (group values of src_dtype); codes go to
// `codes_out` (group * bits / 8 bytes), scale and bias to element `g` of the row's scale and
// bias arrays. The SIMD kernel uses it for groups that do not fill a whole batch.
void QuantizeAffineGroup(const Format& fmt, DType src_dtype, const void* src, uint8_t* codes_out,
                         uint8_t* scales, uint8_t* biases, size_t g);

// One ggml block from 32 values of src_dtype.
void QuantizeBlockFrom(const Format& fmt, DType src_dtype, const void* src, uint8_t* block);

// Rotated rows (rot.h): quantize a row of src_dtype (rotate, then blocks), and decode a row's
// blocks to its values in the rotated basis (y = R x; DequantizeRow also rotates back).
void QuantizeRotRow(const Format& fmt, DType src_dtype, const void* src, size_t head_dim,
                    uint8_t* dst);
void DequantizeRotRowStored(const Format& fmt, const uint8_t* src, size_t head_dim, float* y);

// Single ggml blocks (32 values), exposed for the layout tests.
void QuantizeBlockQ8_0(const float* x, uint8_t* block);   // x: [32]
void QuantizeBlockQ4_0(const float* x, uint8_t* block);   // x: [32]
void DequantizeBlockQ8_0(const uint8_t* block, float* y);  // y: [32]
void DequantizeBlockQ4_0(const uint8_t* block, float* y);  // y: [32]

}  // namespace kvtier::ref
