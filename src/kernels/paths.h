// Entry points of the attention paths, one file each (see dispatch.h for which serves what).
// Each runs one item of a call whose Job carries the kernel SelectAttentionKernel chose; it
// writes the item's partials as RunItemOn (dispatch.h) describes and returns false only when
// it has no kernel for the job. The driver calls them through the path table (dispatch.cc);
// no path calls another. Internal to src/kernels; thread-safe (items only read the view and
// the queries).
#pragma once

#include "kernels/job.h"

namespace kvtier::attn {

bool RunItemInt8(const Job& job, const Item& item, float* partial);     // attention_int8.cc
bool RunItemQ16(const Job& job, const Item& item, float* partial);      // attention_q16.cc
bool RunItemFast(const Job& job, const Item& item, float* partial);     // attention_fast.cc
bool RunItemPrefill(const Job& job, const Item& item, float* partial);  // attention_prefill.cc
bool RunItemGeneric(const Job& job, const Item& item, float* partial);  // attention_generic.cc
bool RunItemChan(const Job& job, const Item& item, float* partial);     // attention_chan.cc

// Whether the driver runs this item on choice.prefill: with 8 or more lanes, a row of more
// than one query token whose item holds 8 to PrefillLaneVectors x lanes query vectors.
inline bool IsPrefillItem(const Job& job, const Item& it) {
  const size_t lanes = job.kernel.lanes;
  if (lanes < 8) return false;
  const uint32_t nq = it.qv_end - it.qv_begin;
  return job.q_lens[it.row] > 1 && nq >= 8 && nq <= PrefillLaneVectors(lanes) * lanes;
}

// The path table: runs one item on `path`. For KV head h and query vector i (from qv_begin)
// writes {m, l, acc} at partial + ((h - head_begin) * n_qv + i) * (head_dim + 2): the running
// max score, the softmax denominator scaled by exp(-m) and the unnormalised output (m = -inf,
// l = 0 when it saw no key). Returns false when the path has no kernel for the job (a
// selection bug, or quant cannot decode the format).
inline bool RunItemOn(Path path, const Job& job, const Item& item, float* partial) {
  using Fn = bool (*)(const Job&, const Item&, float*);
  static constexpr Fn kPathTable[kNumPaths] = {
      nullptr, RunItemInt8, RunItemQ16, RunItemFast, RunItemPrefill, RunItemGeneric, RunItemChan,
  };
  const Fn fn = kPathTable[static_cast<size_t>(path)];
  return fn != nullptr && fn(job, item, partial);
}

}  // namespace kvtier::attn
