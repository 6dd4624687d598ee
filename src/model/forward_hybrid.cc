// The batched forward pass of hybrid (qwen35) models: Model::Forward with per-row recurrent
// states. Every layer's matrix products run over all rows' new tokens at once (T = sum n_i,
// rows one after another); Gated DeltaNet layers then run each row's recurrence on its own
// state (DeltaNetMixer, forward_deltanet.cc), full-attention layers append K/V to the batch
// cache (cache layer (l + 1) / interval - 1) and attend over the paged view with kvtier's
// fused kernel. Also the state snapshots (SaveState / LoadState, state_format).
// The same arithmetic as ForwardSequence (whose float64 reference is qwen35_ref.cc), except
// that K/V go through the cache's formats.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kvtier/attention.h"
#include "kvtier/thread_pool.h"
#include "kvtier/weights.h"
#include "model/matmul.h"
#include "model/model_internal.h"
#include "model/ops.h"

namespace kvtier {
namespace {

float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

Status CheckHybridCall(const ModelConfig& c, const BatchCache& cache,
                       std::span<const std::span<const int32_t>> tokens,
                       std::span<HybridSeqState* const> states) {
  const KvShape want = c.kv_shape();
  const KvShape& got = cache.pool()->layout().shape;
  if (!(got == want)) {
    return Status::InvalidArgument("forward: the cache's KV shape " + got.ToString() +
                                   " differs from the model's " + want.ToString());
  }
  if (tokens.empty() || tokens.size() != cache.batch_size() || states.size() != tokens.size()) {
    return Status::InvalidArgument("forward: " + std::to_string(tokens.size()) +
                                   " token lists and " + std::to_string(states.size()) +
                                   " states for a batch of " +
                                   std::to_string(cache.batch_size()) + " rows");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string row = "forward: row " + std::to_string(i);
    if (tokens[i].empty()) return Status::InvalidArgument(row + " has no new tokens");
    if (!cache.row(i).complete()) {
      return Status::InvalidArgument(row + " has layers of different lengths");
    }
    const HybridSeqState* st = states[i];
    if (st == nullptr || st->n_past != cache.offset(i)) {
      return Status::InvalidArgument(
          row + ": its recurrent state is at token " +
          (st == nullptr ? std::string("(none)") : std::to_string(st->n_past)) +
          ", its K/V at " + std::to_string(cache.offset(i)));
    }
    if (!st->conv.empty() && (st->conv.size() != c.n_layers || st->delta.size() != c.n_layers)) {
      return Status::InvalidArgument(row + ": its state has " + std::to_string(st->conv.size()) +
                                     " layers, the model " + std::to_string(c.n_layers));
    }
    for (size_t j = 0; j < tokens[i].size(); ++j) {
      const int32_t id = tokens[i][j];
      if (id < 0 || static_cast<uint32_t>(id) >= c.n_vocab) {
        return Status::InvalidArgument(row + " token " + std::to_string(j) + " has id " +
                                       std::to_string(id) + ", outside the vocabulary [0, " +
                                       std::to_string(c.n_vocab) + ")");
      }
    }
  }
  return Status::OK();
}

}  // namespace

Status Model::Forward(BatchCache& cache, std::span<const std::span<const int32_t>> tokens,
                      bool all_logits, float* logits, ThreadPool* pool,
                      std::span<HybridSeqState* const> states) const {
  const ModelConfig& c = cfg_;
  if (c.arch != ModelArch::kQwen35) {
    if (!states.empty()) {
      return Status::InvalidArgument(std::string("forward: ") +
                                     std::string(ModelArchName(c.arch)) +
                                     " has no recurrent state; pass no states");
    }
    return Forward(cache, tokens, all_logits, logits, pool);
  }
  KVTIER_RETURN_IF_ERROR(CheckHybridCall(c, cache, tokens, states));
  const size_t B = tokens.size();
  const size_t E = c.n_embd, D = c.head_dim, H = c.n_heads, Hkv = c.n_kv_heads, F = c.n_ff;
  model::ForwardRows rows;
  KVTIER_RETURN_IF_ERROR(model::PlanForwardRows(cache, tokens, &rows));
  const std::vector<uint32_t>& n = rows.n;  // new tokens per row
  const std::vector<int32_t>& pos = rows.pos;  // [T] RoPE positions
  const uint32_t max_n = rows.max_n;
  const size_t T = pos.size();
  for (HybridSeqState* st : states) {
    if (st->conv.empty()) {
      st->conv.resize(c.n_layers);
      st->delta.resize(c.n_layers);
      st->k.resize(c.n_layers);
      st->v.resize(c.n_layers);
    }
  }

  std::vector<float> x(T * E), xb(T * E), y(T * E);        // [T, E]
  std::vector<float> qg(T * H * 2 * D);                     // [T, H, 2D]: query, gate
  std::vector<float> q(T * H * D), att(T * H * D);          // [T, H, D]
  std::vector<float> k(T * Hkv * D), v(T * Hkv * D);        // [T, Hkv, D]
  std::vector<float> k_pad(B * max_n * Hkv * D, 0.0f);      // [B, max_n, Hkv, D]
  std::vector<float> v_pad(B * max_n * Hkv * D, 0.0f);
  std::vector<float> gate(T * F), up(T * F);                // [T, F]
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
  model::RopeParams rope;
  rope.head_dim = c.head_dim;
  rope.n_dims = c.rope_dims;
  rope.theta_base = c.rope_theta;
  rope.neox = true;
  rope.pos_scale = c.rope_pos_scale;
  AttentionParams ap;
  ap.n_heads = c.n_heads;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(D));

  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const Layer& W = layers_[l];
    model::RmsNorm(x.data(), W.attn_norm, T, E, c.rms_eps, xb.data());
    if (c.recurrent_layer(l)) {
      KVTIER_RETURN_IF_ERROR(DeltaNetMixer(l, xb.data(), n, states, y.data(), pool));
    } else {
      const uint32_t cl = (l + 1) / c.full_attn_interval - 1;  // cache layer
      KVTIER_RETURN_IF_ERROR(model::MatMul(W.wq, xb.data(), T, qg.data(), pool));
      KVTIER_RETURN_IF_ERROR(model::MatMul(W.wk, xb.data(), T, k.data(), pool));
      KVTIER_RETURN_IF_ERROR(model::MatMul(W.wv, xb.data(), T, v.data(), pool));
      for (size_t r = 0; r < T * H; ++r) {
        std::memcpy(q.data() + r * D, qg.data() + r * 2 * D, D * sizeof(float));
      }
      model::RmsNorm(q.data(), W.q_norm, T * H, D, c.rms_eps, q.data());
      model::RmsNorm(k.data(), W.k_norm, T * Hkv, D, c.rms_eps, k.data());
      model::Rope(q.data(), T, H, pos, rope);
      model::Rope(k.data(), T, Hkv, pos, rope);
      size_t src = 0;
      for (size_t i = 0; i < B; ++i) {  // right-padded [B, max_n, Hkv, D]
        std::memcpy(k_pad.data() + i * max_n * Hkv * D, k.data() + src * Hkv * D,
                    n[i] * Hkv * D * sizeof(float));
        std::memcpy(v_pad.data() + i * max_n * Hkv * D, v.data() + src * Hkv * D,
                    n[i] * Hkv * D * sizeof(float));
        src += n[i];
      }
      KVTIER_RETURN_IF_ERROR(
          cache.Append(cl, DType::kF32, k_pad.data(), v_pad.data(), max_n, n));
      KVTIER_ASSIGN_OR_RETURN(const PagedKvView view, cache.View(cl));
      KVTIER_RETURN_IF_ERROR(Attention(view, q.data(), n, ap, att.data(), pool));
      for (size_t r = 0; r < T * H; ++r) {  // output * sigmoid(gate)
        float* out = att.data() + r * D;
        const float* g = qg.data() + r * 2 * D + D;
        for (size_t i = 0; i < D; ++i) out[i] *= Sigmoid(g[i]);
      }
      KVTIER_RETURN_IF_ERROR(model::MatMul(W.wo, att.data(), T, y.data(), pool));
    }
    for (size_t i = 0; i < T * E; ++i) x[i] += y[i];
    KVTIER_RETURN_IF_ERROR(
        FeedForward(W, T, x.data(), xb.data(), gate.data(), up.data(), nullptr, pool));
  }
  for (size_t i = 0; i < B; ++i) states[i]->n_past += n[i];
  return OutputLogits(x.data(), n, all_logits, xb.data(), logits, pool);
}

