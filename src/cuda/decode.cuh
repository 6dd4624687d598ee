// The paged decode attention kernel (see cuda_kv.h), instantiated per format in decode_*.cu.
//
// One thread block (4 warps) per (split, KV head, row): it walks its key range in tiles of 32
// tokens, each tile's K and V rows of that KV head copied into shared memory with cp.async,
// kStages tiles in flight; the rows are read there in their stored format (no dequantized copy
// in device memory) and used for all the KV head's query heads (GQA): each row is read from HBM
// once. q.k: a warp takes 8 tokens of the tile, 4 lanes a token, each lane 8-value chunks
// (chunk 4k + lane%4: one quarter of each 32-value ggml block). p.v: each lane owns head_dim/32
// adjacent output values of every query head. Softmax is online per warp; warps merge at the
// end, splits merge by log-sum-exp in MergeSplitsKernel. Arithmetic in f32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/cuda_common.cuh"
#include "kvtier/format.h"
#include "kvtier/kv_types.h"
#include "kvtier/paged_kv_view.h"

namespace kvtier::cuda {

struct DecodeParams {
  const uint8_t* k_base;
  const uint8_t* v_base;
  size_t block_stride, k_token_stride, k_head_stride, v_token_stride, v_head_stride;
  uint32_t block_tokens;
  const PagedKvRow* rows;
  const float* q;
  float* out;
  float* part_o;    // [n_rows, n_heads, n_splits, head_dim]
  float* part_lse;  // [n_rows, n_heads, n_splits]
  // [n_rows, gridDim.y] arrival tickets of the fused split merge (tensor-core kernels): the
  // last thread block of a (row, KV-head group) merges its splits and resets the ticket to 0.
  // Null: decode.cu launches MergeSplitsKernel instead.
  uint32_t* counters;
  uint32_t n_heads, group, window, n_splits, chunk;
  float scale, softcap;
  float rot_levels[16];  // rot4 rows: the codebook (q rotated and out rotated back outside)
};

constexpr int kTile = 32;
constexpr int kThreads = 128;

template <FormatKind F, int HD>
struct Geometry {
  static constexpr bool kPlain = F == FormatKind::kF16 || F == FormatKind::kBF16;
  static constexpr int kRowBytes = kPlain ? 2 * HD : (F == FormatKind::kQ8_0 ? 34 : 18) * HD / 32;
  static constexpr int kCopy = kRowBytes % 16 == 0 ? 16 : (kRowBytes % 8 == 0 ? 8 : 4);
  static constexpr int kPieces = kRowBytes / kCopy;
  // Plain rows: pitch = 64 mod 128 bytes, so two tokens' 16-byte q.k loads never share banks.
  static constexpr int kPitch = kPlain ? kRowBytes + 64 : (kRowBytes + 15) / 16 * 16;
  static constexpr int kStages = kPlain ? 3 : 4;
  static constexpr int kStageBytes = 2 * kTile * kPitch;
  static constexpr int kDpl = HD / 32;  // p.v values per lane
};

template <int G, int HD>
struct MergeSmem {
  static constexpr int kBytes = (4 * G * HD + 2 * 4 * G) * 4;
};

template <FormatKind F, int HD, int G>
struct DecodeSmem {
  static constexpr int kLoop = Geometry<F, HD>::kStages * Geometry<F, HD>::kStageBytes;
  static constexpr int kBody = kLoop > MergeSmem<G, HD>::kBytes ? kLoop : MergeSmem<G, HD>::kBytes;
  static constexpr int kBytes = kBody + G * HD * 4 + 2 * 2 * kTile * 8;  // + q + row offsets
};

namespace dev {

template <int W>
__device__ __forceinline__ void CpAsync(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  if constexpr (W == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
  } else if constexpr (W == 8) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(gmem));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
  }
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ float HalfBits(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ float Bf16Bits(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
__device__ __forceinline__ uint16_t Ld16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

// The keys a thread block of split `split` reads: [*begin, *end) of the row's length `len`
// (the window's start, then chunks of p.chunk tokens; the last split takes the rest).
__device__ __forceinline__ void SplitRange(const DecodeParams& p, uint32_t len, uint32_t split,
                                           uint32_t* begin, uint32_t* end) {
  const uint32_t first = (p.window > 0 && len > p.window) ? len - p.window : 0;
  const uint64_t b64 = static_cast<uint64_t>(first) + static_cast<uint64_t>(split) * p.chunk;
  *begin = b64 < len ? static_cast<uint32_t>(b64) : len;
  *end = len;
  if (split + 1 < p.n_splits) {
    const uint64_t e64 = b64 + p.chunk;
    *end = e64 < len ? static_cast<uint32_t>(e64) : len;
  }
}

// Byte offset of token t's rows (KV head 0) from the pool's K or V base: its block's start
// plus its slot (K and V share block_stride; token_stride is theirs).
__device__ __forceinline__ uint64_t TokenOffset(const DecodeParams& p, const PagedKvRow& row,
                                                uint32_t t, size_t token_stride) {
  const uint32_t blk_i = t / p.block_tokens, slot = t - blk_i * p.block_tokens;
  return static_cast<uint64_t>(row.block_table[blk_i]) * p.block_stride + slot * token_stride;
}

// 8 values of the K row in shared memory: dims [8c, 8c + 8). For q8_0 / q4_0 the codes
// (q4_0: code - 8) are returned and *d is the block's scale; for plain formats *d = 1; for
// rot4 (rotated basis) the levels lv[code] (value i at byte i / 2, low nibble first).
template <FormatKind F>
__device__ __forceinline__ void LoadChunk8(const uint8_t* row, int c, float* x, float* d,
                                           const float* lv) {
  if constexpr (F == FormatKind::kRot) {
    const uint8_t* blk = row + 18 * (c >> 2);
    *d = HalfBits(Ld16(blk));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t b = blk[2 + 4 * (c & 3) + i];
      x[2 * i] = lv[b & 15];
      x[2 * i + 1] = lv[b >> 4];
    }
  } else if constexpr (F == FormatKind::kF16 || F == FormatKind::kBF16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + 16 * c);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (F == FormatKind::kF16) {
        x[2 * i] = HalfBits(static_cast<uint16_t>(w[i]));
        x[2 * i + 1] = HalfBits(static_cast<uint16_t>(w[i] >> 16));
      } else {
        x[2 * i] = __uint_as_float(w[i] << 16);
        x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      }
    }
    *d = 1.0f;
  } else if constexpr (F == FormatKind::kQ8_0) {
    const int k = c >> 2, sub = c & 3;
    const uint8_t* blk = row + 34 * k;
    *d = HalfBits(Ld16(blk));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t two = Ld16(blk + 2 + 8 * sub + 2 * i);
      x[2 * i] = static_cast<float>(static_cast<int8_t>(two & 0xff));
      x[2 * i + 1] = static_cast<float>(static_cast<int8_t>(two >> 8));
    }
  } else {
    const int k = c >> 2, sub = c & 3;
    const uint8_t* blk = row + 18 * k;
    *d = HalfBits(Ld16(blk));
    const int shift = (sub >> 1) * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t two = Ld16(blk + 2 + 8 * (sub & 1) + 2 * i) >> shift;
      x[2 * i] = static_cast<float>(static_cast<int>(two & 0xf) - 8);
      x[2 * i + 1] = static_cast<float>(static_cast<int>((two >> 8) & 0xf) - 8);
    }
  }
}

