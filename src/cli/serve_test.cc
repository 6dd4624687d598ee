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

#include "cli/cli_test_util.h"
#include "cli/serve_test_util.h"

namespace {

using kvtier::cli::testing::Complete;
using kvtier::cli::testing::ServeProcess;
using nlohmann::json;

TEST(Serve, SigtermSpillsToSsdAndTheNextStartServesFromIt) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvtier_serve_test_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::string prompt;
  for (int i = 0; i < 20; ++i) {
    prompt += "Mr. Knightley was a sensible man about seven or eight-and-thirty, who called "
              "often at Hartfield. ";
  }
  json first;
  {
    ServeProcess s({"--ssd-cache-dir", dir.string(), "--block-tokens", "16"},
                   (dir.string() + ".log1"));
    ASSERT_GT(s.port, 0);
    first = Complete(s.port, prompt, 12);
    ASSERT_TRUE(first.contains("choices")) << first.dump();
    EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_EQ(s.Stop(), 0) << s.Log();
    const std::string log = s.Log();
    EXPECT_NE(log.find("received SIGTERM"), std::string::npos) << log;
    EXPECT_NE(log.find("shutdown: spilled"), std::string::npos) << log;
  }
  {
    ServeProcess s({"--ssd-cache-dir", dir.string(), "--block-tokens", "16"},
                   (dir.string() + ".log2"));
    ASSERT_GT(s.port, 0);
    json again = Complete(s.port, prompt, 12);
    ASSERT_TRUE(again.contains("choices")) << again.dump();
    const int prompt_tokens = again["usage"]["prompt_tokens"];
    // Whole blocks come back from SSD; the last token is always computed.
    EXPECT_GE(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
              prompt_tokens - 16);
    EXPECT_EQ(again["choices"][0]["text"], first["choices"][0]["text"]);
    EXPECT_EQ(s.Stop(), 0) << s.Log();
    EXPECT_NE(s.Log().find("cache_fetch id=1 HIT"), std::string::npos) << s.Log();
  }
  std::filesystem::remove_all(dir);
  std::filesystem::remove(dir.string() + ".log1");
  std::filesystem::remove(dir.string() + ".log2");
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
