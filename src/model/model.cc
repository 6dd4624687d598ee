// Model loading: hyper-parameters from GGUF metadata and every tensor bound (name, shape, type
// checked) to views into the file's mapping. The forward pass is in forward.cc.
#include <cstring>
#include <string>

#include "kvtier/weights.h"
#include "model/matmul.h"
#include "model/model_internal.h"

namespace kvtier {

std::string_view ModelArchName(ModelArch a) {
  switch (a) {
    case ModelArch::kLlama: return "llama";
    case ModelArch::kQwen2: return "qwen2";
    case ModelArch::kQwen3: return "qwen3";
    case ModelArch::kPhi3: return "phi3";
    case ModelArch::kGemma3: return "gemma3";
    case ModelArch::kQwen35: return "qwen35";
  }
  return "unknown";
}

KvShape ModelConfig::kv_shape() const {
  KvShape s;
  s.n_layers = full_attn_interval > 0 ? n_layers / full_attn_interval : n_layers;
  s.n_kv_heads = n_kv_heads;
  s.head_dim = head_dim;
  return s;
}

Model::~Model() = default;

namespace {

std::string ShapeString(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Reads hyper-parameters; `file` names the model in errors.
class ConfigReader {
 public:
  ConfigReader(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

  Result<uint32_t> U32(const std::string& key, bool required, uint32_t fallback) const {
    const std::string full = arch_ + "." + key;
    if (!f_.Has(full)) {
      if (!required) return fallback;
      return Status::InvalidArgument(f_.path() + ": missing metadata key " + full);
    }
    auto v = f_.GetUint(full);
    if (!v.ok()) return Status::InvalidArgument(f_.path() + ": " + v.status().message());
    if (*v == 0 || *v > (1u << 30)) {
      return Status::InvalidArgument(f_.path() + ": " + full + " = " + std::to_string(*v) +
                                     " is out of range [1, 2^30]");
    }
    return static_cast<uint32_t>(*v);
  }
  Result<float> F32(const std::string& key, float fallback) const {
    const std::string full = arch_ + "." + key;
    if (!f_.Has(full)) return fallback;
    auto v = f_.GetFloat(full);
    if (!v.ok()) return Status::InvalidArgument(f_.path() + ": " + v.status().message());
    if (!(*v > 0.0) || *v > 1e12) {
      return Status::InvalidArgument(f_.path() + ": " + full + " = " + std::to_string(*v) +
                                     " must be positive and finite");
    }
    return static_cast<float>(*v);
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Model::fingerprint(): what makes K/V differ between two models. Hashing reads every
// weight byte once (about 10 ms per 100 MB), pages the mapping in ahead of the first pass.
ModelFingerprint Fingerprint(const ModelConfig& c, const GgufFile& f) {
  Hasher128 h;
  h.Update("kvtier-model-v1", 15);
  for (uint32_t v : {static_cast<uint32_t>(c.arch), c.n_vocab, c.n_embd, c.n_layers, c.n_heads,
                     c.n_kv_heads, c.head_dim, c.n_ff, FloatBits(c.rope_theta),
                     uint32_t{c.rope_neox}, c.rope_dims, FloatBits(c.rope_pos_scale),
                     FloatBits(c.rms_eps), uint32_t{c.qk_norm}, uint32_t{c.qkv_bias}}) {
    h.U32(v);
  }
  if (c.arch == ModelArch::kQwen35) {
    for (uint32_t v : {c.full_attn_interval, c.ssm_conv_kernel, c.ssm_state, c.ssm_k_heads,
                       c.ssm_v_heads}) {
      h.U32(v);
    }
  }
  if (c.arch == ModelArch::kPhi3 || c.arch == ModelArch::kGemma3) {  // older keys stay as they were
    for (uint32_t v : {c.sliding_window, c.swa_period, FloatBits(c.rope_theta_swa),
                       FloatBits(c.attn_scale), FloatBits(c.embd_scale), uint32_t{c.post_norms},
                       static_cast<uint32_t>(c.ffn_act)}) {
      h.U32(v);
    }
  }
  h.U64(f.tensors().size());
  for (const GgufTensor& t : f.tensors()) {
    h.U64(t.name.size());
    h.Update(t.name.data(), t.name.size());
    h.U32(t.type);
    h.U32(static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) h.U64(d);
    h.U64(t.n_bytes);
    h.Update(t.data, t.n_bytes);
  }
  return h.Digest();
}

Result<ModelConfig> ReadConfig(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.GetString("general.architecture");
  if (!arch.ok()) {
    return Status::InvalidArgument(f.path() + ": general.architecture: " +
                                   arch.status().message());
  }
  if (*arch == "llama") {
    c.arch = ModelArch::kLlama;
  } else if (*arch == "qwen2") {
    c.arch = ModelArch::kQwen2;
    c.rope_neox = true;
    c.qkv_bias = true;
  } else if (*arch == "qwen3") {
    c.arch = ModelArch::kQwen3;
    c.rope_neox = true;
    c.qk_norm = true;
  } else if (*arch == "phi3") {
    c.arch = ModelArch::kPhi3;
  } else if (*arch == "gemma3") {
    c.arch = ModelArch::kGemma3;
  } else if (*arch == "qwen35") {
    c.arch = ModelArch::kQwen35;
    c.rope_neox = true;  // text positions: llama.cpp's interleaved M-RoPE = NeoX on rope_dims
    c.qk_norm = true;
  } else {
    return Status::Unimplemented(f.path() + ": architecture '" + *arch + "' is not supported " +
                                 "(supported: " + std::string(model::kSupportedArchs) + ")");
  }
  auto name = f.GetString("general.name");
  c.name = name.ok() ? *name : f.path();
  ConfigReader r(f, *arch);
  KVTIER_ASSIGN_OR_RETURN(c.n_embd, r.U32("embedding_length", true, 0));
  KVTIER_ASSIGN_OR_RETURN(c.n_layers, r.U32("block_count", true, 0));
  KVTIER_ASSIGN_OR_RETURN(c.n_ff, r.U32("feed_forward_length", true, 0));
  KVTIER_ASSIGN_OR_RETURN(c.n_heads, r.U32("attention.head_count", true, 0));
  KVTIER_ASSIGN_OR_RETURN(c.n_kv_heads, r.U32("attention.head_count_kv", false, c.n_heads));
  KVTIER_ASSIGN_OR_RETURN(c.head_dim, r.U32("attention.key_length", false,
                                            c.n_embd / c.n_heads));
  KVTIER_ASSIGN_OR_RETURN(const uint32_t v_len,
                          r.U32("attention.value_length", false, c.head_dim));
  KVTIER_ASSIGN_OR_RETURN(c.n_ctx_train, r.U32("context_length", false, 4096));
  KVTIER_ASSIGN_OR_RETURN(c.rope_theta, r.F32("rope.freq_base", 10000.0f));
  KVTIER_ASSIGN_OR_RETURN(c.rope_dims, r.U32("rope.dimension_count", false, c.head_dim));
  KVTIER_ASSIGN_OR_RETURN(c.rms_eps, r.F32("attention.layer_norm_rms_epsilon", 1e-5f));
  const std::string p = f.path() + ": ";
  if (v_len != c.head_dim) {
    return Status::Unimplemented(p + "value_length " + std::to_string(v_len) +
                                 " differs from key_length " + std::to_string(c.head_dim));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return Status::InvalidArgument(p + "attention.head_count " + std::to_string(c.n_heads) +
                                   " is not a multiple of head_count_kv " +
                                   std::to_string(c.n_kv_heads));
  }
  if (c.rope_dims > c.head_dim || c.rope_dims % 2 != 0) {
    return Status::InvalidArgument(p + "rope.dimension_count " + std::to_string(c.rope_dims) +
                                   " must be even and at most head_dim " +
                                   std::to_string(c.head_dim));
  }
  const std::string scaling_key = *arch + ".rope.scaling.type";
  if (f.Has(scaling_key)) {
    auto type = f.GetString(scaling_key);
    if (!type.ok()) return Status::InvalidArgument(p + type.status().message());
    if (*type == "linear") {
      KVTIER_ASSIGN_OR_RETURN(const float factor, r.F32("rope.scaling.factor", 1.0f));
      c.rope_pos_scale = 1.0f / factor;
    } else if (*type != "none") {
      return Status::Unimplemented(p + "rope scaling '" + *type +
                                   "' is not supported (none, linear; Llama 3 scaling comes "
                                   "as rope_freqs.weight)");
    }
  }
  KVTIER_RETURN_IF_ERROR(model::ReadFamilyConfig(f, *arch, &c));
  if (c.arch == ModelArch::kQwen35) KVTIER_RETURN_IF_ERROR(model::ReadQwen35Config(f, &c));
  return c;
}

}  // namespace

Result<WeightMatrix> ModelBinder::Matrix(const std::string& name, uint32_t n_in,
                                         uint32_t n_out) const {
  const GgufTensor* t = f_.FindTensor(name);
  if (t == nullptr) return Status::InvalidArgument(f_.path() + ": missing tensor " + name);
  if (t->shape.size() != 2 || t->shape[0] != n_in || t->shape[1] != n_out) {
    return Status::InvalidArgument(f_.path() + ": tensor " + name + " has shape " +
                                   ShapeString(t->shape) + ", expected [" +
                                   std::to_string(n_in) + ", " + std::to_string(n_out) + "]");
  }
  if (Status st = CheckWeightType(t->type); !st.ok()) {
    return Status::Unimplemented(f_.path() + ": unsupported tensor type " +
                                 GgmlTypeName(t->type) + " in tensor " + name + ": " +
                                 st.message());
  }
  const Result<size_t> row_bytes = WeightRowBytes(t->type, n_in);
  if (!row_bytes.ok()) {
    return Status::InvalidArgument(f_.path() + ": tensor " + name + ": " +
                                   row_bytes.status().message());
  }
  WeightMatrix w;
  w.type = t->type;
  w.n_in = n_in;
  w.n_out = n_out;
  w.row_bytes = *row_bytes;
  w.data = t->data;
  if (t->n_bytes != *row_bytes * n_out) {
    return Status::Corruption(f_.path() + ": tensor " + name + " holds " +
                              std::to_string(t->n_bytes) + " bytes, not " +
                              std::to_string(n_out) + " rows of " + std::to_string(*row_bytes) +
                              " bytes of " + GgmlTypeName(t->type));
  }
  *bytes_ += t->n_bytes;
  return w;
}

Result<const float*> ModelBinder::Vector(const std::string& name, uint32_t n,
                                         bool optional) const {
  const GgufTensor* t = f_.FindTensor(name);
  if (t == nullptr) {
    if (optional) return static_cast<const float*>(nullptr);
    return Status::InvalidArgument(f_.path() + ": missing tensor " + name);
  }
  if (t->shape.size() != 1 || t->shape[0] != n) {
    return Status::InvalidArgument(f_.path() + ": tensor " + name + " has shape " +
                                   ShapeString(t->shape) + ", expected [" + std::to_string(n) +
                                   "]");
  }
  if (t->type != static_cast<uint32_t>(GgmlType::kF32)) {
    return Status::Unimplemented(f_.path() + ": unsupported tensor type " +
                                 GgmlTypeName(t->type) + " in tensor " + name +
                                 " (norms and biases must be f32)");
  }
  if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0) {
    return Status::Corruption(f_.path() + ": tensor " + name + " data is not 4-byte aligned");
  }
  *bytes_ += t->n_bytes;
  return reinterpret_cast<const float*>(t->data);
}

Result<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::Open(path));
  return FromGguf(std::shared_ptr<const GgufFile>(std::move(f)));
}

Result<std::unique_ptr<Model>> Model::FromGguf(std::shared_ptr<const GgufFile> file) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  KVTIER_ASSIGN_OR_RETURN(m->cfg_, ReadConfig(*m->file_));
  KVTIER_RETURN_IF_ERROR(m->Bind());
  m->fingerprint_ = Fingerprint(m->cfg_, *m->file_);
  return m;
}

Status Model::Bind() {
  const GgufFile& f = *file_;
  ModelBinder b(f, &weight_bytes_);
  const GgufTensor* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->shape.size() != 2) {
    return Status::InvalidArgument(f.path() + ": missing 2-D tensor token_embd.weight");
  }
  if (embd->shape[1] == 0 || embd->shape[1] > (1u << 24)) {
    return Status::InvalidArgument(f.path() + ": token_embd.weight has " +
                                   std::to_string(embd->shape[1]) + " rows (vocabulary size)");
  }
  cfg_.n_vocab = static_cast<uint32_t>(embd->shape[1]);
  const uint32_t E = cfg_.n_embd, V = cfg_.n_vocab, D = cfg_.head_dim;
  const uint32_t H = cfg_.n_heads, Hkv = cfg_.n_kv_heads, F = cfg_.n_ff;
  KVTIER_ASSIGN_OR_RETURN(tok_embd_, b.Matrix("token_embd.weight", E, V));
  cfg_.tied_embeddings = f.FindTensor("output.weight") == nullptr;
  if (cfg_.tied_embeddings) {
    output_ = tok_embd_;
  } else {
    KVTIER_ASSIGN_OR_RETURN(output_, b.Matrix("output.weight", E, V));
  }
  KVTIER_ASSIGN_OR_RETURN(output_norm_, b.Vector("output_norm.weight", E, false));
  KVTIER_ASSIGN_OR_RETURN(rope_freq_factors_, b.Vector("rope_freqs.weight", cfg_.rope_dims / 2,
                                                       true));
  layers_.resize(cfg_.n_layers);
  if (cfg_.arch == ModelArch::kQwen35) return BindQwen35();
  for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
    Layer& L = layers_[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    KVTIER_ASSIGN_OR_RETURN(L.attn_norm, b.Vector(p + "attn_norm.weight", E, false));
    if (f.FindTensor(p + "attn_qkv.weight") != nullptr) {  // fused (phi3): rows q, k, v
      KVTIER_ASSIGN_OR_RETURN(L.wqkv, b.Matrix(p + "attn_qkv.weight", E, (H + 2 * Hkv) * D));
    } else {
      KVTIER_ASSIGN_OR_RETURN(L.wq, b.Matrix(p + "attn_q.weight", E, H * D));
      KVTIER_ASSIGN_OR_RETURN(L.wk, b.Matrix(p + "attn_k.weight", E, Hkv * D));
      KVTIER_ASSIGN_OR_RETURN(L.wv, b.Matrix(p + "attn_v.weight", E, Hkv * D));
    }
    KVTIER_ASSIGN_OR_RETURN(L.wo, b.Matrix(p + "attn_output.weight", H * D, E));
    KVTIER_ASSIGN_OR_RETURN(L.bq, b.Vector(p + "attn_q.bias", H * D, !cfg_.qkv_bias));
    KVTIER_ASSIGN_OR_RETURN(L.bk, b.Vector(p + "attn_k.bias", Hkv * D, !cfg_.qkv_bias));
    KVTIER_ASSIGN_OR_RETURN(L.bv, b.Vector(p + "attn_v.bias", Hkv * D, !cfg_.qkv_bias));
    KVTIER_ASSIGN_OR_RETURN(L.q_norm, b.Vector(p + "attn_q_norm.weight", D, !cfg_.qk_norm));
    KVTIER_ASSIGN_OR_RETURN(L.k_norm, b.Vector(p + "attn_k_norm.weight", D, !cfg_.qk_norm));
    KVTIER_ASSIGN_OR_RETURN(L.ffn_norm, b.Vector(p + "ffn_norm.weight", E, false));
    if (cfg_.arch == ModelArch::kPhi3) {  // one up matrix: rows gate then up
      KVTIER_ASSIGN_OR_RETURN(L.up, b.Matrix(p + "ffn_up.weight", E, 2 * F));
    } else {
      KVTIER_ASSIGN_OR_RETURN(L.gate, b.Matrix(p + "ffn_gate.weight", E, F));
      KVTIER_ASSIGN_OR_RETURN(L.up, b.Matrix(p + "ffn_up.weight", E, F));
    }
    if (cfg_.post_norms) {
      KVTIER_ASSIGN_OR_RETURN(L.attn_post_norm, b.Vector(p + "post_attention_norm.weight", E,
                                                          false));
      KVTIER_ASSIGN_OR_RETURN(L.ffn_post_norm, b.Vector(p + "post_ffw_norm.weight", E, false));
    }
    KVTIER_ASSIGN_OR_RETURN(L.down, b.Matrix(p + "ffn_down.weight", F, E));
  }
  return Status::OK();
}

}  // namespace kvtier
