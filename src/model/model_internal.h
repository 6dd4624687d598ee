// Internals shared by model.cc (loading) and forward.cc (the forward pass): the per-layer
// weight views and the tensor binder. Not part of the public API.
#pragma once

#include <cstddef>
#include <string>

#include "kvtier/gguf.h"
#include "kvtier/model.h"

namespace kvtier {

// Views into the GGUF mapping; the Model owns the mapping.
struct Model::Layer {
  const float* attn_norm = nullptr;  // [n_embd]
  WeightMatrix wq;                   // [n_heads * head_dim][n_embd]
  WeightMatrix wk, wv;               // [n_kv_heads * head_dim][n_embd]
  WeightMatrix wo;                   // [n_embd][n_heads * head_dim]
  const float* bq = nullptr;         // [n_heads * head_dim] (qwen2) or null
  const float* bk = nullptr;         // [n_kv_heads * head_dim] or null
  const float* bv = nullptr;         // [n_kv_heads * head_dim] or null
  const float* q_norm = nullptr;     // [head_dim] (qwen3) or null
  const float* k_norm = nullptr;     // [head_dim] or null
  const float* ffn_norm = nullptr;   // [n_embd]
  WeightMatrix gate, up;             // [n_ff][n_embd]
  WeightMatrix down;                 // [n_embd][n_ff]
};

// Looks tensors up by name and checks shape and type; adds their sizes to *bytes.
class ModelBinder {
 public:
  ModelBinder(const GgufFile& f, size_t* bytes) : f_(f), bytes_(bytes) {}
  // A weight matrix of ggml shape [n_in, n_out] in a supported type.
  Result<WeightMatrix> Matrix(const std::string& name, uint32_t n_in, uint32_t n_out) const;
  // An f32 vector of n values; null when optional and absent.
  Result<const float*> Vector(const std::string& name, uint32_t n, bool optional) const;

 private:
  const GgufFile& f_;
  size_t* bytes_;
};

}  // namespace kvtier
