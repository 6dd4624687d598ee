// SsdTier (kvtier/ssd_tier.h): the index of block files, the writer threads (group commit),
// reload with verification, quarantine, the size cap, and the startup scan. One mutex guards
// the index and the queue; file I/O runs outside it.
#include "kvtier/ssd_tier.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "base/timer.h"
#include "tier/block_file.h"

namespace kvtier {

using tier::BlockFileHeader;
using tier::KeyName;

namespace {

constexpr char kTmpSuffix[] = ".kvb.tmp";
constexpr char kSuffix[] = ".kvb";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

uint32_t Lcp(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<uint32_t>(i);
}

// A block waiting for the writer: its identity and a kTier reference on its pool block.
struct Job {
  BlockFileHeader header;
  std::shared_ptr<BlockPool> pool;
  BlockId block = -1;
};

}  // namespace

struct SsdTier::Impl {
  explicit Impl(SsdTierOptions o) : opt(std::move(o)), env(opt.env ? opt.env : Env::Default()) {}

  struct Entry {
    BlockKey parent;
    BlockKey ns;
    std::vector<int32_t> tokens;
    std::vector<uint32_t> ends;
    uint64_t bytes = 0;
    uint64_t tick = 0;
  };

  std::string SubDir(const BlockKey& k) const {
    char b[4];
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned>(k.hi >> 56));
    return opt.dir + "/blocks/" + b;
  }
  std::string PathOf(const BlockKey& k) const { return SubDir(k) + "/" + KeyName(k) + kSuffix; }

  // Index maintenance; all require mu.
  void AddEntry(const BlockFileHeader& h, uint64_t bytes);
  void DropEntry(const BlockKey& key);
  void Touch(const BlockKey& key);
  // Evicts LRU files until bytes + reserved + need <= max_bytes (false if it cannot).
  bool MakeRoom(uint64_t need, std::unique_lock<std::mutex>& lock);
  void Quarantine(const std::string& path, const std::string& why);

  Status Scan();
  void WriterLoop();
  // Writes and publishes a batch of jobs (group commit): room for each, then every file
  // written to its temporary name, every file synced, every rename, each directory synced
  // once (SsdSyncMode::kFilesystem: all written and closed, one syncfs, every rename, one
  // syncfs); a block is indexed only after its rename is durable. Requires mu (released for the
  // I/O); counts every job as spilled or skipped.
  void WriteBatch(std::vector<Job>& jobs, std::unique_lock<std::mutex>& lock);

  const SsdTierOptions opt;
  Env* const env;
  mutable std::mutex mu;
  std::condition_variable cv_work, cv_room, cv_idle;
  std::deque<Job> queue;
  int writing = 0;           // jobs taken from the queue, not yet finished
  bool stop = false;
  std::vector<std::thread> writers;
  std::unordered_set<BlockKey, Hash128Hasher> pending;  // queued or being written

  std::unordered_map<BlockKey, Entry, Hash128Hasher> blocks;
  std::unordered_map<BlockKey, std::vector<BlockKey>, Hash128Hasher> children;  // by parent
  std::unordered_map<BlockKey, std::pair<TierNamespace, uint64_t>, Hash128Hasher> namespaces;
  struct LruLess {
    bool operator()(const std::pair<uint64_t, BlockKey>& a,
                    const std::pair<uint64_t, BlockKey>& b) const {
      if (a.first != b.first) return a.first < b.first;
      return a.second.hi != b.second.hi ? a.second.hi < b.second.hi : a.second.lo < b.second.lo;
    }
  };
  std::set<std::pair<uint64_t, BlockKey>, LruLess> lru;  // (tick, key), oldest first
  uint64_t tick = 0;
  uint64_t bytes = 0;
  uint64_t reserved = 0;     // bytes of files being written
  SsdTierStats stats;
};

