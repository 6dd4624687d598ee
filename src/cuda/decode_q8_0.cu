// Decode attention instantiations for K and V in q8_0 (decode.cuh).
#include "cuda/decode.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_LAUNCHER(LaunchDecodeQ8_0, FormatKind::kQ8_0)
}  // namespace kvtier::cuda
