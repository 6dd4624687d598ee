// BlockPool: reserved address range, free list, per-owner reference counts, zeroing on free.
// Thread-safety: every method takes mu_ except the zeroing of freed blocks, which happens
// while those blocks belong to nobody (not yet on the free list).
#include "kvtier/block_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "base/strings.h"

namespace kvtier {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kHugePage = 2 << 20;  // arena alignment, so huge pages can back it

size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

std::string BlocksAndBytes(uint64_t blocks, uint64_t stride) {
  return GroupDigits(blocks) + (blocks == 1 ? " block, " : " blocks, ") +
         DescribeBytes(blocks * stride);
}

}  // namespace

bool MemoryBudget::TryCharge(uint64_t bytes) {
  uint64_t cur = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > capacity_ || cur > capacity_ - bytes) return false;
  } while (!used_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
  return true;
}

void MemoryBudget::Release(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

Result<KvBlockLayout> KvBlockLayout::Make(const KvShape& shape, const Format& k_format,
                                          const Format& v_format, uint32_t block_tokens) {
  return Make(shape, k_format, v_format, block_tokens, {});
}

Result<KvBlockLayout> KvBlockLayout::Make(const KvShape& shape, const Format& k_format,
                                          const Format& v_format, uint32_t block_tokens,
                                          std::span<const uint32_t> layer_window) {
  KVTIER_RETURN_IF_ERROR(shape.Validate());
  if (!layer_window.empty() && layer_window.size() != shape.n_layers) {
    return Status::InvalidArgument("layer_window has " + std::to_string(layer_window.size()) +
                                   " entries, expected one per layer (" +
                                   std::to_string(shape.n_layers) + ")");
  }
  KVTIER_RETURN_IF_ERROR(k_format.Validate());
  KVTIER_RETURN_IF_ERROR(v_format.Validate());
  if (Status s = k_format.CheckHeadDim(shape.head_dim); !s.ok()) {
    return Status::InvalidArgument("K format: " + s.message());
  }
  if (Status s = v_format.CheckHeadDim(shape.head_dim); !s.ok()) {
    return Status::InvalidArgument("V format: " + s.message());
  }
  if (block_tokens == 0 || block_tokens > 4096) {
    return Status::InvalidArgument("block_tokens " + std::to_string(block_tokens) +
                                   " invalid: expected 1..4096 tokens per block");
  }
  if (v_format.is_token_grouped()) {
    return Status::InvalidArgument("V format " + v_format.name() +
                                   " groups values per channel across tokens: it is a K format "
                                   "(use e.g. rot4s0 or q8_0 for V)");
  }
  if (k_format.is_token_grouped() && block_tokens % k_format.group != 0) {
    return Status::InvalidArgument("K format " + k_format.name() + " groups " +
                                   std::to_string(k_format.group) + " tokens, but blocks hold " +
                                   std::to_string(block_tokens) + ": block_tokens must be a "
                                   "multiple of " + std::to_string(k_format.group) +
                                   " (e.g. --block-tokens " + std::to_string(k_format.group) + ")");
  }
  KvBlockLayout l;
  l.shape = shape;
  l.k_format = k_format;
  l.v_format = v_format;
  l.block_tokens = block_tokens;
  l.k_row_bytes = k_format.row_bytes(shape.head_dim);
  l.v_row_bytes = v_format.row_bytes(shape.head_dim);
  l.k_token_stride = shape.n_kv_heads * l.k_row_bytes;
  l.v_token_stride = shape.n_kv_heads * l.v_row_bytes;
  l.k_region_bytes = RoundUp(block_tokens * l.k_token_stride, 64);
  l.v_region_bytes = RoundUp(block_tokens * l.v_token_stride, 64);
  l.layer_stride = l.k_region_bytes + l.v_region_bytes;
  l.payload_bytes = block_tokens * KvBytesPerToken(shape, k_format, v_format);
  // Whole pages per block, so a freed block can be given back to the OS on its own.
  l.block_stride = RoundUp(static_cast<size_t>(shape.n_layers) * l.layer_stride, kPage);
  uint32_t n_window = 0;
  for (uint32_t w : layer_window) {
    n_window += w > 0;
    l.max_window = std::max(l.max_window, w);
  }
  if (n_window > 0) {
    // Global layers first, then the window layers from a page boundary (the header).
    l.layer_window.assign(layer_window.begin(), layer_window.end());
    l.layer_offset.resize(shape.n_layers);
    const size_t n_global = shape.n_layers - n_window;
    l.window_offset = RoundUp(n_global * l.layer_stride, kPage);
    size_t g = 0, w = 0;
    for (uint32_t layer = 0; layer < shape.n_layers; ++layer) {
      l.layer_offset[layer] = layer_window[layer] > 0 ? l.window_offset + (w++) * l.layer_stride
                                                      : (g++) * l.layer_stride;
    }
    l.window_bytes = RoundUp(n_window * l.layer_stride, kPage);
    l.block_stride = l.window_offset + l.window_bytes;
  }
  return l;
}

uint64_t KvBlockLayout::RowBytes(uint64_t tokens, uint32_t chunk) const {
  const uint64_t blocks = tokens / block_tokens + 2;
  if (!has_window_layers()) return blocks * block_stride;
  const uint64_t window_blocks = (uint64_t{max_window} + block_tokens - 1) / block_tokens;
  const uint64_t live = 2 * window_blocks + (uint64_t{chunk} + block_tokens - 1) / block_tokens + 3;
  return blocks * window_offset + std::min(blocks, live) * window_bytes;
}

std::string KvBlockLayout::ToString() const {
  return "K " + k_format.spec() + " / V " + v_format.spec() + ", " +
         std::to_string(block_tokens) + "-token blocks of " + DescribeBytes(block_stride) +
         ", " + shape.ToString();
}

PagedKvView KvBlockLayout::View(const uint8_t* base, uint32_t layer, const PagedKvRow* rows,
                                uint32_t n_rows) const {
  PagedKvView v;
  v.k_base = base + k_offset(layer);
  v.v_base = base + v_offset(layer);
  v.block_stride = block_stride;
  v.k_token_stride = k_token_stride;
  v.k_head_stride = k_row_bytes;
  v.v_token_stride = v_token_stride;
  v.v_head_stride = v_row_bytes;
  v.block_tokens = block_tokens;
  v.n_kv_heads = shape.n_kv_heads;
  v.head_dim = shape.head_dim;
  v.k_format = k_format;
  v.v_format = v_format;
  v.n_rows = n_rows;
  v.rows = rows;
  v.window = window_of(layer);
  return v;
}

Result<std::shared_ptr<BlockPool>> BlockPool::Create(const BlockPoolOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(
      KvBlockLayout layout,
      KvBlockLayout::Make(options.shape, options.k_format, options.v_format, options.block_tokens,
                          options.layer_window));
  const uint64_t stride = layout.block_stride;
  if (options.capacity_bytes < stride) {
    return Status::InvalidArgument("KV pool capacity " + DescribeBytes(options.capacity_bytes) +
                                   " is less than one block: " + layout.ToString());
  }
  // Address range: a window pool's blocks may hold only their global layers' pages once
  // their window rows are dropped, so as many of those as the capacity holds (at most 64x
  // the whole blocks; MAP_NORESERVE: nothing is committed until written).
  uint64_t blocks64 = options.capacity_bytes / stride;
  if (layout.has_window_layers()) {
    blocks64 = std::min(options.capacity_bytes / std::max(layout.window_offset, kPage),
                        64 * blocks64);
  }
  const uint32_t max_blocks =
      static_cast<uint32_t>(std::min<uint64_t>(blocks64, static_cast<uint64_t>(INT32_MAX)));
  const size_t reserved = static_cast<size_t>(max_blocks) * stride;
  const size_t map_bytes = reserved + kHugePage;
  void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return Status::ResourceExhausted("KV pool: cannot reserve " + DescribeBytes(reserved) +
                                     " of address space for " + GroupDigits(max_blocks) +
                                     " blocks (" + std::strerror(errno) + ")");
  }
  auto* map = static_cast<uint8_t*>(p);
  uint8_t* base = map + (kHugePage - reinterpret_cast<uintptr_t>(map) % kHugePage) % kHugePage;
  // Fewer page faults (and TLB misses) on big caches; ignored where THP is off.
  (void)madvise(base, reserved, MADV_HUGEPAGE);
  return std::shared_ptr<BlockPool>(
      new BlockPool(options, layout, map, map_bytes, base, max_blocks));
}

