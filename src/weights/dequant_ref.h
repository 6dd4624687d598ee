// Scalar reference dequantizers of the weights-module block types, one function per type:
// decode `nb` consecutive blocks to nb * block_values f32 values. Bit-exact with ggml's
// dequantize_row_* (the same float operations in the same order, no FMA contraction:
// this file is compiled with -ffp-contract=off); weights_golden_test proves it on golden
// blocks. Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weights/blocks.h"

namespace kvtier::weights {

void DequantQ4_1Ref(const BlockQ4_1* x, size_t nb, float* y);
void DequantQ5_0Ref(const BlockQ5_0* x, size_t nb, float* y);
void DequantQ5_1Ref(const BlockQ5_1* x, size_t nb, float* y);
void DequantIQ4_NLRef(const BlockIQ4_NL* x, size_t nb, float* y);
void DequantQ2_KRef(const BlockQ2_K* x, size_t nb, float* y);
void DequantQ3_KRef(const BlockQ3_K* x, size_t nb, float* y);
void DequantQ4_KRef(const BlockQ4_K* x, size_t nb, float* y);
void DequantQ5_KRef(const BlockQ5_K* x, size_t nb, float* y);
void DequantQ6_KRef(const BlockQ6_K* x, size_t nb, float* y);
void DequantIQ4_XSRef(const BlockIQ4_XS* x, size_t nb, float* y);

// Decodes `nb` blocks of a weights-module type (Decoder::kWeights in the traits table) from
// raw bytes; false for any other type.
bool DequantBlocksRef(uint32_t ggml_type, const uint8_t* src, size_t nb, float* y);

}  // namespace kvtier::weights
