// qwen35 (Qwen3.5, hybrid): hyper-parameters and tensor binding, with the keys, names and shapes
// llama.cpp's loader uses (src/models/qwen35.cpp, llama-arch.cpp; 3f545be).
//
// Facts this file encodes:
// - Layer l is Gated DeltaNet ("recurrent") unless (l + 1) % full_attention_interval == 0
//   (default 4). attention.recurrent_layers (an explicit list) and nextn_predict_layers (MTP
//   blocks) are refused as not supported yet.
// - Full-attention layers: attn_q [n_embd, 2 H D] holds per head a query then a gate; q/k
//   RMSNorm per head; multi-section RoPE (rope.dimension_sections, required) on the first
//   rope.dimension_count dims, which for text positions (the same position in every section)
//   is NeoX RoPE; output * sigmoid(gate) -> attn_output.
// - DeltaNet layers: attn_qkv [n_embd, 2 k_dim + v_dim] (k_dim = group_count * state_size,
//   v_dim = time_step_rank * state_size = inner_size), attn_gate (z) [n_embd, v_dim],
//   ssm_conv1d [conv_kernel, conv_dim], ssm_dt.bias, ssm_a, ssm_beta, ssm_alpha [n_embd,
//   v_heads], ssm_norm [state_size], ssm_out [v_dim, n_embd].
// - Every layer: attn_norm before the mixer, post_attention_norm before the SwiGLU FFN (there
//   is no ffn_norm).
// Thread safety: pure functions / called once by Model::FromGguf.
#include <string>

#include "model/model_internal.h"

