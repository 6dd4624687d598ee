// On-the-wire layouts of the GGUF weight block types kvtier computes with beyond the KV row
// formats of src/quant (q8_0 and q4_0 live there: quant/blocks.h): the legacy 32-value types
// Q4_1, Q5_0, Q5_1, IQ4_NL, the 256-value K-quant super-blocks Q2_K .. Q6_K, IQ4_XS, and the
// activation blocks Q8_1 / Q8_K that ggml's dot products pair them with. Byte-for-byte the
// layouts of ggml-common.h (ngxson/llama.cpp 3f545be); fp16 fields are raw IEEE half bits.
// Everything here is a layout fact: changing it breaks GGUF compatibility.
//
// Value formulas (i: value index inside the block; "sub-block": the group sharing one scale):
//   q4_1    x = q * d + m                q: 4 bits; byte j holds i=j (low), i=j+16 (high)
//   q5_0    x = (q - 16) * d             q: low nibble as q4_1 | bit i of qh << 4
//   q5_1    x = q * d + m                q: as q5_0
//   iq4_nl  x = d * kIq4NlValues[q]      q: nibbles as q4_1
//   q2_K    x = d*(sc&15) * q - dmin*(sc>>4)            16 sub-blocks of 16, q: 2 bits
//   q3_K    x = d*(s6-32) * (q - (hbit ? 0 : 4))       16 sub-blocks of 16, q: 2 bits + hmask
//   q4_K    x = d*sc * q - dmin*m                        8 sub-blocks of 32, 6-bit sc/m, q: 4 bits
//   q5_K    x = d*sc * (q + 16*hbit) - dmin*m            8 sub-blocks of 32, as q4_K + qh
//   q6_K    x = d*sc * (q - 32)                         16 sub-blocks of 16, int8 sc, q: 4+2 bits
//   iq4_xs  x = d*(ls-32) * kIq4NlValues[q]              8 sub-blocks of 32, 6-bit ls
// The exact bit positions are spelled out per struct and in the Unpack helpers below; the
// scalar reference (weights/dequant_ref.cc) is the executable statement of them.
// Pure values and constexpr / inline functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvtier::weights {

inline constexpr size_t kQK = 32;    // values of a legacy block (q4_1, q5_*, iq4_nl, q8_1)
inline constexpr size_t kQK_K = 256; // values of a K-quant super-block
inline constexpr size_t kKScaleBytes = 12;  // 6-bit packed scales of q3_K / q4_K / q5_K

// ---------------------------------------------------------------- legacy 32-value blocks

// ggml block_q4_1: byte j of qs holds value j (low nibble) and value j + 16 (high nibble).
struct BlockQ4_1 {
  uint16_t d;      // fp16 scale
  uint16_t m;      // fp16 min (added)
  uint8_t qs[16];  // [16] nibbles
};
static_assert(sizeof(BlockQ4_1) == 20, "q4_1 block must match GGUF");

// ggml block_q5_0: the 5th bit of value i is bit i of the little-endian uint32 qh.
struct BlockQ5_0 {
  uint16_t d;      // fp16 scale
  uint8_t qh[4];   // [4] high bits, value i at bit i
  uint8_t qs[16];  // [16] low nibbles, as q4_1
};
static_assert(sizeof(BlockQ5_0) == 22, "q5_0 block must match GGUF");

struct BlockQ5_1 {
  uint16_t d;      // fp16 scale
  uint16_t m;      // fp16 min (added)
  uint8_t qh[4];   // [4] high bits, value i at bit i
  uint8_t qs[16];  // [16] low nibbles, as q4_1
};
static_assert(sizeof(BlockQ5_1) == 24, "q5_1 block must match GGUF");

// ggml block_iq4_nl: nibbles as q4_1, each an index into kIq4NlValues.
struct BlockIQ4_NL {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // [16] nibbles
};
static_assert(sizeof(BlockIQ4_NL) == 18, "iq4_nl block must match GGUF");

