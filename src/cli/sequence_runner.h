// One sequence's forward pass on the device `kvtier generate` / `perplexity --device` name:
// "cpu" (Model::Forward over a BatchCache row of a pool sized for max_tokens; qwen35 with its
// recurrent state) or "cuda" (kvtier::CudaModel: the weights and the KV cache on the GPU; only
// in a build with the CUDA backend, otherwise a clear error; KVTIER_CUDA_GRAPHS=0 in the
// environment turns its decode-step graphs off). Single-threaded; the Model must outlive the
// runner.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvtier/model.h"
#include "kvtier/status.h"

namespace kvtier {
class ThreadPool;
}

namespace kvtier::cli {

// OK for "cpu" and "cuda"; "--device: ..." naming the value otherwise, or naming the missing
// backend when this build has no CUDA.
Status CheckDevice(const std::string& device);
// True in a build with the CUDA backend (-DKVTIER_CUDA, nvcc found).
bool CudaBackendBuilt();

class SequenceRunner {
 public:
  virtual ~SequenceRunner() = default;
  // tokens continue the sequence; logits [tokens, n_vocab] when all, else [1, n_vocab].
  virtual Status Forward(std::span<const int32_t> tokens, bool all, float* logits) = 0;
  // A new, empty sequence.
  virtual Status Reset() = 0;
  virtual std::string k_format() const = 0;
  virtual std::string v_format() const = 0;
  // "cpu" or the GPU's description.
  virtual std::string device() const = 0;
};

// kv_type: "K" or "K/V" (flag names it in errors); max_batch: tokens per Forward at most.
// threads is used by the CPU runner only.
Result<std::unique_ptr<SequenceRunner>> OpenRunner(const std::string& device, const Model& m,
                                                   const std::string& flag,
                                                   const std::string& kv_type,
                                                   uint32_t max_tokens, uint32_t max_batch,
                                                   ThreadPool* threads);

}  // namespace kvtier::cli
