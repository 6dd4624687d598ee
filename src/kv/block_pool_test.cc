// BlockPool: layout arithmetic, zeroed allocation, exhaustion errors, reference and owner
// accounting, shared budgets, concurrent use.
#include "kvtier/block_pool.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "gtest/gtest.h"
#include "base/strings.h"
#include "kv/kv_test_util.h"

namespace kvtier {
namespace {

using testing::MakePool;

const KvShape kQwen3{28, 8, 128};  // Qwen3-0.6B
const KvShape kSmall{2, 2, 64};

TEST(KvBytesPerToken, Qwen3Shape) {
  EXPECT_EQ(KvBytesPerToken(kQwen3, Format::F16(), Format::F16()), 114688u);
  EXPECT_EQ(KvBytesPerToken(kQwen3, Format::Q4_0(), Format::Q4_0()), 32256u);
  EXPECT_EQ(KvBytesPerToken(kQwen3, Format::Affine(4, 64, DType::kF16),
                            Format::Affine(4, 64, DType::kF16)),
            32256u);
  EXPECT_EQ(KvBytesPerToken(kQwen3, Format::Q8_0(), Format::Q4_0()),
            28u * 8 * (136 + 72));
}

TEST(KvBlockLayout, OffsetsAndStrides) {
  Result<KvBlockLayout> l = KvBlockLayout::Make(kQwen3, Format::Q8_0(), Format::Q4_0(), 32);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->k_row_bytes, 136u);
  EXPECT_EQ(l->v_row_bytes, 72u);
  EXPECT_EQ(l->k_token_stride, 8u * 136);
  EXPECT_EQ(l->k_region_bytes, 32u * 8 * 136);  // already a multiple of 64
  EXPECT_EQ(l->v_region_bytes, 32u * 8 * 72);
  EXPECT_EQ(l->v_offset(3), 3 * l->layer_stride + l->k_region_bytes);
  EXPECT_EQ(l->payload_bytes, 32u * 28 * 8 * (136 + 72));
  EXPECT_EQ(l->block_stride % 4096, 0u);
  EXPECT_GE(l->block_stride, l->payload_bytes);
  EXPECT_LT(l->block_stride, l->payload_bytes + 4096 + 28 * 128);

  // Regions are 64-byte aligned, blocks whole pages.
  Result<KvBlockLayout> s = KvBlockLayout::Make(kSmall, Format::Q4_0(), Format::F32(), 3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->k_region_bytes, 256u);  // 3 tokens * 2 heads * 36 bytes = 216 -> 256
  EXPECT_EQ(s->layer_stride, 256u + 1536);
  EXPECT_EQ(s->block_stride, 4096u);
}

TEST(KvBlockLayout, BadInputsNameTheProblem) {
  Result<KvBlockLayout> l =
      KvBlockLayout::Make({2, 2, 96}, Format::Affine(4, 64, DType::kF16), Format::F16(), 32);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("K format"), std::string::npos) << l.status().ToString();
  EXPECT_NE(l.status().message().find("96"), std::string::npos);
  l = KvBlockLayout::Make(kSmall, Format::F16(), Format::F16(), 0);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("block_tokens 0"), std::string::npos);
  l = KvBlockLayout::Make({0, 2, 64}, Format::F16(), Format::F16(), 32);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("0 layers"), std::string::npos);
}

TEST(BlockPool, CapacityBelowOneBlockIsAnError) {
  BlockPoolOptions o;
  o.shape = kQwen3;
  o.capacity_bytes = 1000;
  Result<std::shared_ptr<BlockPool>> p = BlockPool::Create(o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("less than one block"), std::string::npos);
}

