// Test-only helpers: seeded random data in every source dtype. Deterministic for a seed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"
#include "kvtier/format.h"

namespace kvtier::testing {

// n standard-normal values times `scale`, stored as `dtype` (bytes).
inline std::vector<uint8_t> RandomValues(DType dtype, size_t n, uint64_t seed, float scale = 1.0f,
                                         float offset = 0.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint8_t> out(n * DTypeSize(dtype));
  for (size_t i = 0; i < n; ++i) {
    const float v = nd(rng) * scale + offset;
    switch (dtype) {
      case DType::kF32: std::memcpy(out.data() + 4 * i, &v, 4); break;
      case DType::kF16: {
        const uint16_t h = F32ToF16(v);
        std::memcpy(out.data() + 2 * i, &h, 2);
        break;
      }
      case DType::kBF16: {
        const uint16_t h = F32ToBF16(v);
        std::memcpy(out.data() + 2 * i, &h, 2);
        break;
      }
    }
  }
  return out;
}

// Element i of a dtype buffer as float.
inline float ValueAt(DType dtype, const std::vector<uint8_t>& buf, size_t i) {
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, buf.data() + 4 * i, 4);
      return f;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, buf.data() + 2 * i, 2);
      return F16ToF32(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, buf.data() + 2 * i, 2);
      return BF16ToF32(h);
    }
  }
  return 0.0f;
}

}  // namespace kvtier::testing
