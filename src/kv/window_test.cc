// Sliding-window layout: window layers in their own pages, DropWindowRows (accounting, zeros,
// refusal when shared), SequenceCache::DropOutsideWindow / WindowRowsPresent /
// WindowResumePoint, and a dense pool that never changes.
#include <gtest/gtest.h>

#include <vector>

#include "kv/kv_test_util.h"
#include "kvtier/batch_cache.h"
#include "kvtier/block_pool.h"
#include "kvtier/kv_io.h"
#include "kvtier/sequence_cache.h"

namespace kvtier {
namespace {

using testing::Filled;
using testing::ReadLayer;
using testing::SameBits;

// 6 layers, layer 2 and 5 global (gemma3's pattern with period 3), window 8.
const KvShape kShape{6, 1, 64};
const std::vector<uint32_t> kWindows{8, 8, 0, 8, 8, 0};
constexpr uint32_t kBt = 4;

std::shared_ptr<BlockPool> WindowPool(uint64_t blocks, std::shared_ptr<MemoryBudget> budget = {}) {
  BlockPoolOptions o;
  o.shape = kShape;
  o.k_format = Format::Q8_0();
  o.v_format = Format::Q8_0();
  o.block_tokens = kBt;
  o.layer_window = kWindows;
  o.budget = std::move(budget);
  o.capacity_bytes =
      blocks * KvBlockLayout::Make(kShape, o.k_format, o.v_format, kBt, kWindows)->block_stride;
  return BlockPool::Create(o).value();
}

TEST(WindowLayout, GlobalLayersFirstWindowLayersFromAPage) {
  const KvBlockLayout dense = KvBlockLayout::Make(kShape, Format::Q8_0(), Format::Q8_0(), kBt).value();
  const KvBlockLayout w =
      KvBlockLayout::Make(kShape, Format::Q8_0(), Format::Q8_0(), kBt, kWindows).value();
  EXPECT_FALSE(dense.has_window_layers());
  EXPECT_TRUE(dense.layer_offset.empty());
  EXPECT_EQ(w.max_window, 8u);
  EXPECT_EQ(w.window_offset % 4096, 0u);
  EXPECT_GE(w.window_offset, 2 * w.layer_stride);
  EXPECT_EQ(w.k_offset(2), 0u);
  EXPECT_EQ(w.k_offset(5), w.layer_stride);
  EXPECT_EQ(w.k_offset(0), w.window_offset);
  EXPECT_EQ(w.k_offset(4), w.window_offset + 3 * w.layer_stride);
  EXPECT_EQ(w.block_stride, w.window_offset + w.window_bytes);
  EXPECT_EQ(w.window_bytes % 4096, 0u);
  // An all-zero window list is the dense layout.
  const std::vector<uint32_t> zeros(6, 0);
  const KvBlockLayout z =
      KvBlockLayout::Make(kShape, Format::Q8_0(), Format::Q8_0(), kBt, zeros).value();
  EXPECT_EQ(z.block_stride, dense.block_stride);
  EXPECT_FALSE(z.has_window_layers());
  const std::vector<uint32_t> short_list(5, 8);
  auto bad = KvBlockLayout::Make(kShape, Format::Q8_0(), Format::Q8_0(), kBt, short_list);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("one per layer (6)"), std::string::npos);
}

TEST(WindowPool, DropGivesBackWindowPagesAndKeepsGlobalRows) {
  auto budget = std::make_shared<MemoryBudget>(1ull << 30);
  auto pool = WindowPool(64, budget);
  const KvBlockLayout& l = pool->layout();
  testing::Chunk chunk;
  SequenceCache s = Filled(pool, 30, 7, DType::kF32, &chunk);  // 8 blocks
  const uint64_t before = pool->Stats().bytes_in_use;
  EXPECT_EQ(before, 8 * l.block_stride);
  EXPECT_EQ(budget->used(), before);
  const testing::Dense g_before = ReadLayer(s, 2, 0, 30);
  const testing::Dense w_before = ReadLayer(s, 0, 0, 30);
  // A resume at 28 (the last block boundary) attends window keys 21..28: blocks 0..4
  // (tokens 0..19) can go.
  EXPECT_EQ(s.DropOutsideWindow(), 5u);
  EXPECT_EQ(s.DropOutsideWindow(), 0u);  // incremental: nothing new
  const PoolStats st = pool->Stats();
  EXPECT_EQ(st.window_dropped_blocks, 5u);
  EXPECT_EQ(st.bytes_in_use, 8 * l.block_stride - 5 * l.window_bytes);
  EXPECT_EQ(st.owner_bytes[static_cast<size_t>(KvOwner::kActive)], st.bytes_in_use);
  EXPECT_EQ(budget->used(), st.bytes_in_use);
  // Global layers keep every row; window layers keep rows 20.. and read zeros before.
  const testing::Dense g_after = ReadLayer(s, 2, 0, 30);
  EXPECT_TRUE(SameBits(g_before.k, g_after.k) && SameBits(g_before.v, g_after.v));
  const testing::Dense w_after = ReadLayer(s, 0, 0, 30);
  const size_t row = kShape.head_dim;
  for (size_t t = 0; t < 30; ++t) {
    const std::vector<float> a(w_after.k.begin() + t * row, w_after.k.begin() + (t + 1) * row);
    const std::vector<float> b(w_before.k.begin() + t * row, w_before.k.begin() + (t + 1) * row);
    if (t < 20) {
      EXPECT_EQ(a, std::vector<float>(row, 0.0f)) << "token " << t;
    } else {
      EXPECT_TRUE(SameBits(a, b)) << "token " << t;
    }
  }
  EXPECT_FALSE(s.WindowRowsPresent(19, 30));
  EXPECT_TRUE(s.WindowRowsPresent(20, 30));
  EXPECT_EQ(s.WindowResumePoint(), 30u);  // its own end: the window is intact
  // Freed, the dropped blocks go back whole: nothing charged is left.
  s.Clear();
  EXPECT_EQ(pool->Stats().bytes_in_use, 0u);
  EXPECT_EQ(pool->Stats().window_dropped_blocks, 0u);
  EXPECT_EQ(budget->used(), pool->Stats().free_resident_bytes);
  // Reused blocks are whole and zero.
  SequenceCache again = Filled(pool, 30, 8, DType::kF32);
  EXPECT_TRUE(again.WindowRowsPresent(0, 30));
  EXPECT_EQ(pool->Stats().bytes_in_use, 8 * l.block_stride);
  EXPECT_EQ(pool->Stats().refcount_errors, 0u);
}

// Capacity counts bytes: once a row's old blocks gave their window pages back, the pool
// takes more blocks than capacity / block_stride, up to the bytes; a dense pool of the same
// bytes stops at its whole blocks. RowBytes bounds what a running row holds.
TEST(WindowPool, CapacityCountsTheBytesDroppedBlocksHold) {
  auto pool = WindowPool(8);
  const KvBlockLayout& l = pool->layout();
  EXPECT_EQ(pool->capacity_blocks(), 8u);
  EXPECT_EQ(pool->Stats().free_bytes, 8 * l.block_stride);
  SequenceCache s = Filled(pool, 32, 7, DType::kF32);  // 8 blocks: the pool is full
  std::vector<BlockId> more;
  EXPECT_EQ(pool->Allocate(1, KvOwner::kActive, &more, "test").code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->Stats().free_bytes, 0u);
  // A query at 32 attends window keys 25..: blocks 0..5 give their window pages back.
  EXPECT_EQ(s.DropOutsideWindow(), 6u);
  const uint64_t free_bytes = pool->Stats().free_bytes;
  EXPECT_EQ(free_bytes, 6 * l.window_bytes);
  const uint64_t fit = free_bytes / l.block_stride;
  ASSERT_GE(fit, 1u) << l.ToString();
  ASSERT_TRUE(pool->Allocate(fit, KvOwner::kActive, &more, "test").ok());
  EXPECT_GT(pool->Stats().blocks_in_use, pool->capacity_blocks());
  EXPECT_EQ(pool->Allocate(1, KvOwner::kActive, &more, "test").code(),
            StatusCode::kResourceExhausted);
  EXPECT_LE(pool->Stats().bytes_in_use, pool->Stats().capacity_bytes);
  pool->Unref(more, KvOwner::kActive);
  s.Clear();
  EXPECT_EQ(pool->Stats().free_bytes, 8 * l.block_stride);
  EXPECT_EQ(pool->Stats().refcount_errors, 0u);

  // RowBytes: whole blocks for the dense layout; the window layout's bound holds what
  // DropOutsideWindow leaves of a long row and grows by the global part per block.
  const KvBlockLayout dense =
      KvBlockLayout::Make(kShape, Format::Q8_0(), Format::Q8_0(), kBt).value();
  EXPECT_EQ(dense.RowBytes(100, 8), (100 / kBt + 2) * dense.block_stride);
  auto big = WindowPool(256);
  SequenceCache row = Filled(big, 200, 9, DType::kF32);
  row.DropOutsideWindow();
  EXPECT_LE(big->Stats().bytes_in_use, l.RowBytes(200, 8));
  EXPECT_LT(l.RowBytes(200, 8), (200 / kBt + 2) * l.block_stride * 3 / 4);
  EXPECT_EQ(l.RowBytes(204, 8) - l.RowBytes(200, 8), l.window_offset);
}

TEST(WindowPool, SharedBlocksAreNeverDropped) {
  auto pool = WindowPool(64);
  SequenceCache s = Filled(pool, 30, 9, DType::kF32);
  SequenceCache fork = s.Fork();  // shares the table
  EXPECT_EQ(s.DropOutsideWindow(), 0u);
  std::vector<BlockId> ids(s.block_ids().begin(), s.block_ids().end());
  SequenceCache other = SequenceCache::FromBlocks(pool, ids, 30).value();  // shares blocks
  fork = SequenceCache();
  EXPECT_FALSE(pool->DropWindowRows(ids[0]).ok());  // two holders
  EXPECT_EQ(pool->Stats().window_dropped_blocks, 0u);
  EXPECT_TRUE(other.WindowRowsPresent(0, 30));
  // A dense pool refuses and never drops.
  auto dense = testing::MakePool(kShape, Format::Q8_0(), Format::Q8_0(), kBt, 1ull << 22);
  SequenceCache d = Filled(dense, 30, 11, DType::kF32);
  EXPECT_EQ(d.DropOutsideWindow(), 0u);
  EXPECT_FALSE(dense->DropWindowRows(d.block_ids()[0]).ok());
  EXPECT_EQ(d.WindowResumePoint(), 30u);
}

TEST(WindowPool, ResumePointSkipsBackOverDroppedRowsAfterConversion) {
  auto pool = WindowPool(64);
  SequenceCache s = Filled(pool, 40, 12, DType::kF32);  // 10 blocks
  EXPECT_EQ(s.DropOutsideWindow(), 8u);                 // blocks 0..7 (tokens 0..31)
  // Cut back to 34: a query at 34 needs window rows 27..33, and 27..31 are gone; every
  // earlier position's window meets a dropped block too, so the only resume point is 0.
  SequenceCache cut = s.Fork();
  ASSERT_TRUE(cut.Trim(6).ok());
  EXPECT_EQ(cut.WindowResumePoint(), 0u);
  // Through a conversion (another pool, no drop flags) the zeros still tell.
  auto other = testing::MakePool(kShape, Format::F16(), Format::F16(), kBt, 1ull << 22);
  SequenceCache conv = ConvertSequence(cut, other, KvOwner::kOther).value();
  EXPECT_EQ(conv.WindowResumePoint(), 34u) << "a dense pool has no window rows to check";
  auto back_pool = WindowPool(64);
  SequenceCache back = ConvertSequence(cut, back_pool, KvOwner::kOther).value();
  EXPECT_FALSE(back.WindowRowsPresent(27, 34));
  EXPECT_EQ(back.WindowResumePoint(), 0u);
  // Window -> dense (quantize on store) -> window (a fetch): the dense pool carries the
  // blocks' flag, so the round trip still knows which rows are absent.
  for (size_t b = 0; b < conv.n_blocks(); ++b) {
    EXPECT_EQ(other->WindowRowsAbsent(conv.block_ids()[b]), b < 8) << "block " << b;
  }
  SequenceCache round = ConvertSequence(conv, WindowPool(64), KvOwner::kOther).value();
  EXPECT_FALSE(round.WindowRowsPresent(27, 34));
  EXPECT_EQ(round.WindowResumePoint(), 0u);
  // Copy on write of a flagged block keeps the flag.
  SequenceCache fork = cut.Fork();
  ASSERT_TRUE(fork.Trim(4).ok());  // 30: block 7 (28..31) is now the shared tail
  const std::vector<float> row(static_cast<size_t>(kShape.n_kv_heads) * kShape.head_dim, 0.5f);
  for (uint32_t layer = 0; layer < kShape.n_layers; ++layer) {
    ASSERT_TRUE(fork.Append(layer, DType::kF32, row.data(), row.data(), 1).ok());
  }
  EXPECT_NE(fork.block_ids()[7], cut.block_ids()[7]) << "copied on write";
  EXPECT_TRUE(pool->WindowRowsAbsent(fork.block_ids()[7]));
  EXPECT_FALSE(fork.WindowRowsPresent(28, 31));
  // A sequence whose early blocks are intact resumes at the last good point.
  SequenceCache s3 = Filled(pool, 24, 13, DType::kF32);  // nothing dropped yet
  EXPECT_EQ(s3.WindowResumePoint(), 24u);
}

// The flag, not the data, decides: window rows that happen to be all zeros are present.
TEST(WindowPool, ZeroRowsThatWereNeverDroppedArePresent) {
  auto pool = WindowPool(64);
  SequenceCache s(pool);
  const std::vector<float> zeros(static_cast<size_t>(12) * kShape.n_kv_heads * kShape.head_dim);
  for (uint32_t layer = 0; layer < kShape.n_layers; ++layer) {
    ASSERT_TRUE(s.Append(layer, DType::kF32, zeros.data(), zeros.data(), 12).ok());
  }
  EXPECT_TRUE(s.WindowRowsPresent(0, 12));
  EXPECT_EQ(s.WindowResumePoint(), 12u);
  ASSERT_TRUE(pool->MarkWindowRowsAbsent(s.block_ids()[1]).ok());  // tokens 4..7
  EXPECT_FALSE(s.WindowRowsPresent(0, 12));
  EXPECT_EQ(s.WindowResumePoint(), 4u) << "a query at 4 attends 0..3 only";
  EXPECT_FALSE(pool->MarkWindowRowsAbsent(BlockId{60}).ok()) << "not a live block";
}

TEST(WindowPool, KeptResumePointsKeepTheirWindowRows) {
  auto pool = WindowPool(64);
  SequenceCache s(pool);
  s.KeepWindowRowsAt(14);  // e.g. a prompt's end: a resume at 14 or 12 needs rows 5..13
  testing::AppendAll(s, testing::RandomChunk(kShape, 40, DType::kF32, 14));
  EXPECT_EQ(s.DropOutsideWindow(), 5u);  // blocks 0 and 4..7; 1..3 kept
  SequenceCache at14 = s.Fork();
  ASSERT_TRUE(at14.Trim(26).ok());
  EXPECT_EQ(at14.WindowResumePoint(), 14u);
  SequenceCache at30 = s.Fork();
  ASSERT_TRUE(at30.Trim(10).ok());
  EXPECT_EQ(at30.WindowResumePoint(), 16u) << "the last point whose window is whole";
  EXPECT_EQ(s.WindowResumePoint(), 40u);
}

}  // namespace
}  // namespace kvtier
