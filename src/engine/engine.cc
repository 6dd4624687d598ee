// Engine (kvtier/engine.h): the scheduler thread, admission through the prefix cache, ragged
// steps of chunked prefill and decode, preemption when the pool is full, and the stores.
// `mu` guards the waiting queue, cancellations and statistics; the running rows belong to the
// scheduler thread alone.
#include "kvtier/engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "kvtier/thread_pool.h"
#include "kvtier/batch_cache.h"

namespace kvtier {

std::string_view FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

namespace {

using Clock = std::chrono::steady_clock;

// Recurrent models: a prompt that resumes from a snapshot and computes at most this many
// tokens is not cut at its last token but one (docs/prefix-cache.md, "Snapshot points").
constexpr size_t kShortTailTokens = 64;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string Ms(double ms) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", ms);
  return b;
}

// Where a request's time to first token went (the `ttft` log line).
struct FirstTokenTimes {
  Clock::time_point submitted = Clock::now();
  double queue_ms = 0;    // submitted -> admitted
  double fetch_ms = 0;    // PrefixCache::Fetch (match, tiers, conversion, snapshot lookup)
  double load_ms = 0;     // the snapshot loaded into the row's state
  double forward_ms = 0;  // forward steps the row was in (shared with the batch's other rows)
  double store_ms = 0;    // the prompt snapshot at the cut (before the first token)
  uint32_t steps = 0;
  std::string step_ms;    // each step's forward ms / tokens, "+"-separated
  uint32_t computed = 0;  // tokens the row computed
  bool logged = false;
};

// " ms=... tier_chain_ms=..." of a fetch (cache_fetch lines).
std::string FetchTimes(const PrefixFetchResult& f, double ms) {
  const PrefixFetchResult::Times& t = f.times;
  auto m = [](uint32_t us) { return Ms(us / 1000.0); };
  return " ms=" + Ms(ms) + " tier_chain_ms=" + m(t.tier_chain_us) + " match_ms=" + m(t.match_us) +
         " convert_ms=" + m(t.convert_us) + " state_ms=" + m(t.state_us) +
         " state_tier_ms=" + m(t.state_tier_us) + " state_widen_ms=" + m(t.state_widen_us);
}

struct Req {
  Req(uint64_t i, EngineRequest r, EngineCallback c)
      : id(i), req(std::move(r)), cb(std::move(c)), sampler(req.sampling), all(req.prompt) {}
  uint64_t id;
  EngineRequest req;
  EngineCallback cb;
  Sampler sampler;
  std::vector<int32_t> all;     // prompt, then every generated token
  uint32_t generated = 0;
  uint32_t cached = 0;          // prompt tokens from the cache at first admission
  bool admitted_before = false;
  bool prompt_stored = false;
  SequenceCache seq;            // K/V of all[0, seq.size())
  HybridSeqState state;         // recurrent models: the state after all[0, seq.size())
  bool prompt_state_stored = false;
  // Recurrent models: the prefill stops at the prompt's last token but one for its snapshot
  // (set at each admission; see NextChunk).
  bool cut_prompt = false;
  FirstTokenTimes ft;
};

}  // namespace

