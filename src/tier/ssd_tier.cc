// SsdTier (kvtier/ssd_tier.h): the index of segment and block files, reload with
// verification (reusing open read handles), quarantine, the size cap, the startup scan,
// verify and clear. The writer threads are in ssd_tier_write.cc. One mutex (Impl::mu)
// guards the index; file I/O runs outside it.
#include "kvtier/ssd_tier.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "base/le_bytes.h"
#include "base/timer.h"
#include "tier/segment_file.h"
#include "tier/ssd_tier_impl.h"

namespace kvtier {

using tier::BlockFileHeader;
using tier::KeyName;

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

uint32_t Lcp(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<uint32_t>(i);
}

bool ByName(const DirEntry& a, const DirEntry& b) { return a.name < b.name; }

}  // namespace

std::string SsdTier::Impl::SubDir(const BlockKey& k) const {
  char b[4];
  std::snprintf(b, sizeof b, "%02x", static_cast<unsigned>(k.hi >> 56));
  return opt.dir + "/blocks/" + b;
}

std::string SsdTier::Impl::PathOf(const BlockKey& k) const {
  return SubDir(k) + "/" + KeyName(k) + tier::kSuffix;
}

std::string SsdTier::Impl::SegmentPath(uint64_t seg, bool tmp) const {
  return SegmentDir() + "/" + tier::SegmentName(seg) + (tmp ? tier::kSegTmpSuffix : tier::kSegSuffix);
}

uint64_t SsdTier::Impl::AddFile(std::string path, uint64_t file_bytes, bool v1) {
  const uint64_t id = next_file++;
  File f;
  f.path = std::move(path);
  f.bytes = file_bytes;
  f.tick = ++tick;
  f.v1 = v1;
  f.live_bytes = v1 ? 0 : tier::kSegmentHeaderBytes;
  files.emplace(id, std::move(f));
  lru.emplace(tick, id);
  bytes += file_bytes;
  return id;
}

bool SsdTier::Impl::AddBlock(const BlockFileHeader& h, uint64_t file, uint64_t offset) {
  Entry e;
  e.parent = h.parent_key;
  e.ns = h.namespace_key;
  e.tokens = h.tokens;
  e.ends = h.ends;
  e.file = file;
  e.offset = offset;
  e.bytes = h.file_bytes();
  File& f = files.at(file);
  const uint64_t live = f.v1 ? e.bytes : tier::AlignRecord(e.bytes);
  if (!blocks.emplace(h.key, std::move(e)).second) return false;
  f.keys.push_back(h.key);
  f.live_bytes += live;
  children[h.parent_key].push_back(h.key);
  auto [it, fresh] = namespaces.try_emplace(h.namespace_key);
  if (fresh) {
    it->second.first = {h.namespace_key, h.model, h.shape, h.k_format, h.v_format, h.block_tokens};
  }
  ++it->second.second;
  return true;
}

void SsdTier::Impl::EraseEntry(const BlockKey& key) {
  auto it = blocks.find(key);
  if (it == blocks.end()) return;
  const Entry& e = it->second;
  auto c = children.find(e.parent);
  if (c != children.end()) {
    std::erase(c->second, key);
    if (c->second.empty()) children.erase(c);
  }
  auto ns = namespaces.find(e.ns);
  if (ns != namespaces.end() && --ns->second.second == 0) namespaces.erase(ns);
  blocks.erase(it);
}

std::string SsdTier::Impl::DropBlock(const BlockKey& key) {
  auto it = blocks.find(key);
  if (it == blocks.end()) return "";
  const uint64_t fid = it->second.file;
  File& f = files.at(fid);
  std::erase(f.keys, key);
  f.live_bytes -= f.v1 ? it->second.bytes : tier::AlignRecord(it->second.bytes);
  EraseEntry(key);
  if (!f.keys.empty()) return "";
  std::string path = f.path;
  DropFile(fid);
  return path;
}

void SsdTier::Impl::DropFile(uint64_t file) {
  auto it = files.find(file);
  if (it == files.end()) return;
  for (const BlockKey& k : it->second.keys) EraseEntry(k);
  lru.erase({it->second.tick, file});
  std::erase_if(idle_handles, [file](const Handle& h) { return h.file == file; });
  files.erase(it);
}

void SsdTier::Impl::Touch(const BlockKey& key) {
  auto it = blocks.find(key);
  if (it == blocks.end()) return;
  File& f = files.at(it->second.file);
  lru.erase({f.tick, it->second.file});
  f.tick = ++tick;
  lru.emplace(tick, it->second.file);
}

