// kvtier: the user commands (commands.h). The benchmarks live in kvtier-bench.
#include <cstdio>
#include <string>

#include "cli/commands.h"

int main(int argc, char** argv) {
  if (argc > 1) {
    // The benchmarks' former home: say where they went.
    const std::string cmd = argv[1];
    if (cmd.rfind("bench-", 0) == 0 || cmd == "prefix-agreement") {
      const std::string now = cmd == "prefix-agreement" ? cmd : cmd.substr(6);
      std::fprintf(stderr, "kvtier: error: the benchmarks moved to kvtier-bench: run `kvtier-bench %s`\n",
                   now.c_str());
      return 2;
    }
  }
  return kvtier::cli::RunCommandTable(
      "kvtier", "kvtier: an LLM inference server built around a tiered, quantized KV cache",
      kvtier::cli::UserCommands(), argc, argv);
}
