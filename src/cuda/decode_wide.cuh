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
// w / HPC + 8 / HPC, ... (kUnits of them):
//
//   S [16 tokens x 8 heads] = K . Q^T   A = K rows (f16/bf16 by ldmatrix; q8_0/q4_0 codes as
//                                       stored, int8 mma.m16n8k32; rot4 codes as int8 levels
//                                       by prmt table lookups), B = Q (hi + lo halves, or two
//                                       int8 planes)
//   O^T [d x 8 heads]      += V^T . P   B = P via movmatrix (quantized V: times each block's
//                                       d); A = V by ldmatrix.trans (f16/bf16) or by byte
//                                       permutes of token pairs (q8_0/q4_0 codes, rot4 f16
//                                       levels from a shared byte -> level pair table)
//
// with one online-softmax step per warp per tile. Error bounds as the per-head kernel's (Q's
// int8 planes keep 2^-16 of its largest |q|, finer than the per-head kernel's one f16). The
// warps of a head merge at the end (dev::MergeWarpsAndStoreT); splits merge by log-sum-exp as
// for the other kernels. Used where HPC * row_bytes is a multiple of 16, K and V share token
// strides, heads are packed, at least 2 stages fit in shared memory and the call has >= 4
// (row, KV-head group) items (decode.cu decides). Kernels only; the launchers cache their
// attributes and occupancy per instantiation (set once, idempotent).
#pragma once

#include "cuda/decode_mma.cuh"
#include "cuda/rot_lookup.cuh"

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
#define KVTIER_CUDA_WIDE_Q4_STAGES 3
#endif
#ifndef KVTIER_CUDA_WIDE_Q4_MIN_BLOCKS
#define KVTIER_CUDA_WIDE_Q4_MIN_BLOCKS 2
#endif
#ifndef KVTIER_CUDA_WIDE_ROT_MIN_BLOCKS
#define KVTIER_CUDA_WIDE_ROT_MIN_BLOCKS 2
#endif
#ifndef KVTIER_CUDA_WIDE_ROT_STAGES
#define KVTIER_CUDA_WIDE_ROT_STAGES KVTIER_CUDA_WIDE_Q4_STAGES
#endif
// rot4 V's byte -> level pair table in shared memory, this many copies side by side (lane l
// reads copy l % copies: fewer bank conflicts between the lanes' random bytes).
#ifndef KVTIER_CUDA_ROT_LUT_COPIES
#define KVTIER_CUDA_ROT_LUT_COPIES 1
#endif
#ifndef KVTIER_CUDA_WIDE_PLAIN_UNITS
#define KVTIER_CUDA_WIDE_PLAIN_UNITS 1
#endif
#ifndef KVTIER_CUDA_WIDE_Q8_UNITS
#define KVTIER_CUDA_WIDE_Q8_UNITS 2
#endif
#ifndef KVTIER_CUDA_WIDE_Q4_UNITS
#define KVTIER_CUDA_WIDE_Q4_UNITS 2
#endif

// V of q8_0 / q4_0: token pairs joined by byte permutes straight into V^T's fragments (1), or
// f16 rows transposed by movmatrix (0, dev::MmaPV).
#ifndef KVTIER_CUDA_WIDE_V_PAIRS
#define KVTIER_CUDA_WIDE_V_PAIRS 1
#endif

// q8_0 / q4_0 / rot4 V: each 32-value block's scales d folded into P (2 multiplies per block
// and lane) instead of into every V value (8) (1), or V as f16(code * d) (0).
#ifndef KVTIER_CUDA_WIDE_P_SCALED
#define KVTIER_CUDA_WIDE_P_SCALED 1
#endif

// rot4 K: the int8 levels' rounding residual (1/256 steps) through two more lookups and two
// more int8 mma against Q's high plane (1), or the 8-bit levels alone (0).
#ifndef KVTIER_CUDA_ROT_K16
#define KVTIER_CUDA_ROT_K16 1
#endif

// One online-softmax step per tile's kUnits units of a warp (1) or one per 16 tokens (0).
#ifndef KVTIER_CUDA_WIDE_FUSED_SOFTMAX
#define KVTIER_CUDA_WIDE_FUSED_SOFTMAX 1
#endif

constexpr int kWideWarps = 8;
constexpr int kWideThreads = 32 * kWideWarps;
constexpr int kSmemLimit = 227 * 1024;  // per thread block, sm_80 / sm_90

