// Block file encoding and verification (block_file.h, docs/formats/kv-block-file.md).
// Stateless; thread-safe.
#include "tier/block_file.h"

#include <algorithm>
#include <cstring>

#include "base/crc32c.h"
#include "base/le_bytes.h"

namespace kvtier::tier {
namespace {

constexpr uint8_t kMagic[8] = {'K', 'V', 'T', 'B', 'L', 'K', 0x1A, '\n'};

void PutKey(uint8_t* p, const Hash128& k) {
  PutLe64(p, k.lo);
  PutLe64(p + 8, k.hi);
}
Hash128 GetKey(const uint8_t* p) { return {GetLe64(p), GetLe64(p + 8)}; }

std::string Hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

Status Bad(const std::string& name, const std::string& what) {
  return Status::Corruption(name + ": " + what);
}

// Calls fn(offset in the block, bytes) for each layer's K then V rows of n tokens.
template <typename Fn>
void ForEachRowRun(const KvBlockLayout& l, uint32_t n, Fn&& fn) {
  for (uint32_t layer = 0; layer < l.shape.n_layers; ++layer) {
    fn(l.k_offset(layer), l.k_format.stored_rows(0, n) * l.k_token_stride);
    fn(l.v_offset(layer), n * l.v_token_stride);
  }
}

Status CheckPool(const BlockFileHeader& h, const BlockPool& pool, const std::string& what) {
  if (!(pool.shape() == h.shape) || !(pool.k_format() == h.k_format) ||
      !(pool.v_format() == h.v_format)) {
    return Status::InvalidArgument(what + ": block of " + h.shape.ToString() + ", K " +
                                   h.k_format.name() + " / V " + h.v_format.name() +
                                   " into a pool of " + pool.shape().ToString() + ", K " +
                                   pool.k_format().name() + " / V " + pool.v_format().name());
  }
  if (h.tokens.empty() || h.tokens.size() > pool.block_tokens()) {
    return Status::InvalidArgument(what + ": " + std::to_string(h.tokens.size()) +
                                   " tokens for blocks of " +
                                   std::to_string(pool.block_tokens()));
  }
  return Status::OK();
}

}  // namespace

BlockFileHeader SpilledBlockHeader(const EvictedBlock& b) {
  BlockFileHeader h;
  h.key = b.key;
  h.parent_key = b.parent_key;
  h.namespace_key = b.namespace_key;
  h.model = b.model;
  h.shape = b.pool->shape();
  h.k_format = b.pool->k_format();
  h.v_format = b.pool->v_format();
  h.block_tokens = b.pool->block_tokens();
  h.first_position = b.first_position;
  h.tokens.assign(b.tokens.begin(), b.tokens.end());
  h.ends.assign(b.entry_ends.begin(), b.entry_ends.end());
  return h;
}

std::string KeyName(const BlockKey& key) { return key.ToHex(); }

uint32_t BlockHeaderBytes(size_t n_tokens, size_t n_ends) {
  const size_t raw = kBlockFileFixedHeader + 4 * n_tokens + 4 * n_ends + 4;
  return static_cast<uint32_t>((raw + 7) / 8 * 8);
}

uint32_t BlockFileHeader::header_bytes() const {
  return BlockHeaderBytes(tokens.size(), ends.size());
}

uint64_t BlockFileHeader::payload_bytes() const {
  return uint64_t{shape.n_layers} * shape.n_kv_heads *
         (k_format.stored_rows(0, tokens.size()) * k_format.row_bytes(shape.head_dim) +
          tokens.size() * v_format.row_bytes(shape.head_dim));
}

Result<std::vector<uint8_t>> EncodeBlockFile(const BlockFileHeader& h, const BlockPool& pool,
                                             BlockId id) {
  std::vector<uint8_t> out;
  KVTIER_RETURN_IF_ERROR(EncodeBlockFile(h, pool, id, &out));
  return out;
}

Status EncodeBlockFile(const BlockFileHeader& h, const BlockPool& pool, BlockId id,
                       std::vector<uint8_t>* out_bytes) {
  KVTIER_RETURN_IF_ERROR(CheckPool(h, pool, "EncodeBlockFile"));
  KVTIER_RETURN_IF_ERROR(pool.CheckBlock(id));
  const uint32_t hb = h.header_bytes();
  std::vector<uint8_t>& out = *out_bytes;
  out.resize(h.file_bytes());
  uint8_t* p = out.data();
  std::memset(p, 0, hb);  // the header's padding
  std::memcpy(p, kMagic, 8);
  PutLe32(p + 8, kBlockFileVersion);
  PutLe32(p + 12, hb);
  PutKey(p + 16, h.key);
  PutKey(p + 32, h.parent_key);
  PutKey(p + 48, h.namespace_key);
  PutKey(p + 64, h.model);
  PutLe32(p + 80, h.shape.n_layers);
  PutLe32(p + 84, h.shape.n_kv_heads);
  PutLe32(p + 88, h.shape.head_dim);
  PutLe32(p + 92, h.k_format.id());
  PutLe32(p + 96, h.v_format.id());
  PutLe32(p + 100, h.block_tokens);
  PutLe32(p + 104, static_cast<uint32_t>(h.tokens.size()));
  PutLe32(p + 108, h.first_position);
  PutLe32(p + 112, static_cast<uint32_t>(h.ends.size()));
  PutLe32(p + 116, pool.WindowRowsAbsent(id) ? kBlockFlagWindowRowsAbsent : 0u);
  PutLe64(p + 120, h.payload_bytes());
  size_t off = kBlockFileFixedHeader;
  for (int32_t t : h.tokens) PutLe32(p + (off += 4) - 4, static_cast<uint32_t>(t));
  for (uint32_t e : h.ends) PutLe32(p + (off += 4) - 4, e);
  PutLe32(p + hb - 4, Crc32c({p, hb - 4u}));
  uint8_t* rows = p + hb;  // [payload_bytes]
  const uint8_t* block = pool.block_data(id);
  ForEachRowRun(pool.layout(), static_cast<uint32_t>(h.tokens.size()),
                [&](size_t src, size_t n) {
                  std::memcpy(rows, block + src, n);
                  rows += n;
                });
  PutLe32(rows, Crc32c({p + hb, static_cast<size_t>(h.payload_bytes())}));
  return Status::OK();
}

namespace {

// DecodeBlockHeader (exact: the file is the record) and DecodeRecordHeader (the record fits
// in the `file_size` bytes left of a segment).
Result<BlockFileHeader> DecodeHeader(std::span<const uint8_t> prefix, uint64_t file_size,
                                     const std::string& name, bool exact) {
  const uint8_t* p = prefix.data();
  if (prefix.size() < 12 || std::memcmp(p, kMagic, 8) != 0) {
    return Bad(name, "magic is not KVTBLK (" + std::to_string(file_size) + " bytes)");
  }
  const uint32_t version = GetLe32(p + 8);
  if (version > kBlockFileVersion) {
    return Status::Unimplemented(name + ": block file version " + std::to_string(version) +
                                 " is newer than this kvtier (" +
                                 std::to_string(kBlockFileVersion) + ")");
  }
  if (version < 1) return Bad(name, "version " + std::to_string(version));
  if (prefix.size() < kBlockFileFixedHeader + 8) {
    return Bad(name, "file of " + std::to_string(file_size) + " bytes is shorter than a header");
  }
  const uint32_t hb = GetLe32(p + 12);
  if (hb < kBlockFileFixedHeader + 8 || hb % 8 != 0 || hb > prefix.size()) {
    return Bad(name, "header_bytes " + std::to_string(hb) + " (have " +
                         std::to_string(prefix.size()) + " bytes)");
  }
  const uint32_t want_crc = GetLe32(p + hb - 4), got_crc = Crc32c({p, hb - 4u});
  if (want_crc != got_crc) {
    return Bad(name, "header CRC-32C is " + Hex32(got_crc) + ", expected " + Hex32(want_crc));
  }
  BlockFileHeader h;
  h.key = GetKey(p + 16);
  h.parent_key = GetKey(p + 32);
  h.namespace_key = GetKey(p + 48);
  h.model = GetKey(p + 64);
  h.shape = {GetLe32(p + 80), GetLe32(p + 84), GetLe32(p + 88)};
  if (Status s = h.shape.Validate(); !s.ok()) return Bad(name, "shape: " + s.message());
  Result<Format> k = Format::FromId(GetLe32(p + 92)), v = Format::FromId(GetLe32(p + 96));
  if (!k.ok()) return Bad(name, "k_format: " + k.status().message());
  if (!v.ok()) return Bad(name, "v_format: " + v.status().message());
  h.k_format = *k;
  h.v_format = *v;
  if (!h.k_format.CheckHeadDim(h.shape.head_dim).ok() ||
      !h.v_format.CheckHeadDim(h.shape.head_dim).ok()) {
    return Bad(name, "formats " + h.k_format.name() + " / " + h.v_format.name() +
                         " do not fit head_dim " + std::to_string(h.shape.head_dim));
  }
  h.block_tokens = GetLe32(p + 100);
  const uint32_t n = GetLe32(p + 104), n_ends = GetLe32(p + 112);
  h.first_position = GetLe32(p + 108);
  if (h.block_tokens == 0 || n == 0 || n > h.block_tokens || n_ends > n) {
    return Bad(name, "n_tokens " + std::to_string(n) + ", block_tokens " +
                         std::to_string(h.block_tokens) + ", n_ends " + std::to_string(n_ends));
  }
  if (h.first_position % h.block_tokens != 0) {
    return Bad(name, "first_position " + std::to_string(h.first_position) +
                         " is not a multiple of block_tokens");
  }
  h.version = version;
  h.flags = GetLe32(p + 116);
  const uint32_t known_flags = version >= 2 ? kBlockFlagWindowRowsAbsent : 0u;
  if ((h.flags & ~known_flags) != 0) {
    return Bad(name, "flags " + Hex32(h.flags) + " (version " + std::to_string(version) +
                         " defines " + Hex32(known_flags) + ")");
  }
  size_t off = kBlockFileFixedHeader;
  if (off + 4 * (uint64_t{n} + n_ends) + 4 > hb) return Bad(name, "tokens overrun the header");
  for (uint32_t i = 0; i < n; ++i, off += 4) h.tokens.push_back(static_cast<int32_t>(GetLe32(p + off)));
  for (uint32_t i = 0; i < n_ends; ++i, off += 4) {
    const uint32_t e = GetLe32(p + off);
    if (e == 0 || e > n || (!h.ends.empty() && e <= h.ends.back())) {
      return Bad(name, "entry end " + std::to_string(e) + " of a block of " + std::to_string(n));
    }
    h.ends.push_back(e);
  }
  if (h.header_bytes() != hb) {
    return Bad(name, "header_bytes " + std::to_string(hb) + ", the fields imply " +
                         std::to_string(h.header_bytes()));
  }
  if (GetLe64(p + 120) != h.payload_bytes()) {
    return Bad(name, "payload_bytes " + std::to_string(GetLe64(p + 120)) + ", the fields imply " +
                         std::to_string(h.payload_bytes()));
  }
  if (!(h.key == ChainBlockKey(h.parent_key, h.tokens))) {
    return Bad(name, "key " + KeyName(h.key) + " is not the hash of its parent and tokens");
  }
  if (!(h.namespace_key ==
        NamespaceKey(h.model, h.shape, h.k_format, h.v_format, h.block_tokens))) {
    return Bad(name, "namespace key does not match the model, shape and formats");
  }
  if (exact && file_size != h.file_bytes()) {
    return Bad(name, "file is " + std::to_string(file_size) + " bytes, the header says " +
                         std::to_string(h.file_bytes()));
  }
  if (!exact && file_size < h.file_bytes()) {
    return Bad(name, "record of " + std::to_string(h.file_bytes()) + " bytes overruns the " +
                         std::to_string(file_size) + " bytes left in the file");
  }
  return h;
}

}  // namespace

Result<BlockFileHeader> DecodeBlockHeader(std::span<const uint8_t> prefix, uint64_t file_size,
                                          const std::string& name) {
  return DecodeHeader(prefix, file_size, name, true);
}

Result<BlockFileHeader> DecodeRecordHeader(std::span<const uint8_t> prefix, uint64_t bytes_left,
                                           const std::string& name) {
  return DecodeHeader(prefix, bytes_left, name, false);
}

// The block's flag after its rows were written and verified.
static Status SetFlags(const BlockFileHeader& h, BlockPool& pool, BlockId id) {
  return h.window_rows_absent() ? pool.MarkWindowRowsAbsent(id) : Status::OK();
}

// What DecodeBlockRows and ReadBlockRows check before they write block `id`: the pool matches
// the header, the block exists, and the file has the size the header says (a record at
// `record_offset` > 0 of a segment: the file holds all of it).
static Status CheckRowsTarget(const BlockFileHeader& h, uint64_t file_size, BlockPool& pool,
                              BlockId id, const std::string& name, uint64_t record_offset = 0) {
  KVTIER_RETURN_IF_ERROR(CheckPool(h, pool, name));
  KVTIER_RETURN_IF_ERROR(pool.CheckBlock(id));
  if (record_offset > 0) {
    if (file_size < record_offset || file_size - record_offset < h.file_bytes()) {
      return Bad(name, "file is " + std::to_string(file_size) + " bytes, too short for a record of " +
                           std::to_string(h.file_bytes()) + " at " + std::to_string(record_offset));
    }
    return Status::OK();
  }
  if (file_size != h.file_bytes()) {
    return Bad(name, "file is " + std::to_string(file_size) + " bytes, expected " +
                         std::to_string(h.file_bytes()));
  }
  return Status::OK();
}

namespace {

// DecodeBlockRows, and with `fill` DecodeBlockRowsFilled.
Status DecodeRows(const BlockFileHeader& h, std::span<const uint8_t> file, BlockPool& pool,
                  BlockId id, const std::string& name, bool fill) {
  KVTIER_RETURN_IF_ERROR(CheckRowsTarget(h, file.size(), pool, id, name));
  const uint8_t* rows = file.data() + h.header_bytes();
  const size_t n = static_cast<size_t>(h.payload_bytes());
  const uint32_t want = GetLe32(rows + n), got = Crc32c({rows, n});
  if (want != got) {
    return Bad(name, "payload CRC-32C is " + Hex32(got) + ", expected " + Hex32(want));
  }
  uint8_t* block = pool.block_data(id);
  // Bytes of the block written so far (runs come in layer order: a window model's layout
  // puts its global layers first, so offsets may go back; the gaps zeroed are ahead of end).
  size_t end = 0;
  ForEachRowRun(pool.layout(), static_cast<uint32_t>(h.tokens.size()),
                [&](size_t dst, size_t len) {
                  if (fill && dst > end) std::memset(block + end, 0, dst - end);
                  std::memcpy(block + dst, rows, len);
                  rows += len;
                  end = std::max(end, dst + len);
                });
  const size_t stride = pool.layout().block_stride;
  if (fill && stride > end) std::memset(block + end, 0, stride - end);
  return SetFlags(h, pool, id);
}

}  // namespace

Status DecodeBlockRows(const BlockFileHeader& h, std::span<const uint8_t> file, BlockPool& pool,
                       BlockId id, const std::string& name) {
  return DecodeRows(h, file, pool, id, name, /*fill=*/false);
}

Status DecodeBlockRowsFilled(const BlockFileHeader& h, std::span<const uint8_t> file,
                             BlockPool& pool, BlockId id, const std::string& name) {
  return DecodeRows(h, file, pool, id, name, /*fill=*/true);
}

Status ReadBlockRows(const BlockFileHeader& h, const RandomAccessFile& file, BlockPool& pool,
                     BlockId id, const std::string& name) {
  return ReadRecordRows(h, file, 0, pool, id, name);
}

Status ReadRecordRows(const BlockFileHeader& h, const RandomAccessFile& file,
                      uint64_t record_offset, BlockPool& pool, BlockId id,
                      const std::string& name) {
  KVTIER_RETURN_IF_ERROR(CheckRowsTarget(h, file.size(), pool, id, name, record_offset));
  // The rows' destinations, adjacent runs merged (a full block without row padding is one).
  struct Run {
    size_t dst, len;
  };
  std::vector<Run> runs;
  ForEachRowRun(pool.layout(), static_cast<uint32_t>(h.tokens.size()),
                [&](size_t dst, size_t len) {
                  if (!runs.empty() && runs.back().dst + runs.back().len == dst) {
                    runs.back().len += len;
                  } else {
                    runs.push_back({dst, len});
                  }
                });
  // Read in pieces small enough that the CRC finds them still in cache.
  constexpr size_t kPiece = 256u << 10;
  uint8_t* block = pool.block_data(id);
  uint64_t off = record_offset + h.header_bytes();
  uint32_t got = 0;
  for (const Run& r : runs) {
    for (size_t done = 0; done < r.len;) {
      const size_t n = std::min(kPiece, r.len - done);
      uint8_t* dst = block + r.dst + done;
      KVTIER_ASSIGN_OR_RETURN(const size_t read, file.Read(off, n, dst));
      if (read != n) {
        return Bad(name, "file ended at byte " + std::to_string(off + read) + " of " +
                             std::to_string(record_offset + h.file_bytes()));
      }
      got = Crc32c({dst, n}, got);
      off += n;
      done += n;
    }
  }
  uint8_t crc[4];
  KVTIER_ASSIGN_OR_RETURN(const size_t read, file.Read(off, 4, crc));
  if (read != 4) return Bad(name, "file ended before the payload CRC-32C");
  const uint32_t want = GetLe32(crc);
  if (want != got) {
    return Bad(name, "payload CRC-32C is " + Hex32(got) + ", expected " + Hex32(want));
  }
  // Zero what the rows leave: row padding and the rows of tokens past the block's end (in
  // offset order: a window model's layout puts its global layers first).
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.dst < b.dst; });
  size_t end = 0;
  for (const Run& r : runs) {
    if (r.dst > end) std::memset(block + end, 0, r.dst - end);
    end = std::max(end, r.dst + r.len);
  }
  const size_t stride = pool.layout().block_stride;
  if (stride > end) std::memset(block + end, 0, stride - end);
  return SetFlags(h, pool, id);
}

}  // namespace kvtier::tier
