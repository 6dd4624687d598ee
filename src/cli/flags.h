// Flag parsing shared by the kvtier subcommands: comma lists, K[/V] format pairs, integer
// lists with a range. Errors name the flag. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/format.h"
#include "kvtier/status.h"

namespace kvtier::cli {

std::vector<std::string> SplitComma(const std::string& s);

// "q8_0/q4_0" -> K q8_0, V q4_0; "q4_0" -> both. name: "q4_0" or "q8_0/q4_0".
struct KvFormats {
  Format k, v;
  std::string name;
};
Result<KvFormats> ParseKvFormats(const std::string& flag, const std::string& text);

// OK if lo <= v <= hi, else "<flag>: expected lo..hi, got v".
Status CheckRange(const std::string& flag, long long v, long long lo, long long hi);

// "1024,4096" -> {1024, 4096}; every value within [lo, hi]; at least one.
Result<std::vector<uint32_t>> ParseUintList(const std::string& flag, const std::string& text,
                                            uint64_t lo, uint64_t hi);

}  // namespace kvtier::cli
