// Module remote (src/remote, kvtier_remote; order and include rule: docs/architecture.md) owns
// the shared remote tier on Redis / Redis Cluster and the tier stack (SSD, then remote).
//
// RemoteTier: a LowerTier of the prefix cache backed by Redis (hiredis), shared by every
// replica that names the same Redis: a block one replica computed is a hit on every other.
//
//   key    kvt:1:<namespace key, 32 hex>:<block key, 32 hex>     (1: the value format version)
//   value  the block as a version-1 block file image (docs/formats/kv-block-file.md): the
//          identity (key, parent, namespace, model, shape, formats, tokens, entry ends) under a
//          CRC-32C, then the rows in their stored format under their own CRC-32C
//   kvt:1:ns:<model fingerprint, 32 hex>   a set of the model's namespaces (shape, formats,
//          block size), so another replica finds them
//   kvt:1:st:<state key, 32 hex>   a recurrent-state snapshot (qwen35) as a state record: the
//          SSD tier's state file bytes (header naming key, model, position under a CRC-32C,
//          then the encoded snapshot under its own CRCs)
//   kvt:1:stpos:<model fingerprint, 32 hex>   a set of the positions the model has snapshots at
//
// Reads: FindChain asks for the chain's keys in one pipelined EXISTS round trip (and one more
// for the tail block); Load takes a block from the read-ahead buffer, or fetches a batch of
// the chain's next blocks with one pipelined GET, while threads waiting on a batch fetch the
// following ones and two read-ahead workers keep up to two batches ahead of the blocks taken
// (bounded by read_ahead_bytes). Writes: Spill takes a reference
// and queues the block (bounded; a full queue drops the write and counts it, never waits);
// a writer thread encodes batches and sends them as one pipelined SET per node.
//
// Failure is a miss, never an error: a Redis that is down, slow (each round trip has a
// deadline), restarted or flushed, a value evicted between lookup and read, corrupt or of
// another format version makes Load fail (the prefix cache then prefills that part) and is
// counted in RemoteTierStats. Nodes that fail are retried with a doubling backoff.
//
// Thread-safe. The writer thread holds a kTier reference on each queued block until it is
// encoded.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/prefix_cache.h"
#include "kvtier/status.h"

namespace kvtier {

inline constexpr uint32_t kRemoteFormatVersion = 1;

struct RemoteTierOptions {
  std::string url;                   // redis://HOST:PORT[,HOST:PORT...] (required)
  uint32_t ttl_s = 0;                // SET ... EX ttl_s; 0: no TTL (Redis maxmemory + LRU bound)
  uint32_t deadline_ms = 200;        // per round trip; past it the blocks are misses
  // Blocks waiting for the writer at most (then dropped and counted). Queued blocks are pool
  // blocks held by reference, not copies; 2048 covers a 64K-token entry of 32-token blocks
  // stored at once (write-through hands a whole entry down in one call).
  uint32_t queue_blocks = 2048;
  uint32_t batch_blocks = 32;        // blocks per pipelined SET / GET batch
  uint64_t read_ahead_bytes = 256ull << 20;  // fetched blocks waiting for Load, at most
  uint32_t connections_per_node = 8; // the engine's promote threads + the writer, with room
  uint32_t backoff_min_ms = 50;      // a failed node is retried after this, doubling...
  uint32_t backoff_max_ms = 2000;    // ... up to this
  uint32_t namespace_refresh_ms = 1000;  // how long a read of the namespace set is reused
  bool log = true;                   // one stderr line per corrupt value
  uint32_t queue_states = 64;        // snapshots waiting for their writer at most (then dropped)
};

// Why a remote read became a miss (RemoteTierStats::misses_by).
enum class RemoteMiss : uint8_t {
  kUnavailable = 0,  // Redis down, refusing, in backoff, or past the deadline
  kVanished = 1,     // the value was gone at read time (evicted, expired, flushed)
  kCorrupt = 2,      // failed verification (CRC, identity, size)
  kOtherVersion = 3, // written by another format version or for other formats
};
inline constexpr int kNumRemoteMisses = 4;
std::string_view RemoteMissName(RemoteMiss m);  // "unavailable", "vanished", ...

struct RemoteTierStats {
  uint64_t lookups = 0;              // FindChain calls
  uint64_t lookup_blocks = 0;        // blocks found by them
  uint64_t hits = 0;                 // blocks loaded and verified
  uint64_t hit_bytes = 0;            // their value bytes
  std::array<uint64_t, kNumRemoteMisses> misses_by{};
  uint64_t read_ahead_blocks = 0;    // blocks fetched ahead of their Load
  uint64_t written_blocks = 0;       // SET acknowledged
  uint64_t written_bytes = 0;
  uint64_t write_errors = 0;         // SETs that failed (Redis down, OOM, ...)
  uint64_t dropped_queue_full = 0;   // spills dropped: the queue was full
  uint64_t already_written = 0;      // spills of blocks this process already wrote or read
  uint64_t queued = 0;               // waiting for the writer now
  uint64_t round_trips = 0;          // from the client
  uint64_t timeouts = 0;
  uint64_t connect_failures = 0;
  uint64_t moved = 0;                // cluster redirects followed
  uint64_t ask = 0;
  double load_ms_total = 0;          // time inside Load (latency: / (hits + misses))
  bool cluster = false;
  // Recurrent-state snapshots (SpillState / FindState).
  uint64_t state_lookups = 0;        // FindState calls with candidate positions
  uint64_t state_hits = 0;           // snapshots read and verified
  uint64_t state_hit_bytes = 0;
  std::array<uint64_t, kNumRemoteMisses> state_misses_by{};
  uint64_t state_written = 0;        // SET acknowledged
  uint64_t state_written_bytes = 0;
  uint64_t state_write_errors = 0;
  uint64_t state_dropped_queue_full = 0;
  uint64_t state_already_written = 0;
  uint64_t state_queued = 0;
};

// What `kvtier cache stats|verify --remote` sees in Redis.
struct RemoteScan {
  std::vector<std::string> masters;
  uint64_t blocks = 0;               // kvt:1:* block keys
  uint64_t bytes = 0;                // their value bytes (verify only)
  uint64_t good = 0, bad = 0;        // verify: values that verified / did not (removed)
  uint64_t other_keys = 0;           // kvt:* keys of other versions (left alone)
  uint64_t states = 0;               // kvt:1:st:* state snapshot keys
  // verify: snapshot values read back and checked (header and payload CRCs, the key their
  // header names); a bad one is removed. state_bytes: their value bytes.
  uint64_t state_good = 0, state_bad = 0, state_bytes = 0;
  std::vector<std::pair<TierNamespace, uint64_t>> namespaces;  // registered, with blocks
};

class RemoteTier : public LowerTier {
 public:
  // Validates the options and starts the writer; a Redis that is down now is not an error
  // (the tier misses until it comes back).
  static Result<std::shared_ptr<RemoteTier>> Open(RemoteTierOptions options);
  // Sends everything queued (within the deadline), then stops the writer.
  ~RemoteTier() override;

