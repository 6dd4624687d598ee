// `kvtier-bench serve`: the pure parts (SSE split anywhere, percentiles against a sorted-array
// model, Prometheus kvtier_kv_bytes, URLs, the two-round JSON shape), the calibration against
// fake servers (/tokenize when there is one, else one short request), and real runs of the
// binary against the bundled model (two-round hits the prefix cache; concurrency has no
// errors).
#include "cli/bench_serve.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_test_util.h"
#include "cli/serve.h"

namespace kvtier::cli {
namespace {

using bench_serve::Calibrate;
using bench_serve::Endpoint;
using bench_serve::kCalibrationChars;
using bench_serve::ParseKvBytes;
using bench_serve::ParsePrometheus;
using bench_serve::ParseUrl;
using bench_serve::Percentile;
using bench_serve::SseParser;
using nlohmann::json;

const char kStream[] =
    "data: {\"choices\":[{\"text\":\"Hello\"}]}\n\n"
    ": a comment line\r\n"
    "data: {\"choices\":[{\"text\":\" world\"}]}\r\n\r\n"
    "event: ignored\n"
    "data: first line\n"
    "data: second line\n\n"
    "data: [DONE]\n\n";

std::vector<std::string> Whole() {
  return {"{\"choices\":[{\"text\":\"Hello\"}]}", "{\"choices\":[{\"text\":\" world\"}]}",
          "first line\nsecond line", "[DONE]"};
}

TEST(BenchServeSse, SplitsEventsAtEveryChunkBoundary) {
  const std::string s = kStream;
  for (size_t cut1 = 0; cut1 <= s.size(); ++cut1) {
    for (size_t cut2 = cut1; cut2 <= s.size(); cut2 += 7) {
      SseParser p;
      std::vector<std::string> got;
      auto on = [&](const std::string& d) { got.push_back(d); };
      p.Feed(std::string_view(s).substr(0, cut1), on);
      p.Feed(std::string_view(s).substr(cut1, cut2 - cut1), on);
      p.Feed(std::string_view(s).substr(cut2), on);
      p.Finish(on);
      ASSERT_EQ(got, Whole()) << "cuts at " << cut1 << ", " << cut2;
    }
  }
}

TEST(BenchServeSse, ByteByByteAndAnUnterminatedLastEvent) {
  SseParser p;
  std::vector<std::string> got;
  auto on = [&](const std::string& d) { got.push_back(d); };
  const std::string s = std::string(kStream) + "data:no space, no blank line";
  for (char ch : s) p.Feed(std::string_view(&ch, 1), on);
  EXPECT_EQ(got.size(), 4u);
  p.Finish(on);
  std::vector<std::string> want = Whole();
  want.push_back("no space, no blank line");
  EXPECT_EQ(got, want);
}

// The sorted-array model: rank h = (n - 1) p / 100 between floor(h) and floor(h) + 1.
double ModelPercentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double h = (v.size() - 1) * p / 100;
  const size_t lo = static_cast<size_t>(h);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] * (1 - (h - lo)) + v[hi] * (h - lo);
}

TEST(BenchServePercentile, MatchesASortedArrayModel) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({10, 0, 5}, 0), 0);
  EXPECT_DOUBLE_EQ(Percentile({10, 0, 5}, 100), 10);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2, 5}, 90), 4.6);
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> v(1 + rng() % 300);
    for (double& x : v) x = static_cast<double>(rng() % 100000) / 7.0;
    for (double p : {0.0, 1.0, 50.0, 90.0, 99.0, 100.0, static_cast<double>(rng() % 101)}) {
      EXPECT_NEAR(Percentile(v, p), ModelPercentile(v, p), 1e-9) << v.size() << " p" << p;
    }
  }
}

TEST(BenchServeMetrics, ParsesKvBytesWithLabelsInAnyOrder) {
  const std::string text =
      "# HELP kvtier_kv_bytes Bytes of KV cache by tier\n"
      "# TYPE kvtier_kv_bytes gauge\n"
      "kvtier_kv_bytes{format=\"f16\",tier=\"active\"} 1048576\n"
      "kvtier_kv_bytes{tier=\"ram\",format=\"q8_0/q4_0\"} 2.5e+06\n"
      "kvtier_kv_bytes{format=\"odd \\\"name\\\"\",tier=\"ssd\"} 0\n"
      "kvtier_kv_bytes_other{tier=\"active\",format=\"f16\"} 9\n"
      "kvtier_requests_running 3\n"
      "kvtier_kv_bytes{tier=\"broken\n";
  const std::vector<BenchServeKvBytes> kv = ParseKvBytes(text);
  ASSERT_EQ(kv.size(), 3u);
  EXPECT_EQ(kv[0].tier, "active");
  EXPECT_EQ(kv[0].format, "f16");
  EXPECT_EQ(kv[0].bytes, 1048576);
  EXPECT_EQ(kv[1].tier, "ram");
  EXPECT_EQ(kv[1].format, "q8_0/q4_0");
  EXPECT_EQ(kv[1].bytes, 2.5e6);
  EXPECT_EQ(kv[2].format, "odd \"name\"");
  const auto running = ParsePrometheus(text, "kvtier_requests_running");
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].value, 3);
  EXPECT_TRUE(running[0].labels.empty());
}