// DPL adjacent values of the V row in shared memory: dims [DPL * lane, DPL * lane + DPL).
template <FormatKind F, int DPL>
__device__ __forceinline__ void LoadLaneValues(const uint8_t* row, int lane, float* x, float* d,
                                               const float* lv) {
  if constexpr (F == FormatKind::kRot) {
    const int dim = DPL * lane;
    const uint8_t* blk = row + 18 * (dim >> 5);
    *d = HalfBits(Ld16(blk));
#pragma unroll
    for (int i = 0; i < DPL / 2; ++i) {
      const uint32_t b = blk[2 + (dim & 31) / 2 + i];
      x[2 * i] = lv[b & 15];
      x[2 * i + 1] = lv[b >> 4];
    }
  } else if constexpr (F == FormatKind::kF16 || F == FormatKind::kBF16) {
    uint32_t w[DPL / 2];
    const uint8_t* p = row + 2 * DPL * lane;
    if constexpr (DPL == 2) {
      w[0] = *reinterpret_cast<const uint32_t*>(p);
    } else if constexpr (DPL == 4) {
      const uint2 u = *reinterpret_cast<const uint2*>(p);
      w[0] = u.x;
      w[1] = u.y;
    } else {
      const uint4 u = *reinterpret_cast<const uint4*>(p);
      w[0] = u.x;
      w[1] = u.y;
      w[2] = u.z;
      w[3] = u.w;
    }
#pragma unroll
    for (int i = 0; i < DPL / 2; ++i) {
      if constexpr (F == FormatKind::kF16) {
        x[2 * i] = HalfBits(static_cast<uint16_t>(w[i]));
        x[2 * i + 1] = HalfBits(static_cast<uint16_t>(w[i] >> 16));
      } else {
        x[2 * i] = __uint_as_float(w[i] << 16);
        x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      }
    }
    *d = 1.0f;
  } else {
    const int dim = DPL * lane;
    const int b = dim >> 5, j = dim & 31;
    if constexpr (F == FormatKind::kQ8_0) {
      const uint8_t* blk = row + 34 * b;
      *d = HalfBits(Ld16(blk));
#pragma unroll
      for (int i = 0; i < DPL / 2; ++i) {
        const uint16_t two = Ld16(blk + 2 + j + 2 * i);
        x[2 * i] = static_cast<float>(static_cast<int8_t>(two & 0xff));
        x[2 * i + 1] = static_cast<float>(static_cast<int8_t>(two >> 8));
      }
    } else {
      const uint8_t* blk = row + 18 * b;
      *d = HalfBits(Ld16(blk));
      const int shift = j >= 16 ? 4 : 0;
      const int jb = j & 15;
#pragma unroll
      for (int i = 0; i < DPL / 2; ++i) {
        const uint32_t two = Ld16(blk + 2 + jb + 2 * i) >> shift;
        x[2 * i] = static_cast<float>(static_cast<int>(two & 0xf) - 8);
        x[2 * i + 1] = static_cast<float>(static_cast<int>((two >> 8) & 0xf) - 8);
      }
    }
  }
}

}  // namespace dev

