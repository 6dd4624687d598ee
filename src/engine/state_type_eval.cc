// kvtier_state_type_eval: what resuming a hybrid (qwen35) model from a bf16 state snapshot
// (PrefixCacheOptions::state_type, `--state-type bf16`) changes against an f32 one.
//
//   kvtier_state_type_eval MODEL.gguf IDS.txt [windows] [prefix] [next]
//
// IDS.txt: token ids of a text, whitespace-separated (`kvtier tokenize --model MODEL`). For each
// of `windows` (default 16) windows of the text, spread over it: the state after `prefix - 1`
// tokens (default 256) is snapshotted (Model::SaveState, what the engine stores after a
// prompt), and the last prompt token and the text's next `next` tokens (default 64) are run
// from three states: the live one, the snapshot reloaded as f32, and the snapshot rounded to
// bf16 and reloaded. Reports, per state type against the live state: the mean and max
// KL divergence of the `next` next-token distributions (teacher-forced on the text), the
// perplexity of those text tokens, and whether `next` greedy tokens are identical (and where
// the first difference is). The attention layers' K/V rows are the live state's in every run
// (the cache keeps them apart from the snapshot). Prints one line per window and a summary;
// exit 0 unless the model or file cannot be used. Single-threaded driver; `threads` compute
// threads (KVTIER_THREADS, default 2).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "kvtier/model.h"
#include "kvtier/state_snapshot.h"
#include "kvtier/thread_pool.h"

