// Internal to src/gguf: the GGUF parser entry point shared by GgufFile::Open / FromMemory.
// Thread safety: ParseGguf fills the GgufFile it is given; call it once, before sharing it.
#pragma once

#include "kvtier/gguf.h"

namespace kvtier {

// Validates f->bytes_ and fills f's metadata and tensors. Errors name f->path().
Status ParseGguf(GgufFile* f);

}  // namespace kvtier