BlockPool::BlockPool(const BlockPoolOptions& options, const KvBlockLayout& layout, uint8_t* map,
                     size_t map_bytes, uint8_t* base, uint32_t max_blocks)
    : layout_(layout),
      capacity_bytes_(options.capacity_bytes),
      budget_(options.budget),
      base_(base),
      max_blocks_(max_blocks),
      whole_blocks_(static_cast<uint32_t>(std::min<uint64_t>(
          options.capacity_bytes / layout.block_stride, static_cast<uint64_t>(INT32_MAX)))),
      map_(map),
      map_bytes_(map_bytes),
      retain_free_bytes_(options.retain_free_bytes),
      meta_(max_blocks) {}

BlockPool::~BlockPool() {
  if (budget_) {
    budget_->Release((static_cast<uint64_t>(in_use_) + warm_.size()) * layout_.block_stride -
                     uint64_t{dropped_} * layout_.window_bytes);
  }
  munmap(map_, map_bytes_);
}

std::string BlockPool::FullMessage(size_t n, const char* what, const char* limit,
                                   uint64_t free_bytes, uint64_t cap_bytes) const {
  const uint64_t stride = layout_.block_stride;
  return std::string(limit) + " full: " + what + " needs " + BlocksAndBytes(n, stride) +
         "; free: " + DescribeBytes(free_bytes) + " of " + DescribeBytes(cap_bytes) + " [" +
         layout_.ToString() + "]";
}

