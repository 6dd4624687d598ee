// Metrics registry: exact text exposition for a small registry (escaping, label sets sharing a
// family, histogram buckets at and between bounds), number formatting, exact totals under
// 8 concurrent writers, every registration error, and collectors running before a render.
#include "server/metrics.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>

#include "gtest/gtest.h"

namespace kvtier::server {
namespace {

TEST(Metrics, RendersExactTextForASmallRegistry) {
  MetricsRegistry r;
  // Help holds a newline and a backslash; the ssd label value a quote, a newline, a backslash.
  const std::string tier_help = "Bytes held per tier.\nIncludes C:\\ paths";
  auto gpu = r.AddGauge("kvtier_tier_bytes", tier_help, {{"tier", "gpu"}});
  auto requests = r.AddCounter("kvtier_requests_total", "Requests served.");
  auto ssd = r.AddGauge("kvtier_tier_bytes", tier_help, {{"tier", "ssd \"fast\"\n\\x"}});
  auto prefill = r.AddHistogram("kvtier_latency_seconds", "Request latency.", {0.25, 0.5, 1},
                                {{"op", "prefill"}, {"model", "m"}});
  auto decode = r.AddHistogram("kvtier_latency_seconds", "Request latency.", {0.25, 0.5, 1},
                               {{"op", "decode"}, {"model", "m"}});
  auto up = r.AddGauge("kvtier_up", "");
  ASSERT_TRUE(gpu.ok() && requests.ok() && ssd.ok() && prefill.ok() && decode.ok() && up.ok());

  (*gpu)->Set(1024);
  (*ssd)->Set(0.1);
  (*requests)->Add();
  (*requests)->Add(2);
  // 0.125 -> le 0.25; 0.25 exactly on a bound -> le 0.25; 0.375 -> le 0.5; 1 on a bound ->
  // le 1; 3 -> +Inf. Cumulative 2, 3, 4, 5; sum 4.75 (all dyadic, so exact).
  for (double v : {0.25, 0.125, 0.375, 1.0, 3.0}) (*prefill)->Observe(v);

  const std::string expected = R"txt(# HELP kvtier_tier_bytes Bytes held per tier.\nIncludes C:\\ paths
# TYPE kvtier_tier_bytes gauge
kvtier_tier_bytes{tier="gpu"} 1024
kvtier_tier_bytes{tier="ssd \"fast\"\n\\x"} 0.1
# HELP kvtier_requests_total Requests served.
# TYPE kvtier_requests_total counter
kvtier_requests_total 3
# HELP kvtier_latency_seconds Request latency.
# TYPE kvtier_latency_seconds histogram
kvtier_latency_seconds_bucket{op="prefill",model="m",le="0.25"} 2
kvtier_latency_seconds_bucket{op="prefill",model="m",le="0.5"} 3
kvtier_latency_seconds_bucket{op="prefill",model="m",le="1"} 4
kvtier_latency_seconds_bucket{op="prefill",model="m",le="+Inf"} 5
kvtier_latency_seconds_sum{op="prefill",model="m"} 4.75
kvtier_latency_seconds_count{op="prefill",model="m"} 5
kvtier_latency_seconds_bucket{op="decode",model="m",le="0.25"} 0
kvtier_latency_seconds_bucket{op="decode",model="m",le="0.5"} 0
kvtier_latency_seconds_bucket{op="decode",model="m",le="1"} 0
kvtier_latency_seconds_bucket{op="decode",model="m",le="+Inf"} 0
kvtier_latency_seconds_sum{op="decode",model="m"} 0
kvtier_latency_seconds_count{op="decode",model="m"} 0
# TYPE kvtier_up gauge
kvtier_up 0
)txt";
  EXPECT_EQ(r.Render(), expected);

