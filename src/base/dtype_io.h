// Scalar element access to dtype-tagged buffers (round-to-nearest-even on store).
// Pure functions; thread-safe for disjoint writes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/half.h"
#include "kvtier/dtype.h"

namespace kvtier {

// Element i of a buffer of dtype t, as float.
inline float LoadAs(DType t, const void* p, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16: return BF16ToF32(static_cast<const uint16_t*>(p)[i]);
  }
  return 0.0f;
}

// Stores v as element i of a buffer of dtype t.
inline void StoreAs(DType t, void* p, size_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = F32ToF16(v); break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = F32ToBF16(v); break;
  }
}

}  // namespace kvtier
