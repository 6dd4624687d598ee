// The decode GEMV's bandwidth path (MatVecRows, forward_ops.h): y [n_tok, n_out] = x . W^T.
//
// Plain rows (f32 / f16 / bf16): lane l of a warp loads bytes [16 l, 16 l + 16) of each
// 512-byte step of a row (one coalesced 16-byte load per lane, 4 steps in flight per row), and
// the matching f32 x values by 16-byte loads; R rows per warp share each x load.
// q8_0 / q4_0 rows: each warp streams its R rows through its own shared-memory ring (3 chunks of
// 32 blocks, 16-byte cp.async, so the global reads are whole contiguous runs), then a lane takes
// one 32-bit word of codes per row and step (q8_0: 8 lanes per block, 4 blocks a step; q4_0:
// 4 lanes per block, 8 blocks a step) with the block's f16 scale, so x is again read by
// consecutive lanes. Codes become f32 by one byte permute into the exponent 2^23 and one
// subtraction (exact; no int->float conversion, which is quarter rate), a block's partial sum
// is sum x * code, scaled by d once per 4 or 8 values.
// Sums in f32 (the order differs from the simple kernel's; both against the float64 product).
// Internal to src/cuda.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/cuda_common.cuh"
#include "cuda/matvec.h"

namespace kvtier::cuda {
namespace {

constexpr int kWarps = 4;         // warps per thread block

__device__ __forceinline__ uint4 LoadStream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ float4 LoadX(const float* p) {
  return __ldg(reinterpret_cast<const float4*>(p));
}

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Byte i of u (0..255) as the float 2^23 + u_i (exact).
template <int I>
__device__ __forceinline__ float ByteMagic(uint32_t u) {
  return __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540u | I));
}

// 16 bytes of a plain row as V f32 values.
template <FormatKind F>
__device__ __forceinline__ void Unpack(const uint4& q, float (&v)[F == FormatKind::kF32 ? 4 : 8]) {
  const uint32_t u[4] = {q.x, q.y, q.z, q.w};
  if constexpr (F == FormatKind::kF32) {
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = __uint_as_float(u[i]);
  } else if constexpr (F == FormatKind::kBF16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(u[i] << 16);
      v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
}

template <int R, int NT>
__device__ __forceinline__ void ReduceStore(float (&acc)[R][NT], uint32_t row0, uint32_t n_out,
                                            uint32_t t0, uint32_t n_tok, int lane, float* y) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      float s = acc[r][t];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0 && row0 + r < n_out && t0 + t < n_tok) {
        y[static_cast<size_t>(t0 + t) * n_out + row0 + r] = s;
      }
      acc[r][t] = 0.0f;
    }
  }
}

// Plain rows: w 16-byte aligned, row_stride a multiple of 16, k a multiple of 32.
template <FormatKind F, int R, int NT>
__global__ void __launch_bounds__(32 * kWarps)
    MatVecPlainKernel(const uint8_t* w, uint32_t n_out, uint32_t k, size_t row_stride,
                      const float* x, uint32_t n_tok, float* y) {
  constexpr int V = F == FormatKind::kF32 ? 4 : 8;  // values per lane per step
  constexpr int ES = F == FormatKind::kF32 ? 4 : 2;
  constexpr int kStep = 32 * V;
  constexpr int U = 4;  // steps in flight
  const int lane = threadIdx.x & 31;
  const uint32_t row0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * R;
  if (row0 >= n_out) return;
  const uint8_t* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wr[r] = w + static_cast<size_t>(min(row0 + r, n_out - 1)) * row_stride;
  float acc[R][NT] = {};
  for (uint32_t t0 = 0; t0 < n_tok; t0 += NT) {
    for (uint32_t base = 0; base < k; base += kStep * U) {
      uint4 q[U][R];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint32_t c = base + u * kStep + lane * V;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          q[u][r] = c < k ? LoadStream16(wr[r] + static_cast<size_t>(c) * ES) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint32_t c = base + u * kStep + lane * V;
        if (c >= k) break;
        float wf[R][V];
#pragma unroll
        for (int r = 0; r < R; ++r) Unpack<F>(q[u][r], wf[r]);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (NT > 1 && t0 + t >= n_tok) break;
          const float* xp = x + static_cast<size_t>(t0 + t) * k + c;
#pragma unroll
          for (int h = 0; h < V / 4; ++h) {
            const float4 xv = LoadX(xp + 4 * h);
#pragma unroll
            for (int r = 0; r < R; ++r) {
              float s = acc[r][t];
              s = fmaf(wf[r][4 * h], xv.x, s);
              s = fmaf(wf[r][4 * h + 1], xv.y, s);
              s = fmaf(wf[r][4 * h + 2], xv.z, s);
              s = fmaf(wf[r][4 * h + 3], xv.w, s);
              acc[r][t] = s;
            }
          }
        }
      }
    }
    ReduceStore<R, NT>(acc, row0, n_out, t0, n_tok, lane, y);
  }
}

