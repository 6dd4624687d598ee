// Argument validation shared by the attention kernels and the reference: every error names
// the field, what was expected and what was given. Stateless; thread-safe.
#pragma once

#include <span>

#include "kvtier/attention.h"

namespace kvtier {

Status CheckAttentionArgs(const PagedKvView& kv, const float* q, std::span<const uint32_t> q_lens,
                          const AttentionParams& params, const void* out);

}  // namespace kvtier
