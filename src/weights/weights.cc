// The public entry points of kvtier/weights.h: type checks, row geometry, and dispatch of
// whole-row decoding / encoding to src/quant (f32, f16, bf16, q8_0, q4_0) or to this module's
// per-type code. Stateless; thread-safe.
#include "kvtier/weights.h"

#include <cmath>
#include <string>

#include "kvtier/format.h"
#include "kvtier/gguf.h"
#include "kvtier/quant.h"
#include "weights/dequant_ref.h"
#include "weights/dequant_simd.h"
#include "weights/quantize.h"
#include "weights/weight_traits.h"

namespace kvtier {
namespace weights {

std::string_view SupportedWeightTypesList() {
  static const std::string list = [] {
    std::string s;
    for (const WeightTypeTraits& t : kWeightTypes) {
      if (!s.empty()) s += ", ";
      s += t.name;
    }
    return s;
  }();
  return list;
}

namespace {

// The src/quant row Format of a kQuantFormat type.
Format QuantFormatOf(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return Format::F32();
    case GgmlType::kF16: return Format::F16();
    case GgmlType::kBF16: return Format::BF16();
    case GgmlType::kQ8_0: return Format::Q8_0();
    default: return Format::Q4_0();
  }
}

Result<const WeightTypeTraits*> Traits(uint32_t ggml_type) {
  const WeightTypeTraits* t = FindWeightType(ggml_type);
  if (t == nullptr) {
    return Status::Unimplemented("weights of type " + GgmlTypeName(ggml_type) +
                                 " are not supported (supported: " +
                                 std::string(SupportedWeightTypesList()) + ")");
  }
  return t;
}

}  // namespace
}  // namespace weights

using weights::Decoder;
using weights::WeightTypeTraits;

Status CheckWeightType(uint32_t ggml_type) { return weights::Traits(ggml_type).status(); }

size_t WeightBlockValues(uint32_t ggml_type) {
  const WeightTypeTraits* t = weights::FindWeightType(ggml_type);
  return t == nullptr ? 0 : t->block_values;
}

Result<size_t> WeightRowBytes(uint32_t ggml_type, size_t n) {
  KVTIER_ASSIGN_OR_RETURN(const WeightTypeTraits* t, weights::Traits(ggml_type));
  if (n == 0 || n % t->block_values != 0) {
    return Status::InvalidArgument("a row of " + std::to_string(n) + " values cannot be stored as " +
                                   std::string(t->name) + ": expected a positive multiple of its block size " +
                                   std::to_string(t->block_values));
  }
  return n / t->block_values * t->block_bytes;
}

static Status Dequant(uint32_t ggml_type, const uint8_t* src, size_t n_rows, size_t n, float* dst,
                      bool simd) {
  KVTIER_ASSIGN_OR_RETURN(const size_t row_bytes, WeightRowBytes(ggml_type, n));
  const WeightTypeTraits* t = weights::FindWeightType(ggml_type);
  if (t->decoder == Decoder::kQuantFormat) {
    const Format f = weights::QuantFormatOf(t->type);
    return simd ? DequantizeRows(f, src, n_rows, n, DType::kF32, dst)
                : DequantizeRowsRef(f, src, n_rows, n, DType::kF32, dst);
  }
  const size_t nb = n / t->block_values;
  for (size_t r = 0; r < n_rows; ++r) {
    if (simd) {
      weights::DequantBlocks(ggml_type, src + r * row_bytes, nb, dst + r * n);
    } else {
      weights::DequantBlocksRef(ggml_type, src + r * row_bytes, nb, dst + r * n);
    }
  }
  return Status::OK();
}

Status DequantizeWeightRows(uint32_t ggml_type, const uint8_t* src, size_t n_rows, size_t n,
                            float* dst) {
  return Dequant(ggml_type, src, n_rows, n, dst, true);
}

Status DequantizeWeightRowsRef(uint32_t ggml_type, const uint8_t* src, size_t n_rows, size_t n,
                               float* dst) {
  return Dequant(ggml_type, src, n_rows, n, dst, false);
}

Status QuantizeWeightRows(uint32_t ggml_type, const float* src, size_t n_rows, size_t n,
                          uint8_t* dst) {
  KVTIER_ASSIGN_OR_RETURN(const size_t row_bytes, WeightRowBytes(ggml_type, n));
  const WeightTypeTraits* t = weights::FindWeightType(ggml_type);
  for (size_t i = 0; i < n_rows * n; ++i) {
    if (!std::isfinite(src[i])) {
      return Status::InvalidArgument("cannot quantize to " + std::string(t->name) +
                                     ": value " + std::to_string(i % n) + " of row " +
                                     std::to_string(i / n) + " is " + std::to_string(src[i]));
    }
  }
  if (t->decoder == Decoder::kQuantFormat) {
    return QuantizeRows(weights::QuantFormatOf(t->type), DType::kF32, src, n_rows, n, dst);
  }
  const size_t nb = n / t->block_values;
  for (size_t r = 0; r < n_rows; ++r) {
    KVTIER_RETURN_IF_ERROR(weights::QuantizeBlocks(ggml_type, src + r * n, nb, dst + r * row_bytes));
  }
  return Status::OK();
}

}  // namespace kvtier
