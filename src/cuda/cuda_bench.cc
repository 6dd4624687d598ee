// kvtier_cuda_bench: paged decode attention on the GPU at issue 35's shapes (32K and 128K
// context, batch 1 / 8 / 32, 32 query / 8 KV heads, head_dim 128), every format; time per call
// (median of --iters, L2 flushed before each), GB/s on the format's own K+V bytes, the fraction
// of the HBM peak (--peak-gbps, default the H100 SXM's 3352) and of a measured device copy, and,
// given --sdpa FILE (lines "context,batch,ms" from sdpa_bench.py run in the same device call),
// the speed-up over PyTorch SDPA on contiguous bf16 K/V.
//
//   kvtier_cuda_bench [--contexts 32768,131072] [--batches 1,8,32] [--formats bf16,f16,q8_0,q4_0]
//                     [--heads 32] [--kv-heads 8] [--head-dim 128] [--block-tokens 32]
//                     [--iters 20] [--peak-gbps 3352] [--sdpa FILE] [--exact] [--per-head] [--sequential]
//                     [--hpc 2|4|8] [--splits N] [--separate-merge] [--clean-flush]
//                     [--wide-variant 0|1]
//   kvtier_cuda_bench --matvec [--iters 20] [--formats ...] [--gemm]: the forward pass's
//                     MatVecRows (1 and 8 tokens, each kernel) and with --gemm GemmRows (512
//                     tokens, bf16 compute) at Llama-3-8B's and Qwen3-0.6B's projection
//                     shapes, GB/s of weight bytes and TFLOP/s, L2 flushed (clean) before each.
// --clean-flush: the L2 flush also reads its buffer back, so the timed call starts with clean
// lines in L2 (the plain flush leaves up to 50 MB of dirty lines that the call writes back).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/cuda_kv.h"
#include "cuda/forward_ops.h"