namespace kvtier {
namespace model {
namespace {

Result<uint32_t> Key(const GgufFile& f, const std::string& key, bool required, uint32_t fallback) {
  const std::string full = "qwen35." + key;
  if (!f.Has(full)) {
    if (!required) return fallback;
    return Status::InvalidArgument(f.path() + ": missing metadata key " + full);
  }
  auto v = f.GetUint(full);
  if (!v.ok()) return Status::InvalidArgument(f.path() + ": " + v.status().message());
  if (*v == 0 || *v > (1u << 20)) {
    return Status::InvalidArgument(f.path() + ": " + full + " = " + std::to_string(*v) +
                                   " is out of range [1, 2^20]");
  }
  return static_cast<uint32_t>(*v);
}

}  // namespace

Status ReadQwen35Config(const GgufFile& f, ModelConfig* c) {
  const std::string p = f.path() + ": ";
  for (const char* k : {"qwen35.attention.layer_norm_rms_epsilon",
                        "qwen35.rope.dimension_sections"}) {
    if (!f.Has(k)) return Status::InvalidArgument(p + "missing metadata key " + k);
  }
  if (f.Has("qwen35.attention.recurrent_layers")) {
    return Status::Unimplemented(p + "qwen35.attention.recurrent_layers (an explicit layer "
                                 "list) is not supported yet; use full_attention_interval");
  }
  if (f.Has("qwen35.nextn_predict_layers")) {
    auto n = f.GetUint("qwen35.nextn_predict_layers");
    if (!n.ok() || *n != 0) {
      return Status::Unimplemented(p + "qwen35.nextn_predict_layers (MTP blocks) is not "
                                   "supported yet");
    }
  }
  KVTIER_ASSIGN_OR_RETURN(c->full_attn_interval, Key(f, "full_attention_interval", false, 4));
  KVTIER_ASSIGN_OR_RETURN(c->ssm_conv_kernel, Key(f, "ssm.conv_kernel", true, 0));
  KVTIER_ASSIGN_OR_RETURN(c->ssm_state, Key(f, "ssm.state_size", true, 0));
  KVTIER_ASSIGN_OR_RETURN(c->ssm_k_heads, Key(f, "ssm.group_count", true, 0));
  KVTIER_ASSIGN_OR_RETURN(c->ssm_v_heads, Key(f, "ssm.time_step_rank", true, 0));
  KVTIER_ASSIGN_OR_RETURN(const uint32_t inner, Key(f, "ssm.inner_size", true, 0));
  if (uint64_t{c->ssm_v_heads} * c->ssm_state != inner) {
    return Status::InvalidArgument(p + "qwen35.ssm.inner_size " + std::to_string(inner) +
                                   " is not time_step_rank x state_size = " +
                                   std::to_string(c->ssm_v_heads) + " x " +
                                   std::to_string(c->ssm_state));
  }
  if (c->ssm_v_heads % c->ssm_k_heads != 0) {
    return Status::InvalidArgument(p + "qwen35.ssm.time_step_rank " +
                                   std::to_string(c->ssm_v_heads) +
                                   " is not a multiple of ssm.group_count " +
                                   std::to_string(c->ssm_k_heads));
  }
  auto sections = f.GetIntArray("qwen35.rope.dimension_sections");
  if (!sections.ok()) return Status::InvalidArgument(p + sections.status().message());
  int64_t sum = 0;
  for (int64_t s : *sections) {
    if (s < 0) return Status::InvalidArgument(p + "qwen35.rope.dimension_sections is negative");
    sum += s;
  }
  if (sections->empty() || sections->size() > 4 || sum == 0 || sum > c->rope_dims / 2) {
    return Status::InvalidArgument(p + "qwen35.rope.dimension_sections must hold 1-4 counts "
                                   "summing to 1.." + std::to_string(c->rope_dims / 2) +
                                   " (rope.dimension_count / 2)");
  }
  return Status::OK();
}

}  // namespace model

Status Model::BindQwen35() {
  const GgufFile& f = *file_;
  ModelBinder b(f, &weight_bytes_);
  const ModelConfig& c = cfg_;
  const uint32_t E = c.n_embd, D = c.head_dim, H = c.n_heads, Hkv = c.n_kv_heads, F = c.n_ff;
  const uint32_t k_dim = c.ssm_k_heads * c.ssm_state, v_dim = c.ssm_v_heads * c.ssm_state;
  const uint32_t conv_dim = 2 * k_dim + v_dim;
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    Layer& L = layers_[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    KVTIER_ASSIGN_OR_RETURN(L.attn_norm, b.Vector(p + "attn_norm.weight", E, false));
    if (c.recurrent_layer(l)) {
      KVTIER_ASSIGN_OR_RETURN(L.wqkv, b.Matrix(p + "attn_qkv.weight", E, conv_dim));
      KVTIER_ASSIGN_OR_RETURN(L.ssm_gate, b.Matrix(p + "attn_gate.weight", E, v_dim));
      KVTIER_ASSIGN_OR_RETURN(const WeightMatrix conv,
                              b.Matrix(p + "ssm_conv1d.weight", c.ssm_conv_kernel, conv_dim));
      if (conv.type != static_cast<uint32_t>(GgmlType::kF32)) {
        return Status::Unimplemented(f.path() + ": tensor " + p + "ssm_conv1d.weight must be "
                                     "f32, got " + GgmlTypeName(conv.type));
      }
      L.ssm_conv = reinterpret_cast<const float*>(conv.data);
      KVTIER_ASSIGN_OR_RETURN(L.ssm_dt_bias, b.Vector(p + "ssm_dt.bias", c.ssm_v_heads, false));
      KVTIER_ASSIGN_OR_RETURN(L.ssm_a, b.Vector(p + "ssm_a", c.ssm_v_heads, false));
      KVTIER_ASSIGN_OR_RETURN(L.ssm_beta, b.Matrix(p + "ssm_beta.weight", E, c.ssm_v_heads));
      KVTIER_ASSIGN_OR_RETURN(L.ssm_alpha, b.Matrix(p + "ssm_alpha.weight", E, c.ssm_v_heads));
      KVTIER_ASSIGN_OR_RETURN(L.ssm_norm, b.Vector(p + "ssm_norm.weight", c.ssm_state, false));
      KVTIER_ASSIGN_OR_RETURN(L.ssm_out, b.Matrix(p + "ssm_out.weight", v_dim, E));
    } else {
      KVTIER_ASSIGN_OR_RETURN(L.wq, b.Matrix(p + "attn_q.weight", E, 2 * H * D));
      KVTIER_ASSIGN_OR_RETURN(L.wk, b.Matrix(p + "attn_k.weight", E, Hkv * D));
      KVTIER_ASSIGN_OR_RETURN(L.wv, b.Matrix(p + "attn_v.weight", E, Hkv * D));
      KVTIER_ASSIGN_OR_RETURN(L.q_norm, b.Vector(p + "attn_q_norm.weight", D, false));
      KVTIER_ASSIGN_OR_RETURN(L.k_norm, b.Vector(p + "attn_k_norm.weight", D, false));
      KVTIER_ASSIGN_OR_RETURN(L.wo, b.Matrix(p + "attn_output.weight", H * D, E));
    }
    KVTIER_ASSIGN_OR_RETURN(L.ffn_norm, b.Vector(p + "post_attention_norm.weight", E, false));
    KVTIER_ASSIGN_OR_RETURN(L.gate, b.Matrix(p + "ffn_gate.weight", E, F));
    KVTIER_ASSIGN_OR_RETURN(L.up, b.Matrix(p + "ffn_up.weight", E, F));
    KVTIER_ASSIGN_OR_RETURN(L.down, b.Matrix(p + "ffn_down.weight", F, E));
  }
  return Status::OK();
}

}  // namespace kvtier
