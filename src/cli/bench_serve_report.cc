// `kvtier-bench serve` (bench_serve.h): the pure parts (SSE, percentiles, Prometheus text,
// URLs), the statistics, the table and JSON, and the gnuplot plots.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/strings.h"
#include "cli/bench_report.h"
#include "cli/bench_serve.h"

namespace kvtier::cli {
namespace bench_serve {

void SseParser::Feed(std::string_view bytes,
                     const std::function<void(const std::string&)>& on_data) {
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t nl = bytes.find('\n', at);
    if (nl == std::string_view::npos) {
      line_.append(bytes.substr(at));
      return;
    }
    line_.append(bytes.substr(at, nl - at));
    at = nl + 1;
    std::string line = std::move(line_);
    line_.clear();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    Line(line, on_data);
  }
}

void SseParser::Finish(const std::function<void(const std::string&)>& on_data) {
  if (!line_.empty()) {
    std::string line = std::move(line_);
    line_.clear();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    Line(line, on_data);
  }
  Line("", on_data);
}

void SseParser::Line(std::string_view line,
                     const std::function<void(const std::string&)>& on_data) {
  if (line.empty()) {
    if (has_data_) {
      std::string d = std::move(data_);
      data_.clear();
      has_data_ = false;
      on_data(d);
    }
    return;
  }
  if (line.front() == ':') return;  // comment
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  if (field != "data") return;  // event, id, retry: not used by OpenAI streams
  std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double h = (static_cast<double>(v.size()) - 1) * std::clamp(p, 0.0, 100.0) / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= v.size()) return v.back();
  return v[lo] + (h - static_cast<double>(lo)) * (v[lo + 1] - v[lo]);
}

std::vector<PromSample> ParsePrometheus(std::string_view text, std::string_view metric) {
  std::vector<PromSample> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    const size_t name_end = line.find_first_of("{ \t");
    if (name_end == std::string_view::npos || line.substr(0, name_end) != metric) continue;
    PromSample s;
    size_t i = name_end;
    bool bad = false;
    if (line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
        if (i < line.size() && line[i] == '}') break;
        const size_t eq = line.find('=', i);
        if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          bad = true;
          break;
        }
        std::string key(line.substr(i, eq - i));
        while (!key.empty() && key.back() == ' ') key.pop_back();
        std::string value;
        i = eq + 2;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
          ++i;
        }
        if (i >= line.size()) {
          bad = true;
          break;
        }
        ++i;  // closing quote
        s.labels[key] = value;
      }
      if (bad || i >= line.size()) continue;
      ++i;  // '}'
    }
    const std::string rest(line.substr(i));
    char* end = nullptr;
    s.value = std::strtod(rest.c_str(), &end);
    if (end == rest.c_str()) continue;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<BenchServeKvBytes> ParseKvBytes(std::string_view text) {
  std::vector<BenchServeKvBytes> out;
  for (const PromSample& s : ParsePrometheus(text, "kvtier_kv_bytes")) {
    auto tier = s.labels.find("tier");
    auto format = s.labels.find("format");
    out.push_back({tier == s.labels.end() ? "" : tier->second,
                   format == s.labels.end() ? "" : format->second, s.value});
  }
  return out;
}

Result<ParsedUrl> ParseUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos || url.substr(0, scheme) != "http") {
    return Status::InvalidArgument("--url: expected http://HOST:PORT[/PATH], got '" + url + "'");
  }
  const size_t slash = url.find('/', scheme + 3);
  ParsedUrl p;
  p.origin = url.substr(0, slash);
  if (p.origin.size() <= scheme + 3) {
    return Status::InvalidArgument("--url: no host in '" + url + "'");
  }
  if (slash != std::string::npos) p.base = url.substr(slash);
  while (!p.base.empty() && p.base.back() == '/') p.base.pop_back();
  if (p.base.size() >= 3 && p.base.compare(p.base.size() - 3, 3, "/v1") == 0) {
    p.base.resize(p.base.size() - 3);
  }
  return p;
}

}  // namespace bench_serve

using bench_serve::Percentile;
using nlohmann::json;

BenchServeStats SummarizeRun(const BenchServeRun& r, uint32_t round) {
  BenchServeStats s;
  std::vector<double> ttft, tps;
  double first = 1e300, last = 0;
  for (const BenchServeRequest& q : r.requests) {
    if (round != 0 && q.round != round) continue;
    ++s.requests;
    if (!q.ok) {
      ++s.errors;
      continue;
    }
    if (q.ttft_ms >= 0) ttft.push_back(q.ttft_ms);
    if (q.completion_tokens >= 2 && q.decode_tps > 0) tps.push_back(q.decode_tps);
    s.prompt_tokens += q.prompt_tokens;
    s.cached_tokens += q.cached_tokens;
    s.completion_tokens += q.completion_tokens;
    first = std::min(first, q.start_ms);
    last = std::max(last, q.start_ms + q.total_ms);
  }
  s.ttft_p50 = Percentile(ttft, 50);
  s.ttft_p90 = Percentile(ttft, 90);
  s.ttft_p99 = Percentile(ttft, 99);
  s.decode_tps_p50 = Percentile(tps, 50);
  double sum = 0;
  for (double t : tps) sum += t;
  s.decode_tps_mean = tps.empty() ? 0 : sum / static_cast<double>(tps.size());
  s.decode_tps_total =
      last > first ? static_cast<double>(s.completion_tokens) * 1e3 / (last - first) : 0;
  s.cached_ratio = s.prompt_tokens > 0
                       ? static_cast<double>(s.cached_tokens) / static_cast<double>(s.prompt_tokens)
                       : 0;
  return s;
}