// ST: the stage count (0: the format's default knob).
template <FormatKind F, int HD, int HPC, int ST = 0>
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
  static constexpr int kWant = ST > 0 ? ST
                              : kPlain ? KVTIER_CUDA_WIDE_PLAIN_STAGES
                              : F == FormatKind::kQ8_0 ? KVTIER_CUDA_WIDE_Q8_STAGES
                              : F == FormatKind::kRot  ? KVTIER_CUDA_WIDE_ROT_STAGES
                                                       : KVTIER_CUDA_WIDE_Q4_STAGES;
  // rot4: V's byte -> (level of the low nibble, level of the high nibble) f16 pairs.
  static constexpr int kLutBytes = F == FormatKind::kRot ? 256 * 4 * KVTIER_CUDA_ROT_LUT_COPIES : 0;
  static constexpr int kFit = (kSmemLimit - kOffsBytes - kLutBytes) / kStageBytes;
  static constexpr int kStages = kWant < kFit ? kWant : kFit;
  static constexpr int kLoop = kStages * kStageBytes;
  static constexpr int kBody = kLoop > kMerge ? kLoop : kMerge;
  static constexpr int kSmem = kBody + kOffsBytes + kLutBytes;
  static constexpr bool kSupported =
      kTokenBytes % 16 == 0 && kStages >= 2 && kSmem <= kSmemLimit && kTokens <= kWideThreads;
  // Thread blocks per SM the registers must allow: q8_0 spilled at two (128 registers) and ran
  // 25% slower than one uncapped block; q4_0 ran 15% faster at two (docs/results/cuda.md).
  static constexpr int kWantBlocks = F == FormatKind::kQ4_0 ? KVTIER_CUDA_WIDE_Q4_MIN_BLOCKS
                                     : F == FormatKind::kRot ? KVTIER_CUDA_WIDE_ROT_MIN_BLOCKS
                                                             : 1;
  static constexpr int kMinBlocks =
      kWantBlocks == 2 && 2 * (kSmem + 1024) <= 228 * 1024 ? 2 : 1;
};

namespace dev {

// d += a . b on int8 tensor cores (m16n8k32, s32 accumulators); A s8, or u8 when AU.
template <bool AU>
__device__ __forceinline__ void MmaI8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                      uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (AU) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// The transposed q.k of the all-heads kernel, S [16 tokens x 8 heads] = K . Q^T: K rows are the
// A operand, so all 16 rows of the tensor-core tile are used and the scores land as
// (token quad (+8), heads 2c4 + {0, 1}). For q8_0 / q4_0 the A fragments are the stored codes
// themselves (int8 mma; q4_0 nibbles as u8 0..15, the -8 folded into the accumulator's start)
// and Q enters as two int8 planes, Q ~ sq * (256 hi + lo) with |256 hi + lo| <= 32000 per head,
// so q.k is exact in int32 up to Q's rounding (2^-16 of the head's largest |q|).
//
// Which head dim feeds k = 4c4 + j (second = 0) or 16 + 4c4 + j (second = 1) of 32-value block
// `blk`: the lane reads whole aligned 32-bit words of the row where it can. A 34-byte q8_0 block
// or an 18-byte q4_0 block that starts 4-byte aligned (even blocks; a 2-byte d first) has its
// codes at byte 2 mod 4: lanes 0-2 take words 1-3 (q4_0) / 1-3 and 5-7 (q8_0) of it, lane 3 the
// block's first two and last two code bytes, joined by one byte permute.
template <FormatKind F>
__device__ __forceinline__ int KDim(int blk, int c4, int j, int second) {
  int d;
  if (blk % 2 == 1) {
    d = 4 * c4 + j + 16 * second;
  } else if constexpr (F == FormatKind::kQ8_0) {
    d = second == 0 ? 4 * c4 + 2 + j : (c4 < 3 ? 18 + 4 * c4 + j : (j < 2 ? j : 28 + j));
  } else {
    d = (c4 < 3 ? 4 * c4 + 2 + j : (j < 2 ? j : 12 + j)) + 16 * second;
  }
  return 32 * blk + d;
}

// The head dim of Q's element (blk, c4, j, second) (KDim's): rot4 rows hold value i in
// nibble i % 2 of code byte i / 2, and QKT feeds k = 4c4 + j from nibble j of the lane's code
// word (bytes KDim's q4_0 byte positions), k = 16 + 4c4 + j from nibble 4 + j.
template <FormatKind F>
__device__ __forceinline__ int QDim(int blk, int c4, int j, int second) {
  if constexpr (F == FormatKind::kRot) {
    const int cb = KDim<FormatKind::kQ4_0>(blk, c4, 2 * second + (j >> 1), 0) - 32 * blk;
    return 32 * blk + 2 * cb + (j & 1);
  } else {
    return KDim<F>(blk, c4, j, second);
  }
}

// Q of KV head h as the B operand of S = K . Q^T, for head quad of the group (the lane's n).
template <FormatKind F, int HD>
struct QOperand {
  static constexpr bool kPlain = F == FormatKind::kF16 || F == FormatKind::kBF16;
  // f16 / bf16: hi / lo pairs, dims 16kk + 2c4 + {0, 1} and + 8 (LoadQFragments).
  uint32_t qh[kPlain ? HD / 16 : 1][2], ql[kPlain ? HD / 16 : 1][2];
  // q8_0 / q4_0: [block][plane hi / lo][b0 / b1], 4 codes each (KDim's dims).
  uint32_t qi[kPlain ? 1 : HD / 32][2][2];
  int qc[kPlain ? 1 : HD / 32][2];  // the accumulator's start for heads 2c4 + {0, 1}
  float sq[2];                       // Q's scale for heads 2c4 + {0, 1}
};

template <FormatKind F, int HD>
__device__ __forceinline__ void LoadQOperand(const DecodeParams& p, uint32_t r, uint32_t h,
                                             int lane, QOperand<F, HD>& q) {
  if constexpr (QOperand<F, HD>::kPlain) {
    LoadQFragments<F == FormatKind::kBF16, HD>(p, r, h, lane, q.qh, q.ql);
    q.sq[0] = q.sq[1] = 1.0f;
  } else {
    const int quad = lane >> 2, c4 = lane & 3;
    const float qscale = p.softcap > 0.0f ? p.scale : p.scale * kLog2e;
    const bool on = quad < static_cast<int>(p.group);
    const float* qp =
        p.q + (static_cast<size_t>(r) * p.n_heads + h * p.group + (on ? quad : 0)) * HD;
    float x[HD / 32][8];
    float amax = 0.0f;
#pragma unroll
    for (int blk = 0; blk < HD / 32; ++blk) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        x[blk][i] = on ? qp[QDim<F>(blk, c4, i & 3, i >> 2)] * qscale : 0.0f;
        amax = fmaxf(amax, fabsf(x[blk][i]));
      }
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const float inv = amax > 0.0f ? 32000.0f / amax : 0.0f;
    // rot4: K enters as round(kRotK8Scale * level) per block scale.
    const float sq = F == FormatKind::kRot ? amax / (32000.0f * kRotK8Scale) : amax / 32000.0f;
#pragma unroll
    for (int blk = 0; blk < HD / 32; ++blk) {
      int sum = 0;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t hw = 0, lw = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int Q = __float2int_rn(x[blk][4 * half + j] * inv);
          const int hi = (Q + 128) >> 8, lo = Q - 256 * hi;
          sum += Q;
          hw |= static_cast<uint32_t>(hi & 0xff) << (8 * j);
          lw |= static_cast<uint32_t>(lo & 0xff) << (8 * j);
        }
        q.qi[blk][0][half] = hw;
        q.qi[blk][1][half] = lw;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      // q4_0 codes are stored as c + 8: sum q (c - 8) = sum q c - 8 sum q.
      const int corr = F == FormatKind::kQ4_0 ? -8 * sum : 0;
      q.qc[blk][0] = __shfl_sync(0xffffffffu, corr, 8 * c4);
      q.qc[blk][1] = __shfl_sync(0xffffffffu, corr, 8 * c4 + 4);
    }
    q.sq[0] = __shfl_sync(0xffffffffu, sq, 8 * c4);
    q.sq[1] = __shfl_sync(0xffffffffu, sq, 8 * c4 + 4);
  }
}

