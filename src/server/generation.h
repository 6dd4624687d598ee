// One completion request in flight: submits it to the engine and turns its events into text
// (stream decoding, stop strings, end-of-generation tokens) and a finish reason. Shared by the
// streaming and non-streaming handlers.
//
// Thread safety: the engine's callback (scheduler thread) only queues events under `mu`;
// everything else runs on the one HTTP thread that serves the request.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/stop_text.h"
#include "kvtier/engine.h"
#include "kvtier/tokenizer.h"
#include "server/http_front.h"
#include "server/server_metrics.h"

namespace kvtier::server {

class Generation {
 public:
  // Submits `request`; the status is Submit's (InvalidArgument, Unavailable).
  static Result<std::unique_ptr<Generation>> Start(Engine& engine, const Tokenizer& tokenizer,
                                                   EngineRequest request,
                                                   std::vector<std::string> stop);
  ~Generation();

  // Waits up to `wait_ms` for events and appends the text they complete to *text. True once
  // the final event has been handled (then finish_reason() / error() are set).
  bool Pump(int wait_ms, std::string* text);
  // The client went away: the engine drops the request at its next step.
  void Cancel();

  bool done() const { return done_; }
  // "stop" (a stop string or an end-of-generation token), "length", "cancelled" or "error".
  const std::string& finish_reason() const { return finish_; }
  const Status& error() const { return error_; }
  // The stop string that ended the output when finish_reason() is "stop" by one ("" otherwise).
  const std::string& stop_sequence() const { return stop_.matched(); }
  uint64_t id() const { return id_; }
  uint32_t prompt_tokens() const { return prompt_tokens_; }
  uint32_t cached_tokens() const { return cached_tokens_; }
  uint32_t completion_tokens() const { return completion_tokens_; }
  // Milliseconds from Start to the first token (-1 before it) and to the end.
  double ttft_ms() const { return ttft_ms_; }
  double total_ms() const { return total_ms_; }
  // Gaps between successive tokens, in seconds, since the last call (for the histograms).
  std::vector<double> TakeTokenGaps();

 private:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<EngineEvent> events;
    std::atomic<bool> stop{false};  // the callback answers false: cancel
  };
  Generation(Engine& engine, const Tokenizer& tokenizer, std::vector<std::string> stop);
  double Ms() const;

  Engine& engine_;
  std::shared_ptr<Shared> shared_;
  StreamDecoder decoder_;
  engine::StopText stop_;
  const std::chrono::steady_clock::time_point start_;
  uint64_t id_ = 0;
  bool done_ = false;
  bool stopped_by_text_ = false;
  std::string finish_;
  Status error_;
  uint32_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0;
  double ttft_ms_ = -1, total_ms_ = 0, last_token_ms_ = 0;
  std::vector<double> gaps_;
};

// ---- Serving a Generation: shared by the OpenAI and Anthropic handlers --------------------

// Non-streaming: pumps `g` to its end, appending its text to *text; the first of the client
// going away (*gone) or the drain deadline (`aborting`; *cut) cancels it, once.
void PumpToEnd(Generation& g, const Exchange& x, const std::atomic<bool>& aborting,
               std::string* text, bool* gone, bool* cut);

// Streaming, between chunks: cancels `g` at the drain deadline (*cut, once), or else when the
// client went away (*gone; a failed write may have set it already, and then nothing happens).
void CancelIfEnded(Generation& g, const Exchange& x, bool aborting, bool* gone, bool* cut);

// Records the ended request in `metrics` (token gaps, a cancellation when the client went
// away, counts and times) and returns its log line: "request ID endpoint=EP prompt_tokens=...
// finish=..." (finish: "shutdown" when cut, "client_gone" when the client went away, else
// finish_reason(); the error when there is one).
std::string RecordEnd(ServerMetrics& metrics, Generation& g, const std::string& id,
                      const std::string& ep, bool client_gone, bool cut);

}  // namespace kvtier::server
