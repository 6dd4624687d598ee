// The command-line flags of the subcommands that keep them beside their module (`kvtier
// bench-ssd`, `bench-serve`, `cache`, `make-test-model`, `serve`): one translation unit with
// CLI11 besides main.cc, because CLI11's header-only templates cost more to compile than the
// commands.
#include <CLI/CLI.hpp>

#include "cli/bench_serve.h"
#include "cli/bench_ssd.h"
#include "cli/cache_cmd.h"
#include "cli/make_test_model.h"
#include "cli/serve.h"
#include "kvtier/format.h"

namespace kvtier::cli {

// bench_ssd.cc
CLI::App* AddBenchSsd(CLI::App& app, BenchSsdConfig* c, bool* json) {
  CLI::App* s = app.add_subcommand(
      "bench-ssd",
      "SSD tier: spill and reload throughput against a plain sequential write / read of the "
      "same bytes, and time to first token of a long prompt served from SSD vs cold prefill");
  s->add_option("--modes", c->modes, "Comma-separated: throughput (no model), ttft (a model)")
      ->capture_default_str();
  s->add_option("--kv-type", c->kv_type, "K/V format, K or K/V: " + ValidFormatsHelp())
      ->capture_default_str();
  s->add_option("--layers", c->layers, "throughput: layers of a block")->capture_default_str();
  s->add_option("--kv-heads", c->kv_heads, "throughput: KV heads")->capture_default_str();
  s->add_option("--head-dim", c->head_dim, "throughput: head dimension")->capture_default_str();
  s->add_option("--block-tokens", c->block_tokens, "throughput: tokens per block")
      ->capture_default_str();
  s->add_option("--gb", c->gb, "throughput: block file bytes to spill, GB (1e9 bytes)")
      ->capture_default_str();
  s->add_option("--dir", c->dir,
                "Existing directory to work in (a fresh subdirectory, removed at the end; "
                "default /tmp)");
  s->add_option("--writer-threads", c->writer_threads, "Tier writer threads (0: the tier's default)")
      ->capture_default_str();
  s->add_option("--ssd-sync", c->ssd_sync,
                "How writers make a batch durable: per-file (fdatasync each file, fsync each "
                "directory) or syncfs (two syncfs per batch); default: the tier's (syncfs)");
  s->add_option("--ssd-layout", c->ssd_layout,
                "How blocks go to disk: segments (one file per writer batch) or files (one "
                "file per block); default: the tier's (segments)");
  s->add_option("--repeats", c->repeats, "Runs of every measurement; the median counts")
      ->capture_default_str();
  s->add_flag("--no-cold", [c](int64_t) { c->cold = false; },
              "Skip the reads with the page cache dropped");
  s->add_option("--model", c->model, "ttft: GGUF model (default: the bundled model)");
  s->add_option("--prompt-tokens", c->prompt_tokens, "ttft: prompt length")->capture_default_str();
  s->add_option("--new-tokens", c->new_tokens, "ttft: tokens appended for the prefix hit")
      ->capture_default_str();
  s->add_option("--text", c->text,
                "ttft: text the prompt is tokenized from (default data/corpus/eval.txt when "
                "present, else random ids); 'random': seeded random token ids");
  s->add_option("--ubatch", c->ubatch, "ttft: prompt tokens per forward call")->capture_default_str();
  s->add_option("--cold-repeats", c->cold_repeats, "ttft: cold prefills; the median counts")
      ->capture_default_str();
  s->add_option("--threads", c->threads, "ttft: model threads (0: all cores)")->capture_default_str();
  s->add_option("--seed", c->seed, "Seed of the random K/V, token ids and bytes")
      ->capture_default_str();
  s->add_flag("--json", *json, "Print one JSON object");
  return s;
}

// cache_cmd.cc
CLI::App* AddCacheCommand(CLI::App& app, CacheCommand* cmd) {
  CLI::App* c = app.add_subcommand("cache", "The SSD tier's directory: stats, verify, clear, formats");
  c->require_subcommand(1);
  for (const char* action : {"stats", "verify", "clear"}) {
    const std::string help = std::string(action) == "stats"    ? "Blocks, bytes and namespaces on disk"
                             : std::string(action) == "verify" ? "Read and check every block file"
                                                               : "Remove every block file";
    CLI::App* s = c->add_subcommand(action, help);
    s->add_option("--dir", cmd->dir, "The SSD cache directory")->required();
    s->add_flag("--json", cmd->json, "Print JSON");
    s->callback([cmd, action] { cmd->action = action; });
  }
  CLI::App* f = c->add_subcommand("formats", "Every format the tier stores, checked now");
  f->add_flag("--json", cmd->json, "Print JSON");
  f->callback([cmd] { cmd->action = "formats"; });
  return c;
}

// make_test_model.cc
CLI::App* AddMakeTestModel(CLI::App& app, MakeTestModelFlags* f) {
  TestModelConfig& c = f->config;
  CLI::App* m = app.add_subcommand(
      "make-test-model",
      "Write a seeded random llama/qwen2/qwen3 model as GGUF (llama.cpp names and keys, "
      "byte-level BPE tokenizer); defaults: Qwen3-0.6B's shape");
  m->add_option("--out", f->out, "Output GGUF file")->required();
  m->add_option("--arch", c.arch, "llama, qwen2 or qwen3")->capture_default_str();
  m->add_option("--hidden", c.hidden, "Embedding length")->capture_default_str();
  m->add_option("--layers", c.layers, "Blocks")->capture_default_str();
  m->add_option("--heads", c.heads, "Query heads")->capture_default_str();
  m->add_option("--kv-heads", c.kv_heads, "KV heads")->capture_default_str();
  m->add_option("--head-dim", c.head_dim, "Head dimension")->capture_default_str();
  m->add_option("--ffn", c.ffn, "Feed-forward length")->capture_default_str();
  m->add_option("--vocab", c.vocab, "Vocabulary size (at least 259)")->capture_default_str();
  m->add_option("--ctx", c.ctx, "Context length")->capture_default_str();
  m->add_option("--rope-theta", c.rope_theta, "RoPE base frequency")->capture_default_str();
  m->add_option("--weight-type", f->weight_type, "f16, bf16, f32, q8_0 or q4_0")
      ->capture_default_str();
  m->add_flag("--tied", c.tied, "Output projection shares token_embd (default)");
  m->add_flag("--no-tied", f->no_tied, "Write a separate output.weight");
  m->add_option("--seed", c.seed, "Seed of the weights")->capture_default_str();
  m->add_option("--name", c.name, "general.name (default kvtier-test-<arch>)");
  m->add_flag("--text-fillers", c.text_fillers,
              "Filler tokens are user-defined, so the random model's answers render as text "
              "('<|filler_N|>'; default: control tokens, rendered as nothing)");
  return m;
}

// serve.cc
CLI::App* AddServeCommand(CLI::App& app, ServeConfig* c) {
  CLI::App* s = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server over the tiered, quantized KV cache");
  s->add_option("--model", c->model, "GGUF model (default: the bundled model)");
  s->add_option("--host", c->host, "Address to listen on")->capture_default_str();
  s->add_option("--port", c->port, "Port (0: any free port)")->capture_default_str();
  s->add_option("--max-num-seqs", c->max_num_seqs, "Requests in the running batch at most")
      ->capture_default_str();
  s->add_option("--prefill-step-size", c->prefill_step,
                "Prompt tokens per request per step (chunked prefill)")
      ->capture_default_str();
  s->add_option("--kv-cache-dtype", c->kv_cache_dtype,
                "Active KV format, K or K/V (f16, bf16, f32, q8_0, q4_0, affine<b>g<g>)")
      ->capture_default_str();
  s->add_flag("--kv-cache-quantization", c->kv_cache_quantization,
              "Quantize prefix-cache entries on store (MLX affine)");
  s->add_option("--kv-cache-quantization-bits", c->kv_quantization_bits, "8 or 4")
      ->capture_default_str();
  s->add_option("--kv-cache-quantization-group-size", c->kv_quantization_group, "32, 64 or 128")
      ->capture_default_str();
  s->add_option("--kv-cache-min-quantize-tokens", c->min_quantize_tokens,
                "Entries shorter than this stay unquantized")
      ->capture_default_str();
  s->add_option("--cache-memory-mb", c->cache_memory_mb, "RAM prefix cache budget in MB");
  s->add_option("--cache-memory-percent", c->cache_memory_percent,
                "RAM prefix cache budget in percent of RAM (default 10 when neither is given)");
  s->add_flag("--disable-prefix-cache", c->disable_prefix_cache, "No prefix cache (nor SSD tier)");
  s->add_option("--ssd-cache-dir", c->ssd_cache_dir,
                "Directory of the SSD tier (spills and reloads KV blocks; survives restarts)");
  s->add_option("--ssd-cache-max-gb", c->ssd_cache_max_gb, "Size cap of the SSD tier")
      ->capture_default_str();
  s->add_option("--threads", c->threads, "Compute threads (0: every core)")->capture_default_str();
  s->add_option("--kv-pool-mb", c->kv_pool_mb,
                "Active KV pool size in MB (default: two full contexts per --max-num-seqs)");
  s->add_option("--max-model-len", c->max_model_len,
                "Context length, prompt plus completion (default: the model's)");
  s->add_option("--block-tokens", c->block_tokens, "Tokens per KV block")->capture_default_str();
  s->add_option("--max-body-mb", c->max_body_mb, "Largest request body")->capture_default_str();
  s->add_option("--drain-seconds", c->drain_seconds,
                "On SIGTERM, how long requests in flight may take to finish")
      ->capture_default_str();
  return s;
}

// bench_serve.cc
CLI::App* AddBenchServe(CLI::App& app, BenchServeConfig* c, bool* json_out) {
  CLI::App* s = app.add_subcommand(
      "bench-serve",
      "End-to-end benchmark of an OpenAI-compatible server (kvtier serve started here, or "
      "--url): TTFT, decode tokens/s, prefix-cache hits, KV bytes by tier, peak RSS");
  s->add_option("--workload", c->workload,
                "multiturn, two-round, batched-histories or concurrency")
      ->capture_default_str();
  s->add_option("--url", c->url,
                "Drive this server (http://HOST:PORT) instead of starting kvtier serve");
  s->add_option_function<std::vector<std::string>>(
       "--server-arg",
       [c](const std::vector<std::string>& v) {
         c->server_args.insert(c->server_args.end(), v.begin(), v.end());
       },
       "An argument for the kvtier serve started here (repeatable; --server-arg=--flag=value), "
       "or give them all after --")
      ->allow_extra_args(false);
  s->add_option_function<std::vector<std::string>>(
      "server-args",
      [c](const std::vector<std::string>& v) {
        c->server_args.insert(c->server_args.end(), v.begin(), v.end());
      },
      "Arguments after --: for the kvtier serve started here");
  s->add_option("--server-pid", c->server_pid, "With --url: the server's pid, for its peak RSS");
  s->add_option("--api", c->api, "completions (/v1/completions) or chat (/v1/chat/completions)")
      ->capture_default_str();
  s->add_option("--model", c->model,
                "GGUF model of the kvtier serve started here (default: the bundled model); "
                "with --url, the requests' \"model\"");
  s->add_option("--text", c->text,
                "Text the prompts are cut from (default: data/corpus/eval.txt; 'random': "
                "seeded random words)");
  s->add_option("--conversations", c->conversations, "multiturn: conversations at once")
      ->capture_default_str();
  s->add_option("--rounds", c->rounds, "multiturn: rounds per conversation")
      ->capture_default_str();
  s->add_option("--system-tokens", c->system_tokens, "multiturn: shared system prompt")
      ->capture_default_str();
  s->add_option("--turn-tokens", c->turn_tokens, "Tokens of each new user turn")
      ->capture_default_str();
  s->add_option("--max-tokens", c->max_tokens, "Completion tokens per request")
      ->capture_default_str();
  s->add_option("--context-tokens", c->context_tokens, "two-round: round 1's prompt")
      ->capture_default_str();
  s->add_option("--batch", c->batch, "batched-histories: histories decoding together")
      ->capture_default_str();
  s->add_option("--history-tokens", c->history_tokens, "batched-histories: tokens per history")
      ->capture_default_str();
  s->add_option("--clients", c->clients, "concurrency: clients at once")->capture_default_str();
  s->add_option("--requests-per-client", c->requests_per_client,
                "concurrency: requests each client sends in turn")
      ->capture_default_str();
  s->add_option("--prompt-tokens", c->prompt_tokens, "concurrency: tokens per prompt")
      ->capture_default_str();
  s->add_option("--sweep-contexts", c->sweep_contexts,
                "Comma-separated context lengths: one run each (two-round: --context-tokens, "
                "batched-histories: --history-tokens)");
  s->add_option("--sweep-formats", c->sweep_formats,
                "Comma-separated KV formats: one run each, the server restarted with "
                "--kv-cache-dtype FMT");
  s->add_option("--plots", c->plots_dir,
                "Folder for gnuplot data, scripts and PNGs of TTFT and decode tokens/s against "
                "context length per KV format");
  s->add_option("--chars-per-token", c->chars_per_token,
                "Size prompts with this many characters per token instead of calibrating "
                "(0: calibrate through the server's /tokenize, else one short request)")
      ->capture_default_str();
  s->add_option("--timeout", c->timeout_s, "Seconds a request (or the server's start) may take")
      ->capture_default_str();
  s->add_option("--metrics-interval", c->metrics_interval_s, "Seconds between /metrics scrapes")
      ->capture_default_str();
  s->add_option("--seed", c->seed, "Seed of --text random")->capture_default_str();
  s->add_flag("--json", *json_out, "Print one JSON object instead of the table");
  return s;
}

}  // namespace kvtier::cli
