// CRC-32C (Castagnoli, the iSCSI / ext4 / RocksDB checksum), backed by Intel ISA-L's
// crc32_iscsi (hardware CRC32 instructions where the CPU has them). Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <span>

namespace kvtier {

// The standard CRC-32C of `data` (initial value and final xor 0xFFFFFFFF; "123456789" gives
// 0xE3069283), continued from `crc`, the CRC-32C of the bytes before `data` (0 for none):
// Crc32c(b, Crc32c(a)) == Crc32c(a + b).
uint32_t Crc32c(std::span<const uint8_t> data, uint32_t crc = 0);

}  // namespace kvtier
