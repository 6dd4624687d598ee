// Decode attention instantiations for K and V in f16: the tensor-core kernel
// (decode_mma.cuh) and the exact f32 one (decode.cuh).
#include "cuda/decode_mma.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_LAUNCHER(LaunchDecodeF16, FormatKind::kF16)
KVTIER_DEFINE_DECODE_MMA_LAUNCHER(LaunchDecodeMmaF16, FormatKind::kF16)
}  // namespace kvtier::cuda
