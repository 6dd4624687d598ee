// `kvtier cache stats|verify|clear|formats` on a real directory the SSD tier wrote.
#include "cli/cache_cmd.h"

#include <stdlib.h>

#include <nlohmann/json.hpp>

#include "cli/cli_test_util.h"
#include "gtest/gtest.h"
#include "kvtier/env.h"
#include "kvtier/ssd_tier.h"
#include "prefix/prefix_test_util.h"

namespace kvtier::cli {
namespace {

using kvtier::cli::testing::RunKvtier;

// Segments (the default layout) or version-1 block files.
class CacheCommandTest : public ::testing::TestWithParam<SsdLayout> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvtier_cache_cmd_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // Spill three entries through the prefix cache into the directory.
    SsdTierOptions o;
    o.dir = dir_;
    o.layout = GetParam();
    auto tier = SsdTier::Open(o).value();
    auto pool = kvtier::testing::MakePool(KvShape{2, 2, 64}, Format::Q8_0(), Format::BF16(), 4,
                                          16 << 20);
    PrefixCacheOptions po;
    po.memory_budget_bytes = 32 * pool->layout().block_stride;
    po.lower_tier = tier;
    auto cache = PrefixCache::Create(po).value();
    for (int32_t i = 0; i < 3; ++i) {
      const std::vector<int32_t> t = kvtier::testing::Range(100 * i, 8);
      ASSERT_TRUE(cache->Store(kvtier::testing::kModelA, t, kvtier::testing::SeqOf(pool, t)).ok());
    }
    cache->Evict(UINT64_MAX);
    tier->Flush();
    ASSERT_EQ(tier->Stats().blocks, 6u);
  }
  void TearDown() override { (void)std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
};

// The files of the tier's layout under dir_.
std::vector<std::string> TierFiles(const std::string& dir, SsdLayout layout) {
  Env* env = Env::Default();
  std::vector<std::string> out;
  if (layout == SsdLayout::kSegments) {
    for (const DirEntry& f : env->ListDir(dir + "/segments").value()) {
      out.push_back(dir + "/segments/" + f.name);
    }
    return out;
  }
  for (const DirEntry& d : env->ListDir(dir + "/blocks").value()) {
    for (const DirEntry& f : env->ListDir(dir + "/blocks/" + d.name).value()) {
      out.push_back(dir + "/blocks/" + d.name + "/" + f.name);
    }
  }
  return out;
}

TEST_P(CacheCommandTest, StatsVerifyClear) {
  std::string out;
  ASSERT_EQ(RunKvtier("cache stats --json --dir " + dir_, &out), 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["blocks"], 6);
  ASSERT_EQ(j["namespaces"].size(), 1u);
  EXPECT_EQ(j["namespaces"][0]["k_format"], "q8_0");
  EXPECT_EQ(j["namespaces"][0]["v_format"], "bf16");
  EXPECT_EQ(j["namespaces"][0]["blocks"], 6);
  out.clear();
  ASSERT_EQ(RunKvtier("cache verify --dir " + dir_, &out), 0) << out;
  EXPECT_NE(out.find("6 blocks verified, 0 failed"), std::string::npos) << out;

  const std::vector<std::string> files = TierFiles(dir_, GetParam());
  EXPECT_EQ(j["files"], files.size());

  // Damage the last block of one file: verify finds it, moves the file aside (a segment: with
  // every block it holds) and fails.
  Env* env = Env::Default();
  const std::string victim = files.at(0);
  std::vector<uint8_t> bytes = env->ReadFile(victim).value();
  // The blocks the victim holds: one, or a segment's record count (header bytes 24..27).
  const uint64_t in_victim = GetParam() == SsdLayout::kSegments ? bytes[24] : 1;
  const uint64_t left = 6 - in_victim;
  bytes[bytes.size() - 16] ^= 0x40;
  ASSERT_TRUE(env->WriteFileDurably(victim, bytes).ok());
  out.clear();
  EXPECT_EQ(RunKvtier("cache verify --dir " + dir_, &out), 1) << out;
  EXPECT_NE(out.find(std::to_string(left) + " blocks verified, 1 failed"), std::string::npos)
      << out;
  EXPECT_NE(out.find("payload CRC-32C"), std::string::npos) << out;
  EXPECT_FALSE(env->FileExists(victim));
  out.clear();
  ASSERT_EQ(RunKvtier("cache stats --json --dir " + dir_, &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["quarantined_files"], 1);
  EXPECT_EQ(nlohmann::json::parse(out)["blocks"], left);

  out.clear();
  ASSERT_EQ(RunKvtier("cache clear --dir " + dir_, &out), 0) << out;
  EXPECT_NE(out.find("removed " + std::to_string(left) + " blocks and 1 quarantined"),
            std::string::npos)
      << out;
  out.clear();
  ASSERT_EQ(RunKvtier("cache stats --json --dir " + dir_, &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["blocks"], 0);
}

TEST(CacheCommand, FormatsAndBadInput) {
  std::string out;
  ASSERT_EQ(RunKvtier("cache formats --json", &out), 0) << out;
  nlohmann::json rows = nlohmann::json::parse(out);
  EXPECT_EQ(rows.size(), AllSupportedFormats().size() + AllTokenGroupedFormats().size());
  for (const auto& r : rows) {
    EXPECT_EQ(r["round_trip_bit_exact"], true) << r.dump();
    EXPECT_EQ(r["segment_round_trip_bit_exact"], true) << r.dump();
  }
  out.clear();
  EXPECT_EQ(RunKvtier("cache stats --dir /nonexistent/kvtier", &out), 2) << out;
  EXPECT_NE(out.find("--dir: /nonexistent/kvtier does not exist"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(RunKvtier("cache stats", &out), 0) << out;
  EXPECT_NE(out.find("--dir"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, CacheCommandTest,
                         ::testing::Values(SsdLayout::kSegments, SsdLayout::kBlockFiles),
                         [](const ::testing::TestParamInfo<SsdLayout>& p) {
                           return p.param == SsdLayout::kSegments ? "Segments" : "BlockFiles";
                         });

}  // namespace
}  // namespace kvtier::cli
