// kvtier command line: subcommands dispatch to src/cli/*. Exit status 0 on success, 2 on bad
// input (the message names the flag), 1 on any other failure.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "cli/bench_kv_cache.h"

namespace {

void ProgressBar(int done, int total) {
  constexpr int kWidth = 40;
  const int filled = total > 0 ? done * kWidth / total : kWidth;
  std::fprintf(stderr, "\r[%.*s%*s] layer %d/%d", filled,
               "########################################", kWidth - filled, "", done, total);
  if (done == total) std::fprintf(stderr, "\r%*s\r", kWidth + 24, "");
  std::fflush(stderr);
}

int Fail(const char* cmd, const kvtier::Status& s) {
  std::fprintf(stderr, "kvtier %s: error: %s\n", cmd, s.message().c_str());
  return s.code() == kvtier::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvtier: an LLM inference server built around a tiered, quantized KV cache"};
  app.require_subcommand(1);

  kvtier::cli::BenchKvCacheConfig bench;
  std::string dtype = "f16";
  bool json = false;
  CLI::App* b = app.add_subcommand(
      "bench-kv-cache", "Memory, accuracy and speed of KV row formats on synthetic K/V");
  b->add_option("--layers", bench.layers, "Layers")->capture_default_str();
  b->add_option("--seq-len", bench.seq_len, "Tokens per sequence")->capture_default_str();
  b->add_option("--heads", bench.heads, "KV heads")->capture_default_str();
  b->add_option("--head-dim", bench.head_dim, "Head dimension")->capture_default_str();
  b->add_option("--group-size", bench.group_size, "Group size of affine formats (32, 64, 128)")
      ->capture_default_str();
  b->add_option("--formats", bench.formats,
                "Comma-separated formats: " + kvtier::ValidFormatsHelp() +
                    "; affine without g<group> uses --group-size")
      ->capture_default_str();
  b->add_option("--dtype", dtype, "Source dtype: f32, f16, bf16 (affine scales use it too)")
      ->capture_default_str();
  b->add_option("--seed", bench.seed, "Seed of the standard-normal data")->capture_default_str();
  b->add_option("--threads", bench.threads, "Threads (0: all cores)")->capture_default_str();
  b->add_option("--repeats", bench.repeats, "Runs of each timed step; the median counts")
      ->capture_default_str();
  b->add_flag("--json", json, "Print one JSON object instead of a table");

  CLI11_PARSE(app, argc, argv);

  if (b->parsed()) {
    kvtier::Result<kvtier::DType> dt = kvtier::ParseDType(dtype);
    if (!dt.ok()) {
      return Fail("bench-kv-cache",
                  kvtier::Status::InvalidArgument("--dtype: " + dt.status().message()));
    }
    bench.dtype = *dt;
    const bool tty = isatty(STDERR_FILENO) != 0;
    auto report = kvtier::cli::RunBenchKvCache(
        bench, tty ? std::function<void(int, int)>(ProgressBar) : std::function<void(int, int)>());
    if (!report.ok()) return Fail("bench-kv-cache", report.status());
    std::cout << (json ? kvtier::cli::FormatBenchKvCacheJson(*report)
                       : kvtier::cli::FormatBenchKvCacheTable(*report));
    return 0;
  }
  return 0;
}
