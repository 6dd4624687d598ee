// The per-head tensor-core paged decode kernel (single rows, and shapes the all-heads kernel of
// decode_wide.cuh does not take; decode.cuh's f32 kernel is the exact one), and the pieces the
// tensor-core kernels share (fragments, dev::MmaPV, the warp merge). Thread-safety: kernels
// only; no host state here but the per-instantiation attribute / occupancy caches of the
// launchers (set once, idempotent). One thread block (4 warps) per (split, KV head, row),
// 64-token tiles staged with
// cp.async (kStages deep; tokens past the range zero-filled); a warp takes 16 tokens of a tile:
//
//   S^T [8 heads x 16 tokens] = Q [heads x d] . K^T   mma.m16n8k16, A = Q in registers (rows
//                                                     8-15 zero), B = K rows via ldmatrix
//   O^T [d x 8 heads]        += V^T . P^T             A = V rows via ldmatrix.trans, B = P
//                                                     straight from S^T's accumulators
//
// f16 / bf16 rows are used as stored, and Q and P enter the tensor cores as a hi + lo pair of
// f16 (bf16 for bf16 K/V), so their rounding costs about 2^-17 relative. q8_0 / q4_0: K's
// B fragments are built in registers from the stored codes (exact in f16), each 32-value
// block's partial scores scaled by its d in f32; V's A fragments likewise as f16(code * d),
// transposed in registers by movmatrix; Q and P enter as one f16 each (rounded operands, so
// those formats are tested at the CPU's rounded-path bound, 1e-3).
#pragma once

#include "cuda/decode.cuh"

namespace kvtier::cuda {

constexpr int kMmaTile = 64;

// Compile-time knobs, for kvtier_cuda_bench sweeps (device_run.sh VARIANTS=1); the defaults are
// the best measured on an H100 (docs/results/cuda.md). Stages: tiles in shared memory at
// head_dim <= 128 (head_dim 256 uses 2). Quad issue: a quad of lanes copies each row (fewer
// live addresses: 118 registers for q4_0 / q8_0 where the flat order spills at the 128 that 4
// blocks per SM allow; slower for bf16) instead of the flat piece-by-piece order.
#ifndef KVTIER_CUDA_PLAIN_STAGES
#define KVTIER_CUDA_PLAIN_STAGES 3
#endif
#ifndef KVTIER_CUDA_Q8_STAGES
#define KVTIER_CUDA_Q8_STAGES 4
#endif
#ifndef KVTIER_CUDA_Q4_STAGES
#define KVTIER_CUDA_Q4_STAGES 3
#endif
#ifndef KVTIER_CUDA_Q8_QUAD_ISSUE
#define KVTIER_CUDA_Q8_QUAD_ISSUE 1
#endif
#ifndef KVTIER_CUDA_Q4_QUAD_ISSUE
#define KVTIER_CUDA_Q4_QUAD_ISSUE 1
#endif

template <FormatKind F, int HD>
struct MmaGeo {
  static constexpr bool kPlain = F == FormatKind::kF16 || F == FormatKind::kBF16;
  static constexpr bool kBf16 = F == FormatKind::kBF16;
  static constexpr int kRowBytes = kPlain ? 2 * HD : (F == FormatKind::kQ8_0 ? 34 : 18) * HD / 32;
  static constexpr int kCopy = kRowBytes % 16 == 0 ? 16 : (kRowBytes % 8 == 0 ? 8 : 4);
  static constexpr int kPieces = kRowBytes / kCopy;
  // Plain rows are read by ldmatrix: a pitch of 16 mod 128 bytes keeps its 8 rows off each
  // other's banks.
  static constexpr int kRawPitch = kPlain ? kRowBytes + 16 : (kRowBytes + 15) / 16 * 16;
  static constexpr int kStages =
      HD >= 256 ? 2
                : (kPlain ? KVTIER_CUDA_PLAIN_STAGES
                          : (F == FormatKind::kQ8_0 ? KVTIER_CUDA_Q8_STAGES : KVTIER_CUDA_Q4_STAGES));
  static constexpr bool kQuadIssue = F == FormatKind::kQ8_0   ? KVTIER_CUDA_Q8_QUAD_ISSUE
                                     : F == FormatKind::kQ4_0 ? KVTIER_CUDA_Q4_QUAD_ISSUE
                                                              : false;
  static constexpr int kStageBytes = 2 * kMmaTile * kRawPitch;
  static constexpr int kLoop = kStages * kStageBytes;
  static constexpr int kMerge = (4 * 8 * HD + 2 * 4 * 8) * 4;
  static constexpr int kBody = kLoop > kMerge ? kLoop : kMerge;
  static constexpr int kOffsBytes = 2 * 2 * kMmaTile * 8;
  static constexpr int kSmem = kBody + kOffsBytes;
  // Thread blocks per SM the registers must allow (shared memory allows 4 or more for the
  // quantized formats at head_dim <= 128; 2 for the plain ones).
  static constexpr int kMinBlocks = kPlain || HD > 128 ? 1 : 4;
};

namespace dev {

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// The transpose of the 8x8 16-bit matrix whose row lane/4, columns 2(lane%4) + {0, 1}, this
// lane holds.
__device__ __forceinline__ uint32_t MovTrans(uint32_t x) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(x));
  return d;
}
__device__ __forceinline__ uint32_t MovTrans(__half2 x) {
  return MovTrans(*reinterpret_cast<const uint32_t*>(&x));
}

