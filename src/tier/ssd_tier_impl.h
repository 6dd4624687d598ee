// SsdTier's internals (kvtier/ssd_tier.h), shared by ssd_tier.cc (index, startup scan, reload,
// verify) and ssd_tier_write.cc (writer threads: block files and segments). One mutex `mu`
// guards the index, the queue, the idle read handles and the stats; file I/O runs outside it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvtier/ssd_tier.h"
#include "tier/block_file.h"
#include "tier/state_store.h"

namespace kvtier {

namespace tier {
inline constexpr char kTmpSuffix[] = ".kvb.tmp";
inline constexpr char kSuffix[] = ".kvb";
inline constexpr char kSegTmpSuffix[] = ".kvs.tmp";
inline constexpr char kSegSuffix[] = ".kvs";

// A block waiting for the writer: its identity and a kTier reference on its pool block.
struct Job {
  BlockFileHeader header;
  std::shared_ptr<BlockPool> pool;
  BlockId block = -1;
};
}  // namespace tier

struct SsdTier::Impl {
  explicit Impl(SsdTierOptions o) : opt(std::move(o)), env(opt.env ? opt.env : Env::Default()) {}

  // A file of the index: a segment, or a version-1 block file (one record at offset 0).
  struct File {
    std::string path;
    uint64_t bytes = 0;              // its size on disk, counted against max_bytes
    uint64_t tick = 0;               // latest use of any of its blocks
    bool v1 = false;
    std::vector<BlockKey> keys;      // blocks of it that are indexed
    uint64_t live_bytes = 0;         // their records' bytes
  };
  struct Entry {
    BlockKey parent;
    BlockKey ns;
    std::vector<int32_t> tokens;
    std::vector<uint32_t> ends;
    uint64_t file = 0;               // File id
    uint64_t offset = 0;             // of its record in the file
    uint64_t bytes = 0;              // of its record
  };
  // An open read handle on a file, kept for the next Load of a block of the same file.
  struct Handle {
    uint64_t file = 0;
    std::unique_ptr<RandomAccessFile> f;
  };
  static constexpr size_t kIdleHandles = 16;

  std::string SubDir(const BlockKey& k) const;
  std::string PathOf(const BlockKey& k) const;  // of a version-1 block file
  std::string SegmentDir() const { return opt.dir + "/segments"; }
  std::string SegmentPath(uint64_t seg, bool tmp) const;

  // Index maintenance; all require mu.
  // A new file of `bytes` bytes (counted at once); returns its id.
  uint64_t AddFile(std::string path, uint64_t bytes, bool v1);
  // Indexes a block of file `file` (false if the key is already indexed: that record is dead).
  bool AddBlock(const tier::BlockFileHeader& h, uint64_t file, uint64_t offset);
  // Unindexes a block; when its file is left with none, the file leaves the index and its
  // path is returned (to be removed by the caller with RemoveCounted), else "".
  std::string DropBlock(const BlockKey& key);
  // Unindexes one block's entry (its File::keys is the caller's to fix).
  void EraseEntry(const BlockKey& key);
  // Unindexes a file and all its blocks (bytes stay counted until RemoveCounted).
  void DropFile(uint64_t file);
  void Touch(const BlockKey& key);
  // Removes a file that left the index, counting its bytes until the removal is done.
  // Requires mu held through `lock`; releases it for the removal.
  void RemoveCounted(const std::string& path, uint64_t bytes, std::unique_lock<std::mutex>& lock);
  // Evicts LRU files until bytes + reserved + need <= max_bytes (false if it cannot).
  bool MakeRoom(uint64_t need, std::unique_lock<std::mutex>& lock);
  // Moves file `file` (if still indexed) to quarantine/ with one log line. Takes mu.
  void Quarantine(uint64_t file, const std::string& why);
  // Moves a file not in the index to quarantine/ with one log line. Takes mu for the stats.
  void QuarantinePath(const std::string& path, const std::string& why);

  // Reconcile() (kvtier/ssd_tier.h). Takes mu; stats outside it.
  uint64_t Reconcile();
  void ReconcileSoon(uint32_t min_interval_ms);
  // The next segment id (requires mu): never 0 or UINT64_MAX, wrapping to 1 (a name still
  // taken then is skipped by the writer, and RenameNoReplace makes a collision an error).
  uint64_t NextSegmentId();

  Status Scan();
  Status ScanBlockFiles();
  // A block of a model keep_only_models does not list (never, when it is empty).
  bool Foreign(const ModelFingerprint& model) const;
  Status ScanSegments();
  void WriterLoop();
  // Writes and publishes a batch of jobs: one segment (layout kSegments) or one file per job
  // (group commit). A block is indexed only after its file's rename is durable. Requires mu
  // (released for the I/O); counts every job as spilled or skipped.
  void WriteBatch(std::vector<tier::Job>& jobs, std::unique_lock<std::mutex>& lock);
  void WriteBlockFiles(std::vector<tier::Job>& jobs, std::unique_lock<std::mutex>& lock);
  void WriteSegment(std::vector<tier::Job>& jobs, std::unique_lock<std::mutex>& lock);
  uint64_t SegmentLimit() const;
  void CountSkipped(const Status& s, uint64_t n);

  const SsdTierOptions opt;
  Env* const env;
  mutable std::mutex mu;
  std::condition_variable cv_work, cv_room, cv_idle;
  std::deque<tier::Job> queue;
  int writing = 0;           // jobs taken from the queue, not yet finished
  bool stop = false;
  std::vector<std::thread> writers;
  std::unordered_set<BlockKey, Hash128Hasher> pending;  // queued or being written

  std::unordered_map<BlockKey, Entry, Hash128Hasher> blocks;
  std::unordered_map<uint64_t, File> files;
  std::unordered_map<BlockKey, std::vector<BlockKey>, Hash128Hasher> children;  // by parent
  std::unordered_map<BlockKey, std::pair<TierNamespace, uint64_t>, Hash128Hasher> namespaces;
  std::set<std::pair<uint64_t, uint64_t>> lru;  // (tick, file id), oldest first
  std::vector<Handle> idle_handles;             // most recently used last
  uint64_t tick = 0;
  uint64_t next_file = 1;    // in-memory file ids
  uint64_t next_segment = 1; // segment file names (one more than the largest valid id found;
                             // quarantined, newer-version and foreign names do not count)
  uint64_t bytes = 0;        // of every indexed file, and of files being removed
  uint64_t reserved = 0;     // bytes of files being written
  SsdTierStats stats;
  std::unique_ptr<tier::StateStore> states;  // state snapshots (own lock and writer)
  // ReconcileSoon(): a walk asked of the writers, and when the latest walk (any caller's)
  // began; both under mu.
  bool reconcile_wanted = false;
  std::chrono::steady_clock::time_point last_reconcile{};
};

}  // namespace kvtier
