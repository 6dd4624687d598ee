// Test-only: `kvtier serve` as a child process (its port read from its first line, stderr in a
// log file) and a greedy completion request against it.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace kvtier::cli::testing {

#ifdef KVTIER_BIN
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

inline nlohmann::json Complete(int port, const std::string& prompt, int max_tokens) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(300);
  nlohmann::json body{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
  httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
  if (!r) return nlohmann::json{{"http_error", httplib::to_string(r.error())}};
  return nlohmann::json::parse(r->body);
}

#endif

}  // namespace kvtier::cli::testing
