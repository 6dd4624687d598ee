// Attention driver: validation, work split (rows x KV heads x query tiles x key splits),
// threads, and the log-sum-exp merge of split partials. Thread-safe for distinct outputs.
#include "kvtier/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/dtype_io.h"
#include "base/thread_pool.h"
#include "kernels/attention_check.h"
#include "kernels/attention_simd.h"

namespace kvtier {
namespace {

constexpr uint32_t kMinSplitKeys = 512;  // a key split is never shorter than this

bool SupportedHeadDim(uint32_t d) { return d == 64 || d == 80 || d == 96 || d == 128 || d == 256; }

// Combines `n` partials {m, l, acc[d]} (stride d + 2) of one query vector into out.
void Finalize(const float* partials, size_t n, size_t d, DType out_dtype, void* out, size_t at) {
  float mx = -INFINITY;
  for (size_t s = 0; s < n; ++s) mx = std::max(mx, partials[s * (d + 2)]);
  float acc[256 + 2] = {};
  float l = 0.0f;
  if (mx != -INFINITY) {
    for (size_t s = 0; s < n; ++s) {
      const float* p = partials + s * (d + 2);
      if (p[1] == 0.0f) continue;
      const float w = std::exp(p[0] - mx);
      l += p[1] * w;
      for (size_t j = 0; j < d; ++j) acc[j] += p[2 + j] * w;
    }
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (size_t j = 0; j < d; ++j) StoreAs(out_dtype, out, at + j, acc[j] * inv);
}

}  // namespace

std::string AttentionSimdTargetName() { return attn::TargetName(); }

Status Attention(const PagedKvView& kv, const float* q, std::span<const uint32_t> q_lens,
                 const AttentionParams& params, void* out, ThreadPool* pool) {
  KVTIER_RETURN_IF_ERROR(CheckAttentionArgs(kv, q, q_lens, params, out));
  const uint32_t d = kv.head_dim;
  if (!SupportedHeadDim(d)) {
    return Status::Unimplemented("attention: head_dim " + std::to_string(d) +
                                 " has no kernel (supported: 64, 80, 96, 128, 256)");
  }
  attn::Job job;
  job.kv = &kv;
  job.q = q;
  job.q_lens = q_lens.data();
  job.n_heads = params.n_heads;
  job.group = params.n_heads / kv.n_kv_heads;
  job.scale = params.scale > 0 ? params.scale : 1.0f / std::sqrt(static_cast<float>(d));
  job.softcap = params.softcap;
  job.window = params.window;
  std::vector<uint64_t> q_first(kv.n_rows);
  uint64_t total_q = 0;
  for (uint32_t r = 0; r < kv.n_rows; ++r) {
    q_first[r] = total_q;
    total_q += q_lens[r];
  }
  job.q_first = q_first.data();
  if (total_q == 0) return Status::OK();

  // Units: (row, KV head, query tile). A tile holds whole query tokens when the group fits.
  const uint32_t G = job.group;
  const uint32_t tile_qv = G <= attn::kMaxQv ? attn::kMaxQv / G * G : attn::kMaxQv;
  std::vector<attn::Item> units;
  uint32_t longest = 0;
  for (uint32_t r = 0; r < kv.n_rows; ++r) {
    const uint32_t n_qv = q_lens[r] * G;
    if (n_qv == 0) continue;
    longest = std::max(longest, kv.rows[r].length);
    for (uint32_t h = 0; h < kv.n_kv_heads; ++h) {
      for (uint32_t v = 0; v < n_qv; v += tile_qv) {
        units.push_back({r, h, v, std::min(n_qv, v + tile_qv), 0, kv.rows[r].length});
      }
    }
  }
  // Split keys when there are too few units to keep every thread busy (long decode rows).
  const uint32_t threads = pool ? static_cast<uint32_t>(pool->num_threads()) : 1;
  uint32_t splits = 1;
  if (units.size() < 2u * threads) {
    const uint32_t want = static_cast<uint32_t>((4u * threads + units.size() - 1) / units.size());
    splits = std::clamp(longest / kMinSplitKeys, 1u, want);
  }
  const size_t stride = static_cast<size_t>(d) + 2;
  const size_t unit_floats = attn::kMaxQv * stride;
  std::vector<float> partials;  // only with splits: [units][splits][kMaxQv][d + 2]
  if (splits > 1) partials.resize(units.size() * splits * unit_floats);
  std::vector<uint8_t> failed(units.size() * splits, 0);

  auto run = [&](size_t begin, size_t end) {
    std::vector<float> local(splits > 1 ? 0 : unit_floats);
    for (size_t w = begin; w < end; ++w) {
      const size_t u = w / splits;
      const uint32_t s = static_cast<uint32_t>(w % splits);
      attn::Item it = units[u];
      const uint32_t len = it.key_end;
      const uint32_t bt = kv.block_tokens;
      // Split boundaries on block boundaries, so tiles never straddle splits needlessly.
      const uint32_t per = (len + splits - 1) / splits;
      const uint32_t per_b = (per + bt - 1) / bt * bt;
      it.key_begin = std::min(len, s * per_b);
      it.key_end = std::min(len, (s + 1) * per_b);
      float* part = splits > 1 ? partials.data() + w * unit_floats : local.data();
      if (!attn::RunItem(job, it, part)) {
        failed[w] = 1;
        continue;
      }
      if (splits == 1) {
        for (uint32_t v = it.qv_begin; v < it.qv_end; ++v) {
          const size_t at = ((q_first[it.row] + v / G) * params.n_heads + it.kv_head * G + v % G) * d;
          Finalize(part + (v - it.qv_begin) * stride, 1, d, params.out_dtype, out, at);
        }
      }
    }
  };
  const size_t n_work = units.size() * splits;
  if (pool && n_work > 1) {
    pool->ParallelFor(n_work, 1, run);
  } else {
    run(0, n_work);
  }
  if (std::find(failed.begin(), failed.end(), 1) != failed.end()) {
    return Status::Internal("attention: no kernel for K " + kv.k_format.spec() + " / V " +
                            kv.v_format.spec() + " at head_dim " + std::to_string(d));
  }
  if (splits > 1) {
    auto merge = [&](size_t begin, size_t end) {
      std::vector<float> gathered(splits * stride);
      for (size_t u = begin; u < end; ++u) {
        const attn::Item& it = units[u];
        for (uint32_t v = it.qv_begin; v < it.qv_end; ++v) {
          for (uint32_t s = 0; s < splits; ++s) {
            const float* p = partials.data() + (u * splits + s) * unit_floats +
                             (v - it.qv_begin) * stride;
            std::copy(p, p + stride, gathered.data() + s * stride);
          }
          const size_t at = ((q_first[it.row] + v / G) * params.n_heads + it.kv_head * G + v % G) * d;
          Finalize(gathered.data(), splits, d, params.out_dtype, out, at);
        }
      }
    };
    if (pool && units.size() > 1) {
      pool->ParallelFor(units.size(), 1, merge);
    } else {
      merge(0, units.size());
    }
  }
  return Status::OK();
}

}  // namespace kvtier
