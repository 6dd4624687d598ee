// The status page (issue 37): TierHistory's events and buckets against the counters fed to
// it; the page and /dashboard.json against /v1/cache/stats on a live server with an SSD tier
// after a prefix hit and a spill; --no-dashboard; prompt text only when asked for, never able
// to end the page's script; and docs/grafana/kvtier.json's queries against /metrics.
#include "server/dashboard.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "kvtier/server.h"
#include "kvtier/ssd_tier.h"
#include "server/server_test_util.h"

namespace kvtier::server {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// ---- TierHistory ------------------------------------------------------------------------

TEST(TierHistoryTest, EventsAreCounterGrowthBetweenSamplesNewestFirst) {
  TierHistory h(/*max_events=*/100, /*bucket_s=*/10, /*buckets=*/6);
  TierCounters c;
  c.ram_evicted_blocks = 5;  // before the baseline: never an event
  h.Sample(1000, c);
  EXPECT_TRUE(h.Events().empty());
  c.ram_evicted_blocks = 8;
  c.ram_evicted_bytes = 3 * 4096;
  c.ssd_spilled_blocks = 3;
  c.ssd_spilled_bytes = 3000;
  h.Sample(2000, c);
  c.ssd_loaded_blocks = 2;
  c.ssd_loaded_bytes = 2000;
  c.promoted_blocks = 2;
  c.ssd_quarantined = 1;
  h.Sample(3000, c);
  h.Sample(4000, c);  // nothing grew: no event
  const std::vector<TierEvent> e = h.Events();
  ASSERT_EQ(e.size(), 5u);
  // Newest first; within one sample, in TierHistory's fixed order.
  EXPECT_EQ(e[0].unix_ms, 3000);
  EXPECT_EQ(e[4].unix_ms, 2000);
  std::map<std::string, TierEvent> by;
  for (const TierEvent& x : e) by[std::string(TierEventName(x.kind))] = x;
  EXPECT_EQ(by["ram_evict"].count, 3u);
  EXPECT_EQ(by["ram_evict"].bytes, 3u * 4096);
  EXPECT_EQ(by["spill"].count, 3u);
  EXPECT_EQ(by["spill"].bytes, 3000u);
  EXPECT_EQ(by["reload"].count, 2u);
  EXPECT_EQ(by["reload"].bytes, 2000u);
  EXPECT_EQ(by["promote"].count, 2u);
  EXPECT_EQ(by["quarantine"].count, 1u);
  EXPECT_EQ(by["quarantine"].unix_ms, 3000);
}

TEST(TierHistoryTest, ACounterThatWentDownIsANewBaselineAndOldSamplesAreIgnored) {
  TierHistory h(100, 10, 6);
  TierCounters c;
  c.ssd_spilled_blocks = 10;
  h.Sample(1000, c);
  c.ssd_spilled_blocks = 4;  // a restarted tier
  h.Sample(2000, c);
  EXPECT_TRUE(h.Events().empty());
  c.ssd_spilled_blocks = 6;
  h.Sample(3000, c);
  ASSERT_EQ(h.Events().size(), 1u);
  EXPECT_EQ(h.Events()[0].count, 2u);
  c.ssd_spilled_blocks = 100;
  h.Sample(2500, c);  // older than the last sample
  EXPECT_EQ(h.Events().size(), 1u);
}

TEST(TierHistoryTest, TheEventRingIsBounded) {
  TierHistory h(/*max_events=*/7, 10, 6);
  TierCounters c;
  h.Sample(0, c);
  for (int i = 1; i <= 50; ++i) {
    c.ram_evicted_blocks += static_cast<uint64_t>(i);
    h.Sample(i * 1000, c);
  }
  const std::vector<TierEvent> e = h.Events();
  ASSERT_EQ(e.size(), 7u);
  for (size_t k = 0; k < e.size(); ++k) {
    EXPECT_EQ(e[k].count, 50u - k);
    EXPECT_EQ(e[k].unix_ms, static_cast<int64_t>(50 - k) * 1000);
  }
}

TEST(TierHistoryTest, BucketsSumTheLookupsOfTheirWindowAndAreZeroFilled) {
  TierHistory h(100, /*bucket_s=*/10, /*buckets=*/6);
  TierCounters c;
  const int64_t t0 = 1'700'000'000'000;  // a multiple of 10 s
  h.Sample(t0, c);
  // A reference: lookups of each kind by the 10 s bucket the sample falls in.
  std::map<int64_t, std::array<uint64_t, kNumPrefixMatchKinds>> ref;
  uint32_t seed = 1;
  for (int s = 1; s <= 90; ++s) {  // one sample a second for 90 s
    const int64_t t = t0 + s * 1000;
    for (int k = 0; k < kNumPrefixMatchKinds; ++k) {
      seed = seed * 1103515245u + 12345u;
      const uint64_t d = (seed >> 16) % 4;
      c.hits[k] += d;
      ref[t / 10000 * 10][k] += d;
    }
    h.Sample(t, c);
  }
  const int64_t now = t0 + 95 * 1000;
  const std::vector<HitBucket> b = h.Buckets(now);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i].start_unix_s, now / 10000 * 10 - static_cast<int64_t>(5 - i) * 10);
    EXPECT_EQ(b[i].lookups, ref[b[i].start_unix_s]) << i;
  }
  // Much later: every bucket is empty, and there are still six of them.
  for (const HitBucket& x : h.Buckets(now + 3600 * 1000)) {
    for (uint64_t v : x.lookups) EXPECT_EQ(v, 0u);
  }
}

