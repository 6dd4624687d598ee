// FaultInjectionEnv: forwards every operation to a base Env, counting each one and asking
// the rule whether it fails (EIO, ENOSPC, a torn write, a flipped bit, a crash). After a
// kCrash every operation fails until Restart(), which crashes the base when it is a MemEnv.
// Thread-safe: counters, rule and crash state sit behind one mutex; the rule runs outside it.
// Owns nothing but the file wrappers it hands out; `base` must outlive it.
#include <mutex>
#include <string_view>
#include <vector>

#include "kvtier/env.h"

namespace kvtier {
namespace {

using Op = FaultInjectionEnv::Op;
using Fault = FaultInjectionEnv::Fault;

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kOpenWrite: return "open";
    case Op::kAppend: return "write";
    case Op::kSync: return "fdatasync";
    case Op::kClose: return "close";
    case Op::kOpenRead: return "open";
    case Op::kRead: return "read";
    case Op::kRename: return "rename";
    case Op::kRemove: return "unlink";
    case Op::kCreateDirs: return "mkdir";
    case Op::kRemoveDir: return "rmdir";
    case Op::kSyncDir: return "fsync";
    case Op::kList: return "opendir";
    case Op::kFileSize: return "stat";
    case Op::kFreeBytes: return "statvfs";
    case Op::kSyncFs: return "syncfs";
  }
  return "op";
}

bool Writes(Op op) {
  switch (op) {
    case Op::kOpenWrite: case Op::kAppend: case Op::kSync: case Op::kClose: case Op::kRename:
    case Op::kCreateDirs: case Op::kSyncDir: case Op::kSyncFs:
      return true;
    default:
      return false;
  }
}

// A well-mixed 64-bit value from an operation index (splitmix64), for torn lengths and bits.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// What one operation gets: the fault to apply (already mapped to what this op can do), its
// index, and the error to return when the op must fail without reaching the base.
struct Decision {
  Fault fault = Fault::kNone;
  uint64_t index = 0;
  uint64_t epoch = 0;  // the env's epoch when the operation was counted
  Status error;
};

class FaultEnvImpl;

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultEnvImpl* env, std::unique_ptr<WritableFile> base, std::string path,
                    uint64_t epoch)
      : env_(env), base_(std::move(base)), path_(std::move(path)), epoch_(epoch) {}
  ~FaultWritableFile() override { (void)Close(); }
  Status Append(std::span<const uint8_t> data) override;
  Status Sync() override;
  // A hint with no durability: not an operation (no fault, not counted), passed on.
  Status StartSync() override { return base_->StartSync(); }
  Status Close() override;

 private:
  FaultEnvImpl* const env_;
  std::unique_ptr<WritableFile> base_;
  const std::string path_;
  const uint64_t epoch_;
  bool closed_ = false;
};

class FaultRandomAccessFile final : public RandomAccessFile {
 public:
  FaultRandomAccessFile(FaultEnvImpl* env, std::unique_ptr<RandomAccessFile> base,
                        std::string path, uint64_t epoch)
      : env_(env), base_(std::move(base)), path_(std::move(path)), epoch_(epoch) {}
  Result<size_t> Read(uint64_t offset, size_t n, uint8_t* dst) const override;
  uint64_t size() const override { return base_->size(); }

 private:
  FaultEnvImpl* const env_;
  const std::unique_ptr<RandomAccessFile> base_;
  const std::string path_;
  const uint64_t epoch_;
};

// Sync() is the injectable kSyncFs: on any fault the base's Sync() is not called (a failed
// syncfs makes nothing durable that was not already).
class FaultFilesystemSync final : public FilesystemSync {
 public:
  FaultFilesystemSync(FaultEnvImpl* env, std::unique_ptr<FilesystemSync> base, std::string path,
                      uint64_t epoch)
      : env_(env), base_(std::move(base)), path_(std::move(path)), epoch_(epoch) {}
  Status Sync() override;

 private:
  FaultEnvImpl* const env_;
  const std::unique_ptr<FilesystemSync> base_;
  const std::string path_;
  const uint64_t epoch_;
};

class FaultEnvImpl final : public FaultInjectionEnv {
 public:
  explicit FaultEnvImpl(Env* base) : base_(base), mem_(dynamic_cast<MemEnv*>(base)) {}

