// The two front ends through the real binaries: --version, which commands each one lists,
// the benchmarks' former names, and `kvtier chat` holding a conversation over piped turns.
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "cli/cli_test_util.h"

namespace kvtier::cli {
namespace {

using testing::RunCommand;
using testing::RunKvtier;
using testing::RunKvtierBench;

TEST(CommandTable, VersionPrintsVersionAndCommit) {
  std::string out;
  ASSERT_EQ(RunKvtier("--version", &out), 0) << out;
  EXPECT_TRUE(std::regex_match(out, std::regex(R"(kvtier \d+\.\d+\.\d+ \(commit [0-9a-z.-]+\)\n)")))
      << out;
  out.clear();
  ASSERT_EQ(RunKvtierBench("--version", &out), 0) << out;
  EXPECT_TRUE(
      std::regex_match(out, std::regex(R"(kvtier-bench \d+\.\d+\.\d+ \(commit [0-9a-z.-]+\)\n)")))
      << out;
}

TEST(CommandTable, UserCommandsAndBenchmarksApart) {
  std::string out;
  ASSERT_EQ(RunKvtier("--help", &out), 0) << out;
  for (const char* c : {"serve", "generate", "chat", "tokenize", "perplexity", "cache",
                        "make-test-model"}) {
    EXPECT_NE(out.find(std::string("\n  ") + c + " "), std::string::npos) << c << "\n" << out;
  }
  EXPECT_EQ(out.find("bench"), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(RunKvtierBench("--help", &out), 0) << out;
  for (const char* c : {"kv-cache", "kv-paged", "attention", "model", "prefix",
                        "prefix-agreement", "ssd", "serve"}) {
    EXPECT_NE(out.find(std::string("\n  ") + c), std::string::npos) << c << "\n" << out;
  }
  // Each benchmark answers to its former name too; kvtier says where they went.
  out.clear();
  EXPECT_EQ(RunKvtierBench("bench-kv-cache --layers 1 --seq-len 16 --heads 2 --repeats 1 --json",
                           &out),
            0)
      << out;
  EXPECT_NE(out.find("\"rows\""), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunKvtier("bench-attention", &out), 2) << out;
  EXPECT_NE(out.find("kvtier-bench attention"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunKvtier("", &out), 2) << out;  // a command is required
}

TEST(ChatCommand, KeepsTheConversationOverPipedTurns) {
  const std::string dir =
      ::testing::TempDir() + "/kvtier_chat_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string model = dir + "/m.gguf";
  std::string out;
  ASSERT_EQ(RunKvtier("make-test-model --out " + model +
                          " --arch qwen3 --hidden 64 --layers 2 --heads 2 --kv-heads 1"
                          " --head-dim 64 --ffn 128 --vocab 300 --ctx 4096 --text-fillers"
                          " --seed 7",
                      &out),
            0)
      << out;
  out.clear();
  const std::string chat = std::string(KVTIER_BIN) + " chat --model " + model +
                           " --max-tokens 8 --system 'Be brief.' --stats";
  ASSERT_EQ(RunCommand("printf 'Hello\\n\\nHow are you?\\n' | " + chat +
                           " --kv-type q8_0/q4_0 2>&1",
                       &out),
            0)
      << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m, std::regex(R"(chat: 2 turns, (\d+) tokens generated, (\d+) tokens of context)")))
      << out;
  // Both turns, both replies and the system prompt are in the cache at the end.
  EXPECT_GT(std::stoi(m[1]), 0) << out;
  EXPECT_GT(std::stoi(m[2]), std::stoi(m[1]) + 10) << out;

  // A bad flag is named; EOF at once is an empty chat.
  out.clear();
  EXPECT_EQ(RunCommand("true | " + chat + " --kv-type q7_0 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("--kv-type"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunCommand(chat + " < /dev/null 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("chat: 0 turns"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier::cli