namespace kvtier::cuda {
namespace {

std::vector<uint32_t> ParseList(const std::string& s) {
  std::vector<uint32_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(static_cast<uint32_t>(std::stoul(item)));
  return v;
}

std::vector<std::string> ParseNames(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(item);
  return v;
}

int Fail(const Status& s) {
  std::fprintf(stderr, "kvtier_cuda_bench: %s\n", s.ToString().c_str());
  return 1;
}

// --matvec: weights [n_out, k] of each format with random codes (q8_0 / q4_0 blocks get a
// fixed scale 2^-7; f16 / bf16 values from random normals), built on the host, at the
// projection shapes of Llama-3-8B (and its 1024-row K/V) and Qwen3-0.6B (with its 151936-row
// output matrix). Per shape: the streaming kernel at its default tuning for 1 and 8 tokens,
// at 1 / 2 / 4 rows per warp (rN; q8_0 / q4_0 also chunks of 32 or 16 blocks, cN, and x per
// warp or staged per thread block, x) for one token and some for 8, the lane-per-block
// kernel (`simple`, the baseline) for 1 and 8 tokens, and with --gemm GemmRows at 512 tokens.
int MatVecBench(uint32_t iters, double peak, bool gemm, const std::vector<std::string>& formats) {
  struct Shape {
    const char* model;
    uint32_t n_out, k;
  };
  const Shape shapes[] = {{"llama8b", 4096, 4096},   {"llama8b", 1024, 4096},
                          {"llama8b", 14336, 4096},  {"llama8b", 4096, 14336},
                          {"qwen06b", 2048, 1024},   {"qwen06b", 1024, 2048},
                          {"qwen06b", 3072, 1024},   {"qwen06b", 1024, 3072},
                          {"qwen06b", 151936, 1024}};
  auto flush = DeviceBuffer::Allocate(size_t{256} << 20);
  if (!flush.ok()) return Fail(flush.status());
  std::printf("device: %s\n", DeviceDescription().c_str());
  std::printf("matvec / gemm: y [tokens, n_out] = x [tokens, k] . W^T, f32 x and y; median of "
              "%u calls, L2 flushed (clean lines) before each; GB/s of W's bytes, %% of %.0f\n",
              iters, peak);
  std::printf("%-6s %-8s %6s %6s %6s %-10s %9s %8s %6s %9s\n", "format", "model", "n_out", "k",
              "tokens", "kernel", "ms", "GB/s", "%peak", "TFLOP/s");
  std::mt19937_64 rng(7);
  GemmWorkspace gws;
  for (const std::string& fname : formats) {
    auto fmt = ParseFormat(fname);
    if (!fmt.ok()) return Fail(fmt.status());
    for (const Shape& sh : shapes) {
      const size_t rb = fmt->row_bytes(sh.k);
      std::vector<uint8_t> host(rb * sh.n_out);
      if (fmt->kind == FormatKind::kBF16 || fmt->kind == FormatKind::kF16) {
        // Random 16-bit patterns with the exponent kept small (finite, |v| < 2).
        for (size_t i = 0; i < host.size() / 2; ++i) {
          uint16_t h = static_cast<uint16_t>(rng());
          h = fmt->kind == FormatKind::kBF16 ? static_cast<uint16_t>((h & 0x807f) | 0x3c00)
                                             : static_cast<uint16_t>((h & 0x83ff) | 0x3800);
          std::memcpy(&host[2 * i], &h, 2);
        }
      } else {
        const size_t bb = fmt->kind == FormatKind::kQ8_0 ? 34 : 18;
        for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(rng());
        for (size_t i = 0; i < host.size(); i += bb) {
          host[i] = 0x00;
          host[i + 1] = 0x20;  // f16 2^-7
        }
      }
      const uint32_t max_tok = gemm ? 512 : 8;
      auto w = DeviceBuffer::Allocate(host.size());
      auto x = DeviceBuffer::Allocate(static_cast<size_t>(max_tok) * sh.k * 4);
      auto y = DeviceBuffer::Allocate(static_cast<size_t>(max_tok) * sh.n_out * 4);
      if (!w.ok() || !x.ok() || !y.ok()) return Fail(Status::ResourceExhausted("matvec buffers"));
      Status st = w->CopyFromHost(host.data(), host.size());
      if (st.ok()) st = FillRandom(x->data(), static_cast<size_t>(max_tok) * sh.k, DType::kF32, 3);
      if (!st.ok()) return Fail(st);
      struct Run {
        uint32_t tokens;
        MatVecTuning tu;
        bool gemm;
        std::string name;
      };
      auto name = [](const MatVecTuning& t) {
        if (t.simple) return std::string("simple");
        if (t.rows_per_warp == 0 && t.chunk_blocks == 0 && t.smem_carveout < 0) {
          return std::string("default");
        }
        char buf[48];
        int n = std::snprintf(buf, sizeof buf, "r%u", t.rows_per_warp);
        if (t.chunk_blocks) n += std::snprintf(buf + n, sizeof buf - n, "c%u", t.chunk_blocks);
        if (t.smem_carveout >= 0) n += std::snprintf(buf + n, sizeof buf - n, "o%d", t.smem_carveout);
        if (t.x_smem == 1) std::snprintf(buf + n, sizeof buf - n, "x");
        return std::string(buf);
      };
      std::vector<Run> runs;
      auto add = [&](uint32_t tokens, MatVecTuning t) { runs.push_back({tokens, t, false, name(t)}); };
      const bool quant = fmt->is_quantized();
      add(1, {});
      add(8, {});
      for (uint32_t r : {1u, 2u, 4u}) {
        if (!quant) {
          add(1, {r, false, 0, -1});
          continue;
        }
        for (uint32_t c : {32u, 16u}) {
          for (int xs : {0, 1}) add(1, {r, false, c, -1, xs});
        }
      }
      add(8, {1, false, 0, -1});
      add(8, {4, false, 0, -1});
      if (quant) {
        for (uint32_t r : {1u, 2u, 4u}) add(8, {r, false, 16, -1, 1});
        add(8, {2, false, 32, -1, 1});
      }
      add(1, {0, true, 0, -1});
      add(8, {0, true, 0, -1});
      if (gemm) runs.push_back({512, {}, true, "gemm-bf16"});
      for (const Run& run : runs) {
        std::vector<double> ms;
        for (uint32_t it = 0; it < iters + 3; ++it) {
          if (Status f = flush->Fill(static_cast<uint8_t>(it)); !f.ok()) return Fail(f);
          if (Status f = ReadThrough(*flush); !f.ok()) return Fail(f);
          auto t = TimeOnDevice([&] {
            return run.gemm ? GemmRows(w->data(), *fmt, sh.n_out, sh.k, rb, x->as<float>(),
                                       run.tokens, y->as<float>(), DType::kBF16, &gws)
                            : MatVecRowsTuned(w->data(), *fmt, sh.n_out, sh.k, rb,
                                              x->as<float>(), run.tokens, y->as<float>(), run.tu);
          });
          if (!t.ok()) return Fail(t.status());
          if (it >= 3) ms.push_back(*t);
        }
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        const double gbps = static_cast<double>(host.size()) / (med * 1e-3) / 1e9;
        const double tflops = 2.0 * sh.n_out * sh.k * run.tokens / (med * 1e-3) / 1e12;
        std::printf("%-6s %-8s %6u %6u %6u %-10s %9.4f %8.0f %5.1f%% %9.2f\n", fname.c_str(),
                    sh.model, sh.n_out, sh.k, run.tokens, run.name.c_str(), med, gbps,
                    100 * gbps / peak, tflops);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  std::vector<uint32_t> contexts = {32768, 131072}, batches = {1, 8, 32};
  std::vector<std::string> formats = {"bf16", "f16", "q8_0", "q4_0"};
  uint32_t heads = 32, kv_heads = 8, head_dim = 128, block_tokens = 32, iters = 20;
  double peak = 3352;
  std::string sdpa_file;
  bool exact = false, per_head = false, sequential = false, separate_merge = false;
  bool clean_flush = false, matvec = false, gemm = false, formats_set = false;
  uint32_t hpc = 0, splits_opt = 0, wide_variant = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--contexts") contexts = ParseList(next());
    else if (a == "--batches") batches = ParseList(next());
    else if (a == "--formats") formats = ParseNames(next()), formats_set = true;
    else if (a == "--heads") heads = std::stoul(next());
    else if (a == "--kv-heads") kv_heads = std::stoul(next());
    else if (a == "--head-dim") head_dim = std::stoul(next());
    else if (a == "--block-tokens") block_tokens = std::stoul(next());
    else if (a == "--iters") iters = std::stoul(next());
    else if (a == "--peak-gbps") peak = std::stod(next());
    else if (a == "--sdpa") sdpa_file = next();
    else if (a == "--exact") exact = true;
    else if (a == "--per-head") per_head = true;
    else if (a == "--sequential") sequential = true;
    else if (a == "--hpc") hpc = std::stoul(next());
    else if (a == "--splits") splits_opt = std::stoul(next());
    else if (a == "--separate-merge") separate_merge = true;
    else if (a == "--clean-flush") clean_flush = true;
    else if (a == "--wide-variant") wide_variant = std::stoul(next());
    else if (a == "--matvec") matvec = true;
    else if (a == "--gemm") gemm = true;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  std::string why;
  if (!DeviceAvailable(&why)) {
    std::fprintf(stderr, "kvtier_cuda_bench: %s\n", why.c_str());
    return 1;
  }
  if (matvec) {
    if (!formats_set) formats = {"bf16", "f16", "q8_0", "q4_0"};
    return MatVecBench(iters, peak, gemm, formats);
  }
  std::map<std::pair<uint32_t, uint32_t>, double> sdpa;
  if (!sdpa_file.empty()) {
    std::ifstream in(sdpa_file);
    std::string line;
    while (std::getline(in, line)) {
      uint32_t ctx = 0, b = 0;
      double ms = 0;
      if (std::sscanf(line.c_str(), "%u,%u,%lf", &ctx, &b, &ms) == 3) sdpa[{ctx, b}] = ms;
    }
  }
  auto copy = MeasureCopyBandwidth(size_t{2} << 30);
  if (!copy.ok()) return Fail(copy.status());
  std::printf("device: %s\n", DeviceDescription().c_str());
  std::printf("device copy: %.0f GB/s (read + write); HBM peak taken as %.0f GB/s\n", *copy, peak);
  std::printf("shape: %u q / %u KV heads, head_dim %u, %u-token blocks (%s), f32 q/out, "
              "median of %u calls, L2 flushed before each%s; %s kernel\n",
              heads, kv_heads, head_dim, block_tokens, sequential ? "in order" : "shuffled", iters,
              clean_flush ? " and read back (clean lines)" : "", exact ? "f32 (exact)" : (per_head ? "per-head tensor-core" : "tensor-core"));
  std::printf("%-6s %7s %5s %6s %9s %8s %7s %7s %9s %8s  %s\n", "format", "context", "batch",
              "splits", "ms", "GB/s", "%peak", "%copy", "sdpa ms", "vs sdpa", "kernel");

  const uint32_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
  const uint32_t max_b = *std::max_element(batches.begin(), batches.end());
  auto flush = DeviceBuffer::Allocate(size_t{256} << 20);
  if (!flush.ok()) return Fail(flush.status());
  for (const std::string& fname : formats) {
    auto fmt = ParseFormat(fname);
    if (!fmt.ok()) return Fail(fmt.status());
    const KvShape shape{1, kv_heads, head_dim};
    const uint32_t blocks_per_seq = (max_ctx + block_tokens - 1) / block_tokens;
    const uint32_t n_blocks = blocks_per_seq * max_b;
    auto pool_r = DevicePool::Create(shape, *fmt, *fmt, block_tokens, n_blocks);
    if (!pool_r.ok()) return Fail(pool_r.status());
    DevicePool& pool = **pool_r;
    // Blocks in a shuffled order, as a long-running server's pool hands them out.
    std::vector<BlockId> perm(n_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    if (!sequential) std::shuffle(perm.begin(), perm.end(), std::mt19937_64(42));
    // Fill every block through the append kernel, a chunk of tokens at a time.
    {
      const uint32_t chunk = 65536;
      const size_t row = static_cast<size_t>(kv_heads) * head_dim;
      auto k = DeviceBuffer::Allocate(chunk * row * 2);
      auto v = DeviceBuffer::Allocate(chunk * row * 2);
      auto sl = DeviceBuffer::Allocate(chunk * sizeof(int64_t));
      if (!k.ok() || !v.ok() || !sl.ok()) return Fail(Status::ResourceExhausted("fill buffers"));
      const uint64_t total = static_cast<uint64_t>(n_blocks) * block_tokens;
      std::vector<int64_t> slots(chunk);
      for (uint64_t t0 = 0, seed = 1; t0 < total; t0 += chunk, ++seed) {
        const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(chunk, total - t0));
        for (uint32_t i = 0; i < n; ++i) slots[i] = static_cast<int64_t>(t0 + i);
        Status st = FillRandom(k->data(), n * row, DType::kBF16, 2 * seed);
        if (st.ok()) st = FillRandom(v->data(), n * row, DType::kBF16, 2 * seed + 1);
        if (st.ok()) st = sl->CopyFromHost(slots.data(), n * sizeof(int64_t));
        if (st.ok()) st = AppendKv(pool, 0, DType::kBF16, k->data(), v->data(), sl->as<int64_t>(), n);
        if (!st.ok()) return Fail(st);
      }
      if (Status st = Synchronize(); !st.ok()) return Fail(st);
    }
    std::vector<BlockId> tables(static_cast<size_t>(n_blocks));
    for (uint32_t i = 0; i < n_blocks; ++i) tables[i] = perm[i];
    auto dtables = DeviceBuffer::Allocate(tables.size() * sizeof(BlockId));
    if (!dtables.ok()) return Fail(dtables.status());
    if (Status st = dtables->CopyFromHost(tables.data(), tables.size() * sizeof(BlockId)); !st.ok()) {
      return Fail(st);
    }
    for (uint32_t ctx : contexts) {
      for (uint32_t b : batches) {
        std::vector<PagedKvRow> rows(b);
        for (uint32_t r = 0; r < b; ++r) {
          rows[r].block_table = dtables->as<const BlockId>() + static_cast<size_t>(r) * blocks_per_seq;
          rows[r].n_blocks = blocks_per_seq;
          rows[r].length = ctx;
        }
        auto drows = DeviceBuffer::Allocate(rows.size() * sizeof(PagedKvRow));
        auto q = DeviceBuffer::Allocate(static_cast<size_t>(b) * heads * head_dim * sizeof(float));
        auto out = DeviceBuffer::Allocate(static_cast<size_t>(b) * heads * head_dim * sizeof(float));
        if (!drows.ok() || !q.ok() || !out.ok()) return Fail(Status::ResourceExhausted("bench buffers"));
        if (Status st = drows->CopyFromHost(rows.data(), rows.size() * sizeof(PagedKvRow)); !st.ok()) {
          return Fail(st);
        }
        if (Status st = FillRandom(q->data(), static_cast<size_t>(b) * heads * head_dim, DType::kF32, 99);
            !st.ok()) {
          return Fail(st);
        }
        const PagedKvView view = pool.View(0, drows->as<const PagedKvRow>(), b);
        AttentionParams p;
        p.n_heads = heads;
        DecodeOptions o;
        o.max_length = ctx;
        o.exact = exact;
        o.per_head = per_head;
        o.heads_per_block = hpc;
        o.n_splits = splits_opt;
        o.separate_merge = separate_merge;
        o.wide_variant = wide_variant;
        DecodeWorkspace ws;
        const uint32_t splits = splits_opt ? splits_opt
                                           : ChooseSplits(b, kv_heads, ctx, *fmt, head_dim, o,
                                                          heads / kv_heads);
        const std::string kname =
            ChooseKernelName(b, kv_heads, ctx, *fmt, head_dim, o, heads / kv_heads) +
            (separate_merge ? ", separate merge" : "");
        std::vector<double> ms;
        for (uint32_t it = 0; it < iters + 3; ++it) {
          if (Status st = flush->Fill(static_cast<uint8_t>(it)); !st.ok()) return Fail(st);
          if (clean_flush) {
            if (Status st = ReadThrough(*flush); !st.ok()) return Fail(st);
          }
          auto t = TimeOnDevice([&] { return DecodeAttention(view, q->as<const float>(), p, out->as<float>(), o, &ws); });
          if (!t.ok()) return Fail(t.status());
          if (it >= 3) ms.push_back(*t);
        }
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        const double bytes = static_cast<double>(b) * ctx * kv_heads *
                             (fmt->row_bytes(head_dim) * 2.0);
        const double gbps = bytes / (med * 1e-3) / 1e9;
        char sd[32] = "-", vs[32] = "-";
        if (auto it = sdpa.find({ctx, b}); it != sdpa.end()) {
          std::snprintf(sd, sizeof sd, "%.3f", it->second);
          std::snprintf(vs, sizeof vs, "%.2fx", it->second / med);
        }
        std::printf("%-6s %7u %5u %6u %9.3f %8.0f %6.1f%% %6.1f%% %9s %8s  %s\n", fname.c_str(),
                    ctx, b, splits, med, gbps, 100 * gbps / peak, 100 * gbps / *copy, sd, vs,
                    kname.c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvtier::cuda

int main(int argc, char** argv) { return kvtier::cuda::Main(argc, argv); }
