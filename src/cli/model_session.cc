// Model loading and KV pool sizing for the model commands; see model_session.h.
#include "cli/model_session.h"

#include <cstdlib>

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
  KVTIER_ASSIGN_OR_RETURN(const KvBlockLayout layout,
                          KvBlockLayout::Make(c.kv_shape(), kv.k, kv.v, block_tokens));
  const uint64_t blocks_per_row = (uint64_t(n_tokens) + block_tokens - 1) / block_tokens + 1;
  BlockPoolOptions o;
  o.shape = c.kv_shape();
  o.k_format = kv.k;
  o.v_format = kv.v;
  o.block_tokens = block_tokens;
  o.capacity_bytes = blocks_per_row * n_rows * layout.block_stride;
  return BlockPool::Create(o);
}

}  // namespace kvtier::cli
