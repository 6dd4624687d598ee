// DecodeAttention: argument checks, the split choice, the launch and the log-sum-exp merge of
// the splits (see cuda_kv.h and decode.cuh).
#include <algorithm>
#include <string>
#include <vector>

#include "cuda/cuda_kv.h"
#include "cuda/decode_wide.cuh"
#include "cuda/rot.cuh"
#include "quant/rot.h"

namespace kvtier::cuda {
namespace {

// out[row, head, :] = sum_s w_s o_s / sum_s w_s, w_s = exp(lse_s - max lse).
__global__ void MergeSplitsKernel(const float* part_o, const float* part_lse, float* out,
                                  uint32_t n_splits, uint32_t head_dim) {
  const size_t head = blockIdx.x;
  const float* lse = part_lse + head * n_splits;
  float m = -INFINITY;
  for (uint32_t s = 0; s < n_splits; ++s) m = fmaxf(m, lse[s]);
  for (uint32_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    if (m != -INFINITY) {
      for (uint32_t s = 0; s < n_splits; ++s) {
        if (lse[s] == -INFINITY) continue;
        const float w = expf(lse[s] - m);
        num = fmaf(w, part_o[(head * n_splits + s) * head_dim + d], num);
        den += w;
      }
    }
    out[head * head_dim + d] = den > 0.0f ? num / den : 0.0f;
  }
}

// rot4 rows: q into the rotated basis before the kernel, out back after (a warp per vector).
__global__ void RotateVectorsKernel(const float* in, float* out, uint32_t n, uint32_t seed,
                                    bool inverse) {
  __shared__ float y[kRotMaxHeadDim];
  const int lane = threadIdx.x;
  const size_t base = static_cast<size_t>(blockIdx.x) * n;
  for (uint32_t i = lane; i < n; i += 32) y[i] = in[base + i];
  __syncwarp();
  dev::RotateRowWarp(y, n, seed, lane, inverse);
  for (uint32_t i = lane; i < n; i += 32) out[base + i] = y[i];
}

using Launcher = Status (*)(const DecodeParams&, int, int, uint32_t, uint32_t, cudaStream_t, int*);
using MmaLauncher = Status (*)(const DecodeParams&, int, uint32_t, uint32_t, cudaStream_t, int*);
using WideLauncher = Status (*)(const DecodeParams&, int, int, uint32_t, uint32_t, cudaStream_t,
                                int*);

Launcher LauncherFor(FormatKind k) {
  switch (k) {
    case FormatKind::kF16: return LaunchDecodeF16;
    case FormatKind::kBF16: return LaunchDecodeBF16;
    case FormatKind::kQ8_0: return LaunchDecodeQ8_0;
    case FormatKind::kQ4_0: return LaunchDecodeQ4_0;
    case FormatKind::kRot: return LaunchDecodeRot4;
    default: return nullptr;
  }
}

MmaLauncher MmaLauncherFor(FormatKind k) {
  switch (k) {
    case FormatKind::kF16: return LaunchDecodeMmaF16;
    case FormatKind::kBF16: return LaunchDecodeMmaBF16;
    case FormatKind::kQ8_0: return LaunchDecodeMmaQ8_0;
    case FormatKind::kQ4_0: return LaunchDecodeMmaQ4_0;
    default: return nullptr;
  }
}

WideLauncher WideLauncherFor(FormatKind k) {
  switch (k) {
    case FormatKind::kF16: return LaunchDecodeWideF16;
    case FormatKind::kBF16: return LaunchDecodeWideBF16;
    case FormatKind::kQ8_0: return LaunchDecodeWideQ8_0;
    case FormatKind::kQ4_0: return LaunchDecodeWideQ4_0;
    case FormatKind::kRot: return LaunchDecodeWideRot4;
    default: return nullptr;
  }
}

// Tokens per tile of the all-heads kernel (WideGeo::kTokens).
uint32_t WideTile(FormatKind k, int hpc) {
  const int units = k == FormatKind::kF16 || k == FormatKind::kBF16 ? KVTIER_CUDA_WIDE_PLAIN_UNITS
                    : k == FormatKind::kQ8_0                        ? KVTIER_CUDA_WIDE_Q8_UNITS
                                                                    : KVTIER_CUDA_WIDE_Q4_UNITS;
  return static_cast<uint32_t>(16 * units * kWideWarps / hpc);
}

int SmCount() {
  static int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      return 1;
    }
    return v;
  }();
  return n;
}

constexpr uint32_t kMinChunk = 256;  // tokens a split reads at least
constexpr uint64_t kFusedMergeBytes = 512 * 1024;