  // Counts the operation, runs the rule and records the fault. `epoch` is the epoch a file
  // object was opened in (kNoEpoch for env operations).
  static constexpr uint64_t kNoEpoch = ~uint64_t{0};
  Decision Decide(Op op, const std::string& path, uint64_t epoch = kNoEpoch) {
    Decision d;
    std::shared_ptr<const Rule> rule;
    const std::string context = std::string(OpName(op)) + " " + path;
    {
      std::lock_guard<std::mutex> lock(mu_);
      d.index = ops_++;
      d.epoch = epoch_;
      if (crashed_) {
        d.error = Status::IOError(context + ": crashed (injected crash, no Restart yet)");
        return d;
      }
      if (epoch != kNoEpoch && epoch != epoch_) {
        d.error = Status::IOError(context + ": stale file handle (injected crash)");
        return d;
      }
      rule = rule_;
    }
    if (rule == nullptr || !*rule) return d;
    Fault f;
    {
      // One rule call at a time: rules may keep unsynchronized state (a test's RNG) while the
      // tier calls in from several threads (writers, parallel promotion).
      std::lock_guard<std::mutex> lock(rule_mu_);
      f = (*rule)(op, d.index, path);
    }
    if (f == Fault::kEnospc && !Writes(op)) f = Fault::kEio;
    if (f == Fault::kTornWrite && op != Op::kAppend) f = Fault::kEio;
    if (f == Fault::kBitFlip && op != Op::kAppend && op != Op::kRead) f = Fault::kNone;
    if (f == Fault::kNone) return d;
    d.fault = f;
    std::lock_guard<std::mutex> lock(mu_);
    ++faults_;
    switch (f) {
      case Fault::kEio:
        d.error = Status::IOError(context + ": Input/output error (injected EIO)");
        break;
      case Fault::kEnospc:
        d.error = Status::ResourceExhausted(context + ": No space left on device (injected ENOSPC)");
        break;
      case Fault::kCrash:
        crashed_ = true;
        d.error = Status::IOError(context + ": crashed (injected crash)");
        break;
      default:
        break;  // torn writes and bit flips reach the base
    }
    return d;
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    Decision d = Decide(Op::kOpenWrite, path);
    if (!d.error.ok()) return d.error;
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_->NewWritableFile(path));
    return std::unique_ptr<WritableFile>(
        std::make_unique<FaultWritableFile>(this, std::move(file), path, d.epoch));
  }

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    Decision d = Decide(Op::kOpenRead, path);
    if (!d.error.ok()) return d.error;
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                            base_->NewRandomAccessFile(path));
    return std::unique_ptr<RandomAccessFile>(
        std::make_unique<FaultRandomAccessFile>(this, std::move(file), path, d.epoch));
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    Decision d = Decide(Op::kRename, from);
    if (!d.error.ok()) return Status(d.error.code(), d.error.message() + " (to " + to + ")");
    return base_->RenameFile(from, to);
  }
  Status RenameNoReplace(const std::string& from, const std::string& to) override {
    Decision d = Decide(Op::kRename, from);  // counted as a rename
    if (!d.error.ok()) return Status(d.error.code(), d.error.message() + " (to " + to + ")");
    return base_->RenameNoReplace(from, to);
  }
  Status RemoveFile(const std::string& path) override {
    Decision d = Decide(Op::kRemove, path);
    return d.error.ok() ? base_->RemoveFile(path) : d.error;
  }
  Status CreateDirs(const std::string& path) override {
    Decision d = Decide(Op::kCreateDirs, path);
    return d.error.ok() ? base_->CreateDirs(path) : d.error;
  }
  Status RemoveDir(const std::string& path) override {
    Decision d = Decide(Op::kRemoveDir, path);
    return d.error.ok() ? base_->RemoveDir(path) : d.error;
  }
  Status SyncDir(const std::string& path) override {
    Decision d = Decide(Op::kSyncDir, path);
    return d.error.ok() ? base_->SyncDir(path) : d.error;
  }
  Result<std::unique_ptr<FilesystemSync>> NewFilesystemSync(const std::string& dir) override {
    Decision d = Decide(Op::kOpenRead, dir);
    if (!d.error.ok()) return d.error;
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<FilesystemSync> fs, base_->NewFilesystemSync(dir));
    return std::unique_ptr<FilesystemSync>(
        std::make_unique<FaultFilesystemSync>(this, std::move(fs), dir, d.epoch));
  }
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    Decision d = Decide(Op::kList, path);
    if (!d.error.ok()) return d.error;
    return base_->ListDir(path);
  }
  Result<uint64_t> FileSize(const std::string& path) override {
    Decision d = Decide(Op::kFileSize, path);
    if (!d.error.ok()) return d.error;
    return base_->FileSize(path);
  }
  bool FileExists(const std::string& path) override {
    if (crashed()) return false;
    return base_->FileExists(path);
  }
  Result<uint64_t> FreeBytes(const std::string& path) override {
    Decision d = Decide(Op::kFreeBytes, path);
    if (!d.error.ok()) return d.error;
    return base_->FreeBytes(path);
  }

  void SetRule(Rule rule) override {
    auto shared = std::make_shared<const Rule>(std::move(rule));
    std::lock_guard<std::mutex> lock(mu_);
    rule_ = std::move(shared);
  }
  uint64_t op_count() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return ops_;
  }
  uint64_t faults_injected() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return faults_;
  }
  void Restart(MemEnv::CrashMode mode) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (mem_ != nullptr) mem_->SimulateCrash(mode);
    crashed_ = false;
    ++epoch_;
  }
  bool crashed() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return crashed_;
  }

 private:
  Env* const base_;
  MemEnv* const mem_;  // base_ when it is a MemEnv, else null
  mutable std::mutex mu_;
  std::mutex rule_mu_;  // serializes rule calls (never held with mu_)
  std::shared_ptr<const Rule> rule_;
  uint64_t ops_ = 0;
  uint64_t faults_ = 0;
  uint64_t epoch_ = 0;  // bumped by Restart(): file objects of an older epoch fail
  bool crashed_ = false;
};

