// Public chan entry points (kvtier/quant_chan.h): argument validation, then the SIMD
// dispatcher or the scalar reference, one KV head at a time. Stateless; thread-safe.
#include "kvtier/quant_chan.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "quant/chan.h"
#include "quant/chan_simd.h"

namespace kvtier {
namespace {

Status CheckChan(const char* fn, const Format& fmt, DType dtype, const void* src, size_t n_tokens,
                 size_t n_heads, size_t head_dim, const void* dst) {
  KVTIER_RETURN_IF_ERROR(fmt.CheckHeadDim(head_dim));
  if (!fmt.is_token_grouped()) {
    return Status::InvalidArgument(std::string(fn) + ": format " + fmt.name() +
                                   " is not token-grouped: use QuantizeRows / DequantizeRows");
  }
  if (head_dim > kChanMaxHeadDim) {
    return Status::InvalidArgument(std::string(fn) + ": head_dim " + std::to_string(head_dim) +
                                   " too large for " + fmt.name() + ": at most " +
                                   std::to_string(kChanMaxHeadDim));
  }
  if (static_cast<uint8_t>(dtype) > static_cast<uint8_t>(DType::kBF16)) {
    return Status::InvalidArgument(std::string(fn) + ": dtype " +
                                   std::to_string(static_cast<int>(dtype)) +
                                   " invalid: expected f32, f16 or bf16");
  }
  if (n_heads == 0) return Status::InvalidArgument(std::string(fn) + ": n_heads must be positive");
  if (n_tokens > 0 && (src == nullptr || dst == nullptr)) {
    return Status::InvalidArgument(std::string(fn) + ": null " + (src ? "dst" : "src") +
                                   " buffer for " + std::to_string(n_tokens) + " tokens");
  }
  return Status::OK();
}

template <typename Quant>
Status QuantizeImpl(const char* fn, Quant quant, const Format& fmt, DType src_dtype,
                    const void* src, size_t n_tokens, size_t n_heads, size_t head_dim,
                    void* rows) {
  KVTIER_RETURN_IF_ERROR(CheckChan(fn, fmt, src_dtype, src, n_tokens, n_heads, head_dim, rows));
  const size_t R = fmt.row_bytes(head_dim), G = fmt.group;
  const size_t src_ts = n_heads * head_dim;  // elements per source token
  const size_t es = DTypeSize(src_dtype);
  auto* out = static_cast<uint8_t*>(rows);
  for (size_t g0 = 0; g0 < n_tokens; g0 += G) {
    const size_t n = std::min(G, n_tokens - g0);
    for (size_t h = 0; h < n_heads; ++h) {
      quant(fmt, src_dtype, static_cast<const uint8_t*>(src) + (g0 * src_ts + h * head_dim) * es,
            src_ts, n, head_dim, out + g0 * n_heads * R + h * R, n_heads * R);
    }
  }
  return Status::OK();
}

template <typename Dequant>
Status DequantizeImpl(const char* fn, Dequant dequant, const Format& fmt, const void* rows,
                      size_t first, size_t n_tokens, size_t n_heads, size_t head_dim,
                      DType dst_dtype, void* dst) {
  KVTIER_RETURN_IF_ERROR(CheckChan(fn, fmt, dst_dtype, rows, n_tokens, n_heads, head_dim, dst));
  const size_t R = fmt.row_bytes(head_dim);
  for (size_t h = 0; h < n_heads; ++h) {
    dequant(fmt, static_cast<const uint8_t*>(rows) + h * R, n_heads * R, first, n_tokens, head_dim,
            dst_dtype, static_cast<uint8_t*>(dst) + h * head_dim * DTypeSize(dst_dtype),
            n_heads * head_dim);
  }
  return Status::OK();
}

}  // namespace

Status QuantizeChanGroups(const Format& fmt, DType src_dtype, const void* src, size_t n_tokens,
                          size_t n_heads, size_t head_dim, void* rows) {
  return QuantizeImpl("QuantizeChanGroups", simd::QuantizeChanHead, fmt, src_dtype, src,
                      n_tokens, n_heads, head_dim, rows);
}
Status QuantizeChanGroupsRef(const Format& fmt, DType src_dtype, const void* src,
                             size_t n_tokens, size_t n_heads, size_t head_dim, void* rows) {
  return QuantizeImpl("QuantizeChanGroupsRef", ref::QuantizeChanHead, fmt, src_dtype, src,
                      n_tokens, n_heads, head_dim, rows);
}
Status DequantizeChanRows(const Format& fmt, const void* rows, size_t first, size_t n_tokens,
                          size_t n_heads, size_t head_dim, DType dst_dtype, void* dst) {
  return DequantizeImpl("DequantizeChanRows", simd::DequantizeChanHead, fmt, rows, first,
                        n_tokens, n_heads, head_dim, dst_dtype, dst);
}
Status DequantizeChanRowsRef(const Format& fmt, const void* rows, size_t first, size_t n_tokens,
                             size_t n_heads, size_t head_dim, DType dst_dtype, void* dst) {
  return DequantizeImpl("DequantizeChanRowsRef", ref::DequantizeChanHead, fmt, rows, first,
                        n_tokens, n_heads, head_dim, dst_dtype, dst);
}

}  // namespace kvtier