// d += A . B (m16n8k16, f32 accumulators); A = {a0, a1, a2, a3}, B = {b0, b1}.
template <bool BF16>
__device__ __forceinline__ void Mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// (x, y) as a hi and a lo pair of 16-bit floats: x = hi + lo to about 2^-17 (f16: 2^-22).
template <bool BF16>
__device__ __forceinline__ void Split(float x, float y, uint32_t* hi, uint32_t* lo) {
  if constexpr (BF16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    const float2 hf = __bfloat1622float2(h);
    const __nv_bfloat162 l = __floats2bfloat162_rn(x - hf.x, y - hf.y);
    *hi = *reinterpret_cast<const uint32_t*>(&h);
    *lo = *reinterpret_cast<const uint32_t*>(&l);
  } else {
    const __half2 h = __floats2half2_rn(x, y);
    const float2 hf = __half22float2(h);
    const __half2 l = __floats2half2_rn(x - hf.x, y - hf.y);
    *hi = *reinterpret_cast<const uint32_t*>(&h);
    *lo = *reinterpret_cast<const uint32_t*>(&l);
  }
}

// Two int8 codes (the low 16 bits of w) as an exact half2: 1024 + 128 + code, minus 1152.
__device__ __forceinline__ __half2 I8x2ToHalf2(uint32_t w) {
  const uint32_t u = __byte_perm(w ^ 0x8080u, 0x6464u, 0x5140u);
  return __hsub2(*reinterpret_cast<const __half2*>(&u), __floats2half2_rn(1152.0f, 1152.0f));
}
// Two 4-bit codes (bits 0-3 and 8-11 of w) minus 8, as an exact half2.
__device__ __forceinline__ __half2 U4x2ToHalf2(uint32_t w) {
  const uint32_t u = __byte_perm(w & 0x0f0fu, 0x6464u, 0x5140u);
  return __hsub2(*reinterpret_cast<const __half2*>(&u), __floats2half2_rn(1032.0f, 1032.0f));
}

template <int W>
__device__ __forceinline__ void CpAsyncZero(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  if constexpr (W == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, 0;\n" ::"r"(s), "l"(gmem));
  } else if constexpr (W == 8) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, 0;\n" ::"r"(s), "l"(gmem));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, 0;\n" ::"r"(s), "l"(gmem));
  }
}

}  // namespace dev

namespace dev {

constexpr float kLog2e = 1.4426950408889634f;

// Q fragments (A of q.k) of KV head `h` of row `r`: query head `quad` of its group, dims
// 16kk + 2c4 + {0, 1, 8, 9}, scaled (and by log2 e unless soft-capped: scores are kept in
// log2 units), as a hi and a lo 16-bit pair (the lo pair is used for f16 / bf16 rows only).
template <bool BF, int HD>
__device__ __forceinline__ void LoadQFragments(const DecodeParams& p, uint32_t r, uint32_t h,
                                               int lane, uint32_t (&qh)[HD / 16][2],
                                               uint32_t (&ql)[HD / 16][2]) {
  const int quad = lane >> 2, c4 = lane & 3;
  const float qscale = p.softcap > 0.0f ? p.scale : p.scale * kLog2e;
  const bool on = quad < static_cast<int>(p.group);
  const float* qp =
      p.q + (static_cast<size_t>(r) * p.n_heads + h * p.group + (on ? quad : 0)) * HD;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const int d0 = 16 * kk + 2 * c4;
    const float x0 = on ? qp[d0] * qscale : 0.0f, x1 = on ? qp[d0 + 1] * qscale : 0.0f;
    const float x2 = on ? qp[d0 + 8] * qscale : 0.0f, x3 = on ? qp[d0 + 9] * qscale : 0.0f;
    Split<BF>(x0, x1, &qh[kk][0], &ql[kk][0]);
    Split<BF>(x2, x3, &qh[kk][1], &ql[kk][1]);
  }
}

