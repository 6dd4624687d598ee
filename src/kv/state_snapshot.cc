// Recurrent-state snapshots (kvtier/state_snapshot.h): the encoded form and the keys. Pure
// functions; thread-safe.
#include "kvtier/state_snapshot.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "base/crc32c.h"
#include "base/le_bytes.h"

namespace kvtier {

std::vector<uint8_t> EncodeStateSnapshot(const StateSnapshot& s) {
  std::vector<uint8_t> out(s.bytes());
  uint8_t* h = out.data();
  const uint64_t payload = 4 * (s.sizes.size() + s.data.size());
  PutLe32(h + 0, kStateSnapshotMagic);
  PutLe32(h + 4, kStateSnapshotVersion);
  PutLe32(h + 8, s.format);
  PutLe32(h + 12, s.position);
  PutLe32(h + 16, static_cast<uint32_t>(s.sizes.size()));
  PutLe32(h + 20, 0);
  PutLe64(h + 24, payload);
  uint8_t* p = h + kStateSnapshotHeaderBytes;
  for (size_t i = 0; i < s.sizes.size(); ++i) PutLe32(p + 4 * i, s.sizes[i]);
  uint8_t* d = p + 4 * s.sizes.size();
  for (size_t i = 0; i < s.data.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &s.data[i], 4);
    PutLe32(d + 4 * i, bits);
  }
  PutLe32(h + 32, Crc32c({p, payload}));
  PutLe32(h + 36, Crc32c({h, 36}));
  return out;
}

Result<StateSnapshot> DecodeStateSnapshot(std::span<const uint8_t> b, std::string_view what) {
  const std::string w(what);
  auto bad = [&](const std::string& field, const std::string& expected, const std::string& got) {
    return Status::Corruption(w + ": state snapshot " + field + ": expected " + expected +
                              ", got " + got);
  };
  if (b.size() < kStateSnapshotHeaderBytes) {
    return bad("size", "at least " + std::to_string(kStateSnapshotHeaderBytes) + " bytes",
               std::to_string(b.size()));
  }
  const uint8_t* h = b.data();
  if (GetLe32(h) != kStateSnapshotMagic) {
    return bad("magic (offset 0)", "0x5453564B", std::to_string(GetLe32(h)));
  }
  if (Crc32c({h, 36}) != GetLe32(h + 36)) {
    return bad("header CRC (offset 36)", std::to_string(Crc32c({h, 36})),
               std::to_string(GetLe32(h + 36)));
  }
  if (GetLe32(h + 4) != kStateSnapshotVersion) {
    return bad("version (offset 4)", std::to_string(kStateSnapshotVersion),
               std::to_string(GetLe32(h + 4)));
  }
  StateSnapshot s;
  s.format = GetLe32(h + 8);
  s.position = GetLe32(h + 12);
  const uint32_t n = GetLe32(h + 16);
  const uint64_t payload = GetLe64(h + 24);
  if (payload != b.size() - kStateSnapshotHeaderBytes || payload < 4ull * n || payload % 4 != 0) {
    return bad("payload_bytes (offset 24)",
               std::to_string(b.size() - kStateSnapshotHeaderBytes) + " (the rest of the record)",
               std::to_string(payload));
  }
  const uint8_t* p = h + kStateSnapshotHeaderBytes;
  if (Crc32c({p, payload}) != GetLe32(h + 32)) {
    return bad("payload CRC (offset 32)", std::to_string(GetLe32(h + 32)),
               std::to_string(Crc32c({p, payload})));
  }
  uint64_t total = 0;
  s.sizes.resize(n);
  for (uint32_t i = 0; i < n; ++i) total += (s.sizes[i] = GetLe32(p + 4 * i));
  if (4 * (n + total) != payload) {
    return bad("tensor sizes", std::to_string(payload / 4 - n) + " values in all",
               std::to_string(total));
  }
  if (s.format == 0 || s.position == 0) {
    return bad("format / position", "both > 0",
               std::to_string(s.format) + " / " + std::to_string(s.position));
  }
  s.data.resize(total);
  const uint8_t* d = p + 4 * n;
  for (uint64_t i = 0; i < total; ++i) {
    const uint32_t bits = GetLe32(d + 4 * i);
    std::memcpy(&s.data[i], &bits, 4);
  }
  return s;
}

namespace {

void StartKey(Hasher128& h, const ModelFingerprint& model) {
  h.Update("kvtier-st-v1", 12);
  h.U64(model.lo);
  h.U64(model.hi);
}

}  // namespace

BlockKey StateSnapshotKey(const ModelFingerprint& model, std::span<const int32_t> tokens) {
  Hasher128 h;
  StartKey(h, model);
  for (int32_t t : tokens) h.U32(static_cast<uint32_t>(t));
  return h.Digest();
}

std::vector<BlockKey> StateSnapshotKeys(const ModelFingerprint& model,
                                        std::span<const int32_t> tokens,
                                        std::span<const uint32_t> positions) {
  std::vector<BlockKey> out;
  out.reserve(positions.size());
  Hasher128 h;
  StartKey(h, model);
  size_t at = 0;
  for (uint32_t p : positions) {
    const size_t end = std::min<size_t>(p, tokens.size());
    for (; at < end; ++at) h.U32(static_cast<uint32_t>(tokens[at]));
    out.push_back(h.Digest());
  }
  return out;
}

}  // namespace kvtier
