// MemEnv: an in-memory filesystem that keeps the durability model of kvtier/env.h, so tests
// can crash it at any point. Each file is an inode (bytes + how many of them are synced);
// each directory has a "current" namespace (what calls see) and a "durable" one (what a
// crash leaves), SyncDir() copying the changed entries of one directory from the first to
// the second; a FilesystemSync makes every directory and every file's bytes durable at once.
// SimulateCrash() resets every directory to its durable entries and cuts every surviving file
// to its synced bytes plus, in the torn modes, a seeded random prefix of the rest. A boot
// counter makes file objects of an earlier boot fail.
// Thread-safe: one mutex guards the whole tree; file objects take it for every call.
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <unordered_set>

#include "kvtier/env.h"

namespace kvtier {
namespace {

constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

struct Inode {
  std::vector<uint8_t> data;
  uint64_t synced = 0;  // data[0, synced) survives a crash
  int current_links = 0;  // entries naming it in current namespaces (for TotalBytes)
};

struct Dir;
// One directory entry: exactly one of file, dir is set.
struct Node {
  std::shared_ptr<Inode> file;
  std::shared_ptr<Dir> dir;
};

struct Dir {
  std::map<std::string, Node> current;
  std::map<std::string, Node> durable;
  std::set<std::string> dirty;  // names whose current entry differs from the durable one
};

std::string NoEntry(const std::string& context) {
  return context + ": No such file or directory";
}

class MemEnvImpl;

class MemFilesystemSync final : public FilesystemSync {
 public:
  MemFilesystemSync(MemEnvImpl* env, uint64_t boot, std::string path)
      : env_(env), boot_(boot), path_(std::move(path)) {}
  Status Sync() override;

 private:
  MemEnvImpl* const env_;
  const uint64_t boot_;
  const std::string path_;
};

class MemWritableFile final : public WritableFile {
 public:
  MemWritableFile(MemEnvImpl* env, std::shared_ptr<Inode> inode, uint64_t boot,
                  std::string path)
      : env_(env), inode_(std::move(inode)), boot_(boot), path_(std::move(path)) {}
  ~MemWritableFile() override { (void)Close(); }
  Status Append(std::span<const uint8_t> data) override;
  Status Sync() override;
  Status Close() override;

 private:
  MemEnvImpl* const env_;
  const std::shared_ptr<Inode> inode_;
  const uint64_t boot_;
  const std::string path_;
  bool closed_ = false;
};

class MemRandomAccessFile final : public RandomAccessFile {
 public:
  MemRandomAccessFile(MemEnvImpl* env, std::shared_ptr<Inode> inode, uint64_t boot,
                      std::string path, uint64_t size)
      : env_(env), inode_(std::move(inode)), boot_(boot), path_(std::move(path)), size_(size) {}
  Result<size_t> Read(uint64_t offset, size_t n, uint8_t* dst) const override;
  uint64_t size() const override { return size_; }

