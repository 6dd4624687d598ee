// `kvtier-bench prefix` and `kvtier-bench prefix-agreement`; see bench_prefix.h. Owned by the cli
// module; single-threaded driver (the model's matrix work runs on a ThreadPool).
#include "cli/bench_prefix.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "base/stats.h"
#include "base/strings.h"
#include "base/sysinfo.h"
#include "kvtier/thread_pool.h"
#include "base/timer.h"
#include "cli/bench_report.h"
#include "cli/flags.h"
#include "cli/model_session.h"
#include "engine/prefill.h"
#include "kvtier/prefix_cache.h"

#ifndef KVTIER_PREFIX_TEXT
#define KVTIER_PREFIX_TEXT "data/corpus/eval.txt"
#endif

namespace kvtier::cli {
namespace {

constexpr uint32_t kMinQuantizeTokens = 256;

struct StoreType {
  std::string name;             // "active" or the format's name
  std::optional<Format> format;  // nullopt: the active format
};

Result<std::vector<StoreType>> ParseStoreTypes(const std::string& text) {
  std::vector<StoreType> out;
  for (const std::string& s : SplitComma(text)) {
    if (s == "active") {
      out.push_back({s, std::nullopt});
      continue;
    }
    Result<Format> f = ParseFormat(s);
    if (!f.ok()) {
      return Status::InvalidArgument("--store-types: expected 'active' or a format (" +
                                     ValidFormatsHelp() + "), got '" + s + "'");
    }
    out.push_back({f->name(), *f});
  }
  if (out.empty()) return Status::InvalidArgument("--store-types: no store type given");
  return out;
}

// A cache whose budget holds `tokens` tokens in the larger of the two formats' blocks.
Result<std::unique_ptr<PrefixCache>> MakeCache(const ModelConfig& mc, const KvFormats& active,
                                               const StoreType& st, uint32_t tokens) {
  const KvShape shape = mc.kv_shape();
  uint64_t stride = 0;
  for (const Format& f : {active.k, active.v, st.format.value_or(active.k)}) {
    KVTIER_ASSIGN_OR_RETURN(const KvBlockLayout l, KvBlockLayout::Make(shape, f, f, 32));
    stride = std::max<uint64_t>(stride, l.block_stride);
  }
  PrefixCacheOptions o;
  o.memory_budget_bytes = (uint64_t(tokens) / 32 + 4) * stride;
  o.store_format = st.format;
  o.min_quantize_tokens = kMinQuantizeTokens;
  return PrefixCache::Create(std::move(o));
}

std::string EntryFormatName(const PrefixCacheStats& s) {
  for (const PrefixFormatStats& f : s.by_format) {
    if (f.tokens == 0) continue;
    return f.k_format == f.v_format ? f.k_format.name()
                                    : f.k_format.name() + "/" + f.v_format.name();
  }
  return "-";
}

uint64_t PeakRss() {
  Result<uint64_t> r = PeakRssBytes();
  return r.ok() ? *r : 0;
}

Status CheckCommon(const std::string& kv_type, uint32_t ubatch, int threads) {
  KVTIER_RETURN_IF_ERROR(CheckRange("--ubatch", ubatch, 1, 1 << 16));
  KVTIER_RETURN_IF_ERROR(CheckRange("--threads", threads, 0, 1024));
  return ParseKvFormats("--kv-type", kv_type).status();
}

}  // namespace

std::string DefaultPrefixText() { return KVTIER_PREFIX_TEXT; }

Result<BenchPrefixReport> RunBenchPrefix(const BenchPrefixConfig& c,
                                         const std::function<void(int, int)>& progress) {
  KVTIER_RETURN_IF_ERROR(CheckCommon(c.kv_type, c.ubatch, c.threads));
  KVTIER_ASSIGN_OR_RETURN(const std::vector<uint32_t> lengths,
                          ParseUintList("--prompt-tokens", c.prompt_tokens, 2, 1u << 20));
  KVTIER_RETURN_IF_ERROR(CheckRange("--repeats", c.repeats, 1, 1000));
  KVTIER_RETURN_IF_ERROR(CheckRange("--cold-repeats", c.cold_repeats, 1, 1000));
  KVTIER_ASSIGN_OR_RETURN(const std::vector<StoreType> store_types,
                          ParseStoreTypes(c.store_types));
  KVTIER_ASSIGN_OR_RETURN(const KvFormats active, ParseKvFormats("--kv-type", c.kv_type));
  KVTIER_ASSIGN_OR_RETURN(LoadedModel lm, LoadModel(c.model));
  const Model& m = *lm.model;
  const ModelConfig& mc = m.config();
  const uint32_t longest = *std::max_element(lengths.begin(), lengths.end());
  if (longest + c.new_tokens > mc.n_ctx_train && mc.n_ctx_train > 0) {
    std::fprintf(stderr, "bench-prefix: note: %u tokens exceed the model's training context %u\n",
                 longest + c.new_tokens, mc.n_ctx_train);
  }
  KVTIER_ASSIGN_OR_RETURN(const PromptSource src,
                          LoadPromptSource(lm, c.text, DefaultPrefixText(), c.seed,
                                           longest + c.new_tokens));
  ThreadPool threads(c.threads);
  BenchPrefixReport r;
  r.model_name = mc.name;
  r.arch = std::string(ModelArchName(mc.arch));
  r.kv_type = active.name;
  r.prompt_source = src.description;
  r.weight_bytes = m.weight_bytes();
  r.active_bytes_per_token = KvBytesPerToken(mc.kv_shape(), active.k, active.v);
  r.threads = threads.num_threads();
  r.ubatch = c.ubatch;
  r.new_tokens = c.new_tokens;
  r.repeats = c.repeats;
  r.cold_repeats = c.cold_repeats;
  const int total = static_cast<int>(lengths.size() * (1 + store_types.size()));
  int step = 0;
  for (const uint32_t n : lengths) {
    BenchPrefixCase bc;
    bc.prompt_tokens = n;
    const std::vector<int32_t> prompt = PromptWindow(src, 0, n);
    const std::vector<int32_t> longer = PromptWindow(src, 0, n + c.new_tokens);
    // Two rows: the cold sequence stays while a converted warm copy is built beside it.
    KVTIER_ASSIGN_OR_RETURN(auto pool,
                            MakeKvPool(mc, "--kv-type", c.kv_type, n + c.new_tokens + 64, 2));
    SequenceCache cold;
    std::vector<double> cold_ms;
    for (int rep = 0; rep < c.cold_repeats; ++rep) {
      cold = SequenceCache();  // free the previous run's blocks first
      KVTIER_ASSIGN_OR_RETURN(engine::PrefillOutcome o,
                              engine::Prefill(m, nullptr, pool, prompt, c.ubatch, &threads));
      cold_ms.push_back(o.fetch_ms + o.compute_ms);
      cold = std::move(o.sequence);
    }
    bc.cold_ms = Median(cold_ms);
    bc.cold_kv_bytes = cold.bytes();
    if (progress) progress(++step, total);
    for (const StoreType& st : store_types) {
      KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<PrefixCache> cache, MakeCache(mc, active, st, n));
      std::vector<double> store_ms;
      bool quantized = false;
      for (int rep = 0; rep < c.repeats; ++rep) {
        cache->Clear();
        Timer t;
        KVTIER_ASSIGN_OR_RETURN(const PrefixStoreResult sr,
                                cache->Store(m.fingerprint(), prompt, cold));
        store_ms.push_back(t.Millis());
        quantized = sr.quantized;
      }
      const PrefixCacheStats stats = cache->Stats();
      const Format entry_k = quantized ? *st.format : active.k;
      const Format entry_v = quantized ? *st.format : active.v;
      for (const bool exact : {true, false}) {
        const std::vector<int32_t>& request = exact ? prompt : longer;
        BenchPrefixWarm w;
        w.store_type = st.name;
        w.entry_format = EntryFormatName(stats);
        w.quantized = quantized;
        w.hit = exact ? "exact" : "prefix";
        w.request_tokens = static_cast<uint32_t>(request.size());
        w.store_ms = Median(store_ms);
        w.cache_bytes = stats.bytes;
        uint64_t tokens = 0;
        for (const PrefixFormatStats& f : stats.by_format) tokens += f.tokens;
        w.bytes_per_token = tokens > 0 ? double(stats.bytes) / double(tokens) : 0.0;
        w.analytic_bytes_per_token = KvBytesPerToken(mc.kv_shape(), entry_k, entry_v);
        std::vector<double> total_ms, fetch_ms, compute_ms;
        for (int rep = 0; rep < c.repeats; ++rep) {
          KVTIER_ASSIGN_OR_RETURN(
              engine::PrefillOutcome o,
              engine::Prefill(m, cache.get(), pool, request, c.ubatch, &threads));
          total_ms.push_back(o.fetch_ms + o.compute_ms);
          fetch_ms.push_back(o.fetch_ms);
          compute_ms.push_back(o.compute_ms);
          w.kind = std::string(PrefixMatchKindName(o.kind));
          w.reused_tokens = o.reused_tokens;
          w.converted = o.converted;
        }  // o.sequence is freed here: one warm copy at a time
        w.warm_ms = Median(total_ms);
        w.fetch_ms = Median(fetch_ms);
        w.compute_ms = Median(compute_ms);
        w.speedup = w.warm_ms > 0 ? bc.cold_ms / w.warm_ms : 0.0;
        bc.warm.push_back(std::move(w));
      }
      if (progress) progress(++step, total);
    }
    r.cases.push_back(std::move(bc));
  }
  r.peak_rss_bytes = PeakRss();
  return r;
}