Status BlockPool::Allocate(size_t n, KvOwner owner, std::vector<BlockId>* out, const char* what) {
  return AllocateImpl(n, owner, out, what, /*clear=*/true);
}

Status BlockPool::AllocateUncleared(size_t n, KvOwner owner, std::vector<BlockId>* out,
                                    const char* what) {
  return AllocateImpl(n, owner, out, what, /*clear=*/false);
}

Status BlockPool::AllocateImpl(size_t n, KvOwner owner, std::vector<BlockId>* out,
                               const char* what, bool clear) {
  if (n == 0) return Status::OK();
  const uint64_t stride = layout_.block_stride;
  const size_t o = static_cast<size_t>(owner);
  const size_t first = out->size();
  size_t n_warm = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Bytes, not blocks: a block with dropped window rows holds window_offset bytes.
    const uint64_t free_bytes = FreeBytesLocked();
    if (n > max_blocks_ - in_use_ || n * stride > free_bytes) {
      ++failed_allocations_;
      return Status::ResourceExhausted(FullMessage(
          n, what, "KV block pool", free_bytes,
          std::min<uint64_t>(capacity_bytes_, static_cast<uint64_t>(max_blocks_) * stride)));
    }
    // Warm blocks are already resident (and charged); the others need budget.
    n_warm = std::min(n, warm_.size());
    if (budget_ && n > n_warm && !budget_->TryCharge((n - n_warm) * stride)) {
      ++failed_allocations_;
      const uint64_t used = budget_->used();
      const uint64_t cap = budget_->capacity();
      return Status::ResourceExhausted(
          FullMessage(n, what, "KV memory budget", used < cap ? cap - used : 0, cap));
    }
    for (size_t i = 0; i < n; ++i) {
      BlockId id;
      if (i < n_warm) {
        id = warm_.back();
        warm_.pop_back();
      } else if (!cold_.empty()) {
        id = cold_.back();
        cold_.pop_back();
      } else {
        id = static_cast<BlockId>(next_fresh_++);
      }
      Meta& m = meta_[static_cast<size_t>(id)];
      m.refs = {};
      m.refs[o] = 1;
      m.total = 1;
      m.window_absent = false;
      out->push_back(id);
    }
    in_use_ += static_cast<uint32_t>(n);
    total_refs_ += n;
    owner_blocks_[o] += static_cast<uint32_t>(n);
  }
  // Warm blocks hold a former owner's bytes: clear them (they are ours alone now).
  if (clear) {
    for (size_t i = 0; i < n_warm; ++i) std::memset(block_data((*out)[first + i]), 0, stride);
  }
  return Status::OK();
}

