// The server's Prometheus metrics: requests by endpoint and status, tokens, latency
// histograms (time to first token, per output token, per request), and, refreshed at every
// scrape from the subsystems' own statistics, the engine's queue, KV bytes by tier and format,
// prefix-cache hits by kind and the SSD tier's spills, reloads and quarantines (its bytes and
// blocks as of the tier's latest walk of its directory, asked for at scrapes, rate-limited).
//
// Thread-safe: request threads record, the /metrics thread renders.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kvtier/server.h"
#include "server/metrics.h"

namespace kvtier::server {

class ServerMetrics {
 public:
  // ssd_reconcile_ms: ServerOptions::metrics_ssd_reconcile_ms.
  ServerMetrics(const ServerDeps& deps, uint32_t ssd_reconcile_ms);

  void Request(const std::string& endpoint, int status);
  void Cancelled() { cancelled_->Add(); }
  // A finished completion: its token counts and timings (seconds).
  void Completion(uint32_t prompt_tokens, uint32_t cached_tokens, uint32_t completion_tokens,
                  double ttft_s, double total_s);
  void TokenGaps(const std::vector<double>& gaps_s);
  std::string Render() const { return registry_.Render(); }
  // The status page's histograms (server/dashboard.h): live, thread-safe to read.
  const Histogram& ttft() const { return *ttft_; }
  const Histogram& tokens_per_second() const { return *tokens_per_s_; }

 private:
  // The series of `name` with these labels, registered on first use. Requires mu_.
  Counter* CounterFor(const std::string& name, const std::string& help, const Labels& labels);
  Gauge* GaugeFor(const std::string& name, const std::string& help, const Labels& labels);
  void Collect();

  const ServerDeps deps_;
  const uint32_t ssd_reconcile_ms_;
  MetricsRegistry registry_;
  std::mutex mu_;
  std::map<std::string, Counter*> counters_;
  std::map<std::string, Gauge*> gauges_;
  std::vector<Gauge*> kv_gauges_;  // zeroed before each collection (a format may go away)
  Counter* cancelled_ = nullptr;
  Counter* prompt_tokens_ = nullptr;
  Counter* cached_tokens_ = nullptr;
  Counter* completion_tokens_ = nullptr;
  Histogram* ttft_ = nullptr;
  Histogram* tpot_ = nullptr;
  Histogram* duration_ = nullptr;
  Histogram* tokens_per_s_ = nullptr;
};

}  // namespace kvtier::server