std::string FormatBenchPrefixTable(const BenchPrefixReport& r) {
  std::ostringstream o;
  o << "model " << r.model_name << " (" << r.arch << ", " << DescribeBytes(r.weight_bytes)
    << " of weights), active KV " << r.kv_type << " (" << GroupDigits(r.active_bytes_per_token)
    << " B/token), " << r.threads << " threads, ubatch " << r.ubatch << "\n"
    << "prompt: " << r.prompt_source << "\n"
    << "TTFT = prefix-cache fetch + prefill of the tokens left; warm: median of " << r.repeats
    << ", cold: median of " << r.cold_repeats << "; prefix hit = prompt + " << r.new_tokens
    << " new tokens\n";
  char line[256];
  for (const BenchPrefixCase& bc : r.cases) {
    std::snprintf(line, sizeof line, "\n%u tokens: cold TTFT %.1f ms (KV %s)\n", bc.prompt_tokens,
                  bc.cold_ms, DescribeBytes(bc.cold_kv_bytes).c_str());
    o << line;
    TextTable t({"<store", "<entry", "<hit", "<kind", "reused", "conv", "warm ms", "fetch ms",
                 "compute ms", "speedup", "store ms", "B/token", "analytic"});
    for (const BenchPrefixWarm& w : bc.warm) {
      t.Row({w.store_type, w.entry_format, w.hit, w.kind, std::to_string(w.reused_tokens),
             w.converted ? "yes" : "no", Printf("%.2f", w.warm_ms), Printf("%.2f", w.fetch_ms),
             Printf("%.2f", w.compute_ms), Printf("%.1fx", w.speedup), Printf("%.2f", w.store_ms),
             Printf("%.1f", w.bytes_per_token), std::to_string(w.analytic_bytes_per_token)});
    }
    o << t.Render();
  }
  o << "\npeak RSS " << DescribeBytes(r.peak_rss_bytes) << "\n";
  return o.str();
}

