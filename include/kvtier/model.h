// Module model (src/model, kvtier_model; order and include rule: docs/architecture.md) owns the
// model runtime (weights, matmul, forward pass, sampler).
//
// Model runtime: a decoder-only transformer (llama, qwen2, qwen3, phi3, gemma3; the hybrid
// qwen35 through the Forward overload with per-row recurrent states, or one sequence through
// ForwardSequence) loaded from GGUF, whose
// forward pass appends to a kvtier BatchCache and attends with kvtier's fused attention.
//
// Weights stay in the file's mapping and in its type (any type of kvtier/weights.h): nothing is
// dequantized up front. A Model is immutable after Load(); Forward() may run from several
// threads at once on distinct caches (each call uses its own scratch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/batch_cache.h"
#include "kvtier/block_key.h"
#include "kvtier/format.h"
#include "kvtier/gguf.h"
#include "kvtier/kv_types.h"
#include "kvtier/state_snapshot.h"
#include "kvtier/status.h"

namespace kvtier {

class ThreadPool;  // kvtier/thread_pool.h

enum class ModelArch : uint8_t {
  kLlama = 0,
  kQwen2 = 1,
  kQwen3 = 2,
  kPhi3 = 3,
  kGemma3 = 4,
  kQwen35 = 5,
};
std::string_view ModelArchName(ModelArch a);

// The feed-forward activation of the gated FFN: silu(gate) * up, or gelu(gate) * up (GeGLU,
// gelu's tanh approximation as in gemma).
enum class FfnActivation : uint8_t { kSilu = 0, kGeluTanh = 1 };

struct ModelConfig {
  ModelArch arch = ModelArch::kLlama;
  std::string name;          // general.name, or the file name
  uint32_t n_vocab = 0;
  uint32_t n_embd = 0;       // hidden size
  uint32_t n_layers = 0;
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;     // key_length (== value_length)
  uint32_t n_ff = 0;
  uint32_t n_ctx_train = 0;  // context_length
  float rope_theta = 10000.0f;
  bool rope_neox = false;    // rotate halves (qwen*) instead of adjacent pairs (llama)
  uint32_t rope_dims = 0;    // rotated dimensions per head (rope.dimension_count)
  float rope_pos_scale = 1.0f;  // linear rope scaling: positions times this (1 / factor)
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;
  bool qk_norm = false;      // qwen3: RMSNorm on each q and k head before RoPE
  bool qkv_bias = false;     // qwen2: biases on q, k, v
  // Family extensions (phi3, gemma3; docs/model.md). Defaults leave llama/qwen unchanged.
  uint32_t sliding_window = 0;  // window layers attend the last this many tokens; 0 = none
  uint32_t swa_period = 0;      // layer l is a window layer when l % period < period - 1
  float rope_theta_swa = 10000.0f;  // RoPE base of the window layers (no position scaling)
  float attn_scale = 0.0f;      // softmax scale; 0 = 1 / sqrt(head_dim)
  float embd_scale = 1.0f;      // token embeddings times this (gemma3: sqrt(n_embd))
  float final_softcap = 0.0f;   // logits = cap * tanh(logits / cap); 0 = off
  bool post_norms = false;      // gemma3: RMSNorm on the attention and FFN outputs too
  FfnActivation ffn_act = FfnActivation::kSilu;
  // qwen35 (hybrid): layer l is Gated DeltaNet unless (l + 1) % full_attn_interval == 0; the
  // full-attention layers' attn_q holds a query and a gate per head (output * sigmoid(gate)).
  uint32_t full_attn_interval = 0;  // 0 = not a hybrid model
  uint32_t ssm_conv_kernel = 0;     // causal conv taps over the projected q|k|v
  uint32_t ssm_state = 0;           // head dim of the delta-rule q, k and v (state_size)
  uint32_t ssm_k_heads = 0;         // q/k heads (group_count); v head h uses k head h % this
  uint32_t ssm_v_heads = 0;         // v heads (time_step_rank)
  bool recurrent_layer(uint32_t l) const {
    return full_attn_interval > 0 && (l + 1) % full_attn_interval != 0;
  }

  // n_layers, n_kv_heads, head_dim. Hybrid models: only the full-attention layers have K/V,
  // so n_layers counts those (attention layer l is cache layer (l + 1) / interval - 1).
  KvShape kv_shape() const;
  // Layer l's attention window in tokens (0 = global: the whole context).
  uint32_t layer_window(uint32_t l) const;
  // [n_layers] layer_window(l) for every layer when some layer has a window (a KV pool's
  // BlockPoolOptions::layer_window: window layers in their own pages), else empty (dense).
  std::vector<uint32_t> layer_windows() const;
};

// One weight matrix: n_out rows of n_in values each, in a ggml type (ggml shape [n_in, n_out]).
struct WeightMatrix {
  uint32_t type = 0;  // GgmlType id
  uint32_t n_in = 0;
  uint32_t n_out = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;  // [n_out][row_bytes]
};

// One sequence's state for a hybrid (qwen35) model, filled by Model::ForwardSequence: per Gated
// DeltaNet layer the causal-conv window (the last conv_kernel - 1 projected q|k|v rows) and the
// delta-rule state; per full-attention layer its K and V rows (f32, unquantized). Owned by the
// caller; one thread at a time. Construct empty (the zero state of a new sequence); copy it to
// fork a sequence.
struct HybridSeqState {
  uint32_t n_past = 0;                     // tokens already run
  std::vector<std::vector<float>> conv;    // per layer [conv_kernel - 1][conv_dim] or empty
  std::vector<std::vector<float>> delta;   // per layer [v_heads][ssm_state][ssm_state] or empty
  std::vector<std::vector<float>> k, v;    // per layer [n_past][n_kv_heads][head_dim] or empty
};

class Model {
 public:
  // Loads and validates a GGUF model: architecture, every hyper-parameter, every tensor's name,
  // shape and type. Errors name the file and the key or tensor.
  static Result<std::unique_ptr<Model>> Load(const std::string& path);
  static Result<std::unique_ptr<Model>> FromGguf(std::shared_ptr<const GgufFile> file);
  ~Model();

