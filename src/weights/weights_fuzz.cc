// libFuzzer target for the weight decoders: any byte string that parses as GGUF has every
// tensor of a kvtier weight type decoded row by row (up to 64 rows a tensor) by the SIMD
// path and the scalar reference, which must agree bit for bit (NaN equal to NaN); any
// other type must be refused by CheckWeightType with its ggml name. Never crashes or reads
// outside a tensor. Built as `kvtier_weights_fuzz` with clang and -DKVTIER_BUILD_FUZZ=ON;
// compiled into kvtier_weights_test everywhere (corpus replay: weights_fuzz_replay_test.cc).
//   build/fuzz/src/weights/kvtier_weights_fuzz -max_len=8192 CORPUS_DIR
// Thread safety: stateless.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvtier/gguf.h"
#include "kvtier/weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = kvtier::GgufFile::FromMemory(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!f.ok()) return 0;
  for (const kvtier::GgufTensor& t : (*f)->tensors()) {
    const kvtier::Status ok = kvtier::CheckWeightType(t.type);
    if (!ok.ok()) {
      if (ok.message().find(kvtier::GgmlTypeName(t.type)) == std::string::npos) __builtin_trap();
      continue;
    }
    const size_t n = t.shape[0];
    const auto row_bytes = kvtier::WeightRowBytes(t.type, n);
    if (!row_bytes.ok()) __builtin_trap();  // the reader checked the block size already
    if (n > (1u << 16)) continue;
    const size_t rows = std::min<uint64_t>(64, t.n_bytes / *row_bytes);
    std::vector<float> a(n), b(n);
    for (size_t r = 0; r < rows; ++r) {
      if (!kvtier::DequantizeWeightRows(t.type, t.data + r * *row_bytes, 1, n, a.data()).ok() ||
          !kvtier::DequantizeWeightRowsRef(t.type, t.data + r * *row_bytes, 1, n, b.data()).ok()) {
        __builtin_trap();
      }
      for (size_t i = 0; i < n; ++i) {
        if (std::isnan(a[i]) && std::isnan(b[i])) continue;
        if (std::memcmp(&a[i], &b[i], 4) != 0) __builtin_trap();
      }
    }
  }
  return 0;
}