void SsdTier::Impl::AddEntry(const BlockFileHeader& h, uint64_t file_bytes) {
  Entry e;
  e.parent = h.parent_key;
  e.ns = h.namespace_key;
  e.tokens = h.tokens;
  e.ends = h.ends;
  e.bytes = file_bytes;
  e.tick = ++tick;
  if (!blocks.emplace(h.key, std::move(e)).second) return;
  children[h.parent_key].push_back(h.key);
  lru.emplace(tick, h.key);
  bytes += file_bytes;
  auto [it, fresh] = namespaces.try_emplace(h.namespace_key);
  if (fresh) {
    it->second.first = {h.namespace_key, h.model, h.shape, h.k_format, h.v_format, h.block_tokens};
  }
  ++it->second.second;
}

void SsdTier::Impl::DropEntry(const BlockKey& key) {
  auto it = blocks.find(key);
  if (it == blocks.end()) return;
  const Entry& e = it->second;
  lru.erase({e.tick, key});
  bytes -= e.bytes;
  auto c = children.find(e.parent);
  if (c != children.end()) {
    std::erase(c->second, key);
    if (c->second.empty()) children.erase(c);
  }
  auto ns = namespaces.find(e.ns);
  if (ns != namespaces.end() && --ns->second.second == 0) namespaces.erase(ns);
  blocks.erase(it);
}

void SsdTier::Impl::Touch(const BlockKey& key) {
  auto it = blocks.find(key);
  if (it == blocks.end()) return;
  lru.erase({it->second.tick, key});
  it->second.tick = ++tick;
  lru.emplace(tick, key);
}

bool SsdTier::Impl::MakeRoom(uint64_t need, std::unique_lock<std::mutex>& lock) {
  if (need > opt.max_bytes) return false;
  while (bytes + reserved + need > opt.max_bytes) {
    if (lru.empty()) return false;
    const BlockKey victim = lru.begin()->second;
    const uint64_t b = blocks.at(victim).bytes;
    const std::string path = PathOf(victim);
    DropEntry(victim);
    ++stats.evicted_blocks;
    stats.evicted_bytes += b;
    // The entry is gone from the index first: a crash here leaves an unindexed file that the
    // next Open() finds and counts again (and evicts if over the cap).
    lock.unlock();
    (void)env->RemoveFile(path);
    lock.lock();
  }
  return true;
}

void SsdTier::Impl::Quarantine(const std::string& path, const std::string& why) {
  const std::string name = path.substr(path.find_last_of('/') + 1);
  const std::string to = opt.dir + "/quarantine/" + name;
  if (!env->RenameFile(path, to).ok()) (void)env->RemoveFile(path);
  (void)env->SyncDir(opt.dir + "/quarantine");
  if (opt.log) std::fprintf(stderr, "kvtier ssd tier: quarantined %s: %s\n", name.c_str(), why.c_str());
  std::lock_guard<std::mutex> lock(mu);
  ++stats.quarantined;
}

