// KvShape validation, bytes per token, owner names. Pure functions; thread-safe.
#include "kvtier/kv_types.h"

#include <string>

namespace kvtier {

Status KvShape::Validate() const {
  if (n_layers == 0 || n_kv_heads == 0 || head_dim == 0) {
    return Status::InvalidArgument("KV shape " + ToString() +
                                   ": layers, KV heads and head_dim must all be > 0");
  }
  constexpr uint64_t kLimit = 1ull << 31;
  if (n_layers > 65536 || static_cast<uint64_t>(n_kv_heads) * head_dim * 4 > kLimit / 64) {
    return Status::InvalidArgument("KV shape " + ToString() + " is too large (at most 65536 " +
                                   "layers and 2^23 values per token and layer)");
  }
  return Status::OK();
}

std::string KvShape::ToString() const {
  return std::to_string(n_layers) + " layers x " + std::to_string(n_kv_heads) +
         " KV heads x head_dim " + std::to_string(head_dim);
}

uint64_t KvBytesPerToken(const KvShape& shape, const Format& k_format, const Format& v_format) {
  return static_cast<uint64_t>(shape.n_layers) * shape.n_kv_heads *
         (k_format.row_bytes(shape.head_dim) + v_format.row_bytes(shape.head_dim));
}

std::string_view KvOwnerName(KvOwner owner) {
  switch (owner) {
    case KvOwner::kActive:
      return "active";
    case KvOwner::kPrefixCache:
      return "prefix_cache";
    case KvOwner::kTier:
      return "tier";
    case KvOwner::kOther:
      return "other";
  }
  return "unknown";
}

}  // namespace kvtier
