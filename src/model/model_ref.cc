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

void Norm(Vec& x, const Vec& w, size_t rows, size_t n, double eps) {
  for (size_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (size_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
    for (size_t i = 0; i < n; ++i) x[r * n + i] *= inv * w[i];
  }
}

void RopeRef(Vec& x, size_t n, size_t heads, const ModelConfig& c, const Vec* factors) {
  const size_t D = c.head_dim, half = c.rope_dims / 2;
  for (size_t t = 0; t < n; ++t) {
    for (size_t h = 0; h < heads; ++h) {
      double* v = x.data() + (t * heads + h) * D;
      for (size_t i = 0; i < half; ++i) {
        double theta = double(t) * double(c.rope_pos_scale) *
                       std::pow(double(c.rope_theta), -2.0 * double(i) / double(c.rope_dims));
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
    KVTIER_ASSIGN_OR_RETURN(Vec q, Apply(f, p + "attn_q.weight", xb, n));  // [n, H, D]
    KVTIER_ASSIGN_OR_RETURN(Vec k, Apply(f, p + "attn_k.weight", xb, n));  // [n, Hkv, D]
    KVTIER_ASSIGN_OR_RETURN(Vec v, Apply(f, p + "attn_v.weight", xb, n));  // [n, Hkv, D]
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
    RopeRef(q, n, H, c, has_factors ? &factors : nullptr);
    RopeRef(k, n, Hkv, c, has_factors ? &factors : nullptr);
    KVTIER_RETURN_IF_ERROR(ThroughFormat(k, n * Hkv, D, k_format));
    KVTIER_RETURN_IF_ERROR(ThroughFormat(v, n * Hkv, D, v_format));
    Vec att(n * H * D, 0.0);  // [n, H, D]
    const double scale = 1.0 / std::sqrt(double(D));
    for (size_t t = 0; t < n; ++t) {
      for (size_t h = 0; h < H; ++h) {
        const size_t kh = h / (H / Hkv);
        Vec s(t + 1);
        double mx = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double d = 0.0;
          for (size_t i = 0; i < D; ++i) d += q[(t * H + h) * D + i] * k[(j * Hkv + kh) * D + i];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (size_t j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (size_t j = 0; j <= t; ++j) {
          for (size_t i = 0; i < D; ++i) {
            att[(t * H + h) * D + i] += s[j] / sum * v[(j * Hkv + kh) * D + i];
          }
        }
      }
    }
    KVTIER_ASSIGN_OR_RETURN(const Vec o, Apply(f, p + "attn_output.weight", att, n));
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    xb = x;
    KVTIER_ASSIGN_OR_RETURN(const Vec fn, Dense(f, p + "ffn_norm.weight"));
    Norm(xb, fn, n, E, c.rms_eps);
    KVTIER_ASSIGN_OR_RETURN(Vec g, Apply(f, p + "ffn_gate.weight", xb, n));  // [n, F]
    KVTIER_ASSIGN_OR_RETURN(const Vec u, Apply(f, p + "ffn_up.weight", xb, n));
    for (size_t i = 0; i < n * F; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    KVTIER_ASSIGN_OR_RETURN(const Vec d, Apply(f, p + "ffn_down.weight", g, n));
    for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
  }
  KVTIER_ASSIGN_OR_RETURN(const Vec on, Dense(f, "output_norm.weight"));
  Norm(x, on, n, E, c.rms_eps);
  const char* out_name = f.FindTensor("output.weight") != nullptr ? "output.weight"
                                                                   : "token_embd.weight";
  KVTIER_ASSIGN_OR_RETURN(*logits, Apply(f, out_name, x, n));
  if (logits->size() != n * V) return Status::Internal("reference: logits size");
  return Status::OK();
}

}  // namespace kvtier::model
