// Module kv (src/kv, kvtier_kv; order and include rule: docs/architecture.md) owns the paged KV
// cache (block pool, sequence and batch caches, the paged view, conversion, blobs, block keys).
//
// Shared vocabulary of the KV cache: the model's KV shape, block ids, reference owners.
// Plain values; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/format.h"
#include "kvtier/status.h"

namespace kvtier {

// Index of a block in its BlockPool. int32 so that block tables are what GPU kernels take too.
using BlockId = int32_t;

// The KV geometry of one model: every layer stores n_kv_heads rows of head_dim values per
// token, for K and for V.
struct KvShape {
  uint32_t n_layers = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;

  // OK if all are > 0 and small enough that a token's K/V of one layer fits 2^31 bytes.
  Status Validate() const;
  // "28 layers x 8 KV heads x head_dim 128".
  std::string ToString() const;
  bool operator==(const KvShape&) const = default;
};

// Bytes one token occupies in a cache of `shape` with these formats (K + V, every layer,
// every KV head; no block padding). Qwen3-0.6B (28 x 8 x 128): f16 114,688; q4_0 32,256.
// Precondition: both formats accept shape.head_dim.
uint64_t KvBytesPerToken(const KvShape& shape, const Format& k_format, const Format& v_format);

// Who holds a reference to a block, for memory accounting. Values appear in metrics.
enum class KvOwner : uint8_t {
  kActive = 0,       // sequences of running requests
  kPrefixCache = 1,  // the RAM prefix cache
  kTier = 2,         // in flight to or from a lower tier (SSD, remote)
  kOther = 3,        // tests, tools
};
inline constexpr int kNumKvOwners = 4;
std::string_view KvOwnerName(KvOwner owner);  // "active", "prefix_cache", "tier", "other"

}  // namespace kvtier
