// Test models (see test_model.h): shapes and names as llama.cpp's llama / qwen2 / qwen3 / phi3 /
// gemma3 loaders expect them, seeded random weights, a byte-level BPE tokenizer.
//
// Ownership: BuildTestModel returns a writer owning every tensor's bytes.
// Thread safety: pure functions; thread-safe.
#include "kvtier/weights.h"
#include "kvtier/test_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <sstream>

#include "base/half.h"
#include "kvtier/format.h"
#include "kvtier/quant.h"

namespace kvtier {
namespace {

constexpr uint64_t kMaxTensorBytes = 64ull << 30;

// SplitMix64: a small, fast, well-mixed stream; fixed across compilers (unlike std::
// distributions), so a seed gives the same model everywhere.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1].
  double Uniform() { return (static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53; }
};

uint64_t HashName(std::string_view s) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

// n values of normal(0, std) (Box-Muller pairs).
void FillNormal(Rng* rng, float std, float* out, size_t n) {
  for (size_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(rng->Uniform()));
    const double t = 2.0 * std::numbers::pi * rng->Uniform();
    out[i] = static_cast<float>(r * std::cos(t)) * std;
    if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(t)) * std;
  }
}

uint64_t TensorBytes(GgmlType type, uint64_t n_values) {
  const GgmlTypeInfo* t = FindGgmlType(static_cast<uint32_t>(type));
  return n_values / t->block_values * t->block_bytes;
}

// A [ne0, rows] tensor (ggml order) of `type`: random normal(fill, std) rows, or all `fill`
// when std is 0.
Result<std::vector<uint8_t>> MakeTensor(std::string_view name, GgmlType type, uint64_t ne0,
                                        uint64_t rows, float std, float fill, uint64_t seed) {
  Rng rng{seed ^ HashName(name)};
  std::vector<uint8_t> out(static_cast<size_t>(TensorBytes(type, ne0 * rows)));
  // Rows are made in chunks: [chunk_rows, ne0] f32 scratch, then stored or quantized.
  const size_t chunk_rows = static_cast<size_t>(std::max<uint64_t>(1, (1u << 16) / ne0));
  std::vector<float> scratch(chunk_rows * ne0);
  const uint64_t row_bytes = TensorBytes(type, ne0);
  for (uint64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const size_t n_rows = static_cast<size_t>(std::min<uint64_t>(chunk_rows, rows - r0));
    const size_t n = n_rows * ne0;
    if (std != 0.0f) {
      FillNormal(&rng, std, scratch.data(), n);
      if (fill != 0.0f) {  // normal(fill, std): qwen35's ssm_a must stay negative
        for (size_t i = 0; i < n; ++i) scratch[i] += fill;
      }
    } else {
      std::fill(scratch.begin(), scratch.begin() + static_cast<ptrdiff_t>(n), fill);
    }
    uint8_t* dst = out.data() + r0 * row_bytes;
    switch (type) {
      case GgmlType::kF32: std::memcpy(dst, scratch.data(), n * 4); break;
      case GgmlType::kF16:
        for (size_t i = 0; i < n; ++i) {
          const uint16_t h = F32ToF16(scratch[i]);
          std::memcpy(dst + 2 * i, &h, 2);
        }
        break;
      case GgmlType::kBF16:
        for (size_t i = 0; i < n; ++i) {
          const uint16_t h = F32ToBF16(scratch[i]);
          std::memcpy(dst + 2 * i, &h, 2);
        }
        break;
      case GgmlType::kQ8_0:
      case GgmlType::kQ4_0:
        KVTIER_RETURN_IF_ERROR(QuantizeRows(type == GgmlType::kQ8_0 ? Format::Q8_0()
                                                                    : Format::Q4_0(),
                                            DType::kF32, scratch.data(), n_rows, ne0, dst));
        break;
      default:  // a src/weights type (q4_K, iq4_xs, ...): kvtier's own quantizers
        KVTIER_RETURN_IF_ERROR(
            QuantizeWeightRows(static_cast<uint32_t>(type), scratch.data(), n_rows, ne0, dst));
        break;
    }
  }
  return out;
}

