// ThreadPool: every index visited exactly once, for many sizes, grains and pool sizes.
#include "kvtier/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <vector>

namespace kvtier {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (size_t n : {0u, 1u, 2u, 7u, 64u, 1000u, 4097u}) {
      for (size_t grain : {0u, 1u, 3u, 100u}) {
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, grain, [&](size_t b, size_t e) {
          ASSERT_LT(b, e);
          ASSERT_LE(e, n);
          if (grain != 0) {
            ASSERT_LE(e - b, grain);
          }
          for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << grain << " " << i;
      }
    }
  }
}

TEST(ThreadPool, ComputesTheSameSumAsSerialCode) {
  ThreadPool pool(4);
  std::vector<uint64_t> v(100000);
  std::iota(v.begin(), v.end(), 1);
  for (int rep = 0; rep < 50; ++rep) {
    std::atomic<uint64_t> total{0};
    pool.ParallelFor(v.size(), 977, [&](size_t b, size_t e) {
      uint64_t s = 0;
      for (size_t i = b; i < e; ++i) s += v[i];
      total.fetch_add(s);
    });
    ASSERT_EQ(total.load(), 100000ull * 100001ull / 2);
  }
}

}  // namespace
}  // namespace kvtier
