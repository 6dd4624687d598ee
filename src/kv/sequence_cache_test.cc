// SequenceCache: append / read in every format pair, per-layer progress, trim, fork with
// copy-on-write, exhaustion, owners, views.
#include "kvtier/sequence_cache.h"

#include <algorithm>
#include <cstring>

#include "gtest/gtest.h"
#include "kv/kv_test_util.h"
#include "quant/test_formats.h"

namespace kvtier {
namespace {

using testing::Chunk;
using testing::MakePool;
using testing::RandomChunk;
using testing::ReadLayer;
using testing::RoundTrip;
using testing::SameBits;

const KvShape kShape{3, 2, 64};

using testing::AppendAll;

// Expected f32 contents of `chunks` concatenated, in the pool's formats.
testing::Dense Expect(const BlockPool& p, const std::vector<Chunk>& chunks) {
  testing::Dense d;
  for (const Chunk& c : chunks) {
    std::vector<float> k = RoundTrip(p.k_format(), c.dtype, c.k, p.shape().head_dim);
    std::vector<float> v = RoundTrip(p.v_format(), c.dtype, c.v, p.shape().head_dim);
    d.k.insert(d.k.end(), k.begin(), k.end());
    d.v.insert(d.v.end(), v.begin(), v.end());
  }
  return d;
}

void ExpectContents(const SequenceCache& s, const std::vector<Chunk>& chunks) {
  const testing::Dense want = Expect(*s.pool(), chunks);
  for (uint32_t l = 0; l < s.pool()->shape().n_layers; ++l) {
    const testing::Dense got = ReadLayer(s, l, 0, s.size());
    EXPECT_TRUE(SameBits(got.k, want.k)) << "K layer " << l;
    EXPECT_TRUE(SameBits(got.v, want.v)) << "V layer " << l;
  }
}

// Every format (K = V) and mixed pairs: appends across block boundaries read back exactly
// what the scalar reference gives, from every source dtype.
TEST(SequenceCache, AppendReadsBackEveryFormat) {
  std::vector<std::pair<Format, Format>> pairs;
  for (const Format& f : testing::AllFormats()) {
    if (f.group <= 64) pairs.emplace_back(f, f);
  }
  pairs.emplace_back(Format::Q8_0(), Format::Q4_0());
  pairs.emplace_back(Format::BF16(), Format::Affine(4, 64, DType::kBF16));
  pairs.emplace_back(Format::Affine(8, 32, DType::kF32), Format::F16());
  uint64_t seed = 1;
  for (const auto& [kf, vf] : pairs) {
    SCOPED_TRACE(kf.spec() + " / " + vf.spec());
    auto pool = MakePool(kShape, kf, vf, 5, 1 << 22);
    ASSERT_TRUE(pool);
    SequenceCache s(pool);
    std::vector<Chunk> chunks;
    for (uint32_t n : {3u, 7u, 1u, 10u}) {
      const DType dt = static_cast<DType>(seed % 3);
      chunks.push_back(RandomChunk(kShape, n, dt, ++seed));
      AppendAll(s, chunks.back());
    }
    EXPECT_EQ(s.size(), 21u);
    EXPECT_EQ(s.n_blocks(), 5u);
    EXPECT_TRUE(s.CheckInvariants().ok());
    ExpectContents(s, chunks);
  }
}

TEST(SequenceCache, LayersFillIndependently) {
  auto pool = MakePool(kShape, Format::Q4_0(), Format::Q4_0(), 4, 1 << 20);
  SequenceCache s(pool);
  Chunk c = RandomChunk(kShape, 6, DType::kF16, 7);
  ASSERT_TRUE(s.Append(0, c.dtype, c.k.data(), c.v.data(), 6).ok());
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.layer_size(0), 6u);
  EXPECT_EQ(s.max_layer_size(), 6u);
  EXPECT_FALSE(s.complete());
  Result<uint32_t> t = s.Trim(1);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("half way"), std::string::npos);
  ASSERT_TRUE(s.Append(1, c.dtype, c.k.data(), c.v.data(), 6).ok());
  ASSERT_TRUE(s.Append(2, c.dtype, c.k.data(), c.v.data(), 6).ok());
  EXPECT_EQ(s.size(), 6u);
  EXPECT_TRUE(s.complete());
  ExpectContents(s, {c});
}