TEST(BlockPool, ExhaustionSaysNeededAndFreeAndChangesNothing) {
  auto pool = MakePool(kSmall, Format::F16(), Format::F16(), 4,
                       testing::BlocksCapacity(kSmall, Format::F16(), Format::F16(), 4, 5));
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->capacity_blocks(), 5u);
  std::vector<BlockId> ids;
  ASSERT_TRUE(pool->Allocate(3, KvOwner::kActive, &ids, "test").ok());
  Status s = pool->Allocate(3, KvOwner::kActive, &ids, "appending 12 tokens");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("appending 12 tokens needs 3 blocks"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(" free: " + GroupDigits(pool->layout().block_stride * 2) + " bytes"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(ids.size(), 3u);
  PoolStats st = pool->Stats();
  EXPECT_EQ(st.blocks_in_use, 3u);
  EXPECT_EQ(st.failed_allocations, 1u);
  ASSERT_TRUE(pool->Allocate(2, KvOwner::kActive, &ids, "test").ok());  // exactly full
  pool->Unref(ids, KvOwner::kActive);
  EXPECT_EQ(pool->Stats().blocks_in_use, 0u);
}

// Blocks come back zeroed on both paths: warm blocks (cleared on reuse) and blocks given back
// to the OS (retain_free_bytes 0).
TEST(BlockPool, RecycledBlocksAreZero) {
  for (uint64_t retain : {UINT64_MAX, uint64_t{0}})
  for (KvShape shape : {kSmall, kQwen3}) {
    BlockPoolOptions o;
    o.shape = shape;
    o.k_format = Format::F16();
    o.v_format = Format::Q4_0();
    o.capacity_bytes = testing::BlocksCapacity(shape, Format::F16(), Format::Q4_0(), 32, 2);
    o.retain_free_bytes = retain;
    Result<std::shared_ptr<BlockPool>> created = BlockPool::Create(o);
    ASSERT_TRUE(created.ok());
    std::shared_ptr<BlockPool> pool = *created;
    std::vector<BlockId> ids;
    ASSERT_TRUE(pool->Allocate(2, KvOwner::kActive, &ids, "test").ok());
    const size_t stride = pool->layout().block_stride;
    for (BlockId id : ids) {
      EXPECT_TRUE(std::all_of(pool->block_data(id), pool->block_data(id) + stride,
                              [](uint8_t b) { return b == 0; }));
      std::memset(pool->block_data(id), 0xAB, stride);
    }
    pool->Unref(ids, KvOwner::kActive);
    EXPECT_EQ(pool->Stats().free_resident_bytes, retain ? 2 * stride : 0);
    ids.clear();
    ASSERT_TRUE(pool->Allocate(2, KvOwner::kActive, &ids, "test").ok());
    for (BlockId id : ids) {
      EXPECT_TRUE(std::all_of(pool->block_data(id), pool->block_data(id) + stride,
                              [](uint8_t b) { return b == 0; }))
          << shape.ToString();
    }
    pool->Unref(ids, KvOwner::kActive);
  }
}

TEST(BlockPool, ReferencesAndOwners) {
  auto pool = MakePool(kSmall, Format::Q8_0(), Format::Q8_0(), 8, 1 << 20);
  ASSERT_TRUE(pool);
  const uint64_t stride = pool->layout().block_stride;
  std::vector<BlockId> a;
  ASSERT_TRUE(pool->Allocate(3, KvOwner::kActive, &a, "test").ok());
  ASSERT_TRUE(pool->Ref(std::span(a).first(2), KvOwner::kPrefixCache).ok());
  EXPECT_EQ(pool->RefCount(a[0]), 2u);
  EXPECT_EQ(pool->RefCount(a[2]), 1u);
  PoolStats s = pool->Stats();
  EXPECT_EQ(s.blocks_in_use, 3u);
  EXPECT_EQ(s.shared_blocks, 2u);
  EXPECT_EQ(s.bytes_in_use, 3 * stride);
  EXPECT_EQ(s.owner_bytes[0], 3 * stride);
  EXPECT_EQ(s.owner_bytes[1], 2 * stride);
  EXPECT_EQ(s.k_bytes_in_use, 3u * 2 * 8 * pool->layout().k_token_stride);
  EXPECT_EQ(pool->TotalRefs(), 5u);

  ASSERT_TRUE(pool->MoveOwner(std::span(a).first(1), KvOwner::kPrefixCache, KvOwner::kTier).ok());
  s = pool->Stats();
  EXPECT_EQ(s.owner_bytes[1], 1 * stride);
  EXPECT_EQ(s.owner_bytes[2], 1 * stride);
  Status bad = pool->MoveOwner(std::span(a).subspan(2), KvOwner::kPrefixCache, KvOwner::kTier);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("prefix_cache"), std::string::npos);

  pool->Unref(a, KvOwner::kActive);  // a[2] is freed, a[0..1] live on
  s = pool->Stats();
  EXPECT_EQ(s.blocks_in_use, 2u);
  EXPECT_EQ(s.shared_blocks, 0u);
  EXPECT_EQ(s.owner_bytes[0], 0u);
  EXPECT_TRUE(pool->CheckBlock(a[0]).ok());
  EXPECT_FALSE(pool->CheckBlock(a[2]).ok());
  EXPECT_FALSE(pool->CheckBlock(-1).ok());

  // Ref of a dead block changes nothing; Unref without a reference is counted as a bug.
  std::vector<BlockId> mixed = {a[0], a[2]};
  EXPECT_FALSE(pool->Ref(mixed, KvOwner::kOther).ok());
  EXPECT_EQ(pool->RefCount(a[0]), 1u);
  pool->Unref(std::span(a).subspan(2), KvOwner::kActive);
  EXPECT_EQ(pool->Stats().refcount_errors, 1u);

  pool->Unref(std::span(a).first(1), KvOwner::kTier);
  pool->Unref(std::span(a).subspan(1, 1), KvOwner::kPrefixCache);
  EXPECT_EQ(pool->Stats().blocks_in_use, 0u);
  EXPECT_EQ(pool->TotalRefs(), 0u);
}

