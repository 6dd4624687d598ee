// Block files: every format and K/V mix round-trips bit for bit; every truncation and every
// single-bit flip of a file is detected (whole-file decode and rows read straight into a
// block); bad headers and pools are refused by name.
#include "tier/block_file.h"

#include <algorithm>
#include <cstring>

#include "base/crc32c.h"
#include "kv/kv_test_util.h"

namespace kvtier::tier {
namespace {

using testing::MakePool;

constexpr KvShape kShape{3, 2, 64};
constexpr uint32_t kBt = 8;

// A pool block filled with random bytes (any bytes are valid rows for the file layer), and
// the header of a block of `n` tokens in it.
struct Fixture {
  std::shared_ptr<BlockPool> pool;
  BlockId id = -1;
  BlockFileHeader h;
};

Fixture Make(Format k, Format v, uint32_t n, uint64_t seed) {
  Fixture f;
  f.pool = MakePool(kShape, k, v, kBt, 1 << 20);
  std::vector<BlockId> ids;
  EXPECT_TRUE(f.pool->Allocate(1, KvOwner::kOther, &ids, "test").ok());
  f.id = ids[0];
  std::mt19937_64 rng(seed);
  uint8_t* d = f.pool->block_data(f.id);
  for (size_t i = 0; i < f.pool->layout().block_stride; ++i) d[i] = static_cast<uint8_t>(rng());
  f.h.model = {seed, 77};
  f.h.shape = kShape;
  f.h.k_format = k;
  f.h.v_format = v;
  f.h.block_tokens = kBt;
  f.h.first_position = 3 * kBt;
  for (uint32_t i = 0; i < n; ++i) f.h.tokens.push_back(static_cast<int32_t>(rng() % 50000));
  if (n > 2) f.h.ends = {2, n};
  f.h.namespace_key = NamespaceKey(f.h.model, kShape, k, v, kBt);
  f.h.parent_key = {rng(), rng()};
  f.h.key = ChainBlockKey(f.h.parent_key, f.h.tokens);
  return f;
}

// The valid rows of the block (what a file carries), K then V per layer.
std::vector<uint8_t> Rows(const BlockPool& p, BlockId id, uint32_t n) {
  const KvBlockLayout& l = p.layout();
  std::vector<uint8_t> out;
  for (uint32_t layer = 0; layer < l.shape.n_layers; ++layer) {
    const uint8_t* b = p.block_data(id);
    out.insert(out.end(), b + l.k_offset(layer), b + l.k_offset(layer) + n * l.k_token_stride);
    out.insert(out.end(), b + l.v_offset(layer), b + l.v_offset(layer) + n * l.v_token_stride);
  }
  return out;
}

TEST(BlockFile, EveryFormatRoundTripsBitForBit) {
  const std::vector<std::pair<Format, Format>> mixes = {
      {Format::F32(), Format::F32()},   {Format::F16(), Format::F16()},
      {Format::BF16(), Format::BF16()}, {Format::Q8_0(), Format::Q8_0()},
      {Format::Q4_0(), Format::Q4_0()}, {Format::Affine(8, 64, DType::kF16), Format::Affine(8, 64, DType::kF16)},
      {Format::Affine(4, 32, DType::kBF16), Format::Affine(4, 32, DType::kBF16)},
      {Format::Affine(3, 64, DType::kF32), Format::Affine(6, 32, DType::kF16)},
      {Format::Q8_0(), Format::Q4_0()}, {Format::BF16(), Format::Affine(2, 64, DType::kF16)},
  };
  uint64_t seed = 1;
  for (const auto& [k, v] : mixes) {
    for (uint32_t n : {1u, 5u, kBt}) {
      Fixture f = Make(k, v, n, seed++);
      Result<std::vector<uint8_t>> file = EncodeBlockFile(f.h, *f.pool, f.id);
      ASSERT_TRUE(file.ok()) << file.status().ToString();
      ASSERT_EQ(file->size(), f.h.file_bytes());
      Result<BlockFileHeader> h = DecodeBlockHeader(*file, file->size(), "f");
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      EXPECT_EQ(h->key, f.h.key);
      EXPECT_EQ(h->parent_key, f.h.parent_key);
      EXPECT_EQ(h->model, f.h.model);
      EXPECT_EQ(h->k_format, k);
      EXPECT_EQ(h->v_format, v);
      EXPECT_EQ(h->tokens, f.h.tokens);
      EXPECT_EQ(h->ends, f.h.ends);
      EXPECT_EQ(h->first_position, f.h.first_position);
      // Into a block of another pool of the same formats.
      auto dst = MakePool(kShape, k, v, kBt, 1 << 20);
      std::vector<BlockId> ids;
      ASSERT_TRUE(dst->Allocate(1, KvOwner::kOther, &ids, "test").ok());
      ASSERT_TRUE(DecodeBlockRows(*h, *file, *dst, ids[0], "f").ok());
      EXPECT_EQ(Rows(*dst, ids[0], n), Rows(*f.pool, f.id, n)) << k.name() << "/" << v.name();
    }
  }
}

// The header the SSD and remote tiers write for an evicted block: the block's identity, its
// pool's shape, formats and block size; its file round-trips to the same header and rows.
TEST(BlockFile, SpilledBlockHeaderIsTheEvictedBlocksAndRoundTrips) {
  const Fixture f = Make(Format::Q8_0(), Format::Affine(4, 32, DType::kBF16), 6, 91);
  EvictedBlock b;
  b.key = f.h.key;
  b.parent_key = f.h.parent_key;
  b.namespace_key = f.h.namespace_key;
  b.model = f.h.model;
  b.first_position = f.h.first_position;
  b.tokens = f.h.tokens;
  b.entry_ends = f.h.ends;
  b.pool = f.pool;
  b.block = f.id;
  auto check = [&](const BlockFileHeader& x, const char* what) {
    EXPECT_EQ(x.key, f.h.key) << what;
    EXPECT_EQ(x.parent_key, f.h.parent_key) << what;
    EXPECT_EQ(x.namespace_key, f.h.namespace_key) << what;
    EXPECT_EQ(x.model, f.h.model) << what;
    EXPECT_EQ(x.shape, kShape) << what;
    EXPECT_EQ(x.k_format, Format::Q8_0()) << what;
    EXPECT_EQ(x.v_format, Format::Affine(4, 32, DType::kBF16)) << what;
    EXPECT_EQ(x.block_tokens, kBt) << what;
    EXPECT_EQ(x.first_position, f.h.first_position) << what;
    EXPECT_EQ(x.tokens, f.h.tokens) << what;
    EXPECT_EQ(x.ends, f.h.ends) << what;
  };
  const BlockFileHeader h = SpilledBlockHeader(b);
  check(h, "built");
  Result<std::vector<uint8_t>> file = EncodeBlockFile(h, *f.pool, f.id);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Result<BlockFileHeader> back = DecodeBlockHeader(*file, file->size(), "spilled");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  check(*back, "read back");
}

// Decodes a whole file; OK only if header and rows both verify.
Status DecodeAll(std::span<const uint8_t> file, BlockPool& pool, BlockId id) {
  Result<BlockFileHeader> h = DecodeBlockHeader(file, file.size(), "f");
  if (!h.ok()) return h.status();
  return DecodeBlockRows(*h, file, pool, id, "f");
}

TEST(BlockFile, EveryTruncationAndEveryBitFlipIsDetected) {
  Fixture f = Make(Format::Q4_0(), Format::BF16(), 3, 99);
  // One layer's worth is enough to keep the exhaustive loop fast.
  const std::vector<uint8_t> file = *EncodeBlockFile(f.h, *f.pool, f.id);
  auto dst = MakePool(kShape, Format::Q4_0(), Format::BF16(), kBt, 1 << 20);
  std::vector<BlockId> ids;
  ASSERT_TRUE(dst->Allocate(1, KvOwner::kOther, &ids, "test").ok());
  ASSERT_TRUE(DecodeAll(file, *dst, ids[0]).ok());
  for (size_t len = 0; len < file.size(); ++len) {
    EXPECT_FALSE(DecodeAll({file.data(), len}, *dst, ids[0]).ok()) << "truncated to " << len;
  }
  std::vector<uint8_t> bad = file;
  size_t detected = 0;
  for (size_t bit = 0; bit < file.size() * 8; ++bit) {
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    Status s = DecodeAll(bad, *dst, ids[0]);
    detected += !s.ok();
    EXPECT_FALSE(s.ok()) << "bit " << bit;
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  EXPECT_EQ(detected, file.size() * 8);
}

TEST(BlockFile, ErrorsNameTheProblem) {
  Fixture f = Make(Format::F16(), Format::F16(), 4, 5);
  std::vector<uint8_t> file = *EncodeBlockFile(f.h, *f.pool, f.id);
  std::vector<uint8_t> newer = file;
  newer[8] = 3;
  Result<BlockFileHeader> h = DecodeBlockHeader(newer, newer.size(), "blk");
  EXPECT_EQ(h.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(h.status().message().find("version 3"), std::string::npos) << h.status().message();
  std::vector<uint8_t> flipped = file;
  flipped[130] ^= 1;  // a token
  h = DecodeBlockHeader(flipped, flipped.size(), "blk");
  EXPECT_EQ(h.status().code(), StatusCode::kCorruption);
  EXPECT_NE(h.status().message().find("blk: header CRC-32C"), std::string::npos)
      << h.status().message();
  h = DecodeBlockHeader(file, file.size() + 1, "blk");
  EXPECT_NE(h.status().message().find("file is"), std::string::npos) << h.status().message();
  // A key that is not the hash of parent and tokens (a valid CRC over a wrong header).
  BlockFileHeader wrong = f.h;
  wrong.key.lo ^= 1;
  Result<std::vector<uint8_t>> w = EncodeBlockFile(wrong, *f.pool, f.id);
  ASSERT_TRUE(w.ok());
  h = DecodeBlockHeader(*w, w->size(), "blk");
  EXPECT_NE(h.status().message().find("not the hash"), std::string::npos) << h.status().message();
  // Rows into a pool of other formats: refused before touching the block.
  auto other = MakePool(kShape, Format::Q8_0(), Format::F16(), kBt, 1 << 20);
  std::vector<BlockId> ids;
  ASSERT_TRUE(other->Allocate(1, KvOwner::kOther, &ids, "test").ok());
  Result<BlockFileHeader> good = DecodeBlockHeader(file, file.size(), "blk");
  ASSERT_TRUE(good.ok());
  Status s = DecodeBlockRows(*good, file, *other, ids[0], "blk");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("q8_0"), std::string::npos) << s.message();
}

// A file over bytes in memory, for ReadBlockRows.
class SpanFile final : public RandomAccessFile {
 public:
  explicit SpanFile(std::span<const uint8_t> b) : b_(b) {}
  Result<size_t> Read(uint64_t offset, size_t n, uint8_t* dst) const override {
    if (offset >= b_.size()) return size_t{0};
    n = std::min<size_t>(n, b_.size() - offset);
    std::memcpy(dst, b_.data() + offset, n);
    return n;
  }
  uint64_t size() const override { return b_.size(); }

 private:
  std::span<const uint8_t> b_;
};

// Header from the file's bytes, then the rows read straight into the block.
Status ReadAll(std::span<const uint8_t> file, BlockPool& pool, BlockId id) {
  Result<BlockFileHeader> h = DecodeBlockHeader(file, file.size(), "f");
  if (!h.ok()) return h.status();
  return ReadBlockRows(*h, SpanFile(file), pool, id, "f");
}

TEST(BlockFile, ReadBlockRowsWritesEveryByteOfAnUnclearedBlock) {
  const std::vector<std::pair<Format, Format>> mixes = {
      {Format::F16(), Format::F16()}, {Format::Q8_0(), Format::Q4_0()},
      {Format::Affine(3, 64, DType::kF32), Format::Affine(6, 32, DType::kF16)},
      {Format::BF16(), Format::F32()}};
  uint64_t seed = 100;
  for (const auto& [k, v] : mixes) {
    for (uint32_t n : {1u, 5u, kBt}) {
      Fixture f = Make(k, v, n, seed++);
      const std::vector<uint8_t> file = *EncodeBlockFile(f.h, *f.pool, f.id);
      // The reference: a zeroed block, the rows copied from the whole file.
      auto dst = MakePool(kShape, k, v, kBt, 1 << 20);
      std::vector<BlockId> ref, dirty;
      ASSERT_TRUE(dst->Allocate(1, KvOwner::kOther, &ref, "test").ok());
      ASSERT_TRUE(DecodeAll(file, *dst, ref[0]).ok());
      // A reused block full of another owner's bytes, not cleared.
      ASSERT_TRUE(dst->Allocate(1, KvOwner::kOther, &dirty, "test").ok());
      const size_t stride = dst->layout().block_stride;
      std::memset(dst->block_data(dirty[0]), 0xA5, stride);
      dst->Unref(dirty, KvOwner::kOther);
      dirty.clear();
      ASSERT_TRUE(dst->AllocateUncleared(1, KvOwner::kOther, &dirty, "test").ok());
      ASSERT_EQ(dst->block_data(dirty[0])[0], 0xA5);  // the stale bytes are there
      Status s = ReadAll(file, *dst, dirty[0]);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(std::memcmp(dst->block_data(dirty[0]), dst->block_data(ref[0]), stride), 0)
          << k.name() << "/" << v.name() << " n=" << n;
      EXPECT_EQ(Rows(*dst, dirty[0], n), Rows(*f.pool, f.id, n));
    }
  }
}

// A sliding-window pool's layout (global layer 1 first, window layers 0 and 2 from a page
// boundary: offsets go back in layer order) reads back its rows through both readers.
TEST(BlockFile, WindowLayoutRowsRoundTripThroughBothReaders) {
  const std::vector<uint32_t> windows = {8, 0, 8};
  auto window_pool = [&] {
    BlockPoolOptions o;
    o.shape = kShape;
    o.k_format = Format::Q8_0();
    o.v_format = Format::F16();
    o.block_tokens = kBt;
    o.layer_window = windows;
    o.capacity_bytes = 1 << 20;
    return BlockPool::Create(o).value();
  };
  for (uint32_t n : {3u, kBt}) {
    Fixture f = Make(Format::Q8_0(), Format::F16(), n, 500 + n);
    auto src = window_pool();
    std::vector<BlockId> s;
    ASSERT_TRUE(src->Allocate(1, KvOwner::kOther, &s, "test").ok());
    std::memcpy(src->block_data(s[0]), f.pool->block_data(f.id),
                std::min(src->layout().block_stride, f.pool->layout().block_stride));
    const std::vector<uint8_t> file = *EncodeBlockFile(f.h, *src, s[0]);
    auto dst = window_pool();
    std::vector<BlockId> a, b;
    ASSERT_TRUE(dst->Allocate(2, KvOwner::kOther, &a, "test").ok());
    // The pread reader writes every byte of a dirty block; the mapped one fills a cleared one.
    std::memset(dst->block_data(a[0]), 0xA5, dst->layout().block_stride);
    ASSERT_TRUE(ReadAll(file, *dst, a[0]).ok());
    ASSERT_TRUE(DecodeAll(file, *dst, a[1]).ok());
    EXPECT_EQ(Rows(*dst, a[0], n), Rows(*src, s[0], n)) << "pread reader, n=" << n;
    EXPECT_EQ(Rows(*dst, a[1], n), Rows(*src, s[0], n)) << "mapped reader, n=" << n;
    EXPECT_EQ(std::memcmp(dst->block_data(a[0]), dst->block_data(a[1]),
                          dst->layout().block_stride), 0);
  }
}

TEST(BlockFile, ReadBlockRowsDetectsEveryTruncationAndBitFlip) {
  Fixture f = Make(Format::Q4_0(), Format::BF16(), 3, 98);
  const std::vector<uint8_t> file = *EncodeBlockFile(f.h, *f.pool, f.id);
  auto dst = MakePool(kShape, Format::Q4_0(), Format::BF16(), kBt, 1 << 20);
  std::vector<BlockId> ids;
  ASSERT_TRUE(dst->Allocate(1, KvOwner::kOther, &ids, "test").ok());
  ASSERT_TRUE(ReadAll(file, *dst, ids[0]).ok());
  Result<BlockFileHeader> h = DecodeBlockHeader(file, file.size(), "f");
  ASSERT_TRUE(h.ok());
  for (size_t len = 0; len < file.size(); ++len) {
    // A file shorter than its header says, read with the header decoded from the whole one.
    Status s = ReadBlockRows(*h, SpanFile({file.data(), len}), *dst, ids[0], "f");
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << "truncated to " << len;
    EXPECT_FALSE(ReadAll({file.data(), len}, *dst, ids[0]).ok()) << "truncated to " << len;
  }
  std::vector<uint8_t> bad = file;
  size_t detected = 0;
  for (size_t bit = 0; bit < file.size() * 8; ++bit) {
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    detected += !ReadAll(bad, *dst, ids[0]).ok();
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  EXPECT_EQ(detected, file.size() * 8);
}

}  // namespace
}  // namespace kvtier::tier

namespace kvtier::tier {
namespace {

// DecodeBlockRowsFilled writes every byte of the block: the rows where they belong and zeros
// everywhere else, over a block full of stale bytes (AllocateUncleared); a bad CRC writes
// nothing.
TEST(BlockFile, DecodeFilledWritesEveryByteOfTheBlock) {
  uint64_t seed = 900;
  for (const auto& [k, v] : std::vector<std::pair<Format, Format>>{
           {Format::F16(), Format::F16()}, {Format::Q8_0(), Format::Q4_0()}}) {
    for (uint32_t n : {1u, 5u, kBt}) {
      Fixture f = Make(k, v, n, seed++);
      Result<std::vector<uint8_t>> file = EncodeBlockFile(f.h, *f.pool, f.id);
      ASSERT_TRUE(file.ok());
      std::vector<BlockId> ids;
      ASSERT_TRUE(f.pool->Allocate(2, KvOwner::kOther, &ids, "test").ok());
      const size_t stride = f.pool->layout().block_stride;
      std::memset(f.pool->block_data(ids[0]), 0xAB, stride);  // stale bytes
      std::memset(f.pool->block_data(ids[1]), 0, stride);     // cleared
      ASSERT_TRUE(DecodeBlockRowsFilled(f.h, *file, *f.pool, ids[0], "f").ok());
      ASSERT_TRUE(DecodeBlockRows(f.h, *file, *f.pool, ids[1], "f").ok());
      EXPECT_EQ(0, std::memcmp(f.pool->block_data(ids[0]), f.pool->block_data(ids[1]), stride))
          << k.spec() << "/" << v.spec() << " n=" << n;
      EXPECT_EQ(Rows(*f.pool, ids[0], n), Rows(*f.pool, f.id, n));
      std::vector<uint8_t> bad = *file;
      bad[bad.size() - 10] ^= 1;
      std::memset(f.pool->block_data(ids[0]), 0xCD, stride);
      EXPECT_EQ(DecodeBlockRowsFilled(f.h, bad, *f.pool, ids[0], "f").code(),
                StatusCode::kCorruption);
      EXPECT_EQ(f.pool->block_data(ids[0])[0], 0xCD) << "nothing written on a bad CRC";
    }
  }
}

}  // namespace
}  // namespace kvtier::tier

namespace kvtier::tier {
namespace {

// The "window rows absent" flag (version 2, flags bit 0) goes from the pool block into the
// file and back onto the block each reader writes; a version-1 file (which could not say) is
// read as absent; a flag this version does not define is refused by name.
TEST(BlockFile, WindowRowsAbsentFlagRoundTripsAndVersionOneReadsAsAbsent) {
  Fixture f = Make(Format::Q8_0(), Format::F16(), kBt, 900);
  const std::vector<uint8_t> present = *EncodeBlockFile(f.h, *f.pool, f.id);
  ASSERT_FALSE(f.pool->WindowRowsAbsent(f.id));
  ASSERT_TRUE(f.pool->MarkWindowRowsAbsent(f.id).ok());
  ASSERT_TRUE(f.pool->WindowRowsAbsent(f.id));
  const std::vector<uint8_t> absent = *EncodeBlockFile(f.h, *f.pool, f.id);
  EXPECT_EQ(absent[116], kBlockFlagWindowRowsAbsent);
  EXPECT_EQ(present[116], 0);
  // A version-1 image of the same block: version 1, flags 0, the header CRC made right.
  std::vector<uint8_t> v1 = present;
  v1[8] = 1;
  const uint32_t hb = f.h.header_bytes();
  const uint32_t crc = Crc32c({v1.data(), hb - 4u});
  std::memcpy(v1.data() + hb - 4, &crc, 4);  // little-endian host
  auto dst = MakePool(kShape, Format::Q8_0(), Format::F16(), kBt, 1 << 20);
  using Reader = Status (*)(std::span<const uint8_t>, BlockPool&, BlockId);
  for (Reader read : {Reader{DecodeAll}, Reader{ReadAll}}) {
    for (const std::vector<uint8_t>* file :
         std::initializer_list<const std::vector<uint8_t>*>{&present, &absent, &v1}) {
      std::vector<BlockId> ids;
      ASSERT_TRUE(dst->Allocate(1, KvOwner::kOther, &ids, "test").ok());
      const Status s = read(*file, *dst, ids[0]);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(dst->WindowRowsAbsent(ids[0]), file != &present);
      EXPECT_EQ(Rows(*dst, ids[0], kBt), Rows(*f.pool, f.id, kBt)) << "the rows either way";
      dst->Unref(ids, KvOwner::kOther);
    }
  }
  Result<BlockFileHeader> h = DecodeBlockHeader(v1, v1.size(), "v1");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->version, 1u);
  EXPECT_TRUE(h->window_rows_absent());
  // Bit 1 is not defined; in a version-1 file no bit is.
  for (auto [version, flags] : std::initializer_list<std::pair<uint8_t, uint8_t>>{{2, 2}, {1, 1}}) {
    std::vector<uint8_t> bad = present;
    bad[8] = version;
    bad[116] = flags;
    const uint32_t c = Crc32c({bad.data(), hb - 4u});
    std::memcpy(bad.data() + hb - 4, &c, 4);
    h = DecodeBlockHeader(bad, bad.size(), "blk");
    EXPECT_EQ(h.status().code(), StatusCode::kCorruption);
    EXPECT_NE(h.status().message().find("flags"), std::string::npos) << h.status().message();
  }
}

}  // namespace
}  // namespace kvtier::tier
