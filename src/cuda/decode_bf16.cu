// Decode attention instantiations for K and V in bf16 (decode.cuh).
#include "cuda/decode.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_LAUNCHER(LaunchDecodeBF16, FormatKind::kBF16)
}  // namespace kvtier::cuda
