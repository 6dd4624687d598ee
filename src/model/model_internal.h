// Internals shared by model.cc (loading) and forward.cc (the forward pass): the per-layer
// weight views and the tensor binder. Not part of the public API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/gguf.h"
#include "kvtier/model.h"

namespace kvtier {

// Views into the GGUF mapping; the Model owns the mapping.
struct Model::Layer {
  const float* attn_norm = nullptr;  // [n_embd]
  WeightMatrix wq;                   // [n_heads * head_dim][n_embd]
  WeightMatrix wk, wv;               // [n_kv_heads * head_dim][n_embd]
  WeightMatrix wqkv;                 // phi3: [(n_heads + 2 n_kv_heads) * head_dim][n_embd]
                                     // (rows q, k, v) instead of wq, wk, wv; else empty
  WeightMatrix wo;                   // [n_embd][n_heads * head_dim]
  const float* bq = nullptr;         // [n_heads * head_dim] (qwen2) or null
  const float* bk = nullptr;         // [n_kv_heads * head_dim] or null
  const float* bv = nullptr;         // [n_kv_heads * head_dim] or null
  const float* q_norm = nullptr;     // [head_dim] (qwen3) or null
  const float* k_norm = nullptr;     // [head_dim] or null
  const float* ffn_norm = nullptr;   // [n_embd]
  WeightMatrix gate, up;             // [n_ff][n_embd]; phi3: gate empty, up [2 n_ff][n_embd]
                                     // (rows gate then up)
  WeightMatrix down;                 // [n_embd][n_ff]
  const float* attn_post_norm = nullptr;  // gemma3: [n_embd] on the attention output, or null
  const float* ffn_post_norm = nullptr;   // gemma3: [n_embd] on the FFN output, or null
  // qwen35 Gated DeltaNet layers (wqkv: [2 k_dim + v_dim][n_embd], rows q, k, v):
  WeightMatrix ssm_gate;                  // attn_gate (z): [v_dim][n_embd]
  const float* ssm_conv = nullptr;        // [conv_dim][conv_kernel]
  const float* ssm_dt_bias = nullptr;     // [v_heads]
  const float* ssm_a = nullptr;           // [v_heads], -exp(A_log)
  WeightMatrix ssm_beta, ssm_alpha;       // [v_heads][n_embd]
  const float* ssm_norm = nullptr;        // [ssm_state]
  WeightMatrix ssm_out;                   // [n_embd][v_dim]
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

namespace model {

// The architectures Model::Load accepts, for error messages.
inline constexpr const char* kSupportedArchs = "llama, qwen2, qwen3, phi3, gemma3, qwen35";

// The keys and conventions of the newer families (arch.cc): phi3 (NeoX RoPE; llama.cpp runs it
// without its sliding window, and so does kvtier) and gemma3 (window layers, their RoPE base,
// QK-norm, post-norms, GeGLU, embedding scale, logit soft-cap). No-op for llama / qwen*.
Status ReadFamilyConfig(const GgufFile& f, const std::string& arch, ModelConfig* c);

// The rows of one Model::Forward call (forward.cc, forward_hybrid.cc): n[i] new tokens of row
// i, their RoPE positions one row after another, the longest row's count; the cache reserves
// room for them.
struct ForwardRows {
  std::vector<uint32_t> n;   // [B]
  std::vector<int32_t> pos;  // [T]
  uint32_t max_n = 0;
};
Status PlanForwardRows(BatchCache& cache, std::span<const std::span<const int32_t>> tokens,
                       ForwardRows* rows);

// qwen35's keys (arch_qwen35.cc): the full-attention interval, ssm.* sizes, the RoPE sections;
// a missing or inconsistent key fails naming it.
Status ReadQwen35Config(const GgufFile& f, ModelConfig* c);

}  // namespace model

}  // namespace kvtier