TEST(BenchServeUrl, OriginAndBase) {
  auto u = ParseUrl("http://127.0.0.1:8080");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->origin, "http://127.0.0.1:8080");
  EXPECT_EQ(u->base, "");
  u = ParseUrl("http://h:1/v1/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->origin, "http://h:1");
  EXPECT_EQ(u->base, "");
  u = ParseUrl("http://h:1/proxy/v1");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->base, "/proxy");
  EXPECT_FALSE(ParseUrl("https://h:1").ok());
  EXPECT_FALSE(ParseUrl("localhost:8000").ok());
}

// An httplib server on a free port of 127.0.0.1, run on its own thread until destroyed.
class FakeServer {
 public:
  explicit FakeServer(const std::function<void(httplib::Server&)>& routes) {
    routes(srv_);
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    while (!srv_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    srv_.stop();
    thread_.join();
  }
  Endpoint ep() const {
    Endpoint e;
    e.origin = "http://127.0.0.1:" + std::to_string(port_);
    e.timeout_s = 10;
    return e;
  }

 private:
  httplib::Server srv_;
  int port_ = 0;
  std::thread thread_;
};

// A server with /tokenize (llama-server's shape) is asked there, and no completion is sent.
TEST(BenchServeCalibrate, UsesTokenizeWhenTheServerHasIt) {
  int completions = 0;
  size_t content_chars = 0;
  FakeServer fake([&](httplib::Server& s) {
    s.Post("/tokenize", [&](const httplib::Request& q, httplib::Response& r) {
      const json j = json::parse(q.body);
      content_chars = j["content"].get<std::string>().size();
      r.set_content(json{{"tokens", std::vector<int>(content_chars / 2, 7)}}.dump(),
                    "application/json");
    });
    s.Post("/v1/completions", [&](const httplib::Request&, httplib::Response& r) {
      ++completions;
      r.status = 500;
    });
  });
  const bench_serve::TextSource text(std::string(100000, 'a') + " b");
  const bench_serve::Calibration c = Calibrate(fake.ep(), text);
  EXPECT_TRUE(c.measured);
  EXPECT_EQ(c.method, "tokenize");
  EXPECT_NEAR(c.chars_per_token, 2.0, 0.01);
  EXPECT_GT(content_chars, 5000u);  // ~2,000 tokens at 3.8 chars: free with /tokenize
  EXPECT_EQ(completions, 0);
}

// Without /tokenize: one max_tokens 1 request of about kCalibrationChars characters, however
// many tokens they turn out to be (a byte-level vocabulary: one per byte), counted by usage.
TEST(BenchServeCalibrate, OneShortRequestWithoutTokenize) {
  std::vector<json> bodies;
  FakeServer fake([&](httplib::Server& s) {
    s.Post("/v1/completions", [&](const httplib::Request& q, httplib::Response& r) {
      bodies.push_back(json::parse(q.body));
      const size_t tokens = bodies.back()["prompt"].get<std::string>().size();  // 1 per byte
      const json usage{{"prompt_tokens", tokens}, {"completion_tokens", 1}};
      r.set_content("data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: " +
                        json{{"choices", json::array()}, {"usage", usage}}.dump() +
                        "\n\ndata: [DONE]\n\n",
                    "text/event-stream");
    });
  });
  const bench_serve::TextSource text(std::string(100000, 'a') + " b");
  const bench_serve::Calibration c = Calibrate(fake.ep(), text);
  ASSERT_EQ(bodies.size(), 1u);
  EXPECT_EQ(bodies[0]["max_tokens"], 1);
  EXPECT_LE(bodies[0]["prompt"].get<std::string>().size(), kCalibrationChars + 64);
  EXPECT_TRUE(c.measured);
  EXPECT_EQ(c.method, "request");
  EXPECT_DOUBLE_EQ(c.chars_per_token, 1.0);
}

TEST(BenchServeCalibrate, NothingAnswersAssumesTheDefault) {
  FakeServer fake([](httplib::Server&) {});
  const bench_serve::Calibration c = Calibrate(fake.ep(), bench_serve::TextSource("a b c"));
  EXPECT_FALSE(c.measured);
  EXPECT_EQ(c.method, "assumed");
  EXPECT_EQ(c.chars_per_token, bench_serve::kDefaultCharsPerToken);
}

TEST(BenchServeReport, TwoRoundJsonShape) {
  BenchServeRun run;
  run.workload = "two-round";
  run.kv_format = "f16";
  run.context_tokens = 1000;
  BenchServeRequest r1;
  r1.ok = true;
  r1.round = 1;
  r1.prompt_tokens = 1000;
  r1.completion_tokens = 10;
  r1.ttft_ms = 500;
  r1.total_ms = 600;
  r1.decode_tps = 90;
  BenchServeRequest r2 = r1;
  r2.round = 2;
  r2.prompt_tokens = 1100;
  r2.cached_tokens = 990;
  r2.ttft_ms = 50;
  r2.start_ms = 600;
  run.requests = {r1, r2};
  run.metrics_seen = true;
  run.kv_bytes = {{"active", "f16", 1 << 20}, {"ram", "f16", 2 << 20}};
  BenchServeReport rep;
  rep.runs = {run};
  const json j = json::parse(FormatBenchServeJson(rep));
  ASSERT_TRUE(j["rounds"].is_array());
  ASSERT_EQ(j["rounds"].size(), 2u);
  for (const char* key : {"prompt_tokens", "cached_tokens", "ttft_ms"}) {
    EXPECT_TRUE(j["rounds"][0].contains(key)) << key;
  }
  EXPECT_EQ(j["rounds"][0]["prompt_tokens"], 1000);
  EXPECT_EQ(j["rounds"][1]["prompt_tokens"], 1100);
  EXPECT_EQ(j["rounds"][1]["cached_tokens"], 990);
  EXPECT_DOUBLE_EQ(j["rounds"][1]["ttft_ms"].get<double>(), 50);
  EXPECT_DOUBLE_EQ(j["round2_ttft_speedup"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(j["hit_rate"].get<double>(), 0.9);
  EXPECT_EQ(j["errors"], 0);
  EXPECT_EQ(j["kv_bytes"]["ram"]["f16"], 2 << 20);
  EXPECT_EQ(j["kv_bytes_total"]["active"], 1 << 20);
  EXPECT_DOUBLE_EQ(j["decode_tokens_per_s"]["per_request_p50"].get<double>(), 90);
  // 20 completion tokens over 0..1200 ms.
  EXPECT_NEAR(j["decode_tokens_per_s"]["total"].get<double>(), 20 / 1.2, 1e-3);
  EXPECT_NE(FormatBenchServeTable(rep).find("round 2 TTFT speedup 10.00x, hit rate 90.0%"),
            std::string::npos)
      << FormatBenchServeTable(rep);

  // A failed round 2: the figures are null, the error is counted and shown.
  rep.runs[0].requests[1].ok = false;
  rep.runs[0].requests[1].error = "HTTP 500 from /v1/completions: boom";
  const json bad = json::parse(FormatBenchServeJson(rep));
  EXPECT_TRUE(bad["hit_rate"].is_null());
  EXPECT_EQ(bad["errors"], 1);
  EXPECT_EQ(bad["first_error"], "HTTP 500 from /v1/completions: boom");
}

TEST(BenchServeReport, PlotsWriteDataEvenWithoutGnuplot) {
  BenchServeReport rep;
  rep.sweep = true;
  for (const char* f : {"f16", "q8_0/q4_0"}) {
    for (uint32_t ctx : {1000u, 2000u}) {
      BenchServeRun run;
      run.workload = "two-round";
      run.kv_format = f;
      run.context_tokens = ctx;
      BenchServeRequest r;
      r.ok = true;
      r.ttft_ms = ctx;
      r.total_ms = ctx + 100;
      r.completion_tokens = 5;
      r.decode_tps = 50;
      run.requests = {r};
      r.round = 2;
      r.ttft_ms = 10;
      run.requests.push_back(r);
      rep.runs.push_back(run);
    }
  }
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("kvtier_bench_serve_plots_" + std::to_string(::getpid()));
  std::string note;
  ASSERT_TRUE(WriteBenchServePlots(rep, dir, &note).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/f16.dat"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/q8_0-q4_0.dat"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ttft.gp"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/decode.gp"));
  // Either gnuplot made the PNGs, or the note says it is missing.
  if (note.find("gnuplot not found") == std::string::npos) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/ttft.png")) << note;
    EXPECT_TRUE(std::filesystem::exists(dir + "/decode.png")) << note;
  }
  const json j = json::parse(FormatBenchServeJson(rep));
  EXPECT_EQ(j["runs"].size(), 4u);
  EXPECT_EQ(j["sweep"]["formats"].size(), 2u);
  std::filesystem::remove_all(dir);
}

TEST(BenchServeCli, BadFlagsExit2NamingTheFlag) {
  std::string out;
  EXPECT_EQ(testing::RunKvtierBench("serve --workload nope", &out), 2) << out;
  EXPECT_NE(out.find("--workload"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(testing::RunKvtierBench("serve --workload concurrency --sweep-contexts 100", &out), 2)
      << out;
  EXPECT_NE(out.find("--sweep-contexts"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(testing::RunKvtierBench("serve --url http://127.0.0.1:1 --kv-type q4_0", &out),
            2)
      << out;
  EXPECT_NE(out.find("--kv-type"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(testing::RunKvtierBench("serve --chars-per-token -1", &out), 2) << out;
  EXPECT_NE(out.find("--chars-per-token"), std::string::npos) << out;
  out.clear();
  // A bad server flag stops the child with exit 2; kvtier-bench serve says so, with the child's log.
  EXPECT_EQ(testing::RunKvtierBench("serve --max-tokens 2 -- --kv-cache-dtype q7_1", &out), 2)
      << out;
  EXPECT_NE(out.find("--kv-cache-dtype"), std::string::npos) << out;
}

// The real thing, on the bundled model: a two-round run hits the prefix cache.
TEST(BenchServeRun, TwoRoundHitsThePrefixCache) {
  std::string out;
  const int rc = testing::RunCommand(
      std::string(KVTIER_BENCH_BIN) +
          " serve --workload two-round --context-tokens 600 --turn-tokens 24 "
          "--max-tokens 16 --json 2>/dev/null",
      &out);
  ASSERT_EQ(rc, 0) << out;
  const json j = json::parse(out);
  ASSERT_EQ(j["rounds"].size(), 2u) << out;
  EXPECT_EQ(j["errors"], 0) << out;
  const int p1 = j["rounds"][0]["prompt_tokens"];
  EXPECT_GE(p1, 570) << "within 5% of 600: " << out;
  EXPECT_LE(p1, 630) << "within 5% of 600: " << out;
  EXPECT_EQ(j["rounds"][0]["cached_tokens"], 0) << out;
  EXPECT_GT(j["rounds"][1]["cached_tokens"].get<int>(), 0) << out;
  EXPECT_GE(j["hit_rate"].get<double>(), 0.9) << out;
  EXPECT_GT(j["round2_ttft_speedup"].get<double>(), 1.0) << out;
  EXPECT_GT(j["peak_rss_bytes"].get<double>(), 0) << out;
  EXPECT_GT(j["kv_bytes_total"]["active"].get<double>(), 0) << out;
  EXPECT_EQ(j["kv_format"], kServeDefaultKvType);  // no --kv-type: serve's default, named
}

TEST(BenchServeRun, ConcurrencyHasNoErrors) {
  std::string out;
  const int rc = testing::RunCommand(
      std::string(KVTIER_BENCH_BIN) +
          " serve --workload concurrency --clients 4 --requests-per-client 2 "
          "--prompt-tokens 200 --max-tokens 8 --json -- --kv-cache-dtype q8_0 2>/dev/null",
      &out);
  ASSERT_EQ(rc, 0) << out;
  const json j = json::parse(out);
  EXPECT_EQ(j["requests"], 8) << out;
  EXPECT_EQ(j["errors"], 0) << out;
  EXPECT_EQ(j["kv_format"], "q8_0") << out;
  EXPECT_GT(j["ttft_ms"]["p99"].get<double>(), 0) << out;
  EXPECT_GE(j["ttft_ms"]["p99"].get<double>(), j["ttft_ms"]["p50"].get<double>()) << out;
  EXPECT_GT(j["decode_tokens_per_s"]["total"].get<double>(), 0) << out;
  EXPECT_GT(j["completion_tokens"].get<int>(), 0) << out;
}

}  // namespace
}  // namespace kvtier::cli
