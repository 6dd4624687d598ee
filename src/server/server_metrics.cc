// ServerMetrics (server/server_metrics.h).
#include "server/server_metrics.h"

#include <algorithm>
#include <cstdio>

namespace kvtier::server {
namespace {

std::string Key(const std::string& name, const Labels& labels) {
  std::string k = name;
  for (const auto& [a, b] : labels) k += "\x1f" + a + "=" + b;
  return k;
}

// Registration of fixed, valid names cannot fail; a failure is a bug worth a loud line.
template <class T>
T* Must(Result<T*> r, const std::string& name) {
  if (!r.ok()) {
    std::fprintf(stderr, "kvtier serve: metric %s: %s\n", name.c_str(),
                 r.status().ToString().c_str());
    return nullptr;
  }
  return *r;
}

// Counters mirrored from another subsystem's monotonic statistics.
void Sync(Counter* c, double now) {
  if (c != nullptr && now > c->Value()) c->Add(now - c->Value());
}

}  // namespace

ServerMetrics::ServerMetrics(const ServerDeps& deps, uint32_t ssd_reconcile_ms)
    : deps_(deps), ssd_reconcile_ms_(ssd_reconcile_ms) {
  cancelled_ = Must(registry_.AddCounter("kvtier_requests_cancelled_total",
                                         "Requests whose client went away before the end"),
                    "cancelled");
  prompt_tokens_ = Must(registry_.AddCounter("kvtier_prompt_tokens_total",
                                             "Prompt tokens of finished requests"), "prompt");
  cached_tokens_ = Must(registry_.AddCounter("kvtier_cached_prompt_tokens_total",
                                             "Prompt tokens whose K/V came from the cache"),
                        "cached");
  completion_tokens_ = Must(registry_.AddCounter("kvtier_generation_tokens_total",
                                                 "Tokens generated"), "generation");
  ttft_ = Must(registry_.AddHistogram("kvtier_time_to_first_token_seconds",
                                      "Time from request to first generated token",
                                      DefaultLatencyBuckets()), "ttft");
  tpot_ = Must(registry_.AddHistogram("kvtier_time_per_output_token_seconds",
                                      "Time between successive generated tokens",
                                      DefaultLatencyBuckets()), "tpot");
  duration_ = Must(registry_.AddHistogram("kvtier_request_duration_seconds",
                                          "Time from request to its last token",
                                          DefaultLatencyBuckets()), "duration");
  tokens_per_s_ = Must(registry_.AddHistogram(
                           "kvtier_request_tokens_per_second",
                           "Generation speed of a request: tokens after the first per second",
                           {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}),
                       "tokens_per_second");
  registry_.AddCollector([this] { Collect(); });
}

Counter* ServerMetrics::CounterFor(const std::string& name, const std::string& help,
                                   const Labels& labels) {
  Counter*& c = counters_[Key(name, labels)];
  if (c == nullptr) c = Must(registry_.AddCounter(name, help, labels), name);
  return c;
}

Gauge* ServerMetrics::GaugeFor(const std::string& name, const std::string& help,
                               const Labels& labels) {
  Gauge*& g = gauges_[Key(name, labels)];
  if (g == nullptr) g = Must(registry_.AddGauge(name, help, labels), name);
  return g;
}

void ServerMetrics::Request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  Counter* c = CounterFor("kvtier_requests_total", "HTTP requests by endpoint and status",
                          {{"endpoint", endpoint}, {"status", std::to_string(status)}});
  if (c != nullptr) c->Add();
}

void ServerMetrics::Completion(uint32_t prompt_tokens, uint32_t cached_tokens,
                               uint32_t completion_tokens, double ttft_s, double total_s) {
  prompt_tokens_->Add(prompt_tokens);
  cached_tokens_->Add(cached_tokens);
  completion_tokens_->Add(completion_tokens);
  if (ttft_s >= 0) ttft_->Observe(ttft_s);
  duration_->Observe(total_s);
  // Decode speed: the tokens after the first over the time after it (the first is TTFT's).
  if (completion_tokens > 1 && ttft_s >= 0 && total_s > ttft_s) {
    tokens_per_s_->Observe((completion_tokens - 1) / (total_s - ttft_s));
  }
}

void ServerMetrics::TokenGaps(const std::vector<double>& gaps_s) {
  for (double g : gaps_s) tpot_->Observe(g);
}

