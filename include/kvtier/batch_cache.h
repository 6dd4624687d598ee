// BatchCache: the rows of a continuous batch, each a SequenceCache of one BlockPool.
//
// Semantics follow mlx-lm's BatchKVCache (docs/kv-cache.md): merge, extract, filter,
// extend, trim, per-row offsets used as RoPE positions. Padding is virtual: a row of length n
// in a batch whose longest row has m tokens reports left_padding m - n, but no padded slot is
// ever stored, so merge / extract / filter / extend move block tables and copy no K/V data.
// Quantized rows batch like any other: the pool fixes the formats.
//
// Move-only; thread-compatible (one thread modifies a batch at a time). Views returned by
// View() borrow the batch and are valid until its next non-const call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/block_pool.h"
#include "kvtier/paged_kv_view.h"
#include "kvtier/sequence_cache.h"
#include "kvtier/status.h"

namespace kvtier {

class BatchCache {
 public:
  // An empty batch over `pool`.
  explicit BatchCache(std::shared_ptr<BlockPool> pool);
  // A batch of these sequences, in order (mlx-lm's merge). They must be complete and share
  // one pool; the error names the first row that differs and how. Consumes the sequences.
  static Result<BatchCache> Merge(std::vector<SequenceCache> rows);

  BatchCache(BatchCache&&) noexcept = default;
  BatchCache& operator=(BatchCache&&) noexcept = default;
  BatchCache(const BatchCache&) = delete;
  BatchCache& operator=(const BatchCache&) = delete;

  const std::shared_ptr<BlockPool>& pool() const { return pool_; }
  size_t batch_size() const { return rows_.size(); }
  // Longest row (mlx-lm's _idx): the width of the virtual left-padded batch.
  uint32_t size() const;
  uint32_t length(size_t i) const { return rows_[i].size(); }
  // RoPE position of row i's next token: its length (no padding to subtract).
  uint32_t offset(size_t i) const { return rows_[i].size(); }
  uint32_t left_padding(size_t i) const { return size() - rows_[i].size(); }
  std::vector<int32_t> offsets() const;
  const SequenceCache& row(size_t i) const { return rows_[i]; }

  // Row i as a sequence of its own, sharing its blocks (O(1); the batch keeps the row).
  Result<SequenceCache> Extract(size_t i) const;
  // Keeps rows `indices` in that order; other rows are released. An index may repeat (the
  // row is forked). Out-of-range indices are an error and change nothing.
  Status Filter(std::span<const size_t> indices);
  // Appends other's rows after this batch's rows. Same pool required; other is left empty.
  Status Extend(BatchCache&& other);
  // Appends one sequence as a new last row.
  Status Add(SequenceCache row);
  // Removes row i and returns it (extract + filter in one move, no fork).
  Result<SequenceCache> Take(size_t i);

  // Reserves room for n_new[i] more tokens in every row i. All or nothing.
  Status Reserve(std::span<const uint32_t> n_new);
  // Appends to `layer` of every row: k, v are [batch_size, n_tokens, n_kv_heads, head_dim] of
  // src_dtype. Row i takes its first n_valid[i] tokens (right padding is not stored); an empty
  // n_valid means n_tokens for every row. All or nothing across rows.
  Status Append(uint32_t layer, DType src_dtype, const void* k, const void* v, uint32_t n_tokens,
                std::span<const uint32_t> n_valid = {});
  // Drops the last min(n, length(i)) tokens of every row; returns min(n, size()).
  Result<uint32_t> Trim(uint32_t n);
  Result<uint32_t> TrimRow(size_t i, uint32_t n);

  // Sliding-window pools: SequenceCache::DropOutsideWindow on every row (after a forward
  // pass); returns the blocks whose window rows went back to the OS.
  uint32_t DropOutsideWindow();

  // The kernel's view of `layer` for every row (lengths are that layer's; window: the
  // layer's sliding window from the pool's layout, 0 = global).
  Result<PagedKvView> View(uint32_t layer);

 private:
  Status CheckRow(const char* op, size_t i) const;
  Status CheckJoin(const char* op, const SequenceCache& s, size_t row) const;

  std::shared_ptr<BlockPool> pool_;
  std::vector<SequenceCache> rows_;
  std::vector<PagedKvRow> view_rows_;  // storage behind the last View()
};

}  // namespace kvtier