uint32_t Model::state_format() const {
  const ModelConfig& c = cfg_;
  if (c.full_attn_interval == 0) return 0;
  Hasher128 h;
  h.Update("qwen35-state-v1", 15);
  for (uint32_t v : {c.n_layers, c.full_attn_interval, c.ssm_conv_kernel, c.ssm_state,
                     c.ssm_k_heads, c.ssm_v_heads}) {
    h.U32(v);
  }
  const uint32_t f = static_cast<uint32_t>(h.Digest().lo);
  return f == 0 ? 1 : f;
}

StateSnapshot Model::SaveState(const HybridSeqState& st) const {
  const ModelConfig& c = cfg_;
  const size_t S = c.ssm_state, Hv = c.ssm_v_heads, K = c.ssm_conv_kernel;
  const size_t C = 2 * c.ssm_k_heads * S + Hv * S;
  StateSnapshot s;
  s.format = state_format();
  s.position = st.n_past;
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    if (!c.recurrent_layer(l)) continue;
    for (int part = 0; part < 2; ++part) {
      const size_t want = part == 0 ? (K - 1) * C : Hv * S * S;
      const std::vector<float>* src =
          l < st.conv.size() ? (part == 0 ? &st.conv[l] : &st.delta[l]) : nullptr;
      s.sizes.push_back(static_cast<uint32_t>(want));
      if (src != nullptr && src->size() == want) {
        s.data.insert(s.data.end(), src->begin(), src->end());
      } else {
        s.data.insert(s.data.end(), want, 0.0f);  // never run: the zero state
      }
    }
  }
  return s;
}

