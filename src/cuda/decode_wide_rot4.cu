// The all-heads decode kernel (decode_wide.cuh) for K and V in rot4 (rotated 4-bit codebook
// rows, read in the rotated basis; decode.cu rotates q before and out after).
#include "cuda/decode_wide.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_WIDE_LAUNCHER(LaunchDecodeWideRot4, FormatKind::kRot)
}  // namespace kvtier::cuda
