// kvtier command line: subcommands dispatch to src/cli/*. Exit status 0 on success, 2 on bad
// input (the message names the flag), 1 on any other failure.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>

#include "cli/bench_attention.h"
#include "cli/bench_kv_cache.h"
#include "cli/bench_kv_paged.h"
#include "cli/make_test_model.h"
#include "cli/bench_model.h"
#include "cli/bench_prefix.h"
#include "cli/bench_serve.h"
#include "cli/bench_ssd.h"
#include "cli/cache_cmd.h"
#include "cli/check_model.h"
#include "cli/generate.h"
#include "cli/serve.h"
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
  tk->add_option("--model", tokenize.model, "GGUF file whose tokenizer is used (default: the bundled model)");
  tk->add_flag("--add-bos", tokenize.add_bos, "Put the BOS token first");
  tk->add_flag("--no-parse-special", no_parse_special,
               "Treat control-token text such as <|im_start|> as plain text");

  kvtier::cli::GenerateConfig gen;
  CLI::App* g = app.add_subcommand(
      "generate", "Continue a prompt with a model, streaming the sampled text to stdout");
  g->add_option("--model", gen.model, "GGUF model (default: the bundled model)");
  g->add_option("--prompt", gen.prompt, "Prompt text")->required();
  g->add_flag("--chat", gen.chat, "Wrap the prompt as a user turn in the model's chat template");
  g->add_option("--max-tokens", gen.max_tokens, "Tokens to generate at most")
      ->capture_default_str();
  g->add_option("--temperature", gen.sampling.temperature, "0: greedy")->capture_default_str();
  g->add_option("--top-p", gen.sampling.top_p, "Nucleus sampling mass")->capture_default_str();
  g->add_option("--top-k", gen.sampling.top_k, "0: off")->capture_default_str();
  g->add_option("--seed", gen.sampling.seed, "Sampling seed")->capture_default_str();
  g->add_option("--presence-penalty", gen.sampling.presence_penalty)->capture_default_str();
  g->add_option("--frequency-penalty", gen.sampling.frequency_penalty)->capture_default_str();
  g->add_option("--kv-type", gen.kv_type, "KV cache format, K or K/V: " +
                                              kvtier::ValidFormatsHelp())
      ->capture_default_str();
  g->add_option("--prefill-step", gen.prefill_step, "Prompt tokens per forward call")
      ->capture_default_str();
  g->add_option("--threads", gen.threads, "Threads (0: all cores)")->capture_default_str();
  bool gen_stats = false;
  g->add_flag("--stats", gen_stats, "Print token counts and speeds to stderr at the end");

  kvtier::cli::PerplexityConfig ppl;
  bool ppl_json = false;
  CLI::App* pp = app.add_subcommand(
      "perplexity",
      "Perplexity of a model on a text file (llama-perplexity's method: non-overlapping "
      "windows of --ctx tokens, the second half of each scored)");
  pp->add_option("--model", ppl.model, "GGUF model (default: the bundled model)");
  pp->add_option("--file", ppl.file, "Text file")->required();
  pp->add_option("--ctx", ppl.ctx, "Window length in tokens")->capture_default_str();
  pp->add_option("--batch", ppl.batch, "Tokens per forward call")->capture_default_str();
  pp->add_option("--chunks", ppl.chunks, "Windows to score at most (0: all)")
      ->capture_default_str();
  pp->add_option("--kv-type", ppl.kv_type, "KV cache format, K or K/V")->capture_default_str();
  pp->add_option("--threads", ppl.threads, "Threads (0: all cores)")->capture_default_str();
  pp->add_flag("--json", ppl_json, "Print one JSON object");

  kvtier::cli::MakeTestModelFlags make_model;
  CLI::App* mm = kvtier::cli::AddMakeTestModel(app, &make_model);
  kvtier::cli::AddCheckModel(app);  // runs from its callback (cli/check_model.h)

  kvtier::cli::BenchModelConfig bm;
  bool bm_json = false;
  CLI::App* bmc = app.add_subcommand(
      "bench-model",
      "Prefill and decode tokens/s of a model at context depths per KV format (llama-bench's "
      "pp/tg at depth)");
  bmc->add_option("--model", bm.model, "GGUF model (default: the bundled model)");
  bmc->add_option("--depth", bm.depths, "Comma-separated context depths")->capture_default_str();
  bmc->add_option("--kv-type", bm.kv_types, "Comma-separated KV formats, each K or K/V")
      ->capture_default_str();
  bmc->add_option("--prefill", bm.prefill, "Prompt tokens timed per repeat")
      ->capture_default_str();
  bmc->add_option("--decode", bm.decode, "Decode steps timed per repeat")->capture_default_str();
  bmc->add_option("--repeats", bm.repeats, "Repeats; the median counts")->capture_default_str();
  bmc->add_option("--threads", bm.threads, "Threads (0: all cores)")->capture_default_str();
  bmc->add_option("--seed", bm.seed, "Seed of the filler K/V and tokens")->capture_default_str();
  bmc->add_flag("--json", bm_json, "Print one JSON object");

  kvtier::cli::BenchPrefixConfig bp;
  bool bp_json = false;
  CLI::App* bpc = app.add_subcommand(
      "bench-prefix",
      "Time to first token of long prompts cold vs after a RAM prefix-cache hit (exact and "
      "prefix hits), per store format, with the bytes the cache holds per token");
  bpc->add_option("--model", bp.model, "GGUF model (default: the bundled model)");
  bpc->add_option("--kv-type", bp.kv_type, "Active KV format, K or K/V")->capture_default_str();
  bpc->add_option("--prompt-tokens", bp.prompt_tokens, "Comma-separated prompt lengths")
      ->capture_default_str();
  bpc->add_option("--store-types", bp.store_types,
                  "Comma-separated store formats: 'active' (kept as computed, used in place) "
                  "or a format entries are quantized to on store")
      ->capture_default_str();
  bpc->add_option("--text", bp.text,
                  "Text the prompts are tokenized from (default: data/corpus/eval.txt when "
                  "present, else random ids); 'random': seeded random token ids");
  bpc->add_option("--ubatch", bp.ubatch, "Prompt tokens per forward call")->capture_default_str();
  bpc->add_option("--repeats", bp.repeats, "Warm runs and stores per case; the median counts")
      ->capture_default_str();
  bpc->add_option("--cold-repeats", bp.cold_repeats, "Cold prefills per length; the median counts")
      ->capture_default_str();
  bpc->add_option("--threads", bp.threads, "Threads (0: all cores)")->capture_default_str();
  bpc->add_option("--seed", bp.seed, "Seed of random prompt ids")->capture_default_str();
  bpc->add_flag("--json", bp_json, "Print one JSON object");

  kvtier::cli::PrefixAgreementConfig pa;
  bool pa_json = false;
  CLI::App* pac = app.add_subcommand(
      "prefix-agreement",
      "Greedy-token agreement with the cold run of prompts served from the prefix cache, per "
      "store format (quantize on store)");
  pac->add_option("--model", pa.model, "GGUF model (default: the bundled model)");
  pac->add_option("--kv-type", pa.kv_type, "Active KV format, K or K/V")->capture_default_str();
  pac->add_option("--prompts", pa.prompts, "Prompts (windows of the text)")->capture_default_str();
  pac->add_option("--min-tokens", pa.min_tokens, "Shortest window")->capture_default_str();
  pac->add_option("--max-tokens", pa.max_tokens, "Longest window")->capture_default_str();
  pac->add_option("--generate", pa.generate, "Greedy tokens per prompt")->capture_default_str();
  pac->add_option("--store-types", pa.store_types, "Comma-separated store formats ('active' or a format)")
      ->capture_default_str();
  pac->add_option("--text", pa.text, "As bench-prefix --text");
  pac->add_option("--ubatch", pa.ubatch, "Prompt tokens per forward call")->capture_default_str();
  pac->add_option("--threads", pa.threads, "Threads (0: all cores)")->capture_default_str();
  pac->add_option("--seed", pa.seed, "Seed of the window lengths")->capture_default_str();
  pac->add_flag("--json", pa_json, "Print one JSON object");

  kvtier::cli::CacheCommand cache_cmd;
  CLI::App* cache = kvtier::cli::AddCacheCommand(app, &cache_cmd);

  kvtier::cli::BenchSsdConfig bs;
  bool bs_json = false;
  CLI::App* bsc = kvtier::cli::AddBenchSsd(app, &bs, &bs_json);

  kvtier::cli::ServeConfig serve;
  CLI::App* srv = kvtier::cli::AddServeCommand(app, &serve);

  kvtier::cli::BenchServeConfig bsv_config;
  bool bsv_json = false;
  CLI::App* bsv = kvtier::cli::AddBenchServe(app, &bsv_config, &bsv_json);

  CLI11_PARSE(app, argc, argv);

  if (srv->parsed()) {
    const kvtier::Status st = kvtier::cli::RunServe(serve);
    if (!st.ok()) return Fail("serve", st);
    return 0;
  }

  if (bsv->parsed()) {
    return kvtier::cli::RunBenchServeCommand(bsv_config, bsv_json, ProgressBar("request"));
  }

  if (cache->parsed()) {
    const kvtier::Status st = kvtier::cli::RunCacheCommand(cache_cmd, std::cout);
    if (!st.ok()) return Fail("cache", st);
    return 0;
  }

  if (bsc->parsed()) {
    auto r = kvtier::cli::RunBenchSsd(bs, ProgressBar("step"));
    if (!r.ok()) return Fail("bench-ssd", r.status());
    std::cout << (bs_json ? kvtier::cli::FormatBenchSsdJson(*r)
                          : kvtier::cli::FormatBenchSsdTable(*r));
    return 0;
  }

  if (mm->parsed()) {
    const kvtier::Status st = kvtier::cli::RunMakeTestModel(make_model, std::cout);
    if (!st.ok()) return Fail("make-test-model", st);
    return 0;
  }

  if (bpc->parsed()) {
    auto r = kvtier::cli::RunBenchPrefix(bp, ProgressBar("step"));
    if (!r.ok()) return Fail("bench-prefix", r.status());
    std::cout << (bp_json ? kvtier::cli::FormatBenchPrefixJson(*r)
                          : kvtier::cli::FormatBenchPrefixTable(*r));
    return 0;
  }

  if (pac->parsed()) {
    auto r = kvtier::cli::RunPrefixAgreement(pa, ProgressBar("prompt"));
    if (!r.ok()) return Fail("prefix-agreement", r.status());
    std::cout << (pa_json ? kvtier::cli::FormatPrefixAgreementJson(*r)
                          : kvtier::cli::FormatPrefixAgreementTable(*r));
    return 0;
  }

  if (bmc->parsed()) {
    auto r = kvtier::cli::RunBenchModel(bm, ProgressBar("config"));
    if (!r.ok()) return Fail("bench-model", r.status());
    std::cout << (bm_json ? kvtier::cli::FormatBenchModelJson(*r)
                          : kvtier::cli::FormatBenchModelTable(*r));
    return 0;
  }

  if (g->parsed()) {
    auto st = kvtier::cli::RunGenerate(gen, std::cout);
    std::cout << std::endl;
    if (!st.ok()) return Fail("generate", st.status());
    if (gen_stats) {
      std::fprintf(stderr,
                   "prompt %u tokens in %.1f ms (%.1f tok/s); generated %u tokens in %.1f ms "
                   "(%.1f tok/s); stop: %s\n",
                   st->prompt_tokens, st->prefill_ms,
                   st->prompt_tokens * 1e3 / std::max(st->prefill_ms, 1e-9), st->generated_tokens,
                   st->decode_ms, st->generated_tokens * 1e3 / std::max(st->decode_ms, 1e-9),
                   st->stop_reason.c_str());
    }
    return 0;
  }

  if (pp->parsed()) {
    auto r = kvtier::cli::RunPerplexity(ppl, ProgressBar("window"));
    if (!r.ok()) return Fail("perplexity", r.status());
    std::cout << (ppl_json ? kvtier::cli::FormatPerplexityJson(*r)
                           : kvtier::cli::FormatPerplexityText(*r));
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
