#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>

namespace kvtier::server {

namespace {

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool ValidMetricName(std::string_view s) {
  if (s.empty() || IsDigit(s[0])) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAsciiLetter(c) || IsDigit(c) || c == '_' || c == ':'; });
}

// [a-zA-Z_][a-zA-Z0-9_]*
bool ValidLabelName(std::string_view s) {
  if (s.empty() || IsDigit(s[0])) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAsciiLetter(c) || IsDigit(c) || c == '_'; });
}

// HELP text: backslash and newline escaped.
void AppendEscapedHelp(std::string_view s, std::string* out) {
  for (char c : s) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '\n') {
      *out += "\\n";
    } else {
      out->push_back(c);
    }
  }
}

// Label value: backslash, double quote and newline escaped.
void AppendEscapedLabelValue(std::string_view s, std::string* out) {
  for (char c : s) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '"') {
      *out += "\\\"";
    } else if (c == '\n') {
      *out += "\\n";
    } else {
      out->push_back(c);
    }
  }
}

const char* TypeName(int type) {
  static const char* const kNames[] = {"counter", "gauge", "histogram"};
  return kNames[type];
}

constexpr const char* kHistogramSuffixes[] = {"_bucket", "_sum", "_count"};

}  // namespace

// ---- Histogram --------------------------------------------------------------------------

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(bounds_.size() + 1) {}

void Histogram::Observe(double v) {
  // First bound >= v; NaN compares false with everything, so route it to +Inf explicitly.
  const size_t i = std::isnan(v) ? bounds_.size()
                                 : static_cast<size_t>(std::lower_bound(bounds_.begin(),
                                                                        bounds_.end(), v) -
                                                       bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.Add(v);
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(buckets_.size());
  uint64_t total = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    out[i] = total;
  }
  return out;
}

uint64_t Histogram::Count() const {
  uint64_t total = 0;
  for (const auto& b : buckets_) total += b.load(std::memory_order_relaxed);
  return total;
}

// ---- Free functions ---------------------------------------------------------------------

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1) return {};
  std::vector<double> out;
  out.reserve(static_cast<size_t>(count));
  double b = start;
  for (int i = 0; i < count && std::isfinite(b); ++i, b *= factor) out.push_back(b);
  return out;
}

std::vector<double> DefaultLatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == 0) return "0";  // also -0
  // 2^63: every integral double below it fits an int64 exactly.
  if (v == std::trunc(v) && std::fabs(v) < 9223372036854775808.0) {
    return std::to_string(static_cast<int64_t>(v));
  }
  char buf[32];  // the longest shortest-round-trip double is 24 characters
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// ---- MetricsRegistry --------------------------------------------------------------------

struct MetricsRegistry::Series {
  Labels sorted_labels;    // by name: two label sets are the same series if these are equal
  std::string label_text;  // `a="x",b="y"` escaped, without braces; "" for no labels
  std::unique_ptr<Counter> counter;
  std::unique_ptr<Gauge> gauge;
  std::unique_ptr<Histogram> histogram;
};

