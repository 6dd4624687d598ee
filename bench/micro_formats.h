// The KV formats the kv and attention benchmarks sweep, by benchmark argument:
// 0 f16, 1 q8_0, 2 q4_0, 3 affine8g64, 4 affine4g64 (f16 scales).
#pragma once

#include <cstdint>

#include "kvtier/format.h"

namespace kvtier::bench {

inline Format FormatArg(int64_t i) {
  switch (i) {
    case 0: return Format::F16();
    case 1: return Format::Q8_0();
    case 2: return Format::Q4_0();
    case 3: return Format::Affine(8, 64, DType::kF16);
    default: return Format::Affine(4, 64, DType::kF16);
  }
}

}  // namespace kvtier::bench
