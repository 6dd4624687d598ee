// Reads /proc/self/status and /proc/meminfo. Stateless; thread-safe.
#include "base/sysinfo.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace kvtier {
namespace {

// Finds "Key:   <n> kB" in a /proc file and returns n * 1024.
Result<uint64_t> ReadKbField(const char* path, const char* key) {
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return Status::IOError(std::string("cannot open ") + path);
  char line[256];
  const size_t key_len = std::strlen(key);
  Result<uint64_t> result = Status::NotFound(std::string(key) + " not found in " + path);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, key, key_len) == 0 && line[key_len] == ':') {
      unsigned long long kb = 0;
      if (std::sscanf(line + key_len + 1, "%llu", &kb) == 1) {
        result = static_cast<uint64_t>(kb) * 1024u;
      } else {
        result = Status::Corruption(std::string("unparsable ") + key + " line in " + path);
      }
      break;
    }
  }
  std::fclose(f);
  return result;
}

}  // namespace

Result<uint64_t> PeakRssBytes() { return ReadKbField("/proc/self/status", "VmHWM"); }
Result<uint64_t> CurrentRssBytes() { return ReadKbField("/proc/self/status", "VmRSS"); }
Result<uint64_t> TotalRamBytes() { return ReadKbField("/proc/meminfo", "MemTotal"); }

}  // namespace kvtier
