// CheckStoredFormats (ssd_tier.h): every format through the tier's encoders and back.
#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/sequence_cache.h"
#include "kvtier/ssd_tier.h"
#include "tier/block_file.h"
#include "tier/segment_file.h"

namespace kvtier {
using namespace tier;  // this file is the tier's own: its encoders by their short names
namespace {

// Writes a segment of two records (a copy of `file`, then `file`) to an in-memory Env, walks
// it by its headers and reads the second record's rows into block `dst`.
Status SegmentRoundTrip(const BlockFileHeader& h, const std::vector<uint8_t>& file,
                        BlockPool& pool, BlockId dst) {
  std::vector<uint8_t> seg(kSegmentHeaderBytes);
  EncodeSegmentHeader(1, 2, seg.data());
  for (int i = 0; i < 2; ++i) {
    seg.insert(seg.end(), file.begin(), file.end());
    seg.resize(AlignRecord(seg.size()), 0);
  }
  std::unique_ptr<MemEnv> env = MemEnv::Create();
  KVTIER_RETURN_IF_ERROR(env->WriteFileDurably("/s.kvs", seg));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, env->NewRandomAccessFile("/s.kvs"));
  KVTIER_ASSIGN_OR_RETURN(SegmentIndex idx, ReadSegmentIndex(*f, "formats segment"));
  if (idx.records.size() != 2 || !(idx.records[1].header.key == h.key)) {
    return Status::Internal("formats: the segment's records did not read back");
  }
  return ReadRecordRows(idx.records[1].header, *f, idx.records[1].offset, pool, dst,
                              "formats segment");
}

}  // namespace

Result<std::vector<StoredFormatCheck>> CheckStoredFormats() {
  const KvShape shape{2, 2, 128};
  constexpr uint32_t kTokens = 16;
  std::vector<StoredFormatCheck> out;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<Format> formats = AllSupportedFormats();
  for (const Format& f : AllTokenGroupedFormats()) formats.push_back(f);
  for (const Format& f : formats) {
    // Token-grouped formats are K only (V f16), in blocks of one group: the kTokens rows
    // fill part of it, so the file carries the group's rows to its end.
    const Format vf = f.is_token_grouped() ? Format::F16() : f;
    const uint32_t bt = f.is_token_grouped() ? f.group : kTokens;
    BlockPoolOptions po;
    po.shape = shape;
    po.k_format = f;
    po.v_format = vf;
    po.block_tokens = bt;
    KVTIER_ASSIGN_OR_RETURN(const KvBlockLayout layout,
                            KvBlockLayout::Make(shape, f, vf, bt));
    po.capacity_bytes = 2 * layout.block_stride;
    KVTIER_ASSIGN_OR_RETURN(auto pool, BlockPool::Create(po));
    SequenceCache seq(pool);
    std::vector<float> kv(kTokens * shape.n_kv_heads * shape.head_dim);  // [tokens, heads, dim]
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      for (float& x : kv) x = nd(rng);
      KVTIER_RETURN_IF_ERROR(seq.Append(l, DType::kF32, kv.data(), kv.data(), kTokens));
    }
    BlockFileHeader h;
    h.shape = shape;
    h.k_format = f;
    h.v_format = vf;
    h.block_tokens = bt;
    for (uint32_t i = 0; i < kTokens; ++i) h.tokens.push_back(static_cast<int32_t>(i));
    h.namespace_key = NamespaceKey(h.model, shape, f, vf, bt);
    h.parent_key = h.namespace_key;
    h.key = ChainBlockKey(h.parent_key, h.tokens);
    KVTIER_ASSIGN_OR_RETURN(std::vector<uint8_t> file,
                            EncodeBlockFile(h, *pool, seq.block_ids()[0]));
    KVTIER_ASSIGN_OR_RETURN(BlockFileHeader back,
                            DecodeBlockHeader(file, file.size(), "formats"));
    std::vector<BlockId> dst;
    KVTIER_RETURN_IF_ERROR(pool->Allocate(1, KvOwner::kOther, &dst, "formats"));
    KVTIER_RETURN_IF_ERROR(DecodeBlockRows(back, file, *pool, dst[0], "formats"));
    const bool same = std::equal(pool->block_data(dst[0]),
                                 pool->block_data(dst[0]) + layout.block_stride,
                                 pool->block_data(seq.block_ids()[0]));
    // The same block as the second record of a segment file (format version 2), read back
    // through the segment's record walk straight into a pool block.
    KVTIER_RETURN_IF_ERROR(SegmentRoundTrip(h, file, *pool, dst[0]));
    const bool seg_same = std::equal(pool->block_data(dst[0]),
                                     pool->block_data(dst[0]) + layout.block_stride,
                                     pool->block_data(seq.block_ids()[0]));
    pool->Unref(dst, KvOwner::kOther);
    out.push_back({f, same, seg_same});
  }
  return out;
}

}  // namespace kvtier
