// The newer families' hyper-parameters (see model_internal.h): phi3 and gemma3, with the keys
// and defaults llama.cpp's loaders use (src/models/phi3.cpp, gemma3.cpp; gguf-py constants).
//
// Facts this file encodes (llama.cpp 3f545be):
// - Both use NeoX RoPE (rotate halves).
// - phi3 packs q, k, v into blk.N.attn_qkv.weight (rows q, then k, then v) and gate and up into
//   blk.N.ffn_up.weight (rows gate, then up; silu(gate) * up). llama.cpp ignores phi3's
//   attention.sliding_window (its SWA is disabled), so every phi3 layer is global here too.
// - gemma3: attention.sliding_window (absent or 0: no window layers),
//   attention.sliding_window_pattern (default 6: layer l is a window layer when
//   l % 6 < 5), rope.freq_base_swa (default 10000, no position scaling) for window layers,
//   rope.freq_base (and rope scaling) for global layers; q/k RMSNorm per head before RoPE;
//   post_attention_norm / post_ffw_norm on the attention and FFN outputs before the residual;
//   GeGLU (tanh gelu); token embeddings times sqrt(n_embd); final_logit_softcapping if set;
//   softmax scale 1/sqrt(head_dim), except 1/sqrt(n_embd / n_heads) for the 62-layer (27B)
//   shape. The converter stores gemma's (1 + w) norm weights with the 1 already added, so the
//   norms are plain RMSNorm.
// Thread safety: pure functions.
#include <cmath>
#include <string>

#include "model/model_internal.h"

namespace kvtier {

uint32_t ModelConfig::layer_window(uint32_t l) const {
  if (sliding_window == 0) return 0;
  if (swa_period == 0) return sliding_window;  // llama.cpp: pattern 0 = every layer
  return l % swa_period < swa_period - 1 ? sliding_window : 0;
}

std::vector<uint32_t> ModelConfig::layer_windows() const {
  std::vector<uint32_t> w;
  if (sliding_window == 0 || arch == ModelArch::kQwen35) return w;
  w.resize(n_layers);
  for (uint32_t l = 0; l < n_layers; ++l) w[l] = layer_window(l);
  return w;
}

namespace model {
namespace {

Result<uint32_t> OptU32(const GgufFile& f, const std::string& key, uint32_t fallback) {
  if (!f.Has(key)) return fallback;
  auto v = f.GetUint(key);
  if (!v.ok()) return Status::InvalidArgument(f.path() + ": " + v.status().message());
  if (*v > (1u << 30)) {
    return Status::InvalidArgument(f.path() + ": " + key + " = " + std::to_string(*v) +
                                   " is out of range [0, 2^30]");
  }
  return static_cast<uint32_t>(*v);
}

Result<float> OptF32(const GgufFile& f, const std::string& key, float fallback) {
  if (!f.Has(key)) return fallback;
  auto v = f.GetFloat(key);
  if (!v.ok()) return Status::InvalidArgument(f.path() + ": " + v.status().message());
  if (!(*v >= 0.0) || *v > 1e12) {
    return Status::InvalidArgument(f.path() + ": " + key + " = " + std::to_string(*v) +
                                   " must be non-negative and finite");
  }
  return static_cast<float>(*v);
}

Status RequireKey(const GgufFile& f, const std::string& key) {
  if (f.Has(key)) return Status::OK();
  return Status::InvalidArgument(f.path() + ": missing metadata key " + key);
}

}  // namespace

Status ReadFamilyConfig(const GgufFile& f, const std::string& arch, ModelConfig* c) {
  if (arch == "phi3") {
    KVTIER_RETURN_IF_ERROR(RequireKey(f, "phi3.attention.layer_norm_rms_epsilon"));
    c->rope_neox = true;
    for (const char* t : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
      if (f.FindTensor(t) != nullptr) {
        return Status::Unimplemented(f.path() + ": tensor " + t +
                                     " (phi3 LongRoPE) is not supported yet");
      }
    }
    return Status::OK();
  }
  if (arch != "gemma3") return Status::OK();
  KVTIER_RETURN_IF_ERROR(RequireKey(f, "gemma3.attention.layer_norm_rms_epsilon"));
  c->rope_neox = true;
  c->qk_norm = true;
  c->post_norms = true;
  c->ffn_act = FfnActivation::kGeluTanh;
  c->embd_scale = std::sqrt(static_cast<float>(c->n_embd));
  c->attn_scale = c->n_layers == 62
                      ? 1.0f / std::sqrt(static_cast<float>(c->n_embd / c->n_heads))
                      : 1.0f / std::sqrt(static_cast<float>(c->head_dim));
  KVTIER_ASSIGN_OR_RETURN(c->final_softcap, OptF32(f, "gemma3.final_logit_softcapping", 0.0f));
  KVTIER_ASSIGN_OR_RETURN(c->sliding_window, OptU32(f, "gemma3.attention.sliding_window", 0));
  if (c->sliding_window > 0) {
    KVTIER_ASSIGN_OR_RETURN(c->swa_period,
                            OptU32(f, "gemma3.attention.sliding_window_pattern", 6));
    KVTIER_ASSIGN_OR_RETURN(c->rope_theta_swa, OptF32(f, "gemma3.rope.freq_base_swa", 10000.0f));
    if (!(c->rope_theta_swa > 0.0f)) {
      return Status::InvalidArgument(f.path() + ": gemma3.rope.freq_base_swa must be positive");
    }
  }
  return Status::OK();
}

}  // namespace model
}  // namespace kvtier
