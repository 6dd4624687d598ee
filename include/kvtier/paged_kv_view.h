// PagedKvView: the only contract between the KV cache and attention kernels.
//
// A plain struct of pointers and strides over one layer of a BlockPool, for a batch of rows.
// Row r's token t, KV head h, lives in block rows[r].block_table[t / block_tokens] at slot
// t % block_tokens:
//
//   K row bytes = k_base + block * block_stride + slot * k_token_stride + h * k_head_stride
//   V row bytes = v_base + block * block_stride + slot * v_token_stride + h * v_head_stride
//
// and holds one row of head_dim values in k_format / v_format (src/quant layouts,
// docs/formats/kv-row-formats.md). Only tokens [0, rows[r].length) may be read; every row's
// block table has at least ceil(length / block_tokens) entries.
//
// The view borrows everything: it is valid until the cache it came from is next modified.
// Nothing here is CPU specific: a GPU backend fills the same struct with device pointers.
// Thread-safe to read from any number of threads while the cache is not modified.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/format.h"
#include "kvtier/kv_types.h"

namespace kvtier {

struct PagedKvRow {
  const BlockId* block_table = nullptr;  // [n_blocks]
  uint32_t n_blocks = 0;
  uint32_t length = 0;  // tokens of this row in this layer (also its next RoPE position)
};

struct PagedKvView {
  const uint8_t* k_base = nullptr;  // K of this layer in block 0
  const uint8_t* v_base = nullptr;  // V of this layer in block 0
  size_t block_stride = 0;          // bytes between block b and block b + 1
  size_t k_token_stride = 0;        // bytes between slots of one block (n_kv_heads rows)
  size_t k_head_stride = 0;         // bytes between KV heads of one slot (one row)
  size_t v_token_stride = 0;
  size_t v_head_stride = 0;
  uint32_t block_tokens = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  Format k_format;
  Format v_format;
  uint32_t n_rows = 0;
  const PagedKvRow* rows = nullptr;  // [n_rows]
  // This layer's sliding window in tokens (0 = global): a query at position p attends keys
  // [p - window + 1, p]; rows before that may have been given back (they read as zeros).
  uint32_t window = 0;

  // Row bytes of token t, KV head h of row r. Preconditions: r < n_rows, t < rows[r].length.
  const uint8_t* k_row(uint32_t r, uint32_t t, uint32_t h) const {
    const BlockId b = rows[r].block_table[t / block_tokens];
    return k_base + static_cast<size_t>(b) * block_stride + (t % block_tokens) * k_token_stride +
           h * k_head_stride;
  }
  const uint8_t* v_row(uint32_t r, uint32_t t, uint32_t h) const {
    const BlockId b = rows[r].block_table[t / block_tokens];
    return v_base + static_cast<size_t>(b) * block_stride + (t % block_tokens) * v_token_stride +
           h * v_head_stride;
  }
};

}  // namespace kvtier
