// Software prefetch helpers shared by the paths: where an item's next tile is (PlanNextTile)
// and the drip that brings it into L2 a few lines per step of the current tile (Drip).
// Internal to src/kernels. A Drip is per item (one thread); PlanNextTile is a pure function.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kvtier/paged_kv_view.h"
#include "kernels/job.h"

namespace kvtier::attn {

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

}  // namespace kvtier::attn