// V^T . P for q8_0 / q4_0 without transposes: the A fragment of m16n8k16 holds, per register,
// one head dim of two tokens (k = 2c4 + {0, 1}, or + 8), so a lane loads its four tokens'
// codes of the same dims and joins each token pair with byte permutes into exact f16 codes
// (0x64 high bytes: 1024 + u8), then f16(code * d) as the per-head kernel rounds it. O^T's
// rows are then in VPairDims order: for 32-value block b, lane quad g takes q8_0 code bytes
// VDim8(b, g, 0..3) (one aligned word where the block allows) or the q4_0 byte pair 2g, 2g + 1
// (dims 2g, 2g + 1, 16 + 2g, 17 + 2g).
template <FormatKind F>
struct VPairDims {
  // Within 32-value block blk, byte j of quad g's q8_0 word.
  static __device__ __forceinline__ int Q8(int blk, int g, int j) {
    if (blk % 2 == 1) return 4 * g + j;
    return g < 7 ? 4 * g + 2 + j : (j < 2 ? j : 28 + j);
  }
  // Row quad + 8r of m-tile m = 2 blk + e.
  static __device__ __forceinline__ int Dim(int m, int r, int g) {
    const int blk = m >> 1, e = m & 1;
    if constexpr (F == FormatKind::kQ8_0) {
      return 32 * blk + Q8(blk, g, 2 * e + r);
    } else if constexpr (F == FormatKind::kRot) {
      // Code bytes 2g (r = 0), 2g + 1 (r = 1); nibble e: value 2 (2g + r) + e.
      return 32 * blk + 4 * g + 2 * r + e;
    } else {
      return 32 * blk + 16 * e + 2 * g + r;
    }
  }
};

inline constexpr float kPScale = 256.0f;

