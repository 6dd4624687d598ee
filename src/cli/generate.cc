// `kvtier generate` and `kvtier perplexity`; see generate.h.
#include "cli/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "kvtier/weights.h"
#include "kvtier/thread_pool.h"
#include "cli/flags.h"
#include "cli/model_session.h"
#include "cli/sequence_runner.h"
#include "kvtier/chat_template.h"

namespace kvtier::cli {
namespace {

// One forward call for row 0 of `cache`; a hybrid model (qwen35, `hybrid` not null) also
// advances the row's recurrent state.
Status Step(const Model& m, BatchCache& cache, HybridSeqState* hybrid,
            std::span<const int32_t> tokens, bool all, float* logits, ThreadPool* pool) {
  std::span<const int32_t> rows[1] = {tokens};
  if (hybrid != nullptr) {
    HybridSeqState* states[1] = {hybrid};
    return m.Forward(cache, rows, all, logits, pool, states);
  }
  return m.Forward(cache, rows, all, logits, pool);
}

// One forward call of a sequence: new tokens, all logits or the last token's, logits out.
using StepFn = std::function<Status(std::span<const int32_t>, bool, float*)>;

// Runs `tokens` through `step` in calls of `step_tokens`; logits of the last token, or of
// every token when `all` (then [tokens.size(), V]).
Status Feed(const StepFn& step, size_t V, std::span<const int32_t> tokens, uint32_t step_tokens,
            bool all, std::vector<float>* logits) {
  logits->resize((all ? tokens.size() : 1) * V);
  for (size_t i = 0; i < tokens.size(); i += step_tokens) {
    const size_t n = std::min<size_t>(step_tokens, tokens.size() - i);
    const std::span<const int32_t> chunk = tokens.subspan(i, n);
    const bool last = i + n == tokens.size();
    float* dst = all ? logits->data() + i * V : logits->data();
    if (all || last) {
      KVTIER_RETURN_IF_ERROR(step(chunk, all, dst));
    } else {
      std::vector<float> scratch(V);
      KVTIER_RETURN_IF_ERROR(step(chunk, false, scratch.data()));
    }
  }
  return Status::OK();
}

StepFn RunnerStep(SequenceRunner& r) {
  return [&r](std::span<const int32_t> t, bool all, float* l) { return r.Forward(t, all, l); };
}

// Milliseconds since construction (steady clock).
class Timer {
 public:
  double Millis() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

int Threads(int t) {
  return t > 0 ? t : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

Result<GenerateStats> RunGenerate(const GenerateConfig& c, std::ostream& out) {
  KVTIER_RETURN_IF_ERROR(c.sampling.Validate());
  KVTIER_RETURN_IF_ERROR(CheckRange("--max-tokens", c.max_tokens, 1, 1 << 20));
  KVTIER_RETURN_IF_ERROR(CheckRange("--prefill-step", c.prefill_step, 1, 1 << 16));
  KVTIER_RETURN_IF_ERROR(CheckDevice(c.device));
  KVTIER_ASSIGN_OR_RETURN(LoadedModel lm, LoadModel(c.model));
  const Model& m = *lm.model;
  const Tokenizer& tok = *lm.tokenizer;
  std::fprintf(stderr, "kvtier generate: %s: %s\n", m.gguf().path().c_str(),
               DescribeTensorTypes(m.gguf()).c_str());
  std::string text = c.prompt;
  bool add_bos = tok.add_bos_default();
  if (c.chat) {
    const ChatRenderer renderer = ChatRenderer::ForTokenizer(tok);
    const std::string& warning = renderer.warning();
    if (!warning.empty()) std::fprintf(stderr, "kvtier generate: warning: %s\n", warning.c_str());
    const ChatMessage msg{"user", c.prompt};
    KVTIER_ASSIGN_OR_RETURN(text, renderer.Render(std::span<const ChatMessage>(&msg, 1), true));
    add_bos = renderer.AddBos(add_bos, text);
  }
  const std::vector<int32_t> prompt = tok.Encode(text, add_bos, c.chat);
  if (prompt.empty()) return Status::InvalidArgument("--prompt: no tokens (empty prompt)");
  const uint64_t total = prompt.size() + uint64_t(c.max_tokens);
  if (total > SequenceCache::kMaxTokens) {
    return Status::InvalidArgument("--max-tokens: prompt plus max tokens exceed the cache limit");
  }
  ThreadPool threads(Threads(c.threads));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SequenceRunner> runner,
                          OpenRunner(c.device, m, "--kv-type", c.kv_type,
                                     static_cast<uint32_t>(total), c.prefill_step, &threads));
  if (c.device != "cpu") {
    std::fprintf(stderr, "kvtier generate: device %s\n", runner->device().c_str());
  }
  GenerateStats st;
  st.prompt_tokens = static_cast<uint32_t>(prompt.size());
  std::vector<float> logits;
  Timer timer;
  KVTIER_RETURN_IF_ERROR(Feed(RunnerStep(*runner), m.config().n_vocab, prompt, c.prefill_step,
                              false, &logits));
  st.prefill_ms = timer.Millis();
  Sampler sampler(c.sampling);
  StreamDecoder decoder(tok);
  st.stop_reason = "length";
  timer = Timer();
  for (uint32_t i = 0; i < c.max_tokens; ++i) {
    const int32_t next = sampler.Sample(logits);
    if (tok.IsEndOfGeneration(next)) {
      st.stop_reason = "eos";
      break;
    }
    out << decoder.Push(next) << std::flush;
    ++st.generated_tokens;
    if (i + 1 == c.max_tokens) break;
    KVTIER_RETURN_IF_ERROR(
        runner->Forward(std::span<const int32_t>(&next, 1), false, logits.data()));
  }
  out << decoder.Flush() << std::flush;
  st.decode_ms = timer.Millis();
  return st;
}

Result<ChatStats> RunChat(const ChatConfig& c, std::istream& in, std::ostream& out,
                          std::ostream& prompt_out) {
  KVTIER_RETURN_IF_ERROR(c.sampling.Validate());
  KVTIER_RETURN_IF_ERROR(CheckRange("--max-tokens", c.max_tokens, 1, 1 << 20));
  KVTIER_RETURN_IF_ERROR(CheckRange("--prefill-step", c.prefill_step, 1, 1 << 16));
  KVTIER_RETURN_IF_ERROR(CheckRange("--ctx", c.ctx, 0, SequenceCache::kMaxTokens));
  KVTIER_ASSIGN_OR_RETURN(LoadedModel lm, LoadModel(c.model));
  const Model& m = *lm.model;
  const Tokenizer& tok = *lm.tokenizer;
  const uint32_t trained = m.config().n_ctx_train;
  const uint32_t ctx = c.ctx > 0 ? c.ctx : std::min<uint32_t>(trained > 0 ? trained : 4096, 32768);
  KVTIER_ASSIGN_OR_RETURN(auto pool, MakeKvPool(m.config(), "--kv-type", c.kv_type, ctx));
  const ChatRenderer renderer = ChatRenderer::ForTokenizer(tok);
  const std::string& warning = renderer.warning();
  if (!warning.empty()) std::fprintf(stderr, "kvtier chat: warning: %s\n", warning.c_str());
  ThreadPool threads(Threads(c.threads));
  BatchCache cache(pool);
  KVTIER_RETURN_IF_ERROR(cache.Add(SequenceCache(pool)));

  std::vector<ChatMessage> messages;
  if (!c.system.empty()) messages.push_back({"system", c.system});
  std::vector<int32_t> fed;  // the tokens the cache holds
  HybridSeqState hybrid_state;  // qwen35: the recurrent state after `fed`
  HybridSeqState* hybrid = m.state_format() != 0 ? &hybrid_state : nullptr;
  std::vector<float> logits;
  Sampler sampler(c.sampling);
  ChatStats st;
  for (;;) {
    if (!c.prompt.empty()) prompt_out << c.prompt << std::flush;
    std::string line;
    if (!std::getline(in, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    messages.push_back({"user", line});
    KVTIER_ASSIGN_OR_RETURN(const std::string text, renderer.Render(messages, true));
    const std::vector<int32_t> tokens =
        tok.Encode(text, renderer.AddBos(tok.add_bos_default(), text), true);
    if (tokens.size() + uint64_t(c.max_tokens) > ctx) {
      return Status::OutOfRange("the conversation (" + std::to_string(tokens.size()) +
                                " tokens) plus --max-tokens exceeds --ctx " + std::to_string(ctx));
    }
    // Keep what the cache shares with the rendered conversation; feed the rest (at least one
    // token, for the logits).
    size_t keep = 0;
    while (keep < fed.size() && keep < tokens.size() && fed[keep] == tokens[keep]) ++keep;
    if (keep == tokens.size()) --keep;
    if (hybrid != nullptr && keep < fed.size()) {  // a recurrent state cannot be trimmed
      keep = 0;
      hybrid_state = HybridSeqState();
    }
    if (keep < fed.size()) {
      KVTIER_RETURN_IF_ERROR(cache.Trim(static_cast<uint32_t>(fed.size() - keep)).status());
      fed.resize(keep);
    }
    const std::span<const int32_t> fresh(tokens.data() + keep, tokens.size() - keep);
    const StepFn step = [&](std::span<const int32_t> t, bool all, float* l) {
      return Step(m, cache, hybrid, t, all, l, &threads);
    };
    KVTIER_RETURN_IF_ERROR(Feed(step, m.config().n_vocab, fresh, c.prefill_step, false, &logits));
    fed.insert(fed.end(), fresh.begin(), fresh.end());

    StreamDecoder decoder(tok);
    std::string reply;
    for (uint32_t i = 0; i < c.max_tokens; ++i) {
      const int32_t next = sampler.Sample(logits);
      if (tok.IsEndOfGeneration(next)) break;
      const std::string piece = decoder.Push(next);
      reply += piece;
      out << piece << std::flush;
      ++st.generated_tokens;
      KVTIER_RETURN_IF_ERROR(Step(m, cache, hybrid, std::span<const int32_t>(&next, 1), false,
                                  logits.data(), &threads));
      fed.push_back(next);
    }
    const std::string tail = decoder.Flush();
    reply += tail;
    out << tail << "\n" << std::flush;
    messages.push_back({"assistant", reply});
    ++st.turns;
  }
  st.context_tokens = static_cast<uint32_t>(fed.size());
  return st;
}

TokenKld KldOfLogits(const float* base, const float* l, size_t V) {
  const size_t ib = static_cast<size_t>(std::max_element(base, base + V) - base);
  const size_t il = static_cast<size_t>(std::max_element(l, l + V) - l);
  const double mb = base[ib], ml = l[il];
  double sb = 0.0, sl = 0.0;
  for (size_t i = 0; i < V; ++i) {
    sb += std::exp(double(base[i]) - mb);
    sl += std::exp(double(l[i]) - ml);
  }
  const double lse_b = mb + std::log(sb), lse_l = ml + std::log(sl);
  double kld = 0.0;
  for (size_t i = 0; i < V; ++i) {
    const double lpb = double(base[i]) - lse_b;
    kld += std::exp(lpb) * (lpb - (double(l[i]) - lse_l));
  }
  return {std::max(kld, 0.0), ib == il};
}

double Percentile(const std::vector<double>& v, double f) {
  if (v.empty()) return 0.0;
  if (f <= 0) return v.front();
  if (f >= 1) return v.back();
  double p = f * double(v.size() - 1);
  const size_t ip = static_cast<size_t>(p);
  p -= double(ip);
  return (1 - p) * v[ip] + p * v[std::min(ip + 1, v.size() - 1)];
}

Result<PerplexityReport> RunPerplexity(const PerplexityConfig& c,
                                       const std::function<void(int, int)>& progress) {
  KVTIER_RETURN_IF_ERROR(CheckRange("--ctx", c.ctx, 16, 1 << 20));
  KVTIER_RETURN_IF_ERROR(CheckRange("--batch", c.batch, 1, 1 << 20));
  KVTIER_RETURN_IF_ERROR(CheckDevice(c.device));
  std::ifstream in(c.file, std::ios::binary);
  if (!in) return Status::InvalidArgument("--file: cannot open " + c.file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  KVTIER_ASSIGN_OR_RETURN(LoadedModel lm, LoadModel(c.model));
  const Model& m = *lm.model;
  const Tokenizer& tok = *lm.tokenizer;
  const bool add_bos = tok.add_bos_default() && tok.bos_id() >= 0;
  std::vector<int32_t> tokens = tok.Encode(text, add_bos, /*parse_special=*/false);
  const size_t n_windows = tokens.size() / c.ctx;
  if (n_windows < 1 || tokens.size() < 2 * size_t(c.ctx)) {
    return Status::InvalidArgument("--file: " + c.file + " has " + std::to_string(tokens.size()) +
                                   " tokens; at least 2 * ctx = " + std::to_string(2 * c.ctx) +
                                   " are needed");
  }
  const size_t windows = c.chunks > 0 ? std::min<size_t>(c.chunks, n_windows) : n_windows;
  ThreadPool threads(Threads(c.threads));
  const uint32_t batch = std::min(c.batch, c.ctx);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SequenceRunner> runner,
                          OpenRunner(c.device, m, "--kv-type", c.kv_type, c.ctx, batch, &threads));
  const size_t V = m.config().n_vocab, first = c.ctx / 2;
  std::unique_ptr<SequenceRunner> base_runner;
  if (c.kld) {
    KVTIER_ASSIGN_OR_RETURN(base_runner,
                            OpenRunner(c.device, m, "--kv-type", "f16", c.ctx, batch, &threads));
  }
  double nll = 0.0, nll2 = 0.0, nll_base = 0.0, kld_sum = 0.0;
  uint64_t count = 0, same_top1 = 0;
  std::vector<double> klds;
  Timer timer;
  std::vector<float> logits, base_logits;
  // NLL of `target` under logit row l.
  auto nll_of = [V](const float* l, int32_t target) {
    const float mx = *std::max_element(l, l + V);
    double sum = 0.0;
    for (size_t i = 0; i < V; ++i) sum += std::exp(double(l[i]) - mx);
    return -(double(l[target]) - mx - std::log(sum));
  };
  for (size_t w = 0; w < windows; ++w) {
    std::vector<int32_t> win(tokens.begin() + w * c.ctx, tokens.begin() + (w + 1) * c.ctx);
    if (add_bos) win[0] = tok.bos_id();
    if (base_runner) {
      KVTIER_RETURN_IF_ERROR(base_runner->Reset());
      KVTIER_RETURN_IF_ERROR(Feed(RunnerStep(*base_runner), V, win, batch, true, &base_logits));
    }
    // Each window starts from an empty sequence (qwen35: from the zero state).
    KVTIER_RETURN_IF_ERROR(runner->Reset());
    KVTIER_RETURN_IF_ERROR(Feed(RunnerStep(*runner), V, win, batch, true, &logits));
    // Score positions first .. ctx-2 predicting the next token of the window (original ids).
    for (size_t j = first; j + 1 < c.ctx; ++j) {
      const float* l = logits.data() + j * V;
      const int32_t target = tokens[w * c.ctx + j + 1];
      const double v = nll_of(l, target);
      nll += v;
      nll2 += v * v;
      ++count;
      if (base_runner) {
        const float* lb = base_logits.data() + j * V;
        nll_base += nll_of(lb, target);
        const TokenKld k = KldOfLogits(lb, l, V);
        kld_sum += k.kld;
        klds.push_back(k.kld);
        same_top1 += k.same_top1 ? 1 : 0;
      }
    }
    if (progress) progress(static_cast<int>(w + 1), static_cast<int>(windows));
  }
  PerplexityReport r;
  const double mean = nll / double(count);
  r.ppl = std::exp(mean);
  const double var = nll2 / double(count) - mean * mean;
  r.ppl_stderr = var > 0 && count > 1 ? std::sqrt(var / double(count - 1)) * r.ppl : 0.0;
  r.tokens_scored = count;
  r.ctx = c.ctx;
  r.chunks = static_cast<uint32_t>(windows);
  r.k_format = runner->k_format();
  r.v_format = runner->v_format();
  r.seconds = timer.Millis() / 1000.0;
  if (base_runner) {
    std::sort(klds.begin(), klds.end());
    r.has_kld = true;
    r.ppl_base = std::exp(nll_base / double(count));
    r.kld = kld_sum / double(count);
    r.kld_p99 = Percentile(klds, 0.99);
    r.same_top1 = double(same_top1) / double(count);
  }
  return r;
}

std::string FormatPerplexityJson(const PerplexityReport& r) {
  nlohmann::json j;
  j["ppl"] = r.ppl;
  j["ppl_stderr"] = r.ppl_stderr;
  j["tokens_scored"] = r.tokens_scored;
  j["ctx"] = r.ctx;
  j["k_format"] = r.k_format;
  j["v_format"] = r.v_format;
  j["chunks"] = r.chunks;
  j["seconds"] = r.seconds;
  if (r.has_kld) {
    j["ppl_base"] = r.ppl_base;
    j["kld"] = r.kld;
    j["kld_p99"] = r.kld_p99;
    j["same_top1"] = r.same_top1;
  }
  return j.dump() + "\n";
}

std::string FormatPerplexityText(const PerplexityReport& r) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(4);
  o << "perplexity: " << r.ppl << " +/- " << r.ppl_stderr << " (" << r.tokens_scored
    << " tokens scored in " << r.chunks << " windows of " << r.ctx << ", KV K " << r.k_format
    << " / V " << r.v_format << ", " << r.seconds << " s)\n";
  if (r.has_kld) {
    o << "f16 KV perplexity: " << r.ppl_base << ", mean KLD " << std::setprecision(6) << r.kld
      << ", 99% KLD " << r.kld_p99 << ", same top-1 " << std::setprecision(4)
      << 100.0 * r.same_top1 << "%\n";
  }
  return o.str();
}

}  // namespace kvtier::cli
