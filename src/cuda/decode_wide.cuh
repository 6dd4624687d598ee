// The all-heads tensor-core decode kernel (the default where it applies; decode_mma.cuh's
// per-head kernel otherwise). One thread block of 8 warps per (split, HPC consecutive KV heads,
// row): the block layout keeps a token's rows of all KV heads side by side
// ([token][KV head][row], kvtier/block_pool.h), so a token's rows of the thread block's heads
// are one contiguous run of HPC * row_bytes bytes. A tile of T tokens is copied with 16-byte
// cp.async pieces (whole 32-byte sectors, no sector shared with another thread block, where the
// per-head kernel copies each head's 72- or 136-byte rows in 8-byte pieces), kStages deep, into
// shared memory at a pitch that keeps ldmatrix and the lanes' loads off each other's banks:
//
//   smem stage [2][T][kPitch]: K tokens then V tokens; token i's rows of KV head h0 + hh at
//   i * kPitch + hh * row_bytes, in the stored format.
//
// Warp w takes KV head h0 + w % HPC and, of each tile, the 16-token units w / HPC,
// w / HPC + 8 / HPC, ... (kUnits of them), each through dev::MmaUnit (decode_mma.cuh: the same
// arithmetic, so the same error bounds, as the per-head kernel). The warps of a head merge at
// the end (dev::MergeWarpsAndStore); splits merge by log-sum-exp as for the other kernels.
// Used where HPC * row_bytes is a multiple of 16, K and V share token strides, heads are packed
// and at least 2 stages fit in shared memory (decode.cu checks).
#pragma once

#include "cuda/decode_mma.cuh"

