// Decode attention instantiations for K and V in q8_0: the tensor-core kernel
// (decode_mma.cuh) and the exact f32 one (decode.cuh).
#include "cuda/decode_mma.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_LAUNCHER(LaunchDecodeQ8_0, FormatKind::kQ8_0)
KVTIER_DEFINE_DECODE_MMA_LAUNCHER(LaunchDecodeMmaQ8_0, FormatKind::kQ8_0)
}  // namespace kvtier::cuda