struct Engine::Impl {
  Impl(const Model& m, EngineOptions o)
      : model(m),
        opt(std::move(o)),
        threads(opt.threads > 0 ? static_cast<int>(opt.threads)
                                : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {}

  void Loop();
  void Admit(Req& r);
  void Step();
  // Makes room for row i's next n tokens: evicts from the prefix cache, then preempts the most
  // recently admitted other row. False when row i cannot fit even alone.
  bool Reserve(size_t i, uint32_t n);
  void Preempt(size_t i);
  // Delivers an event; returns the callback's answer.
  bool Emit(Req& r, int32_t token, FinishReason finish, Status error = Status::OK());
  void Finish(std::unique_ptr<Req> r, FinishReason why, Status error = Status::OK());
  // Stores r's K/V for `tokens` in the prefix cache (moving it when `give` is set) and logs it.
  void Store(Req& r, std::span<const int32_t> tokens, const char* what, bool give);
  // Recurrent models: keeps r's state (after all[0, seq.size())) in the prefix cache.
  void StoreState(Req& r, const char* what);
  void Log(const std::string& line) {
    if (opt.log) opt.log(line);
  }

  const Model& model;
  const EngineOptions opt;
  // qwen35: rows carry a recurrent state; snapshots go to the prefix cache at the prompt's
  // last token but one and at the end of each conversation (and at a preemption).
  const bool recurrent = model.state_format() != 0;
  const bool snapshots = recurrent && opt.prefix_cache != nullptr;
  ThreadPool threads;
  std::vector<float> logits;  // [rows, n_vocab]

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Req>> waiting;
  std::unordered_set<uint64_t> cancels;
  bool stop = false;
  uint64_t next_id = 1;
  EngineStats stats;
  std::vector<std::unique_ptr<Req>> running;  // scheduler thread only, in admission order
  std::thread thread;
};

bool Engine::Impl::Emit(Req& r, int32_t token, FinishReason finish, Status error) {
  EngineEvent e;
  e.id = r.id;
  e.token = token;
  e.finish = finish;
  e.prompt_tokens = static_cast<uint32_t>(r.req.prompt.size());
  e.cached_tokens = r.cached;
  e.generated_tokens = r.generated;
  e.error = std::move(error);
  return r.cb(e);
}

void Engine::Impl::Store(Req& r, std::span<const int32_t> tokens, const char* what, bool give) {
  const Clock::time_point t0 = Clock::now();
  if (opt.backend != nullptr) {  // the prefix cache reads the host copy of the blocks
    const Status synced = opt.backend->SyncToHost(r.seq);
    if (!synced.ok()) {
      Log("cache_store id=" + std::to_string(r.id) + " what=" + what +
          " FAILED: " + synced.message());
      return;
    }
  }
  Result<PrefixStoreResult> s =
      give ? opt.prefix_cache->Store(model.fingerprint(), tokens, std::move(r.seq))
           : opt.prefix_cache->Store(model.fingerprint(), tokens, r.seq);
  const double ms = MsSince(t0);
  if (!opt.log) return;
  if (!s.ok()) {
    Log("cache_store id=" + std::to_string(r.id) + " what=" + what +
        " FAILED: " + s.status().message());
    return;
  }
  const PrefixCacheOptions& po = opt.prefix_cache->options();
  const Format fk = s->quantized && po.store_format ? *po.store_format : opt.pool->k_format();
  const Format fv = s->quantized && po.store_format ? po.store_v_format.value_or(*po.store_format)
                                                    : opt.pool->v_format();
  const std::string fmt = fk == fv ? fk.name() : fk.name() + "/" + fv.name();
  Log("cache_store id=" + std::to_string(r.id) + " what=" + what +
      " tokens=" + std::to_string(s->stored_tokens) + " format=" + fmt +
      " new_blocks=" + std::to_string(s->new_blocks) +
      " shared_blocks=" + std::to_string(s->shared_blocks) + " bytes=" +
      std::to_string(uint64_t{s->new_blocks} * opt.pool->layout().block_stride) +
      (s->evicted_blocks > 0 ? " evicted_blocks=" + std::to_string(s->evicted_blocks) : "") +
      (s->written_through_blocks > 0
           ? " written_through=" + std::to_string(s->written_through_blocks) +
                 (s->lower_tier_only ? " lower_tier_only" : "")
           : "") +
      " ms=" + Ms(ms));
}

void Engine::Impl::StoreState(Req& r, const char* what) {
  if (!recurrent || opt.prefix_cache == nullptr || !r.seq.valid() || r.seq.size() == 0 ||
      r.state.n_past != r.seq.size()) {
    return;
  }
  const Clock::time_point t0 = Clock::now();
  auto snap = std::make_shared<const StateSnapshot>(model.SaveState(r.state));
  const double save_ms = MsSince(t0);
  const Status s = opt.prefix_cache->StoreState(
      model.fingerprint(), std::span<const int32_t>(r.all).first(r.state.n_past), snap);
  Log("cache_store_state id=" + std::to_string(r.id) + " what=" + what +
      " position=" + std::to_string(r.state.n_past) +
      (s.ok() ? " bytes=" + std::to_string(snap->bytes()) : " FAILED: " + s.message()) +
      " save_ms=" + Ms(save_ms) + " ms=" + Ms(MsSince(t0)));
}

void Engine::Impl::Finish(std::unique_ptr<Req> r, FinishReason why, Status error) {
  if (why != FinishReason::kError) StoreState(*r, "conversation");
  if (opt.prefix_cache != nullptr && r->seq.valid() && r->seq.size() > 0) {
    // The whole conversation (all but the last sampled token has K/V) for the next turn.
    Store(*r, r->all, "conversation", true);
  }
  r->seq = SequenceCache();
  {
    // Counted before the final event, so whoever waits on it sees the statistics.
    std::lock_guard<std::mutex> lock(mu);
    ++stats.finished;
    stats.cancelled += why == FinishReason::kCancelled;
    stats.failed += why == FinishReason::kError;
  }
  Emit(*r, -1, why, std::move(error));
}

void Engine::Impl::Admit(Req& r) {
  r.seq = SequenceCache(opt.pool);
  r.state = HybridSeqState();
  if (!r.admitted_before) r.ft.queue_ms = MsSince(r.ft.submitted);
  if (opt.prefix_cache != nullptr) {
    PrefixFetchOptions fo;
    fo.recurrent_state = recurrent;
    const Clock::time_point t0 = Clock::now();
    Result<PrefixFetchResult> f =
        opt.prefix_cache->Fetch(model.fingerprint(), r.all, opt.pool, fo);
    if (!r.admitted_before) r.ft.fetch_ms = MsSince(t0);
    const Clock::time_point t1 = Clock::now();
    if (f.ok() && recurrent && f->state != nullptr) {
      Result<HybridSeqState> st = model.LoadState(*f->state);
      if (st.ok()) {
        r.state = std::move(*st);
      } else {  // not this model's state: recompute everything
        Log("cache_fetch id=" + std::to_string(r.id) + " state refused: " +
            st.status().message());
        f->sequence = SequenceCache(opt.pool);
        f->reused_tokens = 0;
      }
    }
    if (!r.admitted_before) r.ft.load_ms = MsSince(t1);
    if (f.ok()) {
      if (opt.log) {
        const uint32_t reused = f->reused_tokens;
        Log(std::string("cache_fetch id=") + std::to_string(r.id) +
            (reused > 0 ? " HIT kind=" : " MISS kind=") +
            std::string(PrefixMatchKindName(f->kind)) + " cached=" + std::to_string(reused) +
            " remaining=" + std::to_string(r.all.size() - reused) +
            (reused > 0 ? " format=" + f->k_format.name() +
                              (f->k_format == f->v_format ? "" : "/" + f->v_format.name()) +
                              (f->converted ? " converted" : "")
                        : "") +
            (r.admitted_before ? " resumed" : "") +
            (recurrent ? " state=" + std::to_string(f->state ? f->state->position : 0) +
                             " state_trimmed=" + std::to_string(f->state_trimmed_tokens)
                       : "") +
            FetchTimes(*f, MsSince(t0)));
      }
      r.seq = std::move(f->sequence);
      // Sliding-window models: resume where the window rows are present (docs/prefix-cache.md).
      if (const uint32_t p = r.seq.WindowResumePoint(); p < r.seq.size()) {
        Log("cache_fetch id=" + std::to_string(r.id) + " window resume " +
            std::to_string(r.seq.size()) + " -> " + std::to_string(p));
        if (!r.seq.Trim(r.seq.size() - p).ok()) r.seq = SequenceCache(opt.pool);
      }
      // Token-grouped K (chan): a fetched partial last group lacks its exact keys; it is
      // recomputed from its start, so the hit writes the bytes a cold run writes.
      if (const uint32_t p = r.seq.size() / opt.pool->k_format().group * opt.pool->k_format().group;
          opt.pool->k_format().is_token_grouped() && p < r.seq.size()) {
        Log("cache_fetch id=" + std::to_string(r.id) + " group resume " +
            std::to_string(r.seq.size()) + " -> " + std::to_string(p));
        if (!r.seq.Trim(r.seq.size() - p).ok()) r.seq = SequenceCache(opt.pool);
      }
    } else {
      Log("cache_fetch id=" + std::to_string(r.id) + " FAILED: " + f.status().message());
    }
  }
  // The backend's device copy gets the blocks the cache handed over (their bytes are the host's).
  if (opt.backend != nullptr && r.seq.valid() && r.seq.n_blocks() > 0) {
    const Status up = opt.backend->HostWritten(r.seq.block_ids());
    if (!up.ok()) {
      Log("cache_fetch id=" + std::to_string(r.id) + " upload FAILED (recomputing): " +
          up.message());
      r.seq = SequenceCache(opt.pool);
    }
  }
  // The prompt's end is stored as an entry: its window rows stay a resume point.
  r.seq.KeepWindowRowsAt(static_cast<uint32_t>(r.req.prompt.size()));
  // Recurrent models: a cold prompt, or one that computes more than kShortTailTokens from its
  // snapshot, stops its prefill at its last token but one for the prompt's snapshot (an exact
  // repeat then computes one token). A short tail after a snapshot is computed in one step:
  // the cut would cost a second pass over the weights before the first token; its snapshot
  // is taken at the prompt's end instead, after the first token is sent.
  const size_t at = r.seq.size();
  r.cut_prompt = snapshots && (at == 0 || at + kShortTailTokens < r.req.prompt.size());
  if (!r.admitted_before) {
    r.cached = std::min<uint32_t>(r.seq.size(), static_cast<uint32_t>(r.req.prompt.size()));
    r.admitted_before = true;
    std::lock_guard<std::mutex> lock(mu);
    stats.cached_tokens += r.cached;
  }
}

void Engine::Impl::Preempt(size_t i) {
  std::unique_ptr<Req> r = std::move(running[i]);
  running.erase(running.begin() + static_cast<long>(i));
  Log("preempt id=" + std::to_string(r->id) + " tokens=" + std::to_string(r->seq.size()));
  StoreState(*r, "preempted");
  if (opt.prefix_cache != nullptr && r->seq.size() > 0) Store(*r, r->all, "preempted", true);
  r->seq = SequenceCache();
  r->state = HybridSeqState();
  std::lock_guard<std::mutex> lock(mu);
  ++stats.preemptions;
  waiting.push_front(std::move(r));
}

bool Engine::Impl::Reserve(size_t i, uint32_t n) {
  // With a backend: blocks holding tokens that a copy-on-write replaced were written on the host.
  std::vector<BlockId> before;
  if (opt.backend != nullptr) {
    const auto ids = running[i]->seq.block_ids();
    before.assign(ids.begin(), ids.end());
  }
  for (;;) {
    Status s = running[i]->seq.Reserve(n);
    if (s.ok() && opt.backend != nullptr) {
      const SequenceCache& q = running[i]->seq;
      const size_t held = (size_t{q.size()} + q.pool()->block_tokens() - 1) / q.pool()->block_tokens();
      std::vector<BlockId> copied;
      for (size_t b = 0; b < std::min(held, before.size()); ++b) {
        if (q.block_ids()[b] != before[b]) copied.push_back(q.block_ids()[b]);
      }
      if (!copied.empty()) s = opt.backend->HostWritten(copied);
      if (!s.ok()) {
        Log("reserve id=" + std::to_string(running[i]->id) + " FAILED: " + s.message());
        return false;
      }
    }
    if (s.ok()) return true;
    if (s.code() != StatusCode::kResourceExhausted) return false;
    const uint64_t stride = opt.pool->layout().block_stride;
    const uint64_t need = (n / opt.pool->block_tokens() + 2) * stride;
    if (opt.prefix_cache != nullptr) {
      const uint64_t freed = opt.prefix_cache->Evict(need);
      if (freed > 0) {
        std::lock_guard<std::mutex> lock(mu);
        stats.cache_evictions_for_room += freed;
        continue;
      }
    }
    // The most recently admitted row other than i gives its blocks back.
    size_t victim = running.size();
    for (size_t j = running.size(); j-- > 0;) {
      if (j != i) {
        victim = j;
        break;
      }
    }
    if (victim == running.size()) return false;
    Preempt(victim);
    if (victim < i) --i;
  }
}

namespace {

// Tokens row r computes next: its next prompt chunk (at most `step`), or its last sampled
// token. With `cut_prompt` (a recurrent model with a prefix cache, and a cold or long prompt)
// the chunk stops at the prompt's last token but one, where the row's state is snapshotted,
// so a request with this prompt resumes there and computes one token.
uint32_t NextChunk(const Req& r, uint32_t step) {
  const uint32_t done = r.seq.size();
  uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(r.all.size()) - done, step);
  const uint32_t cut = static_cast<uint32_t>(r.req.prompt.size()) - 1;
  if (r.cut_prompt && !r.prompt_state_stored && done < cut && done + n > cut) n = cut - done;
  return n;
}

}  // namespace

