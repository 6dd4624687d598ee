// Env's non-virtual helpers (ReadFile, WriteFileDurably), written over the virtual
// operations so they behave the same on every Env. Stateless; thread-safe as the Env is.
#include "kvtier/env.h"

#include <algorithm>

namespace kvtier {
namespace {

// The directory holding `path`: "a/b" -> "a", "/a" -> "/", "a" -> ".".
std::string ParentDir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

Result<std::vector<uint8_t>> Env::ReadFile(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, NewRandomAccessFile(path));
  std::vector<uint8_t> data(file->size());
  size_t filled = 0;
  while (filled < data.size()) {
    KVTIER_ASSIGN_OR_RETURN(size_t got,
                            file->Read(filled, data.size() - filled, data.data() + filled));
    if (got == 0) break;  // the file shrank since it was opened
    filled += got;
  }
  data.resize(filled);
  return data;
}

Status Env::WriteFileDurably(const std::string& path, std::span<const uint8_t> data) {
  const std::string tmp = path + ".tmp";
  Status s;
  {
    Result<std::unique_ptr<WritableFile>> file = NewWritableFile(tmp);
    if (!file.ok()) return file.status();
    s = (*file)->Append(data);
    if (s.ok()) s = (*file)->Sync();
    Status c = (*file)->Close();
    if (s.ok()) s = std::move(c);
  }
  if (s.ok()) s = RenameFile(tmp, path);
  if (!s.ok()) {
    (void)RemoveFile(tmp);  // best effort: the error that matters is `s`
    return s;
  }
  return SyncDir(ParentDir(path));
}

}  // namespace kvtier
