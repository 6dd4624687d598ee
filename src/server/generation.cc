// Generation (server/generation.h).
#include "server/generation.h"

#include <cstdio>

namespace kvtier::server {

Generation::Generation(Engine& engine, const Tokenizer& tokenizer, std::vector<std::string> stop)
    : engine_(engine),
      shared_(std::make_shared<Shared>()),
      decoder_(tokenizer),
      stop_(std::move(stop)),
      start_(std::chrono::steady_clock::now()) {}

Generation::~Generation() {
  if (!done_ && id_ != 0) Cancel();
}

double Generation::Ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
      .count();
}

Result<std::unique_ptr<Generation>> Generation::Start(Engine& engine, const Tokenizer& tokenizer,
                                                      EngineRequest request,
                                                      std::vector<std::string> stop) {
  std::unique_ptr<Generation> g(new Generation(engine, tokenizer, std::move(stop)));
  g->prompt_tokens_ = static_cast<uint32_t>(request.prompt.size());
  std::shared_ptr<Shared> shared = g->shared_;
  KVTIER_ASSIGN_OR_RETURN(g->id_, engine.Submit(std::move(request), [shared](const EngineEvent& e) {
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->events.push_back(e);
    }
    shared->cv.notify_one();
    return !shared->stop.load();
  }));
  return g;
}

void Generation::Cancel() {
  shared_->stop = true;
  engine_.Cancel(id_);
}

bool Generation::Pump(int wait_ms, std::string* text) {
  if (done_) return true;
  std::deque<EngineEvent> events;
  {
    std::unique_lock<std::mutex> lock(shared_->mu);
    shared_->cv.wait_for(lock, std::chrono::milliseconds(wait_ms),
                         [&] { return !shared_->events.empty(); });
    events.swap(shared_->events);
  }
  for (const EngineEvent& e : events) {
    cached_tokens_ = e.cached_tokens;
    if (e.finish == FinishReason::kNone) {
      if (stopped_by_text_) continue;  // sampled before the cancel took effect: not shown
      const double now = Ms();
      if (ttft_ms_ < 0) {
        ttft_ms_ = now;
      } else {
        gaps_.push_back((now - last_token_ms_) / 1000.0);
      }
      last_token_ms_ = now;
      completion_tokens_ = e.generated_tokens;
      engine::StopText::Out out = stop_.Push(decoder_.Push(e.token));
      *text += out.text;
      if (out.stopped) {
        stopped_by_text_ = true;
        Cancel();
      }
      continue;
    }
    // The final event.
    done_ = true;
    total_ms_ = Ms();
    if (stopped_by_text_) {
      finish_ = "stop";
      break;
    }
    switch (e.finish) {
      case FinishReason::kLength:
      case FinishReason::kStop: {
        finish_ = e.finish == FinishReason::kLength ? "length" : "stop";
        engine::StopText::Out out = stop_.Push(decoder_.Flush());
        *text += out.text;
        if (out.stopped) {
          finish_ = "stop";
        } else {
          *text += stop_.Flush();
        }
        break;
      }
      case FinishReason::kCancelled:
        finish_ = "cancelled";
        break;
      case FinishReason::kError:
        finish_ = "error";
        error_ = e.error;
        break;
      default:
        finish_ = "error";
        error_ = Status::Internal("unknown finish reason from the engine");
        break;
    }
    break;
  }
  return done_;
}

std::vector<double> Generation::TakeTokenGaps() {
  std::vector<double> out;
  out.swap(gaps_);
  return out;
}

void PumpToEnd(Generation& g, const Exchange& x, const std::atomic<bool>& aborting,
               std::string* text, bool* gone, bool* cut) {
  while (!g.Pump(50, text)) {
    if (!*gone && !*cut && (x.Gone() || aborting)) {
      *cut = !x.Gone();
      *gone = !*cut;
      g.Cancel();
    }
  }
}

void CancelIfEnded(Generation& g, const Exchange& x, bool aborting, bool* gone, bool* cut) {
  if (!*gone && !*cut && aborting) {
    *cut = true;  // the drain deadline: cancelled, then told so
    g.Cancel();
  } else if (!*gone && x.Gone()) {
    *gone = true;
    g.Cancel();
  }
}

std::string RecordEnd(ServerMetrics& metrics, Generation& g, const std::string& id,
                      const std::string& ep, bool client_gone, bool cut) {
  metrics.TokenGaps(g.TakeTokenGaps());
  if (client_gone) metrics.Cancelled();
  metrics.Completion(g.prompt_tokens(), g.cached_tokens(), g.completion_tokens(),
                     g.ttft_ms() / 1000.0, g.total_ms() / 1000.0);
  char times[96];
  std::snprintf(times, sizeof(times), " ttft_ms=%.1f ms=%.1f", g.ttft_ms(), g.total_ms());
  return "request " + id + " endpoint=" + ep + " prompt_tokens=" +
         std::to_string(g.prompt_tokens()) + " cached_tokens=" +
         std::to_string(g.cached_tokens()) + " completion_tokens=" +
         std::to_string(g.completion_tokens()) + " finish=" +
         (cut ? std::string("shutdown")
              : client_gone ? std::string("client_gone") : g.finish_reason()) +
         times + (g.error().ok() ? "" : " error=\"" + g.error().message() + "\"");
}

}  // namespace kvtier::server