template <FormatKind F, int HD, int PITCH>
__device__ __forceinline__ void MmaPVPairs(const uint8_t* vr, uint32_t bh0, uint32_t bh1,
                                           int lane, float (&acc)[HD / 16][4],
                                           const uint32_t* lut) {
  const int g = lane >> 2, c4 = lane & 3;
  // The lane's tokens: 2c4, 2c4 + 1 (registers a0 / a1), 8 + 2c4, 9 + 2c4 (a2 / a3).
  const uint8_t* rows[4] = {vr + (2 * c4) * PITCH, vr + (2 * c4 + 1) * PITCH,
                            vr + (2 * c4 + 8) * PITCH, vr + (2 * c4 + 9) * PITCH};
  const __half2 k1152 = __floats2half2_rn(1152.0f, 1152.0f);
  const __half2 k1032 = __floats2half2_rn(1032.0f, 1032.0f);
  // P-scaled: V's codes (levels) stay unscaled and each block's d multiplies P (B: tokens
  // 2c4 + {0, 1} in b0, 8 + 2c4 + {0, 1} in b1, the lane's own V tokens), P taken times
  // kPScale first (exact) so that P d stays clear of f16's subnormals; the accumulators are
  // divided by it when stored (MergeWarpsAndStoreT).
  [[maybe_unused]] __half2 ps0 = *reinterpret_cast<const __half2*>(&bh0);
  [[maybe_unused]] __half2 ps1 = *reinterpret_cast<const __half2*>(&bh1);
  if constexpr (KVTIER_CUDA_WIDE_P_SCALED) {
    const __half2 k = __floats2half2_rn(kPScale, kPScale);
    ps0 = __hmul2(ps0, k);
    ps1 = __hmul2(ps1, k);
  }
  auto ScaleV = [](__half2 x, __half2 d) {
    if constexpr (KVTIER_CUDA_WIDE_P_SCALED) {
      return x;
    } else {
      return __hmul2(x, d);
    }
  };
#pragma unroll
  for (int blk = 0; blk < HD / 32; ++blk) {
    __half2 v[2][4];  // [token pair][slot (e, r) = 2e + r]
    [[maybe_unused]] __half2 dt[2];  // the token pairs' d
#pragma unroll
    for (int tp = 0; tp < 2; ++tp) {
      uint32_t w[2];
      __half2 d2;
      if constexpr (F == FormatKind::kQ8_0) {
        const int pb = (blk >> 1) * 17;  // the block pair's first word
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const uint32_t* r32 = reinterpret_cast<const uint32_t*>(rows[2 * tp + i]);
          if (blk % 2 == 1) {
            w[i] = r32[pb + 9 + g];
          } else {
            // Quads 0-6: word 1 + g; quad 7: word 0's high half and word 8's low half.
            const uint32_t lo = r32[pb + (g < 7 ? 1 + g : 0)], hi = r32[pb + (g < 7 ? 2 + g : 8)];
            w[i] = __byte_perm(lo, hi, g < 7 ? 0x3210u : 0x5432u);
          }
          w[i] ^= 0x80808080u;  // u8 = code + 128
        }
        const uint16_t da = Ld16(rows[2 * tp] + 34 * blk), db = Ld16(rows[2 * tp + 1] + 34 * blk);
        d2 = __halves2half2(__ushort_as_half(da), __ushort_as_half(db));
        dt[tp] = d2;
        const uint32_t plo = __byte_perm(w[0], w[1], 0x5140u);  // bytes 0, 1 of both tokens
        const uint32_t phi = __byte_perm(w[0], w[1], 0x7362u);  // bytes 2, 3
        const uint32_t u[4] = {__byte_perm(plo, 0x64646464u, 0x4140u),
                               __byte_perm(plo, 0x64646464u, 0x4342u),
                               __byte_perm(phi, 0x64646464u, 0x4140u),
                               __byte_perm(phi, 0x64646464u, 0x4342u)};
#pragma unroll
        for (int sl = 0; sl < 4; ++sl) {
          v[tp][sl] = ScaleV(__hsub2(*reinterpret_cast<const __half2*>(&u[sl]), k1152), d2);
        }
      } else if constexpr (F == FormatKind::kRot) {
        // Code bytes 2g, 2g + 1 of both tokens through the shared byte -> f16 level pair
        // table, then each dim's pair of tokens joined: slot (e, r) = value 2 (2g + r) + e.
        const uint32_t ua = Ld16(rows[2 * tp] + 18 * blk + 2 + 2 * g);
        const uint32_t ub = Ld16(rows[2 * tp + 1] + 18 * blk + 2 + 2 * g);
        const uint16_t da = Ld16(rows[2 * tp] + 18 * blk), db = Ld16(rows[2 * tp + 1] + 18 * blk);
        d2 = __halves2half2(__ushort_as_half(da), __ushort_as_half(db));
        dt[tp] = d2;
        constexpr uint32_t R = KVTIER_CUDA_ROT_LUT_COPIES;  // lut: the lane's copy
        const uint32_t a0 = lut[(ua & 0xffu) * R], a1 = lut[(ua >> 8) * R];
        const uint32_t b0 = lut[(ub & 0xffu) * R], b1 = lut[(ub >> 8) * R];
        const uint32_t u[4] = {__byte_perm(a0, b0, 0x5410u), __byte_perm(a1, b1, 0x5410u),
                               __byte_perm(a0, b0, 0x7632u), __byte_perm(a1, b1, 0x7632u)};
#pragma unroll
        for (int sl = 0; sl < 4; ++sl) {
          v[tp][sl] = ScaleV(*reinterpret_cast<const __half2*>(&u[sl]), d2);
        }
      } else {
        const uint32_t ua = Ld16(rows[2 * tp] + 18 * blk + 2 + 2 * g);
        const uint32_t ub = Ld16(rows[2 * tp + 1] + 18 * blk + 2 + 2 * g);
        const uint16_t da = Ld16(rows[2 * tp] + 18 * blk), db = Ld16(rows[2 * tp + 1] + 18 * blk);
        d2 = __halves2half2(__ushort_as_half(da), __ushort_as_half(db));
        dt[tp] = d2;
        const uint32_t t = __byte_perm(ua, ub, 0x5410u);  // [a.b0, a.b1, b.b0, b.b1]
        // Slots (e, r): dim 16e + 2g + r = nibble e of byte r.
        const uint32_t u[4] = {(t & 0x000f000fu) | 0x64006400u,
                               ((t >> 8) & 0x000f000fu) | 0x64006400u,
                               ((t >> 4) & 0x000f000fu) | 0x64006400u,
                               ((t >> 12) & 0x000f000fu) | 0x64006400u};
#pragma unroll
        for (int sl = 0; sl < 4; ++sl) {
          v[tp][sl] = ScaleV(__hsub2(*reinterpret_cast<const __half2*>(&u[sl]), k1032), d2);
        }
      }
    }
    uint32_t b0 = bh0, b1 = bh1;
    if constexpr (KVTIER_CUDA_WIDE_P_SCALED) {
      const __half2 p0 = __hmul2(ps0, dt[0]), p1 = __hmul2(ps1, dt[1]);
      b0 = *reinterpret_cast<const uint32_t*>(&p0);
      b1 = *reinterpret_cast<const uint32_t*>(&p1);
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      // a0: (row g, tokens 2c4 + {0, 1}), a1: row g + 8, a2 / a3: tokens 8 + 2c4 + {0, 1}.
      Mma<false>(acc[2 * blk + e], *reinterpret_cast<const uint32_t*>(&v[0][2 * e]),
                 *reinterpret_cast<const uint32_t*>(&v[0][2 * e + 1]),
                 *reinterpret_cast<const uint32_t*>(&v[1][2 * e]),
                 *reinterpret_cast<const uint32_t*>(&v[1][2 * e + 1]), b0, b1);
    }
  }
}