template <FormatKind F, int HD, int G>
__global__ void __launch_bounds__(kThreads) DecodeKernel(const DecodeParams p) {
  using Geo = Geometry<F, HD>;
  constexpr int S = Geo::kStages;
  constexpr int DPL = Geo::kDpl;
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kBody = DecodeSmem<F, HD, G>::kBody;
  float* qs = reinterpret_cast<float*>(smem + kBody);                       // [G][HD]
  uint64_t* offs = reinterpret_cast<uint64_t*>(smem + kBody + G * HD * 4);  // [2][2][kTile]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint32_t split = blockIdx.x, h = blockIdx.y, r = blockIdx.z;
  __shared__ float lv[16];  // rot4's codebook
  if (F == FormatKind::kRot && tid < 16) lv[tid] = p.rot_levels[tid];
  const PagedKvRow row = p.rows[r];
  uint32_t begin, end;
  dev::SplitRange(p, row.length, split, &begin, &end);
  const int n_tiles = end > begin ? static_cast<int>((end - begin + kTile - 1) / kTile) : 0;

  for (int i = tid; i < G * HD; i += kThreads) {
    const int g = i / HD;
    qs[i] = g < static_cast<int>(p.group)
                ? p.q[(static_cast<size_t>(r) * p.n_heads + h * p.group + g) * HD + i % HD] * p.scale
                : 0.0f;
  }

  const uint8_t* kb = p.k_base + static_cast<size_t>(h) * p.k_head_stride;
  const uint8_t* vb = p.v_base + static_cast<size_t>(h) * p.v_head_stride;

  auto compute_offsets = [&](int tile) {  // warp 0 only
    const uint32_t t = begin + tile * kTile + lane;
    uint64_t ko = 0, vo = 0;
    if (t < end) {
      ko = dev::TokenOffset(p, row, t, p.k_token_stride);
      vo = dev::TokenOffset(p, row, t, p.v_token_stride);
    }
    uint64_t* o = offs + (tile & 1) * 2 * kTile;
    o[lane] = ko;
    o[kTile + lane] = vo;
  };
  auto issue = [&](int tile) {
    const uint32_t t0 = begin + tile * kTile;
    const uint64_t* o = offs + (tile & 1) * 2 * kTile;
    uint8_t* sb = smem + (tile % S) * Geo::kStageBytes;
    for (int pc = tid; pc < 2 * kTile * Geo::kPieces; pc += kThreads) {
      const int i = pc / Geo::kPieces, j = pc - i * Geo::kPieces;
      const int kv = i >= kTile, tok = i & (kTile - 1);
      if (t0 + tok < end) {
        dev::CpAsync<Geo::kCopy>(sb + i * Geo::kPitch + j * Geo::kCopy,
                                 (kv ? vb : kb) + o[i] + j * Geo::kCopy);
      }
    }
  };

  // Prologue: tiles 0 .. S-2 in flight, offsets of tile S-1 ready.
  for (int x = 0; x < S - 1; ++x) {
    if (warp == 0 && x < n_tiles) compute_offsets(x);
    __syncthreads();
    if (x < n_tiles) issue(x);
    dev::CpAsyncCommit();
    __syncthreads();
  }
  if (warp == 0 && S - 1 < n_tiles) compute_offsets(S - 1);

  float m_run[G], l_run[G], acc[G][DPL];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m_run[g] = -INFINITY;
    l_run[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[g][i] = 0.0f;
  }

  const int qtok = warp * 8 + (lane >> 2), sub = lane & 3;
  for (int it = 0; it < n_tiles; ++it) {
    dev::CpAsyncWait<S - 2>();
    __syncthreads();
    if (it + S - 1 < n_tiles) issue(it + S - 1);
    dev::CpAsyncCommit();
    if (warp == 0 && it + S < n_tiles) compute_offsets(it + S);

    const uint8_t* sb = smem + (it % S) * Geo::kStageBytes;
    const uint32_t t0 = begin + it * kTile;
    // q.k: this lane's quarter of token qtok, for every query head.
    float s[G];
#pragma unroll
    for (int g = 0; g < G; ++g) s[g] = 0.0f;
    const uint8_t* krow = sb + qtok * Geo::kPitch;
#pragma unroll
    for (int k = 0; k < HD / 32; ++k) {
      const int c = 4 * k + sub;
      float x[8], d;
      dev::LoadChunk8<F>(krow, c, x, &d, lv);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float4 qa = *reinterpret_cast<const float4*>(qs + g * HD + 8 * c);
        const float4 qb = *reinterpret_cast<const float4*>(qs + g * HD + 8 * c + 4);
        float part = qa.x * x[0];
        part = fmaf(qa.y, x[1], part);
        part = fmaf(qa.z, x[2], part);
        part = fmaf(qa.w, x[3], part);
        part = fmaf(qb.x, x[4], part);
        part = fmaf(qb.y, x[5], part);
        part = fmaf(qb.z, x[6], part);
        part = fmaf(qb.w, x[7], part);
        s[g] = Geo::kPlain ? s[g] + part : fmaf(d, part, s[g]);
      }
    }
    const bool valid = t0 + qtok < end;
    float pexp[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      s[g] += __shfl_xor_sync(0xffffffffu, s[g], 1);
      s[g] += __shfl_xor_sync(0xffffffffu, s[g], 2);
      if (p.softcap > 0.0f) s[g] = p.softcap * tanhf(s[g] / p.softcap);
      if (!valid) s[g] = -INFINITY;
      float mt = s[g];
      mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 4));
      mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 8));
      mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 16));
      const float m_new = fmaxf(m_run[g], mt);
      const float alpha = m_new == -INFINITY ? 1.0f : expf(m_run[g] - m_new);
      pexp[g] = valid ? expf(s[g] - m_new) : 0.0f;
      l_run[g] = l_run[g] * alpha + (sub == 0 ? pexp[g] : 0.0f);
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[g][i] *= alpha;
      m_run[g] = m_new;
    }
    // p.v over this warp's 8 tokens.
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int tok = warp * 8 + t;
      if (t0 + tok >= end) break;
      float pg[G];
