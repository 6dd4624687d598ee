// The all-heads decode kernel (decode_wide.cuh) for K and V in q8_0.
#include "cuda/decode_wide.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_WIDE_LAUNCHER(LaunchDecodeWideQ8_0, FormatKind::kQ8_0)
}  // namespace kvtier::cuda