// The scores of 16 tokens of one KV head (token i's K row at kr + i * PITCH), S = K . Q^T:
// s[i] = token quad + 8 (i >> 1), head 2c4 + (i & 1), in log2 units (natural under a soft-cap).
template <FormatKind F, int HD, int PITCH>
__device__ __forceinline__ void QKT(const uint8_t* kr, const QOperand<F, HD>& q, int lane,
                                    float (&s)[4]) {
  constexpr bool kPlain = F == FormatKind::kF16 || F == FormatKind::kBF16;
  [[maybe_unused]] constexpr bool BF = F == FormatKind::kBF16;
  [[maybe_unused]] const int quad = lane >> 2, c4 = lane & 3;
#pragma unroll
  for (int i = 0; i < 4; ++i) s[i] = 0.0f;
  if constexpr (kPlain) {
    float sl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // ldmatrix (A, row major): lane l addresses row (l & 7) + 8 ((l >> 3) & 1), col 8 (l >> 4).
    const uint8_t* arow = kr + ((lane & 7) + 8 * ((lane >> 3) & 1)) * PITCH + (lane >> 4) * 16;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t a[4];
      LdMatrixX4(a, arow + 32 * kk);
      Mma<BF>(s, a[0], a[1], a[2], a[3], q.qh[kk][0], q.qh[kk][1]);
      Mma<BF>(sl, a[0], a[1], a[2], a[3], q.ql[kk][0], q.ql[kk][1]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) s[i] += sl[i];
  } else {
    constexpr bool Q8 = F == FormatKind::kQ8_0;
    constexpr int kPairWords = Q8 ? 17 : 9;  // two blocks: 68 or 36 bytes
    constexpr int kMid = Q8 ? 8 : 4;         // the word holding the odd block's d
    const uint32_t* r0 = reinterpret_cast<const uint32_t*>(kr + quad * PITCH);
    const uint32_t* r1 = reinterpret_cast<const uint32_t*>(kr + (quad + 8) * PITCH);
    const uint32_t sel = c4 == 3 ? 0x5432u : 0x3210u;
#pragma unroll
    for (int pair = 0; pair < HD / 64; ++pair) {
      const int pb = pair * kPairWords;
      const uint32_t wb0 = r0[pb], wb1 = r1[pb], wm0 = r0[pb + kMid], wm1 = r1[pb + kMid];
      // Even block: codes at byte 2 mod 4.
      uint32_t a[4];
      uint32_t w0 = 0, w1 = 0;  // q4_0 / rot4: the lane's code words of rows quad, quad + 8
      if constexpr (Q8) {
        a[0] = r0[pb + 1 + c4];
        a[1] = r1[pb + 1 + c4];
        // lanes 0-2: words 5-7; lane 3: (word 0's high half, word 8's low half).
        const uint32_t x0 = c4 == 3 ? wb0 : r0[pb + 5 + c4];
        const uint32_t x1 = c4 == 3 ? wb1 : r1[pb + 5 + c4];
        a[2] = __byte_perm(x0, wm0, sel);
        a[3] = __byte_perm(x1, wm1, sel);
      } else {
        const uint32_t x0 = c4 == 3 ? wb0 : r0[pb + 1 + c4];
        const uint32_t x1 = c4 == 3 ? wb1 : r1[pb + 1 + c4];
        w0 = __byte_perm(x0, wm0, sel);
        w1 = __byte_perm(x1, wm1, sel);
      }
#pragma unroll
      for (int odd = 0; odd < 2; ++odd) {
        const int blk = 2 * pair + odd;
        if (odd == 1) {
          if constexpr (Q8) {
            a[0] = r0[pb + 9 + c4];
            a[1] = r1[pb + 9 + c4];
            a[2] = r0[pb + 13 + c4];
            a[3] = r1[pb + 13 + c4];
          } else {
            w0 = r0[pb + 5 + c4];
            w1 = r1[pb + 5 + c4];
          }
        }
        int hi[4] = {0, 0, 0, 0};
        int lo[4] = {q.qc[blk][0], q.qc[blk][1], q.qc[blk][0], q.qc[blk][1]};
        if constexpr (F == FormatKind::kRot) {
          // k = 4c4 + j: nibble j of the word (its low half), k = 16 + 4c4 + j: nibble 4 + j.
          uint32_t xl[4], xh[4];
          RotK8Lookup(w0, &xl[0], &xh[0]);
          RotK8Lookup(w1, &xl[1], &xh[1]);
          RotK8Lookup(w0 >> 16, &xl[2], &xh[2]);
          RotK8Lookup(w1 >> 16, &xl[3], &xh[3]);
          MmaI8<false>(hi, xl[0], xl[1], xl[2], xl[3], q.qi[blk][0][0], q.qi[blk][0][1]);
          MmaI8<false>(hi, xh[0], xh[1], xh[2], xh[3], q.qi[blk][0][0], q.qi[blk][0][1]);
          MmaI8<false>(lo, xl[0], xl[1], xl[2], xl[3], q.qi[blk][1][0], q.qi[blk][1][1]);
          MmaI8<false>(lo, xh[0], xh[1], xh[2], xh[3], q.qi[blk][1][0], q.qi[blk][1][1]);
          if constexpr (KVTIER_CUDA_ROT_K16) {
            // K = k8 + r / 256: (256 qh + ql) K ~ 256 qh k8 + ql k8 + qh r (the ql r / 256
            // term is below Q's own rounding).
            RotR8Lookup(w0, &xl[0], &xh[0]);
            RotR8Lookup(w1, &xl[1], &xh[1]);
            RotR8Lookup(w0 >> 16, &xl[2], &xh[2]);
            RotR8Lookup(w1 >> 16, &xl[3], &xh[3]);
            MmaI8<false>(lo, xl[0], xl[1], xl[2], xl[3], q.qi[blk][0][0], q.qi[blk][0][1]);
            MmaI8<false>(lo, xh[0], xh[1], xh[2], xh[3], q.qi[blk][0][0], q.qi[blk][0][1]);
          }
        } else {
          if constexpr (!Q8) {
            a[0] = w0 & 0x0f0f0f0fu;
            a[1] = w1 & 0x0f0f0f0fu;
            a[2] = (w0 >> 4) & 0x0f0f0f0fu;
            a[3] = (w1 >> 4) & 0x0f0f0f0fu;
          }
          MmaI8<!Q8>(hi, a[0], a[1], a[2], a[3], q.qi[blk][0][0], q.qi[blk][0][1]);
          MmaI8<!Q8>(lo, a[0], a[1], a[2], a[3], q.qi[blk][1][0], q.qi[blk][1][1]);
        }
        const float d0 = HalfBits(static_cast<uint16_t>(odd ? wm0 >> 16 : wb0));
        const float d1 = HalfBits(static_cast<uint16_t>(odd ? wm1 >> 16 : wb1));
        s[0] = fmaf(d0, static_cast<float>(hi[0] * 256 + lo[0]), s[0]);
        s[1] = fmaf(d0, static_cast<float>(hi[1] * 256 + lo[1]), s[1]);
        s[2] = fmaf(d1, static_cast<float>(hi[2] * 256 + lo[2]), s[2]);
        s[3] = fmaf(d1, static_cast<float>(hi[3] * 256 + lo[3]), s[3]);
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) s[i] *= q.sq[i & 1];
  }
}

// O^T += V^T . P for 16 tokens of one KV head (token i's V row at vr + i * PITCH); pe: P in
// QKT's layout.
template <FormatKind F, int HD, int PITCH>
__device__ __forceinline__ void PVT(const uint8_t* vr, const float (&pe)[4], int lane,
                                    float (&acc)[HD / 16][4], const uint32_t* lut) {
  constexpr bool kPlain = F == FormatKind::kF16 || F == FormatKind::kBF16;
  constexpr bool BF = F == FormatKind::kBF16;
  // P (tokens x heads) as the B operand of O^T += V^T . P: movmatrix turns (token, heads
  // 2c4 + {0, 1}) into (head quad, tokens 2c4 + {0, 1}).
  uint32_t h01, l01, h23, l23;
  Split<BF>(pe[0], pe[1], &h01, &l01);
  Split<BF>(pe[2], pe[3], &h23, &l23);
  const uint32_t bh0 = MovTrans(h01), bh1 = MovTrans(h23);
  uint32_t bl0 = 0, bl1 = 0;
  if constexpr (kPlain) {
    bl0 = MovTrans(l01);
    bl1 = MovTrans(l23);
  }
  if constexpr (!kPlain && (KVTIER_CUDA_WIDE_V_PAIRS || F == FormatKind::kRot)) {
    MmaPVPairs<F, HD, PITCH>(vr, bh0, bh1, lane, acc, lut);
  } else {
    MmaPV<F, HD, PITCH>(vr, bh0, bl0, bh1, bl1, lane, acc);
  }
}

// 16 tokens of one KV head (as MmaUnit): S = K . Q^T, online softmax, O^T += V^T . P.
template <FormatKind F, int HD, int PITCH>
__device__ __forceinline__ void MmaUnitT(const uint8_t* kr, const uint8_t* vr, uint32_t wt0,
                                         uint32_t end, const QOperand<F, HD>& q, float softcap,
                                         int lane, MmaStateT<HD>& st, const uint32_t* lut) {
  float s[1][4];
  const uint32_t w[1] = {wt0};
  QKT<F, HD, PITCH>(kr, q, lane, s[0]);
  SoftmaxT<1, HD>(s, w, end, softcap, lane, st);
  PVT<F, HD, PITCH>(vr, s[0], lane, st.acc, lut);
}

template <FormatKind F, int HD, int NW, bool kFuse>
__device__ __forceinline__ void MergeWarpsAndStoreT(const DecodeParams& p, uint8_t* smem,
                                                    const MmaStateT<HD>& st, int hpc,
                                                    uint32_t h0, uint32_t r, uint32_t split) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const WarpMergeSmem<HD, NW> ms(smem);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    float l = st.l_run[e];
    l += __shfl_xor_sync(0xffffffffu, l, 4);
    l += __shfl_xor_sync(0xffffffffu, l, 8);
    l += __shfl_xor_sync(0xffffffffu, l, 16);
    if (lane < 4) {
      ms.m[warp * 8 + 2 * lane + e] = st.m_run[e];
      ms.l[warp * 8 + 2 * lane + e] = l;
    }
  }
  constexpr bool kPairs = F != FormatKind::kF16 && F != FormatKind::kBF16 &&
                          (KVTIER_CUDA_WIDE_V_PAIRS || F == FormatKind::kRot);
  if constexpr (kPairs && KVTIER_CUDA_WIDE_P_SCALED) {
    float acc[HD / 16][4];
#pragma unroll
    for (int m = 0; m < HD / 16; ++m) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[m][i] = st.acc[m][i] * (1.0f / kPScale);
    }
    StoreWarpAcc<HD, NW, VPairDims<F>>(ms, acc, warp, lane);
  } else if constexpr (kPairs) {
    StoreWarpAcc<HD, NW, VPairDims<F>>(ms, st.acc, warp, lane);
  } else {
    StoreWarpAcc<HD, NW>(ms, st.acc, warp, lane);
  }
  MergeStored<HD, NW, kFuse>(p, ms, hpc, h0, r, split);
}

}  // namespace dev

