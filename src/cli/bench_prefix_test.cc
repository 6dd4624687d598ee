// `kvtier-bench prefix` and `kvtier-bench prefix-agreement` through the real binary on a tiny random
// model (written by `kvtier make-test-model`): the JSON report's keys, exact hits that leave one
// token to compute, prefix hits that reuse the whole prompt, quantize-on-store only from 256
// tokens on, an active-format cache that generates the cold tokens, and clear errors for bad
// flags (exit 2, the flag named). Owned by the cli module; each test runs on its own.
#include "cli/bench_prefix.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_test_util.h"

namespace kvtier::cli {
namespace {

using testing::ParseJson;
using testing::RunKvtierBench;
using testing::WriteSmallQwen3;

class BenchPrefixBinary : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/kvtier_bench_prefix_" +
                           std::to_string(getpid()));
    std::filesystem::create_directories(*dir_);
    std::string out;
    ASSERT_EQ(WriteSmallQwen3(Model(), &out), 0) << out;
    std::ofstream text(*dir_ + "/t.txt");
    text << "It is a truth universally acknowledged, that a single man in possession of a good "
            "fortune, must be in want of a wife.\n";
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string Model() { return *dir_ + "/m.gguf"; }
  static std::string* dir_;
};
std::string* BenchPrefixBinary::dir_ = nullptr;

TEST_F(BenchPrefixBinary, ReportsColdAndWarmTtftPerStoreType) {
  std::string out;
  ASSERT_EQ(RunKvtierBench("prefix --model " + Model() + " --text " + *dir_ +
                          "/t.txt --prompt-tokens 300,70 --store-types active,q8_0 --repeats 2"
                          " --ubatch 64 --threads 2 --json",
                      &out),
            0)
      << out;
  const nlohmann::json j = ParseJson(out);
  for (const char* key : {"model", "arch", "kv_type", "prompt_source", "threads", "ubatch",
                          "repeats", "cold_repeats", "peak_rss_bytes", "active_bytes_per_token",
                          "cases"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["kv_type"], "f16");
  EXPECT_NE(j["prompt_source"].get<std::string>().find("repeated"), std::string::npos);
  ASSERT_EQ(j["cases"].size(), 2u);
  for (const nlohmann::json& c : j["cases"]) {
    const uint32_t n = c["prompt_tokens"];
    EXPECT_GT(c["cold_ms"].get<double>(), 0.0);
    ASSERT_EQ(c["warm"].size(), 4u);  // {active, q8_0} x {exact, prefix}
    for (const nlohmann::json& w : c["warm"]) {
      for (const char* key : {"store_type", "entry_format", "quantized", "hit", "kind",
                              "request_tokens", "reused_tokens", "converted", "warm_ms",
                              "fetch_ms", "compute_ms", "speedup", "store_ms", "bytes_per_token",
                              "analytic_bytes_per_token", "cache_bytes"}) {
        EXPECT_TRUE(w.contains(key)) << key;
      }
      const bool exact = w["hit"] == "exact";
      EXPECT_EQ(w["kind"], exact ? "exact" : "prefix");
      EXPECT_EQ(w["reused_tokens"].get<uint32_t>(), exact ? n - 1 : n) << w.dump();
      EXPECT_EQ(w["request_tokens"].get<uint32_t>(), exact ? n : n + 32);
      // Quantized on store only from 256 tokens on; then converted on fetch.
      const bool quantized = w["store_type"] == "q8_0" && n >= 256;
      EXPECT_EQ(w["quantized"].get<bool>(), quantized) << w.dump();
      EXPECT_EQ(w["converted"].get<bool>(), quantized) << w.dump();
      EXPECT_EQ(w["entry_format"], quantized ? "q8_0" : "f16");
      EXPECT_GE(w["bytes_per_token"].get<double>(),
                w["analytic_bytes_per_token"].get<double>());
      EXPECT_GT(w["warm_ms"].get<double>(), 0.0);
    }
  }

  // The table form names the prompt source and the store types.
  out.clear();
  ASSERT_EQ(RunKvtierBench("prefix --model " + Model() +
                          " --text random --prompt-tokens 40 --store-types q4_0 --repeats 1",
                      &out),
            0)
      << out;
  EXPECT_NE(out.find("seeded random token ids"), std::string::npos) << out;
  EXPECT_NE(out.find("q4_0"), std::string::npos) << out;
  EXPECT_NE(out.find("peak RSS"), std::string::npos) << out;
}

TEST_F(BenchPrefixBinary, AgreementOfTheActiveFormatIsExact) {
  std::string out;
  ASSERT_EQ(RunKvtierBench("prefix-agreement --model " + Model() + " --text " + *dir_ +
                          "/t.txt --prompts 3 --min-tokens 256 --max-tokens 270 --generate 5"
                          " --store-types active,q4_0 --threads 2 --json",
                      &out),
            0)
      << out;
  const nlohmann::json j = ParseJson(out);
  EXPECT_EQ(j["prompts"], 3);
  ASSERT_EQ(j["rows"].size(), 2u);
  const nlohmann::json& active = j["rows"][0];
  EXPECT_EQ(active["store_type"], "active");
  EXPECT_EQ(active["quantized"], 0);
  EXPECT_EQ(active["identical"], 3);
  EXPECT_DOUBLE_EQ(active["mean_prefix_fraction"].get<double>(), 1.0);
  const nlohmann::json& q4 = j["rows"][1];
  EXPECT_EQ(q4["entry_format"], "q4_0");
  EXPECT_EQ(q4["quantized"], 3);
  EXPECT_LE(q4["identical_pct"].get<double>(), 100.0);
}

TEST_F(BenchPrefixBinary, BadFlagsFailNamingTheFlag) {
  const std::string m = " --model " + Model();
  const struct {
    std::string args, message;
  } cases[] = {
      {"prefix" + m + " --prompt-tokens 1", "--prompt-tokens: expected 2..1048576, got 1"},
      {"prefix" + m + " --prompt-tokens 12,x", "--prompt-tokens: 'x' is not a number"},
      {"prefix" + m + " --store-types active,q9_0",
       "--store-types: expected 'active' or a format"},
      {"prefix" + m + " --kv-type q7_0", "--kv-type:"},
      {"prefix" + m + " --repeats 0", "--repeats: expected 1..1000, got 0"},
      {"prefix" + m + " --cold-repeats 0", "--cold-repeats: expected 1..1000, got 0"},
      {"prefix" + m + " --ubatch 0", "--ubatch: expected 1..65536, got 0"},
      {"prefix" + m + " --text /nonexistent/x.txt", "--text: cannot open /nonexistent/x.txt"},
      {"prefix-agreement" + m + " --min-tokens 300 --max-tokens 200",
       "--max-tokens: expected 300..1048576, got 200"},
      {"prefix-agreement" + m + " --prompts 0", "--prompts: expected 1..100000, got 0"},
  };
  for (const auto& c : cases) {
    std::string out;
    EXPECT_EQ(RunKvtierBench(c.args, &out), 2) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << c.args << "\n" << out;
  }
}

TEST(BenchPrefix, DefaultTextIsTheHeldOutNovel) {
  EXPECT_NE(DefaultPrefixText().find("data/corpus/eval.txt"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::cli
