// Module test_model (src/test_model, kvtier_test_model; order and include rule:
// docs/architecture.md) owns seeded random test models written as GGUF.
//
// Test models: seeded random llama / qwen2 / qwen3 / phi3 / gemma3 weights written as GGUF with llama.cpp's
// tensor names and metadata keys, and a byte-level BPE ("gpt2") tokenizer, so that kvtier and
// llama.cpp can both load them (`kvtier make-test-model`).
//
// Weights are normal(0, weight_std = 0.02) from a per-tensor stream (seed and tensor name),
// stored in the chosen weight type (q8_0 / q4_0 through kvtier's quantizers, byte-identical to
// ggml); norm weights are 1.0, biases normal(0, weight_std), both f32. phi3 writes fused
// attn_qkv and ffn_up (gate then up) matrices; gemma3 adds q/k norms, post-attention and
// post-FFN norms and, with sliding_window > 0, its window keys.
// Tokenizer: the 256 byte tokens in GPT-2's bytes_to_unicode order (ids 0..255), control
// fillers "<|filler_N|>" up to vocab - 3 (user-defined instead with `text_fillers`, so that
// detokenizers render them), then "<|endoftext|>" (bos, eos), "<|im_start|>", "<|im_end|>"; no
// merges.
//
// Thread safety: pure functions of their arguments; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/gguf.h"
#include "kvtier/status.h"

namespace kvtier {

// Defaults: Qwen3-0.6B's shape.
struct TestModelConfig {
  std::string arch = "qwen3";  // llama, qwen2, qwen3, phi3 (heads x head_dim = hidden), gemma3,
                               // qwen35
  std::string name;            // general.name; empty: "kvtier-test-<arch>"
  uint32_t hidden = 1024;
  uint32_t layers = 28;
  uint32_t heads = 16;
  uint32_t kv_heads = 8;
  uint32_t head_dim = 128;
  uint32_t ffn = 3072;
  uint32_t vocab = 151936;
  uint32_t ctx = 40960;
  double rope_theta = 1000000.0;
  double rms_eps = 1e-6;
  // f32, f16, bf16, q8_0, q4_0 (make-test-model's names), or any other type of
  // kvtier/weights.h (q4_K, iq4_xs, ...; every weight quantized by kvtier's quantizers).
  GgmlType weight_type = GgmlType::kF16;
  bool tied = true;  // no output.weight: the output projection is token_embd
  uint64_t seed = 0;
  // Fillers as user-defined tokens (rendered as their text) rather than control tokens
  // (rendered as nothing): a random model almost always samples a filler, so without this its
  // answers are empty text, and a client cannot time its first token or its decode.
  bool text_fillers = false;
  float weight_std = 0.02f;  // std of the random weights (larger: sharper logits)
  // gemma3 only: attention.sliding_window (0: none), sliding_window_pattern, rope.freq_base_swa,
  // final_logit_softcapping (0: none).
  uint32_t sliding_window = 0;
  uint32_t swa_period = 6;
  double rope_theta_swa = 10000.0;
  double final_softcap = 0.0;
  // qwen35 only: layer l is full attention when (l + 1) % full_attn_interval == 0, else Gated
  // DeltaNet with a causal conv of ssm_conv_kernel taps.
  uint32_t full_attn_interval = 4;
  uint32_t ssm_conv_kernel = 4;
  // DeltaNet sizes: state_size (head dim), group_count (q/k heads), time_step_rank (v heads);
  // 0 = head_dim, kv_heads, heads (Qwen3.5-0.8B's real shape: 128, 16, 16).
  uint32_t ssm_state = 0, ssm_k_heads = 0, ssm_v_heads = 0;
};

// "f16" -> kF16; the weight types make-test-model writes (f32, f16, bf16, q8_0, q4_0).
Result<GgmlType> ParseTestModelWeightType(std::string_view name);

// InvalidArgument naming the flag ("--hidden: ...") when the shape cannot be written.
Status ValidateTestModelConfig(const TestModelConfig& c);

// Bytes of tensor data the model takes.
uint64_t TestModelTensorBytes(const TestModelConfig& c);

// GPT-2's byte-level BPE alphabet: the 256 one-character tokens in its vocabulary order
// (printable bytes first, the rest mapped to U+0100...), each UTF-8 encoded. The second
// output, if given, gets the byte each token stands for.
std::vector<std::string> ByteLevelBpeTokens(std::vector<uint8_t>* bytes = nullptr);

// The general.* and <arch>.* hyper-parameter keys of `c` (no tensors, no tokenizer).
void SetTestModelMetadata(const TestModelConfig& c, GgufWriter* w);
// Builds the whole model in memory.
Result<GgufWriter> BuildTestModel(const TestModelConfig& c);

// BuildTestModel + GgufWriter::WriteFile.
Status WriteTestModel(const TestModelConfig& c, const std::string& path);

}  // namespace kvtier