uint32_t FileType(GgmlType t) {  // llama.cpp's llama_ftype
  switch (t) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ4_0: return 2;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kBF16: return 32;
    case GgmlType::kQ4_1: return 3;
    case GgmlType::kQ5_0: return 8;
    case GgmlType::kQ5_1: return 9;
    case GgmlType::kQ2_K: return 10;
    case GgmlType::kQ3_K: return 11;  // Q3_K_S: all q3_K
    case GgmlType::kQ4_K: return 14;  // Q4_K_S
    case GgmlType::kQ5_K: return 16;  // Q5_K_S
    case GgmlType::kQ6_K: return 18;
    case GgmlType::kIQ4_NL: return 25;
    case GgmlType::kIQ4_XS: return 30;
    default: return 0;
  }
}

std::string RangeError(const char* flag, uint64_t lo, uint64_t hi, uint64_t got) {
  std::ostringstream m;
  m << flag << ": expected " << lo << ".." << hi << ", got " << got;
  return m.str();
}

struct TensorSpec {
  std::string name;
  uint64_t ne0, rows;
  bool weight;  // in the weight type (else f32)
  float std, fill;
};

// qwen35 (llama.cpp's src/models/qwen35.cpp): every full_attn_interval-th layer is gated full
// attention (attn_q holds query then gate per head), the others Gated DeltaNet with
// state_size = head_dim, group_count (k heads) = kv_heads, time_step_rank (v heads) = heads.
// post_attention_norm is the norm before the FFN (no ffn_norm).
void Qwen35LayerTensors(const TestModelConfig& c, uint32_t l, std::vector<TensorSpec>* out) {
  std::vector<TensorSpec>& t = *out;
  const float kStd = c.weight_std;
  const uint64_t q = uint64_t{c.heads} * c.head_dim, kv = uint64_t{c.kv_heads} * c.head_dim;
  const std::string p = std::string("blk.") + std::to_string(l) + ".";
  t.push_back({p + "attn_norm.weight", c.hidden, 1, false, 0, 1.0f});
  if ((l + 1) % c.full_attn_interval == 0) {
    t.push_back({p + "attn_q.weight", c.hidden, 2 * q, true, kStd, 0});
    t.push_back({p + "attn_k.weight", c.hidden, kv, true, kStd, 0});
    t.push_back({p + "attn_v.weight", c.hidden, kv, true, kStd, 0});
    t.push_back({p + "attn_q_norm.weight", c.head_dim, 1, false, 0, 1.0f});
    t.push_back({p + "attn_k_norm.weight", c.head_dim, 1, false, 0, 1.0f});
    t.push_back({p + "attn_output.weight", q, c.hidden, true, kStd, 0});
  } else {
    const uint64_t S = c.ssm_state ? c.ssm_state : c.head_dim;
    const uint64_t hk = c.ssm_k_heads ? c.ssm_k_heads : c.kv_heads;
    const uint64_t hv = c.ssm_v_heads ? c.ssm_v_heads : c.heads;
    const uint64_t key_dim = hk * S, value_dim = hv * S, conv_dim = 2 * key_dim + value_dim;
    t.push_back({p + "attn_qkv.weight", c.hidden, conv_dim, true, kStd, 0});
    t.push_back({p + "attn_gate.weight", c.hidden, value_dim, true, kStd, 0});
    t.push_back({p + "ssm_conv1d.weight", c.ssm_conv_kernel, conv_dim, false, 0.3f, 0});
    t.push_back({p + "ssm_dt.bias", hv, 1, false, 0.5f, 0});
    t.push_back({p + "ssm_a", hv, 1, false, 0.2f, -0.7f});  // -exp(A_log) < 0
    t.push_back({p + "ssm_beta.weight", c.hidden, hv, true, kStd, 0});
    t.push_back({p + "ssm_alpha.weight", c.hidden, hv, true, kStd, 0});
    t.push_back({p + "ssm_norm.weight", S, 1, false, 0, 1.0f});
    t.push_back({p + "ssm_out.weight", value_dim, c.hidden, true, kStd, 0});
  }
  t.push_back({p + "post_attention_norm.weight", c.hidden, 1, false, 0, 1.0f});
  t.push_back({p + "ffn_gate.weight", c.hidden, c.ffn, true, kStd, 0});
  t.push_back({p + "ffn_up.weight", c.hidden, c.ffn, true, kStd, 0});
  t.push_back({p + "ffn_down.weight", c.ffn, c.hidden, true, kStd, 0});
}

