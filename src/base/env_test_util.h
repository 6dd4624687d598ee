// Helpers shared by the Env tests: string <-> bytes, write / read a whole file, and a
// fresh directory under /tmp (PosixEnv) or in a MemEnv. Test-only; not thread-safe.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/env.h"

namespace kvtier::testing_env {

inline std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

inline std::string Str(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// Writes `content` to `path` in one append; Sync() when `sync`; always Close().
inline Status WriteString(Env* env, const std::string& path, std::string_view content,
                          bool sync = true) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env->NewWritableFile(path));
  KVTIER_RETURN_IF_ERROR(f->Append(Bytes(content)));
  if (sync) KVTIER_RETURN_IF_ERROR(f->Sync());
  return f->Close();
}

// The whole file as a string, or "<Status>" when it cannot be read.
inline std::string ReadString(Env* env, const std::string& path) {
  Result<std::vector<uint8_t>> r = env->ReadFile(path);
  if (!r.ok()) return "<" + r.status().ToString() + ">";
  return Str(*r);
}

// A fresh, empty directory under /tmp, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kvtier_env_test.XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    EXPECT_NE(made, nullptr);
    path_ = made != nullptr ? made : "/tmp/kvtier_env_test.failed";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kvtier::testing_env
