// Highway SIMD dequantizers of the weights-module block types (AVX-512, AVX2, ... chosen at
// run time), bit-exact with the scalar reference of weights/dequant_ref.h
// (weights_simd_test checks every compiled target). Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier::weights {

// Decodes `nb` blocks of a weights-module type (Decoder::kWeights) to f32; false for any
// other type.   src [nb * block_bytes], y [nb * block_values]
bool DequantBlocks(uint32_t ggml_type, const uint8_t* src, size_t nb, float* y);

// Tests: restrict dispatch to one Highway target bit (0: the best the CPU has); false if the
// CPU cannot run it. The compiled targets this CPU supports. Not thread-safe with decoding.
bool WeightsForceSimdTarget(long long target_bit);
std::vector<long long> WeightsAvailableSimdTargets();
const char* WeightsSimdTargetName();

}  // namespace kvtier::weights