// ---- The page on a live server ----------------------------------------------------------

// A fresh temporary directory, removed with everything in it.
struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/kvtier_dashboard_XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string dir;
};

// A server over a RAM prefix cache and an SSD tier in a fresh temporary directory.
struct Live : TempDir, ::kvtier::testing::BundledServer {
  explicit Live(bool dashboard = true, bool show_text = false)
      : BundledServer(Options(dir, dashboard, show_text)) {}
  static ::kvtier::testing::BundledServerOptions Options(const std::string& dir, bool dashboard,
                                                         bool show_text) {
    ::kvtier::testing::BundledServerOptions o;
    o.ssd_dir = dir;
    o.prefix_cache_bytes = 256ull << 20;
    o.server.metrics_ssd_reconcile_ms = 0;
    o.server.dashboard = dashboard;
    o.server.dashboard_show_text = show_text;
    return o;
  }
  void Complete(const std::string& prompt, int max_tokens = 6) const {
    CompleteJson(prompt, max_tokens);
  }
};

const std::string kPrompt =
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife.";

// Requests with a prefix hit, then everything spilled to SSD and a request served from it.
void Traffic(Live& s) {
  s.Complete(kPrompt);
  s.Complete(kPrompt + " However little known the feelings");  // a prefix hit
  s.cache->Evict(UINT64_MAX);                                  // RAM -> SSD
  s.tier->Flush();
  s.Complete(kPrompt + " or views of such a man may be");      // promoted back from SSD
  s.tier->Flush();
}

