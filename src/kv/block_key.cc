// Block keys (kvtier/block_key.h): XXH3-128 over explicitly little-endian bytes. Pure
// functions; thread-safe.
#include "kvtier/block_key.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "base/le_bytes.h"

namespace kvtier {
namespace {

class ByteWriter {
 public:
  void U32(uint32_t v) {
    uint8_t b[4];
    PutLe32(b, v);
    bytes_.insert(bytes_.end(), b, b + 4);
  }
  void U64(uint64_t v) {
    uint8_t b[8];
    PutLe64(b, v);
    bytes_.insert(bytes_.end(), b, b + 8);
  }
  void Raw(const char* s, size_t n) { bytes_.insert(bytes_.end(), s, s + n); }
  void Reserve(size_t n) { bytes_.reserve(n); }
  Hash128 Hash() const {
    const XXH128_hash_t h = XXH3_128bits(bytes_.data(), bytes_.size());
    return {h.low64, h.high64};
  }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace

std::string Hash128::ToHex() const {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

Hasher128::Hasher128() : state_(XXH3_createState()) {
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}
Hasher128::~Hasher128() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Hasher128::Update(const void* data, size_t n) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, n);
}
void Hasher128::U32(uint32_t v) {
  uint8_t b[4];
  PutLe32(b, v);
  Update(b, 4);
}
void Hasher128::U64(uint64_t v) {
  uint8_t b[8];
  PutLe64(b, v);
  Update(b, 8);
}
Hash128 Hasher128::Digest() const {
  const XXH128_hash_t h = XXH3_128bits_digest(static_cast<const XXH3_state_t*>(state_));
  return {h.low64, h.high64};
}

BlockKey NamespaceKey(const ModelFingerprint& model, const KvShape& shape, const Format& k_format,
                      const Format& v_format, uint32_t block_tokens) {
  ByteWriter w;
  w.Raw("kvtier-ns-v1", 12);
  w.U64(model.lo);
  w.U64(model.hi);
  w.U32(shape.n_layers);
  w.U32(shape.n_kv_heads);
  w.U32(shape.head_dim);
  w.U32(k_format.id());
  w.U32(v_format.id());
  w.U32(block_tokens);
  return w.Hash();
}

BlockKey ChainBlockKey(const BlockKey& parent, std::span<const int32_t> tokens) {
  ByteWriter w;
  w.Reserve(16 + 4 * tokens.size());
  w.U64(parent.lo);
  w.U64(parent.hi);
  for (int32_t t : tokens) w.U32(static_cast<uint32_t>(t));
  return w.Hash();
}

}  // namespace kvtier
