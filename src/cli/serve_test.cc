// `kvtier serve` as a process: it prints its address, answers, drains on SIGTERM (exit 0)
// after spilling the RAM prefix cache to --ssd-cache-dir, and the next start serves the same
// prompt from SSD with identical greedy output. Bad flags exit 2 naming the flag.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_test_util.h"
#include "cli/serve_test_util.h"

namespace {

using kvtier::cli::testing::Complete;
using kvtier::cli::testing::ServeProcess;
using nlohmann::json;

// Serves a ~400-token prompt (cold), stops with SIGTERM (the RAM entry spills to SSD), starts
// again on the same directory and serves the prompt again from SSD. Returns both answers.
struct TwoStarts {
  json first, again;
  std::string log1, log2;
};
TwoStarts ServeTwiceFromSsd(const std::vector<std::string>& format_flags, const std::string& tag,
                            int block_tokens = 16) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("kvtier_serve_test_" + tag + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::string prompt;
  for (int i = 0; i < 20; ++i) {
    prompt += "Mr. Knightley was a sensible man about seven or eight-and-thirty, who called "
              "often at Hartfield. ";
  }
  std::vector<std::string> flags = {"--ssd-cache-dir", dir.string(), "--block-tokens",
                                    std::to_string(block_tokens)};
  flags.insert(flags.end(), format_flags.begin(), format_flags.end());
  TwoStarts r;
  {
    ServeProcess s(flags, dir.string() + ".log1");
    EXPECT_GT(s.port, 0);
    if (s.port <= 0) return r;
    r.first = Complete(s.port, prompt, 12);
    EXPECT_TRUE(r.first.contains("choices")) << r.first.dump();
    EXPECT_EQ(r.first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_EQ(s.Stop(), 0) << s.Log();
    r.log1 = s.Log();
    EXPECT_NE(r.log1.find("received SIGTERM"), std::string::npos) << r.log1;
    EXPECT_NE(r.log1.find("shutdown: spilled"), std::string::npos) << r.log1;
  }
  {
    ServeProcess s(flags, dir.string() + ".log2");
    EXPECT_GT(s.port, 0);
    if (s.port <= 0) return r;
    r.again = Complete(s.port, prompt, 12);
    EXPECT_TRUE(r.again.contains("choices")) << r.again.dump();
    const int prompt_tokens = r.again["usage"]["prompt_tokens"];
    EXPECT_GE(prompt_tokens, 256) << "the entry must be long enough to be quantized on store";
    // Whole blocks come back from SSD; the last token is always computed.
    EXPECT_GE(r.again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
              prompt_tokens - block_tokens);
    EXPECT_EQ(s.Stop(), 0) << s.Log();
    r.log2 = s.Log();
    EXPECT_NE(r.log2.find("cache_fetch id=1 HIT"), std::string::npos) << r.log2;
  }
  std::filesystem::remove_all(dir);
  std::filesystem::remove(dir.string() + ".log1");
  std::filesystem::remove(dir.string() + ".log2");
  return r;
}

// A hit whose stored format is the active one reads the very blocks a cold run wrote: the
// greedy answer is identical. f16 (the pre-issue-32 default), and the quantized formats
// kept as they are in RAM and on SSD.
TEST(Serve, SigtermSpillsToSsdAndTheNextStartServesFromIt) {
  for (const char* kv : {"f16", "q8_0", "rot4s0"}) {
    SCOPED_TRACE(kv);
    const TwoStarts r = ServeTwiceFromSsd({"--kv-type", kv, "--kv-store-type", kv}, kv);
    ASSERT_TRUE(r.again.contains("choices"));
    EXPECT_EQ(r.again["choices"][0]["text"], r.first["choices"][0]["text"]);
    EXPECT_NE(r.log1.find(std::string("kv_pool=") + kv + "/" + kv), std::string::npos) << r.log1;
  }
}

// A K/V store pair with token-grouped K (chan4g64: per channel over 64 tokens; V rot4s0), the
// active pair too: RAM and SSD keep the very blocks (and group parameters) a cold run wrote, so
// the hit after a restart gives the cold greedy answer. From q8_0 active, entries are converted
// to the pair on store and back on the hit.
TEST(Serve, ChanStorePairThroughSsdGivesTheColdAnswer) {
  const std::string pair = "chan4g64/rot4s0";
  TwoStarts r = ServeTwiceFromSsd({"--kv-type", pair, "--kv-store-type", pair}, "chan", 64);
  ASSERT_TRUE(r.again.contains("choices"));
  EXPECT_EQ(r.again["choices"][0]["text"], r.first["choices"][0]["text"]);
  EXPECT_NE(r.log1.find("kv_pool=" + pair), std::string::npos) << r.log1;
  EXPECT_NE(r.log1.find("store=" + pair), std::string::npos) << r.log1;
  r = ServeTwiceFromSsd({"--kv-type", "q8_0", "--kv-store-type", pair}, "chanconv", 64);
  ASSERT_TRUE(r.again.contains("choices"));
  EXPECT_FALSE(r.again["choices"][0]["text"].get<std::string>().empty());
  EXPECT_NE(r.log1.find("format=" + pair), std::string::npos) << r.log1;  // converted on store
}

TEST(Serve, BadStorePairsExit2NamingTheFlag) {
  for (const char* bad : {"serve --kv-store-type rot4s0/chan4g64", "serve --kv-store-type chan4g64",
                          "serve --kv-store-type chan4g64/rot4s0 --block-tokens 16",
                          "serve --kv-store-type q4_0/q7_1"}) {
    std::string out;
    EXPECT_EQ(kvtier::cli::testing::RunKvtier(bad, &out), 2) << bad << ": " << out;
    EXPECT_NE(out.find("--kv-store-type"), std::string::npos) << bad << ": " << out;
  }
  std::string out;
  kvtier::cli::testing::RunKvtier("serve --kv-store-type rot4s0/chan4g64", &out);
  EXPECT_NE(out.find("K only"), std::string::npos) << out;
  out.clear();
  kvtier::cli::testing::RunKvtier("serve --kv-store-type chan4g64/rot4s0 --block-tokens 16", &out);
  EXPECT_NE(out.find("multiple of 64"), std::string::npos) << out;
}

// The defaults are quantized: q8_0 in the running batch, rot4s0 in RAM and on SSD (the entry
// is converted on store and back on the hit, so the answer may differ from the cold one).
TEST(Serve, DefaultsAreQ8ActiveAndRot4Stored) {
  const TwoStarts r = ServeTwiceFromSsd({}, "defaults");
  ASSERT_TRUE(r.again.contains("choices"));
  EXPECT_FALSE(r.again["choices"][0]["text"].get<std::string>().empty());
  EXPECT_NE(r.log1.find("kv_pool=q8_0/q8_0"), std::string::npos) << r.log1;
  EXPECT_NE(r.log1.find("store=rot4s0"), std::string::npos) << r.log1;
  EXPECT_NE(r.log2.find("store=rot4s0"), std::string::npos) << r.log2;
}

TEST(Serve, BadFlagsExit2NamingTheFlag) {
  std::string out;
  EXPECT_EQ(kvtier::cli::testing::RunKvtier("serve --max-num-seqs 0", &out), 2) << out;
  EXPECT_NE(out.find("--max-num-seqs"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(kvtier::cli::testing::RunKvtier("serve --kv-cache-dtype q7_1", &out), 2) << out;
  EXPECT_NE(out.find("--kv-cache-dtype"), std::string::npos) << out;
  out.clear();
  // --kv-type is the same flag (--kv-cache-dtype is its alias).
  EXPECT_EQ(kvtier::cli::testing::RunKvtier("serve --kv-type q7_1", &out), 2) << out;
  EXPECT_NE(out.find("--kv-type"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(kvtier::cli::testing::RunKvtier("serve --kv-type q8_0 --kv-cache-dtype q4_0", &out), 0)
      << out;
  EXPECT_NE(out.find("--kv-type"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(kvtier::cli::testing::RunKvtier("serve --kv-store-type q7_1", &out), 2) << out;
  EXPECT_NE(out.find("--kv-store-type"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(kvtier::cli::testing::RunKvtier("serve --cache-memory-mb 10 --cache-memory-percent 5",
                                            &out),
            2)
      << out;
  EXPECT_NE(out.find("--cache-memory-percent"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(kvtier::cli::testing::RunKvtier("serve --model /nonexistent.gguf", &out), 0) << out;
  EXPECT_NE(out.find("/nonexistent.gguf"), std::string::npos) << out;
}

}  // namespace
