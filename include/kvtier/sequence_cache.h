// SequenceCache: one sequence's KV cache, every layer, as a table of shared pool blocks.
//
// Token t of the sequence lives in block block_ids()[t / block_tokens]. Appends quantize
// straight into the blocks (the pool's K and V formats). Layers fill independently during a
// forward pass: layer_size(l) counts the tokens written to layer l, and size() is the number
// of tokens present in every layer (the real token count, never a capacity).
//
// Sharing: Fork() is O(1): both sequences share the block table until one of them changes
// (then the table is copied, O(blocks), and every block gains a reference). A block that is
// shared and must be written (a partly filled tail block) is copied first: copy-on-write.
// Only the valid rows of each layer are copied. Nothing past a sequence's length can be read
// through it (views, exports and serialization stop at the length, appends overwrite in
// order), Trim zeroes the dropped slots of a tail block nobody else holds, and the pool
// zeroes every block before handing it out again.
//
// Token-grouped K formats (Format::is_token_grouped, e.g. chan4g64: per channel across G
// tokens of a block): a group's rows are requantized as a whole with every append into it,
// from the exact f32 keys of the layer's last, partial group (the "tail", KIVI's residual,
// kept here: at most G x n_kv_heads x head_dim floats per layer, shared by forks); once the
// group is whole its codes never change. A partial group that came without its tail (from
// FromBlocks, AppendEncoded, or a Trim back into an earlier group) is requantized from its
// decoded keys. ReadEncoded / AppendEncoded carry K rows up to the end of the last group
// (Format::stored_rows): the rows past the length hold that group's parameters.
//
// Ownership: a SequenceCache holds references on its blocks (KvOwner, default kActive) and
// keeps its BlockPool alive. Move-only; destruction drops the references.
// Thread-compatible: distinct SequenceCaches may be used from different threads; one
// SequenceCache must not be modified concurrently with any other use of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/block_pool.h"
#include "kvtier/dtype.h"
#include "kvtier/kv_types.h"
#include "kvtier/paged_kv_view.h"
#include "kvtier/status.h"

namespace kvtier {

class SequenceCache {
 public:
  // Largest number of tokens a sequence may hold (positions are int32 everywhere).
  static constexpr uint32_t kMaxTokens = 1u << 30;

  SequenceCache() = default;  // no pool: every operation but destruction is an error
  explicit SequenceCache(std::shared_ptr<BlockPool> pool, KvOwner owner = KvOwner::kActive);
  // A sequence of `n_tokens` tokens over existing blocks (e.g. from the prefix cache); takes
  // one reference per block. ids must be live blocks of the pool and exactly
  // ceil(n_tokens / block_tokens) of them.
  static Result<SequenceCache> FromBlocks(std::shared_ptr<BlockPool> pool,
                                          std::span<const BlockId> ids, uint32_t n_tokens,
                                          KvOwner owner = KvOwner::kActive);

  SequenceCache(SequenceCache&&) noexcept = default;
  SequenceCache& operator=(SequenceCache&&) noexcept = default;
  SequenceCache(const SequenceCache&) = delete;
  SequenceCache& operator=(const SequenceCache&) = delete;
  ~SequenceCache() = default;

  // Shares every block: O(layers), no K/V copied.
  SequenceCache Fork() const;

  bool valid() const { return pool_ != nullptr; }
  const std::shared_ptr<BlockPool>& pool() const { return pool_; }
  KvOwner owner() const { return owner_; }

  // Tokens present in every layer.
  uint32_t size() const { return min_len_; }
  uint32_t layer_size(uint32_t layer) const { return layer < len_.size() ? len_[layer] : 0; }
  // True when every layer holds size() tokens (no forward pass half way through).
  bool complete() const { return min_len_ == max_len_; }
  uint32_t max_layer_size() const { return max_len_; }