TEST(BlockPool, SharedBudgetLimitsEveryPool) {
  const uint64_t one =
      testing::BlocksCapacity(kSmall, Format::F16(), Format::F16(), 16, 1);
  auto budget = std::make_shared<MemoryBudget>(3 * one);
  auto a = MakePool(kSmall, Format::F16(), Format::F16(), 16, 10 * one, budget);
  auto b = MakePool(kSmall, Format::Q4_0(), Format::Q4_0(), 16, 10 * one, budget);
  ASSERT_TRUE(a && b);
  std::vector<BlockId> ia, ib;
  ASSERT_TRUE(a->Allocate(2, KvOwner::kActive, &ia, "test").ok());
  ASSERT_TRUE(b->Allocate(1, KvOwner::kActive, &ib, "test").ok());  // q4_0 blocks are smaller
  Status s = a->Allocate(1, KvOwner::kActive, &ia, "test");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("KV memory budget full"), std::string::npos) << s.message();
  EXPECT_EQ(budget->used(), 2 * one + b->layout().block_stride);
  // Freed blocks stay resident (warm) and charged; a can reuse them without new budget.
  b->Unref(ib, KvOwner::kActive);
  EXPECT_EQ(b->Stats().free_resident_bytes, b->layout().block_stride);
  EXPECT_EQ(budget->used(), 2 * one + b->layout().block_stride);
  EXPECT_FALSE(a->Allocate(1, KvOwner::kActive, &ia, "test").ok());  // b's warm block holds it
  EXPECT_EQ(b->ReleaseFreeMemory(), b->layout().block_stride);
  ASSERT_TRUE(a->Allocate(1, KvOwner::kActive, &ia, "test").ok());
  a->Unref(ia, KvOwner::kActive);
  EXPECT_EQ(budget->used(), 3 * one);
  EXPECT_EQ(a->Stats().resident_bytes, 3 * one);
  a->ReleaseFreeMemory();
  EXPECT_EQ(budget->used(), 0u);
}

TEST(BlockPool, MemoryByFormatAndOwnerAcrossPools) {
  auto a = MakePool(kQwen3, Format::Q8_0(), Format::Q4_0(), 32, 64 << 20);
  auto b = MakePool(kQwen3, Format::Q4_0(), Format::Q4_0(), 32, 64 << 20);
  std::vector<BlockId> ia, ib;
  ASSERT_TRUE(a->Allocate(2, KvOwner::kActive, &ia, "test").ok());
  ASSERT_TRUE(b->Allocate(3, KvOwner::kPrefixCache, &ib, "test").ok());
  const BlockPool* pools[] = {a.get(), b.get()};
  const KvMemoryReport r = CollectKvMemory(pools);
  const uint64_t tok = 32u * 28 * 8;  // token-rows per block and layer set
  ASSERT_EQ(r.by_format.size(), 2u);
  EXPECT_EQ(r.by_format[0].first, "q4_0");
  EXPECT_EQ(r.by_format[0].second, 2 * tok * 72 + 3 * tok * 72 * 2);
  EXPECT_EQ(r.by_format[1].first, "q8_0");
  EXPECT_EQ(r.by_format[1].second, 2 * tok * 136);
  EXPECT_EQ(r.bytes_in_use, 2 * a->layout().block_stride + 3 * b->layout().block_stride);
  EXPECT_EQ(r.bytes_in_use, r.by_format[0].second + r.by_format[1].second + r.padding_bytes);
  EXPECT_EQ(r.owner_bytes[0], 2 * a->layout().block_stride);
  EXPECT_EQ(r.owner_bytes[1], 3 * b->layout().block_stride);
  a->Unref(ia, KvOwner::kActive);
  b->Unref(ib, KvOwner::kPrefixCache);
}

TEST(BlockPool, ConcurrentAllocateRefUnref) {
  auto pool = MakePool(kSmall, Format::Q4_0(), Format::Q4_0(), 4, 1 << 20);
  ASSERT_TRUE(pool);
  auto worker = [&](int seed) {
    std::vector<BlockId> mine;
    for (int i = 0; i < 2000; ++i) {
      if ((i + seed) % 3 != 0 || mine.empty()) {
        if (pool->Allocate(1, KvOwner::kActive, &mine, "test").ok()) {
          ASSERT_TRUE(pool->Ref(std::span(mine).last(1), KvOwner::kOther).ok());
          pool->Unref(std::span(mine).last(1), KvOwner::kOther);
        }
      } else {
        pool->Unref(std::span(mine).last(1), KvOwner::kActive);
        mine.pop_back();
      }
    }
    pool->Unref(mine, KvOwner::kActive);
  };
  std::thread t1(worker, 0), t2(worker, 1);
  t1.join();
  t2.join();
  PoolStats s = pool->Stats();
  EXPECT_EQ(s.blocks_in_use, 0u);
  EXPECT_EQ(s.refcount_errors, 0u);
  EXPECT_EQ(pool->TotalRefs(), 0u);
}

}  // namespace
}  // namespace kvtier