// One warp's online-softmax state: up to 8 query heads (one per quad) of one KV head.
template <int HD>
struct MmaState {
  float m_run = -INFINITY, l_run = 0.0f;
  float acc[HD / 16][4];  // O^T fragments: dim 16m + quad (+8), heads 2c4 + {0, 1}
  __device__ __forceinline__ void Clear() {
#pragma unroll
    for (int mt = 0; mt < HD / 16; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
  }
};

// The transposed layout's online-softmax state: heads 2c4 + {0, 1} per lane (the same heads as
// the O^T accumulator's columns), l summed over the lane's tokens only.
template <int HD>
struct MmaStateT {
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  float acc[HD / 16][4];
  __device__ __forceinline__ void Clear() {
#pragma unroll
    for (int mt = 0; mt < HD / 16; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
  }
};

// One online-softmax step over NU 16-token units (unit u's tokens start at wt0[u]; tokens
// >= end masked): s becomes P (unnormalized, exp2(s - m)); the state's maxima, sums and
// accumulator are updated. One step per NU units: a 32-token step costs the shuffles, the
// maxima and the rescale once.
template <int NU, int HD>
__device__ __forceinline__ void SoftmaxT(float (&s)[NU][4], const uint32_t (&wt0)[NU],
                                         uint32_t end, float softcap, int lane,
                                         MmaStateT<HD>& st) {
  const int quad = lane >> 2;
  const bool capped = softcap > 0.0f;
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int u = 0; u < NU; ++u) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (capped) s[u][i] = softcap * tanhf(s[u][i] / softcap) * kLog2e;
      if (wt0[u] + quad + 8 * (i >> 1) >= end) s[u][i] = -INFINITY;
      mx[i & 1] = fmaxf(mx[i & 1], s[u][i]);
    }
  }
  float alpha[2], m_new[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 4));
    mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 8));
    mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 16));
    m_new[e] = fmaxf(st.m_run[e], mx[e]);
    alpha[e] = m_new[e] == -INFINITY ? 1.0f : exp2f(st.m_run[e] - m_new[e]);
    st.m_run[e] = m_new[e];
    st.l_run[e] *= alpha[e];
  }
#pragma unroll
  for (int u = 0; u < NU; ++u) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s[u][i] = s[u][i] == -INFINITY ? 0.0f : exp2f(s[u][i] - m_new[i & 1]);
    }
    st.l_run[0] += s[u][0] + s[u][2];
    st.l_run[1] += s[u][1] + s[u][3];
  }
  // Rescale only when some running maximum moved (rare after the first tiles).
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int m = 0; m < HD / 16; ++m) {
      st.acc[m][0] *= alpha[0];
      st.acc[m][1] *= alpha[1];
      st.acc[m][2] *= alpha[0];
      st.acc[m][3] *= alpha[1];
    }
  }
}

// O^T [d x 8 heads] += V^T . P for 16 tokens of one KV head (token i's V row at vr + i * PITCH):
// B = P (tokens x heads) as (bh0, bh1) = tokens 2c4 + {0, 1} and 8 + 2c4 + {0, 1} of head
// quad, with (bl0, bl1) its lo halves for f16 / bf16 rows. acc: O^T fragments, dim 16m + quad
// (+8), heads 2c4 + {0, 1}.
template <FormatKind F, int HD, int PITCH>
__device__ __forceinline__ void MmaPV(const uint8_t* vr, uint32_t bh0, uint32_t bl0,
                                      uint32_t bh1, uint32_t bl1, int lane,
                                      float (&acc)[HD / 16][4]) {
  constexpr bool kPlain = F == FormatKind::kF16 || F == FormatKind::kBF16;
  constexpr bool BF = F == FormatKind::kBF16;
  constexpr int KS = HD / 16;
  const int quad = lane >> 2, c4 = lane & 3;
  const int lrow = ((lane >> 4) << 3) + (lane & 7);
  const int lcol = ((lane >> 3) & 1) * 8;
  if constexpr (kPlain) {
#pragma unroll
    for (int m = 0; m < KS; ++m) {
      uint32_t a[4];
      LdMatrixX4Trans(a, vr + lrow * PITCH + (16 * m + lcol) * 2);
      Mma<BF>(acc[m], a[0], a[1], a[2], a[3], bh0, bh1);
      Mma<BF>(acc[m], a[0], a[1], a[2], a[3], bl0, bl1);
    }
  } else {
    // V^T's A fragments from the stored codes: this lane decodes token quad (and 8 + quad),
    // dims 2c4 + {0, 1} and 8 + 2c4 + {0, 1} of each 16-value step as f16(code * d), and
    // movmatrix transposes each 8x8 piece into place.
    constexpr int kBlockBytes = F == FormatKind::kQ8_0 ? 34 : 18;
#pragma unroll
    for (int blk = 0; blk < HD / 32; ++blk) {
      __half2 v[2][2][2];  // [token half][16-value step of the block][dims +0 / +8]
#pragma unroll
      for (int th = 0; th < 2; ++th) {
        const uint8_t* rowp = vr + (th * 8 + quad) * PITCH + kBlockBytes * blk;
        const uint16_t dbits = Ld16(rowp);
        const __half2 d2 = __halves2half2(__ushort_as_half(dbits), __ushort_as_half(dbits));
        if constexpr (F == FormatKind::kQ8_0) {
#pragma unroll
          for (int part = 0; part < 2; ++part) {
            v[th][part][0] = __hmul2(I8x2ToHalf2(Ld16(rowp + 2 + 16 * part + 2 * c4)), d2);
            v[th][part][1] = __hmul2(I8x2ToHalf2(Ld16(rowp + 10 + 16 * part + 2 * c4)), d2);
          }
        } else {
          const uint32_t w0 = Ld16(rowp + 2 + 2 * c4), w1 = Ld16(rowp + 10 + 2 * c4);
          v[th][0][0] = __hmul2(U4x2ToHalf2(w0), d2);
          v[th][0][1] = __hmul2(U4x2ToHalf2(w1), d2);
          v[th][1][0] = __hmul2(U4x2ToHalf2(w0 >> 4), d2);
          v[th][1][1] = __hmul2(U4x2ToHalf2(w1 >> 4), d2);
        }
      }
#pragma unroll
      for (int part = 0; part < 2; ++part) {
        const int m = 2 * blk + part;
        Mma<false>(acc[m], MovTrans(v[0][part][0]), MovTrans(v[0][part][1]),
                   MovTrans(v[1][part][0]), MovTrans(v[1][part][1]), bh0, bh1);
      }
    }
  }
}