  EXPECT_EQ((*prefill)->CumulativeCounts(), (std::vector<uint64_t>{2, 3, 4, 5}));
  EXPECT_EQ((*prefill)->Count(), 5u);
  EXPECT_EQ((*prefill)->Sum(), 4.75);
}

TEST(Metrics, UnlabelledHistogramAndSpecialValues) {
  MetricsRegistry r;
  auto h = r.AddHistogram("h", "x", ExponentialBuckets(1, 2, 3));  // bounds 1, 2, 4
  auto g = r.AddGauge("g", "x", {{"k", "inf"}});
  auto g2 = r.AddGauge("g", "x", {{"k", "nan"}});
  ASSERT_TRUE(h.ok() && g.ok() && g2.ok());
  for (double v : {2.0, 0.5, 5.0}) (*h)->Observe(v);  // le 2, le 1, +Inf
  (*g)->Set(-std::numeric_limits<double>::infinity());
  (*g2)->Set(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(r.Render(),
            "# HELP h x\n# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 1\nh_bucket{le=\"2\"} 2\nh_bucket{le=\"4\"} 2\n"
            "h_bucket{le=\"+Inf\"} 3\nh_sum 7.5\nh_count 3\n"
            "# HELP g x\n# TYPE g gauge\ng{k=\"inf\"} -Inf\ng{k=\"nan\"} NaN\n");

  // NaN and +Inf observations land in the +Inf bucket; the sum becomes NaN.
  (*h)->Observe(std::numeric_limits<double>::infinity());
  (*h)->Observe(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ((*h)->CumulativeCounts(), (std::vector<uint64_t>{1, 2, 2, 5}));
  EXPECT_TRUE(std::isnan((*h)->Sum()));
  EXPECT_EQ(MetricsRegistry().Render(), "");
}

TEST(Metrics, FormatsNumbersAsPrometheusDoes) {
  EXPECT_EQ(FormatMetricValue(3), "3");
  EXPECT_EQ(FormatMetricValue(-2), "-2");
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-0.0), "0");
  EXPECT_EQ(FormatMetricValue(1e15), "1000000000000000");  // integral: no exponent
  EXPECT_EQ(FormatMetricValue(9007199254740993.0), "9007199254740992");  // 2^53+1 rounds
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(2.5), "2.5");
  EXPECT_EQ(FormatMetricValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatMetricValue(1e21), "1e+21");  // beyond int64
  EXPECT_EQ(FormatMetricValue(1e-5), "1e-05");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
  for (double v : {1.0 / 3, -2.0 / 7, 6.02214076e23, 4.9e-324, 1.7976931348623157e308,
                   123456.789, 0.001}) {
    EXPECT_EQ(std::strtod(FormatMetricValue(v).c_str(), nullptr), v) << FormatMetricValue(v);
  }
}

TEST(Metrics, CounterAndGaugeArithmetic) {
  Counter c;
  c.Add();
  c.Add(2.5);
  c.Add(-1);  // ignored: counters never go down
  c.Add(std::numeric_limits<double>::quiet_NaN());  // ignored
  EXPECT_EQ(c.Value(), 3.5);
  Gauge g;
  g.Set(10);
  g.Add(-4);
  g.Add(0.5);
  EXPECT_EQ(g.Value(), 6.5);
}

TEST(Metrics, BucketHelpers) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(ExponentialBuckets(0.5, 4, 3), (std::vector<double>{0.5, 2, 8}));
  EXPECT_TRUE(ExponentialBuckets(0, 2, 3).empty());
  EXPECT_TRUE(ExponentialBuckets(1, 1, 3).empty());
  EXPECT_TRUE(ExponentialBuckets(1, 2, 0).empty());
  const std::vector<double> lat = DefaultLatencyBuckets();
  ASSERT_EQ(lat.size(), 15u);
  EXPECT_EQ(lat.front(), 0.001);
  EXPECT_EQ(lat.back(), 60);
  MetricsRegistry r;
  EXPECT_TRUE(r.AddHistogram("lat", "", lat).ok());  // strictly increasing, finite
}

