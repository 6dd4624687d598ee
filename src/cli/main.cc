// kvtier command line: subcommands dispatch to src/cli/*. Exit status 0 on success, 2 on bad
// input (the message names the flag), 1 on any other failure.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <iostream>

#include "cli/bench_attention.h"
#include "cli/bench_kv_cache.h"
#include "cli/bench_kv_paged.h"
#include "cli/make_test_model.h"
#include "cli/tokenize.h"

namespace {

// A progress bar on stderr when it is a terminal, else no callback at all.
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

  kvtier::cli::BenchKvPagedConfig paged;
  bool paged_json = false;
  CLI::App* p = app.add_subcommand(
      "bench-kv-paged",
      "Bytes per token of the paged KV cache per format, and the time and bytes copied of "
      "batch merge / extract / filter / extend at several context lengths");
  p->add_option("--layers", paged.layers, "Layers")->capture_default_str();
  p->add_option("--kv-heads", paged.kv_heads, "KV heads")->capture_default_str();
  p->add_option("--head-dim", paged.head_dim, "Head dimension")->capture_default_str();
  p->add_option("--block-tokens", paged.block_tokens, "Tokens per KV block")
      ->capture_default_str();
  p->add_option("--formats", paged.formats,
                "Comma-separated formats for the bytes-per-token table, each FMT or K/V: " +
                    kvtier::ValidFormatsHelp())
      ->capture_default_str();
  p->add_option("--ops-format", paged.ops_format, "Format (FMT or K/V) of the timed cache")
      ->capture_default_str();
  p->add_option("--rows", paged.rows, "Rows of the batch")->capture_default_str();
  p->add_option("--contexts", paged.contexts, "Comma-separated tokens per row")
      ->capture_default_str();
  p->add_option("--repeats", paged.repeats, "Runs of each timed step; the median counts")
      ->capture_default_str();
  p->add_option("--threads", paged.threads, "Threads filling the rows (0: all cores)")
      ->capture_default_str();
  p->add_option("--seed", paged.seed, "Seed of the K/V data")->capture_default_str();
  p->add_flag("--json", paged_json, "Print one JSON object instead of a table");

  kvtier::cli::BenchAttentionConfig attn;
  bool attn_json = false;
  CLI::App* a = app.add_subcommand(
      "bench-attention",
      "Fused attention on paged KV per format, decode and prefill, against roofline floors");
  a->add_option("--ctx", attn.ctx, "Comma-separated decode contexts")->capture_default_str();
  a->add_option("--prefill-ctx", attn.prefill_ctx, "Comma-separated prefill contexts")
      ->capture_default_str();
  a->add_option("--batch", attn.batches, "Comma-separated decode batch sizes")
      ->capture_default_str();
  a->add_option("--modes", attn.modes, "decode, prefill or both")->capture_default_str();
  a->add_option("--prefill-chunk", attn.prefill_chunk, "Queries per prefill row")
      ->capture_default_str();
  a->add_option("--heads", attn.heads, "Query heads")->capture_default_str();
  a->add_option("--kv-heads", attn.kv_heads, "KV heads")->capture_default_str();
  a->add_option("--head-dim", attn.head_dim, "Head dimension")->capture_default_str();
  a->add_option("--block-tokens", attn.block_tokens, "Tokens per KV block")
      ->capture_default_str();
  a->add_option("--formats", attn.formats, "Comma-separated K or K/V formats")
      ->capture_default_str();
  a->add_option("--repeats", attn.repeats, "Timed calls per row; the median counts")
      ->capture_default_str();
  a->add_option("--threads", attn.threads, "Threads (0: all cores)")->capture_default_str();
  a->add_option("--seed", attn.seed, "Seed of the K/V and query data")->capture_default_str();
  a->add_flag("--json", attn_json, "Print one JSON object instead of a table");

  kvtier::cli::TokenizeConfig tokenize;
  bool no_parse_special = false;
  CLI::App* tk = app.add_subcommand(
      "tokenize", "Token ids of the text on standard input, space-separated on one line");
  tk->add_option("--model", tokenize.model, "GGUF file whose tokenizer is used");
  tk->add_flag("--add-bos", tokenize.add_bos, "Put the BOS token first");
  tk->add_flag("--no-parse-special", no_parse_special,
               "Treat control-token text such as <|im_start|> as plain text");

  kvtier::cli::MakeTestModelFlags make_model;
  CLI::App* mm = kvtier::cli::AddMakeTestModel(app, &make_model);

  CLI11_PARSE(app, argc, argv);

  if (mm->parsed()) {
    const kvtier::Status st = kvtier::cli::RunMakeTestModel(make_model, std::cout);
    if (!st.ok()) return Fail("make-test-model", st);
    return 0;
  }

  if (tk->parsed()) {
    tokenize.parse_special = !no_parse_special;
    const kvtier::Status st = kvtier::cli::RunTokenize(tokenize, std::cin, std::cout);
    if (!st.ok()) return Fail("tokenize", st);
    return 0;
  }

  if (a->parsed()) {
    auto report = kvtier::cli::RunBenchAttention(attn, ProgressBar("step"));
    if (!report.ok()) return Fail("bench-attention", report.status());
    std::cout << (attn_json ? kvtier::cli::FormatBenchAttentionJson(*report)
                            : kvtier::cli::FormatBenchAttentionTable(*report));
    return 0;
  }

  if (p->parsed()) {
    auto report = kvtier::cli::RunBenchKvPaged(paged, ProgressBar("step"));
    if (!report.ok()) return Fail("bench-kv-paged", report.status());
    std::cout << (paged_json ? kvtier::cli::FormatBenchKvPagedJson(*report)
                             : kvtier::cli::FormatBenchKvPagedTable(*report));
    return 0;
  }

  if (b->parsed()) {
    kvtier::Result<kvtier::DType> dt = kvtier::ParseDType(dtype);
    if (!dt.ok()) {
      return Fail("bench-kv-cache",
                  kvtier::Status::InvalidArgument("--dtype: " + dt.status().message()));
    }
    bench.dtype = *dt;
    auto report = kvtier::cli::RunBenchKvCache(bench, ProgressBar("layer"));
    if (!report.ok()) return Fail("bench-kv-cache", report.status());
    std::cout << (json ? kvtier::cli::FormatBenchKvCacheJson(*report)
                       : kvtier::cli::FormatBenchKvCacheTable(*report));
    return 0;
  }
  return 0;
}
