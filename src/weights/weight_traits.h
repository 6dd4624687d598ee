// The one traits table of GGUF weight types kvtier computes with: per type its ggml id and
// name, block geometry, sub-block (scale group) size, bits per code, whether it carries mins,
// and the activation block ggml pairs it with in dot products. Compile-time traits
// (BlockTraits<GgmlType>) give the same facts to templated kernels; the run-time table
// (kWeightTypes / FindWeightType) to code that does not template (loader, quantizer, CLI).
// f32 / f16 / bf16 / q8_0 / q4_0 rows are listed too (decoded through src/quant's row formats,
// their layouts are quant/blocks.h); every other row's block struct is in weights/blocks.h.
// Pure values; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvtier/gguf.h"
#include "weights/blocks.h"

namespace kvtier::weights {

// Which activation block ggml's CPU dot product quantizes x to for this weight type.
enum class ActType : uint8_t { kF32, kQ8_0, kQ8_1, kQ8_K };

// Compile-time traits of the block types of weights/blocks.h.
template <GgmlType T>
struct BlockTraits;

#define KVTIER_WEIGHT_BLOCK_TRAITS(TYPE, BLOCK, VALUES, SUB, BITS, MINS, ACT, NAME)        \
  template <>                                                                            \
  struct BlockTraits<GgmlType::TYPE> {                                                   \
    using Block = BLOCK;                                                                 \
    static constexpr GgmlType kType = GgmlType::TYPE;                                    \
    static constexpr size_t kBlockValues = VALUES;   /* values per block */             \
    static constexpr size_t kBlockBytes = sizeof(BLOCK);                                 \
    static constexpr size_t kSubBlockValues = SUB;   /* values sharing one scale */     \
    static constexpr int kBits = BITS;               /* bits per code */                \
    static constexpr bool kHasMin = MINS;            /* x = d q - m (or + m) */         \
    static constexpr ActType kAct = ActType::ACT;                                        \
    static constexpr std::string_view kName = NAME;                                      \
  }

KVTIER_WEIGHT_BLOCK_TRAITS(kQ4_1, BlockQ4_1, kQK, kQK, 4, true, kQ8_1, "q4_1");
KVTIER_WEIGHT_BLOCK_TRAITS(kQ5_0, BlockQ5_0, kQK, kQK, 5, false, kQ8_0, "q5_0");
KVTIER_WEIGHT_BLOCK_TRAITS(kQ5_1, BlockQ5_1, kQK, kQK, 5, true, kQ8_1, "q5_1");
KVTIER_WEIGHT_BLOCK_TRAITS(kIQ4_NL, BlockIQ4_NL, kQK, kQK, 4, false, kQ8_0, "iq4_nl");
KVTIER_WEIGHT_BLOCK_TRAITS(kQ2_K, BlockQ2_K, kQK_K, 16, 2, true, kQ8_K, "q2_K");
KVTIER_WEIGHT_BLOCK_TRAITS(kQ3_K, BlockQ3_K, kQK_K, 16, 3, false, kQ8_K, "q3_K");
KVTIER_WEIGHT_BLOCK_TRAITS(kQ4_K, BlockQ4_K, kQK_K, 32, 4, true, kQ8_K, "q4_K");
KVTIER_WEIGHT_BLOCK_TRAITS(kQ5_K, BlockQ5_K, kQK_K, 32, 5, true, kQ8_K, "q5_K");
KVTIER_WEIGHT_BLOCK_TRAITS(kQ6_K, BlockQ6_K, kQK_K, 16, 6, false, kQ8_K, "q6_K");
KVTIER_WEIGHT_BLOCK_TRAITS(kIQ4_XS, BlockIQ4_XS, kQK_K, 32, 4, false, kQ8_K, "iq4_xs");
#undef KVTIER_WEIGHT_BLOCK_TRAITS

// Where a weight type's row decoder lives.
enum class Decoder : uint8_t {
  kQuantFormat,  // a src/quant row Format (f32, f16, bf16, q8_0, q4_0)
  kWeights,      // this module (weights/dequant_ref.cc, weights/dequant_simd.cc)
};

struct WeightTypeTraits {
  GgmlType type;
  std::string_view name;     // ggml's name ("q4_K")
  uint16_t block_values;     // values per block (plain types: 1)
  uint16_t block_bytes;      // bytes per block
  uint16_t sub_block_values; // values per scale (plain: 1)
  uint8_t bits;              // bits per stored code or value
  bool has_min;
  ActType act;
  Decoder decoder;
};

template <GgmlType T>
constexpr WeightTypeTraits RowOf() {
  using B = BlockTraits<T>;
  return {T, B::kName, B::kBlockValues, B::kBlockBytes, B::kSubBlockValues,
          static_cast<uint8_t>(B::kBits), B::kHasMin, B::kAct, Decoder::kWeights};
}

inline constexpr WeightTypeTraits kWeightTypes[] = {
    {GgmlType::kF32, "f32", 1, 4, 1, 32, false, ActType::kF32, Decoder::kQuantFormat},
    {GgmlType::kF16, "f16", 1, 2, 1, 16, false, ActType::kF32, Decoder::kQuantFormat},
    {GgmlType::kBF16, "bf16", 1, 2, 1, 16, false, ActType::kF32, Decoder::kQuantFormat},
    {GgmlType::kQ8_0, "q8_0", 32, 34, 32, 8, false, ActType::kQ8_0, Decoder::kQuantFormat},
    {GgmlType::kQ4_0, "q4_0", 32, 18, 32, 4, false, ActType::kQ8_0, Decoder::kQuantFormat},
    RowOf<GgmlType::kQ4_1>(),
    RowOf<GgmlType::kQ5_0>(),
    RowOf<GgmlType::kQ5_1>(),
    RowOf<GgmlType::kIQ4_NL>(),
    RowOf<GgmlType::kQ2_K>(),
    RowOf<GgmlType::kQ3_K>(),
    RowOf<GgmlType::kQ4_K>(),
    RowOf<GgmlType::kQ5_K>(),
    RowOf<GgmlType::kQ6_K>(),
    RowOf<GgmlType::kIQ4_XS>(),
};

// The row of a ggml type id, or nullptr when kvtier cannot compute with that type.
constexpr const WeightTypeTraits* FindWeightType(uint32_t ggml_type) {
  for (const WeightTypeTraits& t : kWeightTypes) {
    if (static_cast<uint32_t>(t.type) == ggml_type) return &t;
  }
  return nullptr;
}

// The names of every supported weight type, for error messages: "f32, f16, ..., iq4_xs".
std::string_view SupportedWeightTypesList();

}  // namespace kvtier::weights
