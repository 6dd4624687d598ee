// Process and machine facts read from /proc: resident memory (current and peak) and
// total RAM. Stateless; thread-safe.
#pragma once

#include <cstdint>

#include "kvtier/status.h"

namespace kvtier {

// Peak resident set size of this process in bytes (VmHWM).
Result<uint64_t> PeakRssBytes();
// Current resident set size in bytes (VmRSS).
Result<uint64_t> CurrentRssBytes();
// Total physical memory in bytes (MemTotal).
Result<uint64_t> TotalRamBytes();

}  // namespace kvtier
