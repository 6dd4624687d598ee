// CRC-32C over ISA-L. crc32_iscsi() neither inverts its seed nor its result, so the standard
// pre- and post-inversion happen here; it takes an int length, so long inputs go in chunks.
// Stateless; thread-safe.
#include "base/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <cstddef>

namespace kvtier {

uint32_t Crc32c(std::span<const uint8_t> data, uint32_t crc) {
  constexpr size_t kMaxChunk = size_t{1} << 30;
  uint32_t state = ~crc;
  const uint8_t* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const size_t n = std::min(left, kMaxChunk);
    // ISA-L's prototype lacks const; it only reads the buffer.
    state = crc32_iscsi(const_cast<unsigned char*>(p), static_cast<int>(n), state);
    p += n;
    left -= n;
  }
  return ~state;
}

}  // namespace kvtier
