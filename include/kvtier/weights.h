// Module weights (src/weights, kvtier_weights; order and include rule: docs/architecture.md)
// owns the GGUF weight types beyond the KV row formats: byte-exact block layouts
// (weights/blocks.h), the weight-type traits table (weights/weight_traits.h), scalar reference
// and Highway SIMD dequantizers, and quantizers.
//
// Weight types kvtier computes with: f32, f16, bf16, q8_0, q4_0 (decoded through src/quant's
// row formats), q4_1, q5_0, q5_1, iq4_nl (32-value blocks), q2_K, q3_K, q4_K, q5_K, q6_K,
// iq4_xs (256-value super-blocks). Any other ggml type is an Unimplemented error naming it.
// Stateless functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

// OK when kvtier decodes weights of this ggml type; else Unimplemented naming the type by its
// ggml name ("weights of type iq2_xxs are not supported (supported: f32, ...)").
Status CheckWeightType(uint32_t ggml_type);

// Bytes of one row of n values of this type. InvalidArgument when n is not a positive
// multiple of the type's block size (naming both), Unimplemented as CheckWeightType.
Result<size_t> WeightRowBytes(uint32_t ggml_type, size_t n);

// Values per block of a supported type (1 for plain types), 0 for an unsupported one.
size_t WeightBlockValues(uint32_t ggml_type);

// Decodes n_rows contiguous rows of n values each to f32, with the fastest SIMD path of this
// CPU (Highway run-time dispatch; equal to the reference bit for bit).
//   src [n_rows][WeightRowBytes(type, n)], dst [n_rows][n] f32
Status DequantizeWeightRows(uint32_t ggml_type, const uint8_t* src, size_t n_rows, size_t n,
                            float* dst);
// The scalar reference of the same (bit-exact with ggml's dequantize_row_*).
Status DequantizeWeightRowsRef(uint32_t ggml_type, const uint8_t* src, size_t n_rows, size_t n,
                               float* dst);

// Quantizes n_rows rows of n f32 values each to this type (kvtier's own quantizers: for the
// K-quants a per-sub-block scale/min search, no importance matrix).
//   src [n_rows][n] f32, dst [n_rows][WeightRowBytes(type, n)]
Status QuantizeWeightRows(uint32_t ggml_type, const float* src, size_t n_rows, size_t n,
                          uint8_t* dst);

}  // namespace kvtier

// ---------------------------------------------------------------- whole models

namespace kvtier {

class GgufFile;    // kvtier/gguf.h
class ThreadPool;  // kvtier/thread_pool.h

// "74 tensors: f32 17, q4_K 48, q6_K 9" (types in ggml id order), for load-time logs.
std::string DescribeTensorTypes(const GgufFile& f);

// Quantization presets (llama.cpp's file types; case-insensitive): Q4_K_M, Q5_K_M, Q3_K_M,
// Q6_K, IQ4_XS, Q4_1, Q5_0, Q5_1, IQ4_NL, Q8_0, Q4_0, F16. "Help" lists them.
std::string QuantizePresetsHelp();
// OK for a preset name QuantizeModelFile accepts; InvalidArgument listing them otherwise.
Status CheckQuantizePreset(std::string_view preset);

// The ggml type each tensor of `f` gets under `preset`, in tensor order, following
// llama.cpp's per-tensor rules (src/llama-quant.cpp at 3f545be, no importance matrix): 1-D
// tensors and norms stay as they are; the output head (token_embd when there is no
// output.weight) takes q6_K; attn_v / ffn_down take more bits in the layers llama.cpp
// picks; a type whose block does not divide the row falls back as llama.cpp does
// (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, q2_K / q3_K -> q4_0, iq4_xs -> iq4_nl, then f16).
Result<std::vector<uint32_t>> ChooseTensorTypes(const GgufFile& f, std::string_view preset);

struct QuantizeModelReport {
  std::map<uint32_t, int> type_counts;  // ggml type -> tensors written in it
  int fallbacks = 0;                    // tensors whose row length forced a fallback type
  uint64_t in_bytes = 0, out_bytes = 0;
};

// Quantizes a GGUF model to `preset` and writes `out` crash-safely (temporary file, fsync,
// rename: an existing `out` is intact until the new file is complete). Tensors of any
// decodable type are decoded to f32 first. Metadata is copied; general.file_type is set to
// the preset's llama.cpp file type. pool may be null (one thread).
Result<QuantizeModelReport> QuantizeModelFile(const std::string& in, const std::string& out,
                                              std::string_view preset, ThreadPool* pool);

}  // namespace kvtier