 private:
  MemEnvImpl* const env_;
  const std::shared_ptr<Inode> inode_;
  const uint64_t boot_;
  const std::string path_;
  const uint64_t size_;
};

class MemEnvImpl final : public MemEnv {
 public:
  explicit MemEnvImpl(uint64_t seed) : root_(std::make_shared<Dir>()), rng_(seed) {}

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string name;
    KVTIER_ASSIGN_OR_RETURN(Dir * dir, ResolveParent(path, "open", &name));
    auto it = dir->current.find(name);
    std::shared_ptr<Inode> inode;
    if (it != dir->current.end()) {
      if (it->second.dir) return Status::IOError("open " + path + ": Is a directory");
      inode = it->second.file;  // O_TRUNC: same inode, emptied (and durably so, the harsh case)
      Resize(inode.get(), 0);
      inode->synced = 0;
    } else {
      inode = std::make_shared<Inode>();
      Link(dir, name, Node{inode, nullptr});
    }
    return std::unique_ptr<WritableFile>(
        std::make_unique<MemWritableFile>(this, inode, boot_, path));
  }

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    KVTIER_ASSIGN_OR_RETURN(Node node, Lookup(path, "open"));
    if (node.dir) return Status::IOError("open " + path + ": Is a directory");
    const uint64_t size = node.file->data.size();
    return std::unique_ptr<RandomAccessFile>(
        std::make_unique<MemRandomAccessFile>(this, node.file, boot_, path, size));
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    return Rename(from, to, false);
  }
  Status RenameNoReplace(const std::string& from, const std::string& to) override {
    return Rename(from, to, true);
  }
  // Both renames, under one hold of mu_ (so the no-replace check and the rename are atomic).
  Status Rename(const std::string& from, const std::string& to, bool no_replace) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string context = "rename " + from + " -> " + to;
    std::string from_name, to_name;
    KVTIER_ASSIGN_OR_RETURN(Dir * from_dir, ResolveParent(from, "rename", &from_name));
    KVTIER_ASSIGN_OR_RETURN(Dir * to_dir, ResolveParent(to, "rename", &to_name));
    auto it = from_dir->current.find(from_name);
    if (it == from_dir->current.end()) return Status::NotFound(NoEntry(context));
    const Node node = it->second;
    if (from_dir == to_dir && from_name == to_name) return Status::OK();
    auto target = to_dir->current.find(to_name);
    if (target != to_dir->current.end()) {
      if (no_replace) return Status::AlreadyExists(context + ": File exists");
      if (target->second.dir) return Status::IOError(context + ": Is a directory");
      if (node.dir) return Status::IOError(context + ": Not a directory");
    }
    if (node.dir && Contains(node.dir.get(), to_dir)) {
      return Status::InvalidArgument(context + ": Invalid argument (into itself)");
    }
    Unlink(from_dir, from_name);
    Link(to_dir, to_name, node);
    return Status::OK();
  }

  Status RemoveFile(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string name;
    KVTIER_ASSIGN_OR_RETURN(Dir * dir, ResolveParent(path, "unlink", &name));
    auto it = dir->current.find(name);
    if (it == dir->current.end()) return Status::NotFound(NoEntry("unlink " + path));
    if (it->second.dir) return Status::IOError("unlink " + path + ": Is a directory");
    Unlink(dir, name);
    return Status::OK();
  }

  Status CreateDirs(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> parts, Split(path, "mkdir"));
    Dir* dir = root_.get();
    std::string prefix;
    for (const std::string& part : parts) {
      prefix += "/" + part;
      auto it = dir->current.find(part);
      if (it != dir->current.end()) {
        if (!it->second.dir) return Status::IOError("mkdir " + prefix + ": Not a directory");
        dir = it->second.dir.get();
        continue;
      }
      auto child = std::make_shared<Dir>();
      Link(dir, part, Node{nullptr, child});
      SyncDirLocked(dir);  // as PosixEnv: the parent of a created directory is synced
      dir = child.get();
    }
    return Status::OK();
  }

  Status RemoveDir(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string name;
    KVTIER_ASSIGN_OR_RETURN(Dir * dir, ResolveParent(path, "rmdir", &name));
    if (name.empty()) return Status::IOError("rmdir " + path + ": Device or resource busy");
    auto it = dir->current.find(name);
    if (it == dir->current.end()) return Status::NotFound(NoEntry("rmdir " + path));
    if (!it->second.dir) return Status::IOError("rmdir " + path + ": Not a directory");
    if (!it->second.dir->current.empty()) {
      return Status::IOError("rmdir " + path + ": Directory not empty");
    }
    Unlink(dir, name);
    return Status::OK();
  }

  Status SyncDir(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    KVTIER_ASSIGN_OR_RETURN(Node node, Lookup(path, "open"));
    if (!node.dir) return Status::IOError("open " + path + ": Not a directory");
    SyncDirLocked(node.dir.get());
    return Status::OK();
  }

  Result<std::unique_ptr<FilesystemSync>> NewFilesystemSync(const std::string& dir) override {
    std::lock_guard<std::mutex> lock(mu_);
    KVTIER_ASSIGN_OR_RETURN(Node node, Lookup(dir, "open"));
    if (!node.dir) return Status::IOError("open " + dir + ": Not a directory");
    return std::unique_ptr<FilesystemSync>(std::make_unique<MemFilesystemSync>(this, boot_, dir));
  }

  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    KVTIER_ASSIGN_OR_RETURN(Node node, Lookup(path, "opendir"));
    if (!node.dir) return Status::IOError("opendir " + path + ": Not a directory");
    std::vector<DirEntry> out;
    out.reserve(node.dir->current.size());
    for (const auto& [name, child] : node.dir->current) {
      DirEntry e;
      e.name = name;
      e.is_dir = child.dir != nullptr;
      e.size = child.file ? child.file->data.size() : 0;
      out.push_back(std::move(e));
    }
    return out;
  }

  Result<uint64_t> FileSize(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    KVTIER_ASSIGN_OR_RETURN(Node node, Lookup(path, "stat"));
    if (node.dir) return Status::IOError("stat " + path + ": Is a directory");
    return static_cast<uint64_t>(node.file->data.size());
  }

  bool FileExists(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Lookup(path, "stat").ok();
  }

  Result<uint64_t> FreeBytes(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    KVTIER_ASSIGN_OR_RETURN(Node node, Lookup(path, "statvfs"));
    (void)node;
    if (capacity_ == kUnlimited) return kUnlimited;
    return capacity_ - std::min(capacity_, current_bytes_);
  }

  void SimulateCrash(CrashMode mode) override;

  uint64_t TotalBytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return current_bytes_;
  }

  void SetCapacity(uint64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    capacity_ = bytes;
  }

  uint64_t crash_count() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return crash_count_;
  }

 private:
  friend class MemWritableFile;
  friend class MemRandomAccessFile;
  friend class MemFilesystemSync;

  // Every directory's entries and every file's bytes below `dir` (current view) made
  // durable.
  static void SyncTreeLocked(Dir* dir, std::unordered_set<const void*>* seen) {
    if (!seen->insert(dir).second) return;
    SyncDirLocked(dir);
    for (const auto& [name, child] : dir->current) {
      if (child.dir) {
        SyncTreeLocked(child.dir.get(), seen);
      } else {
        child.file->synced = child.file->data.size();
      }
    }
  }

  // Path components, "." dropped and ".." applied; relative paths start at the root.
  static Result<std::vector<std::string>> Split(const std::string& path, const char* op) {
    if (path.empty()) return Status::InvalidArgument(std::string(op) + ": empty path");
    std::vector<std::string> parts;
    size_t pos = 0;
    while (pos <= path.size()) {
      size_t end = path.find('/', pos);
      if (end == std::string::npos) end = path.size();
      std::string part = path.substr(pos, end - pos);
      if (part == "..") {
        if (!parts.empty()) parts.pop_back();
      } else if (!part.empty() && part != ".") {
        parts.push_back(std::move(part));
      }
      pos = end + 1;
    }
    return parts;
  }

  // The directory holding `path` and the last component (empty for the root).
  Result<Dir*> ResolveParent(const std::string& path, const char* op, std::string* name) {
    KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> parts, Split(path, op));
    name->clear();
    if (parts.empty()) return root_.get();
    *name = parts.back();
    parts.pop_back();
    Dir* dir = root_.get();
    for (const std::string& part : parts) {
      auto it = dir->current.find(part);
      if (it == dir->current.end()) return Status::NotFound(NoEntry(op + (" " + path)));
      if (!it->second.dir) return Status::IOError(op + (" " + path) + ": Not a directory");
      dir = it->second.dir.get();
    }
    return dir;
  }

  Result<Node> Lookup(const std::string& path, const char* op) {
    std::string name;
    KVTIER_ASSIGN_OR_RETURN(Dir * dir, ResolveParent(path, op, &name));
    if (name.empty()) return Node{nullptr, root_};
    auto it = dir->current.find(name);
    if (it == dir->current.end()) return Status::NotFound(NoEntry(op + (" " + path)));
    return it->second;
  }

  // Whether `inner` is `outer` or below it (current view).
  static bool Contains(const Dir* outer, const Dir* inner) {
    if (outer == inner) return true;
    for (const auto& [name, child] : outer->current) {
      if (child.dir && Contains(child.dir.get(), inner)) return true;
    }
    return false;
  }

  void Resize(Inode* inode, size_t size) {
    if (inode->current_links > 0) current_bytes_ = current_bytes_ - inode->data.size() + size;
    inode->data.resize(size);
  }

  void Link(Dir* dir, const std::string& name, Node node) {
    if (dir->current.count(name) != 0) Unlink(dir, name);
    if (node.file && node.file->current_links++ == 0) current_bytes_ += node.file->data.size();
    dir->current[name] = std::move(node);
    dir->dirty.insert(name);
  }

  void Unlink(Dir* dir, const std::string& name) {
    auto it = dir->current.find(name);
    Inode* inode = it->second.file.get();
    if (inode != nullptr && --inode->current_links == 0) current_bytes_ -= inode->data.size();
    dir->current.erase(it);
    dir->dirty.insert(name);
  }

  static void SyncDirLocked(Dir* dir) {
    for (const std::string& name : dir->dirty) {
      auto it = dir->current.find(name);
      if (it == dir->current.end()) {
        dir->durable.erase(name);
      } else {
        dir->durable[name] = it->second;
      }
    }
    dir->dirty.clear();
  }

  // Resets `dir` and everything below to the durable view; collects the surviving inodes
  // once each, in a deterministic order (sorted names, depth first).
  static void ResetToDurable(Dir* dir, std::unordered_set<const void*>* seen,
                             std::vector<Inode*>* inodes) {
    if (!seen->insert(dir).second) return;
    dir->current = dir->durable;
    dir->dirty.clear();
    for (const auto& [name, child] : dir->current) {
      if (child.dir) {
        ResetToDurable(child.dir.get(), seen, inodes);
      } else if (seen->insert(child.file.get()).second) {
        inodes->push_back(child.file.get());
      }
    }
  }

  Status CheckBoot(uint64_t boot, const char* op, const std::string& path) const {
    if (boot != boot_) {
      return Status::IOError(std::string(op) + " " + path +
                             ": stale file handle (opened before a simulated crash)");
    }
    return Status::OK();
  }

  mutable std::mutex mu_;
  std::shared_ptr<Dir> root_;
  uint64_t boot_ = 0;
  uint64_t crash_count_ = 0;
  uint64_t current_bytes_ = 0;
  uint64_t capacity_ = kUnlimited;
  std::mt19937_64 rng_;
};

