// Decode attention instantiations for K and V in rot4 (rotated 4-bit codebook rows): the exact
// f32 kernel (decode.cuh) on the rotated basis; decode.cu rotates q before and out after.
#include "cuda/decode.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_LAUNCHER(LaunchDecodeRot4, FormatKind::kRot)
}  // namespace kvtier::cuda
