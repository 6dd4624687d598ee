// The per-work-item attention kernel (Highway dynamic dispatch; attention_simd.cc) and the
// work description attention.cc hands it. Internal to src/kernels; arguments are validated
// by attention.cc. Thread-safe: items only read the view and the queries.
#pragma once

#include <algorithm>
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

// Where the next tile's K and V rows of an item's first head are (from token t1, at most `tile` tokens
// inside one block) and how many tokens it has, so that a kernel can bring its first rows in
// while the current tile is computed. Empty (n == 0) when t1 >= hi.
struct NextTile {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  uint32_t n = 0;
};

inline NextTile PlanNextTile(const PagedKvView& kv, const PagedKvRow& row, const Item& it,
                             uint32_t t1, uint32_t hi, uint32_t tile) {
  NextTile n;
  if (t1 >= hi) return n;
  const uint32_t bt = kv.block_tokens;
  n.n = std::min(std::min(hi, (t1 / bt + 1) * bt), t1 + tile) - t1;
  const size_t b1 = static_cast<size_t>(row.block_table[t1 / bt]);
  const size_t s1 = t1 % bt;
  n.k = kv.k_base + b1 * kv.block_stride + s1 * kv.k_token_stride + it.head_begin * kv.k_head_stride;
  n.v = kv.v_base + b1 * kv.block_stride + s1 * kv.v_token_stride + it.head_begin * kv.v_head_stride;
  return n;
}

// Lines of the next tile's K (or V) rows of an item's heads, brought into L2 a few at a time
// over the current tile's steps: spread out, not in a burst that holds every line-fill buffer.
// A software prefetch holds a line-fill buffer until its line arrives (a DRAM latency), so the
// finer the steps the fewer of the current tile's own L2 loads wait behind them.
// The rows are one contiguous range when the item covers every KV head (rows of a token sit
// together), else `n_rows` runs of `run_bytes` at `stride`.
struct Drip {
  // Plans the rows [t1, t1 + n) of the item's heads from `first` (row t1's first head) over
  // `steps` calls of Step(); n = 0: nothing.
  void Plan(const uint8_t* first, uint32_t n, size_t token_stride, size_t head_bytes, uint64_t steps) {
    *this = Drip{};
    if (n == 0) return;
    p_ = run_start_ = first;
    if (head_bytes == token_stride) {  // one contiguous range
      run_lines_ = static_cast<uint32_t>((n * token_stride + 63) / 64);
      left_ = run_lines_;
    } else {
      stride_ = token_stride;
      run_lines_ = static_cast<uint32_t>((head_bytes + 63) / 64);
      left_ = run_lines_ * n;
    }
    line_ = run_lines_;
    rate_ = steps > 0 ? ((uint64_t{left_} << 16) + steps - 1) / steps : 0;
  }
  // One step: issues its share of the lines.
  inline void Step() {
    credit_ += rate_;
    if (credit_ >= kOne) Issue(static_cast<uint32_t>(credit_ >> 16));
  }
  // One fine step (a K chunk pair, a V token): for one contiguous range its lines are issued
  // inline, a line or two at a time; runs of rows go through Issue as in Step.
  inline void StepFine() {
    credit_ += rate_;
    if (credit_ < kOne) return;
    if (stride_ != 0) {
      Issue(static_cast<uint32_t>(credit_ >> 16));
      return;
    }
    for (; credit_ >= kOne && left_ > 0; credit_ -= kOne, --left_, p_ += 64) {
      __builtin_prefetch(p_, 0, 2);
    }
  }
  // Issues what is left.
  inline void Finish() {
    if (left_ > 0) Issue(left_);
  }

 private:
  static constexpr uint64_t kOne = uint64_t{1} << 16;  // one line, 16.16 fixed point
  // Issues up to n lines. Out of line: the callers' loops keep their registers.
  __attribute__((noinline)) void Issue(uint32_t n) {
    credit_ &= kOne - 1;
    n = n < left_ ? n : left_;
    left_ -= n;
    const uint8_t* p = p_;
    if (stride_ == 0) {  // one contiguous range
      for (; n > 0; --n, p += 64) __builtin_prefetch(p, 0, 2);
    } else {
      for (; n > 0; --n) {
        __builtin_prefetch(p, 0, 2);
        p += 64;
        if (--line_ == 0) {  // next run
          line_ = run_lines_;
          run_start_ += stride_;
          p = run_start_;
        }
      }
    }
    p_ = p;
  }
  const uint8_t* p_ = nullptr;
  const uint8_t* run_start_ = nullptr;
  size_t stride_ = 0;
  uint32_t run_lines_ = 0, line_ = 0;  // lines per run; left in this run
  uint32_t left_ = 0;                  // lines not issued yet
  uint64_t rate_ = 0, credit_ = 0;     // lines per step and owed, 16.16 fixed point
};

std::string TargetName();

}  // namespace kvtier::attn