Result<HybridSeqState> Model::LoadState(const StateSnapshot& s) const {
  const ModelConfig& c = cfg_;
  if (c.full_attn_interval == 0) {
    return Status::InvalidArgument(std::string(ModelArchName(c.arch)) +
                                   " has no recurrent state to load");
  }
  if (s.format != state_format()) {
    return Status::InvalidArgument("state snapshot: format " + std::to_string(s.format) +
                                   ", this model's is " + std::to_string(state_format()));
  }
  if (s.position == 0) return Status::InvalidArgument("state snapshot: position 0");
  const size_t S = c.ssm_state, Hv = c.ssm_v_heads, K = c.ssm_conv_kernel;
  const size_t C = 2 * c.ssm_k_heads * S + Hv * S;
  HybridSeqState st;
  st.n_past = s.position;
  st.conv.resize(c.n_layers);
  st.delta.resize(c.n_layers);
  st.k.resize(c.n_layers);
  st.v.resize(c.n_layers);
  size_t i = 0, off = 0;
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    if (!c.recurrent_layer(l)) continue;
    for (int part = 0; part < 2; ++part, ++i) {
      const size_t want = part == 0 ? (K - 1) * C : Hv * S * S;
      if (i >= s.sizes.size() || s.sizes[i] != want || off + want > s.data.size()) {
        return Status::InvalidArgument(
            "state snapshot: tensor " + std::to_string(i) + " (layer " + std::to_string(l) +
            (part == 0 ? " conv" : " delta") + ") has " +
            (i < s.sizes.size() ? std::to_string(s.sizes[i]) : std::string("no")) +
            " values, expected " + std::to_string(want));
      }
      std::vector<float>& dst = part == 0 ? st.conv[l] : st.delta[l];
      dst.assign(s.data.begin() + static_cast<long>(off),
                 s.data.begin() + static_cast<long>(off + want));
      off += want;
    }
  }
  if (i != s.sizes.size()) {
    return Status::InvalidArgument("state snapshot: " + std::to_string(s.sizes.size()) +
                                   " tensors, expected " + std::to_string(i));
  }
  return st;
}

}  // namespace kvtier