// 16 tokens of one KV head, tokens wt0 .. wt0 + 15 (those >= end masked): token i's K row at
// kr + i * PITCH and its V row at vr + i * PITCH in shared memory, in the stored format.
//   S^T [8 heads x 16 tokens] = Q . K^T, online softmax, O^T [d x 8 heads] += V^T . P^T.
template <FormatKind F, int HD, int PITCH>
__device__ __forceinline__ void MmaUnit(const uint8_t* kr, const uint8_t* vr, uint32_t wt0,
                                        uint32_t end, const uint32_t (&qh)[HD / 16][2],
                                        const uint32_t (&ql)[HD / 16][2], float softcap, int lane,
                                        MmaState<HD>& st) {
  constexpr bool kPlain = F == FormatKind::kF16 || F == FormatKind::kBF16;
  constexpr bool BF = F == FormatKind::kBF16;
  constexpr int KS = HD / 16;
  const int quad = lane >> 2, c4 = lane & 3;
  // ldmatrix addresses: lane l reads row (l & 7) of 8x8 matrix l / 8, matrices ordered
  // (tokens 0-7, cols 0-7), (tokens 0-7, cols 8-15), (tokens 8-15, 0-7), (tokens 8-15, 8-15).
  const int lrow = ((lane >> 4) << 3) + (lane & 7);
  const int lcol = ((lane >> 3) & 1) * 8;

  // q.k for the warp's 16 tokens: s[n-tile][c], column = token n-tile*8 + 2c4 + {0, 1}.
  float s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
  if constexpr (kPlain) {
    float sl[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};  // the lo half's own chains
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      uint32_t b[4];
      LdMatrixX4(b, kr + lrow * PITCH + (16 * kk + lcol) * 2);
      Mma<BF>(s[0], qh[kk][0], 0u, qh[kk][1], 0u, b[0], b[1]);
      Mma<BF>(s[1], qh[kk][0], 0u, qh[kk][1], 0u, b[2], b[3]);
      Mma<BF>(sl[0], ql[kk][0], 0u, ql[kk][1], 0u, b[0], b[1]);
      Mma<BF>(sl[1], ql[kk][0], 0u, ql[kk][1], 0u, b[2], b[3]);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      s[nt][0] += sl[nt][0];
      s[nt][1] += sl[nt][1];
    }
  } else {
    // B fragments straight from the stored codes: token `quad` of each n-tile, dims
    // 2c4 + {0, 1} and 2c4 + {8, 9} of each 16-value step, exact in f16; each 32-value
    // block's partial scores are then scaled by its tokens' d in f32.
    constexpr int kBlockBytes = F == FormatKind::kQ8_0 ? 34 : 18;
#pragma unroll
    for (int blk = 0; blk < HD / 32; ++blk) {
      float sb[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const uint8_t* base = kr + (nt * 8 + quad) * PITCH + kBlockBytes * blk + 2 + 2 * c4;
        if constexpr (F == FormatKind::kQ8_0) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const __half2 b0 = I8x2ToHalf2(Ld16(base + 16 * half));
            const __half2 b1 = I8x2ToHalf2(Ld16(base + 16 * half + 8));
            Mma<false>(sb[nt], qh[2 * blk + half][0], 0u, qh[2 * blk + half][1], 0u,
                       *reinterpret_cast<const uint32_t*>(&b0),
                       *reinterpret_cast<const uint32_t*>(&b1));
          }
        } else {
          const uint32_t w0 = Ld16(base), w1 = Ld16(base + 8);
          const __half2 l0 = U4x2ToHalf2(w0), l1 = U4x2ToHalf2(w1);
          const __half2 h0 = U4x2ToHalf2(w0 >> 4), h1 = U4x2ToHalf2(w1 >> 4);
          Mma<false>(sb[nt], qh[2 * blk][0], 0u, qh[2 * blk][1], 0u,
                     *reinterpret_cast<const uint32_t*>(&l0),
                     *reinterpret_cast<const uint32_t*>(&l1));
          Mma<false>(sb[nt], qh[2 * blk + 1][0], 0u, qh[2 * blk + 1][1], 0u,
                     *reinterpret_cast<const uint32_t*>(&h0),
                     *reinterpret_cast<const uint32_t*>(&h1));
        }
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const uint8_t* drow = kr + (nt * 8 + 2 * c4) * PITCH + kBlockBytes * blk;
        s[nt][0] = fmaf(HalfBits(Ld16(drow)), sb[nt][0], s[nt][0]);
        s[nt][1] = fmaf(HalfBits(Ld16(drow + PITCH)), sb[nt][1], s[nt][1]);
      }
    }
  }

  // Online softmax for head `quad` over tokens {2c4, 2c4 + 1, 8 + 2c4, 9 + 2c4}.
  const bool capped = softcap > 0.0f;
  float sc[4] = {s[0][0], s[0][1], s[1][0], s[1][1]};
  float mt = -INFINITY;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t t = wt0 + (i >> 1) * 8 + 2 * c4 + (i & 1);
    if (capped) sc[i] = softcap * tanhf(sc[i] / softcap) * kLog2e;
    if (t >= end) sc[i] = -INFINITY;
    mt = fmaxf(mt, sc[i]);
  }
  mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
  mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
  const float m_new = fmaxf(st.m_run, mt);
  const float alpha = m_new == -INFINITY ? 1.0f : exp2f(st.m_run - m_new);
  float pe[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) pe[i] = sc[i] == -INFINITY ? 0.0f : exp2f(sc[i] - m_new);
  st.l_run = st.l_run * alpha + (pe[0] + pe[1]) + (pe[2] + pe[3]);
  st.m_run = m_new;
  // Accumulator columns are heads 2c4 and 2c4 + 1: their alphas live in quads 2c4, 2c4 + 1.
  const float a0 = __shfl_sync(0xffffffffu, alpha, 8 * c4);
  const float a1 = __shfl_sync(0xffffffffu, alpha, 8 * c4 + 4);
  uint32_t bh0, bl0, bh1, bl1;
  Split<BF>(pe[0], pe[1], &bh0, &bl0);
  Split<BF>(pe[2], pe[3], &bh1, &bl1);
