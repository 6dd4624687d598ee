// Module kernels (src/kernels, kvtier_kernels; order and include rule: docs/architecture.md) owns
// fused attention over the paged view, its float64 reference, machine probes.
//
// Fused attention over a paged, quantized KV cache (CPU).
//
// For every row r of the view, the queries are the last q_lens[r] tokens of that row: query i
// sits at position p = length_r - q_lens[r] + i and attends keys [max(0, p - window + 1), p]
// (causal; window: params.window, else the view's per-layer window; 0 = unlimited). One
// query per row is decode; more is a prefill chunk. Query
// head h reads KV head h / (n_heads / n_kv_heads) (GQA, any ratio). K and V are read from the
// blocks in their own formats (every format of src/quant; K and V may differ); no copy of the
// cache is made: a fixed-size tile of rows is decoded at a time, whatever the context length.
//
//   q   [total_q, n_heads, head_dim] f32, rows' queries one after another (total_q = sum q_lens)
//   out [total_q, n_heads, head_dim] in out_dtype (f32, f16 or bf16)
//
// Scores are s = scale * q.k, soft-capped to softcap * tanh(s / softcap) when softcap > 0, then
// softmax (online, in f32) weights the V rows. Work is split across rows, KV heads, query tiles
// and, for long rows with few items, key ranges (merged by log-sum-exp). head_dim 64, 80, 96,
// 128 and 256 are compiled specially; others are Unimplemented. Thread-safe for distinct
// outputs; `pool` may be null (the calling thread does everything).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kvtier/dtype.h"
#include "kvtier/paged_kv_view.h"
#include "kvtier/status.h"

namespace kvtier {

class ThreadPool;  // kvtier/thread_pool.h

struct AttentionParams {
  uint32_t n_heads = 0;      // query heads: a multiple of the view's n_kv_heads
  float scale = 0.0f;        // softmax scale; 0 means 1 / sqrt(head_dim)
  float softcap = 0.0f;      // logit soft-cap; 0 = off
  uint32_t window = 0;       // sliding window in tokens; 0 = off
  DType out_dtype = DType::kF32;
};

Status Attention(const PagedKvView& kv, const float* q, std::span<const uint32_t> q_lens,
                 const AttentionParams& params, void* out, ThreadPool* pool);

// The SIMD target the kernels use on this CPU ("AVX3", "AVX2", ... or "scalar").
std::string AttentionSimdTargetName();

}  // namespace kvtier