TEST(SequenceCache, BadInputsAreClearErrors) {
  auto pool = MakePool(kShape, Format::F16(), Format::F16(), 4, 1 << 20);
  SequenceCache s(pool);
  Chunk c = RandomChunk(kShape, 2, DType::kF32, 1);
  Status st = s.Append(3, DType::kF32, c.k.data(), c.v.data(), 2);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layer 3 out of range: the model has 3 layers (0..2)"),
            std::string::npos)
      << st.message();
  st = s.Append(0, DType::kF32, c.k.data(), nullptr, 2);
  EXPECT_NE(st.message().find("null V"), std::string::npos);
  st = s.Append(0, static_cast<DType>(9), c.k.data(), c.v.data(), 2);
  EXPECT_NE(st.message().find("dtype 9"), std::string::npos);
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.n_blocks(), 0u);
  SequenceCache none;
  EXPECT_FALSE(none.Append(0, DType::kF32, c.k.data(), c.v.data(), 2).ok());
  std::vector<float> out(2 * 2 * 64);
  st = s.ReadDense(0, 0, 1, DType::kF32, out.data(), out.data());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
}

TEST(SequenceCache, TrimFreesBlocksAndWipesTheTail) {
  auto pool = MakePool(kShape, Format::Q8_0(), Format::BF16(), 4, 1 << 20);
  SequenceCache s(pool);
  Chunk a = RandomChunk(kShape, 10, DType::kF32, 3);
  AppendAll(s, a);
  EXPECT_EQ(pool->Stats().blocks_in_use, 3u);
  Result<uint32_t> t = s.Trim(5);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, 5u);
  EXPECT_EQ(s.size(), 5u);
  EXPECT_EQ(pool->Stats().blocks_in_use, 2u);
  // The tail block's slots 1..3 are zero in every layer: nothing trimmed stays in memory.
  const KvBlockLayout& l = pool->layout();
  const uint8_t* tail = pool->block_data(s.block_ids()[1]);
  for (uint32_t layer = 0; layer < 3; ++layer) {
    const uint8_t* k = tail + l.k_offset(layer);
    EXPECT_TRUE(std::all_of(k + l.k_token_stride, k + 4 * l.k_token_stride,
                            [](uint8_t b) { return b == 0; }));
    const uint8_t* v = tail + l.v_offset(layer);
    EXPECT_TRUE(std::all_of(v + l.v_token_stride, v + 4 * l.v_token_stride,
                            [](uint8_t b) { return b == 0; }));
  }
  // Appending fewer tokens than were trimmed shows only the new ones.
  Chunk b = RandomChunk(kShape, 2, DType::kF32, 4);
  AppendAll(s, b);
  EXPECT_EQ(s.size(), 7u);
  Chunk a5 = a;
  a5.n_tokens = 5;
  a5.k.resize(a5.k.size() / 2);
  a5.v.resize(a5.v.size() / 2);
  ExpectContents(s, {a5, b});
  // Trim clamps like mlx-lm (returns what it dropped) and Trim(0) changes nothing.
  t = s.Trim(100);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, 7u);
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(pool->Stats().blocks_in_use, 0u);
}

TEST(SequenceCache, ForkSharesAndCopiesOnlyTheWrittenTail) {
  auto pool = MakePool(kShape, Format::Q4_0(), Format::Q8_0(), 4, 1 << 20);
  SequenceCache a(pool);
  Chunk c0 = RandomChunk(kShape, 10, DType::kF16, 5);
  AppendAll(a, c0);
  const PoolStats before = pool->Stats();
  SequenceCache b = a.Fork();
  EXPECT_EQ(b.table_identity(), a.table_identity());
  EXPECT_EQ(pool->Stats().blocks_in_use, before.blocks_in_use);
  EXPECT_EQ(pool->Stats().copied_bytes, 0u);

  Chunk c1 = RandomChunk(kShape, 1, DType::kF16, 6);
  AppendAll(b, c1);  // b's tail (2 valid tokens) is copied, nothing else
  const KvBlockLayout& l = pool->layout();
  EXPECT_EQ(pool->Stats().copied_bytes, 3u * 2 * (l.k_token_stride + l.v_token_stride));
  EXPECT_EQ(pool->Stats().blocks_in_use, before.blocks_in_use + 1);
  EXPECT_EQ(a.block_ids()[0], b.block_ids()[0]);
  EXPECT_NE(a.block_ids()[2], b.block_ids()[2]);
  ExpectContents(a, {c0});
  ExpectContents(b, {c0, c1});

  // a's tail is private again: appending to it copies nothing.
  const uint64_t copied = pool->Stats().copied_bytes;
  Chunk c2 = RandomChunk(kShape, 2, DType::kF16, 8);
  AppendAll(a, c2);
  EXPECT_EQ(pool->Stats().copied_bytes, copied);
  ExpectContents(a, {c0, c2});
  ExpectContents(b, {c0, c1});
  EXPECT_TRUE(a.CheckInvariants().ok());
  EXPECT_TRUE(b.CheckInvariants().ok());
}

