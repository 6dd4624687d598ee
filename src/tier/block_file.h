// The SSD tier's block file (docs/formats/kv-block-file.md): encoding a pool block with its
// identity, and decoding and verifying it back. Pure functions over bytes, files and pool
// blocks; thread-safe for distinct blocks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/block_pool.h"
#include "kvtier/env.h"
#include "kvtier/format.h"
#include "kvtier/kv_types.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/status.h"

namespace kvtier::tier {

// Version 2 gives the flags field a meaning (bit 0: the block's window rows are absent,
// BlockPool::WindowRowsAbsent); version-1 files are still read (flags 0, reloaded as absent).
inline constexpr uint32_t kBlockFileVersion = 2;
inline constexpr uint32_t kBlockFlagWindowRowsAbsent = 1u;
inline constexpr size_t kBlockFileFixedHeader = 128;  // bytes before the tokens

// Bytes of the header of a block of n_tokens tokens and n_ends entry ends.
uint32_t BlockHeaderBytes(size_t n_tokens, size_t n_ends);

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
  // Read from a file: its version (1 or 2) and flags. Encoding writes kBlockFileVersion and
  // takes the flags from the pool block (its WindowRowsAbsent), not from here.
  uint32_t version = kBlockFileVersion;
  uint32_t flags = 0;
  // The rows of the window layers are not the tokens' K/V: the flag, or a version-1 file
  // (which could not say; its blocks are taken as absent: a sliding-window model recomputes
  // what needs them, a dense model never looks).
  bool window_rows_absent() const {
    return version < 2 || (flags & kBlockFlagWindowRowsAbsent) != 0;
  }

  uint32_t header_bytes() const;   // fixed part + tokens + ends + padding + header CRC
  uint64_t payload_bytes() const;  // rows of every layer
  uint64_t file_bytes() const { return header_bytes() + payload_bytes() + 4; }
};

// The header of the file an evicted block is written to (SSD and remote tier alike): its keys,
// model, tokens and entry ends, and its pool's shape, formats and block size.
BlockFileHeader SpilledBlockHeader(const EvictedBlock& b);

// The file for block `id` of `pool` (whose formats and shape must be the header's).
Result<std::vector<uint8_t>> EncodeBlockFile(const BlockFileHeader& h, const BlockPool& pool,
                                             BlockId id);
// The same into *out (resized to the file's bytes; its capacity is reused).
Status EncodeBlockFile(const BlockFileHeader& h, const BlockPool& pool, BlockId id,
                       std::vector<uint8_t>* out);

// Decodes and verifies a header from the first bytes of a file (at least header_bytes of
// them; `file_size` is the whole file's). `name` goes in errors. Corruption names the field.
Result<BlockFileHeader> DecodeBlockHeader(std::span<const uint8_t> prefix, uint64_t file_size,
                                          const std::string& name);

// The same for a record of a segment file (docs/formats/kv-segment-file.md): the record is a
// version-1 block file image starting at `prefix`; `bytes_left` are the file's bytes from
// there on, of which the record must take at most all.
Result<BlockFileHeader> DecodeRecordHeader(std::span<const uint8_t> prefix, uint64_t bytes_left,
                                           const std::string& name);

// Verifies the payload CRC of a whole file whose header is `h`, then copies the rows into
// block `id` of `pool` (formats and shape must be the header's; the rest of the block is left
// as it is). Nothing is written to the block unless the file verifies. Every decode and read
// below also sets the block's "window rows absent" flag when h.window_rows_absent().
Status DecodeBlockRows(const BlockFileHeader& h, std::span<const uint8_t> file,
                       BlockPool& pool, BlockId id, const std::string& name);
// DecodeBlockRows that also zeroes every byte of the block the rows do not cover (only those:
// no clearing pass over the whole block), so the block may come from AllocateUncleared. On an
// error nothing is written to the block.
Status DecodeBlockRowsFilled(const BlockFileHeader& h, std::span<const uint8_t> file,
                             BlockPool& pool, BlockId id, const std::string& name);

// Reads the rows of a block file whose header `h` was decoded from it straight into block
// `id` of `pool` (formats and shape must be the header's), verifying the payload CRC-32C over
// the block's bytes as they arrive, and zeroes every byte of the block the rows do not cover:
// on OK every byte of the block is written, so it may come from AllocateUncleared. One pass
// over the bytes (the read), the CRC while they are in cache; no copy of the file in memory.
// On error (Corruption for a short file or a bad CRC, the Env's error for a failed read) the
// block's contents are unspecified: the caller gives it back unseen.
Status ReadBlockRows(const BlockFileHeader& h, const RandomAccessFile& file, BlockPool& pool,
                     BlockId id, const std::string& name);

// ReadBlockRows for the record at byte `record_offset` (> 0) of a segment file.
Status ReadRecordRows(const BlockFileHeader& h, const RandomAccessFile& file,
                      uint64_t record_offset, BlockPool& pool, BlockId id,
                      const std::string& name);

// "<32 hex digits>": the key as file names spell it.
std::string KeyName(const BlockKey& key);

}  // namespace kvtier::tier