template <FormatKind F, int HD, int HPC, int ST>
__global__ void __launch_bounds__(kWideThreads, WideGeo<F, HD, HPC, ST>::kMinBlocks)
    DecodeWideKernel(const DecodeParams p) {
  using Geo = WideGeo<F, HD, HPC, ST>;
  constexpr int S = Geo::kStages, T = Geo::kTokens, WPH = kWideWarps / HPC;
  extern __shared__ __align__(16) uint8_t smem[];
  uint64_t* offs = reinterpret_cast<uint64_t*>(smem + Geo::kBody);  // [2][T]
  // rot4: [256] f16 pairs (level of the low nibble, of the high nibble) per code byte.
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem + Geo::kBody + Geo::kOffsBytes);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if constexpr (F == FormatKind::kRot) {
    static_assert(kWideThreads == 256, "one table entry per thread");
    const __half2 e = __floats2half2_rn(p.rot_levels[tid & 15], p.rot_levels[tid >> 4]);
#pragma unroll
    for (int c = 0; c < KVTIER_CUDA_ROT_LUT_COPIES; ++c) {
      lut[tid * KVTIER_CUDA_ROT_LUT_COPIES + c] = *reinterpret_cast<const uint32_t*>(&e);
    }  // read after StagedTiles' barriers
    lut += lane % KVTIER_CUDA_ROT_LUT_COPIES;  // this lane's copy
  }
  const uint32_t split = blockIdx.x, h0 = blockIdx.y * HPC, r = blockIdx.z;
  const PagedKvRow row = p.rows[r];
  uint32_t begin, end;
  dev::SplitRange(p, row.length, split, &begin, &end);
  const int n_tiles = end > begin ? static_cast<int>((end - begin + T - 1) / T) : 0;
  const int hh = warp % HPC, sub = warp / HPC;

  dev::QOperand<F, HD> q;
  dev::LoadQOperand<F, HD>(p, r, h0 + hh, lane, q);

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

  dev::MmaStateT<HD> st;
  st.Clear();
  dev::StagedTiles<S, T>(n_tiles, tid, compute_offsets, issue, [&](int it) {
    const uint8_t* sraw = smem + (it % S) * Geo::kStageBytes;
    if constexpr (KVTIER_CUDA_WIDE_FUSED_SOFTMAX && Geo::kUnits > 1) {
      // The warp's kUnits units of the tile in one online-softmax step.
      constexpr int U = Geo::kUnits;
      float s[U][4] = {};
      uint32_t wt0[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int unit = sub + u * WPH;
        wt0[u] = begin + it * T + unit * 16;
        if (wt0[u] < end) {
          dev::QKT<F, HD, Geo::kPitch>(sraw + unit * 16 * Geo::kPitch + hh * Geo::kRowBytes, q,
                                       lane, s[u]);
        }
      }
      if (wt0[0] < end) {
        dev::SoftmaxT<U, HD>(s, wt0, end, p.softcap, lane, st);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (wt0[u] < end) {
            const int unit = sub + u * WPH;
            dev::PVT<F, HD, Geo::kPitch>(
                sraw + (T + unit * 16) * Geo::kPitch + hh * Geo::kRowBytes, s[u], lane, st.acc,
                lut);
          }
        }
      }
    } else {
#pragma unroll
      for (int u = 0; u < Geo::kUnits; ++u) {
        const int unit = sub + u * WPH;
        const uint32_t wt0 = begin + it * T + unit * 16;
        if (wt0 < end) {
          const uint8_t* kr = sraw + unit * 16 * Geo::kPitch + hh * Geo::kRowBytes;
          dev::MmaUnitT<F, HD, Geo::kPitch>(kr, kr + T * Geo::kPitch, wt0, end, q, p.softcap,
                                            lane, st, lut);
        }
      }
    }
  });
  dev::MergeWarpsAndStoreT<F, HD, kWideWarps, Geo::kMinBlocks == 1>(p, smem, st, HPC, h0, r,
                                                                     split);
}

