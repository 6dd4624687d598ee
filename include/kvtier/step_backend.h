// Module engine (src/engine, kvtier_engine): the interface through which the engine's steps
// run somewhere other than the CPU's Model::Forward (`kvtier serve --device cuda`: the
// adapter over kvtier::CudaModel in src/cli/cuda_step.cc).
//
// StepBackend: the engine's host BlockPool stays the authority over blocks (ids, references,
// the prefix cache's sharing, the SSD and remote tiers below it); the backend keeps a device
// copy of the pool with the same block ids and layout, where each step's K/V is written and
// read. The two copies of a block are kept in step by three calls:
//   - Forward: each row's new tokens are counted in its host SequenceCache with
//     AppendExternal; their bytes exist on the device only (the block is "dirty" there);
//   - SyncToHost(seq): before the engine hands a sequence's K/V to the prefix cache (which
//     reads, quantizes and shares host blocks), the dirty blocks of seq come down;
//   - HostWritten(ids): blocks whose bytes the host wrote (a prefix-cache hit: shared, loaded
//     from SSD or converted; a copy-on-write copy) go up before a step reads them.
// Called from the engine's scheduler thread only; must outlive the engine.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "kvtier/kv_types.h"
#include "kvtier/sequence_cache.h"
#include "kvtier/status.h"

namespace kvtier {

class StepBackend {
 public:
  virtual ~StepBackend() = default;
  // One step: rows[i] (reserved for tokens[i].size() more tokens) takes tokens[i]; logits
  // [rows.size(), n_vocab]: each row's last token's. row_status (resized to the rows): a row
  // that failed alone (the engine fails that request and keeps the others); a returned error
  // fails every row of the step.
  virtual Status Forward(std::span<SequenceCache> rows,
                         std::span<const std::span<const int32_t>> tokens, float* logits,
                         std::vector<Status>* row_status) = 0;
  // Makes the host pool's copy of seq's blocks current (device -> host).
  virtual Status SyncToHost(const SequenceCache& seq) = 0;
  // The host bytes of these blocks are newer than the device's (host -> device).
  virtual Status HostWritten(std::span<const BlockId> ids) = 0;
  // For logs: "cuda (NVIDIA H100 80GB HBM3, ...)".
  virtual std::string name() const = 0;
};

}  // namespace kvtier
