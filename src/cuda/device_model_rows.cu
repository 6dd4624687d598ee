// CudaModel's batched step (ForwardRows) and the whole-block copies between its device pool and
// a host pool of the same layout; see kvtier/cuda_model.h. The layer loop is Impl::Body
// (device_model.cu): a step of rows is one forward pass over all their tokens, each token's
// attention row pointing at its own sequence's block table.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/device_model_impl.cuh"
#include "kvtier/weights.h"

namespace kvtier {

Status CudaModel::Impl::Rows(std::span<const CudaRow> rows, float* host_logits,
                             std::vector<Status>* status) {
  const ModelConfig& c = cfg;
  const std::string w = "CUDA forward (rows): ";
  if (opt.pool_blocks == 0) {
    return Status::InvalidArgument(w + "needs a CudaModel made with pool_blocks > 0");
  }
  const uint32_t R = static_cast<uint32_t>(rows.size());
  if (R == 0) return Status::InvalidArgument(w + "no rows");
  const uint32_t bt = opt.block_tokens;
  uint64_t T64 = 0;
  size_t n_ids = 0;
  uint32_t max_len = 0;
  for (uint32_t i = 0; i < R; ++i) {
    const CudaRow& r = rows[i];
    const std::string row = "row " + std::to_string(i) + ": ";
    if (r.tokens.empty()) return Status::InvalidArgument(w + row + "no tokens");
    const uint64_t end = uint64_t(r.length) + r.tokens.size();
    if (end > opt.max_tokens) {
      return Status::OutOfRange(w + row + std::to_string(end) + " tokens, past max_tokens " +
                                std::to_string(opt.max_tokens));
    }
    const size_t need = (end + bt - 1) / bt;
    if (r.blocks.size() < need) {
      return Status::InvalidArgument(w + row + std::to_string(r.blocks.size()) +
                                     " blocks for " + std::to_string(end) + " tokens (need " +
                                     std::to_string(need) + ")");
    }
    for (size_t b = 0; b < need; ++b) {
      if (r.blocks[b] < 0 || static_cast<uint32_t>(r.blocks[b]) >= opt.pool_blocks) {
        return Status::InvalidArgument(w + row + "block id " + std::to_string(r.blocks[b]) +
                                       " outside the pool's [0, " +
                                       std::to_string(opt.pool_blocks) + ")");
      }
    }
    for (size_t j = 0; j < r.tokens.size(); ++j) {
      if (r.tokens[j] < 0 || static_cast<uint32_t>(r.tokens[j]) >= c.n_vocab) {
        return Status::InvalidArgument(w + row + "token " + std::to_string(j) + " has id " +
                                       std::to_string(r.tokens[j]) +
                                       ", outside the vocabulary [0, " +
                                       std::to_string(c.n_vocab) + ")");
      }
    }
    T64 += r.tokens.size();
    n_ids += need;
    max_len = std::max<uint32_t>(max_len, static_cast<uint32_t>(end));
  }
  if (T64 > opt.max_batch) {
    return Status::InvalidArgument(w + std::to_string(T64) + " tokens in one step (at most " +
                                   std::to_string(opt.max_batch) + ")");
  }
  const uint32_t T = static_cast<uint32_t>(T64);
  KVTIER_RETURN_IF_ERROR(EnsureTable(n_ids));

  const size_t E = c.n_embd, V = c.n_vocab;
  const GgufTensor* embd = model->gguf().FindTensor("token_embd.weight");
  KVTIER_ASSIGN_OR_RETURN(const size_t embd_row, WeightRowBytes(embd->type, E));
  float* emb = reinterpret_cast<float*>(host_io + off_emb);
  auto* pos = reinterpret_cast<int32_t*>(host_io + off_pos);
  auto* slots = reinterpret_cast<int64_t*>(host_io + off_slots);
  auto* prow = reinterpret_cast<PagedKvRow*>(host_io + off_rows);
  auto* out_idx = reinterpret_cast<int32_t*>(host_io + off_out);
  auto* tab = reinterpret_cast<BlockId*>(host_io + off_table);
  const auto* dev_table = reinterpret_cast<const BlockId*>(io.as<uint8_t>() + off_table);
  uint32_t t = 0;
  size_t toff = 0;
  for (uint32_t i = 0; i < R; ++i) {
    const CudaRow& r = rows[i];
    const uint32_t n = static_cast<uint32_t>(r.tokens.size());
    const size_t need = (size_t(r.length) + n + bt - 1) / bt;
    std::memcpy(tab + toff, r.blocks.data(), need * sizeof(BlockId));
    for (uint32_t j = 0; j < n; ++j, ++t) {
      KVTIER_RETURN_IF_ERROR(DequantizeWeightRows(
          embd->type, embd->data + size_t(r.tokens[j]) * embd_row, 1, E, emb + size_t(t) * E));
      if (c.embd_scale != 1.0f) {
        for (size_t e = 0; e < E; ++e) emb[size_t(t) * E + e] *= c.embd_scale;
      }
      if (r.tokens[j] == opt.nan_token) std::fill_n(emb + size_t(t) * E, E, NAN);
      const uint32_t p = r.length + j;
      pos[t] = static_cast<int32_t>(p);
      slots[t] = int64_t(r.blocks[p / bt]) * bt + p % bt;
      prow[t].block_table = dev_table + toff;
      prow[t].n_blocks = static_cast<uint32_t>(need);
      prow[t].length = p + 1;  // causal: token j of the row sees its keys 0 .. p
    }
    out_idx[i] = static_cast<int32_t>(t - 1);
    toff += need;
  }
  KVTIER_CUDA_RETURN(cudaMemcpyAsync(io.data(), host_io, off_emb, cudaMemcpyHostToDevice,
                                     stream));
  KVTIER_CUDA_RETURN(cudaMemcpyAsync(io.as<uint8_t>() + off_table, tab, toff * sizeof(BlockId),
                                     cudaMemcpyHostToDevice, stream));
  KVTIER_CUDA_RETURN(cudaMemcpyAsync(x.data(), emb, size_t(T) * E * 4, cudaMemcpyHostToDevice,
                                     stream));
  if (T == R) {  // decode rows only: every token's logits, the graph when enabled
    // The key bound rounded up to 256 as for one sequence (a graph serves 256 steps).
    const uint32_t ml = (max_len + 255) / 256 * 256;
    if (opt.graphs && !graph_failed) {
      KVTIER_RETURN_IF_ERROR(LaunchGraph(T, ml));
    } else {
      KVTIER_RETURN_IF_ERROR(Body(T, T, ml, false));
    }
  } else {
    KVTIER_RETURN_IF_ERROR(Body(T, R, max_len, true));
  }
  KVTIER_CUDA_RETURN(cudaMemcpyAsync(host_logits, logits.data(), size_t(R) * V * 4,
                                     cudaMemcpyDeviceToHost, stream));
  KVTIER_CUDA_RETURN(cudaStreamSynchronize(stream));
  if (status != nullptr) status->assign(R, Status::OK());
  for (uint32_t i = 0; i < R; ++i) {
    const float* lg = host_logits + size_t(i) * V;
    for (size_t v = 0; v < V; ++v) {
      if (std::isfinite(lg[v])) continue;
      Status bad = Status::Internal(
          "CUDA forward: non-finite values (NaN or Inf) in the logits of row " +
          std::to_string(i) + " at position " +
          std::to_string(rows[i].length + rows[i].tokens.size() - 1));
      if (status == nullptr) return bad;
      std::swap((*status)[i], bad);
      break;
    }
  }
  return Status::OK();
}

namespace {

// Runs of consecutive ids (sorted, duplicates dropped): one copy per run.
template <typename Fn>
Status ForEachRun(std::span<const BlockId> ids, uint32_t n_blocks, Fn&& fn) {
  std::vector<BlockId> s(ids.begin(), ids.end());
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  for (size_t i = 0; i < s.size();) {
    if (s[i] < 0 || static_cast<uint32_t>(s[i]) >= n_blocks) {
      return Status::InvalidArgument("CUDA block copy: block id " + std::to_string(s[i]) +
                                     " outside the pool's [0, " + std::to_string(n_blocks) + ")");
    }
    size_t j = i + 1;
    while (j < s.size() && s[j] == s[j - 1] + 1) ++j;
    KVTIER_RETURN_IF_ERROR(fn(s[i], static_cast<uint32_t>(j - i)));
    i = j;
  }
  return Status::OK();
}

}  // namespace

Status CudaModel::ForwardRows(std::span<const CudaRow> rows, float* logits,
                              std::vector<Status>* row_status) {
  return impl_->Rows(rows, logits, row_status);
}

Status CudaModel::CopyBlocksToHost(std::span<const BlockId> ids, uint8_t* host_base) {
  Impl& m = *impl_;
  const size_t stride = m.pool->layout().block_stride;
  KVTIER_RETURN_IF_ERROR(
      ForEachRun(ids, m.pool->capacity_blocks(), [&](BlockId first, uint32_t n) -> Status {
        KVTIER_CUDA_RETURN(cudaMemcpyAsync(host_base + size_t(first) * stride,
                                           m.pool->block_data(first), size_t(n) * stride,
                                           cudaMemcpyDeviceToHost, m.stream));
        return Status::OK();
      }));
  KVTIER_CUDA_RETURN(cudaStreamSynchronize(m.stream));
  return Status::OK();
}

Status CudaModel::CopyBlocksFromHost(std::span<const BlockId> ids, const uint8_t* host_base) {
  Impl& m = *impl_;
  const size_t stride = m.pool->layout().block_stride;
  KVTIER_RETURN_IF_ERROR(
      ForEachRun(ids, m.pool->capacity_blocks(), [&](BlockId first, uint32_t n) -> Status {
        KVTIER_CUDA_RETURN(cudaMemcpyAsync(m.pool->block_data(first),
                                           host_base + size_t(first) * stride,
                                           size_t(n) * stride, cudaMemcpyHostToDevice, m.stream));
        return Status::OK();
      }));
  KVTIER_CUDA_RETURN(cudaStreamSynchronize(m.stream));
  return Status::OK();
}

Status CudaModel::PinHost(void* base, size_t bytes) {
  Impl& m = *impl_;
  if (m.pinned != nullptr) return Status::InvalidArgument("CUDA PinHost: already pinned");
  const cudaError_t e = cudaHostRegister(base, bytes, cudaHostRegisterDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::Unavailable("CUDA PinHost: cudaHostRegister of " + std::to_string(bytes) +
                               " bytes: " + cudaGetErrorString(e));
  }
  m.pinned = base;
  return Status::OK();
}

size_t CudaModel::block_stride() const { return impl_->pool->layout().block_stride; }

}  // namespace kvtier