std::string FormatBenchPrefixJson(const BenchPrefixReport& r) {
  nlohmann::json j;
  j["model"] = r.model_name;
  j["arch"] = r.arch;
  j["weight_bytes"] = r.weight_bytes;
  j["kv_type"] = r.kv_type;
  j["active_bytes_per_token"] = r.active_bytes_per_token;
  j["prompt_source"] = r.prompt_source;
  j["threads"] = r.threads;
  j["ubatch"] = r.ubatch;
  j["new_tokens"] = r.new_tokens;
  j["repeats"] = r.repeats;
  j["cold_repeats"] = r.cold_repeats;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["cases"] = nlohmann::json::array();
  for (const BenchPrefixCase& bc : r.cases) {
    nlohmann::json cj = {{"prompt_tokens", bc.prompt_tokens},
                         {"cold_ms", bc.cold_ms},
                         {"cold_kv_bytes", bc.cold_kv_bytes},
                         {"warm", nlohmann::json::array()}};
    for (const BenchPrefixWarm& w : bc.warm) {
      cj["warm"].push_back({{"store_type", w.store_type},
                            {"entry_format", w.entry_format},
                            {"quantized", w.quantized},
                            {"hit", w.hit},
                            {"kind", w.kind},
                            {"request_tokens", w.request_tokens},
                            {"reused_tokens", w.reused_tokens},
                            {"converted", w.converted},
                            {"warm_ms", w.warm_ms},
                            {"fetch_ms", w.fetch_ms},
                            {"compute_ms", w.compute_ms},
                            {"speedup", w.speedup},
                            {"store_ms", w.store_ms},
                            {"bytes_per_token", w.bytes_per_token},
                            {"analytic_bytes_per_token", w.analytic_bytes_per_token},
                            {"cache_bytes", w.cache_bytes}});
    }
    j["cases"].push_back(std::move(cj));
  }
  return JsonText(j);
}

