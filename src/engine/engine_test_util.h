// Test-only: the bundled model with its tokenizer, loaded once per test binary.
#pragma once

#include <memory>

#include "kvtier/block_pool.h"
#include "kvtier/gguf.h"
#include "kvtier/model.h"
#include "kvtier/status.h"
#include "kvtier/tokenizer.h"

namespace kvtier::testing {

struct BundledModel {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Loads models/kvtier-austen-30m.gguf (a new copy each call: fork-safe).
inline Result<BundledModel> LoadBundledModel() {
  BundledModel b;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f,
                          GgufFile::Open(KVTIER_SOURCE_DIR "/models/kvtier-austen-30m.gguf"));
  b.file = std::move(f);
  KVTIER_ASSIGN_OR_RETURN(b.model, Model::FromGguf(b.file));
  KVTIER_ASSIGN_OR_RETURN(b.tokenizer, Tokenizer::FromGguf(*b.file));
  return b;
}

// The same, loaded once (the first call must succeed).
inline const BundledModel& Bundled() {
  static const BundledModel b = LoadBundledModel().value();
  return b;
}

// A pool of `blocks` blocks of `block_tokens` tokens in the bundled model's KV shape (f16).
inline std::shared_ptr<BlockPool> BundledPool(uint64_t blocks, uint32_t block_tokens = 16) {
  BlockPoolOptions o;
  o.shape = Bundled().model->config().kv_shape();
  o.block_tokens = block_tokens;
  o.capacity_bytes =
      blocks * KvBlockLayout::Make(o.shape, o.k_format, o.v_format, block_tokens)->block_stride;
  return BlockPool::Create(o).value();
}

}  // namespace kvtier::testing