template <FormatKind F, int HD, int HPC, int ST>
Status LaunchDecodeWide(const DecodeParams& p, uint32_t n_rows, uint32_t n_kv_heads,
                        cudaStream_t stream, int* occupancy) {
  using Geo = WideGeo<F, HD, HPC, ST>;
  if constexpr (!Geo::kSupported) {
    return Status::Unimplemented("CUDA decode attention: no all-heads kernel for this shape");
  } else {
    constexpr int smem = Geo::kSmem;
    static int occ = 0;  // thread blocks per SM; 0: attributes not set yet
    if (occ == 0) {
      KVTIER_CUDA_RETURN(cudaFuncSetAttribute(DecodeWideKernel<F, HD, HPC, ST>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      int n = 0;
      KVTIER_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &n, DecodeWideKernel<F, HD, HPC, ST>, kWideThreads, smem));
      occ = n > 0 ? n : 1;
    }
    if (occupancy) {
      *occupancy = occ;
      return Status::OK();
    }
    if (p.counters && (Geo::kMinBlocks != 1 || occ != 1)) {
      return Status::Internal("CUDA decode attention: fused split merge asked of a kernel "
                              "without it");
    }
    const dim3 grid(p.n_splits, n_kv_heads / HPC, n_rows);
    DecodeWideKernel<F, HD, HPC, ST><<<grid, kWideThreads, smem, stream>>>(p);
    KVTIER_CUDA_RETURN(cudaGetLastError());
    return Status::OK();
  }
}

