// Prometheus metrics: counters, gauges and histograms held by a MetricsRegistry, rendered in
// the text exposition format 0.0.4 for GET /metrics.
//
// Ownership: the registry owns every metric it creates; the pointers it hands out stay valid
// (and keep their address) until the registry is destroyed. Metrics are never removed.
// Thread safety: Counter, Gauge and Histogram are thread-safe and lock-free (relaxed atomics;
// a double lives in a std::atomic<uint64_t> as its bit pattern, added to by compare-exchange).
// MetricsRegistry is thread-safe: Add*, AddCollector and Render may be called from any thread.
// Render calls are serialised, so collectors run one at a time.
// Errors (bad names, clashes) are programming errors reported as Status, never thrown.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::server {

// Label name -> value pairs, rendered in the order given. Names: [a-zA-Z_][a-zA-Z0-9_]*, not
// starting with "__" (reserved), unique within a series; "le" is reserved on histograms.
using Labels = std::vector<std::pair<std::string, std::string>>;

namespace metrics_internal {

// A double that can be loaded, stored and added to atomically.
class AtomicDouble {
 public:
  double Load() const { return std::bit_cast<double>(bits_.load(std::memory_order_relaxed)); }
  void Store(double v) { bits_.store(std::bit_cast<uint64_t>(v), std::memory_order_relaxed); }
  void Add(double v) {
    uint64_t old = bits_.load(std::memory_order_relaxed);
    while (!bits_.compare_exchange_weak(old, std::bit_cast<uint64_t>(std::bit_cast<double>(old) + v),
                                        std::memory_order_relaxed)) {
    }
  }

 private:
  std::atomic<uint64_t> bits_{0};  // bit pattern of +0.0
};

}  // namespace metrics_internal

// Monotonic count (requests served, tokens generated, bytes written). Starts at 0.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // v < 0 and NaN are ignored: a counter never goes down.
  void Add(double v = 1) {
    if (v >= 0) value_.Add(v);
  }
  double Value() const { return value_.Load(); }

 private:
  metrics_internal::AtomicDouble value_;
};

// A value that goes up and down (queue depth, bytes resident in a tier). Starts at 0.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double v) { value_.Store(v); }
  void Add(double v) { value_.Add(v); }  // negative v subtracts
  double Value() const { return value_.Load(); }

 private:
  metrics_internal::AtomicDouble value_;
};

// Distribution over fixed buckets. An observation v lands in the first bucket whose upper
// bound is >= v (Prometheus "le"), else in the implicit +Inf bucket; NaN lands in +Inf.
// Created only by MetricsRegistry::AddHistogram, which validates the bounds.
class Histogram {
 public:
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double v);

  // Finite upper bounds, strictly increasing; +Inf is implicit. Shape [B].
  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts, one per bound plus the +Inf bucket last. Shape [B + 1]; the last
  // entry is Count(). Each bucket is read atomically, the set as a whole is not a snapshot.
  std::vector<uint64_t> CumulativeCounts() const;
  uint64_t Count() const;  // observations so far (sum of the buckets)
  double Sum() const { return sum_.Load(); }

 private:
  friend class MetricsRegistry;
  explicit Histogram(std::vector<double> bounds);

  const std::vector<double> bounds_;
  std::vector<std::atomic<uint64_t>> buckets_;  // per-bucket (not cumulative) counts, [B + 1]
  metrics_internal::AtomicDouble sum_;
};

// Bounds start, start*factor, ..., count of them. Returns {} unless start > 0, factor > 1
// and count >= 1 (an empty bound set is a valid histogram with only the +Inf bucket).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// Latency buckets in seconds, 1 ms to 60 s in 1-2.5-5 steps (15 bounds).
std::vector<double> DefaultLatencyBuckets();

// A sample value as Prometheus text: integral values in int64 range without exponent or
// fraction ("3", "1000000000000000"), others in the shortest form that round-trips
// ("0.1", "1e+21"), and "+Inf", "-Inf", "NaN". -0 prints as "0".
std::string FormatMetricValue(double v);

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Registers a series. A metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) may hold several series
  // with different label sets (label order does not make two sets different), all of one
  // type and one help text. InvalidArgument on a bad metric or label name, a second series
  // with the same name and labels, a type or help clash with an earlier series of that name,
  // or a name colliding with a histogram's <name>_bucket / _sum / _count.
  [[nodiscard]] Result<Counter*> AddCounter(std::string name, std::string help,
                                            Labels labels = {});
  [[nodiscard]] Result<Gauge*> AddGauge(std::string name, std::string help, Labels labels = {});
  // bounds: finite, strictly increasing (may be empty); +Inf is implicit.
  [[nodiscard]] Result<Histogram*> AddHistogram(std::string name, std::string help,
                                                std::vector<double> bounds, Labels labels = {});

  // fn runs at the start of every Render, before any value is read (to refresh gauges from
  // another subsystem's stats). fn may register metrics but must not call Render.
  void AddCollector(std::function<void()> fn);

  // Runs the collectors (in the order added), then renders every family in registration
  // order: "# HELP" (omitted for an empty help), "# TYPE", then its series in registration
  // order. Empty registry: "".
  [[nodiscard]] std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series;
  struct Family;

  // Validates and creates the series; returns it with mu_ released. nullptr never on OK.
  Result<Series*> AddSeries(std::string name, std::string help, Type type, Labels labels,
                            std::vector<double>* bounds);

  mutable std::mutex render_mu_;  // serialises Render (and so the collectors); taken first
  mutable std::mutex mu_;         // guards everything below
  std::vector<std::unique_ptr<Family>> families_;  // registration order
  std::map<std::string, Family*, std::less<>> by_name_;
  std::vector<std::function<void()>> collectors_;
};

}  // namespace kvtier::server
