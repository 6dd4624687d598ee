// Module quant (src/quant, kvtier_quant; order and include rule: docs/architecture.md) owns the KV
// row formats (descriptors with stable ids, scalar reference, SIMD quantizers).
//
// KV row formats: how one head_dim-long vector (one token of one KV head) is stored.
//
//   f32 / f16 / bf16       plain values; lossless for data already in that dtype.
//   affine<bits>g<group>   MLX's affine scheme: per group a scale and a bias stored in
//                          `scale_dtype`, codes q in [0, 2^bits-1] bit-packed, x ~ q*scale+bias.
//   q8_0 / q4_0            ggml's 32-value blocks with an fp16 scale, byte-for-byte GGUF layout.
//   rot<bits>s<seed>       rotated rows (issue 32): the row is multiplied by a seeded randomized
//                          Hadamard transform (block-diagonal where head_dim is not a power of
//                          two), then each 32-value block stores an fp16 scale and bits-wide
//                          indices into a non-uniform codebook fitted to the rotated
//                          distribution (bits 2, 3, 4: 2.5, 3.5, 4.5 bits per value). The seed
//                          (0..255) names the rotation and is part of the id.
//   chan<bits>g<G>         K grouped per channel across G tokens of a block (issue 32, KIVI
//                          style): for each head and channel an f16 scale and an f16 min per
//                          G tokens, codes q in [0, 2^bits-1], x ~ min + q*scale (bits 2, 3,
//                          4; G 32, 64 or 128: bits + 32/G bits per value). A token-grouped
//                          format: it is quantized a whole block (of a multiple of G tokens)
//                          at a time, never row by row (quant_chan.h); its rows still sit on
//                          the cache's row grid (docs/formats/kv-row-formats.md).
//   chanmix<bits>g<G>      chan with two code widths: per group and head the D/2 channels
//                          of largest range get bits + 1, the others bits (bits 2 or 3); f16
//                          min and max per channel (bits + 0.5 + 32/G bits per value:
//                          chanmix3g64 4.0, chanmix3g128 3.75). Token-grouped like chan.
//
// A Format is a small value type; its id() is stable across versions and machines and is what
// files store (docs/formats/kv-row-formats.md). Thread-safe (immutable values).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/dtype.h"
#include "kvtier/status.h"

namespace kvtier {

// Values are stored in files (inside Format::id()): never change.
enum class FormatKind : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kAffine = 3,
  kQ8_0 = 4,
  kQ4_0 = 5,
  kRot = 6,
  kChan = 7,
  kChanMix = 8,
};

struct Format {
  FormatKind kind = FormatKind::kF16;
  uint8_t bits = 16;           // bits of one stored code/value (not counting scales)
  uint16_t group = 1;          // values sharing one scale (1 for plain dtypes; chan: tokens)
  DType scale_dtype = DType::kF16;  // dtype of scales and biases; the dtype itself for plain
  uint8_t seed = 0;            // rot: the rotation's seed (0 for every other kind)

  static Format F32() { return {FormatKind::kF32, 32, 1, DType::kF32}; }
  static Format F16() { return {FormatKind::kF16, 16, 1, DType::kF16}; }
  static Format BF16() { return {FormatKind::kBF16, 16, 1, DType::kBF16}; }
  static Format Plain(DType t);
  static Format Q8_0() { return {FormatKind::kQ8_0, 8, 32, DType::kF16}; }
  static Format Q4_0() { return {FormatKind::kQ4_0, 4, 32, DType::kF16}; }
  // Unvalidated; call Validate() (or build it with ParseFormat) before use.
  static Format Affine(int bits, int group, DType scale_dtype) {
    return {FormatKind::kAffine, static_cast<uint8_t>(bits), static_cast<uint16_t>(group),
            scale_dtype};
  }

  // Rotated codebook rows (2, 3 or 4 bits; group 32, f16 scales). Unvalidated.
  static Format Rot(int bits, int seed = 0) {
    return {FormatKind::kRot, static_cast<uint8_t>(bits), 32, DType::kF16,
            static_cast<uint8_t>(seed)};
  }