std::vector<TensorSpec> Tensors(const TestModelConfig& c) {
  const uint64_t q = uint64_t{c.heads} * c.head_dim, kv = uint64_t{c.kv_heads} * c.head_dim;
  const float kStd = c.weight_std;
  const bool phi3 = c.arch == "phi3", gemma3 = c.arch == "gemma3";
  std::vector<TensorSpec> t;
  t.push_back({"token_embd.weight", c.hidden, c.vocab, true, kStd, 0});
  for (uint32_t l = 0; l < c.layers; ++l) {
    const std::string p = std::string("blk.") + std::to_string(l) + ".";
    if (c.arch == "qwen35") {
      Qwen35LayerTensors(c, l, &t);
      continue;
    }
    t.push_back({p + "attn_norm.weight", c.hidden, 1, false, 0, 1.0f});
    if (phi3) {
      t.push_back({p + "attn_qkv.weight", c.hidden, q + 2 * kv, true, kStd, 0});
    } else {
      t.push_back({p + "attn_q.weight", c.hidden, q, true, kStd, 0});
      t.push_back({p + "attn_k.weight", c.hidden, kv, true, kStd, 0});
      t.push_back({p + "attn_v.weight", c.hidden, kv, true, kStd, 0});
    }
    if (c.arch == "qwen2") {
      t.push_back({p + "attn_q.bias", q, 1, false, kStd, 0});
      t.push_back({p + "attn_k.bias", kv, 1, false, kStd, 0});
      t.push_back({p + "attn_v.bias", kv, 1, false, kStd, 0});
    }
    if (c.arch == "qwen3" || gemma3) {
      t.push_back({p + "attn_q_norm.weight", c.head_dim, 1, false, 0, 1.0f});
      t.push_back({p + "attn_k_norm.weight", c.head_dim, 1, false, 0, 1.0f});
    }
    t.push_back({p + "attn_output.weight", q, c.hidden, true, kStd, 0});
    if (gemma3) t.push_back({p + "post_attention_norm.weight", c.hidden, 1, false, 0, 1.0f});
    t.push_back({p + "ffn_norm.weight", c.hidden, 1, false, 0, 1.0f});
    if (phi3) {
      t.push_back({p + "ffn_up.weight", c.hidden, 2 * uint64_t{c.ffn}, true, kStd, 0});
    } else {
      t.push_back({p + "ffn_gate.weight", c.hidden, c.ffn, true, kStd, 0});
      t.push_back({p + "ffn_up.weight", c.hidden, c.ffn, true, kStd, 0});
    }
    t.push_back({p + "ffn_down.weight", c.ffn, c.hidden, true, kStd, 0});
    if (gemma3) t.push_back({p + "post_ffw_norm.weight", c.hidden, 1, false, 0, 1.0f});
  }
  t.push_back({"output_norm.weight", c.hidden, 1, false, 0, 1.0f});
  if (!c.tied) t.push_back({"output.weight", c.hidden, c.vocab, true, kStd, 0});
  return t;
}

constexpr const char* kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace

