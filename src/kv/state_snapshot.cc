// Recurrent-state snapshots (kvtier/state_snapshot.h): the encoded form and the keys. Pure
// functions; thread-safe.
#include "kvtier/state_snapshot.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "base/crc32c.h"
#include "base/half.h"
#include "base/le_bytes.h"

namespace kvtier {

std::string_view StateTypeName(StateType t) { return t == StateType::kBF16 ? "bf16" : "f32"; }

Result<StateType> ParseStateType(std::string_view name) {
  if (name == "f32") return StateType::kF32;
  if (name == "bf16") return StateType::kBF16;
  return Status::InvalidArgument("state type '" + std::string(name) +
                                 "': expected f32 or bf16");
}

StateSnapshot ConvertStateSnapshot(const StateSnapshot& s, StateType type) {
  StateSnapshot out;
  out.format = s.format;
  out.position = s.position;
  out.sizes = s.sizes;
  out.type = type;
  if (type == s.type) {
    out.data = s.data;
    out.bf16 = s.bf16;
  } else if (type == StateType::kBF16) {
    out.bf16.resize(s.data.size());
    for (size_t i = 0; i < s.data.size(); ++i) out.bf16[i] = F32ToBF16(s.data[i]);
  } else {
    out.data.resize(s.bf16.size());
    for (size_t i = 0; i < s.bf16.size(); ++i) out.data[i] = BF16ToF32(s.bf16[i]);
  }
  return out;
}

std::vector<uint8_t> EncodeStateSnapshot(const StateSnapshot& s) {
  std::vector<uint8_t> out(s.bytes(), 0);
  uint8_t* h = out.data();
  const bool f32 = s.type == StateType::kF32;
  const uint64_t payload = s.bytes() - kStateSnapshotHeaderBytes;
  PutLe32(h + 0, kStateSnapshotMagic);
  PutLe32(h + 4, f32 ? 1 : 2);  // f32 keeps version 1's bytes
  PutLe32(h + 8, s.format);
  PutLe32(h + 12, s.position);
  PutLe32(h + 16, static_cast<uint32_t>(s.sizes.size()));
  PutLe32(h + 20, static_cast<uint32_t>(s.type));
  PutLe64(h + 24, payload);
  uint8_t* p = h + kStateSnapshotHeaderBytes;
  for (size_t i = 0; i < s.sizes.size(); ++i) PutLe32(p + 4 * i, s.sizes[i]);
  uint8_t* d = p + 4 * s.sizes.size();
  if (f32) {
    for (size_t i = 0; i < s.data.size(); ++i) PutLe32(d + 4 * i, F32Bits(s.data[i]));
  } else {
    for (size_t i = 0; i < s.bf16.size(); ++i) {
      d[2 * i] = static_cast<uint8_t>(s.bf16[i]);
      d[2 * i + 1] = static_cast<uint8_t>(s.bf16[i] >> 8);
    }
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
  const uint32_t version = GetLe32(h + 4);
  if (version > kStateSnapshotVersion) {
    return Status::Unimplemented(w + ": state snapshot version " + std::to_string(version) +
                                 ", this build reads 1 to " +
                                 std::to_string(kStateSnapshotVersion));
  }
  if (version == 0) return bad("version (offset 4)", "1 or 2", "0");
  StateSnapshot s;
  s.format = GetLe32(h + 8);
  s.position = GetLe32(h + 12);
  const uint32_t n = GetLe32(h + 16);
  const uint32_t type = GetLe32(h + 20);
  const uint32_t want_type = version == 1 ? 0 : 1;
  if (type != want_type) {
    return bad("value type (offset 20)", std::to_string(want_type) + " in version " +
               std::to_string(version), std::to_string(type));
  }
  s.type = static_cast<StateType>(type);
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
  const uint64_t value_bytes = s.type == StateType::kF32 ? 4 * total : (2 * total + 3) / 4 * 4;
  if (4ull * n + value_bytes != payload) {
    return bad("tensor sizes", "values filling " + std::to_string(payload - 4ull * n) + " bytes",
               std::to_string(total) + " values");
  }
  if (s.format == 0 || s.position == 0) {
    return bad("format / position", "both > 0",
               std::to_string(s.format) + " / " + std::to_string(s.position));
  }
  const uint8_t* d = p + 4 * n;
  if (s.type == StateType::kF32) {
    s.data.resize(total);
    for (uint64_t i = 0; i < total; ++i) s.data[i] = F32FromBits(GetLe32(d + 4 * i));
  } else {
    s.bf16.resize(total);
    for (uint64_t i = 0; i < total; ++i) {
      s.bf16[i] = static_cast<uint16_t>(d[2 * i] | (d[2 * i + 1] << 8));
    }
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