  const ModelConfig& config() const { return cfg_; }
  const GgufFile& gguf() const { return *file_; }
  // Bytes of all weight tensors.
  size_t weight_bytes() const { return weight_bytes_; }
  // XXH3-128 of the architecture, every hyper-parameter that shapes the K/V, and every
  // tensor's name, type, shape and bytes (computed once, at load). Equal fingerprints mean the
  // same K/V for the same tokens: the prefix cache and the tiers key entries by it.
  const ModelFingerprint& fingerprint() const { return fingerprint_; }

  // Runs new tokens of every row of `cache` through the model and appends their K/V to it.
  // tokens[i] are row i's new tokens (at least one each); their positions continue the row.
  // logits: when all_logits, [sum n_i, n_vocab] (every token); else [batch, n_vocab] (each
  // row's last token). The cache must have this model's KV shape. Bad input (shape, token ids,
  // empty rows) and a failed reservation change nothing; after an internal error past that
  // point some layers may hold the new tokens, and the caller should discard the cache.
  Status Forward(BatchCache& cache, std::span<const std::span<const int32_t>> tokens,
                 bool all_logits, float* logits, ThreadPool* pool) const;

  // Hybrid (qwen35) models (forward_hybrid.cc): Forward with states[i], row i's recurrent state
  // (its n_past equal to the row's length; its K/V vectors unused: the attention layers' K/V
  // go to `cache`). Advances every row's state; on an error the states and cache should be
  // discarded. Other models: states must be empty (the plain Forward).
  Status Forward(BatchCache& cache, std::span<const std::span<const int32_t>> tokens,
                 bool all_logits, float* logits, ThreadPool* pool,
                 std::span<HybridSeqState* const> states) const;
  // StateSnapshot::format of this model's recurrent state (a hash of the architecture and the
  // state's shapes, never 0); 0 for models without a recurrent state.
  uint32_t state_format() const;
  // The recurrent part of `state` (per DeltaNet layer: conv window, then delta state; never
  // the K/V rows) as a snapshot at state.n_past (>= 1).
  StateSnapshot SaveState(const HybridSeqState& state) const;
  // The state a snapshot of this model holds (n_past = its position, no K/V rows), or
  // InvalidArgument naming what differs (format, tensor count or size).
  Result<HybridSeqState> LoadState(const StateSnapshot& snapshot) const;

  // qwen35 only (forward_deltanet.cc): runs one sequence's new tokens from `state` (prefill or
  // decode, any chunking) and advances it. logits: [tokens, n_vocab] when all_logits, else
  // [1, n_vocab]. Bad input changes nothing; other models get InvalidArgument.
  Status ForwardSequence(HybridSeqState* state, std::span<const int32_t> tokens, bool all_logits,
                         float* logits, ThreadPool* pool) const;

 private:
  Model() = default;
  struct Layer;
  Status Bind();
  Status BindQwen35();  // arch_qwen35.cc
  // qwen35's Gated DeltaNet mixer for layer l over rows of n[i] tokens one after another:
  // xb [T, n_embd] (normalized input) -> y [T, n_embd]; advances each row's conv window and
  // delta state (forward_deltanet.cc).
  Status DeltaNetMixer(uint32_t l, const float* xb, std::span<const uint32_t> n,
                       std::span<HybridSeqState* const> states, float* y, ThreadPool* pool) const;
  // The feed-forward half of layer L over T tokens, every family's (forward.cc): h =
  // RmsNorm(x, ffn_norm) (post_attention_norm), f = down(act(gate h) * up h) (SwiGLU, or GeGLU;
  // phi3's fused gate-up), RmsNorm'd by ffn_post_norm when the layer has one; x += f.
  // x, xb: [T, n_embd] (xb: scratch); gate, up: [T, n_ff] scratch; fused: [T, 2 n_ff] scratch
  // when L.gate is empty (phi3), else unused (may be null).
  Status FeedForward(const Layer& L, size_t T, float* x, float* xb, float* gate, float* up,
                     float* fused, ThreadPool* pool) const;
  // The logits after the last layer (forward.cc): output_norm then output, on every token of x
  // [sum n_i, n_embd] (rows of n[i] tokens one after another) when all_logits, else on each
  // row's last token. xb: [sum n_i, n_embd] scratch; logits: [sum n_i or n.size(), n_vocab].
  Status OutputLogits(const float* x, std::span<const uint32_t> n, bool all_logits, float* xb,
                      float* logits, ThreadPool* pool) const;

  ModelConfig cfg_;
  std::shared_ptr<const GgufFile> file_;
  size_t weight_bytes_ = 0;
  ModelFingerprint fingerprint_;
  WeightMatrix tok_embd_;  // [n_vocab][n_embd]
  WeightMatrix output_;    // [n_vocab][n_embd] (tok_embd_ when tied)
  const float* output_norm_ = nullptr;  // [n_embd]
  const float* rope_freq_factors_ = nullptr;  // [rope_dims / 2] or null (Llama 3 scaling)
  std::vector<Layer> layers_;
};

// The KV-row Format that decodes rows of this ggml weight type (byte-identical layouts: f32,
// f16, bf16, q8_0, q4_0), or Unimplemented naming the type; the other weight types decode
// through kvtier/weights.h (DequantizeWeightRows). Thread-safe (a pure function).
Result<Format> WeightRowFormat(uint32_t ggml_type);

}  // namespace kvtier