#pragma unroll
  for (int m = 0; m < KS; ++m) {
    st.acc[m][0] *= a0;
    st.acc[m][1] *= a1;
    st.acc[m][2] *= a0;
    st.acc[m][3] *= a1;
  }
  MmaPV<F, HD, PITCH>(vr, bh0, bl0, bh1, bl1, lane, st.acc);
}

// The end of a thread block: each warp stores its state in shared memory (smem: at least
// (NW * 8 * HD + 2 * NW * 8) floats, no longer in use by the main loop; m_m / m_l [NW][8] are
// written by the caller, in its own fragment layout, before MergeStored), then the warps that
// worked on the same KV head merge: warp w worked on KV head h0 + w % hpc (hpc KV heads per
// thread block). Heads >= group are dropped. Writes p.out (one split) or the split's partial
// result and log-sum-exp.
// The staged tile loop of both tensor-core kernels: tiles' row offsets computed by threads
// 0 .. T-1 two tiles ahead (double-buffered), copies issued S - 1 tiles ahead by cp.async, then
// per tile: wait for its copies, issue tile it + S - 1, compute tile it + S's offsets, body(it)
// on the staged tile. Ends with every copy landed and the block synchronized (the caller may
// reuse the staging memory).
template <int S, int T, class Offsets, class Issue, class Body>
__device__ __forceinline__ void StagedTiles(int n_tiles, int tid, Offsets&& offsets,
                                            Issue&& issue, Body&& body) {
  for (int x = 0; x < S - 1; ++x) {
    if (tid < T && x < n_tiles) offsets(x);
    __syncthreads();
    if (x < n_tiles) issue(x);
    CpAsyncCommit();
    __syncthreads();
  }
  if (tid < T && S - 1 < n_tiles) offsets(S - 1);
  for (int it = 0; it < n_tiles; ++it) {
    CpAsyncWait<S - 2>();
    __syncthreads();
    if (it + S - 1 < n_tiles) issue(it + S - 1);
    CpAsyncCommit();
    if (tid < T && it + S < n_tiles) offsets(it + S);
    body(it);
  }
  CpAsyncWait<0>();
  __syncthreads();
}

template <int HD, int NW>
struct WarpMergeSmem {
  float* acc;  // [NW][8][HD]
  float* m;    // [NW][8], log2 units
  float* l;    // [NW][8]
  __device__ explicit WarpMergeSmem(uint8_t* smem)
      : acc(reinterpret_cast<float*>(smem)), m(acc + NW * 8 * HD), l(m + NW * 8) {}
};

// The head dim of O^T's row quad + 8r of m-tile m (P.V with V^T's rows in dim order).
struct RowDims {
  static __device__ __forceinline__ int Dim(int m, int r, int quad) { return 16 * m + quad + 8 * r; }
};

