// BlockPool: fixed-size, reference-counted KV blocks of one model in one pair of formats.
//
// A block holds `block_tokens` consecutive tokens of K and V for every layer and KV head,
// K in k_format and V in v_format (chosen independently). Inside a block (KvBlockLayout):
//
//   [n_layers] x { K: [block_tokens][n_kv_heads] rows of k_row_bytes, padded to 64 bytes,
//                  V: [block_tokens][n_kv_heads] rows of v_row_bytes, padded to 64 bytes }
//
// Sliding-window models (BlockPoolOptions::layer_window) put the global layers first and the
// window layers after them, from a page boundary (window_offset):
//
//   [global layers, in order][pad to 4 KiB][window layers, in order][pad to 4 KiB]
//
// so a block whose tokens have left every window can give its window layers' pages back to
// the OS on their own (DropWindowRows): those rows then read as zeros, the global layers'
// rows stay. A dense model (no window layers) has the plain layout and never drops.
//
// All blocks live in one address range reserved up front (capacity bytes, committed by the OS
// only when touched; transparent huge pages where the kernel offers them), so block b starts
// at base + b * block_stride. Freed blocks stay resident for reuse ("warm", up to
// retain_free_bytes) or are given back to the OS ("cold"); ReleaseFreeMemory gives back the
// warm ones. A block handed out by Allocate is all zero bytes (warm blocks are cleared on
// reuse), so no data of one sequence can ever show up in another.
//
// Never grows past its capacity, nor past a shared MemoryBudget when one is given: an
// allocation that does not fit returns ResourceExhausted saying how much was needed and how
// much is free. Capacity counts the bytes blocks hold: a block whose window layers' pages went
// back (DropWindowRows) holds only window_offset bytes, so a sliding-window pool holds more
// blocks than capacity / block_stride (its address range is reserved for that many). References are counted per owner (KvOwner) for memory accounting.
//
// Thread-safe: all methods may be called from any thread. Block contents are not guarded:
// whoever holds a block's only reference may write it; shared blocks are read-only by
// convention (SequenceCache copies them on write).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kvtier/format.h"
#include "kvtier/kv_types.h"
#include "kvtier/paged_kv_view.h"
#include "kvtier/status.h"

namespace kvtier {

// A byte budget shared by several pools (e.g. the active pool and a prefix-cache pool in
// another format). Thread-safe.
class MemoryBudget {
 public:
  explicit MemoryBudget(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Adds `bytes` to the used total if it stays within capacity.
  bool TryCharge(uint64_t bytes);
  void Release(uint64_t bytes);
  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  const uint64_t capacity_;
  std::atomic<uint64_t> used_{0};
};

// Byte geometry of one block. Computed once per pool; plain value.
struct KvBlockLayout {
  KvShape shape;
  Format k_format;
  Format v_format;
  uint32_t block_tokens = 0;
  size_t k_row_bytes = 0;     // one KV head of one token
  size_t v_row_bytes = 0;
  size_t k_token_stride = 0;  // n_kv_heads * k_row_bytes
  size_t v_token_stride = 0;
  size_t k_region_bytes = 0;  // block_tokens * k_token_stride rounded up to 64
  size_t v_region_bytes = 0;
  size_t layer_stride = 0;    // k_region_bytes + v_region_bytes
  size_t payload_bytes = 0;   // block_tokens * KvBytesPerToken (what the tokens need)
  size_t block_stride = 0;    // n_layers * layer_stride rounded up to 4 KiB (whole pages)
  // Sliding-window layout (all empty / zero for a dense model):
  std::vector<uint32_t> layer_window;  // [n_layers] window in tokens, 0 = global; or empty
  std::vector<size_t> layer_offset;    // [n_layers] byte offset of each layer; or empty
  uint32_t max_window = 0;    // the largest window of a window layer (0: no window layers)
  size_t window_offset = 0;   // start of the window layers' pages (page aligned)
  size_t window_bytes = 0;    // block_stride - window_offset when there are window layers