TEST(SequenceCache, TrimOfAForkLeavesTheOtherIntact) {
  auto pool = MakePool(kShape, Format::F16(), Format::F16(), 4, 1 << 20);
  SequenceCache a(pool);
  Chunk c0 = RandomChunk(kShape, 10, DType::kF16, 9);
  AppendAll(a, c0);
  SequenceCache b = a.Fork();
  ASSERT_TRUE(a.Trim(3).ok());
  EXPECT_NE(a.table_identity(), b.table_identity());
  Chunk c1 = RandomChunk(kShape, 2, DType::kF16, 10);
  AppendAll(a, c1);
  ExpectContents(b, {c0});
  Chunk c0_7 = c0;
  c0_7.n_tokens = 7;
  c0_7.k.resize(c0.k.size() / 10 * 7);
  c0_7.v.resize(c0.v.size() / 10 * 7);
  ExpectContents(a, {c0_7, c1});
  a = SequenceCache();
  b = SequenceCache();
  EXPECT_EQ(pool->Stats().blocks_in_use, 0u);
  EXPECT_EQ(pool->TotalRefs(), 0u);
}

TEST(SequenceCache, ExhaustionLeavesTheSequenceAsItWas) {
  const uint64_t cap = testing::BlocksCapacity(kShape, Format::Q4_0(), Format::Q4_0(), 4, 3);
  auto pool = MakePool(kShape, Format::Q4_0(), Format::Q4_0(), 4, cap);
  SequenceCache a(pool);
  Chunk c0 = RandomChunk(kShape, 6, DType::kF32, 11);
  AppendAll(a, c0);
  SequenceCache b = a.Fork();
  Chunk big = RandomChunk(kShape, 8, DType::kF32, 12);
  // b needs its tail copied (1 block) and 2 more blocks: only 1 block is free.
  Status st = b.Append(0, big.dtype, big.k.data(), big.v.data(), 8);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("needs 3 blocks"), std::string::npos) << st.message();
  EXPECT_EQ(b.size(), 6u);
  EXPECT_EQ(b.layer_size(0), 6u);
  EXPECT_EQ(pool->Stats().blocks_in_use, 2u);
  ExpectContents(b, {c0});
  ExpectContents(a, {c0});
  // Reserve is all or nothing too.
  EXPECT_FALSE(b.Reserve(8).ok());
  EXPECT_EQ(pool->Stats().blocks_in_use, 2u);
  ASSERT_TRUE(b.Reserve(2).ok());  // copies the tail only
  EXPECT_EQ(pool->Stats().blocks_in_use, 3u);
  b.ReleaseReserved();
  EXPECT_EQ(b.n_blocks(), 2u);
}

TEST(SequenceCache, FromBlocksAndOwners) {
  auto pool = MakePool(kShape, Format::Q8_0(), Format::Q8_0(), 4, 1 << 20);
  SequenceCache a(pool);
  Chunk c0 = RandomChunk(kShape, 9, DType::kBF16, 13);
  AppendAll(a, c0);
  ASSERT_TRUE(a.SetOwner(KvOwner::kPrefixCache).ok());
  const uint64_t stride = pool->layout().block_stride;
  EXPECT_EQ(pool->Stats().owner_bytes[static_cast<int>(KvOwner::kPrefixCache)], 3 * stride);
  EXPECT_EQ(pool->Stats().owner_bytes[static_cast<int>(KvOwner::kActive)], 0u);

  Result<SequenceCache> b = SequenceCache::FromBlocks(pool, a.block_ids(), 9);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(pool->Stats().owner_bytes[static_cast<int>(KvOwner::kActive)], 3 * stride);
  ExpectContents(*b, {c0});
  Result<SequenceCache> bad = SequenceCache::FromBlocks(pool, a.block_ids(), 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("4 tokens need 1 blocks of 4 tokens, got 3"),
            std::string::npos)
      << bad.status().message();
  bad = SequenceCache::FromBlocks(pool, a.block_ids(), 13);
  EXPECT_NE(bad.status().message().find("need 4 blocks of 4 tokens, got 3"), std::string::npos);
  std::vector<BlockId> dead = {a.block_ids()[0], 1000};
  bad = SequenceCache::FromBlocks(pool, dead, 8);
  EXPECT_FALSE(bad.ok());

  // Owner change of a shared table gives this sequence its own references.
  SequenceCache f = b->Fork();
  ASSERT_TRUE(f.SetOwner(KvOwner::kOther).ok());
  EXPECT_EQ(pool->Stats().owner_bytes[static_cast<int>(KvOwner::kOther)], 3 * stride);
  EXPECT_EQ(pool->TotalRefs(), 9u);
}

