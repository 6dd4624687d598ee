// Module cuda (src/cuda, kvtier_cuda; built only with -DKVTIER_CUDA, docs/architecture.md):
// the forward pass of a Model on the GPU, for one sequence or a step of rows (issue 35).
//
// CudaModel: a device-resident copy of a loaded Model (llama, qwen2, qwen3, phi3, gemma3; not
// qwen35) with its own device KV pool. Weights are uploaded once at Create, in their file type
// where the GPU multiplies that type directly (f32, f16, bf16, q8_0, q4_0: the same bytes as
// the GGUF), other types (K-quants, iq4_xs, ...) dequantized to f32 on the way. Activations live
// in device buffers; per layer: RMSNorm, q/k/v (dequantizing matvec for a few tokens, cuBLAS on
// the dequantized weights for more), biases, q/k norms, RoPE, quantize-on-append into the
// device pool (the CPU pool's block layout and format ids), paged attention (the decode
// kernels; a prompt chunk runs as one query row per token over the same block table, which is
// causal attention), the output projection, the gated FFN. The token embeddings are looked up
// on the host (any weight type), the logits copied back.
//
// Forward() continues the sequence: the n new tokens take positions length() .. length()+n-1,
// as Model::Forward does for a BatchCache row. Logits as Model::Forward's for one row.
// ForwardRows() runs a step of several sequences at once (the engine's ragged batch: prompt
// chunks beside one-token decode rows): the rows' tokens go through every product together
// (one matvec / GEMM pass per weight matrix), each token attends over its own row's block
// table in the device pool. With options.pool_blocks > 0 the caller manages the blocks (ids
// of a host BlockPool of the same layout, so a block moves between HBM and the RAM tier as the
// same bytes: CopyBlocksToHost / CopyBlocksFromHost); Forward() is then refused.
// Create() checks the device memory first: weights + KV pool + scratch against the free bytes,
// failing with ResourceExhausted naming both. The Model must outlive the CudaModel (its
// embeddings are read from the model's mapping). Not thread-safe; one stream of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/format.h"
#include "kvtier/kv_types.h"
#include "kvtier/model.h"
#include "kvtier/status.h"

namespace kvtier {

struct CudaModelOptions {
  Format k_format = Format::F16();  // K and V must be the same format on the GPU (f16, bf16,
  Format v_format = Format::F16();  // q8_0, q4_0)
  uint32_t max_tokens = 4096;       // KV capacity of the sequence
  uint32_t max_batch = 512;         // tokens per Forward call at most (sizes the scratch)
  uint32_t block_tokens = 32;
  // Calls with at least this many tokens multiply through cuBLAS (f32, on weights dequantized
  // per call); fewer use the dequantizing matvec.
  uint32_t gemm_min_tokens = 16;
  // The cuBLAS path multiplies resident f32 copies of the weight matrices (made once at
  // Create, on the host) instead of dequantizing each matrix per call, where they fit in a
  // quarter of the free device memory left after everything else; false: per call always.
  bool gemm_resident_f32 = true;
  // One-token steps replay a captured CUDA graph of their launches (recaptured when the
  // attention's split changes, every 256 tokens at most); false: plain launches.
  bool graphs = true;
  // > 0: the device pool has this many blocks, addressed by the caller's block ids
  // (ForwardRows); max_tokens then bounds one row only. 0: one sequence of max_tokens.
  uint32_t pool_blocks = 0;
  // Fault injection (tests, the serve smoke run): ForwardRows gives this token id a NaN
  // embedding, so its row's logits come out non-finite and that row alone fails. -1: off.
  int32_t nan_token = -1;
};

// One row of a batched step: `length` tokens of K/V already in the device pool's `blocks`,
// `tokens` appended now at positions length .. length + tokens.size() - 1. blocks must cover
// them all (ceil((length + tokens.size()) / block_tokens) ids, each < pool_blocks).
struct CudaRow {
  std::span<const BlockId> blocks;
  uint32_t length = 0;
  std::span<const int32_t> tokens;
};

class CudaModel {
 public:
  static Result<std::unique_ptr<CudaModel>> Create(const Model& model,
                                                   const CudaModelOptions& options);
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  // tokens: 1 .. max_batch new tokens; logits: [tokens.size(), n_vocab] when all_logits, else
  // [1, n_vocab] (the last token's). OutOfRange when the sequence would pass max_tokens.
  Status Forward(std::span<const int32_t> tokens, bool all_logits, float* logits);
  // A step of rows (pool_blocks > 0): the total of their tokens at most max_batch; logits
  // [rows.size(), n_vocab], each row's last token's. row_status (optional, resized to the
  // rows): a row whose logits are not finite gets Internal naming the row and position and the
  // others stay OK (the call returns OK then); a CUDA error fails the whole call.
  Status ForwardRows(std::span<const CudaRow> rows, float* logits,
                     std::vector<Status>* row_status = nullptr);
  // Whole blocks between the device pool and a host pool of the same layout: block id of
  // the device at host_base + id * block_stride() (synchronous copies; pool_blocks > 0).
  Status CopyBlocksToHost(std::span<const BlockId> ids, uint8_t* host_base);
  Status CopyBlocksFromHost(std::span<const BlockId> ids, const uint8_t* host_base);
  size_t block_stride() const;
  // Page-locks a host pool's memory (cudaHostRegister) so the block copies run at the link's
  // speed; undone when the CudaModel goes. An error leaves it pageable (copies still work).
  Status PinHost(void* base, size_t bytes);
  // Empties the sequence (its blocks back to the pool).
  void Reset();
  uint32_t length() const;
  // Device bytes held: weights, KV pool, scratch.
  size_t weight_bytes() const;
  size_t kv_bytes() const;
  size_t scratch_bytes() const;
  // "NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB, 50 MB L2".
  std::string device() const;

  struct Impl;

 private:
  explicit CudaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True when a CUDA device can run kernels; otherwise false with the reason in *why.
bool CudaDeviceAvailable(std::string* why = nullptr);

}  // namespace kvtier
