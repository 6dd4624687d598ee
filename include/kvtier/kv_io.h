// Moving sequences between pools and in and out of bytes.
//
// ConvertSequence copies a sequence into another pool, re-encoding rows when the formats
// differ (quantize-on-store for the prefix cache). SerializeSequence / DeserializeSequence
// write and read a self-describing blob (docs/formats/kv-sequence.md): tokens, shape, K/V
// format descriptors and the rows in their native encoding, bit for bit (bf16 stays bf16;
// quantized stays quantized with its bits, group and scale dtype), under an XXH3-64 checksum.
// A blob is independent of the pool's block size.
// Thread-safe for distinct sequences (each call only reads `src` and writes its result).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/block_pool.h"
#include "kvtier/sequence_cache.h"
#include "kvtier/status.h"

namespace kvtier {

// A copy of src (complete() required) in `dst`: the same pool gives a Fork (no copy); the
// same formats copy encoded rows bit for bit; other formats dequantize to f32 and quantize.
// KV shapes must match. All or nothing (ResourceExhausted when dst is full).
Result<SequenceCache> ConvertSequence(const SequenceCache& src, std::shared_ptr<BlockPool> dst,
                                      KvOwner owner = KvOwner::kActive);

// Appends tokens [first, first + n) of src (every layer; complete() not needed, the range must
// lie within size()) after the end of dst (complete() required): encoded rows bit for bit when
// the formats match, else through f32. dst may share src's pool. Reserves room first, so it
// fails with ResourceExhausted before appending anything when dst's pool is full.
Status AppendConverted(SequenceCache& dst, const SequenceCache& src, uint32_t first, uint32_t n);

// Exact size SerializeSequence will produce.
uint64_t SerializedSequenceBytes(const SequenceCache& seq, bool with_tokens);
// `tokens` is empty or holds exactly seq.size() ids. Requires seq.complete().
Result<std::vector<uint8_t>> SerializeSequence(const SequenceCache& seq,
                                               std::span<const int32_t> tokens);

struct DeserializedSequence {
  SequenceCache sequence;
  std::vector<int32_t> tokens;  // empty if the blob has none
};
// Reads a blob into `pool`, whose shape and formats must be the blob's. Corruption for a
// damaged blob (size, checksum, fields), InvalidArgument for a blob of another shape or
// format, Unimplemented for a newer version; the error names the field, expected and got.
Result<DeserializedSequence> DeserializeSequence(std::span<const uint8_t> blob,
                                                 std::shared_ptr<BlockPool> pool,
                                                 KvOwner owner = KvOwner::kActive);

}  // namespace kvtier