  // Per-channel token groups (2, 3 or 4 bits; G = 32, 64 or 128 tokens; f16 scales and
  // mins). Unvalidated.
  static Format Chan(int bits, int tokens) {
    return {FormatKind::kChan, static_cast<uint8_t>(bits), static_cast<uint16_t>(tokens),
            DType::kF16};
  }

  // chan with two code widths (bits 2 or 3; G = 32, 64 or 128): per group and head the half
  // of the channels of largest range get bits + 1 (quant/chanmix.h). Unvalidated.
  static Format ChanMix(int bits, int tokens) {
    return {FormatKind::kChanMix, static_cast<uint8_t>(bits), static_cast<uint16_t>(tokens),
            DType::kF16};
  }

  bool is_plain() const {
    return kind == FormatKind::kF32 || kind == FormatKind::kF16 || kind == FormatKind::kBF16;
  }
  bool is_quantized() const { return !is_plain(); }
  // Whether rows are stored in a rotated basis (attention rotates the query and the output).
  bool is_rotated() const { return kind == FormatKind::kRot; }
  // Whether a row's values depend on other tokens' rows (kChan: `group` counts tokens, not
  // values of a row). Such formats go through quant_chan.h's block functions; the row
  // functions of quant.h refuse them.
  bool is_token_grouped() const {
    return kind == FormatKind::kChan || kind == FormatKind::kChanMix;
  }
  // Rows that carry tokens [first, first + n) whole: n, or for a token-grouped format up to
  // the end of the group holding the last token (a group's rows carry its parameters).
  size_t stored_rows(size_t first, size_t n) const {
    if (!is_token_grouped() || n == 0) return n;
    return (first + n + group - 1) / group * group - first;
  }

  // OK if this combination of kind, bits, group and scale dtype is supported.
  Status Validate() const;
  // OK if rows of `head_dim` values can be stored (head_dim > 0 and a multiple of group).
  Status CheckHeadDim(size_t head_dim) const;

  // Stable numeric id: kind | bits << 8 | log2(group) << 16 | scale_dtype << 24; for rot the
  // top byte is the seed instead (its scales are always f16).
  uint32_t id() const;
  static Result<Format> FromId(uint32_t id);

  // Short name: "f16", "q4_0", "affine4g64", "rot4s0" (the scale dtype is not part of it).
  std::string name() const;
  // Name that round-trips through ParseFormat: "affine4g64:bf16" for affine, else name().
  std::string spec() const;

  // Storage cost per value including scales and biases (e.g. affine4g64 with f16 scales: 4.5).
  double bits_per_value() const;
  // Bytes of one stored row. Precondition: CheckHeadDim(head_dim).ok().
  size_t row_bytes(size_t head_dim) const;

  bool operator==(const Format&) const = default;
};

struct FormatDefaults {
  int group = 64;                   // group for "affine4" written without "g<group>"
  DType scale_dtype = DType::kF16;  // scale dtype for affine names without ":<dtype>"
};

// Parses "f32", "f16", "bf16", "q8_0", "q4_0", "affine<bits>[g<group>][:<scale dtype>]",
// "rot<bits>[s<seed>]" (seed 0 when left out), "chan<bits>g<tokens>",
// "chanmix<bits>g<tokens>".
// Errors name the input and list every valid choice.
Result<Format> ParseFormat(std::string_view name, FormatDefaults defaults = {});

// Text listing what ParseFormat accepts, for error messages and --help.
std::string ValidFormatsHelp();
// Every supported format: the plain dtypes, q8_0, q4_0, affine bits x group x scale dtype, then
// rot 2 / 3 / 4 bits with seed 0 and rot4 with seed 1.
std::vector<Format> AllSupportedFormats();
// The token-grouped formats (Format::is_token_grouped): chan 2 / 3 / 4 bits x 32 / 64 / 128
// tokens, then chanmix 2 / 3 bits x 32 / 64 / 128 tokens. Not in AllSupportedFormats, whose every format quantizes row by row.
std::vector<Format> AllTokenGroupedFormats();

}  // namespace kvtier
