// Env: every file access of kvtier's persistent tiers goes through this interface, so tests
// can run the same code on an in-memory filesystem that simulates crashes, and inject faults
// (torn writes, ENOSPC, EIO, failed fsync, bit flips) where a real disk would produce them.
//
// Durability model (what PosixEnv gives on Linux and MemEnv simulates):
//   - bytes appended to a WritableFile are durable once Sync() returns OK;
//   - a file's creation, rename or removal is durable once SyncDir() of its directory returns
//     OK;
//   - a crash may keep any prefix of the unsynced bytes of a file (a torn write), and undoes
//     directory changes that were not synced;
//   - FilesystemSync::Sync() (syncfs) makes all of the above durable at once for the whole
//     filesystem: every byte written to a closed (or flushed) file and every creation, rename
//     and removal, of every directory, made before it started.
// So the crash-safe way to publish a file is: write to a temporary name, Sync(), Close(),
// RenameFile() to the final name, SyncDir(). For a batch of files on one filesystem:
// write and Close() every temporary, FilesystemSync::Sync(), rename every one,
// FilesystemSync::Sync() again (two device cache flushes instead of two per file).
//
// Paths are plain strings ('/'-separated). Errors name the path and the operation, and carry
// the errno text for PosixEnv ("open /x/y.tmp: No space left on device").
//
// Thread-safety: an Env may be used from any thread; a file object from one thread at a time.
// Ownership: file objects are owned by the caller; an Env must outlive the files it returned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // On error, a prefix of `data` may have been written. Bytes may be buffered inside the
  // process until Sync() or Close() (readers of the same file may not see them before).
  virtual Status Append(std::span<const uint8_t> data) = 0;
  // Makes every byte appended so far durable (fdatasync).
  virtual Status Sync() = 0;
  // Starts writing the bytes appended so far to the device and returns without waiting
  // (Linux: sync_file_range WRITE). A hint for batches: Sync() of several files one after
  // the other then finds every file's writes under way. Promises nothing about durability;
  // the default does nothing.
  virtual Status StartSync() { return Status::OK(); }
  virtual Status Close() = 0;  // also run by the destructor if not called; errors lost then
};

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at offset into dst; returns the count read (less only at the end).
  virtual Result<size_t> Read(uint64_t offset, size_t n, uint8_t* dst) const = 0;
  // The file's size when it was opened.
  virtual uint64_t size() const = 0;
};

// A handle on the filesystem holding a directory, to make all of it durable at once (Linux
// syncfs(2) on a descriptor of the directory). Open it BEFORE the writes it must cover: on
// Linux, syncfs reports a write-back error of the filesystem that happened at any time after
// the handle was opened (to this handle, whoever else saw it first) and may miss one from
// before. It is coarse: it also writes back (and reports errors of) every other file and
// process on that filesystem.
class FilesystemSync {
 public:
  virtual ~FilesystemSync() = default;
  // Makes every byte written to the filesystem (by anyone; bytes still buffered in a
  // WritableFile object are not written yet: Close() or StartSync() first) and every
  // directory change made before the call durable. On error nothing is promised: data or
  // entries may or may not be durable, as after a failed Sync() or SyncDir().
  virtual Status Sync() = 0;
};

struct DirEntry {
  std::string name;     // no directory part
  bool is_dir = false;
  uint64_t size = 0;    // bytes, for files
};

class Env {
 public:
  virtual ~Env() = default;