void Engine::Impl::Step() {
  // What each row computes: its next prompt chunk, or its last sampled token.
  std::vector<std::span<const int32_t>> tokens;
  for (size_t i = 0; i < running.size();) {
    Req& r = *running[i];
    const uint32_t done = r.seq.size();
    const uint32_t n = NextChunk(r, opt.prefill_step);
    if (!Reserve(i, n)) {
      std::unique_ptr<Req> failed = std::move(running[i]);
      running.erase(running.begin() + static_cast<long>(i));
      Status why = Status::ResourceExhausted(
          "the KV pool (" + std::to_string(opt.pool->layout().block_stride *
                                           opt.pool->capacity_blocks()) +
          " bytes) cannot hold this request: " + std::to_string(n) + " more tokens after " +
          std::to_string(done));
      Finish(std::move(failed), FinishReason::kError, std::move(why));
      i = 0;  // a preemption may have moved rows: check them all again
      continue;
    }
    ++i;
  }
  if (running.empty()) return;
  std::vector<SequenceCache> seqs;
  std::vector<HybridSeqState*> states;  // recurrent models: row i's state
  for (auto& r : running) {
    const uint32_t done = r->seq.size();
    const uint32_t n = NextChunk(*r, opt.prefill_step);
    tokens.emplace_back(r->all.data() + done, n);
    seqs.push_back(std::move(r->seq));
    if (recurrent) states.push_back(&r->state);
  }
  const size_t V = model.config().n_vocab;
  logits.resize(running.size() * V);
  Status s;
  std::vector<Status> row_status;  // backend: rows that failed alone
  const Clock::time_point t_forward = Clock::now();
  if (opt.backend != nullptr) {
    s = opt.backend->Forward(seqs, tokens, logits.data(), &row_status);
    for (size_t i = 0; i < running.size(); ++i) running[i]->seq = std::move(seqs[i]);
  } else {
    Result<BatchCache> batch = BatchCache::Merge(std::move(seqs));
    s = batch.status();
    if (s.ok()) s = model.Forward(*batch, tokens, false, logits.data(), &threads, states);
    if (batch.ok()) {
      for (auto& r : running) {
        Result<SequenceCache> back = batch->Take(0);
        if (back.ok()) r->seq = std::move(*back);
      }
    }
  }
  const double forward_ms = MsSince(t_forward);
  for (size_t i = 0; i < running.size(); ++i) {
    FirstTokenTimes& ft = running[i]->ft;
    if (running[i]->generated > 0) continue;
    ft.forward_ms += forward_ms;
    ft.step_ms +=
        (ft.steps > 0 ? "+" : "") + Ms(forward_ms) + "/" + std::to_string(tokens[i].size());
    ++ft.steps;
    ft.computed += static_cast<uint32_t>(tokens[i].size());
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.steps;
  }
  if (!s.ok()) {  // the cache may be half written: every row fails
    std::vector<std::unique_ptr<Req>> rows = std::move(running);
    running.clear();
    for (auto& r : rows) {
      r->seq = SequenceCache();
      Finish(std::move(r), FinishReason::kError, s);
    }
    return;
  }
  // Rows that sample now without a constraint (it may keep shared state) sample in parallel
  // first: over a large vocabulary the samplers, not the forward pass, bound a GPU step.
  std::vector<int32_t> sampled(running.size(), -1);
  threads.ParallelFor(running.size(), 1, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      Req& r = *running[i];
      if ((i < row_status.size() && !row_status[i].ok()) || r.req.constraint ||
          r.seq.size() < r.all.size()) {
        continue;
      }
      sampled[i] = r.sampler.Sample(std::span<float>(logits.data() + i * V, V));
    }
  });
  std::vector<std::unique_ptr<Req>> keep;
  for (size_t i = 0; i < running.size(); ++i) {
    std::unique_ptr<Req> r = std::move(running[i]);
    if (i < row_status.size() && !row_status[i].ok()) {  // this row alone failed
      r->seq = SequenceCache();
      Finish(std::move(r), FinishReason::kError, row_status[i]);
      continue;
    }
    const uint32_t computed = static_cast<uint32_t>(tokens[i].size());
    const bool prompt_part = r->seq.size() <= r->req.prompt.size();
    if (recurrent && !r->prompt_state_stored && r->req.prompt.size() >= 2 &&
        r->seq.size() + 1 == r->req.prompt.size()) {
      const Clock::time_point t0 = Clock::now();
      StoreState(*r, "prompt");
      if (r->generated == 0) r->ft.store_ms += MsSince(t0);
      r->prompt_state_stored = true;
    }
    if (r->seq.size() < r->all.size()) {  // more prompt to go
      std::lock_guard<std::mutex> lock(mu);
      stats.computed_prompt_tokens += computed;
      keep.push_back(std::move(r));
      continue;
    }
    if (prompt_part) {
      std::lock_guard<std::mutex> lock(mu);
      stats.computed_prompt_tokens += computed;
    }
    const Clock::time_point t_sample = Clock::now();
    std::span<float> row(logits.data() + i * V, V);
    if (r->req.constraint) r->req.constraint->Mask(row);
    const int32_t token = sampled[i] >= 0 ? sampled[i] : r->sampler.Sample(row);
    if (r->generated == 0 && !r->ft.logged && opt.log) {
      // Where the time to the first token went (docs/results/model.md, seed 004's test).
      const FirstTokenTimes& ft = r->ft;
      r->ft.logged = true;
      Log("ttft id=" + std::to_string(r->id) + " ms=" + Ms(MsSince(ft.submitted)) +
          " queue_ms=" + Ms(ft.queue_ms) + " fetch_ms=" + Ms(ft.fetch_ms) +
          " state_load_ms=" + Ms(ft.load_ms) + " forward_ms=" + Ms(ft.forward_ms) +
          " steps=" + std::to_string(ft.steps) + " (" + ft.step_ms +
          ") computed=" + std::to_string(ft.computed) + " cached=" + std::to_string(r->cached) +
          " store_ms=" + Ms(ft.store_ms) + " sample_ms=" + Ms(MsSince(t_sample)));
    }
    const bool complete = r->req.constraint && r->req.constraint->Accept(token);
    r->all.push_back(token);
    ++r->generated;
    {
      std::lock_guard<std::mutex> lock(mu);
      ++stats.generated_tokens;
    }
    const bool wanted = Emit(*r, token, FinishReason::kNone);
    if (!r->prompt_stored && opt.prefix_cache != nullptr) {
      // After the first token is sent: the stores are off its path. A prompt computed from a
      // snapshot in one step (no cut) has its snapshot at the prompt's end, unless it resumed
      // at the last token but one (an exact hit: that snapshot serves).
      if (snapshots && !r->prompt_state_stored && r->cached + 1 < r->req.prompt.size() &&
          r->state.n_past == r->req.prompt.size()) {
        StoreState(*r, "prompt_end");
      }
      r->prompt_state_stored = true;
      Store(*r, r->req.prompt, "prompt", false);
      r->prompt_stored = true;
    }
    FinishReason why = FinishReason::kNone;
    if (std::find(r->req.stop_tokens.begin(), r->req.stop_tokens.end(), token) !=
        r->req.stop_tokens.end() || complete) {
      why = FinishReason::kStop;
    } else if (r->generated >= r->req.max_tokens) {
      why = FinishReason::kLength;
    } else {
      std::lock_guard<std::mutex> lock(mu);
      if (cancels.erase(r->id) > 0 || !wanted) why = FinishReason::kCancelled;
    }
    if (why != FinishReason::kNone) {
      Finish(std::move(r), why);
      continue;
    }
    keep.push_back(std::move(r));
  }
  running = std::move(keep);
}