namespace {

std::vector<uint32_t> Rounds(const BenchServeRun& r) {
  std::set<uint32_t> s;
  for (const BenchServeRequest& q : r.requests) s.insert(q.round);
  return {s.begin(), s.end()};
}

// Requests of a round-structured workload are compared round by round; concurrency's rounds
// are only each client's request number.
bool HasRounds(const BenchServeRun& r) { return r.workload != "concurrency"; }

double Round3(double v) { return std::round(v * 1000.0) / 1000.0; }

std::map<std::string, double> TierTotals(const BenchServeRun& r) {
  std::map<std::string, double> t;
  for (const BenchServeKvBytes& k : r.kv_bytes) t[k.tier] += k.bytes;
  return t;
}

const BenchServeRequest* FirstError(const BenchServeRun& r) {
  for (const BenchServeRequest& q : r.requests) {
    if (!q.ok) return &q;
  }
  return nullptr;
}

// Two-round: round 1's and round 2's only request.
bool TwoRoundFigures(const BenchServeRun& r, double* speedup, double* hit_rate) {
  const BenchServeRequest *r1 = nullptr, *r2 = nullptr;
  for (const BenchServeRequest& q : r.requests) {
    if (q.round == 1 && r1 == nullptr) r1 = &q;
    if (q.round == 2 && r2 == nullptr) r2 = &q;
  }
  if (r1 == nullptr || r2 == nullptr || !r1->ok || !r2->ok) return false;
  *speedup = r2->ttft_ms > 0 ? r1->ttft_ms / r2->ttft_ms : 0;
  *hit_rate = r2->prompt_tokens > 0
                  ? static_cast<double>(r2->cached_tokens) / static_cast<double>(r2->prompt_tokens)
                  : 0;
  return true;
}

json RunJson(const BenchServeRun& r) {
  const BenchServeStats s = SummarizeRun(r);
  json j{{"workload", r.workload},
         {"server", r.server},
         {"kv_format", r.kv_format},
         {"context_tokens", r.context_tokens},
         {"prompt_source", r.prompt_source},
         {"chars_per_token", Round3(r.chars_per_token)},
         {"chars_per_token_measured", r.calibrated},
         {"chars_per_token_source", r.calibration},
         {"requests", s.requests},
         {"errors", s.errors},
         {"wall_s", Round3(r.wall_s)},
         {"ttft_ms",
          {{"p50", Round3(s.ttft_p50)}, {"p90", Round3(s.ttft_p90)}, {"p99", Round3(s.ttft_p99)}}},
         {"decode_tokens_per_s",
          {{"per_request_p50", Round3(s.decode_tps_p50)},
           {"per_request_mean", Round3(s.decode_tps_mean)},
           {"total", Round3(s.decode_tps_total)}}},
         {"prompt_tokens", s.prompt_tokens},
         {"cached_tokens", s.cached_tokens},
         {"completion_tokens", s.completion_tokens},
         {"cached_ratio", Round3(s.cached_ratio)},
         {"peak_rss_bytes", r.peak_rss_bytes == 0 ? json(nullptr) : json(r.peak_rss_bytes)}};
  json kv = json::object();
  if (r.metrics_seen) {
    for (const char* tier : {"active", "ram", "ssd"}) kv[tier] = json::object();
    for (const BenchServeKvBytes& k : r.kv_bytes) kv[k.tier][k.format] = k.bytes;
    json totals = json::object();
    for (const auto& [tier, bytes] : TierTotals(r)) totals[tier] = bytes;
    j["kv_bytes_total"] = totals;
  }
  j["kv_bytes"] = r.metrics_seen ? kv : json(nullptr);
  json rounds = json::array();
  if (HasRounds(r)) {
    for (uint32_t round : Rounds(r)) {
      const BenchServeStats rs = SummarizeRun(r, round);
      const double n = std::max<double>(1, rs.requests - rs.errors);
      rounds.push_back({{"round", round},
                        {"requests", rs.requests},
                        {"errors", rs.errors},
                        {"prompt_tokens", std::llround(static_cast<double>(rs.prompt_tokens) / n)},
                        {"cached_tokens", std::llround(static_cast<double>(rs.cached_tokens) / n)},
                        {"ttft_ms", Round3(rs.ttft_p50)},
                        {"decode_tokens_per_s", Round3(rs.decode_tps_p50)},
                        {"decode_tokens_per_s_total", Round3(rs.decode_tps_total)}});
    }
  }
  j["rounds"] = rounds;
  double speedup = 0, hit = 0;
  if (r.workload == "two-round") {
    const bool ok = TwoRoundFigures(r, &speedup, &hit);
    j["round2_ttft_speedup"] = ok ? json(Round3(speedup)) : json(nullptr);
    j["hit_rate"] = ok ? json(Round3(hit)) : json(nullptr);
  }
  if (const BenchServeRequest* e = FirstError(r)) j["first_error"] = e->error;
  return j;
}

std::string Mib(double bytes) { return Printf("%.2f MiB", bytes / (1 << 20)); }

// The "KV bytes (max)" cell: each tier's bytes and the formats it holds.
std::string KvBytesCell(const BenchServeRun& run) {
  if (!run.metrics_seen) return "n/a (no kvtier_kv_bytes in /metrics)";
  const auto totals = TierTotals(run);
  std::string cell;
  for (const char* tier : {"active", "ram", "ssd"}) {
    auto t = totals.find(tier);
    if (t == totals.end()) continue;
    cell += (cell.empty() ? "" : "; ") + std::string(tier) + " " + Mib(t->second);
    std::string fmts;
    for (const BenchServeKvBytes& k : run.kv_bytes) {
      if (k.tier == tier && k.bytes > 0) fmts += (fmts.empty() ? "" : ",") + k.format;
    }
    if (!fmts.empty()) cell += " [" + fmts + "]";
  }
  return cell.empty() ? "0" : cell;
}

std::string FileSafe(std::string s) {
  for (char& ch : s) {
    if (ch == '/' || ch == ' ') ch = '-';
  }
  return s.empty() ? "default" : s;
}

}  // namespace