void SsdTier::Impl::RemoveCounted(const std::string& path, uint64_t file_bytes,
                                  std::unique_lock<std::mutex>& lock) {
  // Out of the index already; its bytes stay counted until the file is gone.
  lock.unlock();
  (void)env->RemoveFile(path);
  lock.lock();
  bytes -= file_bytes;
}

bool SsdTier::Impl::MakeRoom(uint64_t need, std::unique_lock<std::mutex>& lock) {
  if (need > opt.max_bytes) return false;
  while (bytes + reserved + need > opt.max_bytes) {
    if (lru.empty()) return false;
    const uint64_t victim = lru.begin()->second;
    const File& f = files.at(victim);
    const std::string path = f.path;
    const uint64_t b = f.bytes;
    stats.evicted_blocks += f.keys.size();
    stats.evicted_bytes += b;
    // The index forgets the file first: a crash before the removal leaves a file that the
    // next Open() finds and counts again (and evicts if over the cap).
    DropFile(victim);
    RemoveCounted(path, b, lock);
  }
  return true;
}

void SsdTier::Impl::QuarantinePath(const std::string& path, const std::string& why) {
  const std::string name = path.substr(path.find_last_of('/') + 1);
  const std::string to = opt.dir + "/quarantine/" + name;
  if (!env->RenameFile(path, to).ok()) (void)env->RemoveFile(path);
  (void)env->SyncDir(opt.dir + "/quarantine");
  if (opt.log) std::fprintf(stderr, "kvtier ssd tier: quarantined %s: %s\n", name.c_str(), why.c_str());
  std::lock_guard<std::mutex> lock(mu);
  ++stats.quarantined;
}

void SsdTier::Impl::Quarantine(uint64_t file, const std::string& why) {
  std::string path;
  uint64_t b = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = files.find(file);
    if (it == files.end()) return;  // another reader quarantined it first, or it was evicted
    path = it->second.path;
    b = it->second.bytes;
    DropFile(file);
  }
  QuarantinePath(path, why);
  std::lock_guard<std::mutex> lock(mu);
  bytes -= b;
}

bool SsdTier::Impl::Foreign(const ModelFingerprint& model) const {
  return !opt.keep_only_models.empty() &&
         std::find(opt.keep_only_models.begin(), opt.keep_only_models.end(), model) ==
             opt.keep_only_models.end();
}

Status SsdTier::Impl::ScanSegments() {
  const std::string dir = SegmentDir();
  KVTIER_ASSIGN_OR_RETURN(std::vector<DirEntry> list, env->ListDir(dir));
  std::sort(list.begin(), list.end(), ByName);  // oldest segments first: they go first
  bool removed = false;
  for (const DirEntry& f : list) {
    const std::string path = dir + "/" + f.name;
    if (EndsWith(f.name, tier::kSegTmpSuffix)) {  // a write a crash interrupted
      if (env->RemoveFile(path).ok()) ++stats.removed_tmp_files;
      removed = true;
      continue;
    }
    if (f.is_dir || !EndsWith(f.name, tier::kSegSuffix)) continue;
    const std::string stem = f.name.substr(0, f.name.size() - std::strlen(tier::kSegSuffix));
    char* end = nullptr;
    const uint64_t seg = std::strtoull(stem.c_str(), &end, 16);
    if (stem.size() != 16 || end != stem.c_str() + stem.size()) continue;  // not ours
    Result<std::unique_ptr<RandomAccessFile>> file = env->NewRandomAccessFile(path);
    if (!file.ok()) continue;
    Result<tier::SegmentIndex> idx = tier::ReadSegmentIndex(**file, path);
    const uint64_t size = (*file)->size();
    file->reset();
    if (idx.ok() && idx->header.segment_id != seg) {
      idx = Status::Corruption(path + ": file name does not match segment id " +
                               tier::SegmentName(idx->header.segment_id));
    }
    if (!idx.ok() && idx.status().code() == StatusCode::kUnimplemented) {
      ++stats.ignored_newer;  // a newer kvtier's file: not ours to judge or remove
      continue;
    }
    if (!idx.ok() && idx.status().code() == StatusCode::kCorruption) {
      QuarantinePath(path, idx.status().message());
      continue;
    }
    if (!idx.ok()) continue;  // an I/O error: left for the next Open()
    std::unique_lock<std::mutex> lock(mu);
    // Only a segment that validated (its header names its file) sets the counter; an id at
    // the top of the range would wrap it, so the counter starts over at 1 (taken names are
    // skipped at write time and never replaced).
    if (seg != UINT64_MAX && seg + 1 > next_segment) next_segment = seg + 1;
    const uint64_t fid = AddFile(path, size, false);
    for (const tier::SegmentRecord& r : idx->records) {
      if (Foreign(r.header.model)) {
        ++stats.removed_foreign;
        continue;
      }
      if (AddBlock(r.header, fid, r.offset)) ++stats.found_blocks;
    }
    if (files.at(fid).keys.empty()) {  // nothing of it is wanted
      DropFile(fid);
      RemoveCounted(path, size, lock);
      ++stats.removed_dead_files;
      removed = true;
    }
  }
  if (removed) (void)env->SyncDir(dir);
  return Status::OK();
}

