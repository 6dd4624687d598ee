// What the model commands share: the default model, loading a model with its tokenizer, and a
// KV pool sized for a number of tokens in the chosen K/V formats.
// Functions are thread-safe; a LoadedModel is immutable once loaded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/block_pool.h"
#include "kvtier/model.h"
#include "kvtier/status.h"
#include "kvtier/tokenizer.h"

namespace kvtier::cli {

// $KVTIER_MODEL if set, else the bundled model under the source tree's models/.
std::string DefaultModelPath();

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};
// `path` empty: DefaultModelPath(). Errors name the file.
Result<LoadedModel> LoadModel(const std::string& path);

// A pool able to hold `n_tokens` tokens in each of `n_rows` rows (whole blocks), in the
// formats of `kv_type` ("K" or "K/V"); `flag` names the option in errors.
Result<std::shared_ptr<BlockPool>> MakeKvPool(const ModelConfig& c, const std::string& flag,
                                              const std::string& kv_type, uint32_t n_tokens,
                                              uint32_t n_rows = 1, uint32_t block_tokens = 32);

}  // namespace kvtier::cli