Result<GgmlType> ParseTestModelWeightType(std::string_view name) {
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                     GgmlType::kQ4_0}) {
    if (GgmlTypeName(static_cast<uint32_t>(t)) == name) return t;
  }
  return Status::InvalidArgument(std::string("--weight-type: expected f32, f16, bf16, q8_0 or q4_0, got '") +
                                 std::string(name) + "'");
}

Status ValidateTestModelConfig(const TestModelConfig& c) {
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "phi3" &&
      c.arch != "gemma3" && c.arch != "qwen35") {
    return Status::InvalidArgument(
        std::string("--arch: expected llama, qwen2, qwen3, phi3, gemma3 or qwen35, got '") +
        c.arch + "'");
  }
  if (c.arch == "qwen35" && (c.head_dim % 8 != 0 || c.full_attn_interval == 0 ||
                             c.ssm_conv_kernel < 2 || c.ssm_conv_kernel > 16)) {
    return Status::InvalidArgument("qwen35: --head-dim must be a multiple of 8 (rotary quarter "
                                   "in sections), full_attn_interval >= 1, conv kernel 2..16");
  }
  if (c.arch == "qwen35") {
    const uint32_t hk = c.ssm_k_heads ? c.ssm_k_heads : c.kv_heads;
    const uint32_t hv = c.ssm_v_heads ? c.ssm_v_heads : c.heads;
    if (hk == 0 || hv % hk != 0) {
      return Status::InvalidArgument("qwen35: --ssm-v-heads " + std::to_string(hv) +
                                     " must be a multiple of --ssm-k-heads " +
                                     std::to_string(hk));
    }
  }
  if (c.arch == "phi3" && uint64_t{c.heads} * c.head_dim != c.hidden) {
    return Status::InvalidArgument("--heads x --head-dim: phi3 needs " +
                                   std::to_string(uint64_t{c.heads} * c.head_dim) +
                                   " = --hidden " + std::to_string(c.hidden) +
                                   " (llama.cpp's phi3 loader)");
  }
  if (c.sliding_window > c.ctx || c.swa_period > 1024) {
    return Status::InvalidArgument("--window: expected 0.." + std::to_string(c.ctx) +
                                   " and --swa-period 0..1024");
  }
  if (!(c.weight_std > 0.0f) || !(c.weight_std < 100.0f)) {
    return Status::InvalidArgument("--weight-std: expected a number in (0, 100)");
  }
  struct Check {
    const char* flag;
    uint64_t v, lo, hi;
  };
  const Check checks[] = {{"--hidden", c.hidden, 1, 65536},   {"--layers", c.layers, 1, 1024},
                          {"--heads", c.heads, 1, 1024},      {"--kv-heads", c.kv_heads, 1, 1024},
                          {"--head-dim", c.head_dim, 1, 4096}, {"--ffn", c.ffn, 1, 1u << 20},
                          {"--vocab", c.vocab, 259, 1u << 22}, {"--ctx", c.ctx, 1, 1u << 24}};
  for (const Check& k : checks) {
    if (k.v < k.lo || k.v > k.hi) return Status::InvalidArgument(RangeError(k.flag, k.lo, k.hi, k.v));
  }
  if (c.heads % c.kv_heads != 0) {
    return Status::InvalidArgument(std::string("--kv-heads: ") + std::to_string(c.kv_heads) +
                                   " does not divide --heads " + std::to_string(c.heads));
  }
  if (!(c.rope_theta > 0.0) || !std::isfinite(c.rope_theta)) {
    return Status::InvalidArgument("--rope-theta: expected a positive number");
  }
  if (!(c.rms_eps > 0.0) || !std::isfinite(c.rms_eps)) {
    return Status::InvalidArgument("rms_eps: expected a positive number");
  }
  const GgmlTypeInfo* wt = FindGgmlType(static_cast<uint32_t>(c.weight_type));
  if (wt == nullptr || !CheckWeightType(static_cast<uint32_t>(c.weight_type)).ok()) {
    return Status::InvalidArgument("--weight-type: expected f32, f16, bf16, q8_0 or q4_0");
  }
  if (wt->block_values > 1) {
    const struct {
      const char* what;
      uint64_t v;
    } rows[] = {{"--hidden", c.hidden},
                {"--heads x --head-dim", uint64_t{c.heads} * c.head_dim},
                {"--ffn", c.ffn}};
    for (const auto& r : rows) {
      if (r.v % wt->block_values != 0) {
        std::ostringstream m;
        m << r.what << ": " << r.v << " is not a multiple of " << wt->block_values
          << ", the block size of --weight-type " << wt->name;
        return Status::InvalidArgument(m.str());
      }
    }
  }
  if (TestModelTensorBytes(c) > kMaxTensorBytes) {
    std::ostringstream m;
    m << "the model would take " << TestModelTensorBytes(c) << " bytes of weights; the limit is "
      << kMaxTensorBytes;
    return Status::InvalidArgument(m.str());
  }
  return Status::OK();
}

