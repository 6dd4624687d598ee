// PosixEnv: Env::Default(), the real filesystem through POSIX calls (open, write, pread,
// fdatasync, rename, unlink, mkdir, opendir, statvfs, syncfs). Every descriptor is O_CLOEXEC; calls
// interrupted by a signal are retried; short writes continue. Errors are "op path: strerror"
// with ENOENT -> NotFound, ENOSPC / EDQUOT -> ResourceExhausted, anything else -> IOError.
// The env itself is stateless and thread-safe; a file object is used by one thread at a time.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "kvtier/env.h"

namespace kvtier {
namespace {

Status ErrnoStatus(const std::string& context, int err) {
  std::string msg = context + ": " + std::strerror(err);
  if (err == ENOENT) return Status::NotFound(std::move(msg));
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted(std::move(msg));
  return Status::IOError(std::move(msg));
}

Status ErrnoStatus(const char* op, const std::string& path, int err) {
  return ErrnoStatus(std::string(op) + " " + path, err);
}

// Writes all of [p, p + n), continuing after short writes and EINTR.
Status WriteAll(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

Status FsyncDir(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus("open", path, errno);
  Status s;
  if (::fsync(fd) != 0) s = ErrnoStatus("fsync", path, errno);
  ::close(fd);
  return s;
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {
    buf_.reserve(kBufferBytes);
  }
  ~PosixWritableFile() override { (void)Close(); }

  Status Append(std::span<const uint8_t> data) override {
    if (fd_ < 0) return Status::IOError("append " + path_ + ": file is closed");
    if (buf_.size() + data.size() <= kBufferBytes) {  // small appends gather in the buffer
      buf_.insert(buf_.end(), data.begin(), data.end());
      return Status::OK();
    }
    KVTIER_RETURN_IF_ERROR(Flush());
    if (data.size() < kBufferBytes) {
      buf_.assign(data.begin(), data.end());
      return Status::OK();
    }
    return WriteAll(fd_, data.data(), data.size(), path_);
  }

  Status Sync() override {
    if (fd_ < 0) return Status::IOError("sync " + path_ + ": file is closed");
    KVTIER_RETURN_IF_ERROR(Flush());
    if (::fdatasync(fd_) != 0) return ErrnoStatus("fdatasync", path_, errno);
    return Status::OK();
  }

  Status StartSync() override {
    if (fd_ < 0) return Status::IOError("sync " + path_ + ": file is closed");
    KVTIER_RETURN_IF_ERROR(Flush());
#ifdef __linux__
    if (::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE) != 0) {
      return ErrnoStatus("sync_file_range", path_, errno);
    }
#endif
    return Status::OK();
  }

  Status Close() override {
    if (fd_ < 0) return Status::OK();
    Status s = Flush();
    // Linux releases the descriptor even when close() fails: never retry it.
    if (::close(fd_) != 0 && s.ok()) s = ErrnoStatus("close", path_, errno);
    fd_ = -1;
    return s;
  }

 private:
  static constexpr size_t kBufferBytes = 64u << 10;

  Status Flush() {
    if (buf_.empty()) return Status::OK();
    Status s = WriteAll(fd_, buf_.data(), buf_.size(), path_);
    buf_.clear();  // on error what was written is unknown: the caller sees the error
    return s;
  }

  const std::string path_;
  int fd_;
  std::vector<uint8_t> buf_;
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  Result<size_t> Read(uint64_t offset, size_t n, uint8_t* dst) const override {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("read", path_, errno);
      }
      if (r == 0) break;  // end of file
      done += static_cast<size_t>(r);
    }
    return done;
  }

  uint64_t size() const override { return size_; }

 private:
  const std::string path_;
  const int fd_;
  const uint64_t size_;
};