Status SsdTier::Impl::Scan() {
  KVTIER_RETURN_IF_ERROR(env->CreateDirs(opt.dir + "/blocks"));
  KVTIER_RETURN_IF_ERROR(env->CreateDirs(opt.dir + "/quarantine"));
  KVTIER_ASSIGN_OR_RETURN(std::vector<DirEntry> subs, env->ListDir(opt.dir + "/blocks"));
  std::sort(subs.begin(), subs.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  std::vector<uint8_t> buf;
  for (const DirEntry& sub : subs) {
    if (!sub.is_dir) continue;
    const std::string dir = opt.dir + "/blocks/" + sub.name;
    KVTIER_ASSIGN_OR_RETURN(std::vector<DirEntry> files, env->ListDir(dir));
    std::sort(files.begin(), files.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    bool removed = false;
    for (const DirEntry& f : files) {
      const std::string path = dir + "/" + f.name;
      if (EndsWith(f.name, kTmpSuffix)) {  // a write a crash interrupted
        if (env->RemoveFile(path).ok()) ++stats.removed_tmp_files;
        removed = true;
        continue;
      }
      if (f.is_dir || !EndsWith(f.name, kSuffix)) continue;
      // Headers only: the fixed part, then the rest of the header it announces.
      Result<std::unique_ptr<RandomAccessFile>> file = env->NewRandomAccessFile(path);
      if (!file.ok()) continue;
      const uint64_t size = (*file)->size();
      buf.resize(std::min<uint64_t>(size, tier::kBlockFileFixedHeader));
      Result<size_t> n = (*file)->Read(0, buf.size(), buf.data());
      uint32_t hb = 0;
      if (n.ok() && *n == buf.size() && buf.size() == tier::kBlockFileFixedHeader) {
        hb = static_cast<uint32_t>(buf[12]) | static_cast<uint32_t>(buf[13]) << 8 |
             static_cast<uint32_t>(buf[14]) << 16 | static_cast<uint32_t>(buf[15]) << 24;
        if (hb > buf.size() && hb <= size && hb <= (1u << 20)) {
          buf.resize(hb);
          n = (*file)->Read(tier::kBlockFileFixedHeader, hb - tier::kBlockFileFixedHeader,
                            buf.data() + tier::kBlockFileFixedHeader);
          if (!n.ok() || *n != hb - tier::kBlockFileFixedHeader) buf.resize(0);
        }
      }
      Result<BlockFileHeader> h = tier::DecodeBlockHeader(buf, size, path);
      if (h.ok() && f.name != KeyName(h->key) + kSuffix) {
        h = Status::Corruption(path + ": file name does not match key " + KeyName(h->key));
      }
      if (!h.ok() && h.status().code() == StatusCode::kUnimplemented) {
        ++stats.ignored_newer;  // a newer kvtier's file: not ours to judge or remove
        continue;
      }
      if (!h.ok()) {
        Quarantine(path, h.status().message());
        continue;
      }
      if (!opt.keep_only_models.empty() &&
          std::find(opt.keep_only_models.begin(), opt.keep_only_models.end(), h->model) ==
              opt.keep_only_models.end()) {
        if (env->RemoveFile(path).ok()) ++stats.removed_foreign;
        removed = true;
        continue;
      }
      std::lock_guard<std::mutex> lock(mu);
      AddEntry(*h, size);
      ++stats.found_blocks;
    }
    if (removed) (void)env->SyncDir(dir);
  }
  std::unique_lock<std::mutex> lock(mu);
  MakeRoom(0, lock);  // the cap may have shrunk since the files were written
  return Status::OK();
}

void SsdTier::Impl::WriteBatch(std::vector<Job>& jobs, std::unique_lock<std::mutex>& lock) {
  // One job's way through the batch; `s` is its first error.
  struct Slot {
    uint64_t size = 0;
    bool room = false;
    Status s;
    std::string dir, path, tmp;
    std::unique_ptr<WritableFile> file;
    bool renamed = false;
  };
  std::vector<Slot> slots(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    Slot& sl = slots[i];
    sl.size = jobs[i].header.file_bytes();
    sl.room = MakeRoom(sl.size, lock);
    if (sl.room) reserved += sl.size;
  }
  lock.unlock();
  // SsdSyncMode::kFilesystem: the handle is opened before the writes its syncs must cover (a
  // write-back error after the open is reported to it); if it cannot be, per-file syncs.
  std::unique_ptr<FilesystemSync> fs;
  const size_t with_room = static_cast<size_t>(
      std::count_if(slots.begin(), slots.end(), [](const Slot& sl) { return sl.room; }));
  if (opt.sync_mode == SsdSyncMode::kFilesystem && with_room > 0 &&
      with_room >= opt.filesystem_sync_min_blocks) {
    Result<std::unique_ptr<FilesystemSync>> h = env->NewFilesystemSync(opt.dir);
    if (h.ok()) fs = std::move(*h);
  }
  // Write every file, unsynced; ask for their writeback to start.
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& job = jobs[i];
    Slot& sl = slots[i];
    if (!sl.room) {
      job.pool->Unref({&job.block, 1}, KvOwner::kTier);
      continue;
    }
    const BlockKey key = job.header.key;
    sl.dir = SubDir(key);
    sl.path = PathOf(key);
    sl.tmp = sl.dir + "/" + KeyName(key) + kTmpSuffix;
    sl.s = tier::EncodeBlockFile(job.header, *job.pool, job.block, &bytes);
    job.pool->Unref({&job.block, 1}, KvOwner::kTier);
    if (sl.s.ok()) {
      // The subdirectory is created (durably) only when the file cannot be: most exist.
      Result<std::unique_ptr<WritableFile>> f = env->NewWritableFile(sl.tmp);
      if (f.status().code() == StatusCode::kNotFound) {
        const Status d = env->CreateDirs(sl.dir);
        f = d.ok() ? env->NewWritableFile(sl.tmp) : Result<std::unique_ptr<WritableFile>>(d);
      }
      sl.s = f.status();
      if (f.ok()) sl.file = std::move(*f);
    }
    if (sl.s.ok()) sl.s = sl.file->Append(bytes);
    if (sl.s.ok() && jobs.size() > 1) sl.s = sl.file->StartSync();
    if (sl.s.ok() && fs != nullptr) sl.s = sl.file->Close();  // its bytes reach the kernel
  }
  // Make every file durable (one syncfs, or each file's fdatasync), then give each its
  // final name; a file that failed is removed under its temporary name.
  if (fs != nullptr) {
    const bool any = std::any_of(slots.begin(), slots.end(),
                                 [](const Slot& sl) { return sl.room && sl.s.ok(); });
    const Status ss = any ? fs->Sync() : Status::OK();
    for (Slot& sl : slots) {
      if (sl.room && sl.s.ok()) sl.s = ss;
    }
  } else {
    for (Slot& sl : slots) {
      if (!sl.room || !sl.s.ok()) continue;
      sl.s = sl.file->Sync();
      Status c = sl.file->Close();
      if (sl.s.ok()) sl.s = c;
    }
  }
  for (Slot& sl : slots) {
    if (sl.room && sl.s.ok()) sl.s = env->RenameFile(sl.tmp, sl.path);
    sl.renamed = sl.room && sl.s.ok();
    if (sl.room && !sl.s.ok()) {
      sl.file.reset();
      (void)env->RemoveFile(sl.tmp);
    }
  }
  // Make the renames durable: one more syncfs, or one fsync per directory. A block whose
  // rename was not made durable is not indexed, and its file (durable, but not promised to
  // survive) is removed so the cap counts every file.
  auto fail_renamed = [&](const Status& s, const std::string* dir) {
    for (Slot& sl : slots) {
      if (!sl.renamed || (dir != nullptr && sl.dir != *dir)) continue;
      sl.s = s;
      (void)env->RemoveFile(sl.path);
    }
  };
  if (fs != nullptr) {
    const bool any =
        std::any_of(slots.begin(), slots.end(), [](const Slot& sl) { return sl.renamed; });
    const Status ss = any ? fs->Sync() : Status::OK();
    if (!ss.ok()) fail_renamed(ss, nullptr);
  } else {
    std::vector<std::string> dirs;
    for (const Slot& sl : slots) {
      if (sl.renamed && std::find(dirs.begin(), dirs.end(), sl.dir) == dirs.end()) {
        dirs.push_back(sl.dir);
      }
    }
    for (const std::string& d : dirs) {
      const Status ds = env->SyncDir(d);
      if (!ds.ok()) fail_renamed(ds, &d);
    }
  }
  lock.lock();
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Slot& sl = slots[i];
    if (!sl.room) {
      ++stats.skipped[static_cast<int>(SpillSkip::kTooLarge)];
      continue;
    }
    reserved -= sl.size;
    if (!sl.s.ok()) {
      ++stats.skipped[static_cast<int>(sl.s.code() == StatusCode::kResourceExhausted
                                           ? SpillSkip::kDiskFull
                                           : SpillSkip::kIoError)];
      continue;
    }
    AddEntry(jobs[i].header, sl.size);
    ++stats.spilled_blocks;
    stats.spilled_bytes += sl.size;
  }
}

