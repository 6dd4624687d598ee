// Attention argument validation (see attention_check.h).
#include "kernels/attention_check.h"

#include <cmath>
#include <string>

namespace kvtier {

Status CheckAttentionArgs(const PagedKvView& kv, const float* q, std::span<const uint32_t> q_lens,
                          const AttentionParams& p, const void* out) {
  const std::string w = "attention: ";
  if (q_lens.size() != kv.n_rows) {
    return Status::InvalidArgument(w + "q_lens has " + std::to_string(q_lens.size()) +
                                   " entries for a view of " + std::to_string(kv.n_rows) + " rows");
  }
  if (kv.n_rows > 0 && kv.rows == nullptr) return Status::InvalidArgument(w + "view rows are null");
  if (kv.n_kv_heads == 0 || kv.head_dim == 0 || kv.block_tokens == 0) {
    return Status::InvalidArgument(w + "view has n_kv_heads " + std::to_string(kv.n_kv_heads) +
                                   ", head_dim " + std::to_string(kv.head_dim) +
                                   ", block_tokens " + std::to_string(kv.block_tokens) +
                                   ": all must be > 0");
  }
  if (p.n_heads == 0 || p.n_heads % kv.n_kv_heads != 0) {
    return Status::InvalidArgument(w + "n_heads " + std::to_string(p.n_heads) +
                                   " must be a positive multiple of the " +
                                   std::to_string(kv.n_kv_heads) + " KV heads");
  }
  if (Status s = kv.k_format.Validate(); !s.ok()) return Status::InvalidArgument(w + "K format: " + s.message());
  if (Status s = kv.v_format.Validate(); !s.ok()) return Status::InvalidArgument(w + "V format: " + s.message());
  if (Status s = kv.k_format.CheckHeadDim(kv.head_dim); !s.ok()) {
    return Status::InvalidArgument(w + "K format: " + s.message());
  }
  if (Status s = kv.v_format.CheckHeadDim(kv.head_dim); !s.ok()) {
    return Status::InvalidArgument(w + "V format: " + s.message());
  }
  if (kv.v_format.is_token_grouped() ||
      (kv.k_format.is_token_grouped() && kv.block_tokens % kv.k_format.group != 0)) {
    return Status::InvalidArgument(w + "K " + kv.k_format.name() + " / V " + kv.v_format.name() +
                                   " with blocks of " + std::to_string(kv.block_tokens) +
                                   " tokens: token-grouped formats are K only, in blocks of "
                                   "whole groups");
  }
  if (!(p.scale >= 0) || !std::isfinite(p.scale) || !(p.softcap >= 0) || !std::isfinite(p.softcap)) {
    return Status::InvalidArgument(w + "scale " + std::to_string(p.scale) + " and softcap " +
                                   std::to_string(p.softcap) + " must be finite and >= 0");
  }
  if (static_cast<uint8_t>(p.out_dtype) > static_cast<uint8_t>(DType::kBF16)) {
    return Status::InvalidArgument(w + "out_dtype " + std::to_string(static_cast<int>(p.out_dtype)) +
                                   " invalid: expected f32, f16 or bf16");
  }
  uint64_t total_q = 0;
  for (uint32_t r = 0; r < kv.n_rows; ++r) {
    const PagedKvRow& row = kv.rows[r];
    if (q_lens[r] > row.length) {
      return Status::InvalidArgument(w + "row " + std::to_string(r) + " has " +
                                     std::to_string(q_lens[r]) + " queries but only " +
                                     std::to_string(row.length) +
                                     " tokens (the queries' own K/V must be appended first)");
    }
    const uint64_t need = (static_cast<uint64_t>(row.length) + kv.block_tokens - 1) / kv.block_tokens;
    if (row.n_blocks < need || (need > 0 && row.block_table == nullptr)) {
      return Status::InvalidArgument(w + "row " + std::to_string(r) + " has " +
                                     std::to_string(row.length) + " tokens but a block table of " +
                                     std::to_string(row.n_blocks) + " blocks (needs " +
                                     std::to_string(need) + ")");
    }
    total_q += q_lens[r];
  }
  if (total_q > 0 && (q == nullptr || out == nullptr)) {
    return Status::InvalidArgument(w + std::string("null ") + (q ? "output" : "query") +
                                   " buffer for " + std::to_string(total_q) + " queries");
  }
  return Status::OK();
}

}  // namespace kvtier