template <FormatKind F>
__host__ __device__ constexpr int BlockBytes() { return F == FormatKind::kQ8_0 ? 34 : 18; }

// CB: 32-value blocks per staged chunk of a row (16 or 32); ST: chunks in each warp's ring;
// XS: the NT tokens' x chunks staged once per thread block too ([ST][NT][CB * 32] f32 after
// the rows).
template <FormatKind F, int R, int NT, int CB, int ST, bool XS>
__host__ __device__ constexpr int QuantSmemBytes() {
  return kWarps * ST * R * CB * BlockBytes<F>() + (XS ? ST * NT * CB * 32 * 4 : 0);
}

__device__ __forceinline__ uint32_t LoadU32Half2(const uint8_t* p) {  // 2-byte aligned
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
}

__device__ __forceinline__ float HalfAt(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}

// Chunk c of each of the warp's R rows into its ring slot (16-byte cp.async by all lanes); the
// caller commits (also when c is past the end, so the wait counts stay uniform).
template <int R, int kChunk, int kStages>
__device__ __forceinline__ void IssueChunk(uint8_t* ring, const uint8_t* w, size_t row_stride,
                                           uint32_t row0, uint32_t n_out, uint32_t c,
                                           uint32_t n_chunks, uint32_t row_bytes, int lane) {
  if (c < n_chunks) {
    const uint32_t off = c * kChunk, bytes = min(static_cast<uint32_t>(kChunk), row_bytes - off);
    uint8_t* dst = ring + static_cast<size_t>(c % kStages) * R * kChunk;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint8_t* src = w + static_cast<size_t>(min(row0 + r, n_out - 1)) * row_stride + off;
      for (uint32_t i = lane * 16; i < bytes; i += 512) CpAsync16(dst + r * kChunk + i, src + i);
    }
  }
}