Status BlockPool::CheckBlock(BlockId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id < 0 || static_cast<uint32_t>(id) >= max_blocks_ || meta_[static_cast<size_t>(id)].total == 0) {
    return Status::InvalidArgument("block id " + std::to_string(id) +
                                   " is not a live block of this pool (" +
                                   GroupDigits(max_blocks_) + " blocks)");
  }
  return Status::OK();
}

Status BlockPool::Ref(std::span<const BlockId> ids, KvOwner owner) {
  const size_t o = static_cast<size_t>(owner);
  std::lock_guard<std::mutex> lock(mu_);
  for (BlockId id : ids) {
    if (id < 0 || static_cast<uint32_t>(id) >= max_blocks_ ||
        meta_[static_cast<size_t>(id)].total == 0) {
      return Status::InvalidArgument("Ref: block id " + std::to_string(id) +
                                     " is not a live block of this pool");
    }
  }
  for (BlockId id : ids) {
    Meta& m = meta_[static_cast<size_t>(id)];
    if (m.refs[o]++ == 0) {
      ++owner_blocks_[o];
      owner_dropped_[o] += m.dropped != 0;
    }
    if (m.total++ == 1) ++shared_;
  }
  total_refs_ += ids.size();
  return Status::OK();
}

void BlockPool::Unref(std::span<const BlockId> ids, KvOwner owner) {
  const size_t o = static_cast<size_t>(owner);
  const uint64_t stride = layout_.block_stride;
  std::vector<BlockId> release;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (BlockId id : ids) {
      if (id < 0 || static_cast<uint32_t>(id) >= max_blocks_ ||
          meta_[static_cast<size_t>(id)].refs[o] == 0) {
        ++refcount_errors_;
        std::fprintf(stderr, "kvtier: BUG: Unref of block %d without a reference from %s\n", id,
                     std::string(KvOwnerName(owner)).c_str());
        continue;
      }
      Meta& m = meta_[static_cast<size_t>(id)];
      if (--m.refs[o] == 0) {
        --owner_blocks_[o];
        owner_dropped_[o] -= m.dropped != 0;
      }
      --total_refs_;
      if (--m.total == 1) --shared_;
      if (m.total > 0) continue;
      if (m.dropped != 0) {
        m.dropped = 2;  // freed: no longer in dropped_ (Stats), Release settles the budget
        --dropped_;
      }
      // A block with dropped window pages goes back to the OS whole (Release settles it).
      if (m.dropped == 0 && (warm_.size() + 1) * stride <= retain_free_bytes_) {
        warm_.push_back(id);  // stays resident (and charged); cleared when reused
        --in_use_;
      } else {
        release.push_back(id);
        ++releasing_;
      }
    }
  }
  if (!release.empty()) Release(release);
}

void BlockPool::Release(std::span<const BlockId> ids) {
  const size_t stride = layout_.block_stride;
  for (BlockId id : ids) {
    uint8_t* p = block_data(id);
    // The pages read as zero when next touched; if the kernel refuses, clear them here.
    if (madvise(p, stride, MADV_DONTNEED) != 0) std::memset(p, 0, stride);
  }
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t charged = 0;
  for (BlockId id : ids) {
    cold_.push_back(id);
    Meta& m = meta_[static_cast<size_t>(id)];
    charged += m.dropped == 2 ? stride - layout_.window_bytes : stride;
    m.dropped = 0;
  }
  in_use_ -= static_cast<uint32_t>(ids.size());
  releasing_ -= static_cast<uint32_t>(ids.size());
  if (budget_) budget_->Release(charged);
}

Status BlockPool::DropWindowRows(BlockId id) {
  if (!layout_.has_window_layers()) {
    return Status::InvalidArgument("DropWindowRows: the pool has no window layers");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (id < 0 || static_cast<uint32_t>(id) >= max_blocks_ ||
        meta_[static_cast<size_t>(id)].total == 0) {
      return Status::InvalidArgument("DropWindowRows: block id " + std::to_string(id) +
                                     " is not a live block of this pool");
    }
    Meta& m = meta_[static_cast<size_t>(id)];
    if (m.dropped != 0) return Status::OK();
    if (m.total != 1) {
      return Status::InvalidArgument("DropWindowRows: block " + std::to_string(id) + " has " +
                                        std::to_string(m.total) +
                                        " references; only a sole holder may drop rows");
    }
    m.dropped = 1;
    m.window_absent = true;
    ++dropped_;
    dropped_total_bytes_ += layout_.window_bytes;
    for (size_t o = 0; o < m.refs.size(); ++o) owner_dropped_[o] += m.refs[o] > 0;
  }
  uint8_t* p = block_data(id) + layout_.window_offset;
  // The pages read as zero from now on; if the kernel refuses, clear them (no memory saved).
  if (madvise(p, layout_.window_bytes, MADV_DONTNEED) != 0) std::memset(p, 0, layout_.window_bytes);
  if (budget_) budget_->Release(layout_.window_bytes);
  return Status::OK();
}

uint64_t BlockPool::FreeBytesLocked() const {
  const uint64_t stride = layout_.block_stride;
  const uint64_t held =
      uint64_t{in_use_} * stride - uint64_t{dropped_} * layout_.window_bytes;
  const uint64_t by_bytes = held < capacity_bytes_ ? capacity_bytes_ - held : 0;
  return std::min(by_bytes, uint64_t{max_blocks_ - in_use_} * stride);
}

bool BlockPool::WindowRowsDropped(BlockId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id < 0 || static_cast<uint32_t>(id) >= max_blocks_) return false;
  return meta_[static_cast<size_t>(id)].dropped != 0;
}

Status BlockPool::MarkWindowRowsAbsent(BlockId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id < 0 || static_cast<uint32_t>(id) >= max_blocks_ ||
      meta_[static_cast<size_t>(id)].total == 0) {
    return Status::InvalidArgument("MarkWindowRowsAbsent: block id " + std::to_string(id) +
                                   " is not a live block of this pool");
  }
  meta_[static_cast<size_t>(id)].window_absent = true;
  return Status::OK();
}

bool BlockPool::WindowRowsAbsent(BlockId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id < 0 || static_cast<uint32_t>(id) >= max_blocks_) return false;
  const Meta& m = meta_[static_cast<size_t>(id)];
  return m.total > 0 && (m.dropped != 0 || m.window_absent);
}

uint64_t BlockPool::ReleaseFreeMemory() {
  std::vector<BlockId> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ids.swap(warm_);
    in_use_ += static_cast<uint32_t>(ids.size());  // in transit: not allocatable meanwhile
    releasing_ += static_cast<uint32_t>(ids.size());
  }
  if (!ids.empty()) Release(ids);
  return ids.size() * layout_.block_stride;
}

Status BlockPool::MoveOwner(std::span<const BlockId> ids, KvOwner from, KvOwner to) {
  if (from == to) return Status::OK();
  const size_t f = static_cast<size_t>(from);
  const size_t t = static_cast<size_t>(to);
  std::lock_guard<std::mutex> lock(mu_);
  // Count how many references each id needs, so repeated ids are checked correctly.
  std::vector<BlockId> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    const BlockId id = sorted[i];
    if (id < 0 || static_cast<uint32_t>(id) >= max_blocks_ ||
        meta_[static_cast<size_t>(id)].refs[f] < j - i) {
      return Status::InvalidArgument("MoveOwner: block " + std::to_string(id) + " has fewer than " +
                                     std::to_string(j - i) + " references from " +
                                     std::string(KvOwnerName(from)));
    }
    i = j;
  }
  for (BlockId id : ids) {
    Meta& m = meta_[static_cast<size_t>(id)];
    if (--m.refs[f] == 0) {
      --owner_blocks_[f];
      owner_dropped_[f] -= m.dropped != 0;
    }
    if (m.refs[t]++ == 0) {
      ++owner_blocks_[t];
      owner_dropped_[t] += m.dropped != 0;
    }
  }
  return Status::OK();
}

uint32_t BlockPool::RefCount(BlockId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id < 0 || static_cast<uint32_t>(id) >= max_blocks_) return 0;
  return meta_[static_cast<size_t>(id)].total;
}

PagedKvView BlockPool::View(uint32_t layer, const PagedKvRow* rows, uint32_t n_rows) const {
  return layout_.View(base_, layer, rows, n_rows);
}

PoolStats BlockPool::Stats() const {
  const uint64_t stride = layout_.block_stride;
  const uint64_t k_per_block =
      static_cast<uint64_t>(layout_.shape.n_layers) * layout_.block_tokens * layout_.k_token_stride;
  const uint64_t v_per_block =
      static_cast<uint64_t>(layout_.shape.n_layers) * layout_.block_tokens * layout_.v_token_stride;
  uint64_t n_window_layers = 0;
  for (uint32_t w : layout_.layer_window) n_window_layers += w > 0;
  const uint64_t k_window_per_block = n_window_layers * layout_.block_tokens * layout_.k_token_stride;
  const uint64_t v_window_per_block = n_window_layers * layout_.block_tokens * layout_.v_token_stride;
  std::lock_guard<std::mutex> lock(mu_);
  PoolStats s;
  s.capacity_bytes = capacity_bytes_;
  s.capacity_blocks = whole_blocks_;
  s.free_bytes = FreeBytesLocked();
  const uint64_t used = in_use_ - releasing_;
  s.blocks_in_use = static_cast<uint32_t>(used);
  s.shared_blocks = shared_;
  const uint64_t wb = layout_.window_bytes;
  s.bytes_in_use = used * stride - uint64_t{dropped_} * wb;
  s.free_resident_bytes = warm_.size() * stride;
  s.resident_bytes = s.bytes_in_use + s.free_resident_bytes;
  s.k_bytes_in_use = used * k_per_block - dropped_ * k_window_per_block;
  s.v_bytes_in_use = used * v_per_block - dropped_ * v_window_per_block;
  for (size_t o = 0; o < s.owner_bytes.size(); ++o) {
    s.owner_bytes[o] = uint64_t{owner_blocks_[o]} * stride - uint64_t{owner_dropped_[o]} * wb;
  }
  s.window_dropped_blocks = dropped_;
  s.window_dropped_bytes_total = dropped_total_bytes_;
  s.copied_bytes = copied_bytes_.load(std::memory_order_relaxed);
  s.failed_allocations = failed_allocations_;
  s.refcount_errors = refcount_errors_;
  return s;
}

KvMemoryReport CollectKvMemory(std::span<const BlockPool* const> pools) {
  KvMemoryReport r;
  std::map<std::string, uint64_t> by_format;
  for (const BlockPool* p : pools) {
    const PoolStats s = p->Stats();
    r.bytes_in_use += s.bytes_in_use;
    r.resident_bytes += s.resident_bytes;
    r.padding_bytes += s.bytes_in_use - s.k_bytes_in_use - s.v_bytes_in_use;
    for (size_t o = 0; o < r.owner_bytes.size(); ++o) r.owner_bytes[o] += s.owner_bytes[o];
    by_format[p->k_format().spec()] += s.k_bytes_in_use;
    by_format[p->v_format().spec()] += s.v_bytes_in_use;
  }
  r.by_format.assign(by_format.begin(), by_format.end());
  return r;
}

uint64_t BlockPool::TotalRefs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_refs_;
}

}  // namespace kvtier
