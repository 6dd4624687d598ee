// Test-only: every supported format (plain dtypes, ggml blocks, every affine bits x group x
// scale dtype), for tests that must cover them all.
#pragma once

#include <vector>

#include "kvtier/format.h"

namespace kvtier::testing {

inline std::vector<Format> AllFormats() {
  std::vector<Format> v = {Format::F32(), Format::F16(), Format::BF16(), Format::Q8_0(),
                           Format::Q4_0()};
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int group : {32, 64, 128}) {
      for (DType sd : {DType::kF32, DType::kF16, DType::kBF16}) {
        v.push_back(Format::Affine(bits, group, sd));
      }
    }
  }
  return v;
}

}  // namespace kvtier::testing
