// tier::StateStore (state_store.h): state snapshot files of the SSD tier.
#include "tier/state_store.h"

#include <algorithm>
#include <cstdio>

#include "base/crc32c.h"
#include "base/le_bytes.h"

namespace kvtier::tier {
namespace {

constexpr char kTmp[] = ".kvst.tmp";
constexpr char kSuffix[] = ".kvst";

bool EndsWith(const std::string& s, const char* suffix) {
  const std::string t(suffix);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

struct Header {
  BlockKey key;
  ModelFingerprint model;
  uint32_t position = 0;
};

void PutHeader(const Header& h, uint8_t* b) {
  PutLe32(b, kStateFileMagic);
  PutLe32(b + 4, kStateFileVersion);
  PutLe64(b + 8, h.key.lo);
  PutLe64(b + 16, h.key.hi);
  PutLe64(b + 24, h.model.lo);
  PutLe64(b + 32, h.model.hi);
  PutLe32(b + 40, h.position);
  PutLe32(b + 44, Crc32c({b, 44}));
}

Result<Header> ParseHeader(const uint8_t* b, const std::string& path) {
  if (GetLe32(b) != kStateFileMagic) {
    return Status::Corruption(path + ": state file magic: expected 0x5353564B, got " +
                              std::to_string(GetLe32(b)));
  }
  if (Crc32c({b, 44}) != GetLe32(b + 44)) {
    return Status::Corruption(path + ": state file header CRC (offset 44) does not match");
  }
  if (GetLe32(b + 4) != kStateFileVersion) {
    return Status::Unimplemented(path + ": state file version " + std::to_string(GetLe32(b + 4)) +
                                 ", this build reads " + std::to_string(kStateFileVersion));
  }
  Header h;
  h.key = {GetLe64(b + 8), GetLe64(b + 16)};
  h.model = {GetLe64(b + 24), GetLe64(b + 32)};
  h.position = GetLe32(b + 40);
  return h;
}

}  // namespace

std::vector<uint8_t> EncodeStateRecord(const BlockKey& key, const ModelFingerprint& model,
                                       const StateSnapshot& s) {
  const std::vector<uint8_t> body = EncodeStateSnapshot(s);
  std::vector<uint8_t> out(kStateFileHeaderBytes + body.size());
  PutHeader({key, model, s.position}, out.data());
  std::copy(body.begin(), body.end(), out.begin() + kStateFileHeaderBytes);
  return out;
}

Result<StateSnapshot> DecodeStateRecord(std::span<const uint8_t> b, const BlockKey& key,
                                        const ModelFingerprint& model, uint32_t position,
                                        const std::string& name) {
  if (b.size() < kStateFileHeaderBytes) {
    return Status::Corruption(name + ": state record size: expected at least " +
                              std::to_string(kStateFileHeaderBytes) + " bytes, got " +
                              std::to_string(b.size()));
  }
  KVTIER_ASSIGN_OR_RETURN(Header h, ParseHeader(b.data(), name));
  if (!(h.key == key) || !(h.model == model) || h.position != position) {
    return Status::Corruption(name + ": state record header names another snapshot (key " +
                              h.key.ToHex() + ", position " + std::to_string(h.position) +
                              "; expected " + key.ToHex() + ", " + std::to_string(position) +
                              ", or another model)");
  }
  KVTIER_ASSIGN_OR_RETURN(StateSnapshot d,
                          DecodeStateSnapshot(b.subspan(kStateFileHeaderBytes), name));
  if (d.position != position) {
    return Status::Corruption(name + ": snapshot position " + std::to_string(d.position) +
                              ", header " + std::to_string(position));
  }
  return d;
}

Result<StateSnapshot> VerifyStateRecord(std::span<const uint8_t> b, const BlockKey& key,
                                        const std::string& name) {
  if (b.size() < kStateFileHeaderBytes) {
    return Status::Corruption(name + ": state record size: expected at least " +
                              std::to_string(kStateFileHeaderBytes) + " bytes, got " +
                              std::to_string(b.size()));
  }
  KVTIER_ASSIGN_OR_RETURN(const Header h, ParseHeader(b.data(), name));
  return DecodeStateRecord(b, key, h.model, h.position, name);
}

std::string StateStore::PathOf(const BlockKey& key) const {
  return dir_ + "/" + key.ToHex() + kSuffix;
}

Result<std::unique_ptr<StateStore>> StateStore::Open(Env* env, const std::string& dir,
                                                     uint64_t max_bytes, bool log) {
  std::unique_ptr<StateStore> s(new StateStore(env, dir, max_bytes, log));
  KVTIER_RETURN_IF_ERROR(env->CreateDirs(s->dir_));
  KVTIER_RETURN_IF_ERROR(env->CreateDirs(s->quarantine_));
  KVTIER_RETURN_IF_ERROR(s->Scan());
  StateStore* raw = s.get();
  s->writer_ = std::thread([raw] { raw->WriterLoop(); });
  return s;
}

StateStore::~StateStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  if (writer_.joinable()) writer_.join();
}

Status StateStore::Scan() {
  KVTIER_ASSIGN_OR_RETURN(std::vector<DirEntry> list, env_->ListDir(dir_));
  for (const DirEntry& f : list) {
    const std::string path = dir_ + "/" + f.name;
    if (EndsWith(f.name, kTmp)) {
      (void)env_->RemoveFile(path);
      continue;
    }
    if (f.is_dir || !EndsWith(f.name, kSuffix)) continue;
    uint8_t b[kStateFileHeaderBytes];
    Result<Header> h = Status::Corruption(path + ": shorter than its header");
    auto file = env_->NewRandomAccessFile(path);
    if (file.ok() && (*file)->size() > kStateFileHeaderBytes + kStateSnapshotHeaderBytes) {
      auto n = (*file)->Read(0, sizeof b, b);
      if (n.ok() && *n == sizeof b) h = ParseHeader(b, path);
    }
    if (!h.ok()) {
      if (h.status().code() == StatusCode::kUnimplemented) continue;  // newer: left alone
      (void)env_->RenameFile(path, quarantine_ + "/" + f.name);
      ++stats_.corrupt;
      if (log_) std::fprintf(stderr, "kvtier ssd tier: quarantined %s: %s\n", f.name.c_str(),
                             h.status().message().c_str());
      continue;
    }
    Index(h->key, h->model, h->position, (*file)->size());
    ++stats_.found;
  }
  return Status::OK();
}

void StateStore::Index(const BlockKey& key, const ModelFingerprint& model, uint32_t position,
                       uint64_t bytes) {
  if (index_.count(key) > 0) return;
  Entry e{model, position, bytes, ++tick_};
  index_.emplace(key, e);
  lru_.emplace(e.tick, P(key));
  ++positions_[P(model)][position];
  stats_.bytes += bytes;
  stats_.states = index_.size();
}

void StateStore::Drop(const BlockKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  const Entry e = it->second;
  index_.erase(it);
  lru_.erase({e.tick, P(key)});
  auto pm = positions_.find(P(e.model));
  if (--pm->second[e.position] == 0) pm->second.erase(e.position);
  if (pm->second.empty()) positions_.erase(pm);
  stats_.bytes -= e.bytes;
  stats_.states = index_.size();
}

void StateStore::Spill(const ModelFingerprint& model, const BlockKey& key,
                       std::shared_ptr<const StateSnapshot> s) {
  if (s == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    ++stats_.already_present;
    lru_.erase({it->second.tick, P(key)});
    it->second.tick = ++tick_;
    lru_.emplace(it->second.tick, P(key));
    return;
  }
  queue_.push_back({model, key, std::move(s)});
  cv_work_.notify_one();
}

Status StateStore::Write(const Job& j, uint64_t* file_bytes) {
  const std::vector<uint8_t> rec = EncodeStateRecord(j.key, j.model, *j.s);
  *file_bytes = rec.size();
  if (*file_bytes > max_bytes_) return Status::ResourceExhausted("larger than the cap");
  const std::string path = PathOf(j.key), tmp = path.substr(0, path.size() - 5) + kTmp;
  {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env_->NewWritableFile(tmp));
    Status s = f->Append(rec);
    if (s.ok()) s = f->Sync();
    const Status c = f->Close();
    if (s.ok()) s = c;
    if (!s.ok()) {
      (void)env_->RemoveFile(tmp);
      return s;
    }
  }
  Status s = env_->RenameFile(tmp, path);
  if (s.ok()) s = env_->SyncDir(dir_);
  if (!s.ok()) (void)env_->RemoveFile(tmp);
  return s;
}

