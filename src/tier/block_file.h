// The SSD tier's block file (docs/formats/kv-block-file.md): encoding a pool block with its
// identity, and decoding and verifying it back. Pure functions over bytes and pool blocks;
// thread-safe for distinct blocks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/block_pool.h"
#include "kvtier/format.h"
#include "kvtier/kv_types.h"
#include "kvtier/status.h"

namespace kvtier::tier {

inline constexpr uint32_t kBlockFileVersion = 1;
inline constexpr size_t kBlockFileFixedHeader = 128;  // bytes before the tokens

// Everything a block file says about its block, but the rows.
struct BlockFileHeader {
  BlockKey key;
  BlockKey parent_key;
  BlockKey namespace_key;
  ModelFingerprint model;
  KvShape shape;
  Format k_format, v_format;
  uint32_t block_tokens = 0;
  uint32_t first_position = 0;
  std::vector<int32_t> tokens;  // [n_tokens]
  std::vector<uint32_t> ends;   // entry ends, increasing, each in [1, n_tokens]

  uint32_t header_bytes() const;   // fixed part + tokens + ends + padding + header CRC
  uint64_t payload_bytes() const;  // rows of every layer
  uint64_t file_bytes() const { return header_bytes() + payload_bytes() + 4; }
};

// The file for block `id` of `pool` (whose formats and shape must be the header's).
Result<std::vector<uint8_t>> EncodeBlockFile(const BlockFileHeader& h, const BlockPool& pool,
                                             BlockId id);

// Decodes and verifies a header from the first bytes of a file (at least header_bytes of
// them; `file_size` is the whole file's). `name` goes in errors. Corruption names the field.
Result<BlockFileHeader> DecodeBlockHeader(std::span<const uint8_t> prefix, uint64_t file_size,
                                          const std::string& name);

// Verifies the payload CRC of a whole file whose header is `h`, then copies the rows into
// block `id` of `pool` (formats and shape must be the header's; the rest of the block is left
// as it is). Nothing is written to the block unless the file verifies.
Status DecodeBlockRows(const BlockFileHeader& h, std::span<const uint8_t> file,
                       BlockPool& pool, BlockId id, const std::string& name);

// "<32 hex digits>": the key as file names spell it.
std::string KeyName(const BlockKey& key);

}  // namespace kvtier::tier