Status SsdTier::Impl::ScanBlockFiles() {
  KVTIER_ASSIGN_OR_RETURN(std::vector<DirEntry> subs, env->ListDir(opt.dir + "/blocks"));
  std::sort(subs.begin(), subs.end(), ByName);
  std::vector<uint8_t> buf;
  for (const DirEntry& sub : subs) {
    if (!sub.is_dir) continue;
    const std::string dir = opt.dir + "/blocks/" + sub.name;
    KVTIER_ASSIGN_OR_RETURN(std::vector<DirEntry> list, env->ListDir(dir));
    std::sort(list.begin(), list.end(), ByName);
    bool removed = false;
    for (const DirEntry& f : list) {
      const std::string path = dir + "/" + f.name;
      if (EndsWith(f.name, tier::kTmpSuffix)) {  // a write a crash interrupted
        if (env->RemoveFile(path).ok()) ++stats.removed_tmp_files;
        removed = true;
        continue;
      }
      if (f.is_dir || !EndsWith(f.name, tier::kSuffix)) continue;
      // Headers only: the fixed part, then the rest of the header it announces.
      Result<std::unique_ptr<RandomAccessFile>> file = env->NewRandomAccessFile(path);
      if (!file.ok()) continue;
      const uint64_t size = (*file)->size();
      buf.resize(std::min<uint64_t>(size, tier::kBlockFileFixedHeader));
      Result<size_t> n = (*file)->Read(0, buf.size(), buf.data());
      uint32_t hb = 0;
      if (n.ok() && *n == buf.size() && buf.size() == tier::kBlockFileFixedHeader) {
        hb = GetLe32(buf.data() + 12);  // header_bytes
        if (hb > buf.size() && hb <= size && hb <= (1u << 20)) {
          buf.resize(hb);
          n = (*file)->Read(tier::kBlockFileFixedHeader, hb - tier::kBlockFileFixedHeader,
                            buf.data() + tier::kBlockFileFixedHeader);
          if (!n.ok() || *n != hb - tier::kBlockFileFixedHeader) buf.resize(0);
        }
      }
      file->reset();
      Result<BlockFileHeader> h = tier::DecodeBlockHeader(buf, size, path);
      if (h.ok() && f.name != KeyName(h->key) + tier::kSuffix) {
        h = Status::Corruption(path + ": file name does not match key " + KeyName(h->key));
      }
      if (!h.ok() && h.status().code() == StatusCode::kUnimplemented) {
        ++stats.ignored_newer;  // a newer kvtier's file: not ours to judge or remove
        continue;
      }
      if (!h.ok()) {
        QuarantinePath(path, h.status().message());
        continue;
      }
      const bool foreign = Foreign(h->model);
      bool keep = !foreign;
      if (keep) {
        std::lock_guard<std::mutex> lock(mu);
        const uint64_t fid = AddFile(path, size, true);
        keep = AddBlock(*h, fid, 0);
        if (keep) {
          ++stats.found_blocks;
        } else {  // the block is in a segment too: this copy is redundant
          DropFile(fid);
          bytes -= size;
        }
      }
      if (!keep) {
        if (env->RemoveFile(path).ok()) {
          if (foreign) ++stats.removed_foreign;
          else ++stats.removed_dead_files;
        }
        removed = true;
      }
    }
    if (removed) (void)env->SyncDir(dir);
  }
  return Status::OK();
}

