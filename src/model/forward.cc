// The forward pass: embeddings, per layer RMSNorm -> q/k/v -> (bias, q/k norm) -> RoPE ->
// append K/V to the batch cache -> fused attention over the paged cache -> output projection
// -> residual -> RMSNorm -> SwiGLU FFN -> residual; final norm and logits. The families' extras
// (arch.cc) slot in: fused qkv / gate-up matrices (phi3); embedding scale, per-layer window and
// RoPE base, post-norms, GeGLU and the logit soft-cap (gemma3).
// Every row's new tokens are laid out one row after another ("flat", T = sum n_i tokens).
// The FFN half of a layer (Model::FeedForward) and the final norm and logits
// (Model::OutputLogits) serve qwen35's paths too (forward_hybrid.cc, forward_deltanet.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kvtier/thread_pool.h"
#include "kvtier/attention.h"
#include "kvtier/quant.h"
#include "kvtier/weights.h"
#include "model/matmul.h"
#include "model/model_internal.h"
#include "model/ops.h"

namespace kvtier {

namespace {

Status CheckCall(const ModelConfig& c, const BatchCache& cache,
                 std::span<const std::span<const int32_t>> tokens) {
  const KvShape want = c.kv_shape();
  const KvShape& got = cache.pool()->layout().shape;
  if (got.n_layers != want.n_layers || got.n_kv_heads != want.n_kv_heads ||
      got.head_dim != want.head_dim) {
    return Status::InvalidArgument(
        "forward: the cache's KV shape (layers " + std::to_string(got.n_layers) + ", kv heads " +
        std::to_string(got.n_kv_heads) + ", head_dim " + std::to_string(got.head_dim) +
        ") differs from the model's (" + std::to_string(want.n_layers) + ", " +
        std::to_string(want.n_kv_heads) + ", " + std::to_string(want.head_dim) + ")");
  }
  if (tokens.size() != cache.batch_size() || tokens.empty()) {
    return Status::InvalidArgument("forward: " + std::to_string(tokens.size()) +
                                   " token lists for a batch of " +
                                   std::to_string(cache.batch_size()) + " rows");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].empty()) {
      return Status::InvalidArgument("forward: row " + std::to_string(i) + " has no new tokens");
    }
    if (!cache.row(i).complete()) {
      return Status::InvalidArgument("forward: row " + std::to_string(i) +
                                     " has layers of different lengths");
    }
    for (size_t j = 0; j < tokens[i].size(); ++j) {
      const int32_t id = tokens[i][j];
      if (id < 0 || static_cast<uint32_t>(id) >= c.n_vocab) {
        return Status::InvalidArgument("forward: row " + std::to_string(i) + " token " +
                                       std::to_string(j) + " has id " + std::to_string(id) +
                                       ", outside the vocabulary [0, " +
                                       std::to_string(c.n_vocab) + ")");
      }
    }
  }
  return Status::OK();
}

// Copies flat rows [T, width] into a right-padded [B, max_n, width] buffer.
void PadRows(const float* flat, std::span<const uint32_t> n, uint32_t max_n, size_t width,
             float* padded) {
  size_t src = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    std::memcpy(padded + i * max_n * width, flat + src * width, n[i] * width * sizeof(float));
    src += n[i];
  }
}

// True when p[0..n) holds a NaN or an infinity (all exponent bits set: exact whatever the
// floating-point flags). One pass over the residual per layer: about 1/n_embd of the layer's
// matrix work.
bool AnyNonFinite(const float* p, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad != 0;
}

Status NonFinite(const std::string& where) {
  return Status::Internal("non-finite values (NaN or Inf) first appear " + where +
                          ": the model's weights may hold NaN or Inf (kvtier check-model "
                          "scans them)");
}

}  // namespace

namespace model {

Status PlanForwardRows(BatchCache& cache, std::span<const std::span<const int32_t>> tokens,
                       ForwardRows* rows) {
  rows->n.resize(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    rows->n[i] = static_cast<uint32_t>(tokens[i].size());
    rows->max_n = std::max(rows->max_n, rows->n[i]);
    for (uint32_t j = 0; j < rows->n[i]; ++j) {
      rows->pos.push_back(static_cast<int32_t>(cache.offset(i) + j));
    }
  }
  return cache.Reserve(rows->n);
}

}  // namespace model