template <int HD, int NW, class Dims = RowDims>
__device__ __forceinline__ void StoreWarpAcc(const WarpMergeSmem<HD, NW>& ms,
                                             const float (&acc)[HD / 16][4], int warp,
                                             int lane) {
  const int quad = lane >> 2, c4 = lane & 3;
#pragma unroll
  for (int m = 0; m < HD / 16; ++m) {
    const int d0 = Dims::Dim(m, 0, quad), d1 = Dims::Dim(m, 1, quad);
    ms.acc[(warp * 8 + 2 * c4) * HD + d0] = acc[m][0];
    ms.acc[(warp * 8 + 2 * c4 + 1) * HD + d0] = acc[m][1];
    ms.acc[(warp * 8 + 2 * c4) * HD + d1] = acc[m][2];
    ms.acc[(warp * 8 + 2 * c4 + 1) * HD + d1] = acc[m][3];
  }
}

// The fused split merge (no second launch): every thread block of a (row, KV-head group) item
// writes its split's partial result, then takes a ticket; the one that arrives last merges
// the item's n_heads_item heads (starting at head0) over all splits by log-sum-exp, as
// MergeSplitsKernel does, and resets the ticket. The partials are read through L2 (ld.cg):
// other SMs wrote them. Shared memory (the caller's, free again by then) holds the weights
// exp(lse - max) [n_heads_item][n_splits] and each head's 1 / sum (decode.cu fuses only where
// they fit in kFusedMergeSmem bytes); a thread then takes 4 dims of one head with 8 splits'
// loads in flight.
constexpr int kFusedMergeSmem = 32 * 1024;


