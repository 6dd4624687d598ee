// Prefill through the prefix cache and greedy continuation (prefill.h). Stateless.
#include "engine/prefill.h"

#include <algorithm>
#include <string>

#include "kvtier/thread_pool.h"
#include "base/timer.h"
#include "kvtier/batch_cache.h"

namespace kvtier::engine {
namespace {

// Runs `tokens` through the one row of `batch` in chunks of `ubatch`; the last token's
// logits in *logits.
Status Run(const Model& m, BatchCache& batch, std::span<const int32_t> tokens, uint32_t ubatch,
           std::vector<float>* logits, ThreadPool* threads) {
  logits->resize(m.config().n_vocab);
  for (size_t i = 0; i < tokens.size(); i += ubatch) {
    const size_t n = std::min<size_t>(ubatch, tokens.size() - i);
    const std::span<const int32_t> rows[1] = {tokens.subspan(i, n)};
    KVTIER_RETURN_IF_ERROR(m.Forward(batch, rows, false, logits->data(), threads));
  }
  return Status::OK();
}

}  // namespace

Result<PrefillOutcome> Prefill(const Model& model, PrefixCache* cache,
                               const std::shared_ptr<BlockPool>& pool,
                               std::span<const int32_t> prompt, uint32_t ubatch,
                               ThreadPool* threads) {
  if (prompt.empty()) return Status::InvalidArgument("prefill: empty prompt");
  if (ubatch == 0) return Status::InvalidArgument("prefill: ubatch must be > 0");
  PrefillOutcome out;
  Timer timer;
  SequenceCache seq(pool);
  if (cache != nullptr) {
    KVTIER_ASSIGN_OR_RETURN(PrefixFetchResult f, cache->Fetch(model.fingerprint(), prompt, pool));
    out.kind = f.kind;
    out.reused_tokens = f.reused_tokens;
    out.converted = f.converted;
    seq = std::move(f.sequence);
    // Sliding-window models resume where the window rows are present (docs/prefix-cache.md).
    if (const uint32_t p = seq.WindowResumePoint(); p < seq.size()) {
      KVTIER_RETURN_IF_ERROR(seq.Trim(seq.size() - p).status());
      out.reused_tokens = p;
    }
    // Token-grouped K (chan): a partial last group is recomputed from its start (its exact
    // keys did not come with the fetch), as a cold run quantizes it.
    if (const uint32_t g = pool->k_format().group; pool->k_format().is_token_grouped() && seq.size() % g != 0) {
      out.reused_tokens = seq.size() / g * g;
      KVTIER_RETURN_IF_ERROR(seq.Trim(seq.size() - out.reused_tokens).status());
    }
  }
  out.fetch_ms = timer.Millis();
  timer = Timer();
  KVTIER_ASSIGN_OR_RETURN(BatchCache batch, BatchCache::Merge([&] {
                            std::vector<SequenceCache> rows;
                            rows.push_back(std::move(seq));
                            return rows;
                          }()));
  KVTIER_RETURN_IF_ERROR(
      Run(model, batch, prompt.subspan(out.reused_tokens), ubatch, &out.logits, threads));
  KVTIER_ASSIGN_OR_RETURN(out.sequence, batch.Take(0));
  out.compute_ms = timer.Millis();
  return out;
}

Result<std::vector<int32_t>> GreedyContinue(const Model& model, SequenceCache& seq,
                                            std::vector<float> logits, uint32_t n,
                                            ThreadPool* threads) {
  if (logits.size() != model.config().n_vocab) {
    return Status::InvalidArgument("greedy: " + std::to_string(logits.size()) +
                                   " logits for a vocabulary of " +
                                   std::to_string(model.config().n_vocab));
  }
  std::vector<int32_t> out;
  std::vector<SequenceCache> rows;
  rows.push_back(std::move(seq));
  KVTIER_ASSIGN_OR_RETURN(BatchCache batch, BatchCache::Merge(std::move(rows)));
  for (uint32_t i = 0; i < n; ++i) {
    const int32_t next = static_cast<int32_t>(
        std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    if (i + 1 == n) break;
    KVTIER_RETURN_IF_ERROR(Run(model, batch, {&next, 1}, 1, &logits, threads));
  }
  KVTIER_ASSIGN_OR_RETURN(seq, batch.Take(0));
  return out;
}

}  // namespace kvtier::engine
