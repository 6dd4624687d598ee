// The subcommand table (see command.h).
#include "cli/command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#ifndef KVTIER_VERSION
#define KVTIER_VERSION "unknown"
#endif
#ifndef KVTIER_COMMIT
#define KVTIER_COMMIT "unknown"
#endif

namespace kvtier::cli {

std::string VersionLine(const std::string& program) {
  return program + " " KVTIER_VERSION " (commit " KVTIER_COMMIT ")";
}

std::function<void(int, int)> ProgressBar(const char* unit) {
  if (isatty(STDERR_FILENO) == 0) return {};
  return [unit](int done, int total) {
    constexpr int kWidth = 40;
    const int filled = total > 0 ? done * kWidth / total : kWidth;
    std::fprintf(stderr, "\r[%.*s%*s] %s %d/%d", filled,
                 "########################################", kWidth - filled, "", unit, done,
                 total);
    if (done == total) std::fprintf(stderr, "\r%*s\r", kWidth + 32, "");
    std::fflush(stderr);
  };
}

int Fail(const std::string& who, const Status& s) {
  std::fprintf(stderr, "%s: error: %s\n", who.c_str(), s.message().c_str());
  return s.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

int RunCommandTable(const std::string& program, const std::string& description,
                    const std::vector<Command>& commands, int argc, char** argv) {
  CLI::App app{description, program};
  bool version = false;
  app.add_flag("--version", version, "Print the version and the commit, then exit");
  app.require_subcommand(0, 1);
  std::vector<std::pair<CLI::App*, CommandRun>> subs;
  for (const Command& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    for (const std::string& a : c.aliases) sub->alias(a);
    subs.emplace_back(sub, c.setup(*sub));
  }
  CLI11_PARSE(app, argc, argv);
  if (version) {
    std::cout << VersionLine(program) << "\n";
    return 0;
  }
  for (auto& [sub, run] : subs) {
    if (sub->parsed()) return run();
  }
  std::cerr << app.help() << "\n" << program << ": error: a command is required\n";
  return 2;
}

}  // namespace kvtier::cli