// Which kernel serves a call: the f32 one (exact), the all-heads one (hpc KV heads per thread
// block) where the view allows, else the per-head tensor-core one; and into how many splits a
// row's keys go.
struct KernelChoice {
  enum Kind { kExact, kPerHead, kWide } kind = kPerHead;
  int hpc = 1;      // KV heads per thread block
  int variant = 0;  // the all-heads kernel's variant (LaunchDecodeWideVariant)
  int occ = 1;      // thread blocks per SM
  uint32_t tile = kMmaTile;
  uint32_t splits = 1;
};

// Cost model, in bytes per SM: thread blocks run in waves of (SMs x blocks per SM); a block
// costs its tiles plus about two tiles' worth of fixed work (Q, the warp merge, the partial
// write), its SM shared by `occ` blocks. The last block of a (row, KV-head group) then reads
// the group's partial results of every split from L2 (the fused merge), counted at a quarter
// of an HBM byte. Fewest wins, ties to fewer splits.
constexpr uint64_t kMergeByteDiv = 4;

uint64_t BestSplits(const KernelChoice& c, uint32_t n_rows, uint32_t n_kv_heads, uint32_t group,
                    uint32_t max_length, size_t row_bytes, uint32_t head_dim,
                    uint32_t* splits_out) {
  const uint64_t items =
      std::max<uint64_t>(1, static_cast<uint64_t>(n_rows) * (n_kv_heads / c.hpc));
  const uint64_t slots = static_cast<uint64_t>(SmCount()) * c.occ;
  const uint64_t tile = c.tile;
  const uint64_t tile_bytes = tile * c.hpc * row_bytes * 2;
  const uint64_t len = std::max<uint64_t>(max_length, 1);
  const uint64_t max_splits = std::min<uint64_t>(256, std::max<uint64_t>(1, len / kMinChunk));
  const uint64_t merge_per_split = static_cast<uint64_t>(c.hpc) * group * (head_dim + 1) * 4;
  uint64_t splits = 1, best = UINT64_MAX;
  for (uint64_t s = 1; s <= max_splits; ++s) {
    const uint64_t tiles = ((len + s - 1) / s + tile - 1) / tile;
    const uint64_t waves = (items * s + slots - 1) / slots;
    uint64_t cost = waves * (tiles + 2) * tile_bytes * c.occ;
    if (s > 1) cost += s * merge_per_split / kMergeByteDiv;
    if (cost < best) {
      best = cost;
      splits = s;
    }
  }
  *splits_out = static_cast<uint32_t>(splits);
  return best;
}

