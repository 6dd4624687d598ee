// Module tier (src/tier, kvtier_tier; order and include rule: docs/architecture.md) owns the SSD
// tier (segment and block files, writer threads, index, quarantine).
//
// SsdTier: the prefix cache's tier on disk. Blocks evicted from RAM are written by writer
// threads behind a bounded queue, a batch of blocks at a time into one segment file
// (docs/formats/kv-segment-file.md, format version 2: a header, then each block as a record
// that is a version-1 block file image with its own CRCs) or, with SsdLayout::kBlockFiles,
// one file per block (docs/formats/kv-block-file.md, version 1). A request that RAM serves
// less of than the disk is promoted back (PrefixCache does the asking through LowerTier).
// Files survive restarts: Open() rebuilds the index from the segment and record headers (and
// version-1 file headers: both layouts are always read, whichever one is written).
//
// Promises:
//   - Exactly what RAM held: rows in their native format, bit for bit; Load reads the rows
//     straight into the pool block and returns OK only after the header and payload CRC-32C,
//     key, namespace and size verify (on an error the block is the caller's to discard). A
//     file (segment or block file) whose block fails is moved to <dir>/quarantine/ with one
//     log line, every block it held becomes a miss.
//   - Crash-safe: a file is written to a .tmp name, synced, renamed and the rename synced
//     before the index lists any of its blocks (a segment: written, one fdatasync or syncfs,
//     renamed, one directory fsync or syncfs; block files, SsdSyncMode below: all written,
//     all synced, all renamed, each directory synced once, or all written, one syncfs, all
//     renamed, one syncfs); .tmp files left by a crash are removed at Open().
//   - Bounded: the bytes of all files on disk (segments count whole, the records of evicted
//     or dropped blocks included) never pass max_bytes; writes evict whole files, least
//     recently used first (a segment's use is the latest use of any of its blocks), also at
//     Open(). A segment whose last block is dropped is removed.
//   - Nothing dropped silently: when the queue is full the producer waits (or writes inline);
//     a block that cannot be written (disk full, I/O error) is counted by reason.
//
// Thread-safe. The writer threads hold a kTier reference on each queued block.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/status.h"

namespace kvtier {

// How a writer makes a batch durable (SsdTierOptions::sync_mode).
enum class SsdSyncMode : uint8_t {
  // fdatasync of every file, then the renames, then fsync of each directory of the batch:
  // touches only the tier's files, but each call is its own device cache flush (2 per block
  // when every block of a batch is in its own subdirectory).
  kPerFile = 0,
  // Every file written and closed, one FilesystemSync::Sync() (syncfs), every rename, one
  // more syncfs: two flushes per batch, the same guarantees. It also writes back every other
  // file of every process on that filesystem (a dedicated cache filesystem pays nothing for
  // that; a busy shared one makes each sync slower).
  kFilesystem = 1,
};

// How blocks are laid out on disk (SsdTierOptions::layout). Open() reads both.
enum class SsdLayout : uint8_t {
  // One file per block (format version 1, blocks/<xx>/<key>.kvb).
  kBlockFiles = 0,
  // One segment file per writer batch (format version 2, segments/<id>.kvs): one file
  // creation, one write stream, one sync and one rename per batch instead of per block.
  kSegments = 1,
};

struct SsdTierOptions {
  std::string dir;                       // required; created if missing
  uint64_t max_bytes = 10ull << 30;      // --ssd-cache-max-gb (default 10)
  uint32_t queue_blocks = 64;            // blocks waiting for the writers, at most
  // Writer threads: each writes and syncs its own batches, so several syncs are in flight
  // at once (with per-block files one thread reached about 60-75% of a plain sequential
  // write here, four 95%).
  uint32_t writer_threads = 4;
  // Group commit: a writer takes up to batch_blocks queued blocks (and at most batch_bytes
  // of records, at least one block) at once: one segment file (kSegments), or, with
  // kBlockFiles, one file each, written, synced, renamed and their directories synced
  // together. Small blocks then share the syncs' latency; every block is still durable under
  // its final name before it is indexed.
  uint32_t batch_blocks = 16;
  uint64_t batch_bytes = 16ull << 20;
  // kFilesystem for batches of at least filesystem_sync_min_blocks blocks, kPerFile for
  // smaller ones (and for a batch whose FilesystemSync cannot be opened). The default is the
  // faster one measured here (README: SSD tier): 256 KiB blocks spill about 2.5x as fast.
  // With kSegments a batch is one file: kFilesystem then costs the same two flushes as one
  // fdatasync + one directory fsync, and also writes back the rest of the filesystem.
  SsdSyncMode sync_mode = SsdSyncMode::kFilesystem;
  uint32_t filesystem_sync_min_blocks = 2;  // blocks of the batch
  // kSegments: a segment holds at most min(batch_bytes, max_bytes / 8) of records (at least
  // one block), so the cap always holds several segments to choose from.
  SsdLayout layout = SsdLayout::kSegments;
  bool write_inline_when_full = false;   // else the producer waits for room
  Env* env = nullptr;                    // default Env::Default()
  // Blocks of other models than these (when non-empty) are removed at Open(); by default
  // they are kept, indexed and simply never match.
  std::vector<ModelFingerprint> keep_only_models;
  bool log = true;                       // one stderr line per quarantined block
};

// Why a block was not written (SsdTierStats::skipped).
enum class SpillSkip : uint8_t {
  kDiskFull = 0,       // ENOSPC
  kIoError = 1,        // any other write error
  kTooLarge = 2,       // one block larger than max_bytes
};
inline constexpr int kNumSpillSkips = 3;

struct SsdTierStats {
  uint64_t blocks = 0;                 // blocks indexed
  uint64_t bytes = 0;                  // bytes of the files holding them (what max_bytes caps)
  uint64_t files = 0;                  // those files (segments and version-1 block files)
  uint64_t dead_bytes = 0;             // bytes of records in them no longer indexed
  uint64_t max_bytes = 0;
  uint64_t queued = 0;                 // waiting for the writer now
  uint64_t spilled_blocks = 0;         // written since Open()
  uint64_t spilled_bytes = 0;          // their block records' bytes (a segment's header and
                                       // padding not included: see `bytes`)
  uint64_t already_present = 0;        // spills of blocks already on disk (not rewritten)
  uint64_t inline_writes = 0;          // written by the producer because the queue was full
  uint64_t producer_waits = 0;         // times a producer waited for room in the queue
  std::array<uint64_t, kNumSpillSkips> skipped{};
  uint64_t loaded_blocks = 0;
  uint64_t loaded_bytes = 0;
  uint64_t quarantined = 0;            // files moved to quarantine/
  uint64_t evicted_blocks = 0;         // removed to stay under max_bytes
  uint64_t evicted_bytes = 0;          // file bytes removed for it
  uint64_t removed_dead_files = 0;     // files removed once none of their blocks was left
  uint64_t vanished_files = 0;         // indexed files found missing or resized on disk (the
                                       // directory removed or replaced): dropped from the index
  uint64_t id_collisions = 0;          // segment names found taken at publish (never replaced)
  // At Open():
  uint64_t found_blocks = 0;
  uint64_t removed_tmp_files = 0;
  uint64_t removed_foreign = 0;         // blocks of other models (keep_only_models)
  uint64_t ignored_newer = 0;           // files of a newer format version, left alone
  double open_ms = 0.0;
  // Recurrent-state snapshots (states/<key>.kvst; docs/ssd-tier.md, "State records"):
  uint64_t states = 0;                  // indexed
  uint64_t state_bytes = 0;             // their files' bytes (capped at max_bytes / 4)
  uint64_t spilled_states = 0;
  uint64_t loaded_states = 0;
  uint64_t corrupt_states = 0;          // failed verification: quarantined, a miss
  uint64_t evicted_states = 0;
};

class SsdTier : public LowerTier {
 public:
  static Result<std::shared_ptr<SsdTier>> Open(SsdTierOptions options);
  // Writes everything queued, then stops the writer.
  ~SsdTier() override;