Result<PrefixAgreementReport> RunPrefixAgreement(const PrefixAgreementConfig& c,
                                                 const std::function<void(int, int)>& progress) {
  KVTIER_RETURN_IF_ERROR(CheckCommon(c.kv_type, c.ubatch, c.threads));
  KVTIER_RETURN_IF_ERROR(CheckRange("--prompts", c.prompts, 1, 100000));
  KVTIER_RETURN_IF_ERROR(CheckRange("--min-tokens", c.min_tokens, 2, 1 << 20));
  KVTIER_RETURN_IF_ERROR(CheckRange("--max-tokens", c.max_tokens, c.min_tokens, 1 << 20));
  KVTIER_RETURN_IF_ERROR(CheckRange("--generate", c.generate, 1, 4096));
  KVTIER_ASSIGN_OR_RETURN(const std::vector<StoreType> store_types,
                          ParseStoreTypes(c.store_types));
  KVTIER_ASSIGN_OR_RETURN(const KvFormats active, ParseKvFormats("--kv-type", c.kv_type));
  KVTIER_ASSIGN_OR_RETURN(LoadedModel lm, LoadModel(c.model));
  const Model& m = *lm.model;
  const ModelConfig& mc = m.config();
  Timer wall;
  // Window lengths first, so the stream is cut into consecutive, non-overlapping windows.
  std::mt19937_64 rng(c.seed);
  std::uniform_int_distribution<uint32_t> len_dist(c.min_tokens, c.max_tokens);
  std::vector<uint32_t> lens(c.prompts);
  size_t need = 0;
  for (uint32_t& l : lens) need += (l = len_dist(rng));
  KVTIER_ASSIGN_OR_RETURN(const PromptSource src,
                          LoadPromptSource(lm, c.text, DefaultPrefixText(), c.seed + 1, need));
  ThreadPool threads(c.threads);
  // Rows: the cold sequence (shared by entries stored in the active format), a warm copy.
  KVTIER_ASSIGN_OR_RETURN(
      auto pool, MakeKvPool(mc, "--kv-type", c.kv_type, c.max_tokens + c.generate + 64, 3));

  PrefixAgreementReport r;
  r.model_name = mc.name;
  r.kv_type = active.name;
  r.prompt_source = src.description;
  r.prompts = c.prompts;
  r.generate = c.generate;
  r.min_tokens = c.min_tokens;
  r.max_tokens = c.max_tokens;
  r.threads = threads.num_threads();
  r.rows.resize(store_types.size());
  std::vector<double> prefix_sum(store_types.size(), 0.0);
  size_t offset = 0;
  for (uint32_t i = 0; i < c.prompts; ++i) {
    const std::vector<int32_t> prompt = PromptWindow(src, offset, lens[i]);
    offset += lens[i];
    r.prompt_tokens_total += prompt.size();
    KVTIER_ASSIGN_OR_RETURN(engine::PrefillOutcome cold,
                            engine::Prefill(m, nullptr, pool, prompt, c.ubatch, &threads));
    std::vector<std::unique_ptr<PrefixCache>> caches;
    for (size_t s = 0; s < store_types.size(); ++s) {
      KVTIER_ASSIGN_OR_RETURN(auto cache, MakeCache(mc, active, store_types[s], c.max_tokens));
      KVTIER_ASSIGN_OR_RETURN(const PrefixStoreResult sr,
                              cache->Store(m.fingerprint(), prompt, cold.sequence));
      r.rows[s].quantized += sr.quantized ? 1 : 0;
      if (i == 0) r.rows[s].entry_format = EntryFormatName(cache->Stats());
      caches.push_back(std::move(cache));
    }
    KVTIER_ASSIGN_OR_RETURN(
        const std::vector<int32_t> want,
        engine::GreedyContinue(m, cold.sequence, std::move(cold.logits), c.generate, &threads));
    cold.sequence = SequenceCache();
    for (size_t s = 0; s < store_types.size(); ++s) {
      KVTIER_ASSIGN_OR_RETURN(
          engine::PrefillOutcome warm,
          engine::Prefill(m, caches[s].get(), pool, prompt, c.ubatch, &threads));
      if (warm.reused_tokens + 1 != prompt.size()) {
        return Status::Internal("prefix-agreement: prompt " + std::to_string(i) + " reused " +
                                std::to_string(warm.reused_tokens) + " of " +
                                std::to_string(prompt.size()) + " tokens from " +
                                store_types[s].name + " (expected an exact hit)");
      }
      KVTIER_ASSIGN_OR_RETURN(
          const std::vector<int32_t> got,
          engine::GreedyContinue(m, warm.sequence, std::move(warm.logits), c.generate, &threads));
      size_t same = 0;
      while (same < want.size() && same < got.size() && want[same] == got[same]) ++same;
      r.rows[s].identical += same == want.size() ? 1 : 0;
      prefix_sum[s] += double(same) / double(c.generate);
      caches[s].reset();
    }
    if (progress) progress(int(i + 1), int(c.prompts));
  }
  for (size_t s = 0; s < store_types.size(); ++s) {
    PrefixAgreementRow& row = r.rows[s];
    row.store_type = store_types[s].name;
    row.prompts = c.prompts;
    row.identical_pct = 100.0 * row.identical / c.prompts;
    row.mean_prefix_fraction = prefix_sum[s] / c.prompts;
  }
  r.seconds = wall.Seconds();
  r.peak_rss_bytes = PeakRss();
  return r;
}

