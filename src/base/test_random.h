// Test-only helpers: seeded random data in every source dtype. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "base/dtype_io.h"

namespace kvtier::testing {

// n standard-normal values times `scale` plus `offset`, stored as `dtype` (bytes).
inline std::vector<uint8_t> RandomValues(DType dtype, size_t n, uint64_t seed, float scale = 1.0f,
                                         float offset = 0.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint8_t> out(n * DTypeSize(dtype));
  for (size_t i = 0; i < n; ++i) StoreAs(dtype, out.data(), i, nd(rng) * scale + offset);
  return out;
}

// Element i of a dtype buffer as float.
inline float ValueAt(DType dtype, const std::vector<uint8_t>& buf, size_t i) {
  return LoadAs(dtype, buf.data(), i);
}

}  // namespace kvtier::testing