namespace kvtier {
namespace {

struct Run {
  std::vector<double> logp;      // [next][vocab] log-softmax, teacher-forced
  std::vector<int32_t> greedy;   // [next]
};

std::vector<double> LogSoftmax(const float* x, size_t n) {
  double mx = x[0];
  for (size_t i = 1; i < n; ++i) mx = std::max<double>(mx, x[i]);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] - lse;
  return out;
}

Result<Run> Continue(const Model& m, const HybridSeqState& from, int32_t last,
                     std::span<const int32_t> text, ThreadPool* pool) {
  const size_t V = m.config().n_vocab, n = text.size();
  Run r;
  // Teacher-forced: [last, text[0..n-1)] predicts text[0..n).
  std::vector<int32_t> in = {last};
  in.insert(in.end(), text.begin(), text.end() - 1);
  std::vector<float> logits(n * V);
  HybridSeqState st = from;
  KVTIER_RETURN_IF_ERROR(m.ForwardSequence(&st, in, true, logits.data(), pool));
  for (size_t i = 0; i < n; ++i) {
    const std::vector<double> lp = LogSoftmax(logits.data() + i * V, V);
    r.logp.insert(r.logp.end(), lp.begin(), lp.end());
  }
  // Greedy from the same point.
  st = from;
  int32_t t = last;
  std::vector<float> one(V);
  for (size_t i = 0; i < n; ++i) {
    const int32_t tok[1] = {t};
    KVTIER_RETURN_IF_ERROR(m.ForwardSequence(&st, tok, false, one.data(), pool));
    t = static_cast<int32_t>(std::max_element(one.begin(), one.end()) - one.begin());
    r.greedy.push_back(t);
  }
  return r;
}

int Main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf IDS.txt [windows] [prefix] [next]\n", argv[0]);
    return 2;
  }
  const uint32_t windows = argc > 3 ? std::atoi(argv[3]) : 16;
  const uint32_t prefix = argc > 4 ? std::atoi(argv[4]) : 256;
  const uint32_t next = argc > 5 ? std::atoi(argv[5]) : 64;
  Result<std::unique_ptr<Model>> model = Model::Load(argv[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  const Model& m = **model;
  if (m.state_format() == 0) {
    std::fprintf(stderr, "%s: no recurrent state (not a hybrid model)\n", argv[1]);
    return 1;
  }
  std::vector<int32_t> ids;
  {
    std::ifstream f(argv[2]);
    for (long long v; f >> v;) ids.push_back(static_cast<int32_t>(v));
  }
  if (prefix < 2 || next < 1 || windows < 1 || ids.size() < prefix + next) {
    std::fprintf(stderr, "%s: %zu ids, need at least prefix + next = %u\n", argv[2], ids.size(),
                 prefix + next);
    return 1;
  }
  const char* th = std::getenv("KVTIER_THREADS");
  ThreadPool pool(th != nullptr ? std::atoi(th) : 2);
  const size_t V = m.config().n_vocab;
  const size_t stride = windows > 1 ? (ids.size() - prefix - next) / (windows - 1) : 0;
  struct Sum {
    double kld = 0, kld_max = 0, nll = 0;
    uint32_t same = 0, first_diff = 0;
  } sum[3];
  const char* names[3] = {"live", "f32", "bf16"};
  uint64_t snap_bytes[2] = {0, 0};
  for (uint32_t w = 0; w < windows; ++w) {
    const std::span<const int32_t> all(ids.data() + w * stride, prefix + next);
    HybridSeqState live;
    std::vector<float> logits(V);
    Status s = m.ForwardSequence(&live, all.first(prefix - 1), false, logits.data(), &pool);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    const StateSnapshot snap = m.SaveState(live);
    std::vector<Run> runs;
    for (int k = 0; k < 3; ++k) {
      HybridSeqState st = live;
      if (k > 0) {
        const StateSnapshot stored =
            ConvertStateSnapshot(snap, k == 1 ? StateType::kF32 : StateType::kBF16);
        snap_bytes[k - 1] = stored.bytes();
        Result<HybridSeqState> back = m.LoadState(ConvertStateSnapshot(stored, StateType::kF32));
        if (!back.ok()) {
          std::fprintf(stderr, "%s\n", back.status().ToString().c_str());
          return 1;
        }
        st = std::move(*back);
        st.k = live.k;  // the attention layers' K/V: the cache's, not the snapshot's
        st.v = live.v;
      }
      Result<Run> r = Continue(m, st, all[prefix - 1], all.subspan(prefix, next), &pool);
      if (!r.ok()) {
        std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
        return 1;
      }
      runs.push_back(std::move(*r));
    }
    std::printf("window %u (ids %zu..%zu):", w, w * stride, w * stride + prefix + next);
    for (int k = 0; k < 3; ++k) {
      double kld = 0, kmax = 0, nll = 0;
      for (uint32_t i = 0; i < next; ++i) {
        const double* p = runs[0].logp.data() + i * V;
        const double* q = runs[k].logp.data() + i * V;
        double d = 0;
        for (size_t v = 0; v < V; ++v) d += std::exp(p[v]) * (p[v] - q[v]);
        kld += d;
        kmax = std::max(kmax, d);
        nll -= q[all[prefix + i]];
      }
      uint32_t diff = 0;
      while (diff < next && runs[k].greedy[diff] == runs[0].greedy[diff]) ++diff;
      sum[k].kld += kld / next;
      sum[k].kld_max = std::max(sum[k].kld_max, kmax);
      sum[k].nll += nll / next;
      sum[k].same += diff == next;
      sum[k].first_diff += diff;
      std::printf("  %s kld %.3g max %.3g ppl %.4f greedy %s", names[k], kld / next, kmax,
                  std::exp(nll / next), diff == next ? "same" : ("differs@" + std::to_string(diff)).c_str());
    }
    std::printf("\n");
  }
  std::printf("summary: %u windows, prefix %u, next %u; snapshot bytes f32 %llu, bf16 %llu "
              "(%.3fx)\n", windows, prefix, next, static_cast<unsigned long long>(snap_bytes[0]),
              static_cast<unsigned long long>(snap_bytes[1]),
              static_cast<double>(snap_bytes[1]) / static_cast<double>(snap_bytes[0]));
  for (int k = 0; k < 3; ++k) {
    std::printf("summary %s: mean KLD %.4g, max KLD %.4g, ppl %.4f, greedy identical %u/%u "
                "(mean first difference at %.1f of %u)\n",
                names[k], sum[k].kld / windows, sum[k].kld_max, std::exp(sum[k].nll / windows),
                sum[k].same, windows, static_cast<double>(sum[k].first_diff) / windows, next);
  }
  return 0;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) { return kvtier::Main(argc, argv); }