// ggml block_q8_1 (activations for q4_1 / q5_1 dot products): s = d * sum(qs).
struct BlockQ8_1 {
  uint16_t d;     // fp16 scale
  uint16_t s;     // fp16 d * sum(qs)
  int8_t qs[32];  // [32]
};
static_assert(sizeof(BlockQ8_1) == 36, "q8_1 block must match GGUF");

// The IQ4_NL / IQ4_XS non-linear codebook (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// ---------------------------------------------------------------- 256-value super-blocks

// ggml block_q2_K. Values in two halves of 128; in half h, 2-bit field `shift` = 2 s (s = 0..3)
// of qs[32 h + l] (l = 0..31) is value 128 h + 32 s + l. Sub-block of 16 values: scales[is],
// is = value / 16: low nibble the scale, high nibble the min.
struct BlockQ2_K {
  uint8_t scales[16];  // [16] 4-bit scale | 4-bit min << 4
  uint8_t qs[64];      // [64] 2-bit codes
  uint16_t d;          // fp16 super-scale of the scales
  uint16_t dmin;       // fp16 super-scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84, "q2_K block must match GGUF");

// ggml block_q3_K. Low 2 bits as q2_K's qs; the high bit of value 128 h + 32 s + l is bit
// (4 h + s) of hmask[l]; a cleared high bit subtracts 4. Sixteen 6-bit signed scales
// (stored + 32) packed in 12 bytes: UnpackQ3KScales.
struct BlockQ3_K {
  uint8_t hmask[32];   // [32] high bits
  uint8_t qs[64];      // [64] low 2 bits
  uint8_t scales[12];  // [12] 16 x 6-bit scales
  uint16_t d;          // fp16 super-scale
};
static_assert(sizeof(BlockQ3_K) == 110, "q3_K block must match GGUF");

// ggml block_q4_K. Eight sub-blocks of 32; in chunk c (c = 0..3) of 64 values, qs[32 c + l]
// holds value 64 c + l (low nibble) and 64 c + 32 + l (high nibble). Sub-block j's 6-bit
// scale and min: UnpackScaleMinK4(j, scales).
struct BlockQ4_K {
  uint16_t d;           // fp16 super-scale of the scales
  uint16_t dmin;        // fp16 super-scale of the mins
  uint8_t scales[12];   // [12] 8 x (6-bit scale, 6-bit min)
  uint8_t qs[128];      // [128] nibbles
};
static_assert(sizeof(BlockQ4_K) == 144, "q4_K block must match GGUF");

// ggml block_q5_K: q4_K plus a 5th bit; value 64 c + l has it at bit 2 c of qh[l], value
// 64 c + 32 + l at bit 2 c + 1.
struct BlockQ5_K {
  uint16_t d;           // fp16 super-scale of the scales
  uint16_t dmin;        // fp16 super-scale of the mins
  uint8_t scales[12];   // [12] as q4_K
  uint8_t qh[32];       // [32] 5th bits
  uint8_t qs[128];      // [128] low nibbles, as q4_K
};
static_assert(sizeof(BlockQ5_K) == 176, "q5_K block must match GGUF");

// ggml block_q6_K. Two halves of 128; in half h (ql += 64 h, qh += 32 h), for l = 0..31:
//   value 128h +      l: ql[l]      low  | ((qh[l] >> 0) & 3) << 4
//   value 128h + 32 + l: ql[l + 32] low  | ((qh[l] >> 2) & 3) << 4
//   value 128h + 64 + l: ql[l]      high | ((qh[l] >> 4) & 3) << 4
//   value 128h + 96 + l: ql[l + 32] high | ((qh[l] >> 6) & 3) << 4
// then minus 32. Scale of value v: scales[v / 16] (signed 8-bit).
struct BlockQ6_K {
  uint8_t ql[128];    // [128] low 4 bits
  uint8_t qh[64];     // [64] high 2 bits
  int8_t scales[16];  // [16] 8-bit scales
  uint16_t d;         // fp16 super-scale
};
static_assert(sizeof(BlockQ6_K) == 210, "q6_K block must match GGUF");

// ggml block_iq4_xs. Sub-block ib (32 values, qs[16 ib ..]: nibbles as q4_1) has the 6-bit
// scale ls = (scales_l[ib / 2] >> 4 (ib % 2)) & 15 | ((scales_h >> 2 ib) & 3) << 4, used as
// d * (ls - 32).
struct BlockIQ4_XS {
  uint16_t d;           // fp16 super-scale
  uint16_t scales_h;    // high 2 bits of the 8 scales
  uint8_t scales_l[4];  // [4] low 4 bits of the 8 scales
  uint8_t qs[128];      // [128] nibbles
};
static_assert(sizeof(BlockIQ4_XS) == 136, "iq4_xs block must match GGUF");

// ggml block_q8_K (activations for K-quant / IQ4_XS dot products): f32 scale, bsums[g] =
// sum of qs[16 g .. 16 g + 15].
struct BlockQ8_K {
  float d;             // f32 scale
  int8_t qs[256];      // [256]
  int16_t bsums[16];   // [16]
};
static_assert(sizeof(BlockQ8_K) == 292, "q8_K block must match GGUF");

// ---------------------------------------------------------------- scale unpacking

// q4_K / q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
//   j < 4: scale = q[j] & 63, min = q[j + 4] & 63
//   j >= 4: scale = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4, min = (q[j + 4] >> 4) | (q[j] >> 6) << 4
inline void UnpackScaleMinK4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Inverse of UnpackScaleMinK4 for 8 scales and mins (each < 64).
inline void PackScaleMinK4(const uint8_t* scale, const uint8_t* min, uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>(scale[j] | (scale[j + 4] >> 4) << 6);
    q[j + 4] = static_cast<uint8_t>(min[j] | (min[j + 4] >> 4) << 6);
    q[j + 8] = static_cast<uint8_t>((scale[j + 4] & 15) | (min[j + 4] & 15) << 4);
  }
}