template <int HD>
__device__ __noinline__ void FusedSplitMerge(const DecodeParams& p, uint8_t* smem,
                                             uint32_t n_heads_item, size_t head0, size_t item) {
  __shared__ uint32_t ticket;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) ticket = atomicAdd(&p.counters[item], 1u);
  __syncthreads();
  if (ticket != p.n_splits - 1) return;
  if (threadIdx.x == 0) p.counters[item] = 0;  // ready for the next call
  __threadfence();
  const uint32_t S = p.n_splits;
  float* w = reinterpret_cast<float*>(smem);  // [n_heads_item][S]
  float* inv = w + n_heads_item * S;           // [n_heads_item]
  for (uint32_t i = threadIdx.x; i < n_heads_item * S; i += blockDim.x) {
    w[i] = __ldcg(p.part_lse + head0 * S + i);
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n_warps = blockDim.x >> 5;
  for (uint32_t h = warp; h < n_heads_item; h += n_warps) {
    float m = -INFINITY;
    for (uint32_t s = lane; s < S; s += 32) m = fmaxf(m, w[h * S + s]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float den = 0.0f;
    for (uint32_t s = lane; s < S; s += 32) {
      const float l = w[h * S + s];
      const float e = l == -INFINITY ? 0.0f : expf(l - m);
      w[h * S + s] = e;
      den += e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);
    if (lane == 0) inv[h] = den;
  }
  __syncthreads();
  constexpr int kQuads = HD / 4;
  for (uint32_t i = threadIdx.x; i < n_heads_item * kQuads; i += blockDim.x) {
    const uint32_t hl = i / kQuads;
    const size_t head = head0 + hl;
    const int d4 = static_cast<int>(i % kQuads);
    const float4* po = reinterpret_cast<const float4*>(p.part_o + head * S * HD) + d4;
    const float* wh = w + hl * S;
    float4 num = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (uint32_t s = 0; s < S; ++s) {
      const float4 o = __ldcg(po + static_cast<size_t>(s) * kQuads);
      const float e = wh[s];
      num.x = fmaf(e, o.x, num.x);
      num.y = fmaf(e, o.y, num.y);
      num.z = fmaf(e, o.z, num.z);
      num.w = fmaf(e, o.w, num.w);
    }
    const float den = inv[hl];
    reinterpret_cast<float4*>(p.out + head * HD)[d4] =
        den > 0.0f ? make_float4(num.x / den, num.y / den, num.z / den, num.w / den)
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// kFuse: compile the fused merge in (kernels without a register cap; a call in the 2-blocks
// per SM q4_0 kernel cost it 28% at batch 32: docs/results/cuda.md). decode.cu sets p.counters
// only for kernels that run 1 block per SM, which all have it.
template <int HD, int NW, bool kFuse = false>
__device__ __forceinline__ void MergeStored(const DecodeParams& p, const WarpMergeSmem<HD, NW>& ms,
                                            int hpc, uint32_t h0, uint32_t r, uint32_t split) {
  __syncthreads();
  const int tid = threadIdx.x;
  const int group = static_cast<int>(p.group);
  const int per_head = NW / hpc;
  for (int i = tid; i < hpc * group * HD; i += NW * 32) {
    const int hh = i / (group * HD), g = (i / HD) % group, dim = i % HD;
    float M = -INFINITY;
    for (int k = 0; k < per_head; ++k) M = fmaxf(M, ms.m[(hh + k * hpc) * 8 + g]);
    float L = 0.0f, O = 0.0f;
    if (M != -INFINITY) {
      for (int k = 0; k < per_head; ++k) {
        const int w = hh + k * hpc;
        const float mw = ms.m[w * 8 + g];
        if (mw == -INFINITY) continue;
        const float e = exp2f(mw - M);
        L += ms.l[w * 8 + g] * e;
        O += ms.acc[(w * 8 + g) * HD + dim] * e;
      }
    }
    const size_t head = static_cast<size_t>(r) * p.n_heads + (h0 + hh) * p.group + g;
    const float o = L > 0.0f ? O / L : 0.0f;
    if (p.n_splits == 1) {
      p.out[head * HD + dim] = o;
    } else {
      p.part_o[(head * p.n_splits + split) * HD + dim] = o;
      // The merge takes natural-log sums: M is in log2 units.
      if (dim == 0) {
        p.part_lse[head * p.n_splits + split] =
            L > 0.0f ? (M + log2f(L)) * 0.6931471805599453f : -INFINITY;
      }
    }
  }
  if constexpr (kFuse) {
  if (p.n_splits > 1 && p.counters) {
    FusedSplitMerge<HD>(p, reinterpret_cast<uint8_t*>(ms.acc), static_cast<uint32_t>(hpc * group),
                        static_cast<size_t>(r) * p.n_heads + h0 * p.group,
                        static_cast<size_t>(r) * gridDim.y + blockIdx.y);
  }
  }
}

// MmaState's layout (head quad per lane, its l summed over the quad's lanes).
template <int HD, int NW>
__device__ __forceinline__ void MergeWarpsAndStore(const DecodeParams& p, uint8_t* smem,
                                                   const MmaState<HD>& st, int hpc, uint32_t h0,
                                                   uint32_t r, uint32_t split) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const WarpMergeSmem<HD, NW> ms(smem);
  float l = st.l_run;
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if ((lane & 3) == 0) {
    ms.m[warp * 8 + (lane >> 2)] = st.m_run;
    ms.l[warp * 8 + (lane >> 2)] = l;
  }
  StoreWarpAcc<HD, NW>(ms, st.acc, warp, lane);
  MergeStored<HD, NW>(p, ms, hpc, h0, r, split);
}

}  // namespace dev

template <FormatKind F, int HD>
__global__ void __launch_bounds__(kThreads, MmaGeo<F, HD>::kMinBlocks)
    DecodeMmaKernel(const DecodeParams p) {
  using Geo = MmaGeo<F, HD>;
  constexpr int S = Geo::kStages, T = kMmaTile;
  extern __shared__ __align__(16) uint8_t smem[];
  uint64_t* offs = reinterpret_cast<uint64_t*>(smem + Geo::kBody);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint32_t split = blockIdx.x, h = blockIdx.y, r = blockIdx.z;
  const PagedKvRow row = p.rows[r];
  uint32_t begin, end;
  dev::SplitRange(p, row.length, split, &begin, &end);
  const int n_tiles = end > begin ? static_cast<int>((end - begin + T - 1) / T) : 0;

  uint32_t qh[HD / 16][2], ql[HD / 16][2];
  dev::LoadQFragments<Geo::kBf16, HD>(p, r, h, lane, qh, ql);

  const uint8_t* kb = p.k_base + static_cast<size_t>(h) * p.k_head_stride;
  const uint8_t* vb = p.v_base + static_cast<size_t>(h) * p.v_head_stride;
  auto compute_offsets = [&](int tile) {  // threads 0 .. T-1
    const uint32_t t = begin + tile * T + tid;
    uint64_t ko = 0, vo = 0;
    if (t < end) {
      ko = dev::TokenOffset(p, row, t, p.k_token_stride);
      vo = dev::TokenOffset(p, row, t, p.v_token_stride);
    }
    uint64_t* o = offs + (tile & 1) * 2 * T;
    o[tid] = ko;
    o[T + tid] = vo;
  };
  auto issue = [&](int tile) {
    const uint32_t t0 = begin + tile * T;
    const uint64_t* o = offs + (tile & 1) * 2 * T;
    uint8_t* sb = smem + (tile % S) * Geo::kStageBytes;
    if constexpr (Geo::kQuadIssue) {
      // A quad of lanes per row (rows 0-63 K, 64-127 V; a thread takes 4 rows), lane c of the
      // quad pieces c, c + 4, ...: one offset load per row, few live addresses.
      static_assert(2 * T == 4 * (kThreads / 4), "four rows per quad");
      constexpr int kPerLane = (Geo::kPieces + 3) / 4;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int i = (tid >> 2) + (kThreads / 4) * k;
        const int kv = i >= T, tok = i & (T - 1);
        const uint8_t* src = (kv ? vb : kb) + o[i];
        uint8_t* dst = sb + i * Geo::kRawPitch;
        const bool valid = t0 + tok < end;
#pragma unroll
        for (int jj = 0; jj < kPerLane; ++jj) {
          const int j = (tid & 3) + 4 * jj;
          if (Geo::kPieces % 4 == 0 || j < Geo::kPieces) {
            if (valid) {
              dev::CpAsync<Geo::kCopy>(dst + j * Geo::kCopy, src + j * Geo::kCopy);
            } else {
              dev::CpAsyncZero<Geo::kCopy>(dst + j * Geo::kCopy, kb);
            }
          }
        }
      }
    } else {
      // Flat: consecutive threads take consecutive pieces of the tile's 128 rows.
#pragma unroll
      for (int n = 0; n < 2 * T * Geo::kPieces / kThreads; ++n) {
        const int pc = tid + n * kThreads;
        const int i = pc / Geo::kPieces, j = pc - i * Geo::kPieces;
        const int kv = i >= T, tok = i & (T - 1);
        uint8_t* dst = sb + i * Geo::kRawPitch + j * Geo::kCopy;
        if (t0 + tok < end) {
          dev::CpAsync<Geo::kCopy>(dst, (kv ? vb : kb) + o[i] + j * Geo::kCopy);
        } else {
          dev::CpAsyncZero<Geo::kCopy>(dst, kb);
        }
      }
    }
  };

  dev::MmaState<HD> st;
  st.Clear();
  dev::StagedTiles<S, T>(n_tiles, tid, compute_offsets, issue, [&](int it) {
    const uint32_t wt0 = begin + it * T + warp * 16;
    if (wt0 >= end) return;
    const uint8_t* sraw = smem + (it % S) * Geo::kStageBytes + warp * 16 * Geo::kRawPitch;
    dev::MmaUnit<F, HD, Geo::kRawPitch>(sraw, sraw + T * Geo::kRawPitch, wt0, end, qh, ql,
                                        p.softcap, lane, st);
  });
  dev::MergeWarpsAndStore<HD, kThreads / 32>(p, smem, st, 1, h, r, split);
}