  static Result<KvBlockLayout> Make(const KvShape& shape, const Format& k_format,
                                    const Format& v_format, uint32_t block_tokens);
  // As above; layer_window [n_layers] gives each layer's window (0 = global). All zero (or
  // empty) is the dense layout.
  static Result<KvBlockLayout> Make(const KvShape& shape, const Format& k_format,
                                    const Format& v_format, uint32_t block_tokens,
                                    std::span<const uint32_t> layer_window);
  bool has_window_layers() const { return max_window > 0; }
  uint32_t window_of(uint32_t layer) const {
    return layer_window.empty() ? 0 : layer_window[layer];
  }
  size_t k_offset(uint32_t layer) const {
    return layer_offset.empty() ? layer * layer_stride : layer_offset[layer];
  }
  size_t v_offset(uint32_t layer) const { return k_offset(layer) + k_region_bytes; }
  // Bytes a running sequence of `tokens` tokens holds at most when it computes up to `chunk`
  // tokens per forward pass (admission: kvtier/engine.h): tokens / block_tokens + 2 whole
  // blocks for a dense layout; with window layers, the global pages of as many blocks plus
  // window pages only for the blocks a window query can still attend (SequenceCache::
  // DropOutsideWindow gives the others back): the window, the chunk in flight, one kept
  // resume point's window (KeepWindowRowsAt) and partial blocks.
  uint64_t RowBytes(uint64_t tokens, uint32_t chunk) const;
  // "K q8_0 / V q4_0, 32-token blocks of 1,032,192 bytes, 28 layers x 8 KV heads x ..."
  std::string ToString() const;
  // The paged view of `layer` over blocks laid out like this from `base` (a host pool's
  // memory, or a device pool's: the view only carries the pointers), for `n_rows` rows.
  PagedKvView View(const uint8_t* base, uint32_t layer, const PagedKvRow* rows,
                   uint32_t n_rows) const;
};

struct BlockPoolOptions {
  KvShape shape;
  Format k_format = Format::F16();
  Format v_format = Format::F16();
  uint32_t block_tokens = 32;
  uint64_t capacity_bytes = 0;  // required: at least one block
  // Optional budget shared with other pools; the pool charges it for every block it keeps in
  // RAM (in use or warm), so resident blocks must fit both it and capacity.
  std::shared_ptr<MemoryBudget> budget;
  // Freed blocks kept resident for fast reuse, at most this many bytes (default: all).
  uint64_t retain_free_bytes = UINT64_MAX;
  // [n_layers] sliding window per layer in tokens (0 = global), or empty: every layer global.
  // With window layers the blocks use the split layout above and DropWindowRows works.
  std::vector<uint32_t> layer_window;
};

// A snapshot of a pool's memory. Bytes are whole blocks (block_stride each).
struct PoolStats {
  uint64_t capacity_bytes = 0;
  uint32_t capacity_blocks = 0;   // whole blocks that fit (capacity_bytes / block_stride)
  // capacity_bytes less what the blocks in use hold (a dropped block only its global part):
  // what Allocate can still hand out, block_stride bytes per block.
  uint64_t free_bytes = 0;
  uint32_t blocks_in_use = 0;     // blocks with at least one reference
  uint32_t shared_blocks = 0;     // blocks with two or more references
  uint64_t bytes_in_use = 0;      // blocks_in_use * block_stride: exact memory held
  uint64_t free_resident_bytes = 0;  // freed blocks kept in RAM for reuse (warm)
  uint64_t resident_bytes = 0;    // bytes_in_use + free_resident_bytes (what the budget holds)
  uint64_t k_bytes_in_use = 0;    // of which K payload (k_format)
  uint64_t v_bytes_in_use = 0;    // of which V payload (v_format)
  // Bytes of blocks with at least one reference from each owner; a block shared by two
  // owners counts for both.
  std::array<uint64_t, kNumKvOwners> owner_bytes{};
  uint64_t copied_bytes = 0;      // K/V bytes ever copied (copy-on-write, same-format copies)
  uint64_t failed_allocations = 0;
  uint64_t refcount_errors = 0;   // Unref of a reference that did not exist (a bug)
  // Blocks in use whose window layers' pages went back to the OS (DropWindowRows); their
  // window_bytes are not in bytes_in_use / resident_bytes / owner_bytes / k / v bytes.
  uint32_t window_dropped_blocks = 0;
  uint64_t window_dropped_bytes_total = 0;  // window bytes ever given back this way
};

// Memory of several pools (e.g. the active pool and a prefix-cache pool in a store format),
// summed. by_format maps a format name ("q4_0", "affine4g64:f16") to the K and V payload
// bytes in use in it; padding is what block rounding adds.
struct KvMemoryReport {
  uint64_t bytes_in_use = 0;
  uint64_t resident_bytes = 0;
  uint64_t padding_bytes = 0;
  std::array<uint64_t, kNumKvOwners> owner_bytes{};
  std::vector<std::pair<std::string, uint64_t>> by_format;  // sorted by name
};
class BlockPool;
KvMemoryReport CollectKvMemory(std::span<const BlockPool* const> pools);

class BlockPool : public std::enable_shared_from_this<BlockPool> {
 public:
  static Result<std::shared_ptr<BlockPool>> Create(const BlockPoolOptions& options);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  const KvBlockLayout& layout() const { return layout_; }
  const KvShape& shape() const { return layout_.shape; }
  const Format& k_format() const { return layout_.k_format; }
  const Format& v_format() const { return layout_.v_format; }
  uint32_t block_tokens() const { return layout_.block_tokens; }
  // Whole blocks that fit in the capacity (a window pool may hold more: see above).
  uint32_t capacity_blocks() const { return whole_blocks_; }