TEST(Metrics, ConcurrentWritersGetExactTotals) {
  constexpr int kThreads = 8;
  constexpr int kIters = 100000;
  MetricsRegistry r;
  auto c = r.AddCounter("ops_total", "");
  auto g = r.AddGauge("inflight", "");
  auto h = r.AddHistogram("size", "", {1});
  ASSERT_TRUE(c.ok() && g.ok() && h.ok());
  Counter* counter = *c;
  std::vector<std::thread> threads;
  std::atomic<bool> done{false};
  std::thread scraper([&] {  // renders while everything else is being written
    while (!done.load()) EXPECT_FALSE(r.Render().empty());
  });
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto mine = r.AddGauge("worker_up", "", {{"worker", std::to_string(t)}});
      ASSERT_TRUE(mine.ok());
      (*mine)->Set(t);
      for (int i = 0; i < kIters; ++i) {
        (*c)->Add();
        (*g)->Add(1);
        (*h)->Observe(i % 2 ? 0.5 : 2);  // alternately le 1 and +Inf
        (*g)->Add(-1);
      }
    });
  }
  for (auto& th : threads) th.join();
  done = true;
  scraper.join();

  EXPECT_EQ(*c, counter);  // the pointer handed out first is still the live series
  EXPECT_EQ(counter->Value(), double{kThreads} * kIters);
  EXPECT_EQ((*g)->Value(), 0);
  const uint64_t n = uint64_t{kThreads} * kIters;
  EXPECT_EQ((*h)->CumulativeCounts(), (std::vector<uint64_t>{n / 2, n}));
  EXPECT_EQ((*h)->Sum(), n / 2 * 0.5 + n / 2 * 2.0);  // multiples of 0.5: every add is exact
  const std::string text = r.Render();
  EXPECT_NE(text.find("ops_total 800000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("size_count 800000\n"), std::string::npos) << text;
  for (int t = 0; t < kThreads; ++t) {
    const std::string line = "worker_up{worker=\"" + std::to_string(t) + "\"} " +
                             std::to_string(t) + "\n";
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
}

// Every error is InvalidArgument and leaves the registry as it was.
void ExpectInvalid(const Status& s, const char* what) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what << ": " << s.ToString();
}

TEST(Metrics, RejectsBadNamesClashesAndBounds) {
  MetricsRegistry r;
  ASSERT_TRUE(r.AddCounter("a:b_c1", "h", {{"_x", "1"}, {"Y9", ""}}).ok());
  ASSERT_TRUE(r.AddCounter(":x", "").ok());
  ASSERT_TRUE(r.AddCounter("_x", "").ok());
  const std::string before = r.Render();

  for (const char* bad : {"", "1abc", "a-b", "a b", "é"}) {
    ExpectInvalid(r.AddCounter(bad, "").status(), bad);
  }
  for (const char* bad : {"", "1x", "a:b", "a-b", "__name__"}) {
    ExpectInvalid(r.AddGauge("g", "", {{bad, "v"}}).status(), bad);
  }
  ExpectInvalid(r.AddGauge("g", "", {{"k", "1"}, {"k", "2"}}).status(), "label given twice");
  ExpectInvalid(r.AddHistogram("hl", "", {1}, {{"le", "1"}}).status(), "le on a histogram");

  // Same name and labels twice, whatever the label order.
  ExpectInvalid(r.AddCounter("a:b_c1", "h", {{"Y9", ""}, {"_x", "1"}}).status(), "dup series");
  ExpectInvalid(r.AddCounter(":x", "").status(), "dup unlabelled series");
  // Same name, another type or help.
  ExpectInvalid(r.AddGauge("a:b_c1", "h", {{"_x", "2"}}).status(), "counter vs gauge");
  ExpectInvalid(r.AddHistogram("_x", "", {1}).status(), "counter vs histogram");
  ExpectInvalid(r.AddCounter("a:b_c1", "other help", {{"_x", "2"}}).status(), "help clash");

  // Bounds: strictly increasing and finite.
  const double inf = std::numeric_limits<double>::infinity();
  ExpectInvalid(r.AddHistogram("h1", "", {1, 1}).status(), "equal bounds");
  ExpectInvalid(r.AddHistogram("h1", "", {2, 1}).status(), "decreasing bounds");
  ExpectInvalid(r.AddHistogram("h1", "", {std::nan("")}).status(), "NaN bound");
  ExpectInvalid(r.AddHistogram("h1", "", {1, inf}).status(), "+Inf bound");
  ExpectInvalid(r.AddHistogram("h1", "", {-inf, 1}).status(), "-Inf bound");

  EXPECT_EQ(r.Render(), before);  // nothing above registered anything

  // A histogram's sample names are taken, in both registration orders.
  ASSERT_TRUE(r.AddHistogram("lat", "", {}).ok());  // empty bounds: only +Inf
  ExpectInvalid(r.AddCounter("lat_count", "").status(), "lat_count");
  ExpectInvalid(r.AddGauge("lat_bucket", "").status(), "lat_bucket");
  ASSERT_TRUE(r.AddCounter("x_sum", "").ok());
  ExpectInvalid(r.AddHistogram("x", "", {1}).status(), "x vs x_sum");

  // The same name with different labels is fine.
  EXPECT_TRUE(r.AddCounter("a:b_c1", "h", {{"_x", "2"}, {"Y9", ""}}).ok());
}

TEST(Metrics, CollectorsRunBeforeEveryRender) {
  MetricsRegistry r;
  auto g = r.AddGauge("queue_depth", "");
  ASSERT_TRUE(g.ok());
  Gauge* depth = *g;
  double source = 7;  // stands in for another subsystem's stats
  std::vector<int> order;
  r.AddCollector([&] {
    order.push_back(1);
    depth->Set(source);
  });
  r.AddCollector([&] {
    order.push_back(2);
    // A collector may register metrics; the new series shows in this very render.
    if (order.size() == 2) {
      EXPECT_TRUE(r.AddCounter("late_total", "").ok());
    }
  });
  EXPECT_EQ(r.Render(),
            "# TYPE queue_depth gauge\nqueue_depth 7\n# TYPE late_total counter\nlate_total 0\n");
  source = 3;
  EXPECT_EQ(depth->Value(), 7);  // nothing runs between renders
  EXPECT_EQ(r.Render(),
            "# TYPE queue_depth gauge\nqueue_depth 3\n# TYPE late_total counter\nlate_total 0\n");
  EXPECT_EQ(order, (std::vector<int>{1, 2, 1, 2}));
}

}  // namespace
}  // namespace kvtier::server