  // Makes room for `n_tokens` more tokens after max_layer_size(): allocates blocks and copies
  // shared ones that will be written. All or nothing; ResourceExhausted when the pool is full.
  Status Reserve(uint32_t n_tokens);
  // Makes room for appending n_tokens to `layer` (what Append does first). All or nothing.
  Status ReserveLayer(uint32_t layer, uint32_t n_tokens);
  // Gives back reserved blocks past max(keep_blocks, the blocks max_layer_size() needs)
  // (works half way through a pass).
  void ReleaseReserved(size_t keep_blocks = 0);
  // Appends n_tokens tokens to `layer`. k and v: [n_tokens, n_kv_heads, head_dim] of
  // `src_dtype`, quantized into the pool's K and V formats. All or nothing.
  Status Append(uint32_t layer, DType src_dtype, const void* k, const void* v, uint32_t n_tokens);
  // Counts n_tokens more tokens in `layer` whose rows were written elsewhere: a device copy
  // of the pool's blocks (the engine's StepBackend, kvtier/step_backend.h) holds them, and the
  // host rows keep their old bytes until the owner copies the blocks back. Reserves like
  // Append (copy-on-write included). InvalidArgument for token-grouped K formats (their tail
  // of exact keys lives here). All or nothing.
  Status AppendExternal(uint32_t layer, uint32_t n_tokens);
  // Appends rows already encoded in the pool's formats: k_rows [n_tokens, n_kv_heads,
  // k_row_bytes] (token-grouped K: k_format.stored_rows(layer_size(layer), n_tokens) rows),
  // v_rows likewise (bit for bit what ReadEncoded gives). All or nothing.
  Status AppendEncoded(uint32_t layer, const uint8_t* k_rows, const uint8_t* v_rows,
                       uint32_t n_tokens);
  // Copies the encoded rows of tokens [first, first + n_tokens) of `layer` out, in the
  // layout AppendEncoded takes (token-grouped K: k_format.stored_rows(first, n_tokens) rows).
  // The range must lie within layer_size(layer).
  Status ReadEncoded(uint32_t layer, uint32_t first, uint32_t n_tokens, uint8_t* k_rows,
                     uint8_t* v_rows) const;
  // Dequantizes tokens [first, first + n_tokens) of `layer` into k, v: [n_tokens, n_kv_heads,
  // head_dim] of dst_dtype.
  Status ReadDense(uint32_t layer, uint32_t first, uint32_t n_tokens, DType dst_dtype, void* k,
                   void* v) const;
  // Drops the last min(n, size()) tokens (the count dropped is returned) and any reserved
  // blocks past the new end; blocks nobody else holds go back to the pool. Requires
  // complete(). Trim(0) just drops reserved blocks.
  Result<uint32_t> Trim(uint32_t n);
  // Sliding-window models: gives back the window layers' pages of every block whose tokens
  // all lie before F - max_window + 1, where F = size() rounded down to whole blocks (the
  // first key a query at F or later can attend in a window layer; F, not size(), so the last
  // full-block boundary stays a resume point in tiers that keep whole blocks only), except
  // the blocks a kept resume point needs (KeepWindowRowsAt) (BlockPool::DropWindowRows), and
  // returns how many blocks it dropped. Blocks shared with a fork or another holder are kept whole. Incremental: each
  // block is looked at once. A no-op for a dense pool or a forward pass half way through.
  // After it, the sequence must only grow: Trim back into the window would expose rows that
  // read as zeros (a prefix hit checks the blocks' flag: WindowRowsPresent).
  uint32_t DropOutsideWindow();
  // Keeps the window rows a resume at `pos` (and at pos rounded down to whole blocks) needs
  // through later DropOutsideWindow calls: e.g. the end of a prompt, stored in the prefix
  // cache while the row goes on. Forks inherit it.
  void KeepWindowRowsAt(uint32_t pos);
  // True when the window layers' rows of tokens [first, end) are all present: no block of
  // theirs has the "window rows absent" flag (BlockPool::WindowRowsAbsent: dropped by
  // DropOutsideWindow, or copied, converted or loaded from a lower tier with the flag set).
  // Dense pools: true.
  bool WindowRowsPresent(uint32_t first, uint32_t end) const;
  // The longest length P' <= size() this sequence can resume from: the window rows a query
  // at P' attends ([P' - max_window + 1, P')) are all present. size() for a dense pool.
  uint32_t WindowResumePoint() const;
  // Drops everything (size() becomes 0); the pool stays.
  void Clear();
  // Changes the owner the references are accounted to.
  Status SetOwner(KvOwner owner);

  std::span<const BlockId> block_ids() const;
  size_t n_blocks() const { return block_ids().size(); }
  // Bytes of the blocks this sequence references (shared ones included).
  uint64_t bytes() const;
  // This sequence's entry of a PagedKvView for `layer` (valid until it is next modified).
  PagedKvRow Row(uint32_t layer) const;
  // Pointer identifying the block table object (forks share one until modified). Tests.
  const void* table_identity() const { return table_.get(); }

  // Verifies the structure: lengths within the blocks, every block live, owner consistent.
  // O(blocks): tests and debugging.
  Status CheckInvariants() const;

 private:
  struct Table;
  Status CheckUsable(const char* op) const;
  Status CheckLayer(const char* op, uint32_t layer) const;
  // Ensures blocks cover tokens [0, end) and blocks holding tokens >= `from` are private.
  Status MakeWritable(uint32_t from, uint32_t end, const char* what);
  // Replaces the table by a new one holding its first n blocks, referenced for `owner`.
  Status CloneTable(KvOwner owner, size_t n);
  // Gives this sequence its own copy of a shared table (taking references).
  Status UnshareTable();
  // Drops blocks [keep, n_blocks) from this sequence (others sharing them keep theirs).
  void DropBlocksFrom(size_t keep);
  // Copies the valid rows of block index `i` into a new block.
  void CopyValidRows(size_t i, BlockId from, BlockId to);
  void ZeroSlots(BlockId id, uint32_t from_slot);
  Status CheckRange(const char* op, uint32_t layer, uint32_t first, uint32_t n) const;
  // Calls fn(k_rows, v_rows, tokens, done) for each block-contiguous piece of
  // tokens [first, first + n) of `layer`.
  template <typename Fn>
  Status ForEachPiece(uint32_t layer, uint32_t first, uint32_t n, Fn&& fn) const;
  void UpdateMinMax();
  // Token-grouped K: quantizes the groups holding tokens [pos, pos + n) of `layer` (k:
  // [n, n_kv_heads, head_dim] of src_dtype) and keeps the new tail. Blocks are reserved.
  Status AppendGroupedK(uint32_t layer, uint32_t pos, DType src_dtype, const void* k, uint32_t n);

  std::shared_ptr<BlockPool> pool_;
  std::shared_ptr<Table> table_;  // never null when pool_ is set
  std::vector<uint32_t> len_;     // [n_layers] tokens written per layer
  uint32_t min_len_ = 0;
  uint32_t max_len_ = 0;
  uint32_t window_scan_ = 0;  // blocks [0, window_scan_) were looked at by DropOutsideWindow
  std::vector<uint32_t> keep_points_;  // KeepWindowRowsAt positions
  KvOwner owner_ = KvOwner::kActive;
  // Token-grouped K only ([n_layers], else empty): the exact keys of tokens
  // [first, first + count) of each layer's last, partial group; values [>= count][heads][dim].
  struct KTail {
    uint32_t first = 0;
    uint32_t count = 0;
    std::shared_ptr<const std::vector<float>> values;
  };
  std::vector<KTail> k_tail_;
};

}  // namespace kvtier
