// kvtier's own quantizers of the weights-module block types, written from the format
// definitions of weights/blocks.h: legacy types by min/max (q4_1, q5_1) or max-magnitude
// (q5_0) scaling, iq4_nl / iq4_xs by a small scale search over the codebook, K-quants by
// per-sub-block scale (and min) search, then quantized scales. No importance matrix.
// Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/status.h"

namespace kvtier::weights {

// Encodes nb blocks of a weights-module type (Decoder::kWeights) from
// nb * block_values f32 values.   x [nb * block_values], dst [nb * block_bytes]
Status QuantizeBlocks(uint32_t ggml_type, const float* x, size_t nb, uint8_t* dst);

}  // namespace kvtier::weights
