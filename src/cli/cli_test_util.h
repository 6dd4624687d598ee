// Test-only: run a shell command (the real kvtier or kvtier-bench binary) and capture its output;
// parse its JSON report.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace kvtier::cli::testing {

// Runs `cmd` through the shell; appends its stdout to *out; returns the exit status (-1 when
// it did not exit normally).
inline int RunCommand(const std::string& cmd, std::string* out) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p.get())) > 0) out->append(buf, n);
  const int status = pclose(p.release());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A command's JSON output; a non-fatal failure naming the output when it does not parse (the
// result is then discarded: is_discarded()).
inline nlohmann::json ParseJson(const std::string& out) {
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << out;
  return j;
}

#ifdef KVTIER_BIN
// `kvtier ARGS` with stderr joined to stdout.
inline int RunKvtier(const std::string& args, std::string* out) {
  return RunCommand(std::string(KVTIER_BIN) + " " + args + " 2>&1", out);
}

// `kvtier make-test-model` of the benchmarks' tests: a tiny seeded qwen3 (2 layers, hidden 64,
// head_dim 64, vocab 300, ctx 4096, q8_0 weights) at `path`.
inline int WriteSmallQwen3(const std::string& path, std::string* out) {
  return RunKvtier("make-test-model --out " + path +
                       " --arch qwen3 --hidden 64 --layers 2 --heads 2 --kv-heads 1"
                       " --head-dim 64 --ffn 128 --vocab 300 --ctx 4096"
                       " --weight-type q8_0 --seed 7",
                   out);
}
#endif

#ifdef KVTIER_BENCH_BIN
// `kvtier-bench ARGS` with stderr joined to stdout.
inline int RunKvtierBench(const std::string& args, std::string* out) {
  return RunCommand(std::string(KVTIER_BENCH_BIN) + " " + args + " 2>&1", out);
}
#endif

}  // namespace kvtier::cli::testing
