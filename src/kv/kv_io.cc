// Sequence conversion between pools and the sequence blob format (docs/formats/kv-sequence.md).
// Stateless; thread-safe for distinct sequences.
#include "kvtier/kv_io.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "base/strings.h"
#include "base/le_bytes.h"
#include "kvtier/quant.h"

namespace kvtier {
namespace {

constexpr uint32_t kChunkTokens = 64;  // conversion works in pieces of this many tokens

// Blob layout, version 1 (all integers little-endian).
constexpr uint8_t kMagic[8] = {'K', 'V', 'T', 'S', 'E', 'Q', 0x1A, '\n'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 56;
constexpr uint32_t kFlagTokens = 1;
constexpr size_t kChecksumBytes = 8;


// K rows to the end of the last group for token-grouped K (Format::stored_rows), then V rows.
uint64_t RowBytes(const KvBlockLayout& l, uint32_t n_tokens) {
  return static_cast<uint64_t>(l.shape.n_layers) *
         (l.k_format.stored_rows(0, n_tokens) * l.k_token_stride + n_tokens * l.v_token_stride);
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Result<SequenceCache> ConvertSequence(const SequenceCache& src, std::shared_ptr<BlockPool> dst,
                                      KvOwner owner) {
  if (!src.valid()) return Status::InvalidArgument("ConvertSequence: the source has no pool");
  if (!dst) return Status::InvalidArgument("ConvertSequence: no destination pool");
  if (!src.complete()) {
    return Status::InvalidArgument("ConvertSequence: the source is half way through a forward "
                                   "pass (layer sizes " + std::to_string(src.size()) + ".." +
                                   std::to_string(src.max_layer_size()) + ")");
  }
  const KvBlockLayout& sl = src.pool()->layout();
  const KvBlockLayout& dl = dst->layout();
  if (!(sl.shape == dl.shape)) {
    return Status::InvalidArgument("ConvertSequence: source KV shape " + sl.shape.ToString() +
                                   " differs from the destination pool's " + dl.shape.ToString());
  }
  if (src.pool() == dst) {
    SequenceCache s = src.Fork();
    KVTIER_RETURN_IF_ERROR(s.SetOwner(owner));
    return s;
  }
  SequenceCache out(dst, owner);
  KVTIER_RETURN_IF_ERROR(AppendConverted(out, src, 0, src.size()));
  return out;
}

Status AppendConverted(SequenceCache& dst, const SequenceCache& src, uint32_t first,
                       uint32_t n) {
  if (!src.valid() || !dst.valid()) {
    return Status::InvalidArgument("AppendConverted: the source or destination has no pool");
  }
  if (!dst.complete()) {
    return Status::InvalidArgument("AppendConverted: the destination is half way through a "
                                   "forward pass");
  }
  const KvBlockLayout& sl = src.pool()->layout();
  const KvBlockLayout& dl = dst.pool()->layout();
  if (!(sl.shape == dl.shape)) {
    return Status::InvalidArgument("AppendConverted: source KV shape " + sl.shape.ToString() +
                                   " differs from the destination's " + dl.shape.ToString());
  }
  if (first > src.size() || n > src.size() - first) {
    return Status::OutOfRange("AppendConverted: tokens [" + std::to_string(first) + ", " +
                              std::to_string(uint64_t{first} + n) + ") of a source of " +
                              std::to_string(src.size()));
  }
  if (n == 0) return Status::OK();
  KVTIER_RETURN_IF_ERROR(dst.Reserve(n));
  // Token-grouped K copies as rows only from group starts onto group starts (a group's
  // parameters sit in its rows); else it is requantized.
  const bool same = sl.k_format == dl.k_format && sl.v_format == dl.v_format &&
                    (!sl.k_format.is_token_grouped() ||
                     (dst.size() % sl.k_format.group == 0 && first % sl.k_format.group == 0));
  const size_t heads = sl.shape.n_kv_heads;
  const size_t d = sl.shape.head_dim;
  std::vector<uint8_t> kbuf, vbuf;
  if (same) {
    // Token-grouped K: up to the end of the last chunk's group.
    kbuf.resize((kChunkTokens + (sl.k_format.is_token_grouped() ? sl.k_format.group : 0)) *
                sl.k_token_stride);
    vbuf.resize(kChunkTokens * sl.v_token_stride);
  } else {
    kbuf.resize(kChunkTokens * heads * d * sizeof(float));  // [chunk, heads, head_dim] f32
    vbuf.resize(kbuf.size());
  }
  uint64_t copied = 0;
  for (uint32_t layer = 0; layer < sl.shape.n_layers; ++layer) {
    for (uint32_t t = first; t < first + n; t += kChunkTokens) {
      const uint32_t c = std::min(kChunkTokens, first + n - t);
      if (same) {
        KVTIER_RETURN_IF_ERROR(src.ReadEncoded(layer, t, c, kbuf.data(), vbuf.data()));
        KVTIER_RETURN_IF_ERROR(dst.AppendEncoded(layer, kbuf.data(), vbuf.data(), c));
        copied += c * (sl.k_token_stride + sl.v_token_stride);
      } else {
        KVTIER_RETURN_IF_ERROR(src.ReadDense(layer, t, c, DType::kF32, kbuf.data(), vbuf.data()));
        KVTIER_RETURN_IF_ERROR(dst.Append(layer, DType::kF32, kbuf.data(), vbuf.data(), c));
      }
    }
  }
  if (copied > 0) dst.pool()->CountCopied(copied);
  // A source block's "window rows absent" flag reaches every destination block its rows went
  // to (the rows copied are not the tokens' K/V there either).
  const uint32_t sbt = sl.block_tokens, dbt = dl.block_tokens;
  const uint64_t shift = uint64_t{dst.size()} - n - first;  // dst position - src position
  const std::span<const BlockId> sids = src.block_ids(), dids = dst.block_ids();
  for (uint32_t sb = first / sbt; uint64_t{sb} * sbt < uint64_t{first} + n; ++sb) {
    if (!src.pool()->WindowRowsAbsent(sids[sb])) continue;
    const uint64_t lo = std::max<uint64_t>(first, uint64_t{sb} * sbt) + shift;
    const uint64_t hi = std::min<uint64_t>(uint64_t{first} + n, uint64_t{sb + 1} * sbt) + shift;
    for (uint64_t db = lo / dbt; db * dbt < hi; ++db) {
      KVTIER_RETURN_IF_ERROR(dst.pool()->MarkWindowRowsAbsent(dids[db]));
    }
  }
  return Status::OK();
}

uint64_t SerializedSequenceBytes(const SequenceCache& seq, bool with_tokens) {
  if (!seq.valid()) return 0;
  return kHeaderBytes + (with_tokens ? seq.size() * uint64_t{4} : 0) +
         RowBytes(seq.pool()->layout(), seq.size()) + kChecksumBytes;
}

Result<std::vector<uint8_t>> SerializeSequence(const SequenceCache& seq,
                                               std::span<const int32_t> tokens) {
  if (!seq.valid()) return Status::InvalidArgument("SerializeSequence: the sequence has no pool");
  if (!seq.complete()) {
    return Status::InvalidArgument("SerializeSequence: the sequence is half way through a "
                                   "forward pass");
  }
  const uint32_t n = seq.size();
  if (!tokens.empty() && tokens.size() != n) {
    return Status::InvalidArgument("SerializeSequence: " + std::to_string(tokens.size()) +
                                   " tokens given for a sequence of " + std::to_string(n));
  }
  const KvBlockLayout& l = seq.pool()->layout();
  const bool with_tokens = !tokens.empty();
  std::vector<uint8_t> out(SerializedSequenceBytes(seq, with_tokens));
  uint8_t* h = out.data();
  std::memcpy(h, kMagic, sizeof kMagic);
  PutLe32(h + 8, kVersion);
  PutLe32(h + 12, kHeaderBytes);
  PutLe32(h + 16, l.shape.n_layers);
  PutLe32(h + 20, l.shape.n_kv_heads);
  PutLe32(h + 24, l.shape.head_dim);
  PutLe32(h + 28, l.k_format.id());
  PutLe32(h + 32, l.v_format.id());
  PutLe32(h + 36, n);
  PutLe32(h + 40, with_tokens ? kFlagTokens : 0);
  PutLe32(h + 44, 0);
  const uint64_t payload = out.size() - kHeaderBytes - kChecksumBytes;
  PutLe64(h + 48, payload);
  uint8_t* p = h + kHeaderBytes;
  if (with_tokens) {
    for (uint32_t i = 0; i < n; ++i) PutLe32(p + 4 * i, static_cast<uint32_t>(tokens[i]));
    p += 4 * static_cast<size_t>(n);
  }
  for (uint32_t layer = 0; layer < l.shape.n_layers; ++layer) {
    uint8_t* k = p;
    uint8_t* v = p + l.k_format.stored_rows(0, n) * l.k_token_stride;
    KVTIER_RETURN_IF_ERROR(seq.ReadEncoded(layer, 0, n, k, v));
    p = v + static_cast<size_t>(n) * l.v_token_stride;
  }
  PutLe64(p, XXH3_64bits(out.data(), out.size() - kChecksumBytes));
  return out;
}

Result<DeserializedSequence> DeserializeSequence(std::span<const uint8_t> blob,
                                                 std::shared_ptr<BlockPool> pool, KvOwner owner) {
  const std::string what = "sequence blob";
  if (!pool) return Status::InvalidArgument("DeserializeSequence: no pool");
  if (blob.size() < kHeaderBytes + kChecksumBytes) {
    return Status::Corruption(what + ": " + GroupDigits(blob.size()) + " bytes, shorter than the " +
                              std::to_string(kHeaderBytes + kChecksumBytes) +
                              "-byte header and checksum");
  }
  const uint8_t* h = blob.data();
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0) {
    return Status::InvalidArgument(what + ": bad magic at offset 0: not a kvtier sequence blob");
  }
  const uint32_t version = GetLe32(h + 8);
  if (version != kVersion) {
    return Status::Unimplemented(what + ": version " + std::to_string(version) +
                                 " (offset 8) is not supported: this build reads version " +
                                 std::to_string(kVersion));
  }
  if (GetLe32(h + 12) != kHeaderBytes) {
    return Status::Corruption(what + ": header_bytes (offset 12) is " + std::to_string(GetLe32(h + 12)) +
                              ", expected " + std::to_string(kHeaderBytes));
  }
  const uint64_t payload = GetLe64(h + 48);
  if (payload != blob.size() - kHeaderBytes - kChecksumBytes) {
    return Status::Corruption(what + ": payload_bytes (offset 48) is " + GroupDigits(payload) +
                              " but the blob holds " +
                              GroupDigits(blob.size() - kHeaderBytes - kChecksumBytes) +
                              " bytes between header and checksum (truncated or damaged)");
  }
  const uint64_t stored = GetLe64(h + blob.size() - kChecksumBytes);
  const uint64_t computed = XXH3_64bits(h, blob.size() - kChecksumBytes);
  if (stored != computed) {
    return Status::Corruption(what + ": checksum mismatch: stored " + Hex(stored) +
                              ", computed " + Hex(computed));
  }
  const KvShape shape{GetLe32(h + 16), GetLe32(h + 20), GetLe32(h + 24)};
  if (Status s = shape.Validate(); !s.ok()) return Status::Corruption(what + ": " + s.message());
  Result<Format> kf = Format::FromId(GetLe32(h + 28));
  if (!kf.ok()) return Status::Corruption(what + ": K format (offset 28): " + kf.status().message());
  Result<Format> vf = Format::FromId(GetLe32(h + 32));
  if (!vf.ok()) return Status::Corruption(what + ": V format (offset 32): " + vf.status().message());
  const uint32_t n = GetLe32(h + 36);
  const uint32_t flags = GetLe32(h + 40);
  if ((flags & ~kFlagTokens) != 0 || GetLe32(h + 44) != 0) {
    return Status::Corruption(what + ": unknown flags " + std::to_string(flags) + " (offset 40)");
  }
  const KvBlockLayout& l = pool->layout();
  if (!(shape == l.shape)) {
    return Status::InvalidArgument(what + ": KV shape " + shape.ToString() +
                                   " differs from the pool's " + l.shape.ToString());
  }
  if (*kf != l.k_format || *vf != l.v_format) {
    return Status::InvalidArgument(what + ": formats K " + kf->spec() + " / V " + vf->spec() +
                                   " differ from the pool's K " + l.k_format.spec() + " / V " +
                                   l.v_format.spec() +
                                   " (read it into a pool of its formats, then ConvertSequence)");
  }
  if (n > SequenceCache::kMaxTokens) {
    return Status::Corruption(what + ": n_tokens " + GroupDigits(n) + " (offset 36) is over the "
                              "limit of " + GroupDigits(SequenceCache::kMaxTokens));
  }
  const bool with_tokens = (flags & kFlagTokens) != 0;
  const uint64_t want = (with_tokens ? n * uint64_t{4} : 0) + RowBytes(l, n);
  if (payload != want) {
    return Status::Corruption(what + ": payload is " + GroupDigits(payload) + " bytes, but " +
                              GroupDigits(n) + " tokens of this shape and format need " +
                              GroupDigits(want));
  }
  DeserializedSequence out;
  out.sequence = SequenceCache(pool, owner);
  KVTIER_RETURN_IF_ERROR(out.sequence.Reserve(n));
  const uint8_t* p = h + kHeaderBytes;
  if (with_tokens) {
    out.tokens.resize(n);
    for (uint32_t i = 0; i < n; ++i) out.tokens[i] = static_cast<int32_t>(GetLe32(p + 4 * i));
    p += 4 * static_cast<size_t>(n);
  }
  for (uint32_t layer = 0; layer < l.shape.n_layers; ++layer) {
    const uint8_t* k = p;
    const uint8_t* v = p + l.k_format.stored_rows(0, n) * l.k_token_stride;
    KVTIER_RETURN_IF_ERROR(out.sequence.AppendEncoded(layer, k, v, n));
    p = v + static_cast<size_t>(n) * l.v_token_stride;
  }
  return out;
}

}  // namespace kvtier
