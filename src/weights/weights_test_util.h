// Test support for src/weights: random blocks of any weights-module type with finite fp16
// scales (the rest of the bytes uniformly random). Not thread-safe (one generator per call).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"
#include "kvtier/gguf.h"
#include "weights/blocks.h"
#include "weights/weight_traits.h"

namespace kvtier::weights {

// Byte offsets of a block type's fp16 scale fields.
inline std::vector<size_t> HalfFieldOffsets(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_1: return {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)};
    case GgmlType::kQ5_0: return {offsetof(BlockQ5_0, d)};
    case GgmlType::kQ5_1: return {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)};
    case GgmlType::kIQ4_NL: return {offsetof(BlockIQ4_NL, d)};
    case GgmlType::kQ2_K: return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case GgmlType::kQ3_K: return {offsetof(BlockQ3_K, d)};
    case GgmlType::kQ4_K: return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
    case GgmlType::kQ5_K: return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    case GgmlType::kQ6_K: return {offsetof(BlockQ6_K, d)};
    case GgmlType::kIQ4_XS: return {offsetof(BlockIQ4_XS, d)};
    default: return {};
  }
}

// nb random blocks of type t: [nb * block_bytes]
inline std::vector<uint8_t> RandomBlocks(const WeightTypeTraits& t, size_t nb, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(nb * t.block_bytes);
  for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
  std::normal_distribution<float> scale(0.0f, 0.01f);
  for (size_t i = 0; i < nb; ++i) {
    for (size_t off : HalfFieldOffsets(t.type)) {
      const uint16_t h = F32ToF16(scale(rng));
      std::memcpy(&b[i * t.block_bytes + off], &h, 2);
    }
  }
  return b;
}

}  // namespace kvtier::weights