void SsdTier::Impl::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu);
  std::vector<Job> batch;
  for (;;) {
    cv_work.wait(lock, [&] { return stop || !queue.empty(); });
    if (queue.empty()) return;  // stop requested and nothing left
    // Up to batch_blocks jobs and batch_bytes of files (at least one job).
    batch.clear();
    uint64_t batch_bytes = 0;
    while (!queue.empty() && batch.size() < opt.batch_blocks) {
      const uint64_t b = queue.front().header.file_bytes();
      if (!batch.empty() && batch_bytes + b > opt.batch_bytes) break;
      batch_bytes += b;
      batch.push_back(std::move(queue.front()));
      queue.pop_front();
    }
    writing += static_cast<int>(batch.size());
    cv_room.notify_all();
    WriteBatch(batch, lock);
    for (const Job& job : batch) pending.erase(job.header.key);
    writing -= static_cast<int>(batch.size());
    if (queue.empty() && writing == 0) cv_idle.notify_all();
  }
}

SsdTier::SsdTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::shared_ptr<SsdTier>> SsdTier::Open(SsdTierOptions options) {
  if (options.dir.empty()) return Status::InvalidArgument("ssd tier: no directory given");
  if (options.max_bytes == 0) return Status::InvalidArgument("ssd tier: max_bytes must be > 0");
  if (options.queue_blocks == 0) {
    return Status::InvalidArgument("ssd tier: queue_blocks must be > 0");
  }
  if (options.batch_blocks == 0 || options.batch_bytes == 0) {
    return Status::InvalidArgument("ssd tier: batch_blocks and batch_bytes must be > 0");
  }
  if (options.sync_mode != SsdSyncMode::kPerFile &&
      options.sync_mode != SsdSyncMode::kFilesystem) {
    return Status::InvalidArgument("ssd tier: unknown sync_mode");
  }
  if (options.writer_threads == 0 || options.writer_threads > 64) {
    return Status::InvalidArgument("ssd tier: writer_threads must be in [1, 64], got " +
                                   std::to_string(options.writer_threads));
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  Timer timer;
  KVTIER_RETURN_IF_ERROR(impl->Scan());
  impl->stats.open_ms = timer.Millis();
  impl->stats.max_bytes = impl->opt.max_bytes;
  Impl* raw = impl.get();
  for (uint32_t i = 0; i < raw->opt.writer_threads; ++i) {
    raw->writers.emplace_back([raw] { raw->WriterLoop(); });
  }
  return std::shared_ptr<SsdTier>(new SsdTier(std::move(impl)));
}

SsdTier::~SsdTier() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv_work.notify_all();
  for (std::thread& t : impl_->writers) t.join();
}

