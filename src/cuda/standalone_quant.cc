// The scalar entry points of kvtier/quant.h for the standalone CUDA build only (src/cuda built
// on its own, without Highway): QuantizeRowsRef / DequantizeRowsRef as src/quant/quant.cc
// defines them, over the same scalar reference (quant_ref.cc). The top-level build links the
// real kvtier_quant instead and never compiles this file.
#include <string>

#include "kvtier/quant.h"
#include "quant/quant_ref.h"

namespace kvtier {
namespace {

Status CheckArgs(const char* fn, const Format& fmt, DType dtype, const void* src, size_t n_rows,
                 const void* dst, size_t head_dim) {
  KVTIER_RETURN_IF_ERROR(fmt.CheckHeadDim(head_dim));
  if (static_cast<uint8_t>(dtype) > static_cast<uint8_t>(DType::kBF16)) {
    return Status::InvalidArgument(std::string(fn) + ": invalid dtype");
  }
  if (n_rows > 0 && (src == nullptr || dst == nullptr)) {
    return Status::InvalidArgument(std::string(fn) + ": null buffer");
  }
  return Status::OK();
}

}  // namespace

Status QuantizeRowsRef(const Format& fmt, DType src_dtype, const void* src, size_t n_rows,
                       size_t head_dim, void* dst) {
  KVTIER_RETURN_IF_ERROR(CheckArgs("QuantizeRowsRef", fmt, src_dtype, src, n_rows, dst, head_dim));
  const size_t src_row = head_dim * DTypeSize(src_dtype);
  const size_t row_bytes = fmt.row_bytes(head_dim);
  for (size_t r = 0; r < n_rows; ++r) {
    ref::QuantizeRow(fmt, src_dtype, static_cast<const uint8_t*>(src) + r * src_row, head_dim,
                     static_cast<uint8_t*>(dst) + r * row_bytes);
  }
  return Status::OK();
}

Status DequantizeRowsRef(const Format& fmt, const void* src, size_t n_rows, size_t head_dim,
                         DType dst_dtype, void* dst) {
  KVTIER_RETURN_IF_ERROR(CheckArgs("DequantizeRowsRef", fmt, dst_dtype, src, n_rows, dst, head_dim));
  const size_t dst_row = head_dim * DTypeSize(dst_dtype);
  const size_t row_bytes = fmt.row_bytes(head_dim);
  for (size_t r = 0; r < n_rows; ++r) {
    ref::DequantizeRow(fmt, static_cast<const uint8_t*>(src) + r * row_bytes, head_dim,
                       dst_dtype, static_cast<uint8_t*>(dst) + r * dst_row);
  }
  return Status::OK();
}

}  // namespace kvtier
