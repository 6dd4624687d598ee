// BatchCache: mlx-lm BatchKVCache semantics on block tables (lengths, offsets, virtual left
// padding), zero-copy batch operations, ragged appends, views, clear errors.
#include "kvtier/batch_cache.h"

#include <cstring>

#include "gtest/gtest.h"
#include "kv/kv_test_util.h"

namespace kvtier {
namespace {

using testing::Chunk;
using testing::MakePool;
using testing::RandomChunk;
using testing::ReadLayer;
using testing::RoundTrip;
using testing::SameBits;

const KvShape kShape{2, 2, 32};

using testing::Filled;

TEST(BatchCache, MergeKeepsRowsAndReportsVirtualPadding) {
  auto pool = MakePool(kShape, Format::Q4_0(), Format::Q8_0(), 4, 1 << 20);
  std::vector<SequenceCache> rows;
  rows.push_back(Filled(pool, 3, 1));
  rows.push_back(Filled(pool, 1, 2));
  rows.push_back(Filled(pool, 4, 3));
  const PoolStats before = pool->Stats();
  Result<BatchCache> b = BatchCache::Merge(std::move(rows));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->batch_size(), 3u);
  EXPECT_EQ(b->size(), 4u);  // mlx-lm's _idx
  EXPECT_EQ(b->left_padding(0), 1u);
  EXPECT_EQ(b->left_padding(1), 3u);
  EXPECT_EQ(b->left_padding(2), 0u);
  EXPECT_EQ(b->offsets(), (std::vector<int32_t>{3, 1, 4}));
  const PoolStats after = pool->Stats();
  EXPECT_EQ(after.blocks_in_use, before.blocks_in_use);
  EXPECT_EQ(after.copied_bytes, before.copied_bytes);
}

TEST(BatchCache, MergeRejectsWhatCannotBatch) {
  auto a = MakePool(kShape, Format::Q4_0(), Format::Q4_0(), 4, 1 << 20);
  auto b = MakePool(kShape, Format::F16(), Format::Q4_0(), 4, 1 << 20);
  auto c = MakePool({2, 4, 32}, Format::Q4_0(), Format::Q4_0(), 4, 1 << 20);
  auto d = MakePool(kShape, Format::Q4_0(), Format::Q4_0(), 4, 1 << 20);
  auto e = MakePool(kShape, Format::Q4_0(), Format::Q4_0(), 8, 1 << 20);
  struct Case {
    std::shared_ptr<BlockPool> other;
    const char* says;
  } cases[] = {
      {b, "row 1 cannot join the batch: its formats are K f16 / V q4_0, the batch's are K q4_0 / "
          "V q4_0"},
      {c, "its KV shape is 2 layers x 4 KV heads x head_dim 32, the batch's is 2 layers x 2 KV "
          "heads x head_dim 32"},
      {d, "another block pool with the same layout"},
      {e, "its blocks hold 8 tokens, the batch's 4"},
  };
  for (const Case& cs : cases) {
    std::vector<SequenceCache> rows;
    rows.push_back(Filled(a, 2, 1));
    SequenceCache o(cs.other);
    Chunk ch = RandomChunk(cs.other->shape(), 2, DType::kF16, 2);
    for (uint32_t l = 0; l < 2; ++l) ASSERT_TRUE(o.Append(l, ch.dtype, ch.k.data(), ch.v.data(), 2).ok());
    rows.push_back(std::move(o));
    Result<BatchCache> m = BatchCache::Merge(std::move(rows));
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(cs.says), std::string::npos) << m.status().message();
  }
  // Half-way rows and empty merges are refused too.
  std::vector<SequenceCache> rows;
  rows.push_back(SequenceCache(a));
  Chunk ch = RandomChunk(kShape, 2, DType::kF16, 3);
  ASSERT_TRUE(rows[0].Append(0, ch.dtype, ch.k.data(), ch.v.data(), 2).ok());
  Result<BatchCache> m = BatchCache::Merge(std::move(rows));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("half way"), std::string::npos);
  EXPECT_FALSE(BatchCache::Merge({}).ok());
  EXPECT_EQ(a->Stats().blocks_in_use, 0u);  // rejected rows were released
}

TEST(BatchCache, ExtractFilterExtendTakeMoveTablesOnly) {
  auto pool = MakePool(kShape, Format::Q8_0(), Format::Q8_0(), 4, 1 << 20);
  Chunk c0, c1, c2;
  std::vector<SequenceCache> rows;
  rows.push_back(Filled(pool, 5, 1, DType::kF16, &c0));
  rows.push_back(Filled(pool, 9, 2, DType::kF16, &c1));
  rows.push_back(Filled(pool, 2, 3, DType::kF16, &c2));
  const void* t1 = rows[1].table_identity();
  Result<BatchCache> b = BatchCache::Merge(std::move(rows));
  ASSERT_TRUE(b.ok());
  const PoolStats base = pool->Stats();

  Result<SequenceCache> x = b->Extract(1);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->table_identity(), t1);
  EXPECT_EQ(x->size(), 9u);
  EXPECT_EQ(b->batch_size(), 3u);
  EXPECT_FALSE(b->Extract(3).ok());

  const size_t keep[] = {2, 1, 1};
  ASSERT_TRUE(b->Filter(keep).ok());
  EXPECT_EQ(b->batch_size(), 3u);
  EXPECT_EQ(b->offsets(), (std::vector<int32_t>{2, 9, 9}));
  const size_t bad[] = {0, 7};
  Status st = b->Filter(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("index 7 (position 1) out of range: the batch has 3 rows"),
            std::string::npos);
  EXPECT_EQ(b->batch_size(), 3u);

  BatchCache other(pool);
  ASSERT_TRUE(other.Add(std::move(*x)).ok());
  ASSERT_TRUE(b->Extend(std::move(other)).ok());
  EXPECT_EQ(other.batch_size(), 0u);
  EXPECT_EQ(b->offsets(), (std::vector<int32_t>{2, 9, 9, 9}));
  Result<SequenceCache> taken = b->Take(0);
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->size(), 2u);
  EXPECT_EQ(b->size(), 9u);

  PoolStats now = pool->Stats();
  EXPECT_EQ(now.copied_bytes, base.copied_bytes);
  EXPECT_EQ(now.blocks_in_use, base.blocks_in_use - 2);  // row 0 (2 blocks) was dropped
  // Contents survived every move.
  const testing::Dense got = ReadLayer(b->row(0), 1, 0, 9);
  EXPECT_TRUE(SameBits(got.k, RoundTrip(Format::Q8_0(), c1.dtype, c1.k, 32)));
}