void MemEnvImpl::SimulateCrash(CrashMode mode) {
  std::lock_guard<std::mutex> lock(mu_);
  ++boot_;
  ++crash_count_;
  std::unordered_set<const void*> seen;
  std::vector<Inode*> inodes;
  ResetToDurable(root_.get(), &seen, &inodes);
  current_bytes_ = 0;
  for (Inode* inode : inodes) {
    const uint64_t synced = std::min<uint64_t>(inode->synced, inode->data.size());
    const uint64_t unsynced = inode->data.size() - synced;
    uint64_t keep = 0;
    if (mode != CrashMode::kDropUnsynced && unsynced > 0) keep = rng_() % (unsynced + 1);
    if (mode == CrashMode::kTornGarbage && keep > 0 && rng_() % 2 == 0) {
      // The tail of what survived was never fully written: scramble it (every byte changes).
      for (uint64_t i = synced + rng_() % keep; i < synced + keep; ++i) {
        inode->data[i] ^= static_cast<uint8_t>(1 + rng_() % 255);
      }
    }
    inode->data.resize(synced + keep);
    inode->synced = inode->data.size();
    inode->current_links = 0;
  }
  // Count the links of the surviving tree again (current == durable now).
  seen.clear();
  std::vector<Dir*> stack{root_.get()};
  while (!stack.empty()) {
    Dir* dir = stack.back();
    stack.pop_back();
    if (!seen.insert(dir).second) continue;
    for (const auto& [name, child] : dir->current) {
      if (child.dir) {
        stack.push_back(child.dir.get());
      } else if (child.file->current_links++ == 0) {
        current_bytes_ += child.file->data.size();
      }
    }
  }
}