KernelChoice PickKernel(FormatKind f, uint32_t head_dim, uint32_t n_rows, uint32_t n_kv_heads,
                        uint32_t group, uint32_t max_length, bool packed,
                        const DecodeOptions& o) {
  KernelChoice c;
  DecodeParams dummy{};
  const int hd = static_cast<int>(head_dim);
  const size_t row_bytes = f == FormatKind::kQ8_0                              ? head_dim / 32 * 34
                           : f == FormatKind::kQ4_0 || f == FormatKind::kRot ? head_dim / 32 * 18
                                                                             : head_dim * 2;
  auto exact = [&] {
    c.kind = KernelChoice::kExact;
    c.tile = kTile;
    const Launcher launch = LauncherFor(f);
    if (launch && !launch(dummy, hd, 4, 0, 0, nullptr, &c.occ).ok()) c.occ = 1;
    BestSplits(c, n_rows, n_kv_heads, group, max_length, row_bytes, head_dim, &c.splits);
    return c;
  };
  // rot4 has no per-head tensor-core kernel: the f32 one serves what the all-heads one can't.
  const bool rot = f == FormatKind::kRot;
  if (o.exact || (rot && (o.per_head || !packed))) return exact();
  if (!o.per_head && packed) {
    const WideLauncher wide = WideLauncherFor(f);
    // KV heads per thread block, as measured on the H100 (docs/results/cuda.md, third
    // slice): f16/bf16 2 at every batch; q8_0 8 from 4 (row, group) items, else 2 (a row of 8
    // KV heads: x2 0.057 ms, x4 0.066, x8 0.101 at 32K); q4_0 8 from 16 items (batch 32),
    // else 4 (its 32-token tiles x 3 stages keep 2 blocks per SM only at x8 and x2; x4 at 128K
    // batch 8: 0.619 ms vs x8 0.689).
    const uint64_t rows = n_rows;
    auto items = [&](int hpc) { return rows * (n_kv_heads / hpc); };
    std::vector<int> order;
    if (o.heads_per_block != 0) {
      order = {static_cast<int>(o.heads_per_block)};
    } else if (f == FormatKind::kF16 || f == FormatKind::kBF16) {
      order = {2, 4, 8};
    } else if (f == FormatKind::kQ8_0) {
      order = items(8) >= 4 ? std::vector<int>{8, 4, 2}
              : items(4) >= 4 ? std::vector<int>{4, 2, 8}
                              : std::vector<int>{2, 4, 8};
    } else if (f == FormatKind::kRot) {
      // rot4 (device call 2 of the fifth slice): x8 from 8 items (128K batch 8: x8 0.628 ms,
      // x2 0.638, x4 0.777; 32K batch 32: 0.630 / 0.635 / 0.779), else x4 (32K batch 1: x4
      // 0.059, x2 0.070, x8 0.082).
      order = items(8) >= 8 ? std::vector<int>{8, 4, 2} : std::vector<int>{4, 2, 8};
    } else {
      order = items(8) >= 16 ? std::vector<int>{8, 4, 2} : std::vector<int>{4, 8, 2};
    }
    for (int hpc : order) {
      if (hpc <= 0 || n_kv_heads % hpc != 0 || !wide) continue;
      // q4_0 x4 at 2 stages from 4 rows (device call 8: 0.157 vs 0.174 ms at 32K batch 8,
      // 0.531 vs 0.626 at 128K; 4 rows 0.098 vs 0.099, 0.285 vs 0.325; 2 rows at 32K 0.074 vs
      // 0.063); fewer rows keep 3 stages and one row the fused merge (0.045 vs 0.069).
      const int variant =
          f == FormatKind::kQ4_0 && hpc == 4 && n_rows >= 4 && o.wide_variant != 0 ? 1 : 0;
      int occ = 0;
      if (!wide(dummy, hd, hpc | (variant << 8), 0, 0, nullptr, &occ).ok()) {
        cudaGetLastError();
        continue;
      }
      c.kind = KernelChoice::kWide;
      c.hpc = hpc;
      c.variant = variant;
      c.occ = occ;
      c.tile = WideTile(f, hpc);
      BestSplits(c, n_rows, n_kv_heads, group, max_length, row_bytes, head_dim, &c.splits);
      return c;
    }
  }
  if (rot) return exact();
  const MmaLauncher launch = MmaLauncherFor(f);
  if (launch && !launch(dummy, hd, 0, 0, nullptr, &c.occ).ok()) c.occ = 1;
  BestSplits(c, n_rows, n_kv_heads, group, max_length, row_bytes, head_dim, &c.splits);
  return c;
}

}  // namespace

uint32_t ChooseSplits(uint32_t n_rows, uint32_t n_kv_heads, uint32_t max_length,
                      const Format& format, uint32_t head_dim, const DecodeOptions& options,
                      uint32_t group) {
  return PickKernel(format.kind, head_dim, n_rows, n_kv_heads, group, max_length, true, options)
      .splits;
}

std::string ChooseKernelName(uint32_t n_rows, uint32_t n_kv_heads, uint32_t max_length,
                             const Format& format, uint32_t head_dim,
                             const DecodeOptions& options, uint32_t group) {
  const KernelChoice c =
      PickKernel(format.kind, head_dim, n_rows, n_kv_heads, group, max_length, true, options);
  return c.kind == KernelChoice::kExact ? "f32"
         : c.kind == KernelChoice::kWide
             ? "all-heads x" + std::to_string(c.hpc) + (c.variant ? " (2 stages)" : "")
             : "per-head";
}