void Engine::Impl::Loop() {
  for (;;) {
    std::vector<std::unique_ptr<Req>> admit, dropped;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop || !waiting.empty() || !running.empty(); });
      if (stop) break;
      // Cancelled while waiting: they finish without running.
      for (auto it = waiting.begin(); it != waiting.end();) {
        if (cancels.erase((*it)->id) > 0) {
          dropped.push_back(std::move(*it));
          it = waiting.erase(it);
        } else {
          ++it;
        }
      }
      // Admission waits while the pool cannot take the next request's tokens (blocks the
      // prefix cache holds alone count as free: it gives them back on demand), unless nothing
      // runs: then it goes in and either fits or fails alone. Counted in bytes: a sliding-
      // window model's row holds window pages only for its last blocks (RowBytes).
      const PoolStats ps = opt.pool->Stats();
      uint64_t free_bytes = ps.free_bytes;
      bool counted_cache = opt.prefix_cache == nullptr;
      while (running.size() + admit.size() < opt.max_num_seqs && !waiting.empty()) {
        const uint64_t need =
            opt.pool->layout().RowBytes(waiting.front()->all.size(), opt.prefill_step);
        if (need > free_bytes && !counted_cache) {
          // Only when the free blocks fall short: the statistics walk the cache's blocks.
          counted_cache = true;
          const PrefixCacheStats cs = opt.prefix_cache->Stats();
          for (const PrefixFormatStats& f : cs.by_format) {
            // Entries quantized on store live in the cache's own pools: they free nothing here.
            if (f.k_format != opt.pool->k_format() || f.v_format != opt.pool->v_format()) {
              continue;
            }
            free_bytes += f.exclusive_bytes;
          }
        }
        if (need > free_bytes && !(running.empty() && admit.empty())) break;
        free_bytes -= std::min(need, free_bytes);
        admit.push_back(std::move(waiting.front()));
        waiting.pop_front();
      }
      stats.running = static_cast<uint32_t>(running.size() + admit.size());
      stats.waiting = static_cast<uint32_t>(waiting.size());
    }
    for (auto& r : dropped) Finish(std::move(r), FinishReason::kCancelled);
    // Cancelled while running.
    for (size_t i = 0; i < running.size();) {
      bool c;
      {
        std::lock_guard<std::mutex> lock(mu);
        c = cancels.erase(running[i]->id) > 0;
      }
      if (c) {
        std::unique_ptr<Req> r = std::move(running[i]);
        running.erase(running.begin() + static_cast<long>(i));
        Finish(std::move(r), FinishReason::kCancelled);
      } else {
        ++i;
      }
    }
    for (auto& r : admit) {
      Admit(*r);
      running.push_back(std::move(r));
    }
    if (!running.empty()) Step();
    std::lock_guard<std::mutex> lock(mu);
    stats.running = static_cast<uint32_t>(running.size());
    stats.waiting = static_cast<uint32_t>(waiting.size());
  }
  // Shutting down: everything left is cancelled.
  std::deque<std::unique_ptr<Req>> rest;
  {
    std::lock_guard<std::mutex> lock(mu);
    rest = std::move(waiting);
  }
  for (auto& r : running) Finish(std::move(r), FinishReason::kCancelled);
  running.clear();
  for (auto& r : rest) Finish(std::move(r), FinishReason::kCancelled);
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Engine>> Engine::Create(const Model& model, EngineOptions options) {
  if (options.pool == nullptr) return Status::InvalidArgument("engine: no KV pool");
  if (!(options.pool->shape() == model.config().kv_shape())) {
    return Status::InvalidArgument("engine: the pool's KV shape " +
                                   options.pool->shape().ToString() + " is not the model's " +
                                   model.config().kv_shape().ToString());
  }
  if (options.backend != nullptr && model.state_format() != 0) {
    return Status::Unimplemented("engine: a step backend (" + options.backend->name() +
                                 ") does not run recurrent (qwen35) models");
  }
  if (options.max_num_seqs == 0 || options.max_num_seqs > 4096) {
    return Status::InvalidArgument("--max-num-seqs: expected 1..4096, got " +
                                   std::to_string(options.max_num_seqs));
  }
  if (options.prefill_step == 0 || options.prefill_step > (1u << 16)) {
    return Status::InvalidArgument("--prefill-step-size: expected 1..65536, got " +
                                   std::to_string(options.prefill_step));
  }
  auto impl = std::make_unique<Impl>(model, std::move(options));
  Impl* raw = impl.get();
  raw->thread = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
}

