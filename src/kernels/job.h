// The work description the driver (attention.cc) hands every path: the call's Job (with the
// kernel chosen once per call, dispatch.h) and its Items. Internal to src/kernels; arguments are
// validated by attention.cc. Thread-safe: items only read the view and the queries.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/dispatch.h"
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
  KernelChoice kernel;               // chosen once per call (SelectAttentionKernel)
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

// The positions and query offsets of an item's query vectors, and the keys any of them can
// see within its split: [lo, hi) (empty when lo >= hi).
struct ItemQueries {
  uint32_t pos[kMaxQv] = {};    // query vector i's position in the row
  uint32_t first[kMaxQv] = {};  // first key it sees (sliding window)
  size_t q_off[kMaxQv] = {};    // offset in q of query vector i of KV head 0
  uint32_t lo = 0, hi = 0;
};

// Fills `qs` and resets the item's partials to {m = -inf, l = 0, acc = 0}.
inline void PrepareItem(const Job& job, const Item& it, size_t head_dim, float* partial,
                        ItemQueries* qs) {
  const uint32_t len = job.kv->rows[it.row].length;
  const uint32_t qlen = job.q_lens[it.row];
  const uint32_t G = job.group;
  const uint32_t nq = it.qv_end - it.qv_begin;
  uint32_t lo = UINT32_MAX, hi = 0;
  for (uint32_t i = 0; i < nq; ++i) {
    const uint32_t v = it.qv_begin + i;
    const uint32_t qi = v / G;
    const uint32_t pos = len - qlen + qi;
    qs->pos[i] = pos;
    qs->first[i] = job.window > 0 && pos + 1 > job.window ? pos + 1 - job.window : 0;
    qs->q_off[i] = ((job.q_first[it.row] + qi) * job.n_heads + v % G) * head_dim;
    lo = lo < qs->first[i] ? lo : qs->first[i];
    hi = hi > pos + 1 ? hi : pos + 1;
  }
  qs->lo = lo > it.key_begin ? lo : it.key_begin;
  qs->hi = hi < it.key_end ? hi : it.key_end;
  const size_t stride = head_dim + 2;
  const size_t n = size_t{it.head_end - it.head_begin} * nq;
  for (size_t j = 0; j < n; ++j) {
    float* st = partial + j * stride;
    st[0] = -__builtin_inff();
    for (size_t k = 1; k < stride; ++k) st[k] = 0.0f;
  }
}

}  // namespace kvtier::attn