const SsdTierOptions& SsdTier::options() const { return impl_->opt; }

void SsdTier::Spill(const EvictedBlock& b) {
  Impl& m = *impl_;
  Job job;
  BlockFileHeader& h = job.header;
  h.key = b.key;
  h.parent_key = b.parent_key;
  h.namespace_key = b.namespace_key;
  h.model = b.model;
  h.shape = b.pool->shape();
  h.k_format = b.pool->k_format();
  h.v_format = b.pool->v_format();
  h.block_tokens = b.pool->block_tokens();
  h.first_position = b.first_position;
  h.tokens.assign(b.tokens.begin(), b.tokens.end());
  h.ends.assign(b.entry_ends.begin(), b.entry_ends.end());
  job.pool = b.pool;
  job.block = b.block;
  std::unique_lock<std::mutex> lock(m.mu);
  if (m.blocks.contains(b.key) || m.pending.contains(b.key)) {
    ++m.stats.already_present;
    m.Touch(b.key);
    return;
  }
  if (!b.pool->Ref({&b.block, 1}, KvOwner::kTier).ok()) {
    ++m.stats.skipped[static_cast<int>(SpillSkip::kIoError)];
    return;
  }
  m.pending.insert(b.key);  // a second spill of the key while this one is on its way: a no-op
  if (m.queue.size() >= m.opt.queue_blocks) {
    if (m.opt.write_inline_when_full) {
      ++m.stats.inline_writes;
      std::vector<Job> one;
      one.push_back(std::move(job));
      m.WriteBatch(one, lock);
      m.pending.erase(b.key);
      return;
    }
    ++m.stats.producer_waits;
    m.cv_room.wait(lock, [&] { return m.queue.size() < m.opt.queue_blocks; });
  }
  m.queue.push_back(std::move(job));
  m.cv_work.notify_one();
}