  void Spill(const EvictedBlock& block) override;
  std::vector<TierNamespace> Namespaces(const ModelFingerprint& model) override;
  std::vector<TierBlock> FindChain(const TierNamespace& ns,
                                   std::span<const int32_t> tokens) override;
  Status Load(const TierNamespace& ns, const BlockKey& key, BlockPool& pool,
              BlockId id) override;
  // State snapshots (kvt:1:st:*): queued for their own writer; found by position, verified.
  void SpillState(const ModelFingerprint& model, const BlockKey& key,
                  std::shared_ptr<const StateSnapshot> snapshot) override;
  std::shared_ptr<const StateSnapshot> FindState(const ModelFingerprint& model,
                                                 std::span<const int32_t> tokens,
                                                 uint32_t min_position,
                                                 uint32_t max_position) override;

  // Waits until every block and snapshot queued so far is written or failed.
  void Flush();
  RemoteTierStats Stats() const;
  // Walks every master's kvt:1:* keys (SCAN); with `verify`, reads and checks each value and
  // deletes those that fail.
  Result<RemoteScan> Scan(bool verify);
  // Deletes every kvt:* key (all versions); returns how many.
  Result<uint64_t> Clear();
  const RemoteTierOptions& options() const;

 private:
  struct Impl;
  explicit RemoteTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Several lower tiers as one, fastest first (the SSD tier, then the remote tier): Spill goes
// to every tier; FindChain takes the longest chain, asking a later tier only when the earlier
// ones do not cover the request; Load reads each block from the first tier that listed it and
// falls back to the others. Thread-safe.
class TierStack : public LowerTier {
 public:
  explicit TierStack(std::vector<std::shared_ptr<LowerTier>> tiers);
  ~TierStack() override;

  void Spill(const EvictedBlock& block) override;
  std::vector<TierNamespace> Namespaces(const ModelFingerprint& model) override;
  std::vector<TierBlock> FindChain(const TierNamespace& ns,
                                   std::span<const int32_t> tokens) override;
  Status Load(const TierNamespace& ns, const BlockKey& key, BlockPool& pool,
              BlockId id) override;
  // State snapshots: SpillState goes to every tier (those that keep none ignore it);
  // FindState takes the longest snapshot any tier has, asking the tiers in order.
  void SpillState(const ModelFingerprint& model, const BlockKey& key,
                  std::shared_ptr<const StateSnapshot> snapshot) override;
  std::shared_ptr<const StateSnapshot> FindState(const ModelFingerprint& model,
                                                 std::span<const int32_t> tokens,
                                                 uint32_t min_position,
                                                 uint32_t max_position) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier
