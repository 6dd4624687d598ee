// SequenceCache: block table sharing, copy-on-write, quantize-on-append, trim with zeroing.
// Thread-compatible (see the header); BlockPool calls are thread-safe.
#include "kvtier/sequence_cache.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/strings.h"
#include "kvtier/quant.h"
#include "kvtier/quant_chan.h"

namespace kvtier {

// A block table: one reference per entry, from `owner`. Shared by forks until one changes.
struct SequenceCache::Table {
  std::shared_ptr<BlockPool> pool;
  KvOwner owner;
  std::vector<BlockId> ids;  // [ceil(tokens / block_tokens)] (plus reserved blocks)

  Table(std::shared_ptr<BlockPool> p, KvOwner o) : pool(std::move(p)), owner(o) {}
  ~Table() {
    if (!ids.empty()) pool->Unref(ids, owner);
  }
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;
};

SequenceCache::SequenceCache(std::shared_ptr<BlockPool> pool, KvOwner owner)
    : pool_(std::move(pool)), owner_(owner) {
  if (pool_) {
    table_ = std::make_shared<Table>(pool_, owner);
    len_.assign(pool_->shape().n_layers, 0);
    if (pool_->k_format().is_token_grouped()) k_tail_.assign(pool_->shape().n_layers, {});
  }
}

Result<SequenceCache> SequenceCache::FromBlocks(std::shared_ptr<BlockPool> pool,
                                                std::span<const BlockId> ids, uint32_t n_tokens,
                                                KvOwner owner) {
  if (!pool) return Status::InvalidArgument("SequenceCache::FromBlocks: no pool");
  if (n_tokens > kMaxTokens) {
    return Status::InvalidArgument("SequenceCache::FromBlocks: " + GroupDigits(n_tokens) +
                                   " tokens is more than the limit of " + GroupDigits(kMaxTokens));
  }
  const uint32_t bt = pool->block_tokens();
  const size_t want = (static_cast<size_t>(n_tokens) + bt - 1) / bt;
  if (ids.size() != want) {
    return Status::InvalidArgument("SequenceCache::FromBlocks: " + std::to_string(n_tokens) +
                                   " tokens need " + std::to_string(want) + " blocks of " +
                                   std::to_string(bt) + " tokens, got " +
                                   std::to_string(ids.size()));
  }
  SequenceCache s(std::move(pool), owner);
  KVTIER_RETURN_IF_ERROR(s.pool_->Ref(ids, owner));
  s.table_->ids.assign(ids.begin(), ids.end());
  std::fill(s.len_.begin(), s.len_.end(), n_tokens);
  s.min_len_ = s.max_len_ = n_tokens;
  return s;
}

SequenceCache SequenceCache::Fork() const {
  SequenceCache s;
  s.pool_ = pool_;
  s.table_ = table_;
  s.len_ = len_;
  s.min_len_ = min_len_;
  s.max_len_ = max_len_;
  s.window_scan_ = window_scan_;
  s.keep_points_ = keep_points_;
  s.owner_ = owner_;
  s.k_tail_ = k_tail_;  // shares the tails' values (never changed in place)
  return s;
}

Status SequenceCache::CheckUsable(const char* op) const {
  if (!pool_) return Status::InvalidArgument(std::string("SequenceCache::") + op + ": no pool");
  return Status::OK();
}

Status SequenceCache::CheckLayer(const char* op, uint32_t layer) const {
  KVTIER_RETURN_IF_ERROR(CheckUsable(op));
  if (layer >= len_.size()) {
    return Status::InvalidArgument(std::string("SequenceCache::") + op + ": layer " +
                                   std::to_string(layer) + " out of range: the model has " +
                                   std::to_string(len_.size()) + " layers (0.." +
                                   std::to_string(len_.size() - 1) + ")");
  }
  return Status::OK();
}

void SequenceCache::UpdateMinMax() {
  min_len_ = len_.empty() ? 0 : *std::min_element(len_.begin(), len_.end());
  max_len_ = len_.empty() ? 0 : *std::max_element(len_.begin(), len_.end());
}

std::span<const BlockId> SequenceCache::block_ids() const {
  if (!table_) return {};
  return table_->ids;
}

uint64_t SequenceCache::bytes() const {
  return pool_ ? n_blocks() * pool_->layout().block_stride : 0;
}

PagedKvRow SequenceCache::Row(uint32_t layer) const {
  PagedKvRow r;
  if (!table_) return r;
  r.block_table = table_->ids.data();
  r.n_blocks = static_cast<uint32_t>(table_->ids.size());
  r.length = layer_size(layer);
  return r;
}

Status SequenceCache::CloneTable(KvOwner owner, size_t n) {
  auto t = std::make_shared<Table>(pool_, owner);
  std::span<const BlockId> kept(table_->ids.data(), n);
  KVTIER_RETURN_IF_ERROR(pool_->Ref(kept, owner));
  t->ids.assign(kept.begin(), kept.end());
  table_ = std::move(t);
  return Status::OK();
}

Status SequenceCache::UnshareTable() {
  if (table_.use_count() == 1) return Status::OK();
  return CloneTable(owner_, table_->ids.size());
}

void SequenceCache::DropBlocksFrom(size_t keep) {
  if (keep >= table_->ids.size()) return;
  if (table_.use_count() > 1) {
    // Shared: our own shorter table, with references for the kept part only. Ref cannot
    // fail here: every block of a live table is live.
    (void)CloneTable(owner_, keep);
    return;
  }
  std::vector<BlockId> gone(table_->ids.begin() + static_cast<std::ptrdiff_t>(keep),
                            table_->ids.end());
  table_->ids.resize(keep);
  pool_->Unref(gone, owner_);
}

void SequenceCache::CopyValidRows(size_t i, BlockId from, BlockId to) {
  const KvBlockLayout& l = pool_->layout();
  const uint8_t* src = pool_->block_data(from);
  uint8_t* dst = pool_->block_data(to);
  const uint64_t start = static_cast<uint64_t>(i) * l.block_tokens;
  uint64_t copied = 0;
  for (uint32_t layer = 0; layer < len_.size(); ++layer) {
    const uint64_t valid = std::min<uint64_t>(
        l.block_tokens, len_[layer] > start ? len_[layer] - start : 0);
    if (valid == 0) continue;
    // Token-grouped K: the rows up to the group's end carry its parameters.
    std::memcpy(dst + l.k_offset(layer), src + l.k_offset(layer),
                l.k_format.stored_rows(0, valid) * l.k_token_stride);
    std::memcpy(dst + l.v_offset(layer), src + l.v_offset(layer), valid * l.v_token_stride);
    copied += valid * (l.k_token_stride + l.v_token_stride);
  }
  pool_->CountCopied(copied);
  if (pool_->WindowRowsAbsent(from)) (void)pool_->MarkWindowRowsAbsent(to);  // the copy is too
}

Status SequenceCache::MakeWritable(uint32_t from, uint32_t end, const char* what) {
  const uint32_t bt = pool_->block_tokens();
  const size_t need = (static_cast<size_t>(end) + bt - 1) / bt;
  const size_t first = from / bt;
  const size_t have = table_->ids.size();
  // Fast path: a table and blocks of our own, nothing to allocate.
  size_t n_cow = 0;
  if (table_.use_count() > 1) {
    n_cow = std::max(have, first) - first;  // after unsharing, every block is shared
  } else {
    for (size_t i = first; i < have; ++i) n_cow += pool_->RefCount(table_->ids[i]) > 1;
  }
  const size_t n_new = need > have ? need - have : 0;
  if (n_cow == 0 && n_new == 0) return Status::OK();

  std::vector<BlockId> fresh;
  fresh.reserve(n_cow + n_new);
  KVTIER_RETURN_IF_ERROR(pool_->Allocate(n_cow + n_new, owner_, &fresh, what));
  if (Status s = UnshareTable(); !s.ok()) {
    pool_->Unref(fresh, owner_);
    return s;
  }
  size_t next = 0;
  std::vector<BlockId> released;
  for (size_t i = first; i < have && n_cow > 0; ++i) {
    const BlockId old = table_->ids[i];
    if (pool_->RefCount(old) <= 1) continue;
    const BlockId nb = fresh[next++];
    CopyValidRows(i, old, nb);
    table_->ids[i] = nb;
    released.push_back(old);
    --n_cow;
  }
  pool_->Unref(released, owner_);
  // Blocks we did not need for copies (a racing holder let go meanwhile) become new blocks.
  table_->ids.insert(table_->ids.end(), fresh.begin() + static_cast<std::ptrdiff_t>(next),
                     fresh.end());
  // Never keep more than asked for plus what was there.
  if (table_->ids.size() > std::max(need, have)) {
    std::vector<BlockId> extra(table_->ids.begin() + static_cast<std::ptrdiff_t>(std::max(need, have)),
                               table_->ids.end());
    table_->ids.resize(std::max(need, have));
    pool_->Unref(extra, owner_);
  }
  return Status::OK();
}

Status SequenceCache::Reserve(uint32_t n_tokens) {
  KVTIER_RETURN_IF_ERROR(CheckUsable("Reserve"));
  if (n_tokens > kMaxTokens - max_len_) {
    return Status::InvalidArgument("SequenceCache::Reserve: " + GroupDigits(max_len_) + " + " +
                                   GroupDigits(n_tokens) + " tokens is more than the limit of " +
                                   GroupDigits(kMaxTokens));
  }
  return MakeWritable(min_len_, max_len_ + n_tokens, "reserving sequence tokens");
}

Status SequenceCache::ReserveLayer(uint32_t layer, uint32_t n_tokens) {
  KVTIER_RETURN_IF_ERROR(CheckLayer("ReserveLayer", layer));
  const uint32_t pos = len_[layer];
  if (n_tokens > kMaxTokens - pos) {
    return Status::InvalidArgument("SequenceCache::ReserveLayer: layer " + std::to_string(layer) +
                                   " would hold " + GroupDigits(uint64_t{pos} + n_tokens) +
                                   " tokens, more than the limit of " + GroupDigits(kMaxTokens));
  }
  return MakeWritable(pos, pos + n_tokens, "appending to a sequence");
}

void SequenceCache::ReleaseReserved(size_t keep_blocks) {
  if (!pool_) return;
  const uint32_t bt = pool_->block_tokens();
  DropBlocksFrom(std::max(keep_blocks, (static_cast<size_t>(max_len_) + bt - 1) / bt));
}

Status SequenceCache::Append(uint32_t layer, DType src_dtype, const void* k, const void* v,
                             uint32_t n_tokens) {
  KVTIER_RETURN_IF_ERROR(CheckLayer("Append", layer));
  if (static_cast<uint8_t>(src_dtype) > static_cast<uint8_t>(DType::kBF16)) {
    return Status::InvalidArgument("SequenceCache::Append: source dtype " +
                                   std::to_string(static_cast<int>(src_dtype)) +
                                   " invalid: expected f32, f16 or bf16");
  }
  if (n_tokens == 0) return Status::OK();
  if (k == nullptr || v == nullptr) {
    return Status::InvalidArgument(std::string("SequenceCache::Append: null ") +
                                   (k ? "V" : "K") + " data for " + std::to_string(n_tokens) +
                                   " tokens");
  }
  KVTIER_RETURN_IF_ERROR(ReserveLayer(layer, n_tokens));
  const uint32_t pos = len_[layer];

  const KvBlockLayout& l = pool_->layout();
  const size_t heads = l.shape.n_kv_heads;
  const size_t d = l.shape.head_dim;
  const size_t src_token_bytes = heads * d * DTypeSize(src_dtype);  // one token, all heads
  const auto* ks = static_cast<const uint8_t*>(k);
  const auto* vs = static_cast<const uint8_t*>(v);
  if (l.k_format.is_token_grouped()) {
    KVTIER_RETURN_IF_ERROR(AppendGroupedK(layer, pos, src_dtype, k, n_tokens));
    KVTIER_RETURN_IF_ERROR(ForEachPiece(
        layer, pos, n_tokens, [&](uint8_t*, uint8_t* vd, uint32_t n, uint32_t done) {
          return QuantizeRows(l.v_format, src_dtype, vs + done * src_token_bytes, n * heads, d, vd);
        }));
    len_[layer] = pos + n_tokens;
    UpdateMinMax();
    return Status::OK();
  }
  // Token-major blocks: n tokens x heads rows are contiguous in source and destination.
  KVTIER_RETURN_IF_ERROR(ForEachPiece(
      layer, pos, n_tokens, [&](uint8_t* kd, uint8_t* vd, uint32_t n, uint32_t done) {
        KVTIER_RETURN_IF_ERROR(
            QuantizeRows(l.k_format, src_dtype, ks + done * src_token_bytes, n * heads, d, kd));
        return QuantizeRows(l.v_format, src_dtype, vs + done * src_token_bytes, n * heads, d, vd);
      }));
  len_[layer] = pos + n_tokens;
  UpdateMinMax();
  return Status::OK();
}

template <typename Fn>
Status SequenceCache::ForEachPiece(uint32_t layer, uint32_t first, uint32_t n, Fn&& fn) const {
  const KvBlockLayout& l = pool_->layout();
  for (uint32_t done = 0; done < n;) {
    const uint32_t t = first + done;
    const uint32_t slot = t % l.block_tokens;
    const uint32_t piece = std::min(n - done, l.block_tokens - slot);
    uint8_t* block = pool_->block_data(table_->ids[t / l.block_tokens]);
    KVTIER_RETURN_IF_ERROR(fn(block + l.k_offset(layer) + slot * l.k_token_stride,
                              block + l.v_offset(layer) + slot * l.v_token_stride, piece, done));
    done += piece;
  }
  return Status::OK();
}

Status SequenceCache::CheckRange(const char* op, uint32_t layer, uint32_t first,
                                 uint32_t n) const {
  KVTIER_RETURN_IF_ERROR(CheckLayer(op, layer));
  if (first > len_[layer] || n > len_[layer] - first) {
    return Status::OutOfRange(std::string("SequenceCache::") + op + ": tokens [" +
                              std::to_string(first) + ", " + std::to_string(uint64_t{first} + n) +
                              ") of layer " + std::to_string(layer) + " are past its " +
                              std::to_string(len_[layer]) + " tokens");
  }
  return Status::OK();
}

Status SequenceCache::AppendExternal(uint32_t layer, uint32_t n_tokens) {
  KVTIER_RETURN_IF_ERROR(CheckLayer("AppendExternal", layer));
  if (pool_->layout().k_format.is_token_grouped()) {
    return Status::InvalidArgument("SequenceCache::AppendExternal: K format " +
                                   pool_->layout().k_format.name() +
                                   " is token-grouped (its exact-key tail lives on the host)");
  }
  if (n_tokens == 0) return Status::OK();
  KVTIER_RETURN_IF_ERROR(ReserveLayer(layer, n_tokens));
  len_[layer] += n_tokens;
  UpdateMinMax();
  return Status::OK();
}

Status SequenceCache::AppendEncoded(uint32_t layer, const uint8_t* k_rows, const uint8_t* v_rows,
                                    uint32_t n_tokens) {
  KVTIER_RETURN_IF_ERROR(CheckLayer("AppendEncoded", layer));
  if (n_tokens == 0) return Status::OK();
  if (k_rows == nullptr || v_rows == nullptr) {
    return Status::InvalidArgument(std::string("SequenceCache::AppendEncoded: null ") +
                                   (k_rows ? "V" : "K") + " rows");
  }
  KVTIER_RETURN_IF_ERROR(ReserveLayer(layer, n_tokens));
  const KvBlockLayout& l = pool_->layout();
  const uint32_t pos = len_[layer];
  const uint32_t k_end = pos + static_cast<uint32_t>(l.k_format.stored_rows(pos, n_tokens));
  KVTIER_RETURN_IF_ERROR(ForEachPiece(
      layer, pos, n_tokens, [&](uint8_t* kd, uint8_t* vd, uint32_t n, uint32_t done) {
        // Token-grouped K: the last piece also takes the rows to its group's end.
        const uint32_t kn = pos + done + n == pos + n_tokens ? k_end - (pos + done) : n;
        std::memcpy(kd, k_rows + done * l.k_token_stride, kn * l.k_token_stride);
        std::memcpy(vd, v_rows + done * l.v_token_stride, n * l.v_token_stride);
        return Status::OK();
      }));
  if (!k_tail_.empty()) k_tail_[layer] = {};  // its exact keys are not known
  len_[layer] = pos + n_tokens;
  UpdateMinMax();
  return Status::OK();
}

Status SequenceCache::ReadEncoded(uint32_t layer, uint32_t first, uint32_t n_tokens,
                                  uint8_t* k_rows, uint8_t* v_rows) const {
  KVTIER_RETURN_IF_ERROR(CheckRange("ReadEncoded", layer, first, n_tokens));
  if (n_tokens > 0 && (k_rows == nullptr || v_rows == nullptr)) {
    return Status::InvalidArgument("SequenceCache::ReadEncoded: null output");
  }
  const KvBlockLayout& l = pool_->layout();
  const uint32_t k_end = first + static_cast<uint32_t>(l.k_format.stored_rows(first, n_tokens));
  return ForEachPiece(layer, first, n_tokens,
                      [&](const uint8_t* ks, const uint8_t* vs, uint32_t n, uint32_t done) {
                        const uint32_t kn = done + n == n_tokens ? k_end - (first + done) : n;
                        std::memcpy(k_rows + done * l.k_token_stride, ks, kn * l.k_token_stride);
                        std::memcpy(v_rows + done * l.v_token_stride, vs, n * l.v_token_stride);
                        return Status::OK();
                      });
}

Status SequenceCache::ReadDense(uint32_t layer, uint32_t first, uint32_t n_tokens,
                                DType dst_dtype, void* k, void* v) const {
  KVTIER_RETURN_IF_ERROR(CheckRange("ReadDense", layer, first, n_tokens));
  if (n_tokens > 0 && (k == nullptr || v == nullptr)) {
    return Status::InvalidArgument("SequenceCache::ReadDense: null output");
  }
  const KvBlockLayout& l = pool_->layout();
  const size_t heads = l.shape.n_kv_heads;
  const size_t d = l.shape.head_dim;
  const size_t token_bytes = heads * d * DTypeSize(dst_dtype);
  return ForEachPiece(
      layer, first, n_tokens, [&](const uint8_t* ks, const uint8_t* vs, uint32_t n, uint32_t done) {
        if (l.k_format.is_token_grouped()) {  // from the first row of the token's group
          const uint32_t j = (first + done) % l.k_format.group;
          KVTIER_RETURN_IF_ERROR(DequantizeChanRows(l.k_format, ks - j * l.k_token_stride, j, n,
                                                    heads, d, dst_dtype,
                                                    static_cast<uint8_t*>(k) + done * token_bytes));
        } else {
          KVTIER_RETURN_IF_ERROR(DequantizeRows(l.k_format, ks, n * heads, d, dst_dtype,
                                                static_cast<uint8_t*>(k) + done * token_bytes));
        }
        return DequantizeRows(l.v_format, vs, n * heads, d, dst_dtype,
                              static_cast<uint8_t*>(v) + done * token_bytes);
      });
}

void SequenceCache::ZeroSlots(BlockId id, uint32_t from_slot) {
  const KvBlockLayout& l = pool_->layout();
  uint8_t* block = pool_->block_data(id);
  const size_t n = l.block_tokens - from_slot;
  // Token-grouped K: the rows of the group still holding tokens keep their parameter slices
  // (only their codes go); whole groups past it go.
  const uint32_t k_whole = static_cast<uint32_t>(l.k_format.stored_rows(0, from_slot));
  const size_t code_bytes = l.shape.head_dim * l.k_format.bits / 8;
  for (uint32_t layer = 0; layer < len_.size(); ++layer) {
    uint8_t* kr = block + l.k_offset(layer);
    for (uint32_t s = from_slot; s < k_whole; ++s) {
      for (uint32_t h = 0; h < l.shape.n_kv_heads; ++h) {
        std::memset(kr + s * l.k_token_stride + h * l.k_row_bytes, 0, code_bytes);
      }
    }
    std::memset(kr + k_whole * l.k_token_stride, 0, (l.block_tokens - k_whole) * l.k_token_stride);
    std::memset(block + l.v_offset(layer) + from_slot * l.v_token_stride, 0, n * l.v_token_stride);
  }
}

Result<uint32_t> SequenceCache::Trim(uint32_t n) {
  KVTIER_RETURN_IF_ERROR(CheckUsable("Trim"));
  if (!complete()) {
    return Status::InvalidArgument("SequenceCache::Trim: a forward pass is half way through (layer "
                                   "sizes " + std::to_string(min_len_) + ".." +
                                   std::to_string(max_len_) + "); finish or undo it first");
  }
  const uint32_t dropped = std::min(n, min_len_);
  const uint32_t new_len = min_len_ - dropped;
  const uint32_t bt = pool_->block_tokens();
  const size_t keep = (static_cast<size_t>(new_len) + bt - 1) / bt;
  DropBlocksFrom(keep);
  const uint32_t slot = new_len % bt;
  if (dropped > 0 && slot != 0 && table_.use_count() == 1 &&
      pool_->RefCount(table_->ids[keep - 1]) == 1) {
    ZeroSlots(table_->ids[keep - 1], slot);  // nobody else sees this block: wipe the tail
  }
  std::fill(len_.begin(), len_.end(), new_len);
  min_len_ = max_len_ = new_len;
  for (KTail& t : k_tail_) {  // the tail keeps the tokens still there
    if (new_len < t.first || new_len == t.first) t = {};
    else t.count = std::min(t.count, new_len - t.first);
  }
  window_scan_ = std::min<uint32_t>(window_scan_, static_cast<uint32_t>(keep));
  return dropped;
}

void SequenceCache::Clear() {
  if (!pool_) return;
  table_ = std::make_shared<Table>(pool_, owner_);
  std::fill(len_.begin(), len_.end(), 0);
  min_len_ = max_len_ = 0;
  window_scan_ = 0;
  keep_points_.clear();
  for (KTail& t : k_tail_) t = {};
}

void SequenceCache::KeepWindowRowsAt(uint32_t pos) {
  if (std::find(keep_points_.begin(), keep_points_.end(), pos) == keep_points_.end()) {
    keep_points_.push_back(pos);
  }
}

uint32_t SequenceCache::DropOutsideWindow() {
  if (!pool_ || !complete()) return 0;
  const KvBlockLayout& l = pool_->layout();
  if (!l.has_window_layers()) return 0;
  const uint32_t bt = l.block_tokens;
  // The window keys a resume at p attends, from its last full-block boundary: [lo, p).
  auto lo_of = [&](uint64_t p) {
    const uint64_t f = p / bt * bt;
    return f + 1 > l.max_window ? f + 1 - l.max_window : 0;
  };
  // A query at position p >= size() attends window keys from p - max_window + 1 on.
  const size_t droppable = std::min<size_t>(lo_of(min_len_) / bt, table_->ids.size());
  if (droppable <= window_scan_) return 0;
  uint32_t dropped = 0;
  if (table_.use_count() == 1) {
    for (size_t i = window_scan_; i < droppable; ++i) {
      bool kept = false;
      for (uint32_t p : keep_points_) kept |= (i + 1) * bt > lo_of(p) && i * bt < p;
      // Fails (and is skipped) for a block another holder shares: they may still need it.
      if (!kept) dropped += pool_->DropWindowRows(table_->ids[i]).ok();
    }
  }
  window_scan_ = static_cast<uint32_t>(droppable);
  return dropped;
}

uint32_t SequenceCache::WindowResumePoint() const {
  if (!pool_) return 0;
  const KvBlockLayout& l = pool_->layout();
  uint32_t p = size();
  if (!l.has_window_layers()) return p;
  const uint32_t bt = l.block_tokens;
  while (p > 0) {
    const uint32_t lo = p + 1 > l.max_window ? p + 1 - l.max_window : 0;
    // Blocks from the last one back: the first missing one moves p to its start.
    uint32_t missing = UINT32_MAX;
    for (uint32_t b = (p - 1) / bt + 1; b-- > lo / bt;) {
      if (!WindowRowsPresent(std::max(lo, b * bt), std::min(p, (b + 1) * bt))) {
        missing = b;
        break;
      }
    }
    if (missing == UINT32_MAX) return p;
    p = missing * bt;
  }
  return 0;
}

bool SequenceCache::WindowRowsPresent(uint32_t first, uint32_t end) const {
  if (!pool_) return true;
  const KvBlockLayout& l = pool_->layout();
  if (!l.has_window_layers() || first >= end) return true;
  uint32_t layer = 0;
  while (l.layer_window[layer] == 0) ++layer;
  end = std::min(end, layer_size(layer));
  // The blocks' flag (BlockPool::WindowRowsAbsent): set where the rows were dropped and
  // carried wherever the block went since (copies, conversions, the tiers' block headers).
  for (uint32_t t = first; t < end; t = (t / l.block_tokens + 1) * l.block_tokens) {
    if (pool_->WindowRowsAbsent(table_->ids[t / l.block_tokens])) return false;
  }
  return true;
}

Status SequenceCache::SetOwner(KvOwner owner) {
  KVTIER_RETURN_IF_ERROR(CheckUsable("SetOwner"));
  if (owner == owner_) return Status::OK();
  if (table_.use_count() > 1) {
    KVTIER_RETURN_IF_ERROR(CloneTable(owner, table_->ids.size()));
  } else {
    KVTIER_RETURN_IF_ERROR(pool_->MoveOwner(table_->ids, owner_, owner));
    table_->owner = owner;
  }
  owner_ = owner;
  return Status::OK();
}

Status SequenceCache::CheckInvariants() const {
  if (!pool_) return len_.empty() ? Status::OK() : Status::Internal("lengths without a pool");
  const KvBlockLayout& l = pool_->layout();
  if (len_.size() != l.shape.n_layers) return Status::Internal("layer count differs from pool");
  if (table_->owner != owner_) return Status::Internal("table owner differs from sequence owner");
  const size_t need = (static_cast<size_t>(max_len_) + l.block_tokens - 1) / l.block_tokens;
  if (table_->ids.size() < need) {
    return Status::Internal(std::to_string(max_len_) + " tokens but only " +
                            std::to_string(table_->ids.size()) + " blocks");
  }
  for (BlockId id : table_->ids) KVTIER_RETURN_IF_ERROR(pool_->CheckBlock(id));
  return Status::OK();
}

}  // namespace kvtier
