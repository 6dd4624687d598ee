// Test support shared by the tests that need a damaged model (check-model, the server's
// numerics): a tiny f32 llama and a way to overwrite one weight value in its file.
// Test-only; thread-compatible.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/gguf.h"
#include "kvtier/status.h"
#include "kvtier/test_model.h"

namespace kvtier::testing {

// Two llama layers, f32 weights (so any single value can be planted), text fillers.
inline TestModelConfig TinyF32ModelConfig() {
  TestModelConfig c;
  c.arch = "llama";
  c.hidden = 128;
  c.layers = 2;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 64;
  c.ffn = 128;
  c.vocab = 300;
  c.ctx = 256;
  c.weight_type = GgmlType::kF32;
  c.text_fillers = true;
  return c;
}

// Writes `value` over the value at flat index `index` of the f32 tensor `name` in the GGUF
// file at `path`. InvalidArgument when the tensor is missing or not f32.
inline Status PlantF32(const std::string& path, const std::string& name, uint64_t index,
                       float value) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Env::Default()->ReadFile(path));
  size_t at = 0;
  {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> g, GgufFile::FromMemory(bytes, path));
    const GgufTensor* t = g->FindTensor(name);
    if (t == nullptr) return Status::InvalidArgument("PlantF32: no tensor " + name);
    if (t->type != static_cast<uint32_t>(GgmlType::kF32)) {
      return Status::InvalidArgument("PlantF32: tensor " + name + " is not f32");
    }
    at = static_cast<size_t>(t->data - bytes.data()) + index * sizeof(float);
  }
  std::memcpy(bytes.data() + at, &value, sizeof value);
  return Env::Default()->WriteFileDurably(path, bytes);
}

}  // namespace kvtier::testing