// q8_0 / q4_0 rows: w 16-byte aligned, row_stride a multiple of 16, k a multiple of 256 (so
// every chunk is whole 16-byte units and whole steps).
template <FormatKind F, int R, int NT, int kChunkBlocks, int kStages, bool kXs>
__global__ void __launch_bounds__(32 * kWarps)
    MatVecQuantKernel(const uint8_t* w, uint32_t n_out, uint32_t k, size_t row_stride,
                      const float* x, uint32_t n_tok, float* y) {
  constexpr int BB = BlockBytes<F>();
  constexpr int kChunk = kChunkBlocks * BB;  // bytes of a row per chunk
  constexpr bool kQ8 = F == FormatKind::kQ8_0;
  constexpr int kStepBlocks = kQ8 ? 4 : 8;
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  uint8_t* ring = smem + static_cast<size_t>(wid) * kStages * R * kChunk;  // [stage][r][kChunk]
  float* xring = reinterpret_cast<float*>(smem + kWarps * kStages * R * kChunk);  // kXs: [stage][NT][CB * 32]
  const uint32_t row0 = (blockIdx.x * kWarps + wid) * R;
  // With x shared by the thread block every warp takes part in the copies and barriers (a warp
  // past n_out reads the last row again and stores nothing).
  if (!kXs && row0 >= n_out) return;
  const uint32_t n_blocks = k / 32, row_bytes = n_blocks * BB;
  const uint32_t n_chunks = (n_blocks + kChunkBlocks - 1) / kChunkBlocks;
  // This lane's block within a step and its code word within the block.
  const int j = kQ8 ? lane >> 3 : lane >> 2, m = kQ8 ? lane & 7 : lane & 3;
  float acc[R][NT] = {};
  uint32_t t0 = 0;  // the pass's first token
  auto issue = [&](uint32_t c) {
    IssueChunk<R, kChunk, kStages>(ring, w, row_stride, row0, n_out, c, n_chunks, row_bytes, lane);
    if constexpr (kXs) {
      if (c < n_chunks) {
        const uint32_t nb = min(static_cast<uint32_t>(kChunkBlocks), n_blocks - c * kChunkBlocks);
        const uint32_t nt = min(static_cast<uint32_t>(NT), n_tok - t0);
        for (uint32_t i = threadIdx.x; i < nt * nb * 8; i += 32 * kWarps) {
          const uint32_t t = i / (nb * 8), e = i - t * nb * 8;  // token, 16-byte piece
          CpAsync16(xring + ((c % kStages) * NT + t) * kChunkBlocks * 32 + 4 * e,
                    x + static_cast<size_t>(t0 + t) * k + static_cast<size_t>(c) * kChunkBlocks * 32 + 4 * e);
        }
      }
    }
    CpAsyncCommit();
  };
  // One token: x of chunk c + 1 is loaded into registers while chunk c is summed (its latency
  // would otherwise sit between the ring's wait and the sums of every chunk).
  constexpr int kSteps = kChunkBlocks / kStepBlocks;
  float4 xa_c[kSteps], xb_c[kSteps];
  auto load_x = [&](uint32_t c, float4(&xa)[kSteps], float4(&xb)[kSteps]) {
    if (c >= n_chunks) return;
    const uint32_t nb = min(static_cast<uint32_t>(kChunkBlocks), n_blocks - c * kChunkBlocks);
    const float* xp = x + static_cast<size_t>(c) * kChunkBlocks * 32 + 32 * j + 4 * m;
#pragma unroll
    for (int st = 0; st < kSteps; ++st) {
      if (st * kStepBlocks < static_cast<int>(nb)) {
        xa[st] = LoadX(xp + 32 * kStepBlocks * st);
        if constexpr (!kQ8) xb[st] = LoadX(xp + 32 * kStepBlocks * st + 16);
      }
    }
  };
  for (t0 = 0; t0 < n_tok; t0 += NT) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) issue(s);
    if constexpr (NT == 1 && !kXs) load_x(0, xa_c, xb_c);
    for (uint32_t c = 0; c < n_chunks; ++c) {
      CpAsyncWait<kStages - 2>();
      if constexpr (kXs) __syncthreads();
      else __syncwarp();
      issue(c + kStages - 1);  // into the ring slot that chunk c - 1 left
      float4 xa_n[kSteps], xb_n[kSteps];
      if constexpr (NT == 1 && !kXs) load_x(c + 1, xa_n, xb_n);
      const float* xsm = xring + (c % kStages) * NT * kChunkBlocks * 32;
      const uint8_t* buf = ring + static_cast<size_t>(c % kStages) * R * kChunk;
      const uint32_t nb = min(static_cast<uint32_t>(kChunkBlocks), n_blocks - c * kChunkBlocks);
      const uint32_t xc = c * kChunkBlocks * 32;  // first value of the chunk
#pragma unroll
      for (uint32_t st = 0; st < kChunkBlocks / kStepBlocks; ++st) {
        if (st * kStepBlocks >= nb) break;
        const uint32_t b = st * kStepBlocks + j;
        // x of this lane's values: q8_0 4 at 32 b + 4 m; q4_0 4 at 32 b + 4 m and 4 at + 16.
        float4 xa[NT], xb[NT];
        if constexpr (kXs) {
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            if (NT > 1 && t0 + t >= n_tok) break;
            const float* xp = xsm + t * kChunkBlocks * 32 + 32 * b + 4 * m;
            xa[t] = *reinterpret_cast<const float4*>(xp);
            if constexpr (!kQ8) xb[t] = *reinterpret_cast<const float4*>(xp + 16);
          }
        } else if constexpr (NT == 1) {
          xa[0] = xa_c[st];
          xb[0] = xb_c[st];
        } else {
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            if (t0 + t >= n_tok) break;
            const float* xp = x + static_cast<size_t>(t0 + t) * k + xc + 32 * b + 4 * m;
            xa[t] = LoadX(xp);
            if constexpr (!kQ8) xb[t] = LoadX(xp + 16);
          }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint8_t* p = buf + r * kChunk + b * BB;
          const float d = HalfAt(p);
          const uint32_t q = LoadU32Half2(p + 2 + 4 * m);
          float v[8];
          if constexpr (kQ8) {
            const uint32_t u = q ^ 0x80808080u;  // code + 128
            v[0] = ByteMagic<0>(u) - 8388736.0f;
            v[1] = ByteMagic<1>(u) - 8388736.0f;
            v[2] = ByteMagic<2>(u) - 8388736.0f;
            v[3] = ByteMagic<3>(u) - 8388736.0f;
          } else {
            const uint32_t lo = q & 0x0f0f0f0fu, hi = (q >> 4) & 0x0f0f0f0fu;
            v[0] = ByteMagic<0>(lo) - 8388616.0f;  // code - 8
            v[1] = ByteMagic<1>(lo) - 8388616.0f;
            v[2] = ByteMagic<2>(lo) - 8388616.0f;
            v[3] = ByteMagic<3>(lo) - 8388616.0f;
            v[4] = ByteMagic<0>(hi) - 8388616.0f;
            v[5] = ByteMagic<1>(hi) - 8388616.0f;
            v[6] = ByteMagic<2>(hi) - 8388616.0f;
            v[7] = ByteMagic<3>(hi) - 8388616.0f;
          }
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            if (NT > 1 && t0 + t >= n_tok) break;
            float s = v[0] * xa[t].x;
            s = fmaf(v[1], xa[t].y, s);
            s = fmaf(v[2], xa[t].z, s);
            s = fmaf(v[3], xa[t].w, s);
            if constexpr (!kQ8) {
              s = fmaf(v[4], xb[t].x, s);
              s = fmaf(v[5], xb[t].y, s);
              s = fmaf(v[6], xb[t].z, s);
              s = fmaf(v[7], xb[t].w, s);
            }
            acc[r][t] = fmaf(d, s, acc[r][t]);
          }
        }
      }
      if constexpr (NT == 1 && !kXs) {
#pragma unroll
        for (int st = 0; st < kSteps; ++st) {
          xa_c[st] = xa_n[st];
          xb_c[st] = xb_n[st];
        }
      }
    }
    CpAsyncWait<0>();
    if constexpr (kXs) __syncthreads();
    else __syncwarp();
    ReduceStore<R, NT>(acc, row0, n_out, t0, n_tok, lane, y);
  }
}