// A descriptor of a directory, opened when the handle is made (so syncfs reports every
// write-back error of the filesystem from then on), closed by the destructor.
class PosixFilesystemSync final : public FilesystemSync {
 public:
  PosixFilesystemSync(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixFilesystemSync() override { ::close(fd_); }

  Status Sync() override {
#ifdef __linux__
    if (::syncfs(fd_) != 0) return ErrnoStatus("syncfs", path_, errno);
#else
    ::sync();  // no syncfs: the whole system (reports no errors)
#endif
    return Status::OK();
  }

 private:
  const std::string path_;
  const int fd_;
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    int fd;
    do {
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ErrnoStatus("open", path, errno);
    return std::unique_ptr<WritableFile>(std::make_unique<PosixWritableFile>(path, fd));
  }

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ErrnoStatus("open", path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      Status s = ErrnoStatus("fstat", path, errno);
      ::close(fd);
      return s;
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      return ErrnoStatus("open", path, EISDIR);
    }
    return std::unique_ptr<RandomAccessFile>(std::make_unique<PosixRandomAccessFile>(
        path, fd, static_cast<uint64_t>(st.st_size)));
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus("rename " + from + " -> " + to, errno);
    }
    return Status::OK();
  }

  Status RenameNoReplace(const std::string& from, const std::string& to) override {
    const std::string context = "rename " + from + " -> " + to;
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
      return Status::OK();
    }
    int err = errno;
    if (err == EINVAL || err == ENOSYS || err == ENOTSUP) {
      // A filesystem without RENAME_NOREPLACE: link(2) fails with EEXIST just as well.
      if (::link(from.c_str(), to.c_str()) == 0) {
        (void)::unlink(from.c_str());
        return Status::OK();
      }
      err = errno;
    }
    if (err == EEXIST) return Status::AlreadyExists(context + ": File exists");
    return ErrnoStatus(context, err);
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoStatus("unlink", path, errno);
    return Status::OK();
  }

  Status CreateDirs(const std::string& path) override {
    if (path.empty()) return Status::InvalidArgument("mkdir: empty path");
    // Every prefix ending before a '/', then the whole path.
    size_t pos = 0;
    while (pos != std::string::npos) {
      pos = path.find('/', pos + 1);
      const std::string prefix = path.substr(0, pos);
      if (prefix.empty() || prefix.back() == '/') continue;  // "//" or a trailing '/'
      if (::mkdir(prefix.c_str(), 0755) == 0) {
        const size_t slash = prefix.find_last_of('/');
        const std::string parent =
            slash == std::string::npos ? "." : (slash == 0 ? "/" : prefix.substr(0, slash));
        KVTIER_RETURN_IF_ERROR(FsyncDir(parent));
        continue;
      }
      const int err = errno;
      if (err != EEXIST) return ErrnoStatus("mkdir", prefix, err);
      struct stat st;
      if (::stat(prefix.c_str(), &st) != 0) return ErrnoStatus("stat", prefix, errno);
      if (!S_ISDIR(st.st_mode)) return ErrnoStatus("mkdir", prefix, ENOTDIR);
    }
    return Status::OK();
  }

  Status RemoveDir(const std::string& path) override {
    if (::rmdir(path.c_str()) != 0) return ErrnoStatus("rmdir", path, errno);
    return Status::OK();
  }

  Status SyncDir(const std::string& path) override { return FsyncDir(path); }

  Result<std::unique_ptr<FilesystemSync>> NewFilesystemSync(const std::string& dir) override {
    int fd;
    do {
      fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ErrnoStatus("open", dir, errno);
    return std::unique_ptr<FilesystemSync>(std::make_unique<PosixFilesystemSync>(dir, fd));
  }

  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return ErrnoStatus("opendir", path, errno);
    std::vector<DirEntry> out;
    const int dfd = ::dirfd(dir);
    while (true) {
      errno = 0;
      const struct dirent* e = ::readdir(dir);
      if (e == nullptr) {
        const int err = errno;
        ::closedir(dir);
        if (err != 0) return ErrnoStatus("readdir", path, err);
        return out;
      }
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      struct stat st;
      if (::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;  // removed while we listed
        const int err = errno;
        ::closedir(dir);
        return ErrnoStatus("stat", path + "/" + e->d_name, err);
      }
      DirEntry entry;
      entry.name = e->d_name;
      entry.is_dir = S_ISDIR(st.st_mode);
      entry.size = entry.is_dir ? 0 : static_cast<uint64_t>(st.st_size);
      out.push_back(std::move(entry));
    }
  }

  Result<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("stat", path, errno);
    if (S_ISDIR(st.st_mode)) return ErrnoStatus("stat", path, EISDIR);
    return static_cast<uint64_t>(st.st_size);
  }

  bool FileExists(const std::string& path) override {
    return ::access(path.c_str(), F_OK) == 0;
  }

  Result<uint64_t> FreeBytes(const std::string& path) override {
    struct statvfs sv;
    int r;
    do {
      r = ::statvfs(path.c_str(), &sv);
    } while (r != 0 && errno == EINTR);
    if (r != 0) return ErrnoStatus("statvfs", path, errno);
    return static_cast<uint64_t>(sv.f_bavail) * static_cast<uint64_t>(sv.f_frsize);
  }
};

}  // namespace

Env* Env::Default() {
  static Env* const env = new PosixEnv();  // never destroyed: files may outlive statics
  return env;
}

}  // namespace kvtier