void StateStore::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stop_, and everything written
    Job j = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    // Room first: LRU files go until the new one fits.
    const uint64_t need = kStateFileHeaderBytes + j.s->bytes();
    std::vector<std::string> remove;
    while (!lru_.empty() && stats_.bytes + need > max_bytes_) {
      const Pair k = lru_.begin()->second;
      const BlockKey key{k.second, k.first};
      remove.push_back(PathOf(key));
      Drop(key);
      ++stats_.evicted;
    }
    lock.unlock();
    for (const std::string& p : remove) (void)env_->RemoveFile(p);
    uint64_t bytes = 0;
    const Status s = Write(j, &bytes);
    lock.lock();
    if (s.ok()) {
      Index(j.key, j.model, j.s->position, bytes);
      ++stats_.spilled;
    } else {
      ++stats_.write_failures;
    }
    writing_ = false;
    if (queue_.empty()) cv_idle_.notify_all();
  }
  cv_idle_.notify_all();
}

void StateStore::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_idle_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

Status StateStore::Clear() {
  Flush();
  std::vector<std::string> paths;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, e] : index_) paths.push_back(PathOf(key));
    index_.clear();
    lru_.clear();
    positions_.clear();
    stats_.bytes = 0;
    stats_.states = 0;
  }
  Status first;
  for (const std::string& p : paths) {
    const Status s = env_->RemoveFile(p);
    if (!s.ok() && s.code() != StatusCode::kNotFound && first.ok()) first = s;
  }
  (void)env_->SyncDir(dir_);
  return first;
}