std::string FormatBenchServeJson(const BenchServeReport& r) {
  if (!r.sweep && r.runs.size() == 1) return JsonText(RunJson(r.runs[0]));
  json runs = json::array();
  std::vector<std::string> formats;
  std::vector<uint32_t> contexts;
  for (const BenchServeRun& run : r.runs) {
    runs.push_back(RunJson(run));
    if (std::find(formats.begin(), formats.end(), run.kv_format) == formats.end()) {
      formats.push_back(run.kv_format);
    }
    if (std::find(contexts.begin(), contexts.end(), run.context_tokens) == contexts.end()) {
      contexts.push_back(run.context_tokens);
    }
  }
  json sweep{{"workload", r.runs.empty() ? "" : r.runs[0].workload},
             {"formats", formats},
             {"contexts", contexts}};
  return JsonText(json{{"sweep", sweep}, {"runs", runs}});
}

std::string FormatBenchServeTable(const BenchServeReport& r) {
  std::ostringstream o;
  for (const BenchServeRun& run : r.runs) {
    const BenchServeStats s = SummarizeRun(run);
    o << "bench-serve " << run.workload << " (context " << run.context_tokens << " tokens, KV "
      << (run.kv_format.empty() ? "?" : run.kv_format) << ")\n";
    const char* calibration = run.calibration == "tokenize"  ? "measured by /tokenize"
                              : run.calibration == "request" ? "measured by a request"
                              : run.calibration == "given"   ? "--chars-per-token"
                                                             : "assumed";
    TextTable summary({"<", "<"}, 2);
    summary.Row({"server", run.server})
        .Row({"prompts", Printf("%s; %.2f chars/token (%s)", run.prompt_source.c_str(),
                                run.chars_per_token, calibration)})
        .Row({"requests", Printf("%u, errors %u, wall %.2f s", s.requests, s.errors, run.wall_s)})
        .Row(
            {"TTFT ms", Printf("p50 %.1f  p90 %.1f  p99 %.1f", s.ttft_p50, s.ttft_p90, s.ttft_p99)})
        .Row({"decode tok/s", Printf("per request p50 %.1f (mean %.1f), total %.1f",
                                     s.decode_tps_p50, s.decode_tps_mean, s.decode_tps_total)})
        .Row({"tokens",
              Printf("prompt %llu, cached %llu (%.1f%%), completion %llu",
                     static_cast<unsigned long long>(s.prompt_tokens),
                     static_cast<unsigned long long>(s.cached_tokens), 100 * s.cached_ratio,
                     static_cast<unsigned long long>(s.completion_tokens))})
        .Row({"KV bytes (max)", KvBytesCell(run)})
        .Row({"peak RSS",
              run.peak_rss_bytes > 0 ? Mib(static_cast<double>(run.peak_rss_bytes)) : "n/a"});
    o << summary.Render();
    if (HasRounds(run)) {
      TextTable rounds({"round", "requests", "prompt tokens", "cached tokens", "TTFT ms (p50)",
                        "decode tok/s (p50)"},
                       2);
      for (uint32_t round : Rounds(run)) {
        const BenchServeStats rs = SummarizeRun(run, round);
        const double n = std::max<double>(1, rs.requests - rs.errors);
        rounds.Row({std::to_string(round), std::to_string(rs.requests),
                    std::to_string(std::llround(static_cast<double>(rs.prompt_tokens) / n)),
                    std::to_string(std::llround(static_cast<double>(rs.cached_tokens) / n)),
                    Printf("%.1f", rs.ttft_p50), Printf("%.1f", rs.decode_tps_p50)});
      }
      o << rounds.Render();
    }
    double speedup = 0, hit = 0;
    if (run.workload == "two-round" && TwoRoundFigures(run, &speedup, &hit)) {
      o << Printf("  round 2 TTFT speedup %.2fx, hit rate %.1f%%\n", speedup, 100 * hit);
    }
    if (const BenchServeRequest* e = FirstError(run)) o << "  first error: " << e->error << "\n";
    o << "\n";
  }
  return o.str();
}