namespace kvtier::cuda {

// Compile-time knobs (device_run.sh VARIANTS=1 sweeps them): stages and 16-token units per
// warp per tile, per format class.
#ifndef KVTIER_CUDA_WIDE_PLAIN_STAGES
#define KVTIER_CUDA_WIDE_PLAIN_STAGES 3
#endif
#ifndef KVTIER_CUDA_WIDE_Q8_STAGES
#define KVTIER_CUDA_WIDE_Q8_STAGES 3
#endif
#ifndef KVTIER_CUDA_WIDE_Q4_STAGES
#define KVTIER_CUDA_WIDE_Q4_STAGES 5
#endif
#ifndef KVTIER_CUDA_WIDE_PLAIN_UNITS
#define KVTIER_CUDA_WIDE_PLAIN_UNITS 1
#endif
#ifndef KVTIER_CUDA_WIDE_Q8_UNITS
#define KVTIER_CUDA_WIDE_Q8_UNITS 1
#endif
#ifndef KVTIER_CUDA_WIDE_Q4_UNITS
#define KVTIER_CUDA_WIDE_Q4_UNITS 1
#endif

constexpr int kWideWarps = 8;
constexpr int kWideThreads = 32 * kWideWarps;
constexpr int kSmemLimit = 227 * 1024;  // per thread block, sm_80 / sm_90

template <FormatKind F, int HD, int HPC>
struct WideGeo {
  static constexpr bool kPlain = F == FormatKind::kF16 || F == FormatKind::kBF16;
  static constexpr int kRowBytes = MmaGeo<F, HD>::kRowBytes;
  static constexpr int kUnits = kPlain ? KVTIER_CUDA_WIDE_PLAIN_UNITS
                                       : (F == FormatKind::kQ8_0 ? KVTIER_CUDA_WIDE_Q8_UNITS
                                                                 : KVTIER_CUDA_WIDE_Q4_UNITS);
  static constexpr int kTokens = 16 * kUnits * kWideWarps / HPC;  // T
  static constexpr int kTokenBytes = HPC * kRowBytes;
  static constexpr int kPieces = kTokenBytes / 16;
  // A multiple of 16 bytes with an odd count of 16-byte units: 8 consecutive tokens' rows
  // start in 8 different 16-byte bank groups.
  static constexpr int kPitch0 = (kTokenBytes + 15) / 16 * 16;
  static constexpr int kPitch = (kPitch0 / 16) % 2 == 1 ? kPitch0 : kPitch0 + 16;
  static constexpr int kStageBytes = 2 * kTokens * kPitch;
  static constexpr int kOffsBytes = 2 * kTokens * 8;
  static constexpr int kMerge = (kWideWarps * 8 * HD + 2 * kWideWarps * 8) * 4;
  static constexpr int kWant = kPlain ? KVTIER_CUDA_WIDE_PLAIN_STAGES
                                      : (F == FormatKind::kQ8_0 ? KVTIER_CUDA_WIDE_Q8_STAGES
                                                                : KVTIER_CUDA_WIDE_Q4_STAGES);
  static constexpr int kFit = (kSmemLimit - kOffsBytes) / kStageBytes;
  static constexpr int kStages = kWant < kFit ? kWant : kFit;
  static constexpr int kLoop = kStages * kStageBytes;
  static constexpr int kBody = kLoop > kMerge ? kLoop : kMerge;
  static constexpr int kSmem = kBody + kOffsBytes;
  static constexpr bool kSupported =
      kTokenBytes % 16 == 0 && kStages >= 2 && kSmem <= kSmemLimit && kTokens <= kWideThreads;
  // Two thread blocks per SM where shared memory allows (the registers must then too).
  static constexpr int kMinBlocks = 2 * (kSmem + 1024) <= 228 * 1024 ? 2 : 1;
};

template <FormatKind F, int HD, int HPC>
__global__ void __launch_bounds__(kWideThreads, WideGeo<F, HD, HPC>::kMinBlocks)
    DecodeWideKernel(const DecodeParams p) {
  using Geo = WideGeo<F, HD, HPC>;
  constexpr int S = Geo::kStages, T = Geo::kTokens, WPH = kWideWarps / HPC;
  extern __shared__ __align__(16) uint8_t smem[];
  uint64_t* offs = reinterpret_cast<uint64_t*>(smem + Geo::kBody);  // [2][T]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint32_t split = blockIdx.x, h0 = blockIdx.y * HPC, r = blockIdx.z;
  const PagedKvRow row = p.rows[r];
  uint32_t begin, end;
  dev::SplitRange(p, row.length, split, &begin, &end);
  const int n_tiles = end > begin ? static_cast<int>((end - begin + T - 1) / T) : 0;
  const int hh = warp % HPC, sub = warp / HPC;

  uint32_t qh[HD / 16][2], ql[HD / 16][2];
  dev::LoadQFragments<Geo::kPlain && F == FormatKind::kBF16, HD>(p, r, h0 + hh, lane, qh, ql);

  const uint8_t* kb = p.k_base + static_cast<size_t>(h0) * p.k_head_stride;
  const uint8_t* vb = p.v_base + static_cast<size_t>(h0) * p.v_head_stride;
  auto compute_offsets = [&](int tile) {  // threads 0 .. T-1; K and V share the offset
    const uint32_t t = begin + tile * T + tid;
    offs[(tile & 1) * T + tid] = t < end ? dev::TokenOffset(p, row, t, p.k_token_stride) : 0;
  };
  auto issue = [&](int tile) {
    const uint32_t t0 = begin + tile * T;
    const uint64_t* o = offs + (tile & 1) * T;
    uint8_t* sb = smem + (tile % S) * Geo::kStageBytes;
    constexpr int kTotal = 2 * T * Geo::kPieces;
#pragma unroll
    for (int n = 0; n < (kTotal + kWideThreads - 1) / kWideThreads; ++n) {
      const int pc = tid + n * kWideThreads;
      if (kTotal % kWideThreads == 0 || pc < kTotal) {
        const int i = pc / Geo::kPieces, j = pc - i * Geo::kPieces;
        const int kv = i >= T, tok = kv ? i - T : i;
        uint8_t* dst = sb + i * Geo::kPitch + j * 16;
        if (t0 + tok < end) {
          dev::CpAsync<16>(dst, (kv ? vb : kb) + o[tok] + j * 16);
        } else {
          dev::CpAsyncZero<16>(dst, kb);
        }
      }
    }
  };

  for (int x = 0; x < S - 1; ++x) {
    if (tid < T && x < n_tiles) compute_offsets(x);
    __syncthreads();
    if (x < n_tiles) issue(x);
    dev::CpAsyncCommit();
    __syncthreads();
  }
  if (tid < T && S - 1 < n_tiles) compute_offsets(S - 1);

  dev::MmaState<HD> st;
  st.Clear();
  for (int it = 0; it < n_tiles; ++it) {
    dev::CpAsyncWait<S - 2>();
    __syncthreads();
    if (it + S - 1 < n_tiles) issue(it + S - 1);
    dev::CpAsyncCommit();
    if (tid < T && it + S < n_tiles) compute_offsets(it + S);

    const uint8_t* sraw = smem + (it % S) * Geo::kStageBytes;
#pragma unroll
    for (int u = 0; u < Geo::kUnits; ++u) {
      const int unit = sub + u * WPH;
      const uint32_t wt0 = begin + it * T + unit * 16;
      if (wt0 < end) {
        const uint8_t* kr = sraw + unit * 16 * Geo::kPitch + hh * Geo::kRowBytes;
        dev::MmaUnit<F, HD, Geo::kPitch>(kr, kr + T * Geo::kPitch, wt0, end, qh, ql, p.softcap,
                                         lane, st);
      }
    }
  }
  dev::CpAsyncWait<0>();
  __syncthreads();
  dev::MergeWarpsAndStore<HD, kWideWarps>(p, smem, st, HPC, h0, r, split);
}

template <FormatKind F, int HD, int HPC>
Status LaunchDecodeWide(const DecodeParams& p, uint32_t n_rows, uint32_t n_kv_heads,
                        cudaStream_t stream, int* occupancy) {
  using Geo = WideGeo<F, HD, HPC>;
  if constexpr (!Geo::kSupported) {
    return Status::Unimplemented("CUDA decode attention: no all-heads kernel for this shape");
  } else {
    constexpr int smem = Geo::kSmem;
    static int occ = 0;  // thread blocks per SM; 0: attributes not set yet
    if (occ == 0) {
      KVTIER_CUDA_RETURN(cudaFuncSetAttribute(DecodeWideKernel<F, HD, HPC>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      int n = 0;
      KVTIER_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &n, DecodeWideKernel<F, HD, HPC>, kWideThreads, smem));
      occ = n > 0 ? n : 1;
    }
    if (occupancy) {
      *occupancy = occ;
      return Status::OK();
    }
    const dim3 grid(p.n_splits, n_kv_heads / HPC, n_rows);
    DecodeWideKernel<F, HD, HPC><<<grid, kWideThreads, smem, stream>>>(p);
    KVTIER_CUDA_RETURN(cudaGetLastError());
    return Status::OK();
  }
}

// Dispatch on head_dim (64, 128, 256) and KV heads per thread block (2, 4, 8). With occupancy
// non-null, only reports thread blocks per SM (Unimplemented: no such kernel).
#define KVTIER_WIDE_CASE(KIND, HD, HPC)                                                   \
  case HD * 16 + HPC:                                                                     \
    return LaunchDecodeWide<KIND, HD, HPC>(p, n_rows, kvh, s, occupancy);
#define KVTIER_DEFINE_DECODE_WIDE_LAUNCHER(NAME, KIND)                                     \
  Status NAME(const DecodeParams& p, int hd, int hpc, uint32_t n_rows, uint32_t kvh,       \
              cudaStream_t s, int* occupancy) {                                            \
    switch (hd * 16 + hpc) {                                                               \
      KVTIER_WIDE_CASE(KIND, 64, 2)                                                        \
      KVTIER_WIDE_CASE(KIND, 64, 4)                                                        \
      KVTIER_WIDE_CASE(KIND, 64, 8)                                                        \
      KVTIER_WIDE_CASE(KIND, 128, 2)                                                       \
      KVTIER_WIDE_CASE(KIND, 128, 4)                                                       \
      KVTIER_WIDE_CASE(KIND, 128, 8)                                                       \
      KVTIER_WIDE_CASE(KIND, 256, 2)                                                       \
      KVTIER_WIDE_CASE(KIND, 256, 4)                                                       \
      KVTIER_WIDE_CASE(KIND, 256, 8)                                                       \
      default: break;                                                                      \
    }                                                                                      \
    return Status::Unimplemented("CUDA decode attention: no all-heads kernel for head_dim " + \
                                 std::to_string(hd) + ", " + std::to_string(hpc) +         \
                                 " KV heads per thread block");                            \
  }

Status LaunchDecodeWideF16(const DecodeParams& p, int hd, int hpc, uint32_t n_rows, uint32_t kvh,
                           cudaStream_t s, int* occupancy);
Status LaunchDecodeWideBF16(const DecodeParams& p, int hd, int hpc, uint32_t n_rows,
                            uint32_t kvh, cudaStream_t s, int* occupancy);
Status LaunchDecodeWideQ8_0(const DecodeParams& p, int hd, int hpc, uint32_t n_rows,
                            uint32_t kvh, cudaStream_t s, int* occupancy);
Status LaunchDecodeWideQ4_0(const DecodeParams& p, int hd, int hpc, uint32_t n_rows,
                            uint32_t kvh, cudaStream_t s, int* occupancy);

}  // namespace kvtier::cuda