Status SsdTier::Impl::Scan() {
  KVTIER_RETURN_IF_ERROR(env->CreateDirs(opt.dir + "/blocks"));
  KVTIER_RETURN_IF_ERROR(env->CreateDirs(opt.dir + "/quarantine"));
  KVTIER_RETURN_IF_ERROR(env->CreateDirs(SegmentDir()));
  KVTIER_RETURN_IF_ERROR(ScanSegments());
  KVTIER_RETURN_IF_ERROR(ScanBlockFiles());
  std::unique_lock<std::mutex> lock(mu);
  MakeRoom(0, lock);  // the cap may have shrunk since the files were written
  return Status::OK();
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
  if (options.layout != SsdLayout::kBlockFiles && options.layout != SsdLayout::kSegments) {
    return Status::InvalidArgument("ssd tier: unknown layout");
  }
  if (options.writer_threads == 0 || options.writer_threads > 64) {
    return Status::InvalidArgument("ssd tier: writer_threads must be in [1, 64], got " +
                                   std::to_string(options.writer_threads));
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  Timer timer;
  KVTIER_RETURN_IF_ERROR(impl->Scan());
  KVTIER_ASSIGN_OR_RETURN(impl->states,
                          tier::StateStore::Open(impl->env, impl->opt.dir,
                                                 std::max<uint64_t>(1, impl->opt.max_bytes / 4),
                                                 impl->opt.log));
  impl->stats.open_ms = timer.Millis();
  impl->stats.max_bytes = impl->opt.max_bytes;
  Impl* raw = impl.get();
  for (uint32_t i = 0; i < raw->opt.writer_threads; ++i) {
    raw->writers.emplace_back([raw] { raw->WriterLoop(); });
  }
  return std::shared_ptr<SsdTier>(new SsdTier(std::move(impl)));
}

void SsdTier::SpillState(const ModelFingerprint& model, const BlockKey& key,
                         std::shared_ptr<const StateSnapshot> snapshot) {
  impl_->states->Spill(model, key, std::move(snapshot));
}

std::shared_ptr<const StateSnapshot> SsdTier::FindState(const ModelFingerprint& model,
                                                        std::span<const int32_t> tokens,
                                                        uint32_t min_position,
                                                        uint32_t max_position) {
  return impl_->states->Find(model, tokens, min_position, max_position);
}

SsdTier::~SsdTier() {
  impl_->states.reset();  // writes what is queued
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
  tier::Job job;
  job.header = tier::SpilledBlockHeader(b);
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
      std::vector<tier::Job> one;
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
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->cv_idle.wait(lock, [&] { return impl_->queue.empty() && impl_->writing == 0; });
  }
  impl_->states->Flush();
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
  uint64_t fid = 0, offset = 0;
  uint32_t header_bytes = 0;
  bool v1 = false;
  std::string path;
  std::unique_ptr<RandomAccessFile> file;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    auto it = m.blocks.find(key);
    if (it == m.blocks.end()) return Status::NotFound("ssd tier: no block " + KeyName(key));
    const Impl::Entry& e = it->second;
    header_bytes = tier::BlockHeaderBytes(e.tokens.size(), e.ends.size());
    fid = e.file;
    offset = e.offset;
    const Impl::File& f = m.files.at(fid);
    path = f.path;
    v1 = f.v1;
    m.Touch(key);
    // A handle another Load of this file left: no open per block of a chain in one segment.
    for (size_t i = m.idle_handles.size(); i-- > 0;) {
      if (m.idle_handles[i].file == fid) {
        file = std::move(m.idle_handles[i].f);
        m.idle_handles.erase(m.idle_handles.begin() + static_cast<ptrdiff_t>(i));
        break;
      }
    }
  }
  const std::string name = v1 ? path : path + " @" + std::to_string(offset);
  Status s;
  if (file == nullptr) {
    Result<std::unique_ptr<RandomAccessFile>> opened = m.env->NewRandomAccessFile(path);
    s = opened.status();
    if (s.ok()) file = std::move(*opened);
  }
  // The header (its size is known from the index), then the rows straight into the block.
  uint64_t size = 0;
  Result<BlockFileHeader> h = Status::OK();
  if (s.ok()) {
    size = file->size();
    const uint64_t left = size > offset ? size - offset : 0;
    std::vector<uint8_t> head(std::min<uint64_t>(header_bytes, left));
    Result<size_t> n = file->Read(offset, head.size(), head.data());
    s = n.status();
    if (s.ok()) {
      head.resize(*n);
      h = v1 ? tier::DecodeBlockHeader(head, size, name)
             : tier::DecodeRecordHeader(head, left, name);
      s = h.status();
    }
  }
  if (s.ok() && !(h->key == key && h->namespace_key == ns.key)) {
    s = Status::Corruption(name + ": holds block " + KeyName(h->key) + " of namespace " +
                           KeyName(h->namespace_key) + ", expected " + KeyName(key) + " of " +
                           KeyName(ns.key));
  }
  if (s.ok()) s = tier::ReadRecordRows(*h, *file, offset, pool, id, name);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(m.mu);
    ++m.stats.loaded_blocks;
    m.stats.loaded_bytes += h->file_bytes();
    if (m.files.contains(fid)) {  // still indexed: keep the handle for the next block
      m.idle_handles.push_back({fid, std::move(file)});
      if (m.idle_handles.size() > Impl::kIdleHandles) m.idle_handles.erase(m.idle_handles.begin());
    }
    return s;
  }
  file.reset();  // closed before a quarantine renames it
  if (s.code() == StatusCode::kInvalidArgument) return s;  // the caller's pool, not the file
  if (s.code() == StatusCode::kCorruption || s.code() == StatusCode::kUnimplemented) {
    m.Quarantine(fid, s.message());  // the whole file: every block of it is a miss now
    return s;
  }
  // A file gone from under the index (its directory removed or replaced): every indexed file
  // is checked, so the index and the stats hold only what is on disk.
  if (s.code() == StatusCode::kNotFound) {
    std::unique_lock<std::mutex> lock(m.mu);
    const bool evicted = !m.files.contains(fid);  // removed by eviction meanwhile: expected
    lock.unlock();
    if (!evicted) m.Reconcile();
  }
  // Another error (I/O, a file evicted meanwhile): this block is a miss from now on; a file
  // left without blocks is removed.
  std::unique_lock<std::mutex> lock(m.mu);
  auto it = m.blocks.find(key);
  if (it == m.blocks.end() || it->second.file != fid) return s;
  const uint64_t b = m.files.at(fid).bytes;
  const std::string dead = m.DropBlock(key);
  if (!dead.empty()) {
    ++m.stats.removed_dead_files;
    m.RemoveCounted(dead, b, lock);
  }
  return s;
}

