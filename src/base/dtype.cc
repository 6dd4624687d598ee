// DType names and sizes. Stateless; thread-safe.
#include "kvtier/dtype.h"

#include <string>

namespace kvtier {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
  }
  return 0;
}

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
  }
  return "invalid-dtype";
}

Result<DType> ParseDType(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "float16" || name == "fp16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  return Status::InvalidArgument("unknown dtype '" + std::string(name) +
                                 "': valid dtypes are f32, f16, bf16");
}

}  // namespace kvtier
