// SsdTier's writer threads (ssd_tier_impl.h): batches taken from the queue and published as
// one segment file (SsdLayout::kSegments) or one block file per block (kBlockFiles, group
// commit), crash-safe either way: bytes durable before the rename, the rename durable before
// any block is indexed. Each writer runs WriteBatch with Impl::mu held, releasing it for I/O.
#include <algorithm>

#include "tier/segment_file.h"
#include "tier/ssd_tier_impl.h"

namespace kvtier {

using tier::Job;
using tier::KeyName;

uint64_t SsdTier::Impl::SegmentLimit() const {
  return std::max<uint64_t>(1, std::min<uint64_t>(opt.batch_bytes, opt.max_bytes / 8));
}

void SsdTier::Impl::CountSkipped(const Status& s, uint64_t n) {
  stats.skipped[static_cast<int>(s.code() == StatusCode::kResourceExhausted
                                     ? SpillSkip::kDiskFull
                                     : SpillSkip::kIoError)] += n;
}

void SsdTier::Impl::WriteBatch(std::vector<Job>& jobs, std::unique_lock<std::mutex>& lock) {
  if (opt.layout == SsdLayout::kSegments) {
    WriteSegment(jobs, lock);
  } else {
    WriteBlockFiles(jobs, lock);
  }
}

void SsdTier::Impl::WriteSegment(std::vector<Job>& jobs, std::unique_lock<std::mutex>& lock) {
  const size_t n = jobs.size();
  std::vector<uint64_t> offsets(n);
  uint64_t total = tier::kSegmentHeaderBytes;
  for (size_t i = 0; i < n; ++i) {
    offsets[i] = total;
    total += tier::AlignRecord(jobs[i].header.file_bytes());
  }
  if (!MakeRoom(total, lock)) {
    for (Job& job : jobs) job.pool->Unref({&job.block, 1}, KvOwner::kTier);
    stats.skipped[static_cast<int>(SpillSkip::kTooLarge)] += n;
    return;
  }
  reserved += total;
  uint64_t seg = NextSegmentId();
  lock.unlock();
  // A name already taken (a file this index does not know: planted, or left by a wrapped
  // counter) is skipped, never replaced.
  for (int tries = 0; tries < 64 && env->FileExists(SegmentPath(seg, false)); ++tries) {
    lock.lock();
    ++stats.id_collisions;
    seg = NextSegmentId();
    lock.unlock();
  }
  const std::string tmp = SegmentPath(seg, true), path = SegmentPath(seg, false);
  // SsdSyncMode::kFilesystem: the handle is opened before the writes its syncs must cover (a
  // write-back error after the open is reported to it); if it cannot be, fdatasync + fsync.
  std::unique_ptr<FilesystemSync> fs;
  if (opt.sync_mode == SsdSyncMode::kFilesystem && n >= opt.filesystem_sync_min_blocks) {
    Result<std::unique_ptr<FilesystemSync>> h = env->NewFilesystemSync(opt.dir);
    if (h.ok()) fs = std::move(*h);
  }
  std::unique_ptr<WritableFile> file;
  Result<std::unique_ptr<WritableFile>> f = env->NewWritableFile(tmp);
  if (f.status().code() == StatusCode::kNotFound) {  // segments/ went missing: made again
    Reconcile();  // and the index forgets the files that went with it
    const Status d = env->CreateDirs(SegmentDir());
    f = d.ok() ? env->NewWritableFile(tmp) : Result<std::unique_ptr<WritableFile>>(d);
  }
  Status s = f.status();
  if (s.ok()) file = std::move(*f);
  if (s.ok()) {
    uint8_t head[tier::kSegmentHeaderBytes];
    tier::EncodeSegmentHeader(seg, static_cast<uint32_t>(n), head);
    s = file->Append(head);
  }
  // Every record, encoded from its pool block into one reused buffer; the device starts on
  // each record while the next is encoded.
  static thread_local std::vector<uint8_t> buf;
  for (size_t i = 0; i < n; ++i) {
    Job& job = jobs[i];
    if (s.ok()) s = tier::EncodeBlockFile(job.header, *job.pool, job.block, &buf);
    job.pool->Unref({&job.block, 1}, KvOwner::kTier);
    if (!s.ok()) continue;
    buf.resize(tier::AlignRecord(buf.size()), 0);
    s = file->Append(buf);
    if (s.ok() && i + 1 < n) s = file->StartSync();
  }
  if (buf.capacity() > (64u << 20)) std::vector<uint8_t>().swap(buf);
  // Durable, then renamed, then the rename durable.
  if (s.ok()) {
    if (fs != nullptr) {
      s = file->Close();
      if (s.ok()) s = fs->Sync();
    } else {
      s = file->Sync();
      const Status c = file->Close();
      if (s.ok()) s = c;
    }
  }
  // No-replace: a name taken between the check above and now is an error, not an overwrite.
  if (s.ok()) s = env->RenameNoReplace(tmp, path);
  if (s.code() == StatusCode::kAlreadyExists) {
    lock.lock();
    ++stats.id_collisions;
    lock.unlock();
  }
  if (!s.ok()) {
    file.reset();
    (void)env->RemoveFile(tmp);
  } else {
    s = fs != nullptr ? fs->Sync() : env->SyncDir(SegmentDir());
    // Durable but not promised to survive: removed, so the cap counts every file.
    if (!s.ok()) (void)env->RemoveFile(path);
  }
  lock.lock();
  reserved -= total;
  if (!s.ok()) {
    CountSkipped(s, n);
    return;
  }
  const uint64_t fid = AddFile(path, total, false);
  for (size_t i = 0; i < n; ++i) {
    // (A key indexed meanwhile cannot happen: Spill skips pending keys; if it did, the
    // record would simply be dead bytes.)
    (void)AddBlock(jobs[i].header, fid, offsets[i]);
  }
  stats.spilled_blocks += n;
  for (const Job& job : jobs) stats.spilled_bytes += job.header.file_bytes();
  if (files.at(fid).keys.empty()) {
    DropFile(fid);
    ++stats.removed_dead_files;
    RemoveCounted(path, total, lock);
  }
}

void SsdTier::Impl::WriteBlockFiles(std::vector<Job>& jobs, std::unique_lock<std::mutex>& lock) {
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
  std::vector<uint8_t> bytes_buf;
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
    sl.tmp = sl.dir + "/" + KeyName(key) + tier::kTmpSuffix;
    sl.s = tier::EncodeBlockFile(job.header, *job.pool, job.block, &bytes_buf);
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
    if (sl.s.ok()) sl.s = sl.file->Append(bytes_buf);
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
      CountSkipped(sl.s, 1);
      continue;
    }
    const uint64_t fid = AddFile(sl.path, sl.size, true);
    if (!AddBlock(jobs[i].header, fid, 0)) {
      DropFile(fid);
      bytes -= sl.size;
    }
    ++stats.spilled_blocks;
    stats.spilled_bytes += sl.size;
  }
}

void SsdTier::Impl::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu);
  std::vector<Job> batch;
  // A segment's records stay under SegmentLimit() (at least one block); block files under
  // batch_bytes.
  const uint64_t limit = opt.layout == SsdLayout::kSegments ? SegmentLimit() : opt.batch_bytes;
  for (;;) {
    cv_work.wait(lock, [&] { return stop || !queue.empty() || reconcile_wanted; });
    if (reconcile_wanted) {  // ReconcileSoon(): the walk runs here, off the caller's thread
      reconcile_wanted = false;
      lock.unlock();
      Reconcile();
      lock.lock();
      continue;
    }
    if (queue.empty()) return;  // stop requested and nothing left
    batch.clear();
    uint64_t batch_bytes = 0;
    while (!queue.empty() && batch.size() < opt.batch_blocks) {
      const uint64_t b = queue.front().header.file_bytes();
      if (!batch.empty() && batch_bytes + b > limit) break;
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

}  // namespace kvtier
