// kvtier-bench: the benchmarks (commands.h), apart from the user commands of kvtier.
#include "cli/commands.h"

int main(int argc, char** argv) {
  std::vector<kvtier::cli::Command> commands = kvtier::cli::BenchCommands();
#ifdef KVTIER_BENCH_MICRO
  for (kvtier::cli::Command& c : kvtier::cli::MicroCommands()) commands.push_back(std::move(c));
#endif
  return kvtier::cli::RunCommandTable(
      "kvtier-bench", "kvtier-bench: kvtier's benchmarks (tables, or one JSON object with --json)",
      commands, argc, argv);
}
