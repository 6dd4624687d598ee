// kvtier-bench's commands: each declares its flags and returns its run function (command.h).
// The report of each goes through its Format*Table / Format*Json, printed by Report() below.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "cli/bench_attention.h"
#include "cli/bench_kv_cache.h"
#include "cli/bench_kv_paged.h"
#include "cli/bench_model.h"
#include "cli/bench_prefix.h"
#include "cli/bench_serve.h"
#include "cli/bench_ssd.h"
#include "cli/commands.h"
#include "kvtier/format.h"

namespace kvtier::cli {
namespace {

// Prints the report as a table or, with --json, one JSON object; errors as Fail does.
template <typename R, typename Table, typename Json>
int Report(const std::string& name, const Result<R>& r, bool json, Table table, Json to_json) {
  if (!r.ok()) return Fail("kvtier-bench " + name, r.status());
  std::cout << (json ? to_json(*r) : table(*r));
  return 0;
}

const std::string kKvTypesHelp =
    "Comma-separated KV formats, each K or K/V: " + ValidFormatsHelp();

}  // namespace

std::vector<Command> BenchCommands() {
  std::vector<Command> t;
  t.push_back({"kv-cache", "Memory, accuracy and speed of KV row formats on synthetic K/V",
               {"bench-kv-cache"}, [](CLI::App& s) -> CommandRun {
    auto c = std::make_shared<BenchKvCacheConfig>();
    auto dtype = std::make_shared<std::string>("f16");
    auto json = std::make_shared<bool>(false);
    s.add_option("--layers", c->layers, "Layers")->capture_default_str();
    s.add_option("--seq-len", c->seq_len, "Tokens per sequence")->capture_default_str();
    s.add_option("--heads", c->heads, "KV heads")->capture_default_str();
    s.add_option("--head-dim", c->head_dim, "Head dimension")->capture_default_str();
    s.add_option("--group-size", c->group_size, "Group size of affine formats (32, 64, 128)")
        ->capture_default_str();
    s.add_option("--kv-type", c->formats,
                 "Comma-separated formats: " + ValidFormatsHelp() +
                     "; affine without g<group> uses --group-size")
        ->capture_default_str();
    s.add_option("--dtype", *dtype, "Source dtype: f32, f16, bf16 (affine scales use it too)")
        ->capture_default_str();
    s.add_option("--seed", c->seed, "Seed of the standard-normal data")->capture_default_str();
    s.add_option("--threads", c->threads, "Threads (0: all cores)")->capture_default_str();
    s.add_option("--repeats", c->repeats, "Runs of each timed step; the median counts")
        ->capture_default_str();
    s.add_flag("--json", *json, "Print one JSON object instead of a table");
    return [c, dtype, json] {
      Result<DType> dt = ParseDType(*dtype);
      if (!dt.ok()) {
        return Fail("kvtier-bench kv-cache",
                    Status::InvalidArgument("--dtype: " + dt.status().message()));
      }
      c->dtype = *dt;
      return Report("kv-cache", RunBenchKvCache(*c, ProgressBar("layer")), *json,
                    FormatBenchKvCacheTable, FormatBenchKvCacheJson);
    };
  }});

  t.push_back({"kv-paged",
               "Bytes per token of the paged KV cache per format, and the time and bytes "
               "copied of batch merge / extract / filter / extend at several context lengths",
               {"bench-kv-paged"}, [](CLI::App& s) -> CommandRun {
    auto c = std::make_shared<BenchKvPagedConfig>();
    auto json = std::make_shared<bool>(false);
    s.add_option("--layers", c->layers, "Layers")->capture_default_str();
    s.add_option("--kv-heads", c->kv_heads, "KV heads")->capture_default_str();
    s.add_option("--head-dim", c->head_dim, "Head dimension")->capture_default_str();
    s.add_option("--block-tokens", c->block_tokens, "Tokens per KV block")
        ->capture_default_str();
    s.add_option("--kv-type", c->formats, kKvTypesHelp + " (the bytes-per-token table)")
        ->capture_default_str();
    s.add_option("--timed-kv-type", c->ops_format,
                 "KV format (K or K/V) of the cache the batch operations are timed on")
        ->capture_default_str();
    s.add_option("--rows", c->rows, "Rows of the batch")->capture_default_str();
    s.add_option("--contexts", c->contexts, "Comma-separated tokens per row")
        ->capture_default_str();
    s.add_option("--repeats", c->repeats, "Runs of each timed step; the median counts")
        ->capture_default_str();
    s.add_option("--threads", c->threads, "Threads filling the rows (0: all cores)")
        ->capture_default_str();
    s.add_option("--seed", c->seed, "Seed of the K/V data")->capture_default_str();
    s.add_flag("--json", *json, "Print one JSON object instead of a table");
    return [c, json] {
      return Report("kv-paged", RunBenchKvPaged(*c, ProgressBar("step")), *json,
                    FormatBenchKvPagedTable, FormatBenchKvPagedJson);
    };
  }});

  t.push_back({"attention",
               "Fused attention on paged KV per format, decode and prefill, against roofline "
               "floors",
               {"bench-attention"}, [](CLI::App& s) -> CommandRun {
    auto c = std::make_shared<BenchAttentionConfig>();
    auto json = std::make_shared<bool>(false);
    s.add_option("--ctx", c->ctx, "Comma-separated decode contexts")->capture_default_str();
    s.add_option("--prefill-ctx", c->prefill_ctx, "Comma-separated prefill contexts")
        ->capture_default_str();
    s.add_option("--batch", c->batches, "Comma-separated decode batch sizes")
        ->capture_default_str();
    s.add_option("--modes", c->modes, "decode, prefill or both")->capture_default_str();
    s.add_option("--prefill-chunk", c->prefill_chunk, "Queries per prefill row")
        ->capture_default_str();
    s.add_option("--heads", c->heads, "Query heads")->capture_default_str();
    s.add_option("--kv-heads", c->kv_heads, "KV heads")->capture_default_str();
    s.add_option("--head-dim", c->head_dim, "Head dimension")->capture_default_str();
    s.add_option("--block-tokens", c->block_tokens, "Tokens per KV block")
        ->capture_default_str();
    s.add_option("--kv-type", c->formats, kKvTypesHelp)->capture_default_str();
    s.add_option("--repeats", c->repeats, "Timed calls per row; the median counts")
        ->capture_default_str();
    s.add_option("--threads", c->threads, "Threads (0: all cores)")->capture_default_str();
    s.add_option("--seed", c->seed, "Seed of the K/V and query data")->capture_default_str();
    s.add_flag("--json", *json, "Print one JSON object instead of a table");
    return [c, json] {
      return Report("attention", RunBenchAttention(*c, ProgressBar("step")), *json,
                    FormatBenchAttentionTable, FormatBenchAttentionJson);
    };
  }});

  t.push_back({"model",
               "Prefill and decode tokens/s of a model at context depths per KV format "
               "(llama-bench's pp/tg at depth)",
               {"bench-model"}, [](CLI::App& s) -> CommandRun {
    auto c = std::make_shared<BenchModelConfig>();
    auto json = std::make_shared<bool>(false);
    s.add_option("--model", c->model, "GGUF model (default: the bundled model)");
    s.add_option("--depth", c->depths, "Comma-separated context depths")->capture_default_str();
    s.add_option("--kv-type", c->kv_types, kKvTypesHelp)->capture_default_str();
    s.add_option("--prefill", c->prefill, "Prompt tokens timed per repeat")
        ->capture_default_str();
    s.add_option("--decode", c->decode, "Decode steps timed per repeat")->capture_default_str();
    s.add_option("--repeats", c->repeats, "Repeats; the median counts")->capture_default_str();
    s.add_option("--threads", c->threads, "Threads (0: all cores)")->capture_default_str();
    s.add_option("--seed", c->seed, "Seed of the filler K/V and tokens")->capture_default_str();
    s.add_option("--matmul", c->matmul,
                 "Matmul kernels for quantized weights: auto, float, int8-scalar, int8-avx2, "
                 "int8-avx512")
        ->capture_default_str();
    s.add_flag("--json", *json, "Print one JSON object");
    return [c, json] {
      return Report("model", RunBenchModel(*c, ProgressBar("config")), *json,
                    FormatBenchModelTable, FormatBenchModelJson);
    };
  }});

  t.push_back({"prefix",
               "Time to first token of long prompts cold vs after a RAM prefix-cache hit "
               "(exact and prefix hits), per store format, with the bytes the cache holds per "
               "token",
               {"bench-prefix"}, [](CLI::App& s) -> CommandRun {
    auto c = std::make_shared<BenchPrefixConfig>();
    auto json = std::make_shared<bool>(false);
    s.add_option("--model", c->model, "GGUF model (default: the bundled model)");
    s.add_option("--kv-type", c->kv_type, "Active KV format, K or K/V")->capture_default_str();
    s.add_option("--prompt-tokens", c->prompt_tokens, "Comma-separated prompt lengths")
        ->capture_default_str();
    s.add_option("--store-types", c->store_types,
                 "Comma-separated store formats: 'active' (kept as computed, used in place) "
                 "or a format entries are quantized to on store")
        ->capture_default_str();
    s.add_option("--text", c->text,
                 "Text the prompts are tokenized from (default: data/corpus/eval.txt when "
                 "present, else random ids); 'random': seeded random token ids");
    s.add_option("--ubatch", c->ubatch, "Prompt tokens per forward call")->capture_default_str();
    s.add_option("--repeats", c->repeats, "Warm runs and stores per case; the median counts")
        ->capture_default_str();
    s.add_option("--cold-repeats", c->cold_repeats,
                 "Cold prefills per length; the median counts")
        ->capture_default_str();
    s.add_option("--threads", c->threads, "Threads (0: all cores)")->capture_default_str();
    s.add_option("--seed", c->seed, "Seed of random prompt ids")->capture_default_str();
    s.add_flag("--json", *json, "Print one JSON object");
    return [c, json] {
      return Report("prefix", RunBenchPrefix(*c, ProgressBar("step")), *json,
                    FormatBenchPrefixTable, FormatBenchPrefixJson);
    };
  }});

  t.push_back({"prefix-agreement",
               "Greedy-token agreement with the cold run of prompts served from the prefix "
               "cache, per store format (quantize on store)",
               {}, [](CLI::App& s) -> CommandRun {
    auto c = std::make_shared<PrefixAgreementConfig>();
    auto json = std::make_shared<bool>(false);
    s.add_option("--model", c->model, "GGUF model (default: the bundled model)");
    s.add_option("--kv-type", c->kv_type, "Active KV format, K or K/V")->capture_default_str();
    s.add_option("--prompts", c->prompts, "Prompts (windows of the text)")->capture_default_str();
    s.add_option("--min-tokens", c->min_tokens, "Shortest window")->capture_default_str();
    s.add_option("--max-tokens", c->max_tokens, "Longest window")->capture_default_str();
    s.add_option("--generate", c->generate, "Greedy tokens per prompt")->capture_default_str();
    s.add_option("--store-types", c->store_types,
                 "Comma-separated store formats ('active' or a format)")
        ->capture_default_str();
    s.add_option("--text", c->text, "As prefix --text");
    s.add_option("--ubatch", c->ubatch, "Prompt tokens per forward call")->capture_default_str();
    s.add_option("--threads", c->threads, "Threads (0: all cores)")->capture_default_str();
    s.add_option("--seed", c->seed, "Seed of the window lengths")->capture_default_str();
    s.add_flag("--json", *json, "Print one JSON object");
    return [c, json] {
      return Report("prefix-agreement", RunPrefixAgreement(*c, ProgressBar("prompt")), *json,
                    FormatPrefixAgreementTable, FormatPrefixAgreementJson);
    };
  }});

  t.push_back({"ssd",
               "SSD tier: spill and reload throughput against a plain sequential write / read "
               "of the same bytes, and time to first token of a long prompt served from SSD vs "
               "cold prefill",
               {"bench-ssd"}, [](CLI::App& s) -> CommandRun {
    auto c = std::make_shared<BenchSsdConfig>();
    auto json = std::make_shared<bool>(false);
    s.add_option("--modes", c->modes, "Comma-separated: throughput (no model), ttft (a model)")
        ->capture_default_str();
    s.add_option("--kv-type", c->kv_type, "K/V format, K or K/V: " + ValidFormatsHelp())
        ->capture_default_str();
    s.add_option("--layers", c->layers, "throughput: layers of a block")->capture_default_str();
    s.add_option("--kv-heads", c->kv_heads, "throughput: KV heads")->capture_default_str();
    s.add_option("--head-dim", c->head_dim, "throughput: head dimension")->capture_default_str();
    s.add_option("--block-tokens", c->block_tokens, "throughput: tokens per block")
        ->capture_default_str();
    s.add_option("--gb", c->gb, "throughput: block file bytes to spill, GB (1e9 bytes)")
        ->capture_default_str();
    s.add_option("--dir", c->dir,
                 "Existing directory to work in (a fresh subdirectory, removed at the end; "
                 "default /tmp)");
    s.add_option("--writer-threads", c->writer_threads, "Tier writer threads (0: the tier's default)")
        ->capture_default_str();
    s.add_option("--ssd-sync", c->ssd_sync,
                 "How writers make a batch durable: per-file (fdatasync each file, fsync each "
                 "directory) or syncfs (two syncfs per batch); default: the tier's (syncfs)");
    s.add_option("--ssd-layout", c->ssd_layout,
                 "How blocks go to disk: segments (one file per writer batch) or files (one "
                 "file per block); default: the tier's (segments)");
    s.add_option("--repeats", c->repeats, "Runs of every measurement; the median counts")
        ->capture_default_str();
    s.add_flag("--no-cold", [c](int64_t) { c->cold = false; },
                "Skip the reads with the page cache dropped");
    s.add_option("--model", c->model, "ttft: GGUF model (default: the bundled model)");
    s.add_option("--prompt-tokens", c->prompt_tokens, "ttft: prompt length")->capture_default_str();
    s.add_option("--new-tokens", c->new_tokens, "ttft: tokens appended for the prefix hit")
        ->capture_default_str();
    s.add_option("--text", c->text,
                 "ttft: text the prompt is tokenized from (default data/corpus/eval.txt when "
                 "present, else random ids); 'random': seeded random token ids");
    s.add_option("--ubatch", c->ubatch, "ttft: prompt tokens per forward call")->capture_default_str();
    s.add_option("--cold-repeats", c->cold_repeats, "ttft: cold prefills; the median counts")
        ->capture_default_str();
    s.add_option("--threads", c->threads, "ttft: model threads (0: all cores)")->capture_default_str();
    s.add_option("--seed", c->seed, "Seed of the random K/V, token ids and bytes")
        ->capture_default_str();
    s.add_flag("--json", *json, "Print one JSON object");
    return [c, json] {
      return Report("ssd", RunBenchSsd(*c, ProgressBar("step")), *json, FormatBenchSsdTable,
                    FormatBenchSsdJson);
    };
  }});

  t.push_back({"serve",
               "End-to-end benchmark of an OpenAI-compatible server (kvtier serve started "
               "here, or --url): TTFT, decode tokens/s, prefix-cache hits, KV bytes by tier, "
               "peak RSS",
               {"bench-serve"}, [](CLI::App& s) -> CommandRun {
    auto c = std::make_shared<BenchServeConfig>();
    auto json = std::make_shared<bool>(false);
    s.add_option("--workload", c->workload,
                 "multiturn, two-round, batched-histories, concurrency or agent")
        ->capture_default_str();
    s.add_option("--url", c->url,
                 "Drive this server (http://HOST:PORT) instead of starting kvtier serve");
    s.add_option_function<std::vector<std::string>>(
         "--server-arg",
         [c](const std::vector<std::string>& v) {
           c->server_args.insert(c->server_args.end(), v.begin(), v.end());
         },
         "An argument for the kvtier serve started here (repeatable; --server-arg=--flag=value), "
         "or give them all after --")
        ->allow_extra_args(false);
    s.add_option_function<std::vector<std::string>>(
        "server-args",
        [c](const std::vector<std::string>& v) {
          c->server_args.insert(c->server_args.end(), v.begin(), v.end());
        },
        "Arguments after --: for the kvtier serve started here");
    s.add_option("--server-bin", c->server_bin,
                 "The kvtier binary whose serve is started here (default: kvtier beside "
                 "kvtier-bench)");
    s.add_option("--server-log", c->server_log,
                 "Append the kvtier serve's log (stderr: its cache lines) to this file and keep "
                 "it (default: a temporary file, removed)");
    s.add_option("--server-pid", c->server_pid, "With --url: the server's pid, for its peak RSS");
    s.add_option("--api", c->api, "completions (/v1/completions) or chat (/v1/chat/completions)")
        ->capture_default_str();
    s.add_option("--model", c->model,
                 "GGUF model of the kvtier serve started here (default: the bundled model); "
                 "with --url, the requests' \"model\"");
    s.add_option("--text", c->text,
                 "Text the prompts are cut from (default: data/corpus/eval.txt; 'random': "
                 "seeded random words)");
    s.add_option("--conversations", c->conversations, "multiturn: conversations at once")
        ->capture_default_str();
    s.add_option("--rounds", c->rounds, "multiturn: rounds per conversation")
        ->capture_default_str();
    s.add_option("--system-tokens", c->system_tokens, "multiturn: shared system prompt")
        ->capture_default_str();
    s.add_option("--turn-tokens", c->turn_tokens, "Tokens of each new user turn")
        ->capture_default_str();
    s.add_option("--max-tokens", c->max_tokens, "Completion tokens per request")
        ->capture_default_str();
    s.add_option("--response-format", c->response_format,
                 "JSON sent as every request's response_format (e.g. '{\"type\":\"json_object\"}')");
    s.add_option("--context-tokens", c->context_tokens, "two-round: round 1's prompt")
        ->capture_default_str();
    s.add_option("--batch", c->batch, "batched-histories: histories decoding together")
        ->capture_default_str();
    s.add_option("--history-tokens", c->history_tokens, "batched-histories: tokens per history")
        ->capture_default_str();
    s.add_option("--clients", c->clients, "concurrency: clients at once")->capture_default_str();
    s.add_option("--requests-per-client", c->requests_per_client,
                 "concurrency: requests each client sends in turn")
        ->capture_default_str();
    s.add_option("--prompt-tokens", c->prompt_tokens, "concurrency: tokens per prompt")
        ->capture_default_str();
    s.add_option("--sweep-contexts", c->sweep_contexts,
                 "Comma-separated context lengths: one run each (two-round: --context-tokens, "
                 "batched-histories: --history-tokens)");
    s.add_option("--kv-type", c->kv_types,
                 "Comma-separated KV formats, each K or K/V: the server started here runs "
                 "with each in turn (--kv-type FMT; several: two-round or batched-histories)");
    s.add_option("--plots", c->plots_dir,
                 "Folder for gnuplot data, scripts and PNGs of TTFT and decode tokens/s against "
                 "context length per KV format");
    s.add_option("--chars-per-token", c->chars_per_token,
                 "Size prompts with this many characters per token instead of calibrating "
                 "(0: calibrate through the server's /tokenize, else one short request)")
        ->capture_default_str();
    s.add_option("--timeout", c->timeout_s, "Seconds a request (or the server's start) may take")
        ->capture_default_str();
    s.add_option("--metrics-interval", c->metrics_interval_s, "Seconds between /metrics scrapes")
        ->capture_default_str();
    s.add_option("--seed", c->seed, "Seed of --text random")->capture_default_str();
    s.add_flag("--json", *json, "Print one JSON object instead of the table");
    return [c, json] { return RunBenchServeCommand(*c, *json, ProgressBar("request")); };
  }});
  return t;
}

}  // namespace kvtier::cli