Status WriteBenchServePlots(const BenchServeReport& r, const std::string& dir, std::string* note) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("--plots: cannot create " + dir + ": " + ec.message());
  // One data file per format, one row per run sorted by context.
  std::map<std::string, std::vector<const BenchServeRun*>> by_format;
  for (const BenchServeRun& run : r.runs) by_format[run.kv_format].push_back(&run);
  const std::string workload0 = r.runs.empty() ? "" : r.runs[0].workload;
  // Two-round and batched-histories plot their rounds apart (cold / warm, load / extend).
  const bool two_round = workload0 == "two-round";
  const bool by_round = two_round || workload0 == "batched-histories";
  const std::string title = "kvtier-bench serve " + workload0 + ": ";
  PlotScript ttft{"ttft", title + "time to first token", "context tokens", "TTFT (ms)", true, {}};
  PlotScript decode{"decode", title + "decode tokens/s", "context tokens", "tokens/s", false, {}};
  for (auto& [format, runs] : by_format) {
    std::sort(runs.begin(), runs.end(), [](const BenchServeRun* a, const BenchServeRun* b) {
      return a->context_tokens < b->context_tokens;
    });
    const std::string file = FileSafe(format) + ".dat";
    std::ofstream out(dir + "/" + file);
    out << "# kvtier-bench serve " << (r.runs.empty() ? "" : r.runs[0].workload) << ", KV format "
        << (format.empty() ? "?" : format) << "\n"
        << "# context_tokens ttft_p50_ms ttft_round1_ms ttft_round2_ms decode_tps_p50 "
           "decode_tps_total"
        << (by_round ? "_round2" : "") << " peak_rss_mib kv_active_mib kv_ram_mib errors\n";
    for (const BenchServeRun* run : runs) {
      const BenchServeStats s = SummarizeRun(*run);
      const BenchServeStats r1 = SummarizeRun(*run, 1), r2 = SummarizeRun(*run, 2);
      const auto totals = TierTotals(*run);
      auto tier = [&](const char* t) {
        auto it = totals.find(t);
        return it == totals.end() ? 0.0 : it->second / (1 << 20);
      };
      out << run->context_tokens << " " << s.ttft_p50 << " " << r1.ttft_p50 << " " << r2.ttft_p50
          << " " << s.decode_tps_p50 << " " << (by_round ? r2.decode_tps_total : s.decode_tps_total)
          << " " << static_cast<double>(run->peak_rss_bytes) / (1 << 20) << " " << tier("active")
          << " " << tier("ram") << " " << s.errors << "\n";
    }
    if (!out) return Status::IOError("--plots: cannot write " + dir + "/" + file);
    const std::string name = format.empty() ? "?" : format;
    auto line = [&](int column, const std::string& title) {
      return "'" + file + "' using 1:" + std::to_string(column) + " with linespoints title '" +
             name + " " + title + "'";
    };
    if (by_round) {
      ttft.series.push_back(line(3, two_round ? "round 1 (cold)" : "round 1 (load histories)"));
      ttft.series.push_back(
          line(4, two_round ? "round 2 (warm)" : "round 2 (extend, decode together)"));
    } else {
      ttft.series.push_back(line(2, "p50"));
    }
    decode.series.push_back(line(5, "per request (p50)"));
    decode.series.push_back(line(6, by_round ? "total, round 2" : "total"));
  }
  KVTIER_RETURN_IF_ERROR(WritePlotScript(dir, ttft));
  KVTIER_RETURN_IF_ERROR(WritePlotScript(dir, decode));
  RenderPlots(dir, {ttft.name, decode.name}, note);
  return Status::OK();
}

}  // namespace kvtier::cli
