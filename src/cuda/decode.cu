// DecodeAttention: argument checks, the split choice, the launch and the log-sum-exp merge of
// the splits (see cuda_kv.h and decode.cuh).
#include <algorithm>
#include <string>

#include "cuda/cuda_kv.h"
#include "cuda/decode_mma.cuh"

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

using Launcher = Status (*)(const DecodeParams&, int, int, uint32_t, uint32_t, cudaStream_t, int*);
using MmaLauncher = Status (*)(const DecodeParams&, int, uint32_t, uint32_t, cudaStream_t, int*);

Launcher LauncherFor(FormatKind k) {
  switch (k) {
    case FormatKind::kF16: return LaunchDecodeF16;
    case FormatKind::kBF16: return LaunchDecodeBF16;
    case FormatKind::kQ8_0: return LaunchDecodeQ8_0;
    case FormatKind::kQ4_0: return LaunchDecodeQ4_0;
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

}  // namespace

uint32_t ChooseSplits(uint32_t n_rows, uint32_t n_kv_heads, uint32_t max_length,
                      const Format& format, uint32_t head_dim, bool exact) {
  // The last answer, kept: a decode step asks the same question for every layer.
  struct Key {
    uint32_t n_rows, n_kv_heads, max_length, format_id, head_dim;
    bool exact;
    bool operator==(const Key&) const = default;
  };
  static thread_local Key last_key{};
  static thread_local uint32_t last_splits = 0;
  const Key key{n_rows, n_kv_heads, max_length, format.id(), head_dim, exact};
  if (last_splits != 0 && key == last_key) return last_splits;
  int occ = 1;
  DecodeParams dummy{};
  if (exact) {
    const Launcher launch = LauncherFor(format.kind);
    if (launch && !launch(dummy, static_cast<int>(head_dim), 4, 0, 0, nullptr, &occ).ok()) occ = 1;
  } else {
    const MmaLauncher launch = MmaLauncherFor(format.kind);
    if (launch && !launch(dummy, static_cast<int>(head_dim), 0, 0, nullptr, &occ).ok()) occ = 1;
  }
  // Cost model: thread blocks run in waves of (SMs x blocks per SM); a block costs its tiles
  // plus about two tiles' worth of fixed work (Q, the merge, the partial write). Fewest
  // estimated tile-times wins, ties to fewer splits.
  const uint64_t items = std::max<uint64_t>(1, static_cast<uint64_t>(n_rows) * n_kv_heads);
  const uint64_t slots = static_cast<uint64_t>(SmCount()) * occ;
  const uint64_t tile = exact ? kTile : kMmaTile;
  const uint64_t len = std::max<uint64_t>(max_length, 1);
  const uint64_t max_splits = std::min<uint64_t>(256, std::max<uint64_t>(1, len / kMinChunk));
  uint64_t splits = 1, best = UINT64_MAX;
  for (uint64_t s = 1; s <= max_splits; ++s) {
    const uint64_t tiles = ((len + s - 1) / s + tile - 1) / tile;
    const uint64_t waves = (items * s + slots - 1) / slots;
    const uint64_t cost = waves * (tiles + 2);
    if (cost < best) {
      best = cost;
      splits = s;
    }
  }
  last_key = key;
  last_splits = static_cast<uint32_t>(splits);
  return last_splits;
}

Status DecodeAttention(const PagedKvView& kv, const float* q, const AttentionParams& params,
                       float* out, const DecodeOptions& options, DecodeWorkspace* ws) {
  const std::string w = "CUDA decode attention: ";
  if (!(kv.k_format == kv.v_format)) {
    return Status::Unimplemented(w + "K " + kv.k_format.spec() + " and V " + kv.v_format.spec() +
                                 " differ; the GPU kernels take one format for both so far");
  }
  const Launcher launch = LauncherFor(kv.k_format.kind);
  if (!launch) {
    return Status::Unimplemented(w + "format " + kv.k_format.spec() +
                                 " is not implemented on the GPU yet (f16, bf16, q8_0, q4_0)");
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
  uint32_t n_splits = options.n_splits;
  if (n_splits == 0) {
    n_splits = ChooseSplits(kv.n_rows, kv.n_kv_heads, options.max_length, kv.k_format,
                            kv.head_dim, options.exact);
  }
  n_splits = std::max(1u, std::min(n_splits, 65535u));
  uint32_t chunk = kTile;
  if (n_splits > 1) {
    const uint32_t per = (std::max(options.max_length, 1u) + n_splits - 1) / n_splits;
    chunk = std::max<uint32_t>(kTile, (per + kTile - 1) / kTile * kTile);
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
  }
  const auto stream = static_cast<cudaStream_t>(options.stream);
  if (options.exact) {
    KVTIER_RETURN_IF_ERROR(launch(p, static_cast<int>(kv.head_dim), static_cast<int>(group),
                                  kv.n_rows, kv.n_kv_heads, stream, nullptr));
  } else {
    KVTIER_RETURN_IF_ERROR(MmaLauncherFor(kv.k_format.kind)(p, static_cast<int>(kv.head_dim),
                                                            kv.n_rows, kv.n_kv_heads, stream,
                                                            nullptr));
  }
  if (n_splits > 1) {
    MergeSplitsKernel<<<static_cast<unsigned>(heads), std::min<uint32_t>(kv.head_dim, 256), 0,
                        stream>>>(p.part_o, p.part_lse, out, n_splits, kv.head_dim);
    KVTIER_CUDA_RETURN(cudaGetLastError());
  }
  return Status::OK();
}

}  // namespace kvtier::cuda
