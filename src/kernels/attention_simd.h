// The per-work-item attention kernel (Highway dynamic dispatch; attention_simd.cc) and the
// work description attention.cc hands it. Internal to src/kernels; arguments are validated
// by attention.cc. Thread-safe: items only read the view and the queries.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/attention.h"

namespace kvtier::attn {

// Query vectors of one item: at most this many (query token x query head of one KV head).
inline constexpr uint32_t kMaxQv = 16;

// What every item of one call shares.
struct Job {
  const PagedKvView* kv = nullptr;
  const float* q = nullptr;          // [total_q, n_heads, head_dim]
  const uint32_t* q_lens = nullptr;  // [n_rows]
  const uint64_t* q_first = nullptr; // [n_rows] index of each row's first query in q
  uint32_t n_heads = 0;
  uint32_t group = 0;                // query heads per KV head
  float scale = 0;
  float softcap = 0;
  uint32_t window = 0;
};

// One unit of work: some query vectors of a range of KV heads of one row, against a range of
// its keys. Query vector v of KV head h is query token v / group, query head h * group +
// v % group. Decode items take every KV head (one pass over each token's K/V, which sit
// together in a block); prefill items take one.
struct Item {
  uint32_t row = 0;
  uint32_t head_begin = 0, head_end = 0;  // KV heads
  uint32_t qv_begin = 0, qv_end = 0;      // qv_end - qv_begin <= kMaxQv
  uint32_t key_begin = 0, key_end = 0;    // keys of this split
};

// Floats of an item's partial results: per KV head, per query vector, {m, l, acc[head_dim]}.
inline size_t PartialFloats(const Item& it, size_t head_dim) {
  return size_t{it.head_end - it.head_begin} * (it.qv_end - it.qv_begin) * (head_dim + 2);
}

// Runs one item. For KV head h and query vector i (from qv_begin) writes {m, l, acc} at
// partial + ((h - head_begin) * n_qv + i) * (head_dim + 2): the running max score, the softmax
// denominator scaled by exp(-m) and the unnormalised output (m = -inf, l = 0 when it saw no
// key). Returns false for a head_dim without a compiled kernel.
bool RunItem(const Job& job, const Item& item, float* partial);

std::string TargetName();

}  // namespace kvtier::attn
