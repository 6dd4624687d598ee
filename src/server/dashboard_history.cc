// TierHistory (server/dashboard_history.h).
#include "server/dashboard_history.h"

namespace kvtier::server {

std::string_view TierEventName(TierEventKind k) {
  switch (k) {
    case TierEventKind::kRamEvict: return "ram_evict";
    case TierEventKind::kSpill: return "spill";
    case TierEventKind::kReload: return "reload";
    case TierEventKind::kPromote: return "promote";
    case TierEventKind::kPromoteFailed: return "promote_failed";
    case TierEventKind::kQuarantine: return "quarantine";
    case TierEventKind::kSsdEvict: return "ssd_evict";
    case TierEventKind::kSpillSkipped: return "spill_skipped";
  }
  return "unknown";
}

TierHistory::TierHistory(size_t max_events, uint32_t bucket_s, size_t buckets)
    : max_events_(max_events > 0 ? max_events : 1),
      bucket_s_(bucket_s > 0 ? bucket_s : 1),
      n_buckets_(buckets > 0 ? buckets : 1) {}

namespace {

int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

}  // namespace

void TierHistory::Sample(int64_t unix_ms, const TierCounters& c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!last_) {
    last_ = c;
    last_ms_ = unix_ms;
    return;
  }
  if (unix_ms < last_ms_) return;
  const TierCounters& p = *last_;
  auto grew = [](uint64_t now, uint64_t before) { return now > before ? now - before : 0; };
  auto event = [&](TierEventKind kind, uint64_t now, uint64_t before, uint64_t bytes_now,
                   uint64_t bytes_before) {
    const uint64_t n = grew(now, before);
    if (n == 0) return;
    events_.push_back({unix_ms, kind, n, grew(bytes_now, bytes_before)});
    if (events_.size() > max_events_) events_.pop_front();
  };
  event(TierEventKind::kRamEvict, c.ram_evicted_blocks, p.ram_evicted_blocks, c.ram_evicted_bytes,
        p.ram_evicted_bytes);
  event(TierEventKind::kSpill, c.ssd_spilled_blocks, p.ssd_spilled_blocks, c.ssd_spilled_bytes,
        p.ssd_spilled_bytes);
  event(TierEventKind::kSpillSkipped, c.ssd_skipped_blocks, p.ssd_skipped_blocks, 0, 0);
  event(TierEventKind::kReload, c.ssd_loaded_blocks, p.ssd_loaded_blocks, c.ssd_loaded_bytes,
        p.ssd_loaded_bytes);
  event(TierEventKind::kPromote, c.promoted_blocks, p.promoted_blocks, 0, 0);
  event(TierEventKind::kPromoteFailed, c.promote_failures, p.promote_failures, 0, 0);
  event(TierEventKind::kQuarantine, c.ssd_quarantined, p.ssd_quarantined, 0, 0);
  event(TierEventKind::kSsdEvict, c.ssd_evicted_blocks, p.ssd_evicted_blocks, c.ssd_evicted_bytes,
        p.ssd_evicted_bytes);

  std::array<uint64_t, kNumPrefixMatchKinds> d{};
  bool any = false;
  for (int k = 0; k < kNumPrefixMatchKinds; ++k) {
    d[k] = grew(c.hits[k], p.hits[k]);
    any = any || d[k] > 0;
  }
  if (any) {
    const int64_t start = FloorDiv(unix_ms, 1000 * int64_t{bucket_s_}) * bucket_s_;
    if (buckets_.empty() || buckets_.back().start_unix_s < start) {
      buckets_.push_back({start, {}});
      if (buckets_.size() > n_buckets_) buckets_.pop_front();
    }
    for (int k = 0; k < kNumPrefixMatchKinds; ++k) buckets_.back().lookups[k] += d[k];
  }
  last_ = c;
  last_ms_ = unix_ms;
}

std::vector<TierEvent> TierHistory::Events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<TierEvent>(events_.rbegin(), events_.rend());
}

std::vector<HitBucket> TierHistory::Buckets(int64_t now_unix_ms) const {
  const int64_t b = bucket_s_;
  const int64_t last = FloorDiv(now_unix_ms, 1000 * b) * b;
  const int64_t first = last - static_cast<int64_t>(n_buckets_ - 1) * b;
  std::vector<HitBucket> out(n_buckets_);
  for (size_t i = 0; i < n_buckets_; ++i) out[i].start_unix_s = first + static_cast<int64_t>(i) * b;
  std::lock_guard<std::mutex> lock(mu_);
  for (const HitBucket& h : buckets_) {
    if (h.start_unix_s < first || h.start_unix_s > last) continue;
    out[static_cast<size_t>((h.start_unix_s - first) / b)].lookups = h.lookups;
  }
  return out;
}

}  // namespace kvtier::server