// Variant 1: q4_0 at 4 KV heads per block with 2 stages (2 blocks per SM; from 4 rows, where
// it ran up to 1.2x faster than 3 stages: docs/results/cuda.md); elsewhere the same as 0.
template <FormatKind F, int HD, int HPC>
Status LaunchDecodeWideVariant(const DecodeParams& p, uint32_t n_rows, uint32_t n_kv_heads,
                               cudaStream_t stream, int* occupancy, int variant) {
  if constexpr (F == FormatKind::kQ4_0 && HPC == 4) {
    if (variant == 1) return LaunchDecodeWide<F, HD, HPC, 2>(p, n_rows, n_kv_heads, stream, occupancy);
  }
  return LaunchDecodeWide<F, HD, HPC, 0>(p, n_rows, n_kv_heads, stream, occupancy);
}

// Dispatch on head_dim (64, 128, 256) and KV heads per thread block (2, 4, 8) (the variant
// rides in hpc's bits 8 and up). With occupancy non-null, only reports thread blocks per SM
// (Unimplemented: no such kernel).
#define KVTIER_WIDE_CASE(KIND, HD, HPC)                                                   \
  case HD * 16 + HPC:                                                                     \
    return LaunchDecodeWideVariant<KIND, HD, HPC>(p, n_rows, kvh, s, occupancy, hpc >> 8);
#define KVTIER_DEFINE_DECODE_WIDE_LAUNCHER(NAME, KIND)                                     \
  Status NAME(const DecodeParams& p, int hd, int hpc, uint32_t n_rows, uint32_t kvh,       \
              cudaStream_t s, int* occupancy) {                                            \
    switch (hd * 16 + (hpc & 0xff)) {                                                      \
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
Status LaunchDecodeWideRot4(const DecodeParams& p, int hd, int hpc, uint32_t n_rows,
                            uint32_t kvh, cudaStream_t s, int* occupancy);

}  // namespace kvtier::cuda