std::string FormatPrefixAgreementTable(const PrefixAgreementReport& r) {
  std::ostringstream o;
  o << "model " << r.model_name << ", active KV " << r.kv_type << ", " << r.prompts
    << " prompts of " << r.min_tokens << ".." << r.max_tokens << " tokens ("
    << r.prompt_tokens_total << " in all), " << r.generate << " greedy tokens each, "
    << r.threads << " threads\nprompt: " << r.prompt_source << "\n";
  char line[200];
  TextTable t({"<store", "<entry", "quantized", "all identical", "mean identical prefix"});
  for (const PrefixAgreementRow& row : r.rows) {
    t.Row({row.store_type, row.entry_format, Printf("%u/%u", row.quantized, row.prompts),
           Printf("%u (%.1f%%)", row.identical, row.identical_pct),
           Printf("%.1f%%", 100.0 * row.mean_prefix_fraction)});
  }
  o << t.Render();
  std::snprintf(line, sizeof line, "%.1f s, peak RSS %s\n", r.seconds,
                DescribeBytes(r.peak_rss_bytes).c_str());
  o << line;
  return o.str();
}

std::string FormatPrefixAgreementJson(const PrefixAgreementReport& r) {
  nlohmann::json j;
  j["model"] = r.model_name;
  j["kv_type"] = r.kv_type;
  j["prompt_source"] = r.prompt_source;
  j["prompts"] = r.prompts;
  j["generate"] = r.generate;
  j["min_tokens"] = r.min_tokens;
  j["max_tokens"] = r.max_tokens;
  j["prompt_tokens_total"] = r.prompt_tokens_total;
  j["threads"] = r.threads;
  j["seconds"] = r.seconds;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["rows"] = nlohmann::json::array();
  for (const PrefixAgreementRow& row : r.rows) {
    j["rows"].push_back({{"store_type", row.store_type},
                         {"entry_format", row.entry_format},
                         {"prompts", row.prompts},
                         {"quantized", row.quantized},
                         {"identical", row.identical},
                         {"identical_pct", row.identical_pct},
                         {"mean_prefix_fraction", row.mean_prefix_fraction}});
  }
  return JsonText(j);
}

}  // namespace kvtier::cli
