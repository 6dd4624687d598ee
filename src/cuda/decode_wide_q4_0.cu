// The all-heads decode kernel (decode_wide.cuh) for K and V in q4_0.
#include "cuda/decode_wide.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_WIDE_LAUNCHER(LaunchDecodeWideQ4_0, FormatKind::kQ4_0)
}  // namespace kvtier::cuda