Status DecodeAttention(const PagedKvView& kv, const float* q, const AttentionParams& params,
                       float* out, const DecodeOptions& options, DecodeWorkspace* ws) {
  const std::string w = "CUDA decode attention: ";
  if (!(kv.k_format == kv.v_format)) {
    return Status::Unimplemented(w + "K " + kv.k_format.spec() + " and V " + kv.v_format.spec() +
                                 " differ; the GPU kernels take one format for both so far");
  }
  const Launcher launch = LauncherFor(kv.k_format.kind);
  const bool rot = kv.k_format.kind == FormatKind::kRot;
  if (!launch || (rot && kv.k_format.bits != 4) ||
      (rot && kv.head_dim > kRotMaxHeadDim)) {
    return Status::Unimplemented(w + "format " + kv.k_format.spec() + " with head_dim " +
                                 std::to_string(kv.head_dim) +
                                 " is not implemented on the GPU yet (f16, bf16, q8_0, q4_0, "
                                 "rot4 up to head_dim 256)");
  }
  if (kv.n_kv_heads == 0 || params.n_heads == 0 || params.n_heads % kv.n_kv_heads != 0) {
    return Status::InvalidArgument(w + "n_heads " + std::to_string(params.n_heads) +
                                   " must be a positive multiple of the " +
                                   std::to_string(kv.n_kv_heads) + " KV heads");
  }
  const uint32_t group = params.n_heads / kv.n_kv_heads;
  if (group > 8) {
    return Status::Unimplemented(w + std::to_string(group) +
                                 " query heads per KV head (1..8 so far)");
  }
  if (params.out_dtype != DType::kF32) return Status::Unimplemented(w + "out_dtype must be f32");
  if (!(params.scale >= 0) || !std::isfinite(params.scale) || !(params.softcap >= 0) ||
      !std::isfinite(params.softcap)) {
    return Status::InvalidArgument(w + "scale and softcap must be finite and >= 0");
  }
  if (kv.block_tokens == 0) return Status::InvalidArgument(w + "block_tokens is 0");
  if (kv.n_rows == 0) return Status::OK();
  if (!q || !out || !kv.rows || !kv.k_base || !kv.v_base || !ws) {
    return Status::InvalidArgument(w + "null pointer");
  }
  // The kernels copy rows in 4-, 8- or 16-byte pieces: every address must allow that.
  const uintptr_t bits = reinterpret_cast<uintptr_t>(kv.k_base) |
                         reinterpret_cast<uintptr_t>(kv.v_base) | kv.block_stride |
                         kv.k_token_stride | kv.k_head_stride | kv.v_token_stride |
                         kv.v_head_stride;
  const size_t row_bytes = kv.k_format.row_bytes(kv.head_dim);
  const size_t copy = row_bytes % 16 == 0 ? 16 : row_bytes % 8 == 0 ? 8 : 4;
  if (bits % copy != 0) {
    return Status::InvalidArgument(w + "view addresses and strides must be multiples of " +
                                   std::to_string(copy) + " bytes");
  }
  // The all-heads kernel copies a token's rows of its heads as one run of 16-byte pieces:
  // heads packed side by side, K and V with the same token stride, 16-byte aligned.
  const uintptr_t run_bits = reinterpret_cast<uintptr_t>(kv.k_base) |
                             reinterpret_cast<uintptr_t>(kv.v_base) | kv.block_stride |
                             kv.k_token_stride;
  const bool packed = kv.k_head_stride == row_bytes && kv.v_head_stride == row_bytes &&
                      kv.k_token_stride == kv.v_token_stride && run_bits % 16 == 0;
  // The last answer, kept: a decode step asks the same question for every layer.
  struct Key {
    uint32_t n_rows, n_kv_heads, group, max_length, format_id, head_dim, hpc_opt, variant_opt;
    bool exact, per_head, packed;
    bool operator==(const Key&) const = default;
  };
  static thread_local Key last_key{};
  static thread_local KernelChoice last_choice{};
  static thread_local bool have_last = false;
  const Key key{kv.n_rows,          kv.n_kv_heads,           group,
                options.max_length, kv.k_format.id(),        kv.head_dim,
                options.heads_per_block, options.wide_variant, options.exact,
                options.per_head,   packed};
  if (!have_last || !(key == last_key)) {
    last_choice = PickKernel(kv.k_format.kind, kv.head_dim, kv.n_rows, kv.n_kv_heads, group,
                             options.max_length, packed, options);
    last_key = key;
    have_last = true;
  }
  const KernelChoice choice = last_choice;
  uint32_t n_splits = options.n_splits != 0 ? options.n_splits : choice.splits;
  n_splits = std::max(1u, std::min(n_splits, 65535u));
  uint32_t chunk = choice.tile;
  if (n_splits > 1) {
    const uint32_t per = (std::max(options.max_length, 1u) + n_splits - 1) / n_splits;
    chunk = std::max<uint32_t>(choice.tile, (per + choice.tile - 1) / choice.tile * choice.tile);
  }
  const size_t heads = static_cast<size_t>(kv.n_rows) * params.n_heads;
  DecodeParams p{};
  p.k_base = kv.k_base;
  p.v_base = kv.v_base;
  p.block_stride = kv.block_stride;
  p.k_token_stride = kv.k_token_stride;
  p.k_head_stride = kv.k_head_stride;
  p.v_token_stride = kv.v_token_stride;
  p.v_head_stride = kv.v_head_stride;
  p.block_tokens = kv.block_tokens;
  p.rows = kv.rows;
  p.q = q;
  p.out = out;
  p.n_heads = params.n_heads;
  p.group = group;
  p.window = params.window;
  p.n_splits = n_splits;
  p.chunk = chunk;
  p.scale = params.scale > 0 ? params.scale : 1.0f / std::sqrt(static_cast<float>(kv.head_dim));
  p.softcap = params.softcap;
  if (n_splits > 1) {
    const size_t need = heads * n_splits * (kv.head_dim + 1) * sizeof(float);
    if (ws->partial.size() < need) {
      ws->partial = DeviceBuffer();
      KVTIER_ASSIGN_OR_RETURN(ws->partial, DeviceBuffer::Allocate(need));
    }
    p.part_o = ws->partial.as<float>();
    p.part_lse = p.part_o + heads * n_splits * kv.head_dim;
    // The all-heads kernel merges in its last thread block per (row, KV-head group) where it
    // runs one block per SM (dev::MergeStored's kFuse), the weights fit its shared memory and the group's partials are at most kFusedMergeBytes
    // (one thread block reads them all: at 32 heads x 33 splits, 540 KB, a second launch
    // spread over every head was faster); out's rows are written as float4.
    const uint64_t heads_item = static_cast<uint64_t>(choice.hpc) * group;
    if (choice.kind == KernelChoice::kWide && choice.occ == 1 && !options.separate_merge &&
        reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
        heads_item * (n_splits + 1) * 4 <= static_cast<uint64_t>(dev::kFusedMergeSmem) &&
        heads_item * n_splits * kv.head_dim * 4 <= kFusedMergeBytes) {
      const size_t items = static_cast<size_t>(kv.n_rows) * (kv.n_kv_heads / choice.hpc);
      if (ws->counters.size() < items * sizeof(uint32_t)) {
        ws->counters = DeviceBuffer();
        KVTIER_ASSIGN_OR_RETURN(ws->counters, DeviceBuffer::Allocate(items * sizeof(uint32_t)));
        KVTIER_RETURN_IF_ERROR(ws->counters.Fill(0));
      }
      p.counters = ws->counters.as<uint32_t>();
    }
  }
  const auto stream = static_cast<cudaStream_t>(options.stream);
  if (rot) {
    // q . k = (R q) . (R k) and sum p v = R^T sum p (R v): q rotated once per head here, the
    // kernel reads the rows in the rotated basis, out rotated back below.
    const size_t need = heads * kv.head_dim * sizeof(float);
    if (ws->rotated.size() < need) {
      ws->rotated = DeviceBuffer();
      KVTIER_ASSIGN_OR_RETURN(ws->rotated, DeviceBuffer::Allocate(need));
    }
    RotateVectorsKernel<<<static_cast<unsigned>(heads), 32, 0, stream>>>(
        q, ws->rotated.as<float>(), kv.head_dim, kv.k_format.seed, false);
    KVTIER_CUDA_RETURN(cudaGetLastError());
    p.q = ws->rotated.as<float>();
    for (int i = 0; i < 16; ++i) p.rot_levels[i] = kRotLevels4[i];
  }
  if (choice.kind == KernelChoice::kExact) {
    KVTIER_RETURN_IF_ERROR(launch(p, static_cast<int>(kv.head_dim), static_cast<int>(group),
                                  kv.n_rows, kv.n_kv_heads, stream, nullptr));
  } else if (choice.kind == KernelChoice::kWide) {
    KVTIER_RETURN_IF_ERROR(WideLauncherFor(kv.k_format.kind)(p, static_cast<int>(kv.head_dim),
                                                             choice.hpc | (choice.variant << 8),
                                                             kv.n_rows,
                                                             kv.n_kv_heads, stream, nullptr));
  } else {
    KVTIER_RETURN_IF_ERROR(MmaLauncherFor(kv.k_format.kind)(p, static_cast<int>(kv.head_dim),
                                                            kv.n_rows, kv.n_kv_heads, stream,
                                                            nullptr));
  }
  if (n_splits > 1 && !p.counters) {
    MergeSplitsKernel<<<static_cast<unsigned>(heads), std::min<uint32_t>(kv.head_dim, 256), 0,
                        stream>>>(p.part_o, p.part_lse, out, n_splits, kv.head_dim);
    KVTIER_CUDA_RETURN(cudaGetLastError());
  }
  if (rot) {
    RotateVectorsKernel<<<static_cast<unsigned>(heads), 32, 0, stream>>>(
        out, out, kv.head_dim, kv.k_format.seed, true);
    KVTIER_CUDA_RETURN(cudaGetLastError());
  }
  return Status::OK();
}

}  // namespace kvtier::cuda
