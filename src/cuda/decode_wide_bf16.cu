// The all-heads decode kernel (decode_wide.cuh) for K and V in bf16.
#include "cuda/decode_wide.cuh"

namespace kvtier::cuda {
KVTIER_DEFINE_DECODE_WIDE_LAUNCHER(LaunchDecodeWideBF16, FormatKind::kBF16)
}  // namespace kvtier::cuda
