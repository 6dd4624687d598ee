// Machine probes for roofline floors, measured in the same run as what they bound:
// memory bandwidth (a parallel memcpy, and a read-only stream) and peak f32 FMA throughput
// (independent FMA chains on the widest vector target). Each call uses the given pool's
// threads; call from one thread.
#pragma once

#include <cstddef>

namespace kvtier {

class ThreadPool;

// (bytes read + bytes written) per second of a memcpy of `bytes` split across the pool, in
// GB/s; the median of `repeats` copies.
double MemcpyProbeGbps(ThreadPool& pool, size_t bytes, int repeats);

// Bytes read per second by every thread of the pool streaming its own share of `bytes` (loads
// only, summed so that none can be dropped), in GB/s; the median of `repeats` passes. What a
// kernel that only reads can reach; a memcpy's (read + write) figure may be higher or lower.
double ReadProbeGbps(ThreadPool& pool, size_t bytes, int repeats);

// f32 GFLOP/s (an FMA counts 2) of independent FMA chains on every thread of the pool.
double PeakFmaGflops(ThreadPool& pool);

}  // namespace kvtier
