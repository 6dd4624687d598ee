// A small Redis client over hiredis for the remote tier: one Redis or a Redis Cluster, pipelined
// batches of single-key commands, per-round-trip deadlines, reconnection with backoff.
//
//   RedisClient::Create("redis://127.0.0.1:6379")                  one Redis
//   RedisClient::Create("redis://10.0.0.1:7000,10.0.0.2:7000")     Cluster seeds
//
// Cluster routing: CLUSTER SLOTS maps the 16384 hash slots to masters; each command goes to the
// master of its key's slot (HashSlot: CRC-16/XMODEM of the key, or of its {hash tag}). A MOVED
// reply updates that slot and retries there (and asks for a fresh map before the next batch);
// an ASK reply sends ASKING then the command to the named node, once. A node that refuses
// connections or times out is put in backoff (doubling from backoff_min_ms to backoff_max_ms):
// its commands fail at once (Unavailable) until the backoff ends, so a dead Redis costs a
// request nothing.
//
// Bounded: a batch is sent and read completely before the next (no unbounded pipelines);
// at most max_conns_per_node connections per node, idle ones kept for reuse.
//
// Thread-safe: every method may be called from any thread; a connection serves one batch at a
// time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

struct redisReply;
struct redisContext;

namespace kvtier::remote {

// CRC-16/XMODEM (poly 0x1021, init 0), Redis Cluster's key hash.
uint16_t Crc16(std::string_view data);
// The cluster hash slot of `key` (0..16383): of the part between the first '{' and the next
// '}' when that part is not empty, else of the whole key.
uint16_t HashSlot(std::string_view key);

struct ReplyDeleter {
  void operator()(redisReply* r) const;
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// One command: argv[0] is the name, argv[1] the key (routing).
struct RedisCommand {
  std::vector<std::string> argv;
};

// The outcome of one command: a reply (which may itself be a Redis error reply other than
// MOVED/ASK), or a status when the command could not be run (node down, deadline, protocol).
struct RedisResult {
  Status status;
  ReplyPtr reply;
  bool is_nil() const;
  bool is_error() const;           // a Redis error reply
  std::string_view str() const;    // string, status or error text ("" otherwise)
  long long integer() const;       // integer reply (0 otherwise)
};

struct RedisClientOptions {
  uint32_t deadline_ms = 100;        // per round trip (connect, send, each reply read)
  uint32_t backoff_min_ms = 50;      // a failed node waits this long first, then doubles
  uint32_t backoff_max_ms = 2000;
  uint32_t max_conns_per_node = 8;
  uint32_t max_redirects = 3;        // MOVED / ASK hops per command
};

struct RedisClientStats {
  uint64_t round_trips = 0;
  uint64_t commands = 0;
  uint64_t connects = 0;           // connections opened
  uint64_t connect_failures = 0;
  uint64_t timeouts = 0;           // round trips past the deadline
  uint64_t io_errors = 0;          // other connection errors (reset, closed, protocol)
  uint64_t backoff_refusals = 0;   // commands refused at once: their node in backoff
  uint64_t moved = 0;
  uint64_t ask = 0;
  uint64_t slot_refreshes = 0;     // CLUSTER SLOTS read
  uint64_t sent_bytes = 0;         // argument bytes sent
  uint64_t received_bytes = 0;     // string reply bytes received
};

class RedisClient {
 public:
  // `url`: redis://HOST:PORT[,HOST:PORT...]. One address: a single Redis (cluster mode if
  // CLUSTER SLOTS answers with slots); several: cluster seeds. InvalidArgument names the bad
  // part. Connects lazily: a Redis that is down now is not an error here.
  static Result<std::unique_ptr<RedisClient>> Create(const std::string& url,
                                                     RedisClientOptions options = {});
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Runs `cmds` (each routed by argv[1]), pipelined per node: one round trip per node, plus
  // one per redirect. Results are in the order of `cmds`.
  std::vector<RedisResult> Run(const std::vector<RedisCommand>& cmds);
  // Runs `cmd` on every master (SCAN, FLUSHALL, INFO ...), `arg_key` unused for routing.
  // One result per master, with its address in *nodes when given.
  std::vector<RedisResult> RunOnEveryMaster(const RedisCommand& cmd,
                                            std::vector<std::string>* nodes = nullptr);
  // Runs `cmd` on the master at `node` ("host:port").
  RedisResult RunOn(const std::string& node, const RedisCommand& cmd);

  bool cluster() const;
  // Masters known now ("host:port"), the seeds when no map was read yet.
  std::vector<std::string> Masters();
  RedisClientStats Stats() const;
  const RedisClientOptions& options() const { return opt_; }

 private:
  struct Node;
  struct Conn;
  RedisClient(std::vector<std::string> seeds, RedisClientOptions options);
  Node* GetNode(const std::string& addr);
  std::unique_ptr<Conn> Acquire(Node* n, Status* why);
  void Release(Node* n, std::unique_ptr<Conn> c, bool healthy);
  // Sends `idx` of `cmds` to node `addr` in one pipeline (with ASKING before each when `ask`);
  // fills out[idx].
  void RunBatch(const std::string& addr, const std::vector<RedisCommand>& cmds,
                const std::vector<size_t>& idx, bool ask, std::vector<RedisResult>& out);
  // Reads CLUSTER SLOTS from any reachable node; false if none answered with slots.
  bool RefreshSlots();
  std::string NodeForSlot(uint16_t slot);

  const RedisClientOptions opt_;
  const std::vector<std::string> seeds_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Node>> nodes_;
  std::vector<std::string> slot_node_;  // [16384] master address per slot; empty: unknown
  bool cluster_ = false;
  bool probed_ = false;                 // CLUSTER SLOTS tried at least once successfully
  std::atomic<bool> refresh_{true};     // read the slot map before the next batch
  std::chrono::steady_clock::time_point last_refresh_{};
  mutable std::mutex stats_mu_;
  RedisClientStats stats_;
};

}  // namespace kvtier::remote
