// CRC-32C: the standard check value, RFC 3720 B.4 vectors, extension, and agreement with a
// bitwise reference on random inputs of many lengths and alignments.
#include "base/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string_view>
#include <vector>

namespace kvtier {
namespace {

// Bit-at-a-time CRC-32C (reflected polynomial 0x82F63B78), continued from `crc`.
uint32_t ReferenceCrc32c(std::span<const uint8_t> data, uint32_t crc = 0) {
  crc = ~crc;
  for (uint8_t byte : data) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Crc32c, StandardCheckValue) {
  EXPECT_EQ(Crc32c(Bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(ReferenceCrc32c(Bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc32c({}), 0u);
}

TEST(Crc32c, Rfc3720Vectors) {
  std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xFF), ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<uint8_t>(i);
    descending[i] = static_cast<uint8_t>(31 - i);
  }
  EXPECT_EQ(Crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(descending), 0x113FDB5Cu);
  EXPECT_EQ(ReferenceCrc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(ReferenceCrc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(ReferenceCrc32c(ascending), 0x46DD794Eu);
}

TEST(Crc32c, MatchesReferenceAndExtends) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> buf(70000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t len : {0u, 1u, 3u, 7u, 8u, 15u, 16u, 63u, 64u, 255u, 256u, 1000u, 4096u, 65537u}) {
    for (size_t offset : {0u, 1u, 3u}) {
      std::span<const uint8_t> data(buf.data() + offset, len);
      const uint32_t want = ReferenceCrc32c(data);
      ASSERT_EQ(Crc32c(data), want) << len << " @" << offset;
      for (size_t cut : {size_t{0}, len / 3, len / 2, len}) {
        ASSERT_EQ(Crc32c(data.subspan(cut), Crc32c(data.first(cut))), want) << len << " " << cut;
      }
      ASSERT_EQ(Crc32c(data, 0x12345678u), ReferenceCrc32c(data, 0x12345678u));
    }
  }
}

TEST(Crc32c, DetectsEveryOneBitFlip) {
  std::vector<uint8_t> data(512);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31 + 7);
  const uint32_t clean = Crc32c(data);
  for (size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    ASSERT_NE(Crc32c(data), clean) << bit;
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace kvtier
