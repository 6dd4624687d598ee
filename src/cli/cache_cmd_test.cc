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

class CacheCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvtier_cache_cmd_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // Spill three entries through the prefix cache into the directory.
    SsdTierOptions o;
    o.dir = dir_;
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

TEST_F(CacheCommandTest, StatsVerifyClear) {
  std::string out;
  ASSERT_EQ(RunKvtier("cache stats --json --dir " + dir_, &out), 0) << out;
  nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["blocks"], 6);
  ASSERT_EQ(j["namespaces"].size(), 1u);
  EXPECT_EQ(j["namespaces"][0]["k_format"], "q8_0");
  EXPECT_EQ(j["namespaces"][0]["v_format"], "bf16");
  EXPECT_EQ(j["namespaces"][0]["blocks"], 6);
  out.clear();
  ASSERT_EQ(RunKvtier("cache verify --dir " + dir_, &out), 0) << out;
  EXPECT_NE(out.find("6 blocks verified, 0 failed"), std::string::npos) << out;

  // Damage one block file's payload: verify finds it, moves it aside and fails.
  Env* env = Env::Default();
  std::string victim;
  for (const DirEntry& d : env->ListDir(dir_ + "/blocks").value()) {
    for (const DirEntry& f : env->ListDir(dir_ + "/blocks/" + d.name).value()) {
      if (victim.empty()) victim = dir_ + "/blocks/" + d.name + "/" + f.name;
    }
  }
  std::vector<uint8_t> bytes = env->ReadFile(victim).value();
  bytes[bytes.size() - 9] ^= 0x40;
  ASSERT_TRUE(env->WriteFileDurably(victim, bytes).ok());
  out.clear();
  EXPECT_EQ(RunKvtier("cache verify --dir " + dir_, &out), 1) << out;
  EXPECT_NE(out.find("5 blocks verified, 1 failed"), std::string::npos) << out;
  EXPECT_NE(out.find("payload CRC-32C"), std::string::npos) << out;
  EXPECT_FALSE(env->FileExists(victim));
  out.clear();
  ASSERT_EQ(RunKvtier("cache stats --json --dir " + dir_, &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["quarantined_files"], 1);

  out.clear();
  ASSERT_EQ(RunKvtier("cache clear --dir " + dir_, &out), 0) << out;
  EXPECT_NE(out.find("removed 5 blocks and 1 quarantined"), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(RunKvtier("cache stats --json --dir " + dir_, &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["blocks"], 0);
}

TEST_F(CacheCommandTest, FormatsAndBadInput) {
  std::string out;
  ASSERT_EQ(RunKvtier("cache formats --json", &out), 0) << out;
  nlohmann::json rows = nlohmann::json::parse(out);
  EXPECT_EQ(rows.size(), AllSupportedFormats().size());
  for (const auto& r : rows) EXPECT_EQ(r["round_trip_bit_exact"], true) << r.dump();
  out.clear();
  EXPECT_EQ(RunKvtier("cache stats --dir /nonexistent/kvtier", &out), 2) << out;
  EXPECT_NE(out.find("--dir: /nonexistent/kvtier does not exist"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(RunKvtier("cache stats", &out), 0) << out;
  EXPECT_NE(out.find("--dir"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvtier::cli
