// TierHistory: what the status page shows over time, from the same monotonic counters as
// /metrics, sampled about once a second (server/dashboard.h): a ring of recent tier events
// (RAM evictions, SSD spills, reloads, quarantines, ...), each the growth of one counter
// between two samples, and prefix-cache lookups by match kind in fixed time buckets.
//
// Bounded: at most max_events events and `buckets` buckets are kept; older ones drop off.
// Thread safety: every method may be called from any thread (one mutex, held for O(events +
// buckets) at most). Ownership: plain values in, copies out.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "kvtier/prefix_cache.h"

namespace kvtier::server {

// Monotonic counters of the tiers (PrefixCacheStats, SsdTierStats), as sampled.
struct TierCounters {
  std::array<uint64_t, kNumPrefixMatchKinds> hits{};  // [PrefixMatchKind]
  uint64_t ram_evicted_blocks = 0;
  uint64_t ram_evicted_bytes = 0;
  uint64_t promoted_blocks = 0;
  uint64_t promote_failures = 0;
  uint64_t ssd_spilled_blocks = 0;
  uint64_t ssd_spilled_bytes = 0;
  uint64_t ssd_loaded_blocks = 0;
  uint64_t ssd_loaded_bytes = 0;
  uint64_t ssd_quarantined = 0;
  uint64_t ssd_evicted_blocks = 0;
  uint64_t ssd_evicted_bytes = 0;
  uint64_t ssd_skipped_blocks = 0;  // every SpillSkip reason together
};

// Values appear in the page's JSON by name (TierEventName); never renumber.
enum class TierEventKind : uint8_t {
  kRamEvict = 0,      // blocks evicted from the RAM prefix cache
  kSpill = 1,         // blocks written to the SSD tier
  kReload = 2,        // blocks read back from SSD
  kPromote = 3,       // of those, blocks promoted into the RAM tree
  kPromoteFailed = 4, // promotions that failed (then a miss)
  kQuarantine = 5,    // SSD files that failed verification, put aside
  kSsdEvict = 6,      // blocks removed to stay under the SSD cap
  kSpillSkipped = 7,  // blocks not spilled (disk full, I/O error, too large)
};
inline constexpr int kNumTierEventKinds = 8;
std::string_view TierEventName(TierEventKind k);  // "ram_evict", "spill", ...

struct TierEvent {
  int64_t unix_ms = 0;  // the sample that saw it
  TierEventKind kind = TierEventKind::kRamEvict;
  uint64_t count = 0;   // blocks (files for a quarantine) since the previous sample
  uint64_t bytes = 0;   // their bytes where the counter exists, else 0
};

// Lookups by match kind that started in [start_unix_s, start_unix_s + bucket_s).
struct HitBucket {
  int64_t start_unix_s = 0;
  std::array<uint64_t, kNumPrefixMatchKinds> lookups{};  // [PrefixMatchKind]
};

class TierHistory {
 public:
  // bucket_s > 0 and buckets > 0; max_events > 0.
  explicit TierHistory(size_t max_events = 100, uint32_t bucket_s = 10, size_t buckets = 60);

  // Records the growth of every counter since the previous sample (the first sample is the
  // baseline: nothing is recorded). A counter that went down (a restarted tier) is taken as
  // the new baseline. Samples must come in time order; an older one is ignored.
  void Sample(int64_t unix_ms, const TierCounters& c);

  // Newest first, at most max_events.
  std::vector<TierEvent> Events() const;
  // The `buckets` buckets ending with the one holding now_unix_ms, oldest first; buckets
  // with no lookups are present with zeros. Shape [buckets].
  std::vector<HitBucket> Buckets(int64_t now_unix_ms) const;
  uint32_t bucket_s() const { return bucket_s_; }

 private:
  const size_t max_events_;
  const uint32_t bucket_s_;
  const size_t n_buckets_;
  mutable std::mutex mu_;
  std::optional<TierCounters> last_;
  int64_t last_ms_ = 0;
  std::deque<TierEvent> events_;  // oldest first
  std::deque<HitBucket> buckets_; // oldest first, start times strictly increasing
};

}  // namespace kvtier::server
