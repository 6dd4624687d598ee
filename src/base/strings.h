// Small string helpers for messages: grouped integers and human-readable byte counts.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace kvtier {

// 3670016 -> "3,670,016".
inline std::string GroupDigits(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// 3670016 -> "3,670,016 bytes (3.50 MiB)"; below 1 KiB just "512 bytes".
inline std::string DescribeBytes(uint64_t v) {
  std::string s = GroupDigits(v) + " bytes";
  if (v >= 1024) {
    char buf[48];
    const double d = static_cast<double>(v);
    if (v >= (1ull << 30)) {
      std::snprintf(buf, sizeof buf, " (%.2f GiB)", d / (1ull << 30));
    } else if (v >= (1ull << 20)) {
      std::snprintf(buf, sizeof buf, " (%.2f MiB)", d / (1ull << 20));
    } else {
      std::snprintf(buf, sizeof buf, " (%.2f KiB)", d / 1024);
    }
    s += buf;
  }
  return s;
}

}  // namespace kvtier
