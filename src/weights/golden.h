// Reader of the golden files under src/weights/testdata (<type>.golden, made once by
// testdata/gen_golden.c from ggml's own quantizer and dequantizer; format in
// testdata/README.md). Test support; not thread-safe.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/half.h"

namespace kvtier::weights {

struct Golden {
  uint32_t type = 0, n_blocks = 0, block_values = 0, block_bytes = 0;
  std::vector<float> input;    // [n_blocks * block_values] (stored as f16, exact)
  std::vector<uint8_t> blocks; // [n_blocks * block_bytes] ggml's quantization of input
  std::vector<float> output;   // [n_blocks * block_values] ggml's dequantization of blocks
  size_t row_values = 256;     // ggml quantized the input as rows of this many values
};

// Loads <KVTIER_SOURCE_DIR>/src/weights/testdata/<name>.golden; false (and *err) on failure.
inline bool LoadGolden(const std::string& name, Golden* g, std::string* err) {
  const std::string path = std::string(KVTIER_SOURCE_DIR) + "/src/weights/testdata/" + name + ".golden";
  std::ifstream f(path, std::ios::binary);
  const std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (b.size() < 24 || std::memcmp(b.data(), "KVWGOLD1", 8) != 0) {
    *err = path + ": missing or not a golden file";
    return false;
  }
  uint32_t hdr[4];
  std::memcpy(hdr, b.data() + 8, 16);
  g->type = hdr[0];
  g->n_blocks = hdr[1];
  g->block_values = hdr[2];
  g->block_bytes = hdr[3];
  const size_t n = size_t{g->n_blocks} * g->block_values;
  const size_t want = 24 + n * 2 + size_t{g->n_blocks} * g->block_bytes + n * 4;
  if (b.size() != want) {
    *err = path + ": " + std::to_string(b.size()) + " bytes, expected " + std::to_string(want);
    return false;
  }
  const uint8_t* p = b.data() + 24;
  g->input.resize(n);
  for (size_t i = 0; i < n; ++i, p += 2) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    g->input[i] = F16ToF32(h);
  }
  g->blocks.assign(p, p + size_t{g->n_blocks} * g->block_bytes);
  p += g->blocks.size();
  g->output.resize(n);
  std::memcpy(g->output.data(), p, n * 4);
  return true;
}

}  // namespace kvtier::weights