void SsdTier::Flush() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->cv_idle.wait(lock, [&] { return impl_->queue.empty() && impl_->writing == 0; });
}

std::vector<TierNamespace> SsdTier::Namespaces(const ModelFingerprint& model) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<TierNamespace> out;
  for (const auto& [key, ns] : impl_->namespaces) {
    if (ns.first.model == model) out.push_back(ns.first);
  }
  return out;
}

std::vector<std::pair<TierNamespace, uint64_t>> SsdTier::AllNamespaces() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::pair<TierNamespace, uint64_t>> out;
  for (const auto& [key, ns] : impl_->namespaces) out.push_back(ns);
  return out;
}

std::vector<TierBlock> SsdTier::FindChain(const TierNamespace& ns,
                                          std::span<const int32_t> tokens) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  std::vector<TierBlock> chain;
  const uint32_t B = ns.block_tokens;
  BlockKey parent = ns.key;
  size_t pos = 0;
  while (pos < tokens.size()) {
    if (tokens.size() - pos >= B) {
      const BlockKey k = ChainBlockKey(parent, tokens.subspan(pos, B));
      auto it = m.blocks.find(k);
      if (it != m.blocks.end() && it->second.tokens.size() == B) {
        chain.push_back({k, it->second.tokens, it->second.ends});
        parent = k;
        pos += B;
        continue;
      }
    }
    // The child of `parent` sharing the most tokens with the rest.
    auto c = m.children.find(parent);
    const Impl::Entry* best = nullptr;
    BlockKey best_key;
    uint32_t best_len = 0;
    if (c != m.children.end()) {
      for (const BlockKey& k : c->second) {
        const Impl::Entry& e = m.blocks.at(k);
        const uint32_t l = Lcp(e.tokens, tokens.subspan(pos));
        if (l > best_len) {
          best_len = l;
          best = &e;
          best_key = k;
        }
      }
    }
    if (best != nullptr) chain.push_back({best_key, best->tokens, best->ends});
    break;
  }
  return chain;
}

