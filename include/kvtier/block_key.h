// Block keys: content addresses of KV blocks that every tier (RAM prefix cache, SSD, a remote
// store) can use to find the same block, on every run and every machine.
//
// A chain starts at a namespace key: the model fingerprint (architecture, shapes, weights),
// the KV shape, the K and V formats and the block size. Each block's key is the XXH3-128 hash
// of its parent's key and the block's token ids, so a key names a block's tokens *and* every
// token before them. The bytes hashed are spelled out below (all little-endian) and never
// change: keys are stored in files.
//
// Plain values and pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kvtier/format.h"
#include "kvtier/kv_types.h"

namespace kvtier {

struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;

  bool operator==(const Hash128&) const = default;
  bool is_zero() const { return lo == 0 && hi == 0; }
  // 32 hex digits, hi then lo.
  std::string ToHex() const;
};

struct Hash128Hasher {
  size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.lo ^ (h.hi >> 1)); }
};

// Identity of a model's weights and every hyper-parameter that shapes its KV cache
// (Model::fingerprint()). Two models with equal fingerprints produce the same K/V.
using ModelFingerprint = Hash128;
using BlockKey = Hash128;

// XXH3-128 of: "kvtier-ns-v1" (12 bytes), model.lo, model.hi (u64 each), n_layers,
// n_kv_heads, head_dim, k_format.id(), v_format.id(), block_tokens (u32 each).
BlockKey NamespaceKey(const ModelFingerprint& model, const KvShape& shape, const Format& k_format,
                      const Format& v_format, uint32_t block_tokens);

// XXH3-128 of: parent.lo, parent.hi (u64 each), then each token id as u32.
// A block of fewer than block_tokens tokens (a sequence's tail) hashes just those tokens.
BlockKey ChainBlockKey(const BlockKey& parent, std::span<const int32_t> tokens);

// Incremental XXH3-128 over a stream of bytes (model fingerprints). Move-only; one thread at a
// time.
class Hasher128 {
 public:
  Hasher128();
  ~Hasher128();
  Hasher128(const Hasher128&) = delete;
  Hasher128& operator=(const Hasher128&) = delete;
  void Update(const void* data, size_t n);
  void U32(uint32_t v);  // little-endian
  void U64(uint64_t v);  // little-endian
  Hash128 Digest() const;

 private:
  void* state_;  // XXH3_state_t
};

}  // namespace kvtier