uint64_t SsdTier::Impl::NextSegmentId() {
  if (next_segment == 0 || next_segment == UINT64_MAX) next_segment = 1;
  return next_segment++;
}

uint64_t SsdTier::Impl::Reconcile() {
  std::vector<std::tuple<uint64_t, std::string, uint64_t>> snap;
  {
    std::lock_guard<std::mutex> lock(mu);
    last_reconcile = std::chrono::steady_clock::now();
    snap.reserve(files.size());
    for (const auto& [id, f] : files) snap.emplace_back(id, f.path, f.bytes);
  }
  std::vector<uint64_t> gone;
  for (const auto& [id, path, size] : snap) {
    Result<uint64_t> s = env->FileSize(path);
    if (!s.ok() || *s != size) gone.push_back(id);
  }
  if (gone.empty()) return 0;
  std::lock_guard<std::mutex> lock(mu);
  uint64_t n = 0;
  for (uint64_t id : gone) {
    auto it = files.find(id);
    if (it == files.end()) continue;
    const uint64_t b = it->second.bytes;
    idle_handles.erase(std::remove_if(idle_handles.begin(), idle_handles.end(),
                                      [&](const Handle& h) { return h.file == id; }),
                       idle_handles.end());
    DropFile(id);
    bytes -= b;
    ++stats.vanished_files;
    ++n;
  }
  if (n > 0 && opt.log) {
    std::fprintf(stderr, "kvtier ssd tier: %llu indexed files missing or changed on disk "
                 "(directory removed or replaced?): dropped from the index\n",
                 static_cast<unsigned long long>(n));
  }
  return n;
}

uint64_t SsdTier::Reconcile() { return impl_->Reconcile(); }

void SsdTier::Impl::ReconcileSoon(uint32_t min_interval_ms) {
  std::lock_guard<std::mutex> lock(mu);
  if (reconcile_wanted || stop) return;
  const auto now = std::chrono::steady_clock::now();
  if (last_reconcile != std::chrono::steady_clock::time_point{} &&
      now - last_reconcile < std::chrono::milliseconds(min_interval_ms)) {
    return;
  }
  reconcile_wanted = true;
  cv_work.notify_one();
}

