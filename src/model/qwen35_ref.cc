// float64 reference forward of qwen35 (hybrid Gated DeltaNet + gated full attention); see
// model_ref.h and arch_qwen35.cc for the facts taken from llama.cpp. One sequence, recomputed
// from scratch; tensors read from the GGUF by name. Stateless; thread-safe.
#include <algorithm>
#include <cmath>
#include <string>

#include "model/model_ref.h"

namespace kvtier::model {
namespace {

using Vec = std::vector<double>;

// RMSNorm of `rows` rows of n values at x + r * stride.
void Norm(double* x, const Vec& w, size_t rows, size_t n, size_t stride, double eps) {
  for (size_t r = 0; r < rows; ++r) {
    double* v = x + r * stride;
    double ss = 0.0;
    for (size_t i = 0; i < n; ++i) ss += v[i] * v[i];
    const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
    for (size_t i = 0; i < n; ++i) v[i] *= inv * w[i];
  }
}

double Silu(double v) { return v / (1.0 + std::exp(-v)); }
double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double Softplus(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }

// The Gated DeltaNet mixer: h [T, E] -> y [T, E].
Result<Vec> DeltaNet(const GgufFile& f, const ModelConfig& c, const std::string& p, const Vec& h,
                     size_t T) {
  const size_t S = c.ssm_state, Hk = c.ssm_k_heads, Hv = c.ssm_v_heads, K = c.ssm_conv_kernel;
  const size_t k_dim = Hk * S, v_dim = Hv * S, C = 2 * k_dim + v_dim;
  KVTIER_ASSIGN_OR_RETURN(const Vec qkv, Apply(f, p + "attn_qkv.weight", h, T));  // [T, C]
  KVTIER_ASSIGN_OR_RETURN(const Vec z, Apply(f, p + "attn_gate.weight", h, T));   // [T, v_dim]
  KVTIER_ASSIGN_OR_RETURN(const Vec beta, Apply(f, p + "ssm_beta.weight", h, T));  // [T, Hv]
  KVTIER_ASSIGN_OR_RETURN(const Vec alpha, Apply(f, p + "ssm_alpha.weight", h, T));  // [T, Hv]
  KVTIER_ASSIGN_OR_RETURN(const Vec conv_w, Dense(f, p + "ssm_conv1d.weight"));  // [C][K]
  KVTIER_ASSIGN_OR_RETURN(const Vec dt_bias, Dense(f, p + "ssm_dt.bias"));
  KVTIER_ASSIGN_OR_RETURN(const Vec a, Dense(f, p + "ssm_a"));
  KVTIER_ASSIGN_OR_RETURN(const Vec norm_w, Dense(f, p + "ssm_norm.weight"));
  // Causal conv (zero history) then SiLU: conv [T, C].
  Vec conv(T * C, 0.0);
  for (size_t t = 0; t < T; ++t) {
    for (size_t ch = 0; ch < C; ++ch) {
      double s = 0.0;
      for (size_t j = 0; j < K; ++j) {
        const ptrdiff_t src = ptrdiff_t(t) - ptrdiff_t(K - 1) + ptrdiff_t(j);
        if (src >= 0) s += qkv[size_t(src) * C + ch] * conv_w[ch * K + j];
      }
      conv[t * C + ch] = Silu(s);
    }
  }
  // L2-normalise each q and k head: x / max(|x|, eps).
  for (size_t t = 0; t < T; ++t) {
    for (size_t hd = 0; hd < 2 * Hk; ++hd) {
      double* v = conv.data() + t * C + hd * S;
      double ss = 0.0;
      for (size_t i = 0; i < S; ++i) ss += v[i] * v[i];
      const double inv = 1.0 / std::max(std::sqrt(ss), double(c.rms_eps));
      for (size_t i = 0; i < S; ++i) v[i] *= inv;
    }
  }
  // Delta rule per v head with state M [S][S] (M[j][i]: value dim j, key dim i):
  //   M *= exp(g);  d = (v - M k) * beta;  M += d k^T;  o = M q / sqrt(S)
  Vec o(T * v_dim, 0.0);
  const double scale = 1.0 / std::sqrt(double(S));
  for (size_t hv = 0; hv < Hv; ++hv) {
    Vec M(S * S, 0.0), d(S);
    const size_t hk = hv % Hk;
    for (size_t t = 0; t < T; ++t) {
      const double* q = conv.data() + t * C + hk * S;
      const double* k = conv.data() + t * C + k_dim + hk * S;
      const double* v = conv.data() + t * C + 2 * k_dim + hv * S;
      const double g = Softplus(alpha[t * Hv + hv] + dt_bias[hv]) * a[hv];
      const double b = Sigmoid(beta[t * Hv + hv]);
      const double decay = std::exp(g);
      for (double& m : M) m *= decay;
      for (size_t j = 0; j < S; ++j) {
        double s = 0.0;
        for (size_t i = 0; i < S; ++i) s += M[j * S + i] * k[i];
        d[j] = (v[j] - s) * b;
      }
      for (size_t j = 0; j < S; ++j) {
        for (size_t i = 0; i < S; ++i) M[j * S + i] += d[j] * k[i];
      }
      for (size_t j = 0; j < S; ++j) {
        double s = 0.0;
        for (size_t i = 0; i < S; ++i) s += M[j * S + i] * q[i];
        o[t * v_dim + hv * S + j] = s * scale;
      }
    }
  }
  // Gated RMSNorm per head: norm(o) * silu(z).
  Norm(o.data(), norm_w, T * Hv, S, S, c.rms_eps);
  for (size_t i = 0; i < T * v_dim; ++i) o[i] *= Silu(z[i]);
  return Apply(f, p + "ssm_out.weight", o, T);
}

// The gated full-attention mixer: h [T, E] -> y [T, E].
Result<Vec> GatedAttention(const GgufFile& f, const ModelConfig& c, const std::string& p,
                           const Vec& h, size_t T) {
  const size_t D = c.head_dim, H = c.n_heads, Hkv = c.n_kv_heads, half = c.rope_dims / 2;
  KVTIER_ASSIGN_OR_RETURN(const Vec qg, Apply(f, p + "attn_q.weight", h, T));  // [T, H, 2D]
  KVTIER_ASSIGN_OR_RETURN(Vec k, Apply(f, p + "attn_k.weight", h, T));         // [T, Hkv, D]
  KVTIER_ASSIGN_OR_RETURN(const Vec v, Apply(f, p + "attn_v.weight", h, T));   // [T, Hkv, D]
  KVTIER_ASSIGN_OR_RETURN(const Vec qn, Dense(f, p + "attn_q_norm.weight"));
  KVTIER_ASSIGN_OR_RETURN(const Vec kn, Dense(f, p + "attn_k_norm.weight"));
  Vec q(T * H * D), gate(T * H * D);
  for (size_t r = 0; r < T * H; ++r) {
    std::copy_n(qg.begin() + ptrdiff_t(r * 2 * D), D, q.begin() + ptrdiff_t(r * D));
    std::copy_n(qg.begin() + ptrdiff_t(r * 2 * D + D), D, gate.begin() + ptrdiff_t(r * D));
  }
  Norm(q.data(), qn, T * H, D, D, c.rms_eps);
  Norm(k.data(), kn, T * Hkv, D, D, c.rms_eps);
  auto rope = [&](Vec& x, size_t heads) {  // NeoX on the first rope_dims dims
    for (size_t t = 0; t < T; ++t) {
      for (size_t hd = 0; hd < heads; ++hd) {
        double* r = x.data() + (t * heads + hd) * D;
        for (size_t i = 0; i < half; ++i) {
          const double th = double(t) * double(c.rope_pos_scale) *
                            std::pow(double(c.rope_theta), -2.0 * double(i) / double(c.rope_dims));
          const double x0 = r[i], x1 = r[i + half];
          r[i] = x0 * std::cos(th) - x1 * std::sin(th);
          r[i + half] = x0 * std::sin(th) + x1 * std::cos(th);
        }
      }
    }
  };
  rope(q, H);
  rope(k, Hkv);
  Vec att(T * H * D, 0.0), w(T);
  const double scale = 1.0 / std::sqrt(double(D));
  for (size_t t = 0; t < T; ++t) {
    for (size_t hd = 0; hd < H; ++hd) {
      const size_t kh = hd / (H / Hkv);
      double mx = -1e300;
      for (size_t s = 0; s <= t; ++s) {
        double dot = 0.0;
        for (size_t i = 0; i < D; ++i) dot += q[(t * H + hd) * D + i] * k[(s * Hkv + kh) * D + i];
        w[s] = dot * scale;
        mx = std::max(mx, w[s]);
      }
      double sum = 0.0;
      for (size_t s = 0; s <= t; ++s) sum += (w[s] = std::exp(w[s] - mx));
      double* out = att.data() + (t * H + hd) * D;
      for (size_t s = 0; s <= t; ++s) {
        for (size_t i = 0; i < D; ++i) out[i] += w[s] / sum * v[(s * Hkv + kh) * D + i];
      }
      for (size_t i = 0; i < D; ++i) out[i] *= Sigmoid(gate[(t * H + hd) * D + i]);
    }
  }
  return Apply(f, p + "attn_output.weight", att, T);
}

}  // namespace

Status ForwardQwen35Ref(const GgufFile& f, const ModelConfig& c, std::span<const int32_t> tokens,
                        std::vector<double>* logits) {
  if (c.arch != ModelArch::kQwen35) {
    return Status::InvalidArgument("ForwardQwen35Ref: not a qwen35 model");
  }
  const size_t T = tokens.size(), E = c.n_embd, V = c.n_vocab, F = c.n_ff;
  size_t ne0 = 0, rows = 0;
  KVTIER_ASSIGN_OR_RETURN(const Vec embd, Dense(f, "token_embd.weight", &ne0, &rows));
  Vec x(T * E);
  for (size_t t = 0; t < T; ++t) {
    if (tokens[t] < 0 || size_t(tokens[t]) >= rows) {
      return Status::InvalidArgument("ForwardQwen35Ref: token id out of range");
    }
    std::copy_n(embd.begin() + ptrdiff_t(size_t(tokens[t]) * E), E, x.begin() + ptrdiff_t(t * E));
  }
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    KVTIER_ASSIGN_OR_RETURN(const Vec an, Dense(f, p + "attn_norm.weight"));
    Vec h = x;
    Norm(h.data(), an, T, E, E, c.rms_eps);
    Vec y;
    if (c.recurrent_layer(l)) {
      KVTIER_ASSIGN_OR_RETURN(y, DeltaNet(f, c, p, h, T));
    } else {
      KVTIER_ASSIGN_OR_RETURN(y, GatedAttention(f, c, p, h, T));
    }
    for (size_t i = 0; i < T * E; ++i) x[i] += y[i];
    KVTIER_ASSIGN_OR_RETURN(const Vec pn, Dense(f, p + "post_attention_norm.weight"));
    h = x;
    Norm(h.data(), pn, T, E, E, c.rms_eps);
    KVTIER_ASSIGN_OR_RETURN(Vec g, Apply(f, p + "ffn_gate.weight", h, T));
    KVTIER_ASSIGN_OR_RETURN(const Vec u, Apply(f, p + "ffn_up.weight", h, T));
    for (size_t i = 0; i < T * F; ++i) g[i] = Silu(g[i]) * u[i];
    KVTIER_ASSIGN_OR_RETURN(const Vec d, Apply(f, p + "ffn_down.weight", g, T));
    for (size_t i = 0; i < T * E; ++i) x[i] += d[i];
  }
  KVTIER_ASSIGN_OR_RETURN(const Vec on, Dense(f, "output_norm.weight"));
  Norm(x.data(), on, T, E, E, c.rms_eps);
  const std::string out = f.FindTensor("output.weight") != nullptr ? "output.weight"
                                                                   : "token_embd.weight";
  KVTIER_ASSIGN_OR_RETURN(*logits, Apply(f, out, x, T));
  if (logits->size() != T * V) return Status::Internal("ForwardQwen35Ref: logits size");
  return Status::OK();
}

}  // namespace kvtier::model
