// Float64 reference attention over a PagedKvView: K and V rows dequantized with the scalar
// reference of src/quant, scores, softmax and the weighted sum in double. Slow and simple; the
// oracle for the kernels' tests and for bench-attention's accuracy column. Thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/attention.h"

namespace kvtier::ref {

// Same contract as kvtier::Attention; out is [total_q, n_heads, head_dim] double.
Status Attention(const PagedKvView& kv, const float* q, std::span<const uint32_t> q_lens,
                 const AttentionParams& params, std::vector<double>* out);

}  // namespace kvtier::ref