Status Model::FeedForward(const Layer& L, size_t T, float* x, float* xb, float* gate, float* up,
                          float* fused, ThreadPool* pool) const {
  const ModelConfig& c = cfg_;
  const size_t E = c.n_embd, F = c.n_ff;
  model::RmsNorm(x, L.ffn_norm, T, E, c.rms_eps, xb);  // post_attention_norm
  if (L.gate.data == nullptr) {
    // Fused (phi3): each token's row is gate then up.
    if (fused == nullptr) return Status::Internal("FeedForward: a fused gate-up needs scratch");
    KVTIER_RETURN_IF_ERROR(model::MatMul(L.up, xb, T, fused, pool));
    for (size_t t = 0; t < T; ++t) {
      std::memcpy(gate + t * F, fused + t * 2 * F, F * sizeof(float));
      std::memcpy(up + t * F, fused + t * 2 * F + F, F * sizeof(float));
    }
  } else {
    KVTIER_RETURN_IF_ERROR(model::MatMul(L.gate, xb, T, gate, pool));
    KVTIER_RETURN_IF_ERROR(model::MatMul(L.up, xb, T, up, pool));
  }
  if (c.ffn_act == FfnActivation::kGeluTanh) {
    model::GeGlu(gate, up, T * F);
  } else {
    model::SwiGlu(gate, up, T * F);
  }
  KVTIER_RETURN_IF_ERROR(model::MatMul(L.down, gate, T, xb, pool));
  if (L.ffn_post_norm != nullptr) model::RmsNorm(xb, L.ffn_post_norm, T, E, c.rms_eps, xb);
  for (size_t i = 0; i < T * E; ++i) x[i] += xb[i];
  return Status::OK();
}

Status Model::OutputLogits(const float* x, std::span<const uint32_t> n, bool all_logits, float* xb,
                           float* logits, ThreadPool* pool) const {
  const size_t E = cfg_.n_embd;
  size_t n_out = 0;
  if (all_logits) {
    for (uint32_t ni : n) n_out += ni;
    model::RmsNorm(x, output_norm_, n_out, E, cfg_.rms_eps, xb);
  } else {
    size_t last = 0;  // each row's last token
    for (size_t i = 0; i < n.size(); ++i) {
      last += n[i];
      model::RmsNorm(x + (last - 1) * E, output_norm_, 1, E, cfg_.rms_eps, xb + i * E);
    }
    n_out = n.size();
  }
  return model::MatMul(output_, xb, n_out, logits, pool);
}

