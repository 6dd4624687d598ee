// Public quantize / dequantize entry points: argument validation, then the SIMD dispatcher
// or the scalar reference. Stateless apart from Highway's chosen-target cache; thread-safe.
#include "kvtier/quant.h"

#include <string>

#include "hwy/targets.h"
#include "quant/quant_ref.h"
#include "quant/quant_simd.h"

namespace kvtier {
namespace {

Status CheckArgs(const char* fn, const Format& fmt, DType dtype, const void* src, size_t n_rows,
                 size_t head_dim, const void* dst) {
  KVTIER_RETURN_IF_ERROR(fmt.CheckHeadDim(head_dim));
  if (fmt.is_token_grouped()) {
    return Status::InvalidArgument(std::string(fn) + ": format " + fmt.name() +
                                   " groups K across tokens, not row by row: use "
                                   "QuantizeChanGroups / DequantizeChanRows (kvtier/quant_chan.h)");
  }
  if (static_cast<uint8_t>(dtype) > static_cast<uint8_t>(DType::kBF16)) {
    return Status::InvalidArgument(std::string(fn) + ": dtype " +
                                   std::to_string(static_cast<int>(dtype)) +
                                   " invalid: expected f32, f16 or bf16");
  }
  if (n_rows > 0 && (src == nullptr || dst == nullptr)) {
    return Status::InvalidArgument(std::string(fn) + ": null " + (src ? "dst" : "src") +
                                   " buffer for " + std::to_string(n_rows) + " rows");
  }
  return Status::OK();
}

}  // namespace

Status QuantizeRowsRef(const Format& fmt, DType src_dtype, const void* src, size_t n_rows,
                       size_t head_dim, void* dst) {
  KVTIER_RETURN_IF_ERROR(CheckArgs("QuantizeRowsRef", fmt, src_dtype, src, n_rows, head_dim, dst));
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
  KVTIER_RETURN_IF_ERROR(
      CheckArgs("DequantizeRowsRef", fmt, dst_dtype, src, n_rows, head_dim, dst));
  const size_t dst_row = head_dim * DTypeSize(dst_dtype);
  const size_t row_bytes = fmt.row_bytes(head_dim);
  for (size_t r = 0; r < n_rows; ++r) {
    ref::DequantizeRow(fmt, static_cast<const uint8_t*>(src) + r * row_bytes, head_dim,
                       dst_dtype, static_cast<uint8_t*>(dst) + r * dst_row);
  }
  return Status::OK();
}

Status QuantizeRows(const Format& fmt, DType src_dtype, const void* src, size_t n_rows,
                    size_t head_dim, void* dst) {
  KVTIER_RETURN_IF_ERROR(CheckArgs("QuantizeRows", fmt, src_dtype, src, n_rows, head_dim, dst));
  if (n_rows == 0) return Status::OK();
  if (!simd::QuantizeRows(fmt, src_dtype, src, n_rows, head_dim, static_cast<uint8_t*>(dst))) {
    return Status::Internal("QuantizeRows: no kernel for format " + fmt.spec());
  }
  return Status::OK();
}

Status DequantizeRows(const Format& fmt, const void* src, size_t n_rows, size_t head_dim,
                      DType dst_dtype, void* dst) {
  KVTIER_RETURN_IF_ERROR(CheckArgs("DequantizeRows", fmt, dst_dtype, src, n_rows, head_dim, dst));
  if (n_rows == 0) return Status::OK();
  if (!simd::DequantizeRows(fmt, static_cast<const uint8_t*>(src), n_rows, head_dim, dst_dtype,
                            dst)) {
    return Status::Internal("DequantizeRows: no kernel for format " + fmt.spec());
  }
  return Status::OK();
}

std::string QuantSimdTargetName() {
  if (!simd::ChosenTargetIsVector()) return "scalar";
  for (long long t : QuantAvailableSimdTargets()) return hwy::TargetName(t);  // best first
  return "scalar";
}

std::vector<long long> QuantAvailableSimdTargets() {
  std::vector<long long> out;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) out.push_back(t);
  return out;
}

bool QuantForceSimdTarget(long long target_bit) {
  hwy::SetSupportedTargetsForTest(0);
  if (target_bit != 0) {
    if ((hwy::SupportedTargets() & target_bit) == 0) return false;
    hwy::SetSupportedTargetsForTest(target_bit);
  }
  // HWY_DYNAMIC_DISPATCH caches its choice: make it choose again.
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  return true;
}

}  // namespace kvtier
