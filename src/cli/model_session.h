// What the model commands share: the default model, loading a model with its tokenizer, and a
// KV pool sized for a number of tokens in the chosen K/V formats.
// Functions are thread-safe; a LoadedModel is immutable once loaded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

// Prompt text for the benchmarks: the file `text_flag` names, else `default_path` (the
// corpus the setup fetches, data/corpus/eval.txt). `random` is set, and `text` left empty,
// when `text_flag` is "random" or when it is empty and `default_path` does not exist: the
// caller then makes seeded random prompts. Errors name --text.
struct PromptText {
  std::string text;
  std::string path;
  bool random = false;
};
Result<PromptText> ReadPromptText(const std::string& text_flag, const std::string& default_path);

// The token stream prompts are cut from (ReadPromptText's text through the model's tokenizer,
// repeated until at least `need` tokens, or seeded random ids below n_vocab), and where it
// came from.
struct PromptSource {
  std::vector<int32_t> stream;  // [>= the tokens asked for]
  std::string description;
  int32_t bos = -1;             // put first in every prompt when >= 0
};
Result<PromptSource> LoadPromptSource(const LoadedModel& lm, const std::string& text_flag,
                                      const std::string& default_path, uint64_t seed,
                                      size_t need);
// n tokens: the BOS (if any), then stream[offset...].
std::vector<int32_t> PromptWindow(const PromptSource& s, size_t offset, size_t n);

}  // namespace kvtier::cli