template <FormatKind F, int HD>
Status LaunchDecodeMma(const DecodeParams& p, uint32_t n_rows, uint32_t n_kv_heads,
                       cudaStream_t stream) {
  constexpr int smem = MmaGeo<F, HD>::kSmem;
  static bool attr_set = false;
  if (!attr_set) {
    KVTIER_CUDA_RETURN(cudaFuncSetAttribute(DecodeMmaKernel<F, HD>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    attr_set = true;
  }
  const dim3 grid(p.n_splits, n_kv_heads, n_rows);
  DecodeMmaKernel<F, HD><<<grid, kThreads, smem, stream>>>(p);
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

template <FormatKind F, int HD>
int DecodeMmaOccupancy() {
  static int cached = 0;
  if (cached > 0) return cached;
  constexpr int smem = MmaGeo<F, HD>::kSmem;
  cudaFuncSetAttribute(DecodeMmaKernel<F, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, DecodeMmaKernel<F, HD>, kThreads, smem) !=
      cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  cached = n > 0 ? n : 1;
  return cached;
}

// Dispatch on head_dim (64, 128, 256); group 1..8 at run time.
#define KVTIER_DEFINE_DECODE_MMA_LAUNCHER(NAME, KIND)                                        \
  Status NAME(const DecodeParams& p, int hd, uint32_t n_rows, uint32_t kvh, cudaStream_t s,  \
              int* occupancy) {                                                              \
    switch (hd) {                                                                            \
      case 64: return occupancy ? (*occupancy = DecodeMmaOccupancy<KIND, 64>(), Status::OK()) : LaunchDecodeMma<KIND, 64>(p, n_rows, kvh, s); \
      case 128: return occupancy ? (*occupancy = DecodeMmaOccupancy<KIND, 128>(), Status::OK()) : LaunchDecodeMma<KIND, 128>(p, n_rows, kvh, s); \
      case 256: return occupancy ? (*occupancy = DecodeMmaOccupancy<KIND, 256>(), Status::OK()) : LaunchDecodeMma<KIND, 256>(p, n_rows, kvh, s); \
      default: break;                                                                        \
    }                                                                                        \
    return Status::Unimplemented("CUDA decode attention: head_dim " + std::to_string(hd) +   \
                                 " (64, 128, 256)");                                          \
  }

Status LaunchDecodeMmaF16(const DecodeParams& p, int hd, uint32_t n_rows, uint32_t kvh,
                          cudaStream_t s, int* occupancy);
Status LaunchDecodeMmaBF16(const DecodeParams& p, int hd, uint32_t n_rows, uint32_t kvh,
                           cudaStream_t s, int* occupancy);
Status LaunchDecodeMmaQ8_0(const DecodeParams& p, int hd, uint32_t n_rows, uint32_t kvh,
                           cudaStream_t s, int* occupancy);
Status LaunchDecodeMmaQ4_0(const DecodeParams& p, int hd, uint32_t n_rows, uint32_t kvh,
                           cudaStream_t s, int* occupancy);

}  // namespace kvtier::cuda