TEST(BatchCache, RaggedAppendStoresOnlyValidTokens) {
  auto pool = MakePool(kShape, Format::Q4_0(), Format::F16(), 4, 1 << 20);
  std::vector<SequenceCache> rows;
  rows.push_back(Filled(pool, 3, 1));
  rows.push_back(Filled(pool, 6, 2));
  Result<BatchCache> b = BatchCache::Merge(std::move(rows));
  ASSERT_TRUE(b.ok());
  // A prefill chunk of 5 tokens per row, right-padded: row 0 has 5, row 1 has 2.
  const uint32_t n_valid[] = {5, 2};
  Chunk c = RandomChunk({1, 2 * 2, 32}, 5, DType::kF32, 9);  // [2 rows, 5, 2 heads, 32]
  for (uint32_t l = 0; l < 2; ++l) {
    ASSERT_TRUE(b->Append(l, DType::kF32, c.k.data(), c.v.data(), 5, n_valid).ok());
  }
  EXPECT_EQ(b->offsets(), (std::vector<int32_t>{8, 8}));
  // Row 1's new tokens are the first 2 of its slice.
  const size_t row_vals = 5 * 2 * 32;
  std::vector<uint8_t> k1(c.k.begin() + row_vals * 4, c.k.begin() + (row_vals + 2 * 64) * 4);
  const testing::Dense got = ReadLayer(b->row(1), 0, 6, 2);
  EXPECT_TRUE(SameBits(got.k, RoundTrip(Format::Q4_0(), DType::kF32, k1, 32)));

  // Decode step: one token per row, then views see the new lengths in every layer.
  Chunk d = RandomChunk({1, 2 * 2, 32}, 1, DType::kF16, 10);
  ASSERT_TRUE(b->Append(0, DType::kF16, d.k.data(), d.v.data(), 1).ok());
  Result<PagedKvView> v0 = b->View(0);
  ASSERT_TRUE(v0.ok());
  EXPECT_EQ(v0->n_rows, 2u);
  EXPECT_EQ(v0->rows[0].length, 9u);
  Result<PagedKvView> v1 = b->View(1);
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(v1->rows[0].length, 8u);  // layer 1 not written yet this step
  EXPECT_FALSE(b->View(2).ok());
  Result<uint32_t> t = b->Trim(1);
  ASSERT_FALSE(t.ok());  // half way through the step

  const uint32_t too_many[] = {6, 1};
  Status st = b->Append(1, DType::kF16, d.k.data(), d.v.data(), 1, too_many);
  EXPECT_NE(st.message().find("row 0 has 6 valid tokens, more than the 1 given"),
            std::string::npos);
  ASSERT_TRUE(b->Append(1, DType::kF16, d.k.data(), d.v.data(), 1).ok());
  t = b->Trim(4);  // mlx-lm: every row loses min(4, length)
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, 4u);
  EXPECT_EQ(b->offsets(), (std::vector<int32_t>{5, 5}));
  t = b->TrimRow(1, 2);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(b->offsets(), (std::vector<int32_t>{5, 3}));
  EXPECT_EQ(b->left_padding(1), 2u);
}

TEST(BatchCache, AppendIsAllOrNothingAcrossRows) {
  const uint64_t cap = testing::BlocksCapacity(kShape, Format::Q4_0(), Format::Q4_0(), 4, 4);
  auto pool = MakePool(kShape, Format::Q4_0(), Format::Q4_0(), 4, cap);
  std::vector<SequenceCache> rows;
  rows.push_back(Filled(pool, 4, 1));  // full block: the next token needs a new block
  rows.push_back(Filled(pool, 4, 2));
  Result<BatchCache> b = BatchCache::Merge(std::move(rows));
  ASSERT_TRUE(b.ok());
  Chunk c = RandomChunk({1, 2 * 2, 32}, 5, DType::kF16, 3);
  // Row 0 needs 2 more blocks and gets them; row 1 then finds the pool full.
  Status st = b->Append(0, DType::kF16, c.k.data(), c.v.data(), 5);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("row 1"), std::string::npos) << st.message();
  EXPECT_EQ(b->offsets(), (std::vector<int32_t>{4, 4}));
  EXPECT_EQ(b->row(0).layer_size(0), 4u);
  EXPECT_EQ(pool->Stats().blocks_in_use, 2u);  // row 0's reservation was given back
  const uint32_t reserve[] = {1, 1};
  ASSERT_TRUE(b->Reserve(reserve).ok());
  EXPECT_EQ(pool->Stats().blocks_in_use, 4u);
  const uint32_t more[] = {5, 0};
  EXPECT_FALSE(b->Reserve(more).ok());
  EXPECT_EQ(pool->Stats().blocks_in_use, 4u);
}

}  // namespace
}  // namespace kvtier