#pragma unroll
      for (int g = 0; g < G; ++g) pg[g] = __shfl_sync(0xffffffffu, pexp[g], 4 * t);
      float x[DPL], d;
      dev::LoadLaneValues<F, DPL>(sb + (kTile + tok) * Geo::kPitch, lane, x, &d, lv);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float w = pg[g] * d;
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[g][i] = fmaf(w, x[i], acc[g][i]);
      }
    }
  }
  dev::CpAsyncWait<0>();
  __syncthreads();

  // Merge the 4 warps.
  float* m_acc = reinterpret_cast<float*>(smem);  // [4][G][HD]
  float* m_m = m_acc + 4 * G * HD;                // [4][G]
  float* m_l = m_m + 4 * G;                       // [4][G]
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float l = l_run[g];
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) {
      m_m[warp * G + g] = m_run[g];
      m_l[warp * G + g] = l;
    }
#pragma unroll
    for (int i = 0; i < DPL; ++i) m_acc[(warp * G + g) * HD + DPL * lane + i] = acc[g][i];
  }
  __syncthreads();
  for (int i = tid; i < G * HD; i += kThreads) {
    const int g = i / HD, dim = i % HD;
    if (g >= static_cast<int>(p.group)) continue;
    float M = -INFINITY;
    for (int w = 0; w < 4; ++w) M = fmaxf(M, m_m[w * G + g]);
    float L = 0.0f, O = 0.0f;
    if (M != -INFINITY) {
      for (int w = 0; w < 4; ++w) {
        const float mw = m_m[w * G + g];
        if (mw == -INFINITY) continue;
        const float e = expf(mw - M);
        L += m_l[w * G + g] * e;
        O += m_acc[(w * G + g) * HD + dim] * e;
      }
    }
    const size_t head = static_cast<size_t>(r) * p.n_heads + h * p.group + g;
    const float o = L > 0.0f ? O / L : 0.0f;
    if (p.n_splits == 1) {
      p.out[head * HD + dim] = o;
    } else {
      p.part_o[(head * p.n_splits + split) * HD + dim] = o;
      if (dim == 0) p.part_lse[head * p.n_splits + split] = L > 0.0f ? M + logf(L) : -INFINITY;
    }
  }
}