  // Appends `n` zeroed blocks, each with one reference from `owner`, to *out. All or nothing:
  // on ResourceExhausted nothing is allocated. `what` names the caller in the error.
  Status Allocate(size_t n, KvOwner owner, std::vector<BlockId>* out, const char* what);
  // As Allocate, but a reused block keeps its former owner's bytes (no clearing pass). Only
  // for a caller that writes every byte of each block before any other owner can see it,
  // or gives the block back unseen (the SSD tier's Load: rows from the file, zeros between).
  Status AllocateUncleared(size_t n, KvOwner owner, std::vector<BlockId>* out,
                           const char* what);
  // Adds one reference from `owner` to each id. All or nothing: an id that is not a live
  // block of this pool is InvalidArgument and nothing changes.
  Status Ref(std::span<const BlockId> ids, KvOwner owner);
  // Drops one reference from `owner` of each id; a block whose last reference goes is
  // zeroed and reused. An id without such a reference is a caller bug: it is skipped, logged
  // to stderr and counted in PoolStats::refcount_errors (tests require 0).
  void Unref(std::span<const BlockId> ids, KvOwner owner);
  // Moves one reference of each id from `from` to `to` (accounting only). Same checks as Ref.
  Status MoveOwner(std::span<const BlockId> ids, KvOwner from, KvOwner to);
  uint32_t RefCount(BlockId id) const;
  // OK if `id` is a block of this pool with at least one reference.
  Status CheckBlock(BlockId id) const;
  // Gives the window layers' pages of block `id` back to the OS (and to the budget): its
  // window layers' rows read as zeros from now on, its global layers' rows are kept. Only
  // for the holder of the block's only reference, once no query of any holder can attend
  // those rows (SequenceCache::DropOutsideWindow). An error when the pool has no
  // window layers or the block is shared (InvalidArgument); dropping twice is a no-op. The block is whole
  // again once freed and reallocated.
  Status DropWindowRows(BlockId id);
  bool WindowRowsDropped(BlockId id) const;
  // The block's "window rows absent" flag: its window layers' rows are not the tokens' K/V
  // (dropped here, or copied, converted or loaded from a block that had them dropped), so no
  // resume point may need them (SequenceCache::WindowRowsPresent). Set by DropWindowRows, by
  // MarkWindowRowsAbsent (any pool, window layers or not: a dense store-format pool of a
  // window model carries it too), cleared when the block is freed. The tiers' block headers
  // carry it (docs/formats/kv-block-file.md, flags). MarkWindowRowsAbsent leaves the bytes as
  // they are; InvalidArgument for a block that is not live.
  Status MarkWindowRowsAbsent(BlockId id);
  bool WindowRowsAbsent(BlockId id) const;