template <FormatKind F, int R, int NT>
Status LaunchPlain(const uint8_t* w, uint32_t n_out, uint32_t k, size_t row_stride,
                   const float* x, uint32_t n_tok, float* y, cudaStream_t s) {
  const uint32_t warps = (n_out + R - 1) / R;
  MatVecPlainKernel<F, R, NT><<<(warps + kWarps - 1) / kWarps, 32 * kWarps, 0, s>>>(
      w, n_out, k, row_stride, x, n_tok, y);
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

template <FormatKind F, int R, int NT, int CB, int ST, bool XS>
Status LaunchQuantWith(const uint8_t* w, uint32_t n_out, uint32_t k, size_t row_stride,
                       const float* x, uint32_t n_tok, float* y, int carveout, cudaStream_t s) {
  constexpr int kSmem = QuantSmemBytes<F, R, NT, CB, ST, XS>();
  auto* kernel = MatVecQuantKernel<F, R, NT, CB, ST, XS>;
  static bool attr_set = false;  // benign races: every caller sets the same values
  static int carve_set = -1;
  if (!attr_set) {
    KVTIER_CUDA_RETURN(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    attr_set = true;
  }
  if (carveout != carve_set) {
    KVTIER_CUDA_RETURN(
        cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout));
    carve_set = carveout;
  }
  const uint32_t warps = (n_out + R - 1) / R;
  kernel<<<(warps + kWarps - 1) / kWarps, 32 * kWarps, kSmem, s>>>(w, n_out, k, row_stride, x,
                                                                   n_tok, y);
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

template <FormatKind F, int R, int NT>
Status LaunchQuant(const uint8_t* w, uint32_t n_out, uint32_t k, size_t row_stride,
                   const float* x, uint32_t n_tok, float* y, const MatVecTuning& tu,
                   cudaStream_t s) {
  if (tu.x_smem == 1) {
    if (tu.chunk_blocks == 16) {
      return LaunchQuantWith<F, R, NT, 16, 4, true>(w, n_out, k, row_stride, x, n_tok, y, tu.smem_carveout, s);
    }
    return LaunchQuantWith<F, R, NT, 32, 3, true>(w, n_out, k, row_stride, x, n_tok, y, tu.smem_carveout, s);
  }
  if (tu.chunk_blocks == 16) {
    return LaunchQuantWith<F, R, NT, 16, 4, false>(w, n_out, k, row_stride, x, n_tok, y, tu.smem_carveout, s);
  }
  return LaunchQuantWith<F, R, NT, 32, 3, false>(w, n_out, k, row_stride, x, n_tok, y, tu.smem_carveout, s);
}

template <FormatKind F, int NT>
Status LaunchRows(const MatVecTuning& tu, const uint8_t* w, uint32_t n_out, uint32_t k,
                  size_t row_stride, const float* x, uint32_t n_tok, float* y, cudaStream_t s) {
  constexpr bool kQuant = F == FormatKind::kQ8_0 || F == FormatKind::kQ4_0;
  auto go = [&](auto rc) -> Status {
    constexpr int R = decltype(rc)::value;
    if constexpr (kQuant) return LaunchQuant<F, R, NT>(w, n_out, k, row_stride, x, n_tok, y, tu, s);
    else return LaunchPlain<F, R, NT>(w, n_out, k, row_stride, x, n_tok, y, s);
  };
  if (tu.rows_per_warp >= 4) return go(std::integral_constant<int, 4>{});
  if (tu.rows_per_warp >= 2) return go(std::integral_constant<int, 2>{});
  return go(std::integral_constant<int, 1>{});
}

template <FormatKind F>
Status LaunchFormat(const MatVecTuning& tu, const uint8_t* w, uint32_t n_out, uint32_t k,
                    size_t row_stride, const float* x, uint32_t n_tok, float* y, cudaStream_t s) {
  if (n_tok == 1) return LaunchRows<F, 1>(tu, w, n_out, k, row_stride, x, n_tok, y, s);
  return LaunchRows<F, 8>(tu, w, n_out, k, row_stride, x, n_tok, y, s);
}

}  // namespace

bool MatVecFastApplies(const Format& format, uint32_t k, size_t row_stride, const void* w) {
  if (reinterpret_cast<uintptr_t>(w) % 16 != 0 || row_stride % 16 != 0) return false;
  switch (format.kind) {
    case FormatKind::kF32:
    case FormatKind::kF16:
    case FormatKind::kBF16: return true;
    case FormatKind::kQ8_0:
    case FormatKind::kQ4_0: return k % 256 == 0;
    default: return false;
  }
}

// The measured rule (H100, docs/results/cuda.md, fourth slice, calls 3 and 4): one token:
// rows per warp 2 from 2048 rows (each x load serves both), q4_0 4 from 65536 (the
// 151936-row output matrix: 63% of HBM against 50% at 2); q8_0 / q4_0 with x staged per
// thread block (call 4: q8_0 44-65% against 38-64% per warp), q8_0 chunks of 32 blocks,
// q4_0 16; 8 tokens: 4 rows from 8192 rows (q8_0 2), else 1 (q4_0 2), chunks of 16, x per
// warp; the driver's carve-out (44% changed nothing).
MatVecTuning MatVecDefaults(const Format& format, uint32_t n_out, uint32_t n_tok,
                            MatVecTuning tu) {
  const bool q8 = format.kind == FormatKind::kQ8_0, q4 = format.kind == FormatKind::kQ4_0;
  if (tu.rows_per_warp == 0) {
    if (n_tok == 1) {
      tu.rows_per_warp = q4 && n_out >= 65536 ? 4 : n_out >= 2048 ? 2 : 1;
    } else {
      tu.rows_per_warp = n_out >= 8192 ? (q8 ? 2 : 4) : (q4 ? 2 : 1);
    }
  }
  if (tu.chunk_blocks == 0) tu.chunk_blocks = q8 && n_tok == 1 ? 32 : 16;
  if (tu.smem_carveout < 0) tu.smem_carveout = -1;
  if (tu.x_smem < 0) tu.x_smem = n_tok == 1 ? 1 : 0;
  return tu;
}

Status MatVecFast(const void* w, const Format& format, uint32_t n_out, uint32_t k,
                  size_t row_stride, const float* x, uint32_t n_tok, float* y,
                  const MatVecTuning& tuning, void* stream) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto s = static_cast<cudaStream_t>(stream);
  const MatVecTuning tu = MatVecDefaults(format, n_out, n_tok, tuning);
  switch (format.kind) {
    case FormatKind::kF32: return LaunchFormat<FormatKind::kF32>(tu, wb, n_out, k, row_stride, x, n_tok, y, s);
    case FormatKind::kF16: return LaunchFormat<FormatKind::kF16>(tu, wb, n_out, k, row_stride, x, n_tok, y, s);
    case FormatKind::kBF16: return LaunchFormat<FormatKind::kBF16>(tu, wb, n_out, k, row_stride, x, n_tok, y, s);
    case FormatKind::kQ8_0: return LaunchFormat<FormatKind::kQ8_0>(tu, wb, n_out, k, row_stride, x, n_tok, y, s);
    case FormatKind::kQ4_0: return LaunchFormat<FormatKind::kQ4_0>(tu, wb, n_out, k, row_stride, x, n_tok, y, s);
    default: return Status::Unimplemented("CUDA matvec: weight format " + format.spec());
  }
}

}  // namespace kvtier::cuda
