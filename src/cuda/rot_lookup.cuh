// rot4 (FormatKind::kRot, 4 bits) codes as int8 levels for the int8 tensor-core q.k of the
// all-heads decode kernel (decode_wide.cuh): the codebook of quant/rot.h scaled and rounded at
// compile time into prmt byte tables, and the lookups. Internal to src/cuda; pure device
// functions and constants.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "quant/rot.h"

namespace kvtier::cuda::dev {

// rot4 K codes as signed 8-bit fixed-point levels for the int8 q.k: round(kRotK8Scale *
// level) (quant/rot.h's codebook; at most 0.5 / 126 of the block scale off the level, finer
// than the CPU int8 path's 1 / 270). Two byte tables are read by prmt with the 4-bit codes
// themselves as selectors (the low 16 bits of a code word: 4 codes). Codes 0-7 (the negative
// levels) come from the low table; for codes 8-15 the selector's top bit makes prmt replicate
// the sign of a negative byte, so those lanes read -1. Codes 8-15 come from the high table with
// the selectors' top bits flipped (codes 0-7 then replicate the sign of a non-negative byte:
// 0), and the high table holds the level + 1: the two lookups sum to the level exactly, so
// both go through the same int8 mma accumulators.
inline constexpr int kRotK8Scale = 126;
constexpr int RotK8(int c) {
  const float x = kRotLevels4[c] * static_cast<float>(kRotK8Scale);
  const int r = static_cast<int>(x + (x >= 0.0f ? 0.5f : -0.5f));
  return c < 8 ? r : r + 1;
}
constexpr uint32_t RotK8Word(int c0) {
  uint32_t w = 0;
  for (int i = 0; i < 4; ++i) w |= static_cast<uint32_t>(RotK8(c0 + i) & 0xff) << (8 * i);
  return w;
}
constexpr bool RotK8TablesValid() {
  for (int c = 0; c < 8; ++c) {
    if (RotK8(c) < -128 || RotK8(c) > -1 || RotK8(c + 8) < 0 || RotK8(c + 8) > 127) return false;
  }
  return true;
}
static_assert(RotK8TablesValid(), "rot4 int8 levels: low table negative, high table 0..127");
inline constexpr uint32_t kRotK8Lo0 = RotK8Word(0), kRotK8Lo1 = RotK8Word(4);
inline constexpr uint32_t kRotK8Hi0 = RotK8Word(8), kRotK8Hi1 = RotK8Word(12);

// The residual of each level's int8 rounding in 1/256 steps, r = round(256 (126 level - k8)),
// as a low and a high prmt table read like the levels': a code's two lookups sum to r. Here
// both tables' entries may be negative, so each lookup's stray byte (the sign of the entry at
// the code's position in the other half: -1 or 0) is known per code and folded into the other
// table's entry (RotR8Tables solves the pair of entries per position).
constexpr int RotR8(int c) {
  const float x = kRotLevels4[c] * static_cast<float>(kRotK8Scale);
  const int k = RotK8(c) - (c < 8 ? 0 : 1);
  const float r = (x - static_cast<float>(k)) * 256.0f;
  const int ri = static_cast<int>(r + (r >= 0.0f ? 0.5f : -0.5f));
  return ri < -127 ? -127 : (ri > 126 ? 126 : ri);
}
struct RotR8Tables {
  int lo[8] = {}, hi[8] = {};
  bool ok = true;
  constexpr RotR8Tables() {
    for (int c = 0; c < 8; ++c) {
      int a = RotR8(c), b = RotR8(c + 8);
      for (int it = 0; it < 4; ++it) {
        a = RotR8(c) + (b < 0 ? 1 : 0);
        b = RotR8(c + 8) + (a < 0 ? 1 : 0);
      }
      ok = ok && a == RotR8(c) + (b < 0 ? 1 : 0) && b == RotR8(c + 8) + (a < 0 ? 1 : 0) &&
           a >= -128 && a <= 127 && b >= -128 && b <= 127;
      lo[c] = a;
      hi[c] = b;
    }
  }
  constexpr uint32_t Word(bool high, int c0) const {
    uint32_t w = 0;
    for (int i = 0; i < 4; ++i) w |= static_cast<uint32_t>((high ? hi : lo)[c0 + i] & 0xff) << (8 * i);
    return w;
  }
};
inline constexpr RotR8Tables kRotR8{};
static_assert(kRotR8.ok, "rot4 residual tables");
inline constexpr uint32_t kRotR8Lo0 = kRotR8.Word(false, 0), kRotR8Lo1 = kRotR8.Word(false, 4);
inline constexpr uint32_t kRotR8Hi0 = kRotR8.Word(true, 0), kRotR8Hi1 = kRotR8.Word(true, 4);

// prmt.b32 in its generic mode (a selector nibble's top bit replicates the selected byte's
// sign; __byte_perm documents only the low 3 bits).
__device__ __forceinline__ uint32_t Prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// Codes 0-3 of code word w (its low 16 bits) as int8 levels: lo + hi (see kRotK8Scale); and
// their residuals: rlo + rhi.
__device__ __forceinline__ void RotK8Lookup(uint32_t w, uint32_t* lo, uint32_t* hi) {
  *lo = Prmt(kRotK8Lo0, kRotK8Lo1, w);
  *hi = Prmt(kRotK8Hi0, kRotK8Hi1, w ^ 0x8888u);
}
__device__ __forceinline__ void RotR8Lookup(uint32_t w, uint32_t* lo, uint32_t* hi) {
  *lo = Prmt(kRotR8Lo0, kRotR8Lo1, w);
  *hi = Prmt(kRotR8Hi0, kRotR8Hi1, w ^ 0x8888u);
}

}  // namespace kvtier::cuda::dev
