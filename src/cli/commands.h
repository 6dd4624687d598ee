// The command tables of the two binaries: `kvtier` (the user commands, commands.cc) and
// `kvtier-bench` (the benchmarks, bench_commands.cc; the Google Benchmark programs of bench/
// join it as micro-* when built). A new command adds one factory here and one line to its table.
#pragma once

#include <vector>

#include "cli/command.h"

namespace kvtier::cli {

// kvtier: serve, generate, chat, tokenize, perplexity, cache, make-test-model.
std::vector<Command> UserCommands();
Command ServeCommand();
Command GenerateCommand();
Command ChatCommand();
Command TokenizeCommand();
Command PerplexityCommand();
Command CacheDirCommand();
Command MakeTestModelCommand();

// kvtier-bench: kv-cache, kv-paged, attention, model, prefix, prefix-agreement, ssd, serve
// (each also under its former name bench-*), then MicroCommands().
std::vector<Command> BenchCommands();
// bench/micro.cc: micro-quant, micro-kv, micro-attention, micro-prefix, micro-ssd (Google
// Benchmark; the arguments after the name go to it). Empty when built without Google Benchmark.
std::vector<Command> MicroCommands();

}  // namespace kvtier::cli
