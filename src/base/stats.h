// Summary statistics for benchmark samples. Pure functions; thread-safe.
#pragma once

#include <algorithm>
#include <vector>

namespace kvtier {

// Median of the samples (mean of the middle two for an even count; 0 for none).
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace kvtier
