// `kvtier-bench ssd` through the real binary with tiny sizes: the JSON report's keys, positive
// throughputs and ratios, SSD hits that reuse the prompt on a tiny random model (written by
// `kvtier make-test-model`), the scratch directory removed afterwards, and clear errors for bad
// flags (exit 2, the flag named with what was expected and what was given). Owned by the cli
// module; each test runs on its own.
#include "cli/bench_ssd.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_test_util.h"

namespace kvtier::cli {
namespace {

using testing::ParseJson;
using testing::RunKvtierBench;
using testing::WriteSmallQwen3;

class BenchSsdBinary : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/kvtier_bench_ssd_" + std::to_string(getpid()));
    std::filesystem::create_directories(*dir_ + "/work");
    std::string out;
    ASSERT_EQ(WriteSmallQwen3(Model(), &out), 0) << out;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string Model() { return *dir_ + "/m.gguf"; }
  static std::string Work() { return *dir_ + "/work"; }
  static std::string* dir_;
};
std::string* BenchSsdBinary::dir_ = nullptr;

TEST_F(BenchSsdBinary, ThroughputReportsPositiveRatiosWarmAndCold) {
  std::string out;
  ASSERT_EQ(RunKvtierBench("ssd --modes throughput --layers 2 --kv-heads 2 --head-dim 64"
                      " --block-tokens 16 --kv-type q8_0/q4_0 --gb 0.003 --repeats 2"
                      " --writer-threads 2 --ssd-sync per-file --dir " + Work() + " --json",
                      &out),
            0)
      << out;
  const nlohmann::json j = ParseJson(out);
  ASSERT_TRUE(j.contains("throughput")) << out;
  EXPECT_FALSE(j.contains("ttft"));
  const nlohmann::json& t = j["throughput"];
  for (const char* key : {"kv_type", "shape", "block_tokens", "block_stride",
                          "file_bytes_per_block", "blocks", "entries", "total_bytes",
                          "writer_threads", "repeats", "fill_ms", "spill_ms", "spill_gbps",
                          "write_ms", "write_gbps", "spill_ratio", "producer_waits", "skipped",
                          "reads"}) {
    EXPECT_TRUE(t.contains(key)) << key;
  }
  EXPECT_EQ(t["kv_type"], "q8_0/q4_0");
  EXPECT_EQ(t["writer_threads"], 2);
  EXPECT_EQ(t["ssd_sync"], "per-file");
  EXPECT_GE(t["total_bytes"].get<uint64_t>(), 3000000u);
  EXPECT_EQ(t["skipped"], 0);
  EXPECT_GT(t["spill_gbps"].get<double>(), 0.0);
  EXPECT_GT(t["write_gbps"].get<double>(), 0.0);
  EXPECT_GT(t["spill_ratio"].get<double>(), 0.0);
  ASSERT_EQ(t["reads"].size(), 2u);
  EXPECT_EQ(t["reads"][0]["page_cache"], "warm");
  EXPECT_EQ(t["reads"][1]["page_cache"], "cold");
  for (const nlohmann::json& rd : t["reads"]) {
    for (const char* key : {"reload_ms", "reload_gbps", "open_ms", "read_ms", "read_gbps", "ratio",
                            "load_us_per_block", "load_gbps", "resident_pct"}) {
      EXPECT_TRUE(rd.contains(key)) << key;
    }
    EXPECT_GT(rd["ratio"].get<double>(), 0.0);
    EXPECT_GT(rd["load_gbps"].get<double>(), 0.0);
  }
  // The run's directory is gone; --dir itself stays.
  EXPECT_TRUE(std::filesystem::is_empty(Work()));
}

TEST_F(BenchSsdBinary, TtftServesThePromptFromSsd) {
  std::string out;
  ASSERT_EQ(RunKvtierBench("ssd --modes ttft --model " + Model() +
                          " --prompt-tokens 200 --new-tokens 8 --text random --repeats 1"
                          " --ubatch 64 --threads 2 --no-cold --dir " + Work() + " --json",
                      &out),
            0)
      << out;
  const nlohmann::json j = ParseJson(out);
  ASSERT_TRUE(j.contains("ttft")) << out;
  const nlohmann::json& t = j["ttft"];
  for (const char* key : {"model", "arch", "kv_type", "prompt_source", "prompt_tokens", "cold_ms",
                          "kv_bytes", "spill_ms", "spilled_blocks", "spilled_bytes", "rows"}) {
    EXPECT_TRUE(t.contains(key)) << key;
  }
  EXPECT_GT(t["cold_ms"].get<double>(), 0.0);
  EXPECT_EQ(t["spilled_blocks"], 7);  // 200 tokens: 6 full blocks of 32 and a tail
  ASSERT_EQ(t["rows"].size(), 4u);   // {warm process, after restart} x {exact, prefix}
  for (const nlohmann::json& w : t["rows"]) {
    const bool exact = w["hit"] == "exact";
    EXPECT_EQ(w["kind"], exact ? "exact" : "prefix");
    EXPECT_EQ(w["reused_tokens"], exact ? 199 : 200);
    EXPECT_EQ(w["bytes_read"], t["spilled_bytes"]);
    EXPECT_GT(w["speedup"].get<double>(), 0.0);
    if (w["scenario"] == "after restart") {
      EXPECT_GT(w["open_ms"].get<double>(), 0.0);
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(Work()));
}

TEST_F(BenchSsdBinary, BadFlagsNameTheFlag) {
  struct Case {
    const char* args;
    const char* want;
  };
  for (const Case& c : {Case{"--gb 0", "--gb: expected a size in (0, 1000] GB, got 0"},
                        Case{"--layers 0", "--layers: expected 1..1024, got 0"},
                        Case{"--modes throughput,fast", "--modes: expected 'throughput', 'ttft' or both, got 'fast'"},
                        Case{"--kv-type q9", "--kv-type"},
                        Case{"--ssd-sync fsync", "--ssd-sync: expected per-file or syncfs, got 'fsync'"},
                        Case{"--dir /nonexistent/kvtier", "--dir: expected an existing directory"}}) {
    std::string out;
    EXPECT_EQ(RunKvtierBench(std::string("ssd ") + c.args, &out), 2) << c.args;
    EXPECT_NE(out.find(c.want), std::string::npos) << c.args << ": " << out;
  }
}

}  // namespace
}  // namespace kvtier::cli