  void Spill(const EvictedBlock& block) override;
  std::vector<TierNamespace> Namespaces(const ModelFingerprint& model) override;
  std::vector<TierBlock> FindChain(const TierNamespace& ns,
                                   std::span<const int32_t> tokens) override;
  Status Load(const TierNamespace& ns, const BlockKey& key, BlockPool& pool,
              BlockId id) override;
  // State snapshots: one verified file each, written by their own writer thread.
  void SpillState(const ModelFingerprint& model, const BlockKey& key,
                  std::shared_ptr<const StateSnapshot> snapshot) override;
  std::shared_ptr<const StateSnapshot> FindState(const ModelFingerprint& model,
                                                 std::span<const int32_t> tokens,
                                                 uint32_t min_position,
                                                 uint32_t max_position) override;

  // Every namespace on disk with its block count (kvtier cache stats).
  std::vector<std::pair<TierNamespace, uint64_t>> AllNamespaces() const;
  // Waits until every block queued so far is written or skipped.
  void Flush();
  SsdTierStats Stats() const;
  // Checks every indexed file against the disk (one stat each) and drops from the index those
  // that are missing or changed size, so Stats() counts only what is on disk. Runs by itself
  // when a load finds a file missing or the writer finds segments/ gone; `kvtier cache stats`,
  // the server's /v1/cache/stats and Verify() call it first. About 1.6-3.7 us a file (9-24 ms
  // for 5,276 block files, measured in ssd_tier_ids_test.cc). Returns how many files it dropped.
  uint64_t Reconcile();
  // Reconcile() on a writer thread, soon, unless one ran (or was asked for) less than
  // `min_interval_ms` ago; returns at once, never touching the disk itself. For callers that
  // must not block on a walk of the directory (the server's /metrics, on its event loop):
  // their next Stats() reflects the disk as of at most min_interval_ms plus a walk ago.
  void ReconcileSoon(uint32_t min_interval_ms);
  // Reads every indexed block in full and checks it (kvtier cache verify); a file with a
  // block that fails is quarantined (all of its blocks). *good counts the blocks verified in
  // files kept, *bad the blocks that failed.
  Status Verify(uint64_t* good, uint64_t* bad);
  // Removes every block and segment file (kvtier cache clear).
  Status Clear();
  const SsdTierOptions& options() const;

 private:
  struct Impl;
  explicit SsdTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One format through the tier's encoders, checked now (`kvtier cache formats`).
struct StoredFormatCheck {
  Format format;
  bool block_file_bit_exact = false;  // a block file written and read back, byte for byte
  bool segment_bit_exact = false;     // the same block as a segment's record, likewise
};
// Every supported format (AllSupportedFormats, then the token-grouped K formats with V f16
// in blocks of one group) written as a block file and as the second
// record of a segment (in memory) and read back into a pool block. Errors name the step that
// failed. Thread-safe (touches nothing shared).
Result<std::vector<StoredFormatCheck>> CheckStoredFormats();

}  // namespace kvtier
