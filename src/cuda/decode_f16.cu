// Decode attention instantiations for K and V in f16 (decode.cuh).
#include "cuda/decode.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_LAUNCHER(LaunchDecodeF16, FormatKind::kF16)
}  // namespace kvtier::cuda
