// The all-heads decode kernel (decode_wide.cuh) for K and V in f16.
#include "cuda/decode_wide.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_WIDE_LAUNCHER(LaunchDecodeWideF16, FormatKind::kF16)
}  // namespace kvtier::cuda