uint64_t TestModelTensorBytes(const TestModelConfig& c) {
  uint64_t total = 0;
  for (const TensorSpec& t : Tensors(c)) {
    total += TensorBytes(t.weight ? c.weight_type : GgmlType::kF32, t.ne0 * t.rows);
  }
  return total;
}

std::vector<std::string> ByteLevelBpeTokens(std::vector<uint8_t>* bytes) {
  // Bytes that print as themselves come first in their own order ('!'..'~', U+00A1..U+00AC,
  // U+00AE..U+00FF); every other byte b takes code point 256 + (its rank among those).
  std::vector<uint32_t> order, code;
  bool printable[256] = {};
  for (uint32_t b = 0; b < 256; ++b) {
    printable[b] = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
    if (printable[b]) {
      order.push_back(b);
      code.push_back(b);
    }
  }
  uint32_t extra = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    if (!printable[b]) {
      order.push_back(b);
      code.push_back(256 + extra++);
    }
  }
  std::vector<std::string> out;
  out.reserve(256);
  if (bytes != nullptr) bytes->clear();
  for (size_t i = 0; i < 256; ++i) {
    const uint32_t cp = code[i];
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {  // < 0x800: two bytes
      s.push_back(static_cast<char>(0xc0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
    out.push_back(std::move(s));
    if (bytes != nullptr) bytes->push_back(static_cast<uint8_t>(order[i]));
  }
  return out;
}

void SetTestModelMetadata(const TestModelConfig& c, GgufWriter* out) {
  GgufWriter& w = *out;
  const std::string& a = c.arch;
  w.SetString("general.architecture", a);
  // llama.cpp's vocabulary loader looks up "</s>" in any model whose name holds "phi3", which
  // this tokenizer lacks: the phi3 default name avoids "phi3" and "phi-3".
  const std::string def_name = a == "phi3" ? "kvtier-test-p3" : "kvtier-test-" + a;
  w.SetString("general.name", c.name.empty() ? def_name : c.name);
  w.SetUint32("general.file_type", FileType(c.weight_type));
  if (WeightBlockValues(static_cast<uint32_t>(c.weight_type)) > 1) {
    w.SetUint32("general.quantization_version", 2);
  }
  w.SetUint32(a + ".vocab_size", c.vocab);
  w.SetUint32(a + ".context_length", c.ctx);
  w.SetUint32(a + ".embedding_length", c.hidden);
  w.SetUint32(a + ".block_count", c.layers);
  w.SetUint32(a + ".feed_forward_length", c.ffn);
  w.SetUint32(a + ".attention.head_count", c.heads);
  w.SetUint32(a + ".attention.head_count_kv", c.kv_heads);
  w.SetUint32(a + ".attention.key_length", c.head_dim);
  w.SetUint32(a + ".attention.value_length", c.head_dim);
  w.SetUint32(a + ".rope.dimension_count", a == "qwen35" ? c.head_dim / 4 : c.head_dim);
  if (a == "qwen35") {  // partial rotary (a quarter), text-only multi-section RoPE
    const int32_t half = static_cast<int32_t>(c.head_dim / 8), third = half / 3;
    w.SetInt32Array(a + ".rope.dimension_sections", {half - 2 * third, third, third, 0});
    w.SetUint32(a + ".full_attention_interval", c.full_attn_interval);
    w.SetUint32(a + ".ssm.conv_kernel", c.ssm_conv_kernel);
    const uint32_t S = c.ssm_state ? c.ssm_state : c.head_dim;
    const uint32_t hv = c.ssm_v_heads ? c.ssm_v_heads : c.heads;
    w.SetUint32(a + ".ssm.state_size", S);
    w.SetUint32(a + ".ssm.group_count", c.ssm_k_heads ? c.ssm_k_heads : c.kv_heads);
    w.SetUint32(a + ".ssm.time_step_rank", hv);
    w.SetUint32(a + ".ssm.inner_size", hv * S);
  }
  w.SetFloat32(a + ".rope.freq_base", static_cast<float>(c.rope_theta));
  w.SetFloat32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_eps));
  if (a == "gemma3" && c.sliding_window > 0) {
    w.SetUint32(a + ".attention.sliding_window", c.sliding_window);
    w.SetUint32(a + ".attention.sliding_window_pattern", c.swa_period);
    w.SetFloat32(a + ".rope.freq_base_swa", static_cast<float>(c.rope_theta_swa));
  }
  if (a == "gemma3" && c.final_softcap > 0.0) {
    w.SetFloat32(a + ".final_logit_softcapping", static_cast<float>(c.final_softcap));
  }
}

