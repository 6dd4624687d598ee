// `kvtier serve --device cuda`: the engine's steps on the GPU. OpenCudaStep makes a
// StepBackend (kvtier/step_backend.h) over a kvtier::CudaModel whose device pool mirrors the
// engine's host BlockPool block for block (same ids, same layout): rows run as one batched
// forward pass (CudaModel::ForwardRows, split into calls of at most max_batch tokens), the
// prefix cache's blocks move host <-> device with synchronous whole-block copies (runs of
// consecutive ids as one copy) when the engine stores a sequence (down) and when it admits a
// cache hit or copies a block on write (up). A row whose logits come out non-finite fails
// alone; a CUDA error fails the step's rows (each request gets its error) and the engine goes
// on with the next step. In a build without the CUDA backend: Unimplemented naming the
// configure flag. Single-threaded (the engine's scheduler thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/block_pool.h"
#include "kvtier/model.h"
#include "kvtier/status.h"
#include "kvtier/step_backend.h"

namespace kvtier::cli {

// device: "cuda" (CheckDevice's names). max_batch: tokens per GPU call at most (scratch).
// The Model and the pool must outlive the backend.
Result<std::unique_ptr<StepBackend>> OpenCudaStep(const std::string& device, const Model& m,
                                                  std::shared_ptr<BlockPool> pool,
                                                  uint32_t max_batch);

}  // namespace kvtier::cli
