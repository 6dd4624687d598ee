// `kvtier-bench model`; see bench_model.h.
#include "cli/bench_model.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/stats.h"
#include "base/strings.h"
#include "kvtier/thread_pool.h"
#include "base/timer.h"
#include "cli/bench_report.h"
#include "cli/flags.h"
#include "cli/model_session.h"
#include "model/matmul.h"

namespace kvtier::cli {
namespace {

// Fills every cache layer of row 0 (a hybrid model's: its attention layers) with `n` tokens
// of seeded normal K/V, 1024 tokens at a time.
Status FillRandom(BatchCache& cache, const ModelConfig& mc, uint32_t n, uint64_t seed) {
  const KvShape shape = mc.kv_shape();
  const size_t width = size_t(shape.n_kv_heads) * shape.head_dim;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(1024 * width), v(1024 * width);  // [chunk, n_kv_heads, head_dim]
  const uint32_t n_chunk = std::min<uint32_t>(n, 1024);
  for (float& x : k) x = nd(rng);
  for (float& x : v) x = nd(rng);
  for (uint32_t done = 0; done < n;) {
    const uint32_t m = std::min(n_chunk, n - done);
    const uint32_t want[1] = {m};
    KVTIER_RETURN_IF_ERROR(cache.Reserve(want));
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      KVTIER_RETURN_IF_ERROR(cache.Append(l, DType::kF32, k.data(), v.data(), m));
    }
    done += m;
  }
  return Status::OK();
}

}  // namespace

Result<BenchModelReport> RunBenchModel(const BenchModelConfig& c,
                                       const std::function<void(int, int)>& progress) {
  KVTIER_ASSIGN_OR_RETURN(const auto depths, ParseUintList("--depth", c.depths, 0, 1u << 20));
  const auto kv_types = SplitComma(c.kv_types);
  if (kv_types.empty()) return Status::InvalidArgument("--kv-type: no formats given");
  KVTIER_RETURN_IF_ERROR(CheckRange("--prefill", c.prefill, 1, 1 << 16));
  KVTIER_RETURN_IF_ERROR(CheckRange("--decode", c.decode, 1, 1 << 16));
  KVTIER_RETURN_IF_ERROR(CheckRange("--repeats", c.repeats, 1, 1000));
  KVTIER_RETURN_IF_ERROR(CheckRange("--threads", c.threads, 0, 1024));
  {
    static const std::pair<const char*, model::MatMulPath> kPaths[] = {
        {"auto", model::MatMulPath::kAuto}, {"float", model::MatMulPath::kFloat},
        {"int8-scalar", model::MatMulPath::kInt8Scalar},
        {"int8-avx2", model::MatMulPath::kInt8Avx2},
        {"int8-avx512", model::MatMulPath::kInt8Avx512},
        {"int8-avx512-tiles", model::MatMulPath::kInt8Avx512Tiles}};
    bool found = false;
    for (const auto& [name, path] : kPaths) {
      if (c.matmul != name) continue;
      found = true;
      if (!model::MatMulForcePath(path)) {
        return Status::InvalidArgument("--matmul " + c.matmul + ": this CPU cannot run it");
      }
    }
    if (!found) {
      return Status::InvalidArgument("--matmul: expected auto, float, int8-scalar, int8-avx2, "
                                     "int8-avx512 or int8-avx512-tiles, got '" + c.matmul + "'");
    }
  }
  KVTIER_ASSIGN_OR_RETURN(LoadedModel lm, LoadModel(c.model));
  const Model& m = *lm.model;
  const ModelConfig& mc = m.config();
  ThreadPool pool(c.threads);
  BenchModelReport r;
  r.model_name = mc.name;
  r.arch = std::string(ModelArchName(mc.arch));
  r.weight_bytes = m.weight_bytes();
  r.threads = pool.num_threads();
  r.matmul_target = std::string(model::MatMulTargetName()) + ", " + c.matmul + " (q8_0: " +
                    model::MatMulKernelName(static_cast<uint32_t>(GgmlType::kQ8_0), 1) + ")";
  const int total = static_cast<int>(kv_types.size() * depths.size());
  int step = 0;
  std::mt19937 tok_rng(static_cast<uint32_t>(c.seed));
  std::vector<int32_t> prompt(c.prefill);
  for (int32_t& t : prompt) t = static_cast<int32_t>(tok_rng() % mc.n_vocab);
  std::vector<float> logits(mc.n_vocab);
  for (const std::string& kv : kv_types) {
    for (uint32_t depth : depths) {
      const uint32_t need = depth + std::max(c.prefill, c.decode) + 1;
      KVTIER_ASSIGN_OR_RETURN(auto kv_pool, MakeKvPool(mc, "--kv-type", kv, need));
      BatchCache cache(kv_pool);
      KVTIER_RETURN_IF_ERROR(cache.Add(SequenceCache(kv_pool)));
      KVTIER_RETURN_IF_ERROR(FillRandom(cache, mc, depth, c.seed + depth));
      // A hybrid model (qwen35) runs with a recurrent state at the depth (zero: the state's
      // values do not change the work); every timed pass starts from it again.
      const bool hybrid = m.state_format() != 0;
      HybridSeqState base;
      base.n_past = depth;
      HybridSeqState st = base;
      HybridSeqState* st_ptr = &st;
      const std::span<HybridSeqState* const> states =
          hybrid ? std::span<HybridSeqState* const>(&st_ptr, 1)
                 : std::span<HybridSeqState* const>();
      BenchModelRow row;
      row.kv_type = kv;
      row.depth = depth;
      std::vector<double> pp, tg, pp_cpu, tg_cpu;
      auto cpu_now = [] {
        timespec ts{};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
      };
      for (int rep = 0; rep < c.repeats; ++rep) {
        std::span<const int32_t> rows[1] = {prompt};
        Timer t;
        double c0 = cpu_now();
        KVTIER_RETURN_IF_ERROR(m.Forward(cache, rows, false, logits.data(), &pool, states));
        pp.push_back(c.prefill / t.Seconds());
        pp_cpu.push_back(c.prefill / std::max(1e-9, cpu_now() - c0));
        row.kv_bytes = kv_pool->Stats().bytes_in_use;
        KVTIER_RETURN_IF_ERROR(cache.Trim(c.prefill).status());
        st = base;
        int32_t next = prompt[0];
        t = Timer();
        c0 = cpu_now();
        for (uint32_t i = 0; i < c.decode; ++i) {
          rows[0] = std::span<const int32_t>(&next, 1);
          KVTIER_RETURN_IF_ERROR(m.Forward(cache, rows, false, logits.data(), &pool, states));
          next = static_cast<int32_t>((next + 7 * i + 1) % mc.n_vocab);
        }
        tg.push_back(c.decode / t.Seconds());
        tg_cpu.push_back(c.decode / std::max(1e-9, cpu_now() - c0));
        KVTIER_RETURN_IF_ERROR(cache.Trim(c.decode).status());
        st = base;
      }
      row.prefill_tok_s = Median(pp);
      row.decode_tok_s = Median(tg);
      row.prefill_cpu_tok_s = Median(pp_cpu);
      row.decode_cpu_tok_s = Median(tg_cpu);
      r.rows.push_back(row);
      if (progress) progress(++step, total);
    }
  }
  return r;
}