Status MemWritableFile::Append(std::span<const uint8_t> data) {
  std::lock_guard<std::mutex> lock(env_->mu_);
  KVTIER_RETURN_IF_ERROR(env_->CheckBoot(boot_, "write", path_));
  if (closed_) return Status::IOError("write " + path_ + ": file is closed");
  if (env_->capacity_ != kUnlimited &&
      (env_->current_bytes_ > env_->capacity_ ||
       data.size() > env_->capacity_ - env_->current_bytes_)) {
    return Status::ResourceExhausted("write " + path_ + ": No space left on device");
  }
  const size_t old = inode_->data.size();
  env_->Resize(inode_.get(), old + data.size());
  if (!data.empty()) std::memcpy(inode_->data.data() + old, data.data(), data.size());
  return Status::OK();
}

Status MemWritableFile::Sync() {
  std::lock_guard<std::mutex> lock(env_->mu_);
  KVTIER_RETURN_IF_ERROR(env_->CheckBoot(boot_, "fdatasync", path_));
  if (closed_) return Status::IOError("fdatasync " + path_ + ": file is closed");
  inode_->synced = inode_->data.size();
  return Status::OK();
}

Status MemWritableFile::Close() {
  std::lock_guard<std::mutex> lock(env_->mu_);
  if (closed_) return Status::OK();
  closed_ = true;
  return env_->CheckBoot(boot_, "close", path_);
}

Status MemFilesystemSync::Sync() {
  std::lock_guard<std::mutex> lock(env_->mu_);
  KVTIER_RETURN_IF_ERROR(env_->CheckBoot(boot_, "syncfs", path_));
  std::unordered_set<const void*> seen;
  MemEnvImpl::SyncTreeLocked(env_->root_.get(), &seen);
  return Status::OK();
}

Result<size_t> MemRandomAccessFile::Read(uint64_t offset, size_t n, uint8_t* dst) const {
  std::lock_guard<std::mutex> lock(env_->mu_);
  KVTIER_RETURN_IF_ERROR(env_->CheckBoot(boot_, "read", path_));
  const std::vector<uint8_t>& data = inode_->data;
  if (offset >= data.size()) return size_t{0};
  const size_t count = static_cast<size_t>(std::min<uint64_t>(n, data.size() - offset));
  std::memcpy(dst, data.data() + offset, count);
  return count;
}

}  // namespace

std::unique_ptr<MemEnv> MemEnv::Create(uint64_t seed) {
  return std::make_unique<MemEnvImpl>(seed);
}

}  // namespace kvtier
