// float64 reference forward pass; see model_ref.h.
#include "model/model_ref.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kvtier/quant.h"
#include "kvtier/weights.h"
#include "model/matmul.h"

namespace kvtier::model {
namespace {

using Vec = std::vector<double>;

}  // namespace

// Rows of a tensor as doubles: [n_out][n_in] (a 1-D tensor is one row).
Result<Vec> Dense(const GgufFile& f, const std::string& name, size_t* n_in, size_t* n_out) {
  const GgufTensor* t = f.FindTensor(name);
  if (t == nullptr) return Status::NotFound("reference: no tensor " + name);
  *n_in = t->shape[0];
  *n_out = t->shape.size() > 1 ? t->shape[1] : 1;
  std::vector<float> tmp(*n_in * *n_out);
  KVTIER_RETURN_IF_ERROR(DequantizeWeightRowsRef(t->type, t->data, *n_out, *n_in, tmp.data()));
  return Vec(tmp.begin(), tmp.end());
}

Result<Vec> Dense(const GgufFile& f, const std::string& name) {
  size_t a = 0, b = 0;
  return Dense(f, name, &a, &b);
}

// y[t] = W x[t]:  x [n, n_in] -> [n, n_out]
Result<Vec> Apply(const GgufFile& f, const std::string& name, const Vec& x, size_t n) {
  size_t n_in = 0, n_out = 0;
  KVTIER_ASSIGN_OR_RETURN(const Vec w, Dense(f, name, &n_in, &n_out));
  Vec y(n * n_out, 0.0);
  for (size_t t = 0; t < n; ++t) {
    for (size_t o = 0; o < n_out; ++o) {
      double s = 0.0;
      for (size_t k = 0; k < n_in; ++k) s += w[o * n_in + k] * x[t * n_in + k];
      y[t * n_out + o] = s;
    }
  }
  return y;
}

namespace {

void Norm(Vec& x, const Vec& w, size_t rows, size_t n, double eps) {
  for (size_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (size_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
    for (size_t i = 0; i < n; ++i) x[r * n + i] *= inv * w[i];
  }
}

void RopeRef(Vec& x, size_t n, size_t heads, const ModelConfig& c, double theta_base,
             double pos_scale, const Vec* factors) {
  const size_t D = c.head_dim, half = c.rope_dims / 2;
  for (size_t t = 0; t < n; ++t) {
    for (size_t h = 0; h < heads; ++h) {
      double* v = x.data() + (t * heads + h) * D;
      for (size_t i = 0; i < half; ++i) {
        double theta = double(t) * pos_scale *
                       std::pow(theta_base, -2.0 * double(i) / double(c.rope_dims));
        if (factors != nullptr) theta /= (*factors)[i];
        const size_t a = c.rope_neox ? i : 2 * i, b = c.rope_neox ? i + half : 2 * i + 1;
        const double x0 = v[a], x1 = v[b];
        v[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
        v[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
      }
    }
  }
}

// Rounds each head_dim row the way the cache stores it.
Status ThroughFormat(Vec& x, size_t rows, size_t D, const Format& fmt) {
  std::vector<float> f32(x.begin(), x.end());
  std::vector<uint8_t> enc(rows * fmt.row_bytes(D));
  KVTIER_RETURN_IF_ERROR(QuantizeRowsRef(fmt, DType::kF32, f32.data(), rows, D, enc.data()));
  KVTIER_RETURN_IF_ERROR(DequantizeRowsRef(fmt, enc.data(), rows, D, DType::kF32, f32.data()));
  std::copy(f32.begin(), f32.end(), x.begin());
  return Status::OK();
}

}  // namespace

Status ForwardRef(const GgufFile& f, const ModelConfig& c, std::span<const int32_t> tokens,
                  const Format& k_format, const Format& v_format, std::vector<double>* logits) {
  const size_t n = tokens.size(), E = c.n_embd, D = c.head_dim, H = c.n_heads;
  const size_t Hkv = c.n_kv_heads, V = c.n_vocab, F = c.n_ff;
  KVTIER_ASSIGN_OR_RETURN(const Vec embd, Dense(f, "token_embd.weight"));
  Vec x(n * E);  // [n, E]
  for (size_t t = 0; t < n; ++t) {
    std::copy_n(embd.begin() + size_t(tokens[t]) * E, E, x.begin() + t * E);
  }
  for (double& e : x) e *= double(c.embd_scale);
  Vec factors;
  const bool has_factors = f.FindTensor("rope_freqs.weight") != nullptr;
  if (has_factors) {
    KVTIER_ASSIGN_OR_RETURN(factors, Dense(f, "rope_freqs.weight"));
  }
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Vec xb = x;
    KVTIER_ASSIGN_OR_RETURN(const Vec an, Dense(f, p + "attn_norm.weight"));
    Norm(xb, an, n, E, c.rms_eps);
    Vec q, k, v;  // [n, H, D], [n, Hkv, D], [n, Hkv, D]
    if (f.FindTensor(p + "attn_qkv.weight") != nullptr) {
      KVTIER_ASSIGN_OR_RETURN(const Vec qkv, Apply(f, p + "attn_qkv.weight", xb, n));
      const size_t W = (H + 2 * Hkv) * D;
      for (size_t t = 0; t < n; ++t) {
        const auto row = qkv.begin() + ptrdiff_t(t * W);
        q.insert(q.end(), row, row + ptrdiff_t(H * D));
        k.insert(k.end(), row + ptrdiff_t(H * D), row + ptrdiff_t((H + Hkv) * D));
        v.insert(v.end(), row + ptrdiff_t((H + Hkv) * D), row + ptrdiff_t(W));
      }
    } else {
      KVTIER_ASSIGN_OR_RETURN(q, Apply(f, p + "attn_q.weight", xb, n));
      KVTIER_ASSIGN_OR_RETURN(k, Apply(f, p + "attn_k.weight", xb, n));
      KVTIER_ASSIGN_OR_RETURN(v, Apply(f, p + "attn_v.weight", xb, n));
    }
    const size_t window = c.layer_window(l);
    if (c.qkv_bias) {
      KVTIER_ASSIGN_OR_RETURN(const Vec bq, Dense(f, p + "attn_q.bias"));
      KVTIER_ASSIGN_OR_RETURN(const Vec bk, Dense(f, p + "attn_k.bias"));
      KVTIER_ASSIGN_OR_RETURN(const Vec bv, Dense(f, p + "attn_v.bias"));
      for (size_t i = 0; i < q.size(); ++i) q[i] += bq[i % (H * D)];
      for (size_t i = 0; i < k.size(); ++i) k[i] += bk[i % (Hkv * D)];
      for (size_t i = 0; i < v.size(); ++i) v[i] += bv[i % (Hkv * D)];
    }
    if (c.qk_norm) {
      KVTIER_ASSIGN_OR_RETURN(const Vec qn, Dense(f, p + "attn_q_norm.weight"));
      KVTIER_ASSIGN_OR_RETURN(const Vec kn, Dense(f, p + "attn_k_norm.weight"));
      Norm(q, qn, n * H, D, c.rms_eps);
      Norm(k, kn, n * Hkv, D, c.rms_eps);
    }
    const double theta_base = window > 0 ? c.rope_theta_swa : c.rope_theta;
    const double pos_scale = window > 0 ? 1.0 : c.rope_pos_scale;
    RopeRef(q, n, H, c, theta_base, pos_scale, has_factors ? &factors : nullptr);
    RopeRef(k, n, Hkv, c, theta_base, pos_scale, has_factors ? &factors : nullptr);
    KVTIER_RETURN_IF_ERROR(ThroughFormat(k, n * Hkv, D, k_format));
    KVTIER_RETURN_IF_ERROR(ThroughFormat(v, n * Hkv, D, v_format));
    Vec att(n * H * D, 0.0);  // [n, H, D]
    const double scale = c.attn_scale > 0.0f ? double(c.attn_scale) : 1.0 / std::sqrt(double(D));
    for (size_t t = 0; t < n; ++t) {
      const size_t j0 = window > 0 && t + 1 > window ? t + 1 - window : 0;
      for (size_t h = 0; h < H; ++h) {
        const size_t kh = h / (H / Hkv);
        Vec s(t + 1, 0.0);
        double mx = -1e300;
        for (size_t j = j0; j <= t; ++j) {
          double d = 0.0;
          for (size_t i = 0; i < D; ++i) d += q[(t * H + h) * D + i] * k[(j * Hkv + kh) * D + i];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (size_t j = j0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (size_t j = j0; j <= t; ++j) {
          for (size_t i = 0; i < D; ++i) {
            att[(t * H + h) * D + i] += s[j] / sum * v[(j * Hkv + kh) * D + i];
          }
        }
      }
    }
    KVTIER_ASSIGN_OR_RETURN(Vec o, Apply(f, p + "attn_output.weight", att, n));
    if (c.post_norms) {
      KVTIER_ASSIGN_OR_RETURN(const Vec pn, Dense(f, p + "post_attention_norm.weight"));
      Norm(o, pn, n, E, c.rms_eps);
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    xb = x;
    KVTIER_ASSIGN_OR_RETURN(const Vec fn, Dense(f, p + "ffn_norm.weight"));
    Norm(xb, fn, n, E, c.rms_eps);
    Vec g, u;  // [n, F] each
    if (f.FindTensor(p + "ffn_gate.weight") == nullptr) {  // phi3: rows gate then up
      KVTIER_ASSIGN_OR_RETURN(const Vec gu, Apply(f, p + "ffn_up.weight", xb, n));
      for (size_t t = 0; t < n; ++t) {
        const auto row = gu.begin() + ptrdiff_t(t * 2 * F);
        g.insert(g.end(), row, row + ptrdiff_t(F));
        u.insert(u.end(), row + ptrdiff_t(F), row + ptrdiff_t(2 * F));
      }
    } else {
      KVTIER_ASSIGN_OR_RETURN(g, Apply(f, p + "ffn_gate.weight", xb, n));
      KVTIER_ASSIGN_OR_RETURN(u, Apply(f, p + "ffn_up.weight", xb, n));
    }
    for (size_t i = 0; i < n * F; ++i) {
      if (c.ffn_act == FfnActivation::kGeluTanh) {
        const double a = std::sqrt(2.0 / 3.14159265358979323846) *
                         (g[i] + 0.044715 * g[i] * g[i] * g[i]);
        g[i] = 0.5 * g[i] * (1.0 + std::tanh(a)) * u[i];
      } else {
        g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      }
    }
    KVTIER_ASSIGN_OR_RETURN(Vec d, Apply(f, p + "ffn_down.weight", g, n));
    if (c.post_norms) {
      KVTIER_ASSIGN_OR_RETURN(const Vec pn, Dense(f, p + "post_ffw_norm.weight"));
      Norm(d, pn, n, E, c.rms_eps);
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
  }
  KVTIER_ASSIGN_OR_RETURN(const Vec on, Dense(f, "output_norm.weight"));
  Norm(x, on, n, E, c.rms_eps);
  const char* out_name = f.FindTensor("output.weight") != nullptr ? "output.weight"
                                                                   : "token_embd.weight";
  KVTIER_ASSIGN_OR_RETURN(*logits, Apply(f, out_name, x, n));
  if (logits->size() != n * V) return Status::Internal("reference: logits size");
  if (c.final_softcap > 0.0f) {
    const double cap = c.final_softcap;
    for (double& z : *logits) z = cap * std::tanh(z / cap);
  }
  return Status::OK();
}

}  // namespace kvtier::model
