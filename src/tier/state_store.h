// tier::StateStore: the SSD tier's recurrent-state snapshots (kvtier/state_snapshot.h), one
// file each under <dir>/states/ (docs/ssd-tier.md, "State records"), written by one writer
// thread (tmp file, sync, rename, directory sync: durable before it is indexed), indexed at
// open from the files' headers, found by key (StateSnapshotKey) and verified on every read:
// a file that fails is quarantined and counted, never returned. Capped at max_bytes (LRU
// files go first). Thread-safe; SsdTier owns one and forwards SpillState / FindState to it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/state_snapshot.h"
#include "kvtier/status.h"

namespace kvtier::tier {

// The state file: a 48-byte header, then the encoded snapshot (its own CRCs).
//   0 u32 magic 0x5353564B ("KVSS")   4 u32 version (1)
//   8 key lo, hi (u64)               24 model lo, hi (u64)
//  40 u32 position                   44 u32 CRC-32C of bytes [0, 44)
inline constexpr uint32_t kStateFileMagic = 0x5353564Bu;
inline constexpr uint32_t kStateFileVersion = 1;
inline constexpr size_t kStateFileHeaderBytes = 48;

// A state record: the state file's bytes (header above, then EncodeStateSnapshot), also the
// remote tier's value of a snapshot (docs/remote-tier.md). Pure functions; thread-safe.
std::vector<uint8_t> EncodeStateRecord(const BlockKey& key, const ModelFingerprint& model,
                                       const StateSnapshot& s);
// Verifies a whole record: magic, header CRC, version (a newer one is Unimplemented), that the
// header names `key`, `model` and `position`, then the snapshot (its own CRCs, sizes) and that
// it is at `position`. Errors name `name` and the field (Corruption otherwise).
Result<StateSnapshot> DecodeStateRecord(std::span<const uint8_t> record, const BlockKey& key,
                                        const ModelFingerprint& model, uint32_t position,
                                        const std::string& name);
// Verifies a record whose model and position the caller does not know (`kvtier cache verify`):
// the header (magic, CRC, version) must name `key`; the model and position it names are then
// checked as DecodeStateRecord does. Same errors.
Result<StateSnapshot> VerifyStateRecord(std::span<const uint8_t> record, const BlockKey& key,
                                        const std::string& name);

struct StateStoreStats {
  uint64_t states = 0;          // indexed
  uint64_t bytes = 0;           // their files' bytes
  uint64_t spilled = 0;         // written since open
  uint64_t already_present = 0;
  uint64_t write_failures = 0;  // skipped: I/O error, disk full, larger than the cap
  uint64_t loaded = 0;          // returned by Find
  uint64_t corrupt = 0;         // failed verification: quarantined, a miss
  uint64_t evicted = 0;         // removed to stay under the cap
  uint64_t found = 0;           // indexed at open
};

class StateStore {
 public:
  // Creates <dir>/states, removes .tmp files, indexes the headers; starts the writer.
  static Result<std::unique_ptr<StateStore>> Open(Env* env, const std::string& dir,
                                                  uint64_t max_bytes, bool log);
  ~StateStore();  // writes what is queued first

  void Spill(const ModelFingerprint& model, const BlockKey& key,
             std::shared_ptr<const StateSnapshot> s);
  // The longest verified snapshot after tokens[0, p), min_position < p <= max_position.
  std::shared_ptr<const StateSnapshot> Find(const ModelFingerprint& model,
                                            std::span<const int32_t> tokens,
                                            uint32_t min_position, uint32_t max_position);
  void Flush();  // waits until everything queued is written or skipped
  Status Clear();  // removes every indexed state file (after a Flush)
  StateStoreStats Stats() const;
  std::string PathOf(const BlockKey& key) const;

 private:
  struct Entry {
    ModelFingerprint model;
    uint32_t position = 0;
    uint64_t bytes = 0;
    uint64_t tick = 0;
  };
  struct Job {
    ModelFingerprint model;
    BlockKey key;
    std::shared_ptr<const StateSnapshot> s;
  };
  using Pair = std::pair<uint64_t, uint64_t>;
  static Pair P(const Hash128& h) { return {h.hi, h.lo}; }

  StateStore(Env* env, const std::string& root, uint64_t max_bytes, bool log)
      : env_(env), dir_(root + "/states"), quarantine_(root + "/quarantine"),
        max_bytes_(max_bytes), log_(log) {}
  Status Scan();
  void WriterLoop();
  Status Write(const Job& j, uint64_t* file_bytes);
  void Index(const BlockKey& key, const ModelFingerprint& model, uint32_t position,
             uint64_t bytes);  // requires mu_
  void Drop(const BlockKey& key);  // requires mu_
  void Quarantine(const BlockKey& key, const std::string& why);  // takes mu_

  Env* const env_;
  const std::string dir_;         // <tier dir>/states
  const std::string quarantine_;  // <tier dir>/quarantine
  const uint64_t max_bytes_;
  const bool log_;
  mutable std::mutex mu_;
  std::condition_variable cv_work_, cv_idle_;
  std::deque<Job> queue_;
  bool writing_ = false, stop_ = false;
  std::thread writer_;
  std::unordered_map<BlockKey, Entry, Hash128Hasher> index_;
  std::set<std::pair<uint64_t, Pair>> lru_;                 // (tick, key)
  std::map<Pair, std::map<uint32_t, uint32_t>> positions_;  // model -> position -> count
  uint64_t tick_ = 0;
  StateStoreStats stats_;
};

}  // namespace kvtier::tier