Result<GgufWriter> BuildTestModel(const TestModelConfig& c) {
  KVTIER_RETURN_IF_ERROR(ValidateTestModelConfig(c));
  GgufWriter w;
  const std::string& a = c.arch;
  SetTestModelMetadata(c, &w);

  std::vector<std::string> tokens = ByteLevelBpeTokens();
  std::vector<int32_t> types(256, 1);  // normal
  const uint32_t first_special = c.vocab - 3;
  for (uint32_t i = 256; i < first_special; ++i) {
    tokens.push_back(std::string("<|filler_") + std::to_string(i) + "|>");
    types.push_back(c.text_fillers ? 4 : 3);  // user-defined : control
  }
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.emplace_back(s);
    types.push_back(3);
  }
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", a == "llama" ? "llama-bpe" : "qwen2");
  w.SetStringArray("tokenizer.ggml.tokens", std::move(tokens));
  w.SetInt32Array("tokenizer.ggml.token_type", std::move(types));
  w.SetStringArray("tokenizer.ggml.merges", {});
  w.SetUint32("tokenizer.ggml.bos_token_id", first_special);
  w.SetUint32("tokenizer.ggml.eos_token_id", first_special);
  w.SetUint32("tokenizer.ggml.padding_token_id", first_special);
  w.SetBool("tokenizer.ggml.add_bos_token", a == "llama");
  if (a != "llama") w.SetString("tokenizer.chat_template", kChatMl);

  for (const TensorSpec& t : Tensors(c)) {
    const GgmlType type = t.weight ? c.weight_type : GgmlType::kF32;
    KVTIER_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                            MakeTensor(t.name, type, t.ne0, t.rows, t.std, t.fill, c.seed));
    std::vector<uint64_t> shape = {t.ne0};
    if (t.rows > 1 || t.weight) shape.push_back(t.rows);
    KVTIER_RETURN_IF_ERROR(w.AddTensor(t.name, type, std::move(shape), std::move(bytes)));
  }
  return w;
}

Status WriteTestModel(const TestModelConfig& c, const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(GgufWriter w, BuildTestModel(c));
  return w.WriteFile(path);
}

}  // namespace kvtier
