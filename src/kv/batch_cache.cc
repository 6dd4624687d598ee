// BatchCache: rows of SequenceCaches; every batch operation moves block tables, never K/V.
// Thread-compatible (see the header).
#include "kvtier/batch_cache.h"

#include <algorithm>
#include <string>

namespace kvtier {

BatchCache::BatchCache(std::shared_ptr<BlockPool> pool) : pool_(std::move(pool)) {}

Result<BatchCache> BatchCache::Merge(std::vector<SequenceCache> rows) {
  if (rows.empty()) {
    return Status::InvalidArgument("BatchCache::Merge: no sequences to merge (use the "
                                   "BatchCache(pool) constructor for an empty batch)");
  }
  if (!rows[0].valid()) return Status::InvalidArgument("BatchCache::Merge: row 0 has no pool");
  BatchCache b(rows[0].pool());
  for (size_t i = 0; i < rows.size(); ++i) KVTIER_RETURN_IF_ERROR(b.CheckJoin("Merge", rows[i], i));
  b.rows_ = std::move(rows);
  return b;
}

Status BatchCache::CheckJoin(const char* op, const SequenceCache& s, size_t row) const {
  const std::string where = std::string("BatchCache::") + op + ": row " + std::to_string(row);
  if (!pool_) return Status::InvalidArgument(where + ": the batch has no pool");
  if (!s.valid()) return Status::InvalidArgument(where + " has no pool");
  if (s.pool() != pool_) {
    const KvBlockLayout& a = pool_->layout();
    const KvBlockLayout& b = s.pool()->layout();
    std::string why;
    if (!(a.shape == b.shape)) {
      why = "its KV shape is " + b.shape.ToString() + ", the batch's is " + a.shape.ToString();
    } else if (a.k_format != b.k_format || a.v_format != b.v_format) {
      why = "its formats are K " + b.k_format.spec() + " / V " + b.v_format.spec() +
            ", the batch's are K " + a.k_format.spec() + " / V " + a.v_format.spec() +
            " (convert it with ConvertSequence first)";
    } else if (a.block_tokens != b.block_tokens) {
      why = "its blocks hold " + std::to_string(b.block_tokens) + " tokens, the batch's " +
            std::to_string(a.block_tokens);
    } else {
      why = "it belongs to another block pool with the same layout (move it with "
            "ConvertSequence first)";
    }
    return Status::InvalidArgument(where + " cannot join the batch: " + why);
  }
  if (!s.complete()) {
    return Status::InvalidArgument(where + " is half way through a forward pass (layer sizes " +
                                   std::to_string(s.size()) + ".." +
                                   std::to_string(s.max_layer_size()) + ")");
  }
  return Status::OK();
}

Status BatchCache::CheckRow(const char* op, size_t i) const {
  if (i >= rows_.size()) {
    return Status::InvalidArgument(std::string("BatchCache::") + op + ": row " +
                                   std::to_string(i) + " out of range: the batch has " +
                                   std::to_string(rows_.size()) + " rows");
  }
  return Status::OK();
}

uint32_t BatchCache::size() const {
  uint32_t m = 0;
  for (const SequenceCache& s : rows_) m = std::max(m, s.size());
  return m;
}

std::vector<int32_t> BatchCache::offsets() const {
  std::vector<int32_t> o;
  o.reserve(rows_.size());
  for (const SequenceCache& s : rows_) o.push_back(static_cast<int32_t>(s.size()));
  return o;
}

Result<SequenceCache> BatchCache::Extract(size_t i) const {
  KVTIER_RETURN_IF_ERROR(CheckRow("Extract", i));
  return rows_[i].Fork();
}

Result<SequenceCache> BatchCache::Take(size_t i) {
  KVTIER_RETURN_IF_ERROR(CheckRow("Take", i));
  SequenceCache s = std::move(rows_[i]);
  rows_.erase(rows_.begin() + static_cast<std::ptrdiff_t>(i));
  return s;
}

Status BatchCache::Filter(std::span<const size_t> indices) {
  std::vector<uint32_t> uses(rows_.size(), 0);
  for (size_t k = 0; k < indices.size(); ++k) {
    if (indices[k] >= rows_.size()) {
      return Status::InvalidArgument("BatchCache::Filter: index " + std::to_string(indices[k]) +
                                     " (position " + std::to_string(k) +
                                     ") out of range: the batch has " +
                                     std::to_string(rows_.size()) + " rows");
    }
    ++uses[indices[k]];
  }
  std::vector<SequenceCache> kept;
  kept.reserve(indices.size());
  for (size_t idx : indices) {
    // The last use of a row takes it; earlier uses fork it.
    kept.push_back(--uses[idx] > 0 ? rows_[idx].Fork() : std::move(rows_[idx]));
  }
  rows_ = std::move(kept);
  return Status::OK();
}

Status BatchCache::Extend(BatchCache&& other) {
  if (&other == this) return Status::InvalidArgument("BatchCache::Extend: cannot extend a batch with itself");
  for (size_t i = 0; i < other.rows_.size(); ++i) {
    KVTIER_RETURN_IF_ERROR(CheckJoin("Extend", other.rows_[i], rows_.size() + i));
  }
  rows_.reserve(rows_.size() + other.rows_.size());
  for (SequenceCache& s : other.rows_) rows_.push_back(std::move(s));
  other.rows_.clear();
  return Status::OK();
}

Status BatchCache::Add(SequenceCache row) {
  KVTIER_RETURN_IF_ERROR(CheckJoin("Add", row, rows_.size()));
  rows_.push_back(std::move(row));
  return Status::OK();
}

Status BatchCache::Reserve(std::span<const uint32_t> n_new) {
  if (n_new.size() != rows_.size()) {
    return Status::InvalidArgument("BatchCache::Reserve: " + std::to_string(n_new.size()) +
                                   " counts for a batch of " + std::to_string(rows_.size()) +
                                   " rows");
  }
  std::vector<size_t> had(rows_.size());
  for (size_t i = 0; i < rows_.size(); ++i) {
    had[i] = rows_[i].n_blocks();
    if (Status s = rows_[i].Reserve(n_new[i]); !s.ok()) {
      for (size_t j = 0; j < i; ++j) rows_[j].ReleaseReserved(had[j]);
      return Status(s.code(), "row " + std::to_string(i) + ": " + s.message());
    }
  }
  return Status::OK();
}

Status BatchCache::Append(uint32_t layer, DType src_dtype, const void* k, const void* v,
                          uint32_t n_tokens, std::span<const uint32_t> n_valid) {
  if (!pool_) return Status::InvalidArgument("BatchCache::Append: the batch has no pool");
  if (!n_valid.empty() && n_valid.size() != rows_.size()) {
    return Status::InvalidArgument("BatchCache::Append: n_valid has " +
                                   std::to_string(n_valid.size()) + " entries for a batch of " +
                                   std::to_string(rows_.size()) + " rows");
  }
  for (size_t i = 0; i < n_valid.size(); ++i) {
    if (n_valid[i] > n_tokens) {
      return Status::InvalidArgument("BatchCache::Append: row " + std::to_string(i) + " has " +
                                     std::to_string(n_valid[i]) + " valid tokens, more than the " +
                                     std::to_string(n_tokens) + " given");
    }
  }
  if (rows_.empty() || n_tokens == 0) return Status::OK();
  if (k == nullptr || v == nullptr) {
    return Status::InvalidArgument(std::string("BatchCache::Append: null ") + (k ? "V" : "K") +
                                   " data");
  }
  auto count = [&](size_t i) { return n_valid.empty() ? n_tokens : n_valid[i]; };
  // Phase 1: room in every row (may fail: then nothing has changed).
  std::vector<size_t> had(rows_.size());
  for (size_t i = 0; i < rows_.size(); ++i) {
    had[i] = rows_[i].n_blocks();
    if (Status s = rows_[i].ReserveLayer(layer, count(i)); !s.ok()) {
      for (size_t j = 0; j < i; ++j) rows_[j].ReleaseReserved(had[j]);
      return Status(s.code(), "BatchCache::Append: row " + std::to_string(i) + ": " + s.message());
    }
  }
  // Phase 2: write (cannot run out of blocks any more).
  const KvShape& shape = pool_->shape();
  const size_t row_bytes =
      static_cast<size_t>(n_tokens) * shape.n_kv_heads * shape.head_dim * DTypeSize(src_dtype);
  for (size_t i = 0; i < rows_.size(); ++i) {
    KVTIER_RETURN_IF_ERROR(rows_[i].Append(layer, src_dtype,
                                           static_cast<const uint8_t*>(k) + i * row_bytes,
                                           static_cast<const uint8_t*>(v) + i * row_bytes,
                                           count(i)));
  }
  return Status::OK();
}

Result<uint32_t> BatchCache::Trim(uint32_t n) {
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (!rows_[i].complete()) {
      return Status::InvalidArgument("BatchCache::Trim: row " + std::to_string(i) +
                                     " is half way through a forward pass");
    }
  }
  const uint32_t dropped = std::min(n, size());
  for (SequenceCache& s : rows_) KVTIER_RETURN_IF_ERROR(s.Trim(n).status());
  return dropped;
}

Result<uint32_t> BatchCache::TrimRow(size_t i, uint32_t n) {
  KVTIER_RETURN_IF_ERROR(CheckRow("TrimRow", i));
  return rows_[i].Trim(n);
}

uint32_t BatchCache::DropOutsideWindow() {
  uint32_t n = 0;
  for (SequenceCache& s : rows_) n += s.DropOutsideWindow();
  return n;
}

Result<PagedKvView> BatchCache::View(uint32_t layer) {
  if (!pool_) return Status::InvalidArgument("BatchCache::View: the batch has no pool");
  if (layer >= pool_->shape().n_layers) {
    return Status::InvalidArgument("BatchCache::View: layer " + std::to_string(layer) +
                                   " out of range: the model has " +
                                   std::to_string(pool_->shape().n_layers) + " layers");
  }
  view_rows_.resize(rows_.size());
  for (size_t i = 0; i < rows_.size(); ++i) view_rows_[i] = rows_[i].Row(layer);
  return pool_->View(layer, view_rows_.data(), static_cast<uint32_t>(view_rows_.size()));
}

}  // namespace kvtier
