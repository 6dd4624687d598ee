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

namespace {

using nlohmann::json;

// A `kvtier serve` child process; stderr goes to a log file.
struct ServeProcess {
  pid_t pid = -1;
  int port = 0;
  std::string log;

  explicit ServeProcess(const std::vector<std::string>& flags, const std::string& log_path)
      : log(log_path) {
    int out[2];
    EXPECT_EQ(pipe(out), 0);
    pid = fork();
    if (pid == 0) {
      dup2(out[1], STDOUT_FILENO);
      FILE* err = std::fopen(log_path.c_str(), "w");
      if (err != nullptr) dup2(fileno(err), STDERR_FILENO);
      close(out[0]);
      std::vector<std::string> args = {KVTIER_BIN, "serve", "--port", "0", "--threads", "2"};
      args.insert(args.end(), flags.begin(), flags.end());
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    // "kvtier serve: listening on http://127.0.0.1:PORT model=ID"
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
    close(out[0]);
    const size_t at = line.rfind(':');
    const size_t sp = line.find(' ', at);
    if (line.find("listening on") != std::string::npos && at != std::string::npos) {
      port = std::stoi(line.substr(at + 1, sp - at - 1));
    }
    EXPECT_GT(port, 0) << "first line: " << line << "\nlog:\n" << Log();
  }
  std::string Log() const {
    std::ifstream f(log);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // SIGTERM, then the exit status (-1 if it did not exit within 60 s).
  int Stop() {
    kill(pid, SIGTERM);
    for (int i = 0; i < 600; ++i) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }
  ~ServeProcess() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

json Complete(int port, const std::string& prompt, int max_tokens) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(300);
  json body{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
  httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
  if (!r) return json{{"http_error", httplib::to_string(r.error())}};
  return json::parse(r->body);
}

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