struct MetricsRegistry::Family {
  std::string name;
  std::string help;
  Type type;
  std::vector<std::unique_ptr<Series>> series;  // registration order
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

Result<Counter*> MetricsRegistry::AddCounter(std::string name, std::string help, Labels labels) {
  KVTIER_ASSIGN_OR_RETURN(Series * s, AddSeries(std::move(name), std::move(help), Type::kCounter,
                                                std::move(labels), nullptr));
  return s->counter.get();
}

Result<Gauge*> MetricsRegistry::AddGauge(std::string name, std::string help, Labels labels) {
  KVTIER_ASSIGN_OR_RETURN(Series * s, AddSeries(std::move(name), std::move(help), Type::kGauge,
                                                std::move(labels), nullptr));
  return s->gauge.get();
}

Result<Histogram*> MetricsRegistry::AddHistogram(std::string name, std::string help,
                                                 std::vector<double> bounds, Labels labels) {
  KVTIER_ASSIGN_OR_RETURN(Series * s, AddSeries(std::move(name), std::move(help),
                                                Type::kHistogram, std::move(labels), &bounds));
  return s->histogram.get();
}

Result<MetricsRegistry::Series*> MetricsRegistry::AddSeries(std::string name, std::string help,
                                                            Type type, Labels labels,
                                                            std::vector<double>* bounds) {
  const int t = static_cast<int>(type);
  // Checks that need no lock first.
  if (!ValidMetricName(name)) {
    return Status::InvalidArgument("metric name \"" + name +
                                   "\" is invalid: expected [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
  for (const auto& [key, value] : labels) {
    if (!ValidLabelName(key)) {
      return Status::InvalidArgument("metric " + name + ": label name \"" + key +
                                     "\" is invalid: expected [a-zA-Z_][a-zA-Z0-9_]*");
    }
    if (key.starts_with("__")) {
      return Status::InvalidArgument("metric " + name + ": label name \"" + key +
                                     "\" is reserved (starts with __)");
    }
    if (type == Type::kHistogram && key == "le") {
      return Status::InvalidArgument("histogram " + name + ": label name \"le\" is reserved");
    }
  }
  auto series = std::make_unique<Series>();
  series->sorted_labels = labels;
  std::sort(series->sorted_labels.begin(), series->sorted_labels.end());
  for (size_t i = 1; i < series->sorted_labels.size(); ++i) {
    if (series->sorted_labels[i].first == series->sorted_labels[i - 1].first) {
      return Status::InvalidArgument("metric " + name + ": label \"" +
                                     series->sorted_labels[i].first + "\" given twice");
    }
  }
  if (bounds != nullptr) {
    for (size_t i = 0; i < bounds->size(); ++i) {
      const double b = (*bounds)[i];
      if (!std::isfinite(b)) {
        return Status::InvalidArgument("histogram " + name + ": bound " + std::to_string(i) +
                                       " is " + FormatMetricValue(b) +
                                       ", expected finite (+Inf is implicit)");
      }
      if (i > 0 && !(b > (*bounds)[i - 1])) {
        return Status::InvalidArgument("histogram " + name + ": bounds must be strictly " +
                                       "increasing, got " + FormatMetricValue((*bounds)[i - 1]) +
                                       " then " + FormatMetricValue(b) + " at index " +
                                       std::to_string(i));
      }
    }
  }
  for (const auto& [key, value] : labels) {
    if (!series->label_text.empty()) series->label_text.push_back(',');
    series->label_text += key;
    series->label_text += "=\"";
    AppendEscapedLabelValue(value, &series->label_text);
    series->label_text.push_back('"');
  }
  switch (type) {
    case Type::kCounter: series->counter = std::make_unique<Counter>(); break;
    case Type::kGauge: series->gauge = std::make_unique<Gauge>(); break;
    case Type::kHistogram:
      series->histogram.reset(new Histogram(std::move(*bounds)));  // private constructor
      break;
  }

  std::lock_guard<std::mutex> lock(mu_);
  Family* family = nullptr;
  if (auto it = by_name_.find(name); it != by_name_.end()) {
    family = it->second;
    if (family->type != type) {
      return Status::InvalidArgument("metric " + name + " is already registered as a " +
                                     TypeName(static_cast<int>(family->type)) + ", not a " +
                                     TypeName(t));
    }
    if (family->help != help) {
      return Status::InvalidArgument("metric " + name + ": help \"" + help +
                                     "\" differs from the earlier \"" + family->help + "\"");
    }
    for (const auto& s : family->series) {
      if (s->sorted_labels == series->sorted_labels) {
        return Status::InvalidArgument("metric " + name + "{" + series->label_text +
                                       "} is already registered");
      }
    }
  } else {
    // A histogram's samples are named <name>_bucket, _sum, _count: no family may take those.
    for (std::string_view suffix : kHistogramSuffixes) {
      if (name.ends_with(suffix)) {
        auto base = by_name_.find(std::string_view(name).substr(0, name.size() - suffix.size()));
        if (base != by_name_.end() && base->second->type == Type::kHistogram) {
          return Status::InvalidArgument("metric " + name + " collides with histogram " +
                                         base->first);
        }
      }
      if (type == Type::kHistogram && by_name_.count(name + std::string(suffix)) > 0) {
        return Status::InvalidArgument("histogram " + name + " collides with metric " + name +
                                       std::string(suffix));
      }
    }
    auto f = std::make_unique<Family>();
    f->name = name;
    f->help = std::move(help);
    f->type = type;
    family = f.get();
    families_.push_back(std::move(f));
    by_name_.emplace(std::move(name), family);
  }
  family->series.push_back(std::move(series));
  return family->series.back().get();
}

void MetricsRegistry::AddCollector(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(fn));
}

std::string MetricsRegistry::Render() const {
  std::lock_guard<std::mutex> render_lock(render_mu_);
  std::vector<std::function<void()>> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectors = collectors_;
  }
  for (const auto& fn : collectors) fn();  // without mu_: they may register metrics

  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  // name{labels} value, or name value without labels; extra_label is appended last.
  auto sample = [&out](std::string_view name, const std::string& labels,
                       std::string_view extra_label, double value) {
    out += name;
    if (!labels.empty() || !extra_label.empty()) {
      out.push_back('{');
      out += labels;
      if (!labels.empty() && !extra_label.empty()) out.push_back(',');
      out += extra_label;
      out.push_back('}');
    }
    out.push_back(' ');
    out += FormatMetricValue(value);
    out.push_back('\n');
  };
  for (const auto& f : families_) {
    if (!f->help.empty()) {
      out += "# HELP " + f->name + " ";
      AppendEscapedHelp(f->help, &out);
      out.push_back('\n');
    }
    out += "# TYPE " + f->name + " " + TypeName(static_cast<int>(f->type)) + "\n";
    for (const auto& s : f->series) {
      switch (f->type) {
        case Type::kCounter: sample(f->name, s->label_text, "", s->counter->Value()); break;
        case Type::kGauge: sample(f->name, s->label_text, "", s->gauge->Value()); break;
        case Type::kHistogram: {
          const Histogram& h = *s->histogram;
          const std::vector<uint64_t> cum = h.CumulativeCounts();
          const std::string bucket = f->name + "_bucket";
          for (size_t i = 0; i < cum.size(); ++i) {
            const std::string le =
                i < h.bounds().size() ? FormatMetricValue(h.bounds()[i]) : "+Inf";
            sample(bucket, s->label_text, "le=\"" + le + "\"", static_cast<double>(cum[i]));
          }
          sample(f->name + "_sum", s->label_text, "", h.Sum());
          // From the same read as the buckets, so _count always equals the +Inf bucket.
          sample(f->name + "_count", s->label_text, "", static_cast<double>(cum.back()));
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace kvtier::server
