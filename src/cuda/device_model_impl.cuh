// CudaModel::Impl (kvtier/cuda_model.h), shared by device_model.cu (Create, the one-sequence
// Forward, the layer loop) and device_model_rows.cu (batched rows, block copies). Internal to
// src/cuda; nvcc only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <span>
#include <vector>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_kv.h"
#include "cuda/forward_ops.h"
#include "kvtier/cuda_model.h"

namespace kvtier {

using cuda::CudaStatus;  // KVTIER_CUDA_RETURN
using cuda::DeviceBuffer;

// One weight matrix on the device: n_out rows of n_in values in `format`, row r at
// data + r * row_bytes.
struct DevMat {
  const uint8_t* data = nullptr;
  Format format;
  uint32_t n_in = 0, n_out = 0;
  size_t row_bytes = 0;
  const float* f32 = nullptr;  // resident f32 copy [n_out, n_in] for the cuBLAS path, or null
};

struct DevLayer {
  const float* attn_norm = nullptr;
  DevMat wq, wk, wv, wqkv, wo;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;
  const float *q_norm = nullptr, *k_norm = nullptr;
  const float* ffn_norm = nullptr;
  DevMat gate, up, down;  // gate empty: up holds gate rows then up rows (phi3)
  // One-token steps: q|k|v rows and gate|up rows as one matrix each where they are stored
  // back to back in one format (one matvec instead of three / two); else empty.
  DevMat qkv1, gu1;
  const float *attn_post_norm = nullptr, *ffn_post_norm = nullptr;
};

struct CudaModel::Impl {
  const Model* model = nullptr;
  ModelConfig cfg;
  CudaModelOptions opt;
  DeviceBuffer weights;
  size_t weight_bytes = 0, scratch_bytes = 0;
  std::vector<DevLayer> layers;
  DevMat output;
  const float* output_norm = nullptr;
  const float* rope_freqs = nullptr;
  std::unique_ptr<cuda::DevicePool> pool;
  std::vector<BlockId> table;  // the sequence's blocks
  uint32_t length = 0;
  cudaStream_t stream = nullptr;
  cuda::GemmWorkspace gemm;
  cuda::DecodeWorkspace dws;
  // Scratch, [max_batch, ...] f32:
  DeviceBuffer x, xb, q, k, v, att, gate, up, logits;
  DeviceBuffer one;  // one-token steps: [q | k | v] then [gate | up] of the fused products
  // The per-call inputs: pos [B] i32 | slots [B] i64 | rows [B] PagedKvRow | out_idx [B] i32
  // (the tokens whose logits a batched step returns) | emb [B, E] f32 (copied up to x, not to
  // io) | block tables [table_cap] BlockId (the rows' tables back to back).
  DeviceBuffer io;
  uint8_t* host_io = nullptr;  // pinned, same layout
  size_t off_pos = 0, off_slots = 0, off_rows = 0, off_out = 0, off_emb = 0, off_table = 0;
  size_t io_bytes = 0, table_cap = 0;

  void* pinned = nullptr;  // PinHost's range
  DeviceBuffer weights_f32;  // resident f32 copies of the matrices (gemm_resident_f32)
  cublasHandle_t blas = nullptr;

  ~Impl() {
    if (pinned) cudaHostUnregister(pinned);
    if (blas) cublasDestroy(blas);
    if (graph_exec) cudaGraphExecDestroy(graph_exec);
    if (host_io) cudaFreeHost(host_io);
    if (stream) cudaStreamDestroy(stream);
  }

  Status Mat(const DevMat& w, uint32_t row0, uint32_t n_rows, const float* in, uint32_t n_tok,
             float* out) {
    const uint8_t* p = w.data + static_cast<size_t>(row0) * w.row_bytes;
    if (n_tok >= opt.gemm_min_tokens && w.f32 != nullptr && blas != nullptr) {
      return GemmF32(w.f32 + static_cast<size_t>(row0) * w.n_in, n_rows, w.n_in, in, n_tok, out);
    }
    if (n_tok >= opt.gemm_min_tokens) {
      return cuda::GemmRows(p, w.format, n_rows, w.n_in, w.row_bytes, in, n_tok, out, DType::kF32,
                            &gemm, stream);
    }
    return cuda::MatVecRows(p, w.format, n_rows, w.n_in, w.row_bytes, in, n_tok, out, stream);
  }
  // y [n_tok, n_out] = x [n_tok, k] . W^T, W resident f32 [n_out, k] (an f32 SGEMM).
  Status GemmF32(const float* W, uint32_t n_out, uint32_t k, const float* x, uint32_t n_tok,
                 float* y);
  Status Add(float* a, const float* b, size_t n);
  // x += y, then out = RMSNorm(x) * w, for n_tok rows of n.
  Status AddNorm(float* x, const float* y, const float* w, uint32_t n_tok, uint32_t n,
                 float* out);
  Status Bias(float* a, const float* b, size_t n_tok, uint32_t n);
  // Makes room for n_ids block ids in io's table region (reallocating io and host_io, which
  // drops a captured graph).
  Status EnsureTable(size_t n_ids);
  Status Run(std::span<const int32_t> tokens, bool all_logits, float* host_logits);
  // The layers and the logits [n_out, V] from x [T, E] and the inputs in io: of the last
  // n_out tokens, or (gather) of the tokens out_idx names.
  Status Body(uint32_t T, uint32_t n_out, uint32_t max_length, bool gather);
  // A step of T one-token rows (logits of every row) through a captured graph.
  Status LaunchGraph(uint32_t T, uint32_t max_length);
  Status Rows(std::span<const CudaRow> rows, float* host_logits, std::vector<Status>* status);
  void DropGraph();

  // The captured one-token step and what it was captured for.
  cudaGraphExec_t graph_exec = nullptr;
  bool graph_failed = false;
  uint32_t graph_key_len = 0, seen_len = 0, graph_key_t = 0, seen_t = 0;
  const void *graph_key_part = nullptr, *graph_key_ctr = nullptr;
  const void *seen_part = nullptr, *seen_ctr = nullptr;
};

}  // namespace kvtier
