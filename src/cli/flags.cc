// Shared flag parsing (see flags.h).
#include "cli/flags.h"

#include <cstdlib>
#include <sstream>

namespace kvtier::cli {

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Result<KvFormats> ParseKvFormats(const std::string& flag, const std::string& text) {
  const size_t slash = text.find('/');
  const std::string ks = text.substr(0, slash);
  const std::string vs = slash == std::string::npos ? ks : text.substr(slash + 1);
  Result<Format> k = ParseFormat(ks);
  if (!k.ok()) return Status::InvalidArgument(flag + ": " + k.status().message());
  Result<Format> v = ParseFormat(vs);
  if (!v.ok()) return Status::InvalidArgument(flag + ": " + v.status().message());
  return KvFormats{*k, *v, *k == *v ? k->name() : k->name() + "/" + v->name()};
}

Status CheckRange(const std::string& flag, long long v, long long lo, long long hi) {
  if (v >= lo && v <= hi) return Status::OK();
  return Status::InvalidArgument(flag + ": expected " + std::to_string(lo) + ".." +
                                 std::to_string(hi) + ", got " + std::to_string(v));
}

Result<std::vector<uint32_t>> ParseUintList(const std::string& flag, const std::string& text,
                                            uint64_t lo, uint64_t hi) {
  std::vector<uint32_t> out;
  for (const std::string& s : SplitComma(text)) {
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (end == s.c_str() || *end != '\0') {
      return Status::InvalidArgument(flag + ": '" + s + "' is not a number");
    }
    KVTIER_RETURN_IF_ERROR(CheckRange(flag, v, static_cast<long long>(lo), static_cast<long long>(hi)));
    out.push_back(static_cast<uint32_t>(v));
  }
  if (out.empty()) return Status::InvalidArgument(flag + ": no value given");
  return out;
}

}  // namespace kvtier::cli