void ServerMetrics::Collect() {
  std::lock_guard<std::mutex> lock(mu_);
  auto gauge = [&](const std::string& name, const std::string& help, double v,
                   const Labels& labels = {}) {
    if (Gauge* g = GaugeFor(name, help, labels)) g->Set(v);
  };
  auto counter = [&](const std::string& name, const std::string& help, double v,
                     const Labels& labels = {}) { Sync(CounterFor(name, help, labels), v); };
  const EngineStats es = deps_.engine->Stats();
  gauge("kvtier_requests_running", "Requests in the running batch", es.running);
  gauge("kvtier_requests_waiting", "Requests waiting for admission", es.waiting);
  counter("kvtier_engine_steps_total", "Scheduler steps (one batched forward each)", es.steps);
  counter("kvtier_engine_preemptions_total", "Requests preempted because the KV pool was full",
          es.preemptions);
  counter("kvtier_engine_computed_prompt_tokens_total", "Prompt tokens prefilled",
          es.computed_prompt_tokens);

  for (Gauge* g : kv_gauges_) g->Set(0);
  const std::string kv_help = "Bytes of KV cache by tier (active pool, RAM prefix cache, SSD) "
                              "and K/V format";
  auto kv = [&](const std::string& tier, const std::string& format, double bytes) {
    Gauge* g = GaugeFor("kvtier_kv_bytes", kv_help, {{"tier", tier}, {"format", format}});
    if (g == nullptr) return;
    if (std::find(kv_gauges_.begin(), kv_gauges_.end(), g) == kv_gauges_.end()) {
      kv_gauges_.push_back(g);
    }
    g->Add(bytes);
  };
  auto fmt = [](const std::string& k, const std::string& v) { return k == v ? k : k + "/" + v; };
  if (deps_.pool != nullptr) {
    const PoolStats ps = deps_.pool->Stats();
    const std::string f = fmt(deps_.pool->k_format().name(), deps_.pool->v_format().name());
    kv("active", f, static_cast<double>(ps.bytes_in_use));
    gauge("kvtier_kv_pool_capacity_bytes", "Bytes of the active KV pool",
          static_cast<double>(ps.capacity_bytes), {{"format", f}});
  }
  if (deps_.prefix_cache != nullptr) {
    const PrefixCacheStats cs = deps_.prefix_cache->Stats();
    for (const PrefixFormatStats& f : cs.by_format) {
      kv("ram", fmt(f.k_format.name(), f.v_format.name()), static_cast<double>(f.bytes));
    }
    gauge("kvtier_prefix_cache_budget_bytes", "Budget of the RAM prefix cache",
          static_cast<double>(cs.budget_bytes));
    counter("kvtier_prefix_cache_lookups_total", "Prefix cache lookups",
            static_cast<double>(cs.lookups));
    for (int k = 0; k < kNumPrefixMatchKinds; ++k) {
      counter("kvtier_prefix_cache_hits_total",
              "Prefix cache lookups by match kind (kind=miss counts misses)",
              static_cast<double>(cs.hits[k]),
              {{"kind", std::string(PrefixMatchKindName(static_cast<PrefixMatchKind>(k)))}});
    }
    counter("kvtier_prefix_cache_reused_tokens_total", "Tokens served from the prefix cache",
            static_cast<double>(cs.tokens_reused));
    counter("kvtier_prefix_cache_evicted_blocks_total", "Blocks evicted from the RAM tier",
            static_cast<double>(cs.evicted_blocks));
    counter("kvtier_prefix_cache_promoted_blocks_total", "Blocks promoted from SSD into RAM",
            static_cast<double>(cs.promoted_blocks));
    counter("kvtier_prefix_cache_written_through_blocks_total",
            "Blocks given to the lower tiers at store time (write-through, or entries RAM "
            "cannot hold)", static_cast<double>(cs.written_through_blocks));
    counter("kvtier_prefix_cache_direct_tier_fetches_total",
            "Hits served from lower-tier blocks RAM could not keep",
            static_cast<double>(cs.direct_tier_fetches));
  }
  if (deps_.remote != nullptr) {
    const RemoteTierStats rs = deps_.remote->Stats();
    counter("kvtier_remote_hits_total", "Blocks read from the remote tier and verified",
            static_cast<double>(rs.hits));
    counter("kvtier_remote_hit_bytes_total", "Bytes of the blocks read from the remote tier",
            static_cast<double>(rs.hit_bytes));
    for (int k = 0; k < kNumRemoteMisses; ++k) {
      counter("kvtier_remote_misses_total", "Remote reads that became misses, by reason",
              static_cast<double>(rs.misses_by[k]),
              {{"reason", std::string(RemoteMissName(static_cast<RemoteMiss>(k)))}});
    }
    counter("kvtier_remote_lookups_total", "Remote chain lookups", static_cast<double>(rs.lookups));
    counter("kvtier_remote_written_blocks_total", "Blocks written to the remote tier",
            static_cast<double>(rs.written_blocks));
    counter("kvtier_remote_written_bytes_total", "Bytes written to the remote tier",
            static_cast<double>(rs.written_bytes));
    counter("kvtier_remote_errors_total", "Remote tier failures, by kind",
            static_cast<double>(rs.write_errors), {{"kind", "write"}});
    counter("kvtier_remote_errors_total", "Remote tier failures, by kind",
            static_cast<double>(rs.timeouts), {{"kind", "timeout"}});
    counter("kvtier_remote_errors_total", "Remote tier failures, by kind",
            static_cast<double>(rs.connect_failures), {{"kind", "connect"}});
    counter("kvtier_remote_errors_total", "Remote tier failures, by kind",
            static_cast<double>(rs.dropped_queue_full), {{"kind", "queue_full"}});
    counter("kvtier_remote_round_trips_total", "Round trips to Redis",
            static_cast<double>(rs.round_trips));
    counter("kvtier_remote_load_seconds_total",
            "Time spent reading remote blocks (divide by hits plus misses for the latency)",
            rs.load_ms_total / 1000.0);
    gauge("kvtier_remote_queued_blocks", "Blocks waiting for the remote writer",
          static_cast<double>(rs.queued));
    counter("kvtier_remote_state_hits_total",
            "Recurrent-state snapshots read from the remote tier and verified",
            static_cast<double>(rs.state_hits));
    counter("kvtier_remote_state_lookups_total", "Remote snapshot lookups",
            static_cast<double>(rs.state_lookups));
    for (int k = 0; k < kNumRemoteMisses; ++k) {
      counter("kvtier_remote_state_misses_total",
              "Remote snapshot reads that became misses, by reason",
              static_cast<double>(rs.state_misses_by[k]),
              {{"reason", std::string(RemoteMissName(static_cast<RemoteMiss>(k)))}});
    }
    counter("kvtier_remote_state_written_total", "Snapshots written to the remote tier",
            static_cast<double>(rs.state_written));
    counter("kvtier_remote_state_written_bytes_total", "Bytes of snapshots written to Redis",
            static_cast<double>(rs.state_written_bytes));
  }
  if (deps_.ssd != nullptr) {
    // Never a walk of the disk here (the event loop's thread): a writer thread checks the
    // index against the disk when the last check is older than ssd_reconcile_ms_, so these
    // figures count what was on disk then.
    deps_.ssd->ReconcileSoon(ssd_reconcile_ms_);
    const SsdTierStats ss = deps_.ssd->Stats();
    for (const auto& [ns, blocks] : deps_.ssd->AllNamespaces()) {
      Result<KvBlockLayout> l = KvBlockLayout::Make(ns.shape, ns.k_format, ns.v_format,
                                                    ns.block_tokens);
      if (l.ok()) {
        kv("ssd", fmt(ns.k_format.name(), ns.v_format.name()),
           static_cast<double>(blocks) * static_cast<double>(l->block_stride));
      }
    }
    gauge("kvtier_ssd_bytes", "Bytes of the SSD tier's block files", static_cast<double>(ss.bytes));
    gauge("kvtier_ssd_max_bytes", "Size cap of the SSD tier", static_cast<double>(ss.max_bytes));
    gauge("kvtier_ssd_queued_blocks", "Blocks waiting for the SSD writer",
          static_cast<double>(ss.queued));
    counter("kvtier_ssd_spilled_blocks_total", "Blocks written to SSD",
            static_cast<double>(ss.spilled_blocks));
    counter("kvtier_ssd_spilled_bytes_total", "Bytes written to SSD",
            static_cast<double>(ss.spilled_bytes));
    counter("kvtier_ssd_loaded_blocks_total", "Blocks reloaded from SSD",
            static_cast<double>(ss.loaded_blocks));
    counter("kvtier_ssd_quarantined_total", "Blocks that failed verification on reload",
            static_cast<double>(ss.quarantined));
    counter("kvtier_ssd_evicted_blocks_total", "Blocks removed to stay under the SSD cap",
            static_cast<double>(ss.evicted_blocks));
    static const char* kSkip[kNumSpillSkips] = {"disk_full", "io_error", "too_large"};
    for (int k = 0; k < kNumSpillSkips; ++k) {
      counter("kvtier_ssd_skipped_blocks_total", "Blocks not spilled, by reason",
              static_cast<double>(ss.skipped[k]), {{"reason", kSkip[k]}});
    }
  }
}

}  // namespace kvtier::server
