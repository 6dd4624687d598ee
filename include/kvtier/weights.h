// Module weights (src/weights, kvtier_weights; order and include rule: docs/architecture.md)
// owns the GGUF weight types beyond the KV row formats: byte-exact block layouts
// (weights/blocks.h), the weight-type traits table (weights/weight_traits.h), scalar reference
// and Highway SIMD dequantizers, and quantizers.
//
// Weight types kvtier computes with: f32, f16, bf16, q8_0, q4_0 (decoded through src/quant's
// row formats), q4_1, q5_0, q5_1, iq4_nl (32-value blocks), q2_K, q3_K, q4_K, q5_K, q6_K,
// iq4_xs (256-value super-blocks). Any other ggml type is an Unimplemented error naming it.
// Stateless functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier {

// OK when kvtier decodes weights of this ggml type; else Unimplemented naming the type by its
// ggml name ("weights of type iq2_xxs are not supported (supported: f32, ...)").
Status CheckWeightType(uint32_t ggml_type);

// Bytes of one row of n values of this type. InvalidArgument when n is not a positive
// multiple of the type's block size (naming both), Unimplemented as CheckWeightType.
Result<size_t> WeightRowBytes(uint32_t ggml_type, size_t n);

// Values per block of a supported type (1 for plain types), 0 for an unsupported one.
size_t WeightBlockValues(uint32_t ggml_type);

// Decodes n_rows contiguous rows of n values each to f32, with the fastest SIMD path of this
// CPU (Highway run-time dispatch; equal to the reference bit for bit).
//   src [n_rows][WeightRowBytes(type, n)], dst [n_rows][n] f32
Status DequantizeWeightRows(uint32_t ggml_type, const uint8_t* src, size_t n_rows, size_t n,
                            float* dst);
// The scalar reference of the same (bit-exact with ggml's dequantize_row_*).
Status DequantizeWeightRowsRef(uint32_t ggml_type, const uint8_t* src, size_t n_rows, size_t n,
                               float* dst);

// Quantizes n_rows rows of n f32 values each to this type (kvtier's own quantizers: for the
// K-quants a per-sub-block scale/min search, no importance matrix).
//   src [n_rows][n] f32, dst [n_rows][WeightRowBytes(type, n)]
Status QuantizeWeightRows(uint32_t ggml_type, const float* src, size_t n_rows, size_t n,
                          uint8_t* dst);

}  // namespace kvtier
