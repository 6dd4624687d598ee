// remote::StateBlobs: the remote tier's recurrent-state snapshots (kvtier/state_snapshot.h) in
// Redis, beside the KV blocks (docs/remote-tier.md, "State snapshots"):
//
//   kvt:1:st:<state key, 32 hex>    the snapshot as a state record (tier/state_store.h: the SSD
//                                   tier's state file bytes, a 48-byte header naming key, model
//                                   and position under a CRC-32C, then the encoded snapshot
//                                   with its own header and payload CRCs)
//   kvt:1:stpos:<model, 32 hex>     a set of the positions `model` has snapshots at, so a
//                                   replica that never wrote one knows which prefixes to hash
//
// Spill queues the snapshot (held by pointer; at most queue_states, then dropped and counted);
// a writer thread sends each as one pipelined SET (EX with a TTL) and SADD. Find reads the
// positions (SMEMBERS, reused for namespace_refresh_ms, plus this process's own), asks for the
// candidates' keys in one pipelined EXISTS, then GETs the longest present one and verifies it:
// a value that fails is deleted and counted (corrupt / other_version), one gone meanwhile is
// counted (vanished), and the next shorter is tried. Failure is a miss, never an error.
//
// Thread-safe. Owned by RemoteTier (its SpillState / FindState), sharing its RedisClient.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kvtier/remote_tier.h"
#include "kvtier/state_snapshot.h"
#include "remote/redis_client.h"

namespace kvtier::remote {

// "kvt:1:st:<key hex>" and "kvt:1:stpos:<model hex>".
std::string StateRedisKey(const BlockKey& key);
std::string StatePositionsKey(const ModelFingerprint& model);

class StateBlobs {
 public:
  // `client` outlives this object.
  StateBlobs(RedisClient* client, const RemoteTierOptions& options);
  ~StateBlobs();  // sends what is queued, then stops the writer
  StateBlobs(const StateBlobs&) = delete;
  StateBlobs& operator=(const StateBlobs&) = delete;

  void Spill(const ModelFingerprint& model, const BlockKey& key,
             std::shared_ptr<const StateSnapshot> snapshot);
  // The longest verified snapshot of `model` after tokens[0, p), min_position < p <=
  // max_position; null when none.
  std::shared_ptr<const StateSnapshot> Find(const ModelFingerprint& model,
                                            std::span<const int32_t> tokens,
                                            uint32_t min_position, uint32_t max_position);
  void Flush();  // waits until everything queued so far is written or failed
  void Forget();  // after a Clear: nothing is known written, no positions cached
  // Adds the state_* counters to *s.
  void AddStats(RemoteTierStats* s) const;

 private:
  struct Job {
    ModelFingerprint model;
    BlockKey key;
    std::shared_ptr<const StateSnapshot> s;
  };
  void WriterLoop();
  void Write(std::vector<Job>& jobs);
  std::vector<uint32_t> Positions(const ModelFingerprint& model);  // ascending
  void Miss(RemoteMiss m);

  RedisClient* const client_;
  const RemoteTierOptions opt_;

  mutable std::mutex wmu_;
  std::condition_variable wcv_, wdone_;
  std::deque<Job> queue_;
  std::unordered_set<BlockKey, Hash128Hasher> known_;  // written or read by this process
  size_t writing_ = 0;
  bool stop_ = false;
  std::thread writer_;

  std::mutex pmu_;
  using Clock = std::chrono::steady_clock;
  std::map<std::string, std::pair<std::set<uint32_t>, Clock::time_point>> positions_;
  std::map<std::string, std::set<uint32_t>> local_positions_;  // written by this process

  mutable std::mutex smu_;
  RemoteTierStats stats_;  // only the state_* fields
};

}  // namespace kvtier::remote
