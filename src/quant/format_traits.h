// Format traits: the one table of row-format geometry that every kernel reads. Owned by
// src/quant (the layouts themselves are the structs of quant/blocks.h); nothing outside quant
// spells a block size, a code offset or a nibble order as a literal.
//
//   - Compile-time traits per block format (Q8_0Traits, Q4_0Traits) and per affine code width
//     (AffineTraits<bits>): block bytes, values per block, where the scale and the codes sit,
//     the code zero point and the nibble order. Kernels template on these.
//   - KvCode: the code layouts kernels specialise on (a Format reduced to what its decoder
//     needs: kind, and bits for affine), with CodeOf(Format).
//   - FormatKindTraits / TraitsOf(kind): the same facts as run-time data, one row per
//     FormatKind, for code that does not template (tools, docs, tests).
//   - RowLayout / MakeRowLayout(format, head_dim): one row's geometry (scale groups, where the
//     scales and biases are), derived once per call from the format.
//
// Pure values and constexpr functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype_io.h"
#include "kvtier/format.h"
#include "quant/blocks.h"

namespace kvtier {

// How the 4-bit codes of a byte map to values.
enum class NibbleOrder : uint8_t {
  kNone,         // one code per byte (or plain values)
  kSplitHalves,  // ggml q4_0: byte j of a block holds value j (low) and j + 16 (high)
  kInterleaved,  // affine bit stream: byte i holds value 2 i (low) and 2 i + 1 (high)
};

// Where a row's scales (and biases) are.
enum class ScalePlacement : uint8_t {
  kNone,        // plain values
  kPerBlock,    // ggml blocks: each block starts with its fp16 scale
  kAfterCodes,  // affine: [codes][scales: n_groups][biases: n_groups]
};

// ---------------------------------------------------------------- block formats (ggml)

struct Q8_0Traits {
  using Block = BlockQ8_0;
  static constexpr FormatKind kKind = FormatKind::kQ8_0;
  static constexpr size_t kBlockBytes = sizeof(BlockQ8_0);
  static constexpr size_t kBlockValues = sizeof(BlockQ8_0::qs);
  static constexpr size_t kScaleOffset = offsetof(BlockQ8_0, d);  // fp16
  static constexpr size_t kCodesOffset = offsetof(BlockQ8_0, qs);
  static constexpr size_t kCodeBytes = sizeof(BlockQ8_0::qs);
  static constexpr int kBits = 8;
  static constexpr int kZeroPoint = 0;  // signed codes: x = qs * d
  static constexpr NibbleOrder kNibbles = NibbleOrder::kNone;
};
static_assert(Q8_0Traits::kBlockBytes == 34 && Q8_0Traits::kBlockValues == 32 &&
                  Q8_0Traits::kScaleOffset == 0 && Q8_0Traits::kCodesOffset == 2,
              "q8_0 block must match GGUF");

struct Q4_0Traits {
  using Block = BlockQ4_0;
  static constexpr FormatKind kKind = FormatKind::kQ4_0;
  static constexpr size_t kBlockBytes = sizeof(BlockQ4_0);
  static constexpr size_t kBlockValues = 2 * sizeof(BlockQ4_0::qs);
  static constexpr size_t kScaleOffset = offsetof(BlockQ4_0, d);  // fp16
  static constexpr size_t kCodesOffset = offsetof(BlockQ4_0, qs);
  static constexpr size_t kCodeBytes = sizeof(BlockQ4_0::qs);
  static constexpr int kBits = 4;
  static constexpr int kZeroPoint = 8;  // unsigned nibbles: x = (code - 8) * d
  static constexpr NibbleOrder kNibbles = NibbleOrder::kSplitHalves;
};
static_assert(Q4_0Traits::kBlockBytes == 18 && Q4_0Traits::kBlockValues == 32 &&
                  Q4_0Traits::kScaleOffset == 0 && Q4_0Traits::kCodesOffset == 2,
              "q4_0 block must match GGUF");

// The block formats share 32-value blocks; kernels that walk "sub-blocks" of 32 values (and
// affine groups in steps of 32) read it here.
inline constexpr size_t kQBlockValues = Q8_0Traits::kBlockValues;
static_assert(Q4_0Traits::kBlockValues == kQBlockValues, "q8_0 / q4_0 blocks differ in size");

// ---------------------------------------------------------------- affine (MLX) rows

template <int kBitsT>
struct AffineTraits {
  static constexpr FormatKind kKind = FormatKind::kAffine;
  static constexpr int kBits = kBitsT;
  static constexpr int kZeroPoint = 0;  // x = code * scale + bias
  static constexpr NibbleOrder kNibbles = kBitsT == 4 ? NibbleOrder::kInterleaved : NibbleOrder::kNone;
  // Code bytes of n values (n * bits a multiple of 8).
  static constexpr size_t CodeBytes(size_t n) { return n * kBitsT / 8; }
};

// ---------------------------------------------------------------- kernel code layouts

// What a fused kernel specialises on. kOther: a valid format no specialised path decodes (the
// generic path serves it through quant's row decoders).
enum class KvCode : uint8_t {
  kF32, kF16, kBF16, kQ8_0, kQ4_0, kAffine8, kAffine4, kRot4, kRot3, kRot2, kOther
};

constexpr KvCode CodeOf(const Format& f) {
  switch (f.kind) {
    case FormatKind::kF32: return KvCode::kF32;
    case FormatKind::kF16: return KvCode::kF16;
    case FormatKind::kBF16: return KvCode::kBF16;
    case FormatKind::kQ8_0: return KvCode::kQ8_0;
    case FormatKind::kQ4_0: return KvCode::kQ4_0;
    case FormatKind::kAffine:
      return f.bits == 8 ? KvCode::kAffine8 : f.bits == 4 ? KvCode::kAffine4 : KvCode::kOther;
    // Read in the rotated basis (the driver rotates queries and outputs); each width has a
    // fast-path register decoder (kernels/decoders-inl.h).
    case FormatKind::kRot:
      return f.bits == 4 ? KvCode::kRot4 : f.bits == 3 ? KvCode::kRot3 : f.bits == 2 ? KvCode::kRot2 : KvCode::kOther;
    case FormatKind::kChan: return KvCode::kOther;  // the generic path (quant/chan.h)
    case FormatKind::kChanMix: return KvCode::kOther;  // the generic path (quant/chanmix.h)
  }
  return KvCode::kOther;
}

constexpr bool IsAffine(KvCode c) { return c == KvCode::kAffine8 || c == KvCode::kAffine4; }
constexpr bool IsBlock(KvCode c) { return c == KvCode::kQ8_0 || c == KvCode::kQ4_0; }
constexpr bool IsPlain(KvCode c) { return c == KvCode::kF32 || c == KvCode::kF16 || c == KvCode::kBF16; }
// Bits of one code (plain: of one value).
constexpr int CodeBits(KvCode c) {
  switch (c) {
    case KvCode::kF32: return 32;
    case KvCode::kF16:
    case KvCode::kBF16: return 16;
    case KvCode::kQ8_0:
    case KvCode::kAffine8: return 8;
    case KvCode::kQ4_0:
    case KvCode::kAffine4:
    case KvCode::kRot4: return 4;
    case KvCode::kRot3: return 3;
    case KvCode::kRot2: return 2;
    case KvCode::kOther: return 0;
  }
  return 0;
}
// Bytes per 32-value block (q formats) or per 32 values of codes (affine; scales apart).
constexpr size_t SubBlockBytes(KvCode c) {
  return c == KvCode::kQ8_0   ? Q8_0Traits::kBlockBytes
         : c == KvCode::kQ4_0 ? Q4_0Traits::kBlockBytes
                              : kQBlockValues * static_cast<size_t>(CodeBits(c)) / 8;
}
// Byte offset of the codes of 32-value block b of a row (affine: codes start the row).
constexpr size_t SubBlockCodes(KvCode c, size_t b) {
  return c == KvCode::kQ8_0   ? Q8_0Traits::kBlockBytes * b + Q8_0Traits::kCodesOffset
         : c == KvCode::kQ4_0 ? Q4_0Traits::kBlockBytes * b + Q4_0Traits::kCodesOffset
                              : SubBlockBytes(c) * b;
}
constexpr NibbleOrder NibblesOf(KvCode c) {
  return c == KvCode::kQ4_0 ? NibbleOrder::kSplitHalves
         : c == KvCode::kAffine4 ? NibbleOrder::kInterleaved
                                 : NibbleOrder::kNone;
}
// What a code's value is offset by (x = (code - zero point) * scale [+ bias]).
constexpr int ZeroPointOf(KvCode c) { return c == KvCode::kQ4_0 ? Q4_0Traits::kZeroPoint : 0; }

// ---------------------------------------------------------------- run-time table

struct FormatKindTraits {
  FormatKind kind;
  ScalePlacement scales;
  uint16_t block_values;  // values per block (plain: 1; affine: the format's group)
  uint16_t block_bytes;   // bytes per block (plain: the dtype's size; affine: 0, see RowLayout)
  uint8_t scale_offset;   // kPerBlock: byte offset of the block's scale
  uint8_t codes_offset;   // kPerBlock: byte offset of the block's codes
  int8_t zero_point;
  NibbleOrder nibbles;    // affine: depends on bits (kInterleaved at 4)
};

inline constexpr FormatKindTraits kFormatKindTraits[] = {
    {FormatKind::kF32, ScalePlacement::kNone, 1, 4, 0, 0, 0, NibbleOrder::kNone},
    {FormatKind::kF16, ScalePlacement::kNone, 1, 2, 0, 0, 0, NibbleOrder::kNone},
    {FormatKind::kBF16, ScalePlacement::kNone, 1, 2, 0, 0, 0, NibbleOrder::kNone},
    {FormatKind::kAffine, ScalePlacement::kAfterCodes, 0, 0, 0, 0, 0, NibbleOrder::kNone},
    {FormatKind::kQ8_0, ScalePlacement::kPerBlock, Q8_0Traits::kBlockValues, Q8_0Traits::kBlockBytes,
     Q8_0Traits::kScaleOffset, Q8_0Traits::kCodesOffset, Q8_0Traits::kZeroPoint, Q8_0Traits::kNibbles},
    {FormatKind::kQ4_0, ScalePlacement::kPerBlock, Q4_0Traits::kBlockValues, Q4_0Traits::kBlockBytes,
     Q4_0Traits::kScaleOffset, Q4_0Traits::kCodesOffset, Q4_0Traits::kZeroPoint, Q4_0Traits::kNibbles},
    // rot: 32-value blocks (fp16 scale at 0, codes at 2, codebook indices; bytes depend on bits,
    // see quant/rot.h's RotBlockBytes).
    {FormatKind::kRot, ScalePlacement::kPerBlock, 32, 0, 0, 2, 0, NibbleOrder::kNone},
    // chan: token-grouped K (quant/chan.h): codes, then a slice of the group's scales / mins.
    {FormatKind::kChan, ScalePlacement::kAfterCodes, 0, 0, 0, 0, 0, NibbleOrder::kInterleaved},
    // chanmix: chan with two code widths (quant/chanmix.h): codes, then a slice of [lo][hi].
    {FormatKind::kChanMix, ScalePlacement::kAfterCodes, 0, 0, 0, 0, 0, NibbleOrder::kNone},
};

constexpr const FormatKindTraits& TraitsOf(FormatKind k) { return kFormatKindTraits[static_cast<size_t>(k)]; }
static_assert(TraitsOf(FormatKind::kQ8_0).kind == FormatKind::kQ8_0 &&
                  TraitsOf(FormatKind::kQ4_0).kind == FormatKind::kQ4_0 &&
                  TraitsOf(FormatKind::kAffine).kind == FormatKind::kAffine &&
                  TraitsOf(FormatKind::kRot).kind == FormatKind::kRot &&
                  TraitsOf(FormatKind::kChan).kind == FormatKind::kChan &&
                  TraitsOf(FormatKind::kChanMix).kind == FormatKind::kChanMix,
              "kFormatKindTraits is indexed by FormatKind");

// ---------------------------------------------------------------- one row's geometry

// Geometry of one stored row of head_dim values: the scale groups and where their scales and
// biases are. Block formats: a group is a block (scales inside the blocks, offsets 0);
// affine: MakeAffineLayout's offsets; plain: one group of head_dim values.
struct RowLayout {
  size_t row_bytes = 0;
  size_t scales_off = 0, biases_off = 0;  // affine: byte offsets of the scales and biases
  size_t group = 32;                      // values per scale
  uint32_t group_shift = 5;               // log2(group): no division per chunk
  uint32_t n_groups = 0;                  // groups per row
  DType scale_dtype = DType::kF16;        // dtype of the scales (and affine biases)
};

inline RowLayout MakeRowLayout(const Format& f, size_t head_dim) {
  RowLayout l;
  l.row_bytes = f.row_bytes(head_dim);
  l.group = f.group;
  l.group_shift = static_cast<uint32_t>(__builtin_ctz(f.group));
  l.n_groups = static_cast<uint32_t>(head_dim / f.group);
  l.scale_dtype = f.scale_dtype;
  if (f.kind == FormatKind::kAffine) {
    const AffineRowLayout a = MakeAffineLayout(f, head_dim);
    l.scales_off = a.scales_off;
    l.biases_off = a.biases_off;
  }
  return l;
}

}  // namespace kvtier
