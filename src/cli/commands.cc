// kvtier's user commands: each declares its flags and returns its run function (command.h).
// One translation unit with CLI11 besides command.cc, because CLI11's header-only templates
// cost more to compile than the commands.
#include "cli/commands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/cache_cmd.h"
#include "cli/check_model.h"
#include "cli/generate.h"
#include "cli/make_test_model.h"
#include "cli/render_chat.h"
#include "cli/quantize_cmd.h"
#include "cli/serve.h"
#include "cli/tokenize.h"
#include "kvtier/format.h"

namespace kvtier::cli {
namespace {

const std::string kKvTypeHelp = "KV cache format, K or K/V: " + ValidFormatsHelp();
const char* const kDeviceHelp =
    "cpu, or cuda: weights and KV cache on the GPU (a build with -DKVTIER_CUDA=ON)";

void AddSamplingFlags(CLI::App& s, SamplingParams* p) {
  s.add_option("--temperature", p->temperature, "0: greedy")->capture_default_str();
  s.add_option("--top-p", p->top_p, "Nucleus sampling mass")->capture_default_str();
  s.add_option("--top-k", p->top_k, "0: off")->capture_default_str();
  s.add_option("--seed", p->seed, "Sampling seed")->capture_default_str();
  s.add_option("--presence-penalty", p->presence_penalty)->capture_default_str();
  s.add_option("--frequency-penalty", p->frequency_penalty)->capture_default_str();
}

}  // namespace

std::vector<Command> UserCommands() {
  return {ServeCommand(),      GenerateCommand(), ChatCommand(),          TokenizeCommand(),
          PerplexityCommand(), CacheDirCommand(), MakeTestModelCommand(), CheckModelCommand(),
          RenderChatCommand(), QuantizeCommand()};
}

Command ServeCommand() {
  return {"serve", "OpenAI-compatible HTTP server over the tiered, quantized KV cache", {},
          [](CLI::App& s) -> CommandRun {
    auto c = std::make_shared<ServeConfig>();
    s.add_option("--model", c->model, "GGUF model (default: the bundled model)");
    s.add_option("--host", c->host, "Address to listen on")->capture_default_str();
    s.add_option("--port", c->port, "Port (0: any free port)")->capture_default_str();
    s.add_option("--max-num-seqs", c->max_num_seqs, "Requests in the running batch at most")
        ->capture_default_str();
    s.add_option("--prefill-step-size", c->prefill_step,
                 "Prompt tokens per request per step (chunked prefill)")
        ->capture_default_str();
    s.add_option("--kv-type,--kv-cache-dtype", c->kv_type,
                 "Active KV format, K or K/V (f16, bf16, f32, q8_0, q4_0, affine<b>g<g>, "
                 "rot<b>s<seed>)")
        ->capture_default_str();
    s.add_option("--kv-store-type", c->kv_store_type,
                 "Format of prefix-cache entries of --kv-cache-min-quantize-tokens or more in "
                 "RAM, on SSD and remote, K or K/V as --kv-type (e.g. chan4g64/rot4s0; "
                 "'active': the active formats)")
        ->capture_default_str();
    s.add_flag("--kv-cache-quantization", c->kv_cache_quantization,
               "Quantize prefix-cache entries on store with MLX affine (overrides "
               "--kv-store-type)");
    s.add_option("--kv-cache-quantization-bits", c->kv_quantization_bits, "8 or 4")
        ->capture_default_str();
    s.add_option("--kv-cache-quantization-group-size", c->kv_quantization_group, "32, 64 or 128")
        ->capture_default_str();
    s.add_option("--kv-cache-min-quantize-tokens", c->min_quantize_tokens,
                 "Entries shorter than this stay unquantized")
        ->capture_default_str();
    s.add_option("--cache-memory-mb", c->cache_memory_mb, "RAM prefix cache budget in MB");
    s.add_option("--cache-memory-percent", c->cache_memory_percent,
                 "RAM prefix cache budget in percent of RAM (default 10 when neither is given)");
    s.add_flag("--disable-prefix-cache", c->disable_prefix_cache,
               "No prefix cache (nor SSD tier)");
    s.add_option("--ssd-cache-dir", c->ssd_cache_dir,
                 "Directory of the SSD tier (spills and reloads KV blocks; survives restarts)");
    s.add_option("--ssd-cache-max-gb", c->ssd_cache_max_gb, "Size cap of the SSD tier")
        ->capture_default_str();
    s.add_option("--state-type", c->state_type,
                 "Recurrent-state snapshots (qwen35) in the cache tiers: f32, or bf16 (half "
                 "the bytes; docs/results/prefix-cache.md)")
        ->capture_default_str();
    s.add_option("--cache-write-policy", c->cache_write_policy,
                 "write-back (blocks go down when RAM evicts them) or write-through (at once); "
                 "default write-back, write-through with --remote-cache");
    s.add_option("--remote-cache", c->remote_cache,
                 "Shared remote tier below the SSD tier: redis://HOST:PORT (one Redis) or "
                 "redis://HOST:PORT,HOST:PORT,... (Redis Cluster seeds)");
    s.add_option("--remote-cache-ttl", c->remote_cache_ttl_s,
                 "Seconds a remote block lives (0: until Redis evicts it)")
        ->capture_default_str();
    s.add_option("--threads", c->threads, "Compute threads (0: every core)")
        ->capture_default_str();
    s.add_option("--device", c->device, kDeviceHelp)->capture_default_str();
    s.add_option("--kv-pool-mb", c->kv_pool_mb,
                 "Active KV pool size in MB (default: two full contexts per --max-num-seqs)");
    s.add_option("--max-model-len", c->max_model_len,
                 "Context length, prompt plus completion (default: the model's)");
    s.add_option("--block-tokens", c->block_tokens, "Tokens per KV block")
        ->capture_default_str();
    s.add_option("--max-body-mb", c->max_body_mb, "Largest request body")->capture_default_str();
    s.add_option("--max-connections", c->max_connections,
                 "Open connections at most; more get 503 at once")->capture_default_str();
    s.add_option("--max-connections-per-client", c->max_connections_per_client,
                 "Open connections per client address at most")->capture_default_str();
    s.add_option("--header-timeout-ms", c->header_timeout_ms,
                 "Time for a whole request head from its first byte (408 after)")
        ->capture_default_str();
    s.add_option("--idle-timeout-ms", c->idle_timeout_ms,
                 "Keep-alive wait for the next request")->capture_default_str();
    s.add_option("--body-min-rate", c->body_min_rate,
                 "Slowest body upload in bytes/s after the head's grace time (408 below; 0: off)")
        ->capture_default_str();
    s.add_option("--body-budget-mb", c->body_budget_mb,
                 "Memory for request bodies in flight (each reserves 3x its size; 503 beyond)")
        ->capture_default_str();
    s.add_option("--drain-seconds", c->drain_seconds,
                 "On SIGTERM, how long requests in flight may take to finish")
        ->capture_default_str();
    s.add_flag("--no-dashboard", c->no_dashboard, "No status page at / (404)");
    s.add_flag("--dashboard-show-text", c->dashboard_show_text,
               "Show the hottest cached prefixes' prompt text on the status page");
    s.add_option("--chat-template-file", c->chat_template_file,
                 "Jinja chat template used instead of the model's tokenizer.chat_template");
    return [c] {
      const Status st = RunServe(*c);
      return st.ok() ? 0 : Fail("kvtier serve", st);
    };
  }};
}

Command GenerateCommand() {
  return {"generate", "Continue a prompt with a model, streaming the sampled text to stdout", {},
          [](CLI::App& g) -> CommandRun {
    auto c = std::make_shared<GenerateConfig>();
    auto stats = std::make_shared<bool>(false);
    g.add_option("--model", c->model, "GGUF model (default: the bundled model)");
    g.add_option("--prompt", c->prompt, "Prompt text")->required();
    g.add_flag("--chat", c->chat, "Wrap the prompt as a user turn in the model's chat template");
    g.add_option("--max-tokens", c->max_tokens, "Tokens to generate at most")
        ->capture_default_str();
    AddSamplingFlags(g, &c->sampling);
    g.add_option("--kv-type", c->kv_type, kKvTypeHelp)->capture_default_str();
    g.add_option("--prefill-step", c->prefill_step, "Prompt tokens per forward call")
        ->capture_default_str();
    g.add_option("--threads", c->threads, "Threads (0: all cores)")->capture_default_str();
    g.add_option("--device", c->device, kDeviceHelp)->capture_default_str();
    g.add_flag("--stats", *stats, "Print token counts and speeds to stderr at the end");
    return [c, stats] {
      auto st = RunGenerate(*c, std::cout);
      std::cout << std::endl;
      if (!st.ok()) return Fail("kvtier generate", st.status());
      if (*stats) {
        std::fprintf(stderr,
                     "prompt %u tokens in %.1f ms (%.1f tok/s); generated %u tokens in %.1f ms "
                     "(%.1f tok/s); stop: %s\n",
                     st->prompt_tokens, st->prefill_ms,
                     st->prompt_tokens * 1e3 / std::max(st->prefill_ms, 1e-9),
                     st->generated_tokens, st->decode_ms,
                     st->generated_tokens * 1e3 / std::max(st->decode_ms, 1e-9),
                     st->stop_reason.c_str());
      }
      return 0;
    };
  }};
}

Command ChatCommand() {
  return {"chat",
          "Chat with a model: each line on stdin is a user turn, the reply streams to stdout; "
          "the conversation is kept (the model's chat template); EOF ends it",
          {}, [](CLI::App& g) -> CommandRun {
    auto c = std::make_shared<ChatConfig>();
    g.add_option("--model", c->model, "GGUF model (default: the bundled model)");
    g.add_option("--system", c->system, "System prompt");
    g.add_option("--max-tokens", c->max_tokens, "Reply tokens at most")->capture_default_str();
    g.add_option("--ctx", c->ctx, "Conversation tokens at most (0: the model's, up to 32768)")
        ->capture_default_str();
    AddSamplingFlags(g, &c->sampling);
    g.add_option("--kv-type", c->kv_type, kKvTypeHelp)->capture_default_str();
    g.add_option("--prefill-step", c->prefill_step, "Prompt tokens per forward call")
        ->capture_default_str();
    g.add_option("--threads", c->threads, "Threads (0: all cores)")->capture_default_str();
    auto stats = std::make_shared<bool>(false);
    g.add_flag("--stats", *stats, "Print turns, generated and context tokens to stderr at the end");
    return [c, stats] {
      if (isatty(STDIN_FILENO) != 0) c->prompt = "> ";
      auto st = RunChat(*c, std::cin, std::cout, std::cerr);
      if (!st.ok()) return Fail("kvtier chat", st.status());
      if (*stats) {
        std::fprintf(stderr, "chat: %u turns, %u tokens generated, %u tokens of context\n",
                     st->turns, st->generated_tokens, st->context_tokens);
      }
      return 0;
    };
  }};
}

Command TokenizeCommand() {
  return {"tokenize", "Token ids of the text on standard input, space-separated on one line", {},
          [](CLI::App& tk) -> CommandRun {
    auto c = std::make_shared<TokenizeConfig>();
    auto no_parse_special = std::make_shared<bool>(false);
    tk.add_option("--model", c->model,
                  "GGUF file whose tokenizer is used (default: the bundled model)");
    tk.add_flag("--add-bos", c->add_bos, "Put the BOS token first");
    tk.add_flag("--no-parse-special", *no_parse_special,
                "Treat control-token text such as <|im_start|> as plain text");
    return [c, no_parse_special] {
      c->parse_special = !*no_parse_special;
      const Status st = RunTokenize(*c, std::cin, std::cout);
      return st.ok() ? 0 : Fail("kvtier tokenize", st);
    };
  }};
}

Command PerplexityCommand() {
  return {"perplexity",
          "Perplexity of a model on a text file (llama-perplexity's method: non-overlapping "
          "windows of --ctx tokens, the second half of each scored)",
          {}, [](CLI::App& pp) -> CommandRun {
    auto c = std::make_shared<PerplexityConfig>();
    auto json = std::make_shared<bool>(false);
    pp.add_option("--model", c->model, "GGUF model (default: the bundled model)");
    pp.add_option("--file", c->file, "Text file")->required();
    pp.add_option("--ctx", c->ctx, "Window length in tokens")->capture_default_str();
    pp.add_option("--batch", c->batch, "Tokens per forward call")->capture_default_str();
    pp.add_option("--chunks", c->chunks, "Windows to score at most (0: all)")
        ->capture_default_str();
    pp.add_option("--kv-type", c->kv_type, kKvTypeHelp)->capture_default_str();
    pp.add_option("--threads", c->threads, "Threads (0: all cores)")->capture_default_str();
    pp.add_option("--device", c->device, kDeviceHelp)->capture_default_str();
    pp.add_flag("--kld", c->kld,
                "Also score each window with f16 KV: ppl_base, mean and 99% KL divergence, "
                "same top-1 (as llama-perplexity --kl-divergence)");
    pp.add_flag("--json", *json, "Print one JSON object");
    return [c, json] {
      auto r = RunPerplexity(*c, ProgressBar("window"));
      if (!r.ok()) return Fail("kvtier perplexity", r.status());
      std::cout << (*json ? FormatPerplexityJson(*r) : FormatPerplexityText(*r));
      return 0;
    };
  }};
}

Command CacheDirCommand() {
  return {"cache", "The SSD tier's directory: stats, verify, clear, formats", {},
          [](CLI::App& c) -> CommandRun {
    auto cmd = std::make_shared<CacheCommand>();
    c.require_subcommand(1);
    for (const char* action : {"stats", "verify", "clear"}) {
      const std::string a = action;
      const std::string help = a == "stats"    ? "Blocks, bytes and namespaces on disk"
                               : a == "verify" ? "Read and check every block file"
                                               : "Remove every block file";
      CLI::App* s = c.add_subcommand(action, help);
      s->add_option("--dir", cmd->dir, "The SSD cache directory");
      s->add_option("--remote", cmd->remote,
                    "The remote tier instead: redis://HOST:PORT[,HOST:PORT...]");
      s->add_flag("--json", cmd->json, "Print JSON");
      s->callback([cmd, a] { cmd->action = a; });
    }
    CLI::App* f = c.add_subcommand("formats", "Every format the tier stores, checked now");
    f->add_flag("--json", cmd->json, "Print JSON");
    f->callback([cmd] { cmd->action = "formats"; });
    return [cmd] {
      const Status st = RunCacheCommand(*cmd, std::cout);
      return st.ok() ? 0 : Fail("kvtier cache", st);
    };
  }};
}

Command MakeTestModelCommand() {
  return {"make-test-model",
          "Write a seeded random llama/qwen2/qwen3/phi3/gemma3 model as GGUF (llama.cpp names and keys, "
          "byte-level BPE tokenizer); defaults: Qwen3-0.6B's shape",
          {}, [](CLI::App& m) -> CommandRun {
    auto f = std::make_shared<MakeTestModelFlags>();
    TestModelConfig& c = f->config;
    m.add_option("--out", f->out, "Output GGUF file")->required();
    m.add_option("--arch", c.arch, "llama, qwen2, qwen3, phi3 or gemma3")->capture_default_str();
    m.add_option("--hidden", c.hidden, "Embedding length")->capture_default_str();
    m.add_option("--layers", c.layers, "Blocks")->capture_default_str();
    m.add_option("--heads", c.heads, "Query heads")->capture_default_str();
    m.add_option("--kv-heads", c.kv_heads, "KV heads")->capture_default_str();
    m.add_option("--head-dim", c.head_dim, "Head dimension")->capture_default_str();
    m.add_option("--ffn", c.ffn, "Feed-forward length")->capture_default_str();
    m.add_option("--vocab", c.vocab, "Vocabulary size (at least 259)")->capture_default_str();
    m.add_option("--ctx", c.ctx, "Context length")->capture_default_str();
    m.add_option("--rope-theta", c.rope_theta, "RoPE base frequency")->capture_default_str();
    m.add_option("--weight-type", f->weight_type,
                 "f16, bf16, f32, q8_0, q4_0 or a quantization preset (Q4_K_M, Q5_K_M, "
                 "Q3_K_M, Q6_K, IQ4_XS, Q4_1, Q5_0, ...)")
        ->capture_default_str();
    m.add_flag("--tied", c.tied, "Output projection shares token_embd (default)");
    m.add_flag("--no-tied", f->no_tied, "Write a separate output.weight");
    m.add_option("--seed", c.seed, "Seed of the weights")->capture_default_str();
    m.add_option("--weight-std", c.weight_std, "Std of the random weights")->capture_default_str();
    m.add_option("--window", c.sliding_window, "gemma3: sliding window (0: none)");
    m.add_option("--swa-period", c.swa_period, "gemma3: every Nth layer is global")
        ->capture_default_str();
    m.add_option("--final-softcap", c.final_softcap, "gemma3: final logit soft-cap (0: none)");
    m.add_option("--ssm-state", c.ssm_state, "qwen35: DeltaNet head size (0: --head-dim)");
    m.add_option("--ssm-k-heads", c.ssm_k_heads, "qwen35: DeltaNet q/k heads (0: --kv-heads)");
    m.add_option("--ssm-v-heads", c.ssm_v_heads, "qwen35: DeltaNet v heads (0: --heads)");
    m.add_option("--name", c.name, "general.name (default kvtier-test-<arch>)");
    m.add_flag("--text-fillers", c.text_fillers,
               "Filler tokens are user-defined, so the random model's answers render as text "
               "('<|filler_N|>'; default: control tokens, rendered as nothing)");
    return [f] {
      const Status st = RunMakeTestModel(*f, std::cout);
      return st.ok() ? 0 : Fail("kvtier make-test-model", st);
    };
  }};
}

}  // namespace kvtier::cli
