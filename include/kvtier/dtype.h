// Element dtypes of tensors (source K/V, scales, outputs). Values are stored in files.
// Thread-safe (plain values and pure functions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier {

// Element dtypes of source tensors and of scales. Values are stored in files: never change.
enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

size_t DTypeSize(DType t);
std::string_view DTypeName(DType t);  // "f32", "f16", "bf16"
Result<DType> ParseDType(std::string_view name);

}  // namespace kvtier
