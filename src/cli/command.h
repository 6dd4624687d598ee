// The subcommand table shared by `kvtier` (user commands) and `kvtier-bench` (benchmarks): each
// command registers itself as a Command (name, help, aliases, a setup function that declares
// its flags and returns its run function); RunCommandTable parses argv against the table,
// answers --version and runs the chosen command. Exit status: 0 on success, 2 on bad input
// (the message names the flag), 1 on any other failure.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace CLI {
class App;
}

namespace kvtier::cli {

// What a command does once its flags are parsed; returns the exit status.
using CommandRun = std::function<int()>;

struct Command {
  std::string name;
  std::string help;
  std::vector<std::string> aliases;  // other names that run it (e.g. former spellings)
  // Declares the command's flags on `sub` (bound to state the returned run function owns)
  // and returns the run function.
  std::function<CommandRun(CLI::App& sub)> setup;
};

// Parses argv against `commands` (exactly one command unless --version) and runs it.
// `program` names the binary in --version and error messages.
int RunCommandTable(const std::string& program, const std::string& description,
                    const std::vector<Command>& commands, int argc, char** argv);

// "<program> 0.1.0 (commit abc1234)": the project version and the commit `git describe` gave
// at configure time ("unknown" outside a git checkout).
std::string VersionLine(const std::string& program);

// A progress bar on stderr when it is a terminal, else no callback at all.
std::function<void(int, int)> ProgressBar(const char* unit);

// Prints "<who>: error: <message>" to stderr; returns 2 for InvalidArgument, else 1.
int Fail(const std::string& who, const Status& s);

}  // namespace kvtier::cli