  uint8_t* block_data(BlockId id) { return base_ + static_cast<size_t>(id) * layout_.block_stride; }
  const uint8_t* block_data(BlockId id) const {
    return base_ + static_cast<size_t>(id) * layout_.block_stride;
  }
  // A view of `layer` over rows the caller provides (see paged_kv_view.h).
  PagedKvView View(uint32_t layer, const PagedKvRow* rows, uint32_t n_rows) const;

  PoolStats Stats() const;
  // Gives the warm free blocks back to the OS (and to the budget); returns the bytes released.
  uint64_t ReleaseFreeMemory();
  // Sum of all references (tests compare it with the references they know of).
  uint64_t TotalRefs() const;
  // Adds to the copied_bytes counter (SequenceCache's copy-on-write, conversions).
  void CountCopied(uint64_t bytes) { copied_bytes_.fetch_add(bytes, std::memory_order_relaxed); }

 private:
  BlockPool(const BlockPoolOptions& options, const KvBlockLayout& layout, uint8_t* map,
            size_t map_bytes, uint8_t* base, uint32_t max_blocks);
  // Gives `ids` (free, not on any list) back to the OS and puts them on the cold list.
  void Release(std::span<const BlockId> ids);
  Status AllocateImpl(size_t n, KvOwner owner, std::vector<BlockId>* out, const char* what,
                      bool clear);
  // Bytes Allocate can still hand out (capacity less what blocks in use hold); mu_ held.
  uint64_t FreeBytesLocked() const;
  std::string FullMessage(size_t n, const char* what, const char* limit, uint64_t free_bytes,
                          uint64_t cap_bytes) const;

  const KvBlockLayout layout_;
  const uint64_t capacity_bytes_;
  const std::shared_ptr<MemoryBudget> budget_;
  uint8_t* const base_;           // [max_blocks_ * block_stride] of reserved address range
  const uint32_t max_blocks_;     // block ids (address range); capacity bytes limit use
  const uint32_t whole_blocks_;   // capacity_bytes / block_stride
  uint8_t* const map_;            // the mapping as mmap returned it (base_ is 2 MiB aligned)
  const size_t map_bytes_;
  const uint64_t retain_free_bytes_;

  mutable std::mutex mu_;
  struct Meta {
    std::array<uint32_t, kNumKvOwners> refs{};
    uint32_t total = 0;
    // Window layers' pages given back (DropWindowRows): 1 while referenced, 2 once freed and
    // on its way back to the OS (Release then charges the budget the global part only).
    uint8_t dropped = 0;
    bool window_absent = false;  // WindowRowsAbsent (with dropped != 0 or marked)
  };
  std::vector<Meta> meta_;          // [max_blocks_]
  std::vector<BlockId> warm_;       // freed, resident, dirty: cleared when reused (LIFO)
  std::vector<BlockId> cold_;       // freed and given back to the OS: read as zero
  uint32_t next_fresh_ = 0;         // blocks [next_fresh_, max_blocks_) never used yet
  uint32_t in_use_ = 0;             // referenced blocks, plus blocks on their way to cold_
  uint32_t releasing_ = 0;          // of in_use_, blocks on their way to cold_
  uint32_t shared_ = 0;
  uint64_t total_refs_ = 0;
  std::array<uint32_t, kNumKvOwners> owner_blocks_{};
  std::array<uint32_t, kNumKvOwners> owner_dropped_{};  // of owner_blocks_, dropped ones
  uint32_t dropped_ = 0;            // referenced blocks with dropped window rows (state 1)
  uint64_t dropped_total_bytes_ = 0;
  uint64_t failed_allocations_ = 0;
  uint64_t refcount_errors_ = 0;
  std::atomic<uint64_t> copied_bytes_{0};
};

}  // namespace kvtier
