// kvtier's own quantizers of the weights-module block types (see quantize.h).
// Stateless; thread-safe.
#include "weights/quantize.h"

#include <string>

#include "kvtier/gguf.h"

namespace kvtier::weights {

Status QuantizeBlocks(uint32_t ggml_type, const float* x, size_t nb, uint8_t* dst) {
  (void)x;
  (void)nb;
  (void)dst;
  return Status::Unimplemented("quantizing to " + GgmlTypeName(ggml_type) +
                               " is not implemented yet");
}

}  // namespace kvtier::weights
