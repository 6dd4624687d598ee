// Model loading and KV pool sizing for the model commands; see model_session.h.
#include "cli/model_session.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "cli/flags.h"
#include "kvtier/gguf.h"

#ifndef KVTIER_DEFAULT_MODEL
#define KVTIER_DEFAULT_MODEL "models/kvtier-austen-30m.gguf"
#endif

namespace kvtier::cli {

std::string DefaultModelPath() {
  const char* env = std::getenv("KVTIER_MODEL");
  if (env != nullptr && env[0] != '\0') return env;
  return KVTIER_DEFAULT_MODEL;
}

Result<LoadedModel> LoadModel(const std::string& path_flag) {
  const std::string path = path_flag.empty() ? DefaultModelPath() : path_flag;
  auto file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  std::shared_ptr<const GgufFile> shared(std::move(*file));
  LoadedModel m;
  KVTIER_ASSIGN_OR_RETURN(m.tokenizer, Tokenizer::FromGguf(*shared));
  KVTIER_ASSIGN_OR_RETURN(m.model, Model::FromGguf(shared));
  if (m.tokenizer->vocab_size() > m.model->config().n_vocab) {
    return Status::InvalidArgument(path + ": the tokenizer has " +
                                   std::to_string(m.tokenizer->vocab_size()) +
                                   " tokens but token_embd.weight only " +
                                   std::to_string(m.model->config().n_vocab) + " rows");
  }
  return m;
}

Result<std::shared_ptr<BlockPool>> MakeKvPool(const ModelConfig& c, const std::string& flag,
                                              const std::string& kv_type, uint32_t n_tokens,
                                              uint32_t n_rows, uint32_t block_tokens) {
  KVTIER_ASSIGN_OR_RETURN(const KvFormats kv, ParseKvFormats(flag, kv_type));
  if (kv.k.is_token_grouped() && block_tokens % kv.k.group != 0) {
    // Per-channel K groups live inside a block: blocks of whole groups.
    block_tokens = (block_tokens + kv.k.group - 1) / kv.k.group * kv.k.group;
  }
  KVTIER_ASSIGN_OR_RETURN(const KvBlockLayout layout,
                          KvBlockLayout::Make(c.kv_shape(), kv.k, kv.v, block_tokens,
                                              c.layer_windows()));
  const uint64_t blocks_per_row = (uint64_t(n_tokens) + block_tokens - 1) / block_tokens + 1;
  BlockPoolOptions o;
  o.shape = c.kv_shape();
  o.k_format = kv.k;
  o.v_format = kv.v;
  o.block_tokens = block_tokens;
  o.capacity_bytes = blocks_per_row * n_rows * layout.block_stride;
  o.layer_window = c.layer_windows();  // window layers in their own pages (docs/model.md)
  return BlockPool::Create(o);
}

Result<PromptText> ReadPromptText(const std::string& text_flag, const std::string& default_path) {
  PromptText t;
  t.path = text_flag.empty() ? default_path : text_flag;
  t.random = text_flag == "random" || (text_flag.empty() && !std::filesystem::exists(t.path));
  if (t.random) return t;
  std::ifstream in(t.path, std::ios::binary);
  if (!in) return Status::InvalidArgument("--text: cannot open " + t.path);
  t.text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return t;
}

Result<PromptSource> LoadPromptSource(const LoadedModel& lm, const std::string& text_flag,
                                      const std::string& default_path, uint64_t seed,
                                      size_t need) {
  PromptSource s;
  if (lm.tokenizer->add_bos_default()) s.bos = lm.tokenizer->bos_id();
  KVTIER_ASSIGN_OR_RETURN(const PromptText t, ReadPromptText(text_flag, default_path));
  if (t.random) {
    std::mt19937_64 rng(seed);
    const uint32_t n_vocab = lm.model->config().n_vocab;
    s.stream.resize(need);
    for (int32_t& id : s.stream) id = static_cast<int32_t>(rng() % n_vocab);
    s.description = "seeded random token ids < " + std::to_string(n_vocab) + " (seed " +
                    std::to_string(seed) + ")";
    return s;
  }
  const std::vector<int32_t> ids = lm.tokenizer->Encode(t.text, false, false);
  if (ids.empty()) return Status::InvalidArgument("--text: " + t.path + " has no tokens");
  size_t copies = 0;
  while (s.stream.size() < need) {
    s.stream.insert(s.stream.end(), ids.begin(), ids.end());
    ++copies;
  }
  s.description = t.path + " (" + std::to_string(ids.size()) + " tokens" +
                  (copies > 1 ? ", repeated " + std::to_string(copies) + "x" : std::string()) +
                  ")";
  return s;
}

std::vector<int32_t> PromptWindow(const PromptSource& s, size_t offset, size_t n) {
  std::vector<int32_t> p;
  p.reserve(n);
  if (s.bos >= 0 && n > 0) p.push_back(s.bos);
  const size_t rest = n - p.size();
  p.insert(p.end(), s.stream.begin() + static_cast<ptrdiff_t>(offset),
           s.stream.begin() + static_cast<ptrdiff_t>(offset + rest));
  return p;
}

}  // namespace kvtier::cli
