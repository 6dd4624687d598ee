// /proc readers: values are plausible and peak RSS follows a real allocation.
#include "base/sysinfo.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace kvtier {
namespace {

TEST(SysInfo, PeakRssGrowsWithTouchedMemory) {
  Result<uint64_t> before = PeakRssBytes();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  constexpr size_t kBytes = 64u << 20;
  std::vector<char> big(kBytes);
  std::memset(big.data(), 1, big.size());
  Result<uint64_t> cur = CurrentRssBytes();  // read first: the peak can only grow after it
  ASSERT_TRUE(cur.ok());
  Result<uint64_t> after = PeakRssBytes();
  ASSERT_TRUE(after.ok());
  EXPECT_GE(*after, *before);
  EXPECT_GE(*after, kBytes);
  EXPECT_GE(*cur, kBytes);
  EXPECT_LE(*cur, *after);
  EXPECT_EQ(big[kBytes - 1], 1);
}

TEST(SysInfo, TotalRamIsPlausible) {
  Result<uint64_t> ram = TotalRamBytes();
  ASSERT_TRUE(ram.ok());
  EXPECT_GT(*ram, 256ull << 20);
}

}  // namespace
}  // namespace kvtier