Status Model::Forward(BatchCache& cache, std::span<const std::span<const int32_t>> tokens,
                      bool all_logits, float* logits, ThreadPool* pool) const {
  if (cfg_.arch == ModelArch::kQwen35) {
    return Status::InvalidArgument(
        "forward: qwen35 (hybrid Gated DeltaNet) needs each row's recurrent state: call the "
        "Forward overload with states");
  }
  KVTIER_RETURN_IF_ERROR(CheckCall(cfg_, cache, tokens));
  const ModelConfig& c = cfg_;
  const size_t B = tokens.size();
  const size_t E = c.n_embd, D = c.head_dim, H = c.n_heads, Hkv = c.n_kv_heads, F = c.n_ff;
  model::ForwardRows rows;
  KVTIER_RETURN_IF_ERROR(model::PlanForwardRows(cache, tokens, &rows));
  const std::vector<uint32_t>& n = rows.n;  // new tokens per row
  const std::vector<int32_t>& pos = rows.pos;  // [T] RoPE positions
  const uint32_t max_n = rows.max_n;
  const size_t T = pos.size();

  std::vector<float> x(T * E), xb(T * E);                  // [T, E]
  std::vector<float> q(T * H * D), att(T * H * D);         // [T, H, D]
  std::vector<float> k(T * Hkv * D), v(T * Hkv * D);       // [T, Hkv, D]
  std::vector<float> gate(T * F), up(T * F);               // [T, F]
  std::vector<float> fused;  // [T, (H + 2 Hkv) D] (fused qkv) or [T, 2F] (fused gate-up)
  if (!layers_.empty() && (layers_[0].wqkv.data != nullptr || layers_[0].gate.data == nullptr)) {
    fused.resize(T * std::max((H + 2 * Hkv) * D, 2 * F));
  }
  const bool ragged = T != B * max_n;
  std::vector<float> k_pad, v_pad;                         // [B, max_n, Hkv, D] when ragged
  if (ragged) {
    k_pad.assign(B * max_n * Hkv * D, 0.0f);
    v_pad.assign(B * max_n * Hkv * D, 0.0f);
  }

  {
    size_t t = 0;
    for (size_t i = 0; i < B; ++i) {
      for (int32_t id : tokens[i]) {
        KVTIER_RETURN_IF_ERROR(DequantizeWeightRows(
            tok_embd_.type, tok_embd_.data + size_t(id) * tok_embd_.row_bytes, 1, E,
            x.data() + t * E));
        ++t;
      }
    }
  }
  if (c.embd_scale != 1.0f) {
    for (float& e : x) e *= c.embd_scale;
  }
  if (AnyNonFinite(x.data(), T * E)) return NonFinite("in the token embeddings (token_embd)");

  model::RopeParams rope;
  rope.head_dim = c.head_dim;
  rope.n_dims = c.rope_dims;
  rope.theta_base = c.rope_theta;
  rope.neox = c.rope_neox;
  rope.pos_scale = c.rope_pos_scale;
  rope.freq_factors = rope_freq_factors_;

  AttentionParams ap;
  ap.n_heads = c.n_heads;
  ap.scale = c.attn_scale > 0.0f ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(D));

  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const Layer& L = layers_[l];
    ap.window = c.layer_window(l);
    rope.theta_base = ap.window > 0 ? c.rope_theta_swa : c.rope_theta;
    rope.pos_scale = ap.window > 0 ? 1.0f : c.rope_pos_scale;
    model::RmsNorm(x.data(), L.attn_norm, T, E, c.rms_eps, xb.data());
    if (L.wqkv.data != nullptr) {
      const size_t W = (H + 2 * Hkv) * D;
      KVTIER_RETURN_IF_ERROR(model::MatMul(L.wqkv, xb.data(), T, fused.data(), pool));
      for (size_t t = 0; t < T; ++t) {
        const float* row = fused.data() + t * W;
        std::memcpy(q.data() + t * H * D, row, H * D * sizeof(float));
        std::memcpy(k.data() + t * Hkv * D, row + H * D, Hkv * D * sizeof(float));
        std::memcpy(v.data() + t * Hkv * D, row + (H + Hkv) * D, Hkv * D * sizeof(float));
      }
    } else {
      KVTIER_RETURN_IF_ERROR(model::MatMul(L.wq, xb.data(), T, q.data(), pool));
      KVTIER_RETURN_IF_ERROR(model::MatMul(L.wk, xb.data(), T, k.data(), pool));
      KVTIER_RETURN_IF_ERROR(model::MatMul(L.wv, xb.data(), T, v.data(), pool));
    }
    if (L.bq != nullptr) {
      model::AddBias(q.data(), L.bq, T, H * D);
      model::AddBias(k.data(), L.bk, T, Hkv * D);
      model::AddBias(v.data(), L.bv, T, Hkv * D);
    }
    if (L.q_norm != nullptr) {
      model::RmsNorm(q.data(), L.q_norm, T * H, D, c.rms_eps, q.data());
      model::RmsNorm(k.data(), L.k_norm, T * Hkv, D, c.rms_eps, k.data());
    }
    model::Rope(q.data(), T, H, pos, rope);
    model::Rope(k.data(), T, Hkv, pos, rope);
    if (ragged) {
      PadRows(k.data(), n, max_n, Hkv * D, k_pad.data());
      PadRows(v.data(), n, max_n, Hkv * D, v_pad.data());
      KVTIER_RETURN_IF_ERROR(
          cache.Append(l, DType::kF32, k_pad.data(), v_pad.data(), max_n, n));
    } else {
      KVTIER_RETURN_IF_ERROR(cache.Append(l, DType::kF32, k.data(), v.data(), max_n));
    }
    KVTIER_ASSIGN_OR_RETURN(const PagedKvView view, cache.View(l));
    KVTIER_RETURN_IF_ERROR(Attention(view, q.data(), n, ap, att.data(), pool));
    KVTIER_RETURN_IF_ERROR(model::MatMul(L.wo, att.data(), T, xb.data(), pool));
    if (L.attn_post_norm != nullptr) {
      model::RmsNorm(xb.data(), L.attn_post_norm, T, E, c.rms_eps, xb.data());
    }
    for (size_t i = 0; i < T * E; ++i) x[i] += xb[i];
    if (AnyNonFinite(x.data(), T * E)) {
      return NonFinite("in layer " + std::to_string(l) + " (blk." + std::to_string(l) +
                       ", after attention)");
    }

    KVTIER_RETURN_IF_ERROR(FeedForward(L, T, x.data(), xb.data(), gate.data(), up.data(),
                                       fused.data(), pool));
    if (AnyNonFinite(x.data(), T * E)) {
      return NonFinite("in layer " + std::to_string(l) + " (blk." + std::to_string(l) +
                       ", after the feed-forward)");
    }
  }

  // Window layers' rows that no later query can attend go back to the pool's OS pages.
  cache.DropOutsideWindow();

  const size_t n_out = all_logits ? T : B;
  KVTIER_RETURN_IF_ERROR(OutputLogits(x.data(), n, all_logits, xb.data(), logits, pool));
  if (c.final_softcap > 0.0f) model::SoftCap(logits, n_out * c.n_vocab, c.final_softcap);
  if (AnyNonFinite(logits, n_out * c.n_vocab)) {
    return NonFinite("in the logits (output_norm / output)");
  }
  return Status::OK();
}

}  // namespace kvtier