Status FaultWritableFile::Append(std::span<const uint8_t> data) {
  Decision d = env_->Decide(Op::kAppend, path_, epoch_);
  if (!d.error.ok()) return d.error;
  if (d.fault == Fault::kTornWrite) {
    const size_t keep = data.empty() ? 0 : static_cast<size_t>(Mix(d.index) % data.size());
    KVTIER_RETURN_IF_ERROR(base_->Append(data.first(keep)));
    return Status::IOError("write " + path_ + ": wrote " + std::to_string(keep) + " of " +
                           std::to_string(data.size()) + " bytes (injected torn write)");
  }
  if (d.fault == Fault::kBitFlip && !data.empty()) {
    std::vector<uint8_t> copy(data.begin(), data.end());
    const uint64_t bit = Mix(d.index) % (copy.size() * 8);
    copy[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    return base_->Append(copy);
  }
  return base_->Append(data);
}

Status FaultWritableFile::Sync() {
  Decision d = env_->Decide(Op::kSync, path_, epoch_);
  return d.error.ok() ? base_->Sync() : d.error;
}

Status FaultWritableFile::Close() {
  if (closed_) return Status::OK();
  closed_ = true;
  Decision d = env_->Decide(Op::kClose, path_, epoch_);
  Status s = base_->Close();  // the descriptor is released whatever was injected
  return d.error.ok() ? s : d.error;
}

Status FaultFilesystemSync::Sync() {
  Decision d = env_->Decide(Op::kSyncFs, path_, epoch_);
  return d.error.ok() ? base_->Sync() : d.error;
}

Result<size_t> FaultRandomAccessFile::Read(uint64_t offset, size_t n, uint8_t* dst) const {
  Decision d = env_->Decide(Op::kRead, path_, epoch_);
  if (!d.error.ok()) return d.error;
  KVTIER_ASSIGN_OR_RETURN(size_t got, base_->Read(offset, n, dst));
  if (d.fault == Fault::kBitFlip && got > 0) {
    const uint64_t bit = Mix(d.index) % (uint64_t{got} * 8);
    dst[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  return got;
}

}  // namespace

std::unique_ptr<FaultInjectionEnv> FaultInjectionEnv::Create(Env* base) {
  return std::make_unique<FaultEnvImpl>(base);
}

}  // namespace kvtier