StateStoreStats StateStore::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void StateStore::Quarantine(const BlockKey& key, const std::string& why) {
  const std::string path = PathOf(key);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Drop(key);
    ++stats_.corrupt;
  }
  const std::string name = path.substr(path.find_last_of('/') + 1);
  if (!env_->RenameFile(path, quarantine_ + "/" + name).ok()) {
    (void)env_->RemoveFile(path);
  }
  if (log_) {
    std::fprintf(stderr, "kvtier ssd tier: quarantined %s: %s\n", name.c_str(), why.c_str());
  }
}

std::shared_ptr<const StateSnapshot> StateStore::Find(const ModelFingerprint& model,
                                                      std::span<const int32_t> tokens,
                                                      uint32_t min_position,
                                                      uint32_t max_position) {
  std::vector<uint32_t> pos;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = positions_.find(P(model));
    if (it == positions_.end()) return nullptr;
    for (const auto& [p, count] : it->second) {
      if (p > max_position || p > tokens.size()) break;
      if (p > min_position) pos.push_back(p);
    }
  }
  const std::vector<BlockKey> keys = StateSnapshotKeys(model, tokens, pos);
  for (size_t i = pos.size(); i-- > 0;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (index_.count(keys[i]) == 0) continue;
    }
    const std::string path = PathOf(keys[i]);
    auto f = env_->NewRandomAccessFile(path);
    if (!f.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      Drop(keys[i]);
      continue;
    }
    std::vector<uint8_t> b((*f)->size());
    auto n = (*f)->Read(0, b.size(), b.data());
    Status bad = Status::OK();
    std::shared_ptr<StateSnapshot> s;
    if (!n.ok() || *n != b.size()) {
      bad = Status::Corruption(path + ": short read");
    } else {
      Result<StateSnapshot> d = DecodeStateRecord(b, keys[i], model, pos[i], path);
      if (d.ok()) {
        s = std::make_shared<StateSnapshot>(std::move(*d));
      } else {
        bad = d.status();
      }
    }
    if (!bad.ok()) {
      Quarantine(keys[i], bad.message());
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(keys[i]);
    if (it != index_.end()) {
      lru_.erase({it->second.tick, P(keys[i])});
      it->second.tick = ++tick_;
      lru_.emplace(it->second.tick, P(keys[i]));
    }
    ++stats_.loaded;
    return s;
  }
  return nullptr;
}

}  // namespace kvtier::tier
