// AlignedBuffer: alignment, zero fill, moves.
#include "base/aligned_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kvtier {
namespace {

TEST(AlignedBuffer, AlignedZeroedAndMovable) {
  for (size_t n : {1u, 63u, 64u, 65u, 100000u}) {
    AlignedBuffer b(n);
    ASSERT_EQ(b.size(), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % AlignedBuffer::kAlignment, 0u);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(b.data()[i], 0);
    b.data()[n - 1] = 7;
    AlignedBuffer moved(std::move(b));
    EXPECT_EQ(moved.size(), n);
    EXPECT_EQ(moved.data()[n - 1], 7);
    EXPECT_EQ(b.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_EQ(b.data(), nullptr);
  }
  AlignedBuffer empty(0);
  EXPECT_TRUE(empty.empty());
}

}  // namespace
}  // namespace kvtier
