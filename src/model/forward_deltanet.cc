// qwen35's forward pass for one sequence (Model::ForwardSequence): Gated DeltaNet layers (causal
// conv over the projected q|k|v with its window kept in the state, SiLU, L2-normed q/k, the
// gated delta rule per v head, gated RMSNorm, output projection) and gated full-attention
// layers (q/k RMSNorm, NeoX RoPE on the rotary dims, causal attention over the state's K/V
// rows, output * sigmoid(gate)); SwiGLU FFN after post_attention_norm. The facts come from
// llama.cpp (see arch_qwen35.cc); model_ref's ForwardQwen35Ref is the float64 reference.
// Matrix products use model::MatMul; the DeltaNet conv, gate and delta rule use the Highway
// kernels of deltanet.h (the delta rule over the threads, one (row, v head) per item); the
// sequence path's attention is a plain loop (the batched path uses the fused kernel).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kvtier/quant.h"
#include "kvtier/thread_pool.h"
#include "model/deltanet.h"
#include "model/matmul.h"
#include "model/model_internal.h"
#include "model/ops.h"

namespace kvtier {
namespace {

float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
float Softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

}  // namespace

Status Model::DeltaNetMixer(uint32_t l, const float* xb, std::span<const uint32_t> n,
                            std::span<HybridSeqState* const> states, float* y,
                            ThreadPool* pool) const {
  const ModelConfig& c = cfg_;
  const Layer& W = layers_[l];
  size_t T = 0;
  for (uint32_t ni : n) T += ni;
  const size_t S = c.ssm_state, Hk = c.ssm_k_heads, Hv = c.ssm_v_heads, B = n.size();
  const size_t K = c.ssm_conv_kernel, k_dim = Hk * S, v_dim = Hv * S, C = 2 * k_dim + v_dim;
  // The projections of every row's tokens at once; the recurrences row by row.
  std::vector<float> proj(T * C);                              // [T, C]
  std::vector<float> z(T * v_dim), beta(T * Hv), alpha(T * Hv);
  KVTIER_RETURN_IF_ERROR(model::MatMul(W.wqkv, xb, T, proj.data(), pool));
  KVTIER_RETURN_IF_ERROR(model::MatMul(W.ssm_gate, xb, T, z.data(), pool));
  KVTIER_RETURN_IF_ERROR(model::MatMul(W.ssm_beta, xb, T, beta.data(), pool));
  KVTIER_RETURN_IF_ERROR(model::MatMul(W.ssm_alpha, xb, T, alpha.data(), pool));
  // Per row: the causal conv over its window and new tokens, SiLU, L2-normed q and k heads.
  std::vector<float> conv(T * C);       // [T, C]
  std::vector<size_t> first(B + 1, 0);  // row r's tokens are [first[r], first[r + 1])
  std::vector<float> qkv;               // [K - 1 + Tr, C]
  for (size_t r = 0; r < B; ++r) {
    const size_t Tr = n[r], t0 = first[r];
    first[r + 1] = t0 + Tr;
    std::vector<float>& window = states[r]->conv[l];   // [K - 1, C]
    std::vector<float>& M = states[r]->delta[l];       // [Hv, S, S]
    if (window.empty()) window.assign((K - 1) * C, 0.0f);
    if (M.empty()) M.assign(Hv * S * S, 0.0f);
    qkv.resize((K - 1 + Tr) * C);
    std::memcpy(qkv.data(), window.data(), window.size() * sizeof(float));
    std::memcpy(qkv.data() + (K - 1) * C, proj.data() + t0 * C, Tr * C * sizeof(float));
    std::memcpy(window.data(), qkv.data() + Tr * C, window.size() * sizeof(float));
    model::CausalConvSilu(qkv.data(), W.ssm_conv, Tr, C, K, conv.data() + t0 * C);
    for (size_t t = t0; t < t0 + Tr; ++t) {
      for (size_t hd = 0; hd < 2 * Hk; ++hd) {  // L2-norm q and k heads
        float* v = conv.data() + t * C + hd * S;
        float ss = 0.0f;
        for (size_t i = 0; i < S; ++i) ss += v[i] * v[i];
        const float inv = 1.0f / std::max(std::sqrt(ss), c.rms_eps);
        for (size_t i = 0; i < S; ++i) v[i] *= inv;
      }
    }
  }
  // The gated delta rule: every (row, v head) on its own state, over the threads; each
  // token one fused pass over the head's [S, S] state (model::DeltaRuleStep).
  std::vector<float> o(T * v_dim);  // [T, Hv, S]
  const float scale = 1.0f / std::sqrt(static_cast<float>(S));
  auto heads = [&](size_t begin, size_t end) {
    for (size_t item = begin; item < end; ++item) {
      const size_t r = item / Hv, hv = item % Hv, hk = hv % Hk;
      float* m = states[r]->delta[l].data() + hv * S * S;  // m[j * S + i]: value j, key i
      for (size_t tt = first[r]; tt < first[r + 1]; ++tt) {
        const float* q = conv.data() + tt * C + hk * S;
        const float* k = conv.data() + tt * C + k_dim + hk * S;
        const float* v = conv.data() + tt * C + 2 * k_dim + hv * S;
        const float decay =
            std::exp(Softplus(alpha[tt * Hv + hv] + W.ssm_dt_bias[hv]) * W.ssm_a[hv]);
        const float b = Sigmoid(beta[tt * Hv + hv]);
        model::DeltaRuleStep(m, S, q, k, v, decay, b, scale, o.data() + tt * v_dim + hv * S);
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(B * Hv, 0, heads);
  } else {
    heads(0, B * Hv);
  }
  model::RmsNorm(o.data(), W.ssm_norm, T * Hv, S, c.rms_eps, o.data());
  model::MulSilu(o.data(), z.data(), T * v_dim);
  return model::MatMul(W.ssm_out, o.data(), T, y, pool);
}

Status Model::ForwardSequence(HybridSeqState* st, std::span<const int32_t> tokens,
                              bool all_logits, float* logits, ThreadPool* pool) const {
  const ModelConfig& c = cfg_;
  if (c.arch != ModelArch::kQwen35) {
    return Status::InvalidArgument("ForwardSequence: only hybrid (qwen35) models; " +
                                   std::string(ModelArchName(c.arch)) + " runs through Forward");
  }
  if (tokens.empty()) return Status::InvalidArgument("ForwardSequence: no tokens");
  for (size_t j = 0; j < tokens.size(); ++j) {
    if (tokens[j] < 0 || static_cast<uint32_t>(tokens[j]) >= c.n_vocab) {
      return Status::InvalidArgument("ForwardSequence: token " + std::to_string(j) + " has id " +
                                     std::to_string(tokens[j]) + ", outside the vocabulary [0, " +
                                     std::to_string(c.n_vocab) + ")");
    }
  }
  const size_t L = c.n_layers;
  if (st->conv.empty() && st->n_past == 0) {
    st->conv.resize(L);
    st->delta.resize(L);
    st->k.resize(L);
    st->v.resize(L);
  }
  if (st->conv.size() != L || st->delta.size() != L || st->k.size() != L || st->v.size() != L) {
    return Status::InvalidArgument("ForwardSequence: the state has " +
                                   std::to_string(st->conv.size()) + " layers, the model " +
                                   std::to_string(L));
  }
  const size_t T = tokens.size(), E = c.n_embd, F = c.n_ff, D = c.head_dim;
  const size_t H = c.n_heads, Hkv = c.n_kv_heads;

  std::vector<float> x(T * E), xb(T * E), y(T * E);  // [T, E]
  KVTIER_ASSIGN_OR_RETURN(const Format fmt, WeightRowFormat(tok_embd_.type));
  for (size_t t = 0; t < T; ++t) {
    KVTIER_RETURN_IF_ERROR(DequantizeRows(fmt, tok_embd_.data + size_t(tokens[t]) *
                                                   tok_embd_.row_bytes,
                                          1, E, DType::kF32, x.data() + t * E));
  }
  std::vector<int32_t> pos(T);
  for (size_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(st->n_past + t);
  model::RopeParams rope;
  rope.head_dim = c.head_dim;
  rope.n_dims = c.rope_dims;
  rope.theta_base = c.rope_theta;
  rope.neox = true;
  rope.pos_scale = c.rope_pos_scale;

  std::vector<float> gate(T * F), up(T * F);  // [T, F]
  for (size_t l = 0; l < L; ++l) {
    const Layer& W = layers_[l];
    model::RmsNorm(x.data(), W.attn_norm, T, E, c.rms_eps, xb.data());
    if (c.recurrent_layer(static_cast<uint32_t>(l))) {
      const uint32_t n1 = static_cast<uint32_t>(T);
      KVTIER_RETURN_IF_ERROR(DeltaNetMixer(static_cast<uint32_t>(l), xb.data(), {&n1, 1},
                                           {&st, 1}, y.data(), pool));
    } else {
      std::vector<float> qg(T * H * 2 * D), q(T * H * D), g(T * H * D);  // [T, H, (2)D]
      std::vector<float> k(T * Hkv * D), v(T * Hkv * D);                  // [T, Hkv, D]
      KVTIER_RETURN_IF_ERROR(model::MatMul(W.wq, xb.data(), T, qg.data(), pool));
      KVTIER_RETURN_IF_ERROR(model::MatMul(W.wk, xb.data(), T, k.data(), pool));
      KVTIER_RETURN_IF_ERROR(model::MatMul(W.wv, xb.data(), T, v.data(), pool));
      for (size_t r = 0; r < T * H; ++r) {
        std::memcpy(q.data() + r * D, qg.data() + r * 2 * D, D * sizeof(float));
        std::memcpy(g.data() + r * D, qg.data() + r * 2 * D + D, D * sizeof(float));
      }
      model::RmsNorm(q.data(), W.q_norm, T * H, D, c.rms_eps, q.data());
      model::RmsNorm(k.data(), W.k_norm, T * Hkv, D, c.rms_eps, k.data());
      model::Rope(q.data(), T, H, pos, rope);
      model::Rope(k.data(), T, Hkv, pos, rope);
      std::vector<float>& kc = st->k[l];
      std::vector<float>& vc = st->v[l];
      kc.insert(kc.end(), k.begin(), k.end());
      vc.insert(vc.end(), v.begin(), v.end());
      std::vector<float> att(T * H * D, 0.0f), w(st->n_past + T);
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      for (size_t t = 0; t < T; ++t) {
        const size_t n_ctx = st->n_past + t + 1;
        for (size_t hd = 0; hd < H; ++hd) {
          const size_t kh = hd / (H / Hkv);
          const float* qr = q.data() + (t * H + hd) * D;
          float mx = -INFINITY;
          for (size_t s = 0; s < n_ctx; ++s) {
            const float* kr = kc.data() + (s * Hkv + kh) * D;
            float dot = 0.0f;
            for (size_t i = 0; i < D; ++i) dot += qr[i] * kr[i];
            w[s] = dot * scale;
            mx = std::max(mx, w[s]);
          }
          float sum = 0.0f;
          for (size_t s = 0; s < n_ctx; ++s) sum += (w[s] = std::exp(w[s] - mx));
          float* out = att.data() + (t * H + hd) * D;
          for (size_t s = 0; s < n_ctx; ++s) {
            const float* vr = vc.data() + (s * Hkv + kh) * D;
            const float p = w[s] / sum;
            for (size_t i = 0; i < D; ++i) out[i] += p * vr[i];
          }
          const float* gr = g.data() + (t * H + hd) * D;
          for (size_t i = 0; i < D; ++i) out[i] *= Sigmoid(gr[i]);
        }
      }
      KVTIER_RETURN_IF_ERROR(model::MatMul(W.wo, att.data(), T, y.data(), pool));
    }
    for (size_t i = 0; i < T * E; ++i) x[i] += y[i];
    KVTIER_RETURN_IF_ERROR(
        FeedForward(W, T, x.data(), xb.data(), gate.data(), up.data(), nullptr, pool));
  }
  st->n_past += static_cast<uint32_t>(T);
  const uint32_t n1 = static_cast<uint32_t>(T);
  return OutputLogits(x.data(), {&n1, 1}, all_logits, xb.data(), logits, pool);
}

}  // namespace kvtier