void SsdTier::ReconcileSoon(uint32_t min_interval_ms) { impl_->ReconcileSoon(min_interval_ms); }

SsdTierStats SsdTier::Stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  SsdTierStats s = impl_->stats;
  s.blocks = impl_->blocks.size();
  s.bytes = impl_->bytes;
  s.files = impl_->files.size();
  s.dead_bytes = 0;
  for (const auto& [id, f] : impl_->files) s.dead_bytes += f.bytes - f.live_bytes;
  s.queued = impl_->queue.size();
  const tier::StateStoreStats st = impl_->states->Stats();
  s.states = st.states;
  s.state_bytes = st.bytes;
  s.spilled_states = st.spilled;
  s.loaded_states = st.loaded;
  s.corrupt_states = st.corrupt;
  s.evicted_states = st.evicted;
  return s;
}

Status SsdTier::Verify(uint64_t* good, uint64_t* bad) {
  Impl& m = *impl_;
  Flush();
  m.Reconcile();
  struct Rec {
    BlockKey key;
    uint64_t offset, bytes;
  };
  struct One {
    uint64_t id;
    std::string path;
    std::vector<Rec> recs;
  };
  std::vector<One> todo;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    for (const auto& [id, f] : m.files) {
      One o{id, f.path, {}};
      for (const BlockKey& k : f.keys) {
        const Impl::Entry& e = m.blocks.at(k);
        o.recs.push_back({k, e.offset, e.bytes});
      }
      todo.push_back(std::move(o));
    }
  }
  std::sort(todo.begin(), todo.end(), [](const One& a, const One& b) { return a.path < b.path; });
  *good = *bad = 0;
  std::shared_ptr<BlockPool> scratch;  // one block of the last namespace seen
  BlockKey scratch_ns;
  for (const One& o : todo) {
    Result<std::vector<uint8_t>> file = m.env->ReadFile(o.path);
    std::string first_error;
    uint64_t n_bad = 0;
    for (const Rec& r : o.recs) {
      const std::string name = o.path + " @" + std::to_string(r.offset);
      Status s = file.status();
      if (s.ok() && (r.offset > file->size() || file->size() - r.offset < r.bytes)) {
        s = Status::Corruption(name + ": the file is too short for the record");
      }
      Result<BlockFileHeader> h = Status::OK();
      std::span<const uint8_t> rec;
      if (s.ok()) {
        rec = std::span<const uint8_t>(*file).subspan(r.offset, r.bytes);
        h = tier::DecodeBlockHeader(rec, rec.size(), name);
        s = h.status();
      }
      if (s.ok() && !(h->key == r.key)) s = Status::Corruption(name + ": holds another block");
      if (s.ok() && (scratch == nullptr || !(scratch_ns == h->namespace_key))) {
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
          s = pool.status();
          if (s.ok()) {
            scratch = *pool;
            scratch_ns = h->namespace_key;
          }
        }
      }
      if (s.ok()) {
        std::vector<BlockId> id;
        s = scratch->Allocate(1, KvOwner::kOther, &id, "verify");
        if (s.ok()) {
          s = tier::DecodeBlockRows(*h, rec, *scratch, id[0], name);
          scratch->Unref(id, KvOwner::kOther);
        }
      }
      if (!s.ok()) {
        ++n_bad;
        if (first_error.empty()) first_error = s.message();
      }
    }
    if (n_bad == 0) {
      *good += o.recs.size();
    } else {
      *bad += n_bad;
      m.Quarantine(o.id, first_error);
    }
  }
  return Status::OK();
}

Status SsdTier::Clear() {
  Impl& m = *impl_;
  Flush();
  std::vector<std::string> paths;
  uint64_t total = 0;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    for (const auto& [id, f] : m.files) {
      paths.push_back(f.path);
      total += f.bytes;
    }
    while (!m.files.empty()) m.DropFile(m.files.begin()->first);
  }
  Status first;
  std::unordered_set<std::string> dirs;
  for (const std::string& p : paths) {
    Status s = m.env->RemoveFile(p);
    if (!s.ok() && s.code() != StatusCode::kNotFound && first.ok()) first = s;
    dirs.insert(p.substr(0, p.find_last_of('/')));
  }
  for (const std::string& d : dirs) (void)m.env->SyncDir(d);
  const Status states = m.states->Clear();
  if (!states.ok() && first.ok()) first = states;
  std::lock_guard<std::mutex> lock(m.mu);
  m.bytes -= total;
  return first;
}

}  // namespace kvtier
