// Two `kvtier serve` processes sharing one Redis (and a three-master Redis Cluster) through
// --remote-cache: a 4K-token prompt served on A is a hit on B with >= 95% cached and the same
// greedy output; and B serving 64 requests while Redis is killed and restarted, its values are
// overwritten with garbage and 250 ms of latency is added (a proxy): no request fails, every
// output equals the cold one, /metrics counts the misses. Label `redis`.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "cli/serve_test_util.h"
#include "remote/redis_test_util.h"

namespace {

using kvtier::cli::testing::Complete;
using kvtier::cli::testing::ServeProcess;
using nlohmann::json;

std::string LogPath(const char* what) {
  return "/tmp/kvtier_serve_remote_" + std::to_string(getpid()) + "_" + what + ".log";
}

// A value of /metrics (first series whose name and labels start with `series`), or -1.
double Metric(int port, const std::string& series) {
  httplib::Client c("127.0.0.1", port);
  httplib::Result r = c.Get("/metrics");
  if (!r || r->status != 200) return -1;
  const size_t at = r->body.find("\n" + series);
  if (at == std::string::npos) return -1;
  const size_t sp = r->body.find(' ', at + 1);
  return std::atof(r->body.c_str() + sp + 1);
}

std::string LongPrompt(int sentences) {
  std::string p;
  for (int i = 0; i < sentences; ++i) {
    p += "It is a truth universally acknowledged, that a single man in possession of a good "
         "fortune, must be in want of a wife. " + std::to_string(i) + ". ";
  }
  return p;
}

uint64_t Cached(const json& r) {
  return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<uint64_t>();
}

// A computes a 4K-token prompt cold; B (its own RAM, the same Redis) is served it from Redis.
// format_flags: the store format is the active one (by default 'active'), so a hit gives the
// cold greedy text exactly (with serve's default rot4s0 store it is a lossy copy of the rows).
void FourKPromptIsAHitOnTheOtherReplica(const std::string& url,
                                        const std::vector<std::string>& format_flags = {"--kv-store-type", "active"},
                                        uint64_t block_tokens = 32) {
  std::vector<std::string> flags = {"--remote-cache", url, "--max-model-len", "4608"};
  flags.insert(flags.end(), format_flags.begin(), format_flags.end());
  ServeProcess a(flags, LogPath("a")), b(flags, LogPath("b"));
  ASSERT_GT(a.port, 0);
  ASSERT_GT(b.port, 0);
  const std::string prompt = LongPrompt(140);
  const json cold = Complete(a.port, prompt, 12);
  ASSERT_TRUE(cold.contains("choices")) << cold.dump() << a.Log();
  const uint64_t n = cold["usage"]["prompt_tokens"].get<uint64_t>();
  ASSERT_GE(n, 4000u);
  EXPECT_EQ(Cached(cold), 0u);
  // A's write-through reaches Redis behind the request: wait for its writer.
  for (int i = 0; i < 100 && Metric(a.port, "kvtier_remote_queued_blocks") != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const json warm = Complete(b.port, prompt, 12);
  ASSERT_TRUE(warm.contains("choices")) << warm.dump();
  EXPECT_GE(Cached(warm) * 100, n * 95) << warm.dump();
  EXPECT_EQ(warm["choices"][0]["text"], cold["choices"][0]["text"]);
  EXPECT_GT(Metric(b.port, "kvtier_remote_hits_total"), 0.0);
  // kvtier cache stats|verify --remote see A's blocks, all good.
  std::string out;
  ASSERT_EQ(kvtier::cli::testing::RunKvtier("cache verify --json --remote " + url, &out), 0)
      << out;
  const json v = json::parse(out);
  EXPECT_GE(v["good"].get<uint64_t>(), n / block_tokens);
  EXPECT_EQ(v["bad"].get<uint64_t>(), 0u);
}

TEST(ServeRemote, FourKPromptOnAIsAHitOnBThroughOneRedis) {
  KVTIER_REQUIRE_REDIS();
  kvtier::testing::RedisProcess r;
  FourKPromptIsAHitOnTheOtherReplica(r.url());
}

// A K/V pair with token-grouped K (chan4g64/rot4s0), active == store, through Redis.
TEST(ServeRemote, ChanPairPromptOnAIsAHitOnBThroughOneRedis) {
  KVTIER_REQUIRE_REDIS();
  kvtier::testing::RedisProcess r;
  FourKPromptIsAHitOnTheOtherReplica(r.url(),
                                     {"--kv-type", "chan4g64/rot4s0", "--kv-store-type",
                                      "chan4g64/rot4s0", "--block-tokens", "64"},
                                     64);
}

TEST(ServeRemote, FourKPromptOnAIsAHitOnBThroughAThreeMasterCluster) {
  KVTIER_REQUIRE_REDIS();
  kvtier::testing::RedisCluster cl;
  FourKPromptIsAHitOnTheOtherReplica(cl.url());
  for (const auto& n : cl.nodes) {
    EXPECT_GT(n->Cmd({"DBSIZE"}).integer(), 0) << n->addr() << " holds none of the blocks";
  }
}

TEST(ServeRemote, SixtyFourRequestsThroughRedisFaultsNeverFail) {
  KVTIER_REQUIRE_REDIS();
  kvtier::testing::RedisProcess r;
  kvtier::testing::LatencyProxy proxy(r.port(), 0);
  std::vector<std::string> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back("Chapter " + std::to_string(i) + ". " + LongPrompt(9));
  // A computes every prompt cold (and writes them to Redis).
  std::vector<std::string> cold;
  {
    ServeProcess a({"--remote-cache", r.url(), "--kv-store-type", "active"}, LogPath("fa"));
    ASSERT_GT(a.port, 0);
    for (const std::string& p : prompts) {
      const json j = Complete(a.port, p, 8);
      ASSERT_TRUE(j.contains("choices")) << j.dump();
      cold.push_back(j["choices"][0]["text"].get<std::string>());
    }
    EXPECT_EQ(a.Stop(), 0);  // drains, flushes its remote writes
  }
  // B reaches Redis through the proxy, with RAM too small to keep an entry: every request
  // goes to Redis.
  ServeProcess b({"--remote-cache", proxy.url(), "--cache-memory-mb", "1", "--kv-store-type", "active"},
                 LogPath("fb"));
  ASSERT_GT(b.port, 0);
  int failed = 0, hits = 0;
  for (int i = 0; i < 64; ++i) {
    if (i == 16) r.Kill();
    if (i == 32) r.Start();  // empty: persistence is off
    if (i == 48) {
      for (const std::string& k : r.Keys("kvt:1:*")) {
        if (k.find(":ns:") == std::string::npos) r.Cmd({"SET", k, "garbage garbage garbage"});
      }
    }
    if (i == 56) proxy.set_delay_ms(250);  // past the 200 ms deadline
    const json j = Complete(b.port, prompts[i % 8], 8);
    if (!j.contains("choices")) {
      ++failed;
      ADD_FAILURE() << "request " << i << ": " << j.dump();
      continue;
    }
    EXPECT_EQ(j["choices"][0]["text"], cold[i % 8]) << "request " << i;
    const uint64_t n = j["usage"]["prompt_tokens"].get<uint64_t>();
    if (i < 16) {
      EXPECT_GE(Cached(j) * 100, n * 95) << "request " << i << " (Redis up)";
    }
    hits += Cached(j) * 100 >= n * 95;
  }
  EXPECT_EQ(failed, 0);
  EXPECT_GE(hits, 16);
  EXPECT_GT(Metric(b.port, "kvtier_remote_misses_total{reason=\"unavailable\"}"), 0.0);
  EXPECT_GT(Metric(b.port, "kvtier_remote_misses_total{reason=\"corrupt\"}"), 0.0);
  EXPECT_GT(Metric(b.port, "kvtier_remote_errors_total{kind=\"timeout\"}"), 0.0);
  httplib::Client c("127.0.0.1", b.port);
  httplib::Result h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

}  // namespace