Result<uint64_t> Engine::Submit(EngineRequest request, EngineCallback callback) {
  const ModelConfig& c = impl_->model.config();
  if (!callback) return Status::InvalidArgument("engine: no callback");
  if (request.prompt.empty()) return Status::InvalidArgument("prompt: no tokens");
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    const int32_t t = request.prompt[i];
    if (t < 0 || static_cast<uint32_t>(t) >= c.n_vocab) {
      return Status::InvalidArgument("prompt: token " + std::to_string(i) + " is " +
                                     std::to_string(t) + ", expected 0.." +
                                     std::to_string(c.n_vocab - 1));
    }
  }
  if (request.max_tokens == 0 || request.max_tokens > (1u << 20)) {
    return Status::InvalidArgument("max_tokens: expected 1..1048576, got " +
                                   std::to_string(request.max_tokens));
  }
  if (request.prompt.size() + uint64_t{request.max_tokens} > SequenceCache::kMaxTokens) {
    return Status::InvalidArgument("max_tokens: prompt plus max_tokens exceed the cache limit");
  }
  KVTIER_RETURN_IF_ERROR(request.sampling.Validate());
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->waiting.size() >= impl_->opt.max_waiting) {
    return Status::Unavailable("engine: " + std::to_string(impl_->waiting.size()) +
                               " requests already wait (max_waiting)");
  }
  const uint64_t id = impl_->next_id++;
  ++impl_->stats.submitted;
  impl_->stats.prompt_tokens += request.prompt.size();
  impl_->waiting.push_back(std::make_unique<Req>(id, std::move(request), std::move(callback)));
  impl_->cv.notify_all();
  return id;
}

void Engine::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (id > 0 && id < impl_->next_id) impl_->cancels.insert(id);
  impl_->cv.notify_all();
}

EngineStats Engine::Stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

}  // namespace kvtier
