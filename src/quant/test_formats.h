// Test-only: every supported format (plain dtypes, ggml blocks, every affine bits x group x
// scale dtype), for tests that must cover them all.
#pragma once

#include <vector>

#include "kvtier/format.h"

namespace kvtier::testing {

inline std::vector<Format> AllFormats() { return AllSupportedFormats(); }

}  // namespace kvtier::testing
