// Module engine (src/engine, kvtier_engine; order and include rule: docs/architecture.md) owns the
// scheduler (continuous batching, admission, preemption), stop strings, prefill helpers.
//
// Engine: continuous batching over the tiered KV cache. One scheduler thread runs steps; in
// each step every running request computes either its next chunk of prompt (at most
// prefill_step tokens) or its next token, all in one Model::Forward over a ragged batch.
// Requests join (admission looks up the prefix cache, which asks the SSD tier) and leave
// (finished, stopped, cancelled) between steps.
//
// The KV pool is never overrun: when a step cannot reserve its blocks, the engine first asks
// the prefix cache to evict, then preempts the most recently admitted request (its K/V goes
// to the prefix cache and it waits to be resumed, recomputing or reloading what is gone); a
// request that cannot fit even alone fails with ResourceExhausted. The prompt's K/V is stored
// in the prefix cache when its prefill ends, and the whole conversation's when it finishes.
// Models with a recurrent state (qwen35): each row's state lives in its request; snapshots of
// it go to the prefix cache after the prompt's last token but one, at the end of the
// conversation and at a preemption, and admission resumes from the longest snapshot at or
// before the cached K/V (docs/prefix-cache.md).
//
// Thread-safe: Submit and Cancel may be called from any thread. Callbacks run on the
// scheduler thread and must be quick.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/block_pool.h"
#include "kvtier/model.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/sampler.h"
#include "kvtier/status.h"
#include "kvtier/step_backend.h"

namespace kvtier {

struct EngineOptions {
  std::shared_ptr<BlockPool> pool;   // the active KV pool (required; the model's KV shape)
  PrefixCache* prefix_cache = nullptr;  // optional; must outlive the engine
  uint32_t max_num_seqs = 8;         // --max-num-seqs: running requests at most
  uint32_t prefill_step = 512;       // --prefill-step-size: prompt tokens per request per step
  uint32_t threads = 0;              // compute threads (0: every core)
  uint32_t max_waiting = 4096;       // queued requests at most; Submit is Unavailable beyond
  // One line per cache decision (`cache_fetch HIT kind=prefix cached=17 remaining=27`,
  // `cache_store tokens=253 format=affine8g64 bytes=...`), on the scheduler thread.
  std::function<void(const std::string&)> log;
  // Optional: steps run there instead of Model::Forward (kvtier/step_backend.h; the GPU).
  // Not with recurrent (qwen35) models. Must outlive the engine.
  StepBackend* backend = nullptr;
};

enum class FinishReason : uint8_t {
  kNone = 0,       // not finished
  kLength = 1,     // max_tokens generated
  kStop = 2,       // a stop token was generated (reported as a token first)
  kCancelled = 3,  // Cancel(), a callback returning false, or the engine shutting down
  kError = 4,      // see EngineEvent::error
};
std::string_view FinishReasonName(FinishReason r);  // "length", "stop", "cancelled", "error"

struct EngineRequest {
  std::vector<int32_t> prompt;       // at least one token, ids < n_vocab
  SamplingParams sampling;
  uint32_t max_tokens = 16;          // >= 1
  std::vector<int32_t> stop_tokens;  // e.g. the end-of-generation ids
  // Optional: masks each step's logits before sampling (e.g. JSON output); when its Accept
  // reports the output complete, the request finishes with kStop.
  std::shared_ptr<LogitConstraint> constraint;
};

struct EngineEvent {
  uint64_t id = 0;
  int32_t token = -1;                // the new token, or -1 in the final event
  FinishReason finish = FinishReason::kNone;
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;        // prompt tokens whose K/V came from the cache
  uint32_t generated_tokens = 0;     // so far, this token included
  Status error;                      // set when finish == kError
};
// Returns false to cancel the request.
using EngineCallback = std::function<bool(const EngineEvent&)>;

struct EngineStats {
  uint64_t submitted = 0, finished = 0, cancelled = 0, failed = 0;
  uint64_t steps = 0;
  uint64_t prompt_tokens = 0, cached_tokens = 0, computed_prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t cache_evictions_for_room = 0;  // bytes the prefix cache gave back for running rows
  uint32_t running = 0, waiting = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Create(const Model& model, EngineOptions options);
  // Cancels what is left (each request gets a kCancelled event) and stops the scheduler.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Events follow on the scheduler thread: one per generated token (finish
  // kNone), then exactly one final event (token -1, finish set).
  // InvalidArgument (naming the field) for bad requests, Unavailable when max_waiting requests
  // already wait; nothing is queued then.
  Result<uint64_t> Submit(EngineRequest request, EngineCallback callback);
  // Cancels a queued or running request (no-op if unknown or finished).
  void Cancel(uint64_t id);
  EngineStats Stats() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier
