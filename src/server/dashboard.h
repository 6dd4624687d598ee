// The status page (issue 37): GET / (one self-contained HTML page, dashboard_page.cc) and
// GET /dashboard.json (the snapshot it polls). Both read the same snapshots as /metrics and
// GET /v1/cache/stats: the tiers' statistics (the prefix cache's without its tree walk), the
// engine's counters, the server's TTFT and tokens/s histograms, plus what only the page
// keeps: a TierHistory fed by a sampler thread once a second, and the prefix cache's hottest
// entries (PrefixCache::Hottest, one brief walk under its lock).
//
// Never blocks the engine beyond the brief locks those calls take; never walks the SSD
// directory (ReconcileSoon asks a writer thread, as /metrics does). Read-only.
//
// Ownership: borrows the ServerDeps' objects and the ServerMetrics; they must outlive it.
// Any of deps' pointers may be null (a benchmark runs it without an engine): that part of
// the snapshot is empty or zero.
// Thread safety: Json, Page and SampleNow may be called from any thread, concurrently; the
// destructor stops the sampler thread (joins it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "kvtier/server.h"
#include "server/dashboard_history.h"
#include "server/server_metrics.h"

namespace kvtier::server {

// GET /v1/cache/stats's body (without its SSD reconcile, which the caller does or not).
nlohmann::json CacheStatsJson(const ServerDeps& deps);

struct DashboardOptions {
  std::string model_id;
  bool show_text = false;          // --dashboard-show-text: the hottest prefixes' text
  size_t hottest = 20;             // entries listed
  size_t text_tokens = 48;         // tokens of each shown, at most (then 240 bytes at most)
  uint32_t sample_ms = 1000;       // the sampler's period (0: no sampler thread; SampleNow)
  uint32_t ssd_reconcile_ms = 10000;  // ServerOptions::metrics_ssd_reconcile_ms
};

class Dashboard {
 public:
  Dashboard(const ServerDeps& deps, const ServerMetrics& metrics, DashboardOptions options);
  ~Dashboard();
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  // The snapshot as JSON (GET /dashboard.json).
  std::string Json() const;
  // The page with the snapshot inlined (GET /): renders at once, then polls Json.
  std::string Page() const;
  // One sample of the tier counters into the history (the sampler thread's step).
  void SampleNow();
  const TierHistory& history() const { return history_; }

 private:
  nlohmann::json Snapshot() const;
  void Run();

  const ServerDeps deps_;
  const ServerMetrics& metrics_;
  const DashboardOptions opt_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  TierHistory history_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread sampler_;  // last: started once everything above exists
};

// The page's HTML; "/*KVTIER_DATA*/null" marks where Page() inlines the snapshot.
extern const char kDashboardHtml[];

}  // namespace kvtier::server
