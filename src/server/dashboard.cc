// Dashboard (server/dashboard.h): the snapshot behind the status page.
#include "server/dashboard.h"

#include <string_view>

namespace kvtier::server {
namespace {

using nlohmann::json;

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string FormatPair(const Format& k, const Format& v) {
  return k == v ? k.name() : k.name() + "/" + v.name();
}

// Per-bucket (not cumulative) counts of a histogram, with its bounds (+Inf last, as null).
json HistogramJson(const Histogram& h) {
  const std::vector<uint64_t> cum = h.CumulativeCounts();
  json counts = json::array();
  for (size_t i = 0; i < cum.size(); ++i) counts.push_back(cum[i] - (i > 0 ? cum[i - 1] : 0));
  return {{"bounds", h.bounds()}, {"counts", counts}, {"count", cum.back()}, {"sum", h.Sum()}};
}

// At most `max` bytes of s, cut at a UTF-8 character boundary.
std::string Clip(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s + "\xE2\x80\xA6";  // an ellipsis
}

}  // namespace

json CacheStatsJson(const ServerDeps& deps) {
  json out;
  if (deps.pool != nullptr) {
    const PoolStats ps = deps.pool->Stats();
    out["active_pool"] = {{"k_format", deps.pool->k_format().name()},
                          {"v_format", deps.pool->v_format().name()},
                          {"capacity_bytes", ps.capacity_bytes},
                          {"bytes_in_use", ps.bytes_in_use},
                          {"blocks_in_use", ps.blocks_in_use},
                          {"capacity_blocks", ps.capacity_blocks}};
  }
  if (deps.prefix_cache != nullptr) {
    const PrefixCacheStats cs = deps.prefix_cache->Stats(/*exclusive_bytes=*/false);
    json hits;
    for (int k = 0; k < kNumPrefixMatchKinds; ++k) {
      hits[std::string(PrefixMatchKindName(static_cast<PrefixMatchKind>(k)))] = cs.hits[k];
    }
    json formats = json::array();
    for (const PrefixFormatStats& f : cs.by_format) {
      formats.push_back({{"k_format", f.k_format.name()}, {"v_format", f.v_format.name()},
                         {"blocks", f.blocks}, {"bytes", f.bytes}, {"tokens", f.tokens}});
    }
    out["prefix_cache"] = {{"lookups", cs.lookups}, {"hits", hits},
                           {"tokens_requested", cs.tokens_requested},
                           {"tokens_reused", cs.tokens_reused}, {"entries", cs.entries},
                           {"bytes", cs.bytes}, {"budget_bytes", cs.budget_bytes},
                           {"evicted_blocks", cs.evicted_blocks},
                           {"promoted_blocks", cs.promoted_blocks}, {"by_format", formats}};
  } else {
    out["prefix_cache"] = nullptr;
  }
  if (deps.ssd != nullptr) {
    const SsdTierStats ss = deps.ssd->Stats();
    out["ssd"] = {{"dir", deps.ssd->options().dir}, {"blocks", ss.blocks},
                  {"bytes", ss.bytes}, {"max_bytes", ss.max_bytes},
                  {"spilled_blocks", ss.spilled_blocks}, {"loaded_blocks", ss.loaded_blocks},
                  {"quarantined", ss.quarantined}, {"evicted_blocks", ss.evicted_blocks},
                  {"vanished_files", ss.vanished_files}, {"queued", ss.queued}};
  } else {
    out["ssd"] = nullptr;
  }
  if (deps.remote != nullptr) {
    const RemoteTierStats rs = deps.remote->Stats();
    json misses;
    for (int k = 0; k < kNumRemoteMisses; ++k) {
      misses[std::string(RemoteMissName(static_cast<RemoteMiss>(k)))] = rs.misses_by[k];
    }
    out["remote"] = {{"url", deps.remote->options().url}, {"cluster", rs.cluster},
                     {"hits", rs.hits}, {"hit_bytes", rs.hit_bytes}, {"misses", misses},
                     {"written_blocks", rs.written_blocks}, {"written_bytes", rs.written_bytes},
                     {"write_errors", rs.write_errors},
                     {"dropped_queue_full", rs.dropped_queue_full}, {"queued", rs.queued},
                     {"round_trips", rs.round_trips}, {"timeouts", rs.timeouts}};
    json state_misses;
    for (int k = 0; k < kNumRemoteMisses; ++k) {
      state_misses[std::string(RemoteMissName(static_cast<RemoteMiss>(k)))] =
          rs.state_misses_by[k];
    }
    out["remote"]["states"] = {{"lookups", rs.state_lookups}, {"hits", rs.state_hits},
                               {"hit_bytes", rs.state_hit_bytes}, {"misses", state_misses},
                               {"written", rs.state_written},
                               {"written_bytes", rs.state_written_bytes},
                               {"write_errors", rs.state_write_errors},
                               {"dropped_queue_full", rs.state_dropped_queue_full},
                               {"queued", rs.state_queued}};
  } else {
    out["remote"] = nullptr;
  }
  return out;
}

Dashboard::Dashboard(const ServerDeps& deps, const ServerMetrics& metrics,
                     DashboardOptions options)
    : deps_(deps), metrics_(metrics), opt_(std::move(options)) {
  SampleNow();  // the baseline
  if (opt_.sample_ms > 0) sampler_ = std::thread([this] { Run(); });
}

Dashboard::~Dashboard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

void Dashboard::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(opt_.sample_ms), [this] { return stop_; })) {
    lock.unlock();
    SampleNow();
    lock.lock();
  }
}

void Dashboard::SampleNow() {
  TierCounters c;
  if (deps_.prefix_cache != nullptr) {
    const PrefixCacheStats cs = deps_.prefix_cache->Stats(/*exclusive_bytes=*/false);
    c.hits = cs.hits;
    c.ram_evicted_blocks = cs.evicted_blocks;
    c.ram_evicted_bytes = cs.evicted_bytes;
    c.promoted_blocks = cs.promoted_blocks;
    c.promote_failures = cs.promote_failures;
  }
  if (deps_.ssd != nullptr) {
    const SsdTierStats ss = deps_.ssd->Stats();
    c.ssd_spilled_blocks = ss.spilled_blocks;
    c.ssd_spilled_bytes = ss.spilled_bytes;
    c.ssd_loaded_blocks = ss.loaded_blocks;
    c.ssd_loaded_bytes = ss.loaded_bytes;
    c.ssd_quarantined = ss.quarantined;
    c.ssd_evicted_blocks = ss.evicted_blocks;
    c.ssd_evicted_bytes = ss.evicted_bytes;
    for (uint64_t s : ss.skipped) c.ssd_skipped_blocks += s;
  }
  history_.Sample(UnixMs(), c);
}

json Dashboard::Snapshot() const {
  const int64_t now_ms = UnixMs();
  json out;
  out["model"] = opt_.model_id;
  out["now_unix_ms"] = now_ms;
  out["uptime_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  out["show_text"] = opt_.show_text;
  if (deps_.ssd != nullptr) deps_.ssd->ReconcileSoon(opt_.ssd_reconcile_ms);
  out["cache"] = CacheStatsJson(deps_);
  if (deps_.ssd != nullptr) {
    json formats = json::array();
    for (const auto& [ns, blocks] : deps_.ssd->AllNamespaces()) {
      Result<KvBlockLayout> l = KvBlockLayout::Make(ns.shape, ns.k_format, ns.v_format,
                                                    ns.block_tokens);
      formats.push_back({{"k_format", ns.k_format.name()}, {"v_format", ns.v_format.name()},
                         {"blocks", blocks},
                         {"bytes", l.ok() ? blocks * l->block_stride : 0}});
    }
    out["cache"]["ssd"]["by_format"] = formats;
  }
  const EngineStats es = deps_.engine != nullptr ? deps_.engine->Stats() : EngineStats{};
  out["requests"] = {{"running", es.running}, {"waiting", es.waiting},
                     {"submitted", es.submitted}, {"finished", es.finished},
                     {"cancelled", es.cancelled}, {"failed", es.failed},
                     {"preemptions", es.preemptions}, {"prompt_tokens", es.prompt_tokens},
                     {"cached_tokens", es.cached_tokens},
                     {"generated_tokens", es.generated_tokens}};
  json buckets = json::array();
  for (const HitBucket& b : history_.Buckets(now_ms)) {
    json one = {{"t", b.start_unix_s}};
    for (int k = 0; k < kNumPrefixMatchKinds; ++k) {
      one[std::string(PrefixMatchKindName(static_cast<PrefixMatchKind>(k)))] = b.lookups[k];
    }
    buckets.push_back(std::move(one));
  }
  out["hit_rate"] = {{"bucket_s", history_.bucket_s()}, {"buckets", buckets}};
  out["ttft_s"] = HistogramJson(metrics_.ttft());
  out["tokens_per_s"] = HistogramJson(metrics_.tokens_per_second());
  json hot = json::array();
  if (deps_.prefix_cache != nullptr) {
    for (const PrefixEntryInfo& e :
         deps_.prefix_cache->Hottest(opt_.hottest, opt_.show_text ? opt_.text_tokens : 0)) {
      json one = {{"tokens", e.tokens}, {"blocks", e.blocks},
                  {"format", FormatPair(e.k_format, e.v_format)}, {"tier", "ram"},
                  {"hits", e.hits}, {"idle_ms", e.idle_ms}, {"in_use", e.in_use},
                  {"pinned", e.pinned}};
      if (opt_.show_text && deps_.tokenizer != nullptr) {
        one["text"] = Clip(deps_.tokenizer->Decode(e.head), 240) +
                      (e.head.size() < e.tokens ? "\xE2\x80\xA6" : "");
      }
      hot.push_back(std::move(one));
    }
  }
  out["hottest"] = hot;
  json events = json::array();
  for (const TierEvent& e : history_.Events()) {
    events.push_back({{"unix_ms", e.unix_ms}, {"kind", TierEventName(e.kind)},
                      {"count", e.count}, {"bytes", e.bytes}});
  }
  out["events"] = events;
  return out;
}

std::string Dashboard::Json() const {
  // Invalid UTF-8 in a prompt's text is replaced, never a thrown exception.
  return Snapshot().dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string Dashboard::Page() const {
  std::string data = Json();
  // Inside <script>: "</" would end it early ("</script>" in a prompt's text).
  std::string safe;
  safe.reserve(data.size() + 16);
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] == '<' && i + 1 < data.size() && data[i + 1] == '/') {
      safe += "<\\/";
      ++i;
    } else {
      safe.push_back(data[i]);
    }
  }
  std::string page = kDashboardHtml;
  static constexpr std::string_view kMark = "/*KVTIER_DATA*/null";
  const size_t at = page.find(kMark);
  if (at != std::string::npos) page.replace(at, kMark.size(), safe);
  return page;
}

}  // namespace kvtier::server