Status SsdTier::Load(const TierNamespace& ns, const BlockKey& key, BlockPool& pool, BlockId id) {
  Impl& m = *impl_;
  const std::string path = m.PathOf(key);
  uint32_t header_bytes;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    auto it = m.blocks.find(key);
    if (it == m.blocks.end()) return Status::NotFound("ssd tier: no block " + KeyName(key));
    header_bytes = tier::BlockHeaderBytes(it->second.tokens.size(), it->second.ends.size());
    m.Touch(key);
  }
  // The header (its size is known from the index), then the rows straight into the block.
  Result<std::unique_ptr<RandomAccessFile>> file = m.env->NewRandomAccessFile(path);
  Status s = file.status();
  uint64_t size = 0;
  Result<BlockFileHeader> h = Status::OK();
  if (s.ok()) {
    size = (*file)->size();
    std::vector<uint8_t> head(std::min<uint64_t>(header_bytes, size));
    Result<size_t> n = (*file)->Read(0, head.size(), head.data());
    s = n.status();
    if (s.ok()) {
      head.resize(*n);
      h = tier::DecodeBlockHeader(head, size, path);
      s = h.status();
    }
  }
  if (s.ok() && !(h->key == key && h->namespace_key == ns.key)) {
    s = Status::Corruption(path + ": holds block " + KeyName(h->key) + " of namespace " +
                           KeyName(h->namespace_key) + ", expected " + KeyName(key) + " of " +
                           KeyName(ns.key));
  }
  if (s.ok()) s = tier::ReadBlockRows(*h, **file, pool, id, path);
  if (file.ok()) file->reset();  // closed before a quarantine renames it
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(m.mu);
    ++m.stats.loaded_blocks;
    m.stats.loaded_bytes += size;
    return s;
  }
  if (s.code() == StatusCode::kInvalidArgument) return s;  // the caller's pool, not the file
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.DropEntry(key);
  }
  if (s.code() == StatusCode::kCorruption || s.code() == StatusCode::kUnimplemented) {
    m.Quarantine(path, s.message());
  }
  return s;
}

SsdTierStats SsdTier::Stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  SsdTierStats s = impl_->stats;
  s.blocks = impl_->blocks.size();
  s.bytes = impl_->bytes;
  s.queued = impl_->queue.size();
  return s;
}

Status SsdTier::Verify(uint64_t* good, uint64_t* bad) {
  Impl& m = *impl_;
  Flush();
  std::vector<BlockKey> keys;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    for (const auto& [k, e] : m.blocks) keys.push_back(k);
  }
  *good = *bad = 0;
  for (const BlockKey& k : keys) {
    const std::string path = m.PathOf(k);
    Result<std::vector<uint8_t>> file = m.env->ReadFile(path);
    Status s = file.status();
    if (s.ok()) {
      Result<BlockFileHeader> h = tier::DecodeBlockHeader(*file, file->size(), path);
      s = h.status();
      if (s.ok()) {
        // The rows' CRC, checked without a pool: decode into a scratch one-block pool.
        BlockPoolOptions po;
        po.shape = h->shape;
        po.k_format = h->k_format;
        po.v_format = h->v_format;
        po.block_tokens = h->block_tokens;
        Result<KvBlockLayout> l = KvBlockLayout::Make(h->shape, h->k_format, h->v_format,
                                                      h->block_tokens);
        s = l.status();
        if (s.ok()) {
          po.capacity_bytes = l->block_stride;
          Result<std::shared_ptr<BlockPool>> pool = BlockPool::Create(po);
          std::vector<BlockId> id;
          s = pool.status();
          if (s.ok()) s = (*pool)->Allocate(1, KvOwner::kOther, &id, "verify");
          if (s.ok()) {
            s = tier::DecodeBlockRows(*h, *file, **pool, id[0], path);
            (*pool)->Unref(id, KvOwner::kOther);
          }
        }
      }
    }
    if (s.ok()) {
      ++*good;
    } else {
      ++*bad;
      {
        std::lock_guard<std::mutex> lock(m.mu);
        m.DropEntry(k);
      }
      m.Quarantine(path, s.message());
    }
  }
  return Status::OK();
}

Status SsdTier::Clear() {
  Impl& m = *impl_;
  Flush();
  std::vector<BlockKey> keys;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    for (const auto& [k, e] : m.blocks) keys.push_back(k);
    for (const BlockKey& k : keys) m.DropEntry(k);
  }
  Status first;
  std::unordered_set<std::string> dirs;
  for (const BlockKey& k : keys) {
    Status s = m.env->RemoveFile(m.PathOf(k));
    if (!s.ok() && s.code() != StatusCode::kNotFound && first.ok()) first = s;
    dirs.insert(m.SubDir(k));
  }
  for (const std::string& d : dirs) (void)m.env->SyncDir(d);
  return first;
}

}  // namespace kvtier