template <FormatKind F, int HD, int G>
Status LaunchDecode(const DecodeParams& p, uint32_t n_rows, uint32_t n_kv_heads,
                    cudaStream_t stream) {
  constexpr int smem = DecodeSmem<F, HD, G>::kBytes;
  static bool attr_set = false;
  if (!attr_set) {
    KVTIER_CUDA_RETURN(cudaFuncSetAttribute(DecodeKernel<F, HD, G>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    attr_set = true;
  }
  const dim3 grid(p.n_splits, n_kv_heads, n_rows);
  DecodeKernel<F, HD, G><<<grid, kThreads, smem, stream>>>(p);
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

template <FormatKind F, int HD, int G>
int DecodeOccupancy() {
  static int cached = 0;  // thread blocks per SM (0: not asked yet)
  if (cached > 0) return cached;
  constexpr int smem = DecodeSmem<F, HD, G>::kBytes;
  cudaFuncSetAttribute(DecodeKernel<F, HD, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, DecodeKernel<F, HD, G>, kThreads, smem) !=
      cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  cached = n > 0 ? n : 1;
  return cached;
}

// Per-format entry points (decode_<format>.cu).
Status LaunchDecodeF16(const DecodeParams& p, int hd, int g, uint32_t n_rows, uint32_t kvh,
                       cudaStream_t s, int* occupancy);
Status LaunchDecodeBF16(const DecodeParams& p, int hd, int g, uint32_t n_rows, uint32_t kvh,
                        cudaStream_t s, int* occupancy);
Status LaunchDecodeQ8_0(const DecodeParams& p, int hd, int g, uint32_t n_rows, uint32_t kvh,
                        cudaStream_t s, int* occupancy);
Status LaunchDecodeQ4_0(const DecodeParams& p, int hd, int g, uint32_t n_rows, uint32_t kvh,
                        cudaStream_t s, int* occupancy);
Status LaunchDecodeRot4(const DecodeParams& p, int hd, int g, uint32_t n_rows, uint32_t kvh,
                        cudaStream_t s, int* occupancy);

// Dispatch on head_dim and the query-head group (1, 2, 4, 8: a group of 3 runs as 4, 5-7 as 8).
// With occupancy non-null, only reports the kernel's thread blocks per SM.
#define KVTIER_DEFINE_DECODE_LAUNCHER(NAME, KIND)                                               \
  Status NAME(const DecodeParams& p, int hd, int g, uint32_t n_rows, uint32_t kvh,              \
              cudaStream_t s, int* occupancy) {                                                 \
    const int gt = g <= 1 ? 1 : g <= 2 ? 2 : g <= 4 ? 4 : 8;                                    \
    switch (hd * 16 + gt) {                                                                     \
      case 64 * 16 + 1: return occupancy ? (*occupancy = DecodeOccupancy<KIND, 64, 1>(), Status::OK()) : LaunchDecode<KIND, 64, 1>(p, n_rows, kvh, s); \
      case 64 * 16 + 2: return occupancy ? (*occupancy = DecodeOccupancy<KIND, 64, 2>(), Status::OK()) : LaunchDecode<KIND, 64, 2>(p, n_rows, kvh, s); \
      case 64 * 16 + 4: return occupancy ? (*occupancy = DecodeOccupancy<KIND, 64, 4>(), Status::OK()) : LaunchDecode<KIND, 64, 4>(p, n_rows, kvh, s); \
      case 64 * 16 + 8: return occupancy ? (*occupancy = DecodeOccupancy<KIND, 64, 8>(), Status::OK()) : LaunchDecode<KIND, 64, 8>(p, n_rows, kvh, s); \
      case 128 * 16 + 1: return occupancy ? (*occupancy = DecodeOccupancy<KIND, 128, 1>(), Status::OK()) : LaunchDecode<KIND, 128, 1>(p, n_rows, kvh, s); \
      case 128 * 16 + 2: return occupancy ? (*occupancy = DecodeOccupancy<KIND, 128, 2>(), Status::OK()) : LaunchDecode<KIND, 128, 2>(p, n_rows, kvh, s); \
      case 128 * 16 + 4: return occupancy ? (*occupancy = DecodeOccupancy<KIND, 128, 4>(), Status::OK()) : LaunchDecode<KIND, 128, 4>(p, n_rows, kvh, s); \
      case 128 * 16 + 8: return occupancy ? (*occupancy = DecodeOccupancy<KIND, 128, 8>(), Status::OK()) : LaunchDecode<KIND, 128, 8>(p, n_rows, kvh, s); \
      case 256 * 16 + 1: return occupancy ? (*occupancy = DecodeOccupancy<KIND, 256, 1>(), Status::OK()) : LaunchDecode<KIND, 256, 1>(p, n_rows, kvh, s); \
      case 256 * 16 + 2: return occupancy ? (*occupancy = DecodeOccupancy<KIND, 256, 2>(), Status::OK()) : LaunchDecode<KIND, 256, 2>(p, n_rows, kvh, s); \
      case 256 * 16 + 4: return occupancy ? (*occupancy = DecodeOccupancy<KIND, 256, 4>(), Status::OK()) : LaunchDecode<KIND, 256, 4>(p, n_rows, kvh, s); \
      case 256 * 16 + 8: return occupancy ? (*occupancy = DecodeOccupancy<KIND, 256, 8>(), Status::OK()) : LaunchDecode<KIND, 256, 8>(p, n_rows, kvh, s); \
      default: break;                                                                           \
    }                                                                                           \
    return Status::Unimplemented("CUDA decode attention: head_dim " + std::to_string(hd) +      \
                                 " with " + std::to_string(g) +                                 \
                                 " query heads per KV head (head_dim 64, 128, 256; 1..8)");     \
  }

}  // namespace kvtier::cuda