// The snapshot once the sampler has seen every lookup the cache counted (it samples once a
// second: the buckets' sum equals the cache's counters) and the engine has ended every row.
json SettledSnapshot(Live& s) {
  json d;
  for (int i = 0; i < 100; ++i) {
    d = s.GetJson("/dashboard.json");
    uint64_t sum = 0;
    for (const json& b : d["hit_rate"]["buckets"]) {
      for (const char* k : {"miss", "exact", "prefix", "supersequence", "lcp"}) {
        sum += b[k].get<uint64_t>();
      }
    }
    // The engine ends a row just after its last token went out: running and finished lag.
    const json& r = d["requests"];
    if (sum == d["cache"]["prefix_cache"]["lookups"].get<uint64_t>() && !d["events"].empty() &&
        r["running"] == 0 && r["waiting"] == 0 && r["finished"] == d["ttft_s"]["count"]) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return d;
}

TEST(DashboardTest, SnapshotEqualsCacheStatsAndCountsWhatHappened) {
  Live s;
  Traffic(s);
  const json d = SettledSnapshot(s);
  json stats = s.GetJson("/v1/cache/stats");
  json cache = d["cache"];
  // The page adds the SSD tier's formats; everything else is /v1/cache/stats's.
  ASSERT_TRUE(cache["ssd"].contains("by_format"));
  const json ssd_formats = cache["ssd"]["by_format"];
  cache["ssd"].erase("by_format");
  EXPECT_EQ(cache, stats) << "page: " << cache.dump(1) << "\nstats: " << stats.dump(1);

  const json& pc = stats["prefix_cache"];
  EXPECT_EQ(pc["lookups"], 3);
  EXPECT_GE(pc["hits"]["prefix"].get<int>() + pc["hits"]["lcp"].get<int>() +
                pc["hits"]["supersequence"].get<int>() + pc["hits"]["exact"].get<int>(),
            2);
  EXPECT_GT(stats["ssd"]["spilled_blocks"].get<int>(), 0);
  EXPECT_GT(stats["ssd"]["loaded_blocks"].get<int>(), 0);
  uint64_t ssd_blocks = 0;
  for (const json& f : ssd_formats) ssd_blocks += f["blocks"].get<uint64_t>();
  EXPECT_EQ(ssd_blocks, stats["ssd"]["blocks"].get<uint64_t>());

  // Hit buckets: per kind, their sum is the cache's count (all within the last 10 minutes).
  for (const char* k : {"miss", "exact", "prefix", "supersequence", "lcp"}) {
    uint64_t sum = 0;
    for (const json& b : d["hit_rate"]["buckets"]) sum += b[k].get<uint64_t>();
    EXPECT_EQ(sum, pc["hits"][k].get<uint64_t>()) << k;
  }
  // Events: the spill, the RAM eviction and the reload, with the tier's block counts.
  std::map<std::string, uint64_t> ev;
  for (const json& e : d["events"]) ev[e["kind"]] += e["count"].get<uint64_t>();
  EXPECT_EQ(ev["ram_evict"], pc["evicted_blocks"].get<uint64_t>());
  EXPECT_EQ(ev["spill"], stats["ssd"]["spilled_blocks"].get<uint64_t>());
  EXPECT_EQ(ev["reload"], stats["ssd"]["loaded_blocks"].get<uint64_t>());
  EXPECT_EQ(ev["promote"], pc["promoted_blocks"].get<uint64_t>());

  // Histograms: one TTFT observation per request; buckets sum to the count.
  EXPECT_EQ(d["ttft_s"]["count"], 3);
  uint64_t n = 0;
  for (const json& c : d["ttft_s"]["counts"]) n += c.get<uint64_t>();
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(d["ttft_s"]["counts"].size(), d["ttft_s"]["bounds"].size() + 1);
  EXPECT_EQ(d["tokens_per_s"]["count"], 3);  // 6 tokens each: a speed for every request

  EXPECT_EQ(d["requests"]["running"], 0);
  EXPECT_EQ(d["requests"]["waiting"], 0);
  EXPECT_EQ(d["requests"]["finished"], 3);
  EXPECT_EQ(d["model"], "bundled");

  // Hottest: at most 20, no text unless asked for, each a RAM entry in the pool's format.
  ASSERT_FALSE(d["hottest"].empty());
  EXPECT_LE(d["hottest"].size(), std::min<uint64_t>(20, pc["entries"].get<uint64_t>()));
  for (const json& h : d["hottest"]) {
    EXPECT_FALSE(h.contains("text"));
    EXPECT_EQ(h["tier"], "ram");
    EXPECT_EQ(h["format"], "f16");
    EXPECT_GT(h["tokens"].get<int>(), 0);
  }
}

// The inlined snapshot of a page: the JSON between "const DATA=" and the next ";\n".
json InlinedData(const std::string& page) {
  const std::string mark = "const DATA=";
  const size_t a = page.find(mark);
  if (a == std::string::npos) return json();
  const size_t b = page.find(";\n", a);
  return json::parse(page.substr(a + mark.size(), b - a - mark.size()));
}

TEST(DashboardTest, PageIsOneSelfContainedDocumentWithTheSnapshotInlined) {
  Live s;
  Traffic(s);
  httplib::Result r = s.Get("/");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_LT(r->body.size(), 100u * 1024);
  EXPECT_TRUE(r->body.starts_with("<!DOCTYPE html>"));
  // Nothing fetched from elsewhere: no external scripts, styles, fonts or images (the one
  // absolute URL is SVG's namespace name, which is never fetched).
  std::string body = r->body;
  const std::string svg_ns = "http://www.w3.org/2000/svg";
  for (size_t at; (at = body.find(svg_ns)) != std::string::npos;) body.erase(at, svg_ns.size());
  EXPECT_EQ(body.find("http://"), std::string::npos);
  EXPECT_EQ(body.find("https://"), std::string::npos);
  EXPECT_EQ(r->body.find("<script src"), std::string::npos);
  EXPECT_EQ(r->body.find("<link"), std::string::npos);
  const json data = InlinedData(r->body);
  ASSERT_TRUE(data.is_object());
  const json stats = s.GetJson("/v1/cache/stats");
  EXPECT_EQ(data["cache"]["prefix_cache"]["lookups"], stats["prefix_cache"]["lookups"]);
  EXPECT_EQ(data["cache"]["active_pool"], stats["active_pool"]);
  // Read-only: other methods are refused.
  httplib::Client c("127.0.0.1", s.server->port());
  httplib::Result post = c.Post("/", "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET");
}

TEST(DashboardTest, NoDashboardIs404) {
  Live s(/*dashboard=*/false);
  for (const char* path : {"/", "/dashboard.json"}) {
    httplib::Result r = s.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
  }
  EXPECT_EQ(s.Get("/v1/cache/stats")->status, 200);
}

TEST(DashboardTest, PromptTextOnlyWhenAskedAndNeverEndsTheScript) {
  const std::string evil = "</script><script>alert(1)</script> " + kPrompt;
  Live s(/*dashboard=*/true, /*show_text=*/true);
  s.Complete(evil, 2);
  const json d = s.GetJson("/dashboard.json");
  // Two entries: the prompt (stored when its prefill ended) and the whole conversation.
  ASSERT_EQ(d["hottest"].size(), 2u);
  for (const json& h : d["hottest"]) {
    ASSERT_TRUE(h.contains("text"));
    // The entry's first tokens: the prompt's start, as the tokenizer decodes it.
    EXPECT_TRUE(h["text"].get<std::string>().starts_with("</script><script>alert(1)</script>"))
        << h["text"];
  }
  const std::string text = d["hottest"][0]["text"];
  const std::string page = s.Get("/")->body;
  size_t closes = 0;
  for (size_t at = page.find("</script>"); at != std::string::npos; at = page.find("</script>", at + 1)) {
    ++closes;
  }
  EXPECT_EQ(closes, 1u);  // the page's own
  const json data = InlinedData(page);
  EXPECT_EQ(data["hottest"][0]["text"], text);
}

// ---- docs/grafana/kvtier.json against /metrics -----------------------------------------

// Every kvtier_* metric name in a PromQL expression.
// (A plain scan, not std::regex: GCC 12 at -O1 with ASan warns maybe-uninitialized inside
// <regex>, which -Werror turns into a failed build.)
std::set<std::string> MetricNames(const std::string& expr) {
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  auto name = [&](char c) { return word(c) || c == ':'; };
  std::set<std::string> out;
  const std::string prefix = "kvtier_";
  for (size_t at = expr.find(prefix); at != std::string::npos; at = expr.find(prefix, at + 1)) {
    if (at > 0 && word(expr[at - 1])) continue;  // \b before the name
    size_t end = at + prefix.size();
    while (end < expr.size() && name(expr[end])) ++end;
    out.insert(expr.substr(at, end - at));
  }
  return out;
}

// The sample names of a Prometheus text exposition (histograms' _bucket / _sum / _count).
std::set<std::string> Exported(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    out.insert(line.substr(0, line.find_first_of("{ ")));
  }
  return out;
}