  // Creates (or truncates) `path` for appending.
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  virtual Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  // Atomically replaces `to` by `from` (rename(2)).
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Renames `from` to `to` only if `to` does not exist (renameat2(RENAME_NOREPLACE), or
  // link(2) + unlink(2) where the filesystem lacks it): AlreadyExists, and nothing changed,
  // when `to` is taken. A publish that must never overwrite another file uses it.
  virtual Status RenameNoReplace(const std::string& from, const std::string& to) = 0;
  // NotFound if missing.
  virtual Status RemoveFile(const std::string& path) = 0;
  // Creates the directory and any missing parents; OK if it exists. The directories it
  // creates are durable when it returns OK (it syncs the parent of each one it creates).
  virtual Status CreateDirs(const std::string& path) = 0;
  // Removes an empty directory.
  virtual Status RemoveDir(const std::string& path) = 0;
  // Makes the directory's entries (creations, renames, removals) durable.
  virtual Status SyncDir(const std::string& path) = 0;
  // Entries of a directory (not "." or ".."), in no particular order.
  virtual Result<std::vector<DirEntry>> ListDir(const std::string& path) = 0;
  // Size of a file (IOError for a directory).
  virtual Result<uint64_t> FileSize(const std::string& path) = 0;
  // True for a file or a directory.
  virtual bool FileExists(const std::string& path) = 0;
  // Bytes free for an unprivileged user on the filesystem holding `path` (statvfs).
  virtual Result<uint64_t> FreeBytes(const std::string& path) = 0;
  // A FilesystemSync for the filesystem holding the directory `dir` (open(O_DIRECTORY)).
  // The handle is owned by the caller, used by one thread at a time, and fails after a
  // simulated crash (MemEnv, FaultInjectionEnv) like file objects do.
  virtual Result<std::unique_ptr<FilesystemSync>> NewFilesystemSync(const std::string& dir) = 0;

  // Reads a whole file.
  Result<std::vector<uint8_t>> ReadFile(const std::string& path);
  // Writes `data` to path + ".tmp", syncs it, renames it to `path` and syncs the directory.
  // When it returns OK the file survives any crash; on error the temporary is removed (best
  // effort) and `path` is either its old version or `data`.
  Status WriteFileDurably(const std::string& path, std::span<const uint8_t> data);

  // The real filesystem (POSIX calls). Never null; lives for the whole process.
  static Env* Default();
};

// An in-memory filesystem with the durability model above (the whole tree is one filesystem:
// FilesystemSync::Sync() makes every file's bytes and every directory's entries durable).
// SimulateCrash() drops what a
// power cut would: unsynced bytes (keeping a random prefix of them, seeded, so torn writes
// happen) and unsynced directory changes. Open file objects of the old "boot" fail after it.
// NewWritableFile over an existing file empties it at once, durably (the harsh but possible
// outcome of O_TRUNC): publish new versions under a temporary name instead.
class MemEnv : public Env {
 public:
  // How a crash treats unsynced bytes of a file.
  enum class CrashMode : uint8_t {
    kDropUnsynced = 0,  // every unsynced byte is lost
    kTornPrefix = 1,    // a random prefix of the unsynced bytes survives
    kTornGarbage = 2,   // as kTornPrefix, and the surviving unsynced bytes may be scrambled
  };
  static std::unique_ptr<MemEnv> Create(uint64_t seed = 0);
  virtual void SimulateCrash(CrashMode mode) = 0;
  // Total bytes of all files (current view).
  virtual uint64_t TotalBytes() const = 0;
  // Capacity for FreeBytes (capacity - TotalBytes()) and for ENOSPC on Append: an Append
  // that would exceed it writes nothing and returns ResourceExhausted. Default: unlimited
  // (FreeBytes then returns UINT64_MAX).
  virtual void SetCapacity(uint64_t bytes) = 0;
  // How many times SimulateCrash() ran.
  virtual uint64_t crash_count() const = 0;
};

// Wraps another Env and injects faults. Every operation is counted (op_count()); a rule
// decides, per operation, whether it fails. Thread-safe. The rule is called outside any lock,
// possibly from several threads at once; it must not call back into this env. File objects
// opened before a crash fail after Restart(), whatever the base. `base` must outlive it.
class FaultInjectionEnv : public Env {
 public:
  enum class Op : uint8_t {
    kOpenWrite, kAppend, kSync, kClose, kOpenRead, kRead, kRename, kRemove, kCreateDirs,
    kRemoveDir, kSyncDir, kList, kFileSize, kFreeBytes,
    kSyncFs,     // FilesystemSync::Sync() (NewFilesystemSync() itself counts as kOpenRead);
                 // a fault (EIO, ENOSPC, crash) makes nothing durable: the base's Sync()
                 // is not called
  };
  // What happens to one operation.
  enum class Fault : uint8_t {
    kNone = 0,
    kEio,        // the operation fails with IOError "... (injected EIO)"
    kEnospc,     // an operation that writes (OpenWrite, Append, Sync, Close, Rename,
                 // CreateDirs, SyncDir, SyncFs) fails with ResourceExhausted
                 // "... (injected ENOSPC)";
                 // on a read-only operation it acts as kEio
    kTornWrite,  // Append writes a strict prefix of the data, then fails with IOError
                 // "(injected torn write)"; on any other operation it acts as kEio
    kBitFlip,    // Read succeeds but one bit of the returned bytes is flipped; Append writes
                 // the data with one bit flipped and returns OK (silent corruption); on any
                 // other operation it does nothing (and is not counted as injected)
    kCrash,      // the base env (a MemEnv) crashes now; this and every later op fail until
                 // Restart()
  };
  // rule(op, op_index, path) -> fault. op_index counts every operation from 0 (FileExists
  // and RandomAccessFile::size are not operations). `path` is the file or directory operated
  // on; for kRename, the source. The rule is called once at a time, never concurrently, so it
  // may keep unsynchronized state; it must not call into this Env.
  using Rule = std::function<Fault(Op op, uint64_t op_index, const std::string& path)>;

  static std::unique_ptr<FaultInjectionEnv> Create(Env* base);
  virtual void SetRule(Rule rule) = 0;
  virtual uint64_t op_count() const = 0;
  virtual uint64_t faults_injected() const = 0;
  // After a kCrash: MemEnv::SimulateCrash(mode) on the base (when it is a MemEnv) and
  // operations work again.
  virtual void Restart(MemEnv::CrashMode mode) = 0;
  virtual bool crashed() const = 0;
};

}  // namespace kvtier