std::string FormatBenchModelTable(const BenchModelReport& r) {
  std::ostringstream o;
  o << "model " << r.model_name << " (" << r.arch << ", " << DescribeBytes(r.weight_bytes)
    << " of weights), " << r.threads << " threads, matmul " << r.matmul_target << "\n";
  TextTable t({"<kv", "depth", "prefill tok/s", "decode tok/s", "KV bytes", "prefill tok/CPU-s",
               "decode tok/CPU-s"});
  for (const auto& row : r.rows) {
    t.Row({row.kv_type, std::to_string(row.depth), Printf("%.1f", row.prefill_tok_s),
           Printf("%.2f", row.decode_tok_s), DescribeBytes(row.kv_bytes),
           Printf("%.1f", row.prefill_cpu_tok_s), Printf("%.2f", row.decode_cpu_tok_s)});
  }
  o << t.Render();
  return o.str();
}

std::string FormatBenchModelJson(const BenchModelReport& r) {
  nlohmann::json j;
  j["model"] = r.model_name;
  j["arch"] = r.arch;
  j["weight_bytes"] = r.weight_bytes;
  j["threads"] = r.threads;
  j["matmul_target"] = r.matmul_target;
  j["rows"] = nlohmann::json::array();
  for (const auto& row : r.rows) {
    j["rows"].push_back({{"kv_type", row.kv_type},
                         {"depth", row.depth},
                         {"prefill_tok_s", row.prefill_tok_s},
                         {"decode_tok_s", row.decode_tok_s},
                         {"prefill_cpu_tok_s", row.prefill_cpu_tok_s},
                         {"decode_cpu_tok_s", row.decode_cpu_tok_s},
                         {"kv_bytes", row.kv_bytes}});
  }
  return JsonText(j);
}

}  // namespace kvtier::cli
