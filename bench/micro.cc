// kvtier-bench micro-*: the Google Benchmark programs (one per module), each a command whose
// remaining arguments go to Google Benchmark (e.g. --benchmark_filter=BM_Quantize,
// --benchmark_format=json). Only the chosen program's benchmarks are registered.
#include <benchmark/benchmark.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "kvtier/quant.h"

namespace kvtier::bench {
void RegisterMicroQuant();
void RegisterMicroKv();
void RegisterMicroAttention();
void RegisterMicroPrefix();
void RegisterMicroSsd();
void RegisterMicroDashboard();
void RegisterMicroMatmul();
}  // namespace kvtier::bench

namespace kvtier::cli {
namespace {

Command Micro(const std::string& name, const std::string& help, void (*register_fn)()) {
  return {name, help + " (Google Benchmark: its flags follow)",
          {}, [name, register_fn](CLI::App& s) -> CommandRun {
    s.prefix_command();
    s.allow_extras();
    s.set_help_flag();  // --help goes to Google Benchmark
    CLI::App* sub = &s;
    return [name, register_fn, sub] {
      std::vector<std::string> args = sub->remaining();
      std::vector<std::string> storage = {"kvtier-bench " + name};
      storage.insert(storage.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& a : storage) argv.push_back(a.data());
      argv.push_back(nullptr);
      int argc = static_cast<int>(storage.size());
      register_fn();
      benchmark::Initialize(&argc, argv.data());
      if (benchmark::ReportUnrecognizedArguments(argc, argv.data())) return 2;
      benchmark::RunSpecifiedBenchmarks();
      benchmark::Shutdown();
      return 0;
    };
  }};
}

void RegisterQuantWithTarget() {
  // KVTIER_FORCE_TARGET=<Highway target bit> compares targets, e.g. 512 for AVX2, 256 for AVX3.
  if (const char* t = std::getenv("KVTIER_FORCE_TARGET")) {
    if (!QuantForceSimdTarget(std::atoll(t))) {
      std::fprintf(stderr, "KVTIER_FORCE_TARGET=%s: this CPU cannot run that target\n", t);
      std::exit(2);
    }
  }
  bench::RegisterMicroQuant();
}

}  // namespace

std::vector<Command> MicroCommands() {
  return {
      Micro("micro-quant",
            "Single-thread quantize / dequantize throughput per format next to memcpy "
            "(KVTIER_FORCE_TARGET=<Highway target bit> picks the SIMD target)",
            RegisterQuantWithTarget),
      Micro("micro-kv",
            "The paged KV cache: prefill append per format, a decode step, batch operations "
            "against context length",
            bench::RegisterMicroKv),
      Micro("micro-attention",
            "Fused attention decode on one thread, warm caches, per KV format and context",
            bench::RegisterMicroAttention),
      Micro("micro-prefix",
            "The RAM prefix cache: fetch in place vs converted, store with and without "
            "quantizing",
            bench::RegisterMicroPrefix),
      Micro("micro-ssd",
            "The SSD tier's per-block costs: encode, decode header, decode rows, Load",
            bench::RegisterMicroSsd),
      Micro("micro-dashboard",
            "The status page's server time (GET /, /dashboard.json) with 1,000 and 10,000 "
            "cached prefixes",
            bench::RegisterMicroDashboard),
      Micro("micro-matmul",
            "Weight matrix products per type on Qwen3-0.6B shapes, decode and prefill, against "
            "a read of the same bytes (KVTIER_BENCH_THREADS, default 2)",
            bench::RegisterMicroMatmul),
  };
}

}  // namespace kvtier::cli
