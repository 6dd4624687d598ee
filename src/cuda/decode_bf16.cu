// Decode attention instantiations for K and V in bf16: the tensor-core kernel
// (decode_mma.cuh) and the exact f32 one (decode.cuh).
#include "cuda/decode_mma.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_LAUNCHER(LaunchDecodeBF16, FormatKind::kBF16)
KVTIER_DEFINE_DECODE_MMA_LAUNCHER(LaunchDecodeMmaBF16, FormatKind::kBF16)
}  // namespace kvtier::cuda
