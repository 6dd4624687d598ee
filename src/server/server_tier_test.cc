// The server over an SSD tier on the real filesystem (issue 36): /v1/cache/stats and the
// kvtier_ssd_* metrics count only what is on disk when segment files or the whole directory
// are removed while it runs, and the requests that follow are answered correctly (the tier
// writes segments/ again).
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "kvtier/server.h"
#include "kvtier/ssd_tier.h"
#include "server/server_test_util.h"

namespace kvtier {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// A server with an engine, a RAM prefix cache of `budget` bytes and an SSD tier in `dir`.
struct TieredServer : testing::BundledServer {
  explicit TieredServer(const std::string& dir, uint64_t budget = 256ull << 20)
      : BundledServer(Options(dir, budget)) {}
  static testing::BundledServerOptions Options(const std::string& dir, uint64_t budget) {
    testing::BundledServerOptions o;
    o.ssd_dir = dir;
    o.prefix_cache_bytes = budget;
    o.server.metrics_ssd_reconcile_ms = 0;  // every scrape asks for a walk (on the writer thread)
    return o;
  }
  // The greedy completion of `prompt` (status 200 expected); *usage gets its usage.
  std::string Complete(const std::string& prompt, json* usage = nullptr) const {
    const json j = CompleteJson(prompt, 8);
    if (j.is_null()) return "";
    if (usage != nullptr) *usage = j["usage"];
    return j["choices"][0]["text"].get<std::string>();
  }
  // Everything in RAM written to the tier, durably.
  void Spill() const {
    cache->Evict(UINT64_MAX);
    tier->Flush();
  }
  json SsdStats() const { return GetJson("/v1/cache/stats")["ssd"]; }
  // The value of an unlabelled gauge in /metrics, or -1.
  double Metric(const std::string& name) const {
    httplib::Result r = Client().Get("/metrics");
    if (!r || r->status != 200) return -1;
    const size_t at = r->body.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::atof(r->body.c_str() + at + name.size() + 2);
  }
};

// Bytes and count of the segment files under `dir` (what `du` sees of the tier; no .tmp file
// is left once the tier is flushed).
uint64_t SegmentBytes(const std::string& dir, uint64_t* files = nullptr) {
  uint64_t n = 0, k = 0;
  const fs::path seg = fs::path(dir) / "segments";
  if (fs::exists(seg)) {
    for (const auto& e : fs::directory_iterator(seg)) {
      if (e.path().extension() != ".kvs") continue;
      n += fs::file_size(e.path());
      ++k;
    }
  }
  if (files != nullptr) *files = k;
  return n;
}

template <class F>
bool Eventually(F pred) {
  for (int i = 0; i < 400; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

const char* kPrompt = "It is a truth universally acknowledged, that a single man in possession "
                      "of a good fortune, must be in want of a wife. However little known the "
                      "feelings or views of such a man may be on his first entering a "
                      "neighbourhood, this truth is so well fixed in the minds of the "
                      "surrounding families";

TEST(ServerTier, CacheStatsAndMetricsCountOnlyWhatIsOnDiskAfterRemovals) {
  char tmpl[] = "/tmp/kvtier_server_tier_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    TieredServer s(dir);
    const std::string want = s.Complete(kPrompt);
    ASSERT_FALSE(want.empty());
    s.Spill();
    json ssd = s.SsdStats();
    ASSERT_GT(ssd["blocks"].get<uint64_t>(), 0u) << ssd.dump();
    EXPECT_EQ(ssd["bytes"].get<uint64_t>(), SegmentBytes(dir)) << ssd.dump();
    EXPECT_GT(s.Metric("kvtier_ssd_bytes"), 0.0);

    // Every segment file removed while the server runs: /metrics notices by itself (a walk
    // asked of the writer thread at the scrape), /v1/cache/stats at once.
    for (const auto& e : fs::directory_iterator(fs::path(dir) / "segments")) fs::remove(e.path());
    EXPECT_TRUE(Eventually([&] { return s.Metric("kvtier_ssd_bytes") == 0.0; }));
    ssd = s.SsdStats();
    EXPECT_EQ(ssd["blocks"].get<uint64_t>(), 0u) << ssd.dump();
    EXPECT_EQ(ssd["bytes"].get<uint64_t>(), 0u) << ssd.dump();

    // The same prompt again: recomputed (nothing of it left in RAM or on disk), same answer,
    // spilled again into new segments.
    EXPECT_EQ(s.Complete(kPrompt), want);
    s.Spill();
    ssd = s.SsdStats();
    EXPECT_GT(ssd["blocks"].get<uint64_t>(), 0u) << ssd.dump();
    EXPECT_EQ(ssd["bytes"].get<uint64_t>(), SegmentBytes(dir)) << ssd.dump();

    // The whole directory removed: stats say 0 at once, with no load or write to notice it.
    fs::remove_all(dir);
    ssd = s.SsdStats();
    EXPECT_EQ(ssd["blocks"].get<uint64_t>(), 0u) << ssd.dump();
    EXPECT_EQ(ssd["bytes"].get<uint64_t>(), 0u) << ssd.dump();
    EXPECT_GT(ssd["vanished_files"].get<uint64_t>(), 0u) << ssd.dump();
    // Requests keep being answered correctly, and the tier makes its directory again.
    EXPECT_EQ(s.Complete(kPrompt), want);
    s.Spill();
    uint64_t files = 0;
    const uint64_t on_disk = SegmentBytes(dir, &files);
    EXPECT_GT(files, 0u);
    ssd = s.SsdStats();
    EXPECT_GT(ssd["blocks"].get<uint64_t>(), 0u) << ssd.dump();
    EXPECT_EQ(ssd["bytes"].get<uint64_t>(), on_disk) << ssd.dump();
    EXPECT_TRUE(Eventually([&] {
      return s.Metric("kvtier_ssd_bytes") == static_cast<double>(on_disk);
    }));
    // And what it wrote is served from disk: RAM emptied, the prompt promoted back.
    s.cache->Clear();
    EXPECT_EQ(s.Complete(kPrompt), want);
    EXPECT_GT(s.SsdStats()["loaded_blocks"].get<uint64_t>(), 0u);
    httplib::Result h = s.Client().Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
  }
  fs::remove_all(dir);
}

// Issue 34's small-RAM case: a RAM budget (1 MiB, four blocks of the bundled model) smaller
// than one entry. The entry goes to the SSD tier instead of being dropped, and the same request
// again is served from disk with >= 95% of its prompt cached and the same greedy output.
TEST(ServerTier, AnEntryLargerThanRamIsServedFromSsd) {
  char tmpl[] = "/tmp/kvtier_server_small_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    TieredServer s(dir, 1ull << 20);
    std::string prompt;
    for (int i = 0; i < 8; ++i) prompt += std::string(kPrompt) + " " + std::to_string(i) + ". ";
    json first, second;
    const std::string want = s.Complete(prompt, &first);
    ASSERT_FALSE(want.empty());
    const uint64_t n = first["prompt_tokens"].get<uint64_t>();
    ASSERT_GT(n, 400u) << first.dump();
    s.tier->Flush();
    EXPECT_GT(s.tier->Stats().blocks, 4u) << "more blocks than RAM holds reached the disk";
    EXPECT_EQ(s.Complete(prompt, &second), want);
    const uint64_t cached = second["prompt_tokens_details"]["cached_tokens"].get<uint64_t>();
    EXPECT_GE(cached * 100, n * 95) << second.dump();
    const PrefixCacheStats cs = s.cache->Stats();
    EXPECT_GE(cs.lower_only_stores, 1u);
    EXPECT_GE(cs.direct_tier_fetches, 1u);
    EXPECT_LE(cs.bytes, cs.budget_bytes);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvtier
