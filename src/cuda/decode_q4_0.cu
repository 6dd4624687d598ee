// Decode attention instantiations for K and V in q4_0 (decode.cuh).
#include "cuda/decode.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_LAUNCHER(LaunchDecodeQ4_0, FormatKind::kQ4_0)
}  // namespace kvtier::cuda
