// Attention driver: validation, the kernel chosen once per call (dispatch.h), the work split
// (rows x KV heads x query tiles x key splits), threads, each item run on the chosen path
// (decode or prefill), and the log-sum-exp merge of split partials. Thread-safe for distinct
// outputs.
#include "kvtier/attention.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "base/dtype_io.h"
#include "kvtier/thread_pool.h"
#include "kernels/attention_check.h"
#include "kernels/dispatch.h"
#include "kernels/job.h"
#include "kernels/paths.h"
#include "quant/quant_simd.h"

namespace kvtier {
namespace {

constexpr uint32_t kMinSplitKeys = 512;  // a key split is never shorter than this

// Combines `n` partials {m, l, acc[d]} (stride d + 2) of one query vector into out; with a
// rotated V format (v_rot), the sum is in the rotated basis and is rotated back here, once.
void Finalize(const float* partials, size_t n, size_t d, DType out_dtype, void* out, size_t at,
              const Format& v_format) {
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
  for (size_t j = 0; j < d; ++j) acc[j] *= inv;
  if (v_format.is_rotated()) simd::RotateRows(v_format.seed, acc, 1, d, /*inverse=*/true);
  for (size_t j = 0; j < d; ++j) StoreAs(out_dtype, out, at + j, acc[j]);
}

}  // namespace

std::string AttentionSimdTargetName() { return attn::TargetName(); }

Status Attention(const PagedKvView& kv, const float* q, std::span<const uint32_t> q_lens,
                 const AttentionParams& params, void* out, ThreadPool* pool) {
  KVTIER_RETURN_IF_ERROR(CheckAttentionArgs(kv, q, q_lens, params, out));
  const uint32_t d = kv.head_dim;
  const attn::KernelChoice kernel =
      attn::SelectAttentionKernel(kv.k_format, kv.v_format, d, attn::DetectCpuFeatures());
  if (kernel.decode == attn::Path::kNone) {
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
  // The layer's window: the call's, else the view's (per layer, from the cache's layout).
  job.window = params.window > 0 ? params.window : kv.window;
  job.kernel = kernel;
  std::vector<uint64_t> q_first(kv.n_rows);
  uint64_t total_q = 0;
  for (uint32_t r = 0; r < kv.n_rows; ++r) {
    q_first[r] = total_q;
    total_q += q_lens[r];
  }
  job.q_first = q_first.data();
  if (total_q == 0) return Status::OK();
  // Rotated K (quant/rot.h): q.k = (R q).(R k), so the queries are rotated once here and the
  // kernels read the keys in their stored basis.
  std::vector<float> q_rot;
  if (kv.k_format.is_rotated()) {
    q_rot.assign(q, q + total_q * params.n_heads * d);
    simd::RotateRows(kv.k_format.seed, q_rot.data(), total_q * params.n_heads, d, false);
    job.q = q_rot.data();
  }

  // Units: decode rows (few queries) take every KV head at once, so each token's K/V (which
  // sit together in a block) is read in one pass; prefill rows are cut by KV head and query
  // tile (a tile holds whole query tokens when the group fits).
  const uint32_t G = job.group;
  const uint32_t tile_qv = G <= attn::kMaxQv ? attn::kMaxQv / G * G : attn::kMaxQv;
  std::vector<attn::Item> units;
  for (uint32_t r = 0; r < kv.n_rows; ++r) {
    const uint32_t n_qv = q_lens[r] * G;
    if (n_qv == 0) continue;
    const uint32_t len = kv.rows[r].length;
    // A window layer's row needs keys from its first query's window on (from that key's
    // block: splits stay on block boundaries); earlier blocks are never read.
    const uint32_t pos0 = len - q_lens[r];
    const uint32_t key0 = job.window > 0 && pos0 + 1 > job.window
                              ? (pos0 + 1 - job.window) / kv.block_tokens * kv.block_tokens
                              : 0;
    if (n_qv <= attn::kMaxQv) {
      units.push_back({r, 0, kv.n_kv_heads, 0, n_qv, key0, len});
      continue;
    }
    for (uint32_t h = 0; h < kv.n_kv_heads; ++h) {
      for (uint32_t v = 0; v < n_qv; v += tile_qv) {
        units.push_back({r, h, h + 1, v, std::min(n_qv, v + tile_qv), key0, len});
      }
    }
  }
  // Split keys when there are too few units to keep every thread busy (long decode rows).
  const uint32_t threads = pool ? static_cast<uint32_t>(pool->num_threads()) : 1;
  const size_t want_items = 4u * threads;
  const uint32_t bt = kv.block_tokens;
  std::vector<attn::Item> items;
  std::vector<size_t> unit_first(units.size() + 1, 0);  // items of unit u: [first[u], first[u+1])
  for (size_t u = 0; u < units.size(); ++u) {
    const attn::Item& un = units[u];
    const uint32_t len = un.key_end - un.key_begin;  // keys the unit reads
    uint32_t splits = 1;
    if (units.size() < want_items) {
      const uint32_t want = static_cast<uint32_t>((want_items + units.size() - 1) / units.size());
      splits = std::clamp(len / kMinSplitKeys, 1u, want);
    }
    // Split boundaries on block boundaries, so tiles never straddle splits needlessly.
    const uint32_t per = ((len + splits - 1) / splits + bt - 1) / bt * bt;
    unit_first[u] = items.size();
    for (uint32_t k0 = un.key_begin; k0 < un.key_end || k0 == un.key_begin; k0 += per) {
      attn::Item it = un;
      it.key_begin = k0;
      it.key_end = std::min(un.key_end, k0 + per);
      items.push_back(it);
      if (per == 0) break;
    }
  }
  unit_first[units.size()] = items.size();
  const size_t stride = static_cast<size_t>(d) + 2;
  // Partials of split units live until the merge. Every item runs in its thread's own buffer
  // (warm in that core's caches) and a split item copies its result out once at the end: run
  // in place in the shared array, two threads on the items of one decode row were 1.08-1.45x
  // slower per token on an AMD Zen 5 (no line of one item's region is written by the other
  // thread; padding the regions to 64 B or 4 KiB did not help, a per-thread buffer did).
  std::vector<size_t> part_off(items.size() + 1, 0);
  for (size_t u = 0; u < units.size(); ++u) {
    const bool split = unit_first[u + 1] - unit_first[u] > 1;
    for (size_t w = unit_first[u]; w < unit_first[u + 1]; ++w) {
      part_off[w + 1] = part_off[w] + (split ? attn::PartialFloats(items[w], d) : 0);
    }
  }
  // Not zero-filled: each split item writes its whole region (RunItem initialises it).
  const std::unique_ptr<float[]> partials(new float[part_off.back()]);
  std::vector<uint8_t> failed(items.size(), 0);
  std::vector<uint32_t> unit_of(items.size());
  for (size_t u = 0; u < units.size(); ++u) {
    for (size_t w = unit_first[u]; w < unit_first[u + 1]; ++w) unit_of[w] = static_cast<uint32_t>(u);
  }

  // Writes unit u's output from its items' partials.
  auto finalize = [&](size_t u, const float* const* parts, size_t n_parts) {
    const attn::Item& it = units[u];
    const uint32_t nq = it.qv_end - it.qv_begin;
    std::vector<float> gathered(n_parts * stride);
    for (uint32_t h = it.head_begin; h < it.head_end; ++h) {
      for (uint32_t i = 0; i < nq; ++i) {
        const size_t j = (size_t{h} - it.head_begin) * nq + i;
        for (size_t p = 0; p < n_parts; ++p) {
          std::copy(parts[p] + j * stride, parts[p] + (j + 1) * stride, gathered.data() + p * stride);
        }
        const uint32_t v = it.qv_begin + i;
        const size_t at = ((q_first[it.row] + v / G) * params.n_heads + size_t{h} * G + v % G) * d;
        Finalize(gathered.data(), n_parts, d, params.out_dtype, out, at, kv.v_format);
      }
    }
  };
  auto run = [&](size_t begin, size_t end) {
    std::vector<float> local;
    for (size_t w = begin; w < end; ++w) {
      const size_t u = unit_of[w];
      const bool split = unit_first[u + 1] - unit_first[u] > 1;
      local.resize(attn::PartialFloats(items[w], d));
      const attn::Path path = attn::IsPrefillItem(job, items[w]) ? kernel.prefill : kernel.decode;
      if (!attn::RunItemOn(path, job, items[w], local.data())) {
        failed[w] = 1;
        continue;
      }
      if (split) {
        std::copy(local.begin(), local.end(), partials.get() + part_off[w]);
      } else {
        const float* parts[1] = {local.data()};
        finalize(u, parts, 1);
      }
    }
  };
  if (pool && items.size() > 1) {
    pool->ParallelFor(items.size(), 1, run);
  } else {
    run(0, items.size());
  }
  if (std::find(failed.begin(), failed.end(), 1) != failed.end()) {
    return Status::Internal("attention: no kernel for K " + kv.k_format.spec() + " / V " +
                            kv.v_format.spec() + " at head_dim " + std::to_string(d));
  }
  auto merge = [&](size_t begin, size_t end) {
    std::vector<const float*> parts;
    for (size_t u = begin; u < end; ++u) {
      const size_t n = unit_first[u + 1] - unit_first[u];
      if (n < 2) continue;
      parts.clear();
      for (size_t w = unit_first[u]; w < unit_first[u + 1]; ++w) {
        parts.push_back(partials.get() + part_off[w]);
      }
      finalize(u, parts.data(), n);
    }
  };
  if (part_off.back() > 0) {
    if (pool && units.size() > 1) {
      pool->ParallelFor(units.size(), 1, merge);
    } else {
      merge(0, units.size());
    }
  }
  return Status::OK();
}

}  // namespace kvtier