// q3_K: the 16 scales (6-bit, stored + 32) as signed values in [-32, 31]. Scale s's low 4
// bits are the low (s < 8) or high (s >= 8) nibble of byte s % 8; its high 2 bits are bits
// 2 (s / 4) .. + 1 of byte 8 + s % 4.
inline void UnpackQ3KScales(const uint8_t* q, int8_t* out /* [16] */) {
  for (int s = 0; s < 16; ++s) {
    const int lo = s < 8 ? q[s] & 15 : q[s - 8] >> 4;
    const int hi = (q[8 + s % 4] >> (2 * (s / 4))) & 3;
    out[s] = static_cast<int8_t>((lo | hi << 4) - 32);
  }
}

// Inverse of UnpackQ3KScales: `scale` in [-32, 31].
inline void PackQ3KScales(const int8_t* scale /* [16] */, uint8_t* q /* [12] */) {
  std::memset(q, 0, 12);
  for (int s = 0; s < 16; ++s) {
    const int v = scale[s] + 32;
    if (s < 8) q[s] = static_cast<uint8_t>(q[s] | (v & 15));
    else q[s - 8] = static_cast<uint8_t>(q[s - 8] | (v & 15) << 4);
    q[8 + s % 4] = static_cast<uint8_t>(q[8 + s % 4] | ((v >> 4) & 3) << (2 * (s / 4)));
  }
}

// iq4_xs: the 6-bit scale of sub-block ib (0..7), unsigned (the value used is ls - 32).
inline int IQ4XSScale(const BlockIQ4_XS& b, int ib) {
  return ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((b.scales_h >> (2 * ib)) & 3) << 4);
}

}  // namespace kvtier::weights