TEST(SequenceCache, RowsAreWhereTheViewSays) {
  auto pool = MakePool(kShape, Format::Affine(4, 32, DType::kF16), Format::Q4_0(), 4, 1 << 20);
  SequenceCache s(pool);
  Chunk c = RandomChunk(kShape, 11, DType::kF16, 14);
  AppendAll(s, c);
  const KvBlockLayout& l = pool->layout();
  for (uint32_t layer = 0; layer < 3; ++layer) {
    std::vector<uint8_t> k(11 * l.k_token_stride), v(11 * l.v_token_stride);
    ASSERT_TRUE(s.ReadEncoded(layer, 0, 11, k.data(), v.data()).ok());
    PagedKvRow row = s.Row(layer);
    PagedKvView view = pool->View(layer, &row, 1);
    EXPECT_EQ(view.rows[0].length, 11u);
    for (uint32_t t = 0; t < 11; ++t) {
      for (uint32_t h = 0; h < 2; ++h) {
        EXPECT_EQ(std::memcmp(view.k_row(0, t, h), &k[t * l.k_token_stride + h * l.k_row_bytes],
                              l.k_row_bytes),
                  0);
        EXPECT_EQ(std::memcmp(view.v_row(0, t, h), &v[t * l.v_token_stride + h * l.v_row_bytes],
                              l.v_row_bytes),
                  0);
      }
    }
  }
  // AppendEncoded of what ReadEncoded gave is bit for bit the same sequence.
  SequenceCache copy(pool);
  for (uint32_t layer = 0; layer < 3; ++layer) {
    std::vector<uint8_t> k(11 * l.k_token_stride), v(11 * l.v_token_stride);
    ASSERT_TRUE(s.ReadEncoded(layer, 0, 11, k.data(), v.data()).ok());
    ASSERT_TRUE(copy.AppendEncoded(layer, k.data(), v.data(), 11).ok());
  }
  ExpectContents(copy, {c});
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

// AppendExternal (the GPU's step backend): counts tokens written elsewhere without touching
// the host rows; reserves blocks and copies a shared tail on write like Append.
TEST(SequenceCache, AppendExternalCountsTokensAndCopiesASharedTail) {
  auto pool = MakePool(kShape, Format::F16(), Format::F16(), 4, 1 << 20);
  SequenceCache a(pool);
  Chunk c0 = RandomChunk(kShape, 6, DType::kF16, 21);
  AppendAll(a, c0);
  SequenceCache b = a.Fork();  // shares a's tail block (2 of 4 slots)
  for (uint32_t l = 0; l < kShape.n_layers; ++l) {
    ASSERT_TRUE(b.AppendExternal(l, 5).ok());
    if (l + 1 < kShape.n_layers) {
      EXPECT_EQ(b.size(), 6u);  // until every layer has them
    }
  }
  EXPECT_EQ(b.size(), 11u);
  EXPECT_TRUE(b.complete());
  ASSERT_EQ(b.n_blocks(), 3u);
  EXPECT_EQ(a.block_ids()[0], b.block_ids()[0]);
  EXPECT_NE(a.block_ids()[1], b.block_ids()[1]);  // the shared tail was copied on write
  // The copied tail keeps the valid rows; the counted ones are whatever the host held.
  const testing::Dense got = ReadLayer(b, 0, 0, 6);
  const testing::Dense want = ReadLayer(a, 0, 0, 6);
  EXPECT_TRUE(SameBits(got.k, want.k));
  EXPECT_TRUE(SameBits(got.v, want.v));
  ExpectContents(a, {c0});
  EXPECT_TRUE(b.CheckInvariants().ok());
  EXPECT_EQ(b.AppendExternal(kShape.n_layers, 1).code(), StatusCode::kInvalidArgument);

  auto chan = MakePool(kShape, Format::Chan(4, 32), Format::F16(), 32, 1 << 22);
  SequenceCache c(chan);
  const Status s = c.AppendExternal(0, 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token-grouped"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace kvtier