// The queries of a Grafana dashboard: every panel target's expr (rows' nested panels too)
// and every templating variable's query.
void Queries(const json& j, std::vector<std::string>* out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (k == "expr" && v.is_string()) out->push_back(v);
      if (k == "query" && v.is_object() && v.contains("query")) out->push_back(v["query"]);
      Queries(v, out);
    }
  } else if (j.is_array()) {
    for (const json& v : j) Queries(v, out);
  }
}

// Metric names the dashboard uses that `exported` lacks.
std::vector<std::string> Missing(const json& dash, const std::set<std::string>& exported) {
  std::vector<std::string> q, out;
  Queries(dash, &q);
  for (const std::string& e : q) {
    for (const std::string& m : MetricNames(e)) {
      if (!exported.contains(m)) out.push_back(m + " (in: " + e + ")");
    }
  }
  return out;
}

TEST(GrafanaDashboardTest, EveryMetricItQueriesIsExported) {
  std::ifstream in(KVTIER_GRAFANA_JSON);
  ASSERT_TRUE(in) << KVTIER_GRAFANA_JSON;
  const json dash = json::parse(in);
  ASSERT_TRUE(dash["panels"].is_array());
  EXPECT_FALSE(dash["title"].get<std::string>().empty());
  // Every panel but rows and text has queries, each naming at least one kvtier metric.
  size_t n_queries = 0;
  std::set<std::string> used;
  for (const json& p : dash["panels"]) {
    ASSERT_TRUE(p.contains("gridPos")) << p.dump();
    if (p["type"] == "row" || p["type"] == "text") continue;
    ASSERT_FALSE(p["targets"].empty()) << p["title"];
    for (const json& t : p["targets"]) {
      const std::set<std::string> names = MetricNames(t["expr"]);
      EXPECT_FALSE(names.empty()) << p["title"] << ": " << t["expr"];
      used.insert(names.begin(), names.end());
      ++n_queries;
    }
  }
  EXPECT_GE(n_queries, 20u);

  Live s;
  Traffic(s);
  httplib::Result r = s.Get("/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const std::set<std::string> exported = Exported(r->body);
  const std::vector<std::string> missing = Missing(dash, exported);
  EXPECT_TRUE(missing.empty()) << "not exported by /metrics: " << ::testing::PrintToString(missing);
  // The panels cover the tiers, the lookups, TTFT, speed and the tier events.
  for (const char* m : {"kvtier_kv_bytes", "kvtier_prefix_cache_hits_total",
                        "kvtier_time_to_first_token_seconds_bucket",
                        "kvtier_request_tokens_per_second_bucket", "kvtier_ssd_spilled_blocks_total",
                        "kvtier_ssd_loaded_blocks_total", "kvtier_ssd_quarantined_total",
                        "kvtier_prefix_cache_evicted_blocks_total", "kvtier_requests_running",
                        "kvtier_requests_waiting"}) {
    EXPECT_TRUE(used.contains(m)) << m;
  }
  // The check itself finds a name /metrics lacks.
  json bad = dash;
  bad["panels"][1]["targets"][0]["expr"] = "rate(kvtier_no_such_metric_total[5m])";
  EXPECT_EQ(Missing(bad, exported).size(), 1u);
}

}  // namespace
}  // namespace kvtier::server
