// RemoteTier (kvtier/remote_tier.h): keys, the writer thread, lookups, read-ahead and
// verification of values read back. Redis itself is spoken by RedisClient (redis_client.h).
#include "kvtier/remote_tier.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "remote/redis_client.h"
#include "remote/remote_keys.h"
#include "remote/remote_state.h"
#include "tier/block_file.h"
#include "tier/state_store.h"

namespace kvtier {

using remote::RedisClient;
using remote::RedisCommand;
using remote::RedisResult;
using tier::BlockFileHeader;

std::string_view RemoteMissName(RemoteMiss m) {
  switch (m) {
    case RemoteMiss::kUnavailable: return "unavailable";
    case RemoteMiss::kVanished: return "vanished";
    case RemoteMiss::kCorrupt: return "corrupt";
    case RemoteMiss::kOtherVersion: return "other_version";
  }
  return "unknown";
}

namespace {

using Clock = std::chrono::steady_clock;

// A block on its way to Redis.
struct Job {
  BlockFileHeader header;
  std::shared_ptr<BlockPool> pool;
  BlockId block = -1;
};

// A chain FindChain returned, for read-ahead.
struct Chain {
  BlockKey ns;
  std::vector<BlockKey> keys;
};

// A fetched (or being fetched) value.
struct Slot {
  bool pending = true;
  bool taken = false;  // its Load took the value (kept a while so read-ahead skips it)
  RedisResult value;
  Clock::time_point at;
};

constexpr size_t kKnownKeys = 1 << 16;  // keys remembered as written or read
constexpr size_t kChains = 16;          // recent chains kept for read-ahead
constexpr auto kSlotLife = std::chrono::seconds(10);

}  // namespace

struct RemoteTier::Impl {
  explicit Impl(RemoteTierOptions o) : opt(std::move(o)) {}
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(wmu);
      stop = true;
    }
    wcv.notify_all();
    if (writer.joinable()) writer.join();
    {
      std::lock_guard<std::mutex> lock(rmu);
      reader_stop = true;
    }
    pcv.notify_all();
    for (std::thread& t : readers) t.join();
  }
  // Read-ahead workers: fetch the batches Load schedules ahead of the blocks it takes.
  void ReaderLoop();
  // Schedules the chain's next unstarted batch when it starts within `window` blocks after
  // `key`. Requires rmu.
  void ScheduleAhead(const BlockKey& key, size_t window);

  void WriterLoop();
  void WriteBatch(std::vector<Job>& jobs);
  bool Known(const BlockKey& k) const { return known.contains(k); }
  void Remember(const BlockKey& k);  // requires wmu
  void Count(RemoteMiss m) {
    {
      std::lock_guard<std::mutex> lock(smu);
      ++stats.misses_by[static_cast<int>(m)];
    }
    // Redis may come back empty (restarted, flushed): what this process wrote before is sent
    // again when spilled again.
    if (m == RemoteMiss::kUnavailable) {
      std::lock_guard<std::mutex> lock(wmu);
      known.clear();
      known_order.clear();
    }
  }
  // Read-ahead: the next unstarted batch of keys after `from` in its chain, marked pending;
  // empty if none or the buffer is full. Requires rmu.
  std::vector<BlockKey> TakeBatch(const BlockKey& from, bool include_from, BlockKey* ns,
                                  size_t max_ahead = SIZE_MAX);
  void Fetch(const BlockKey& ns, const std::vector<BlockKey>& keys);
  void ExpireSlots();  // requires rmu
  Status Verify(const TierNamespace& ns, const BlockKey& key, const RedisResult& r,
                BlockPool& pool, BlockId id);

  const RemoteTierOptions opt;
  std::unique_ptr<RedisClient> client;
  std::unique_ptr<remote::StateBlobs> states;  // after client: stopped before it goes
  uint64_t block_value_bytes_guess = 1 << 20;

  // Writer.
  std::mutex wmu;
  std::condition_variable wcv, wdone;
  std::deque<Job> queue;
  std::unordered_set<BlockKey, Hash128Hasher> pending, known;
  std::deque<BlockKey> known_order;
  uint64_t writing = 0;  // blocks taken by the writer, not finished
  bool stop = false;
  std::thread writer;

  // Namespaces.
  std::mutex nmu;
  std::map<std::string, std::pair<std::vector<TierNamespace>, Clock::time_point>> ns_cache;
  std::map<std::string, std::vector<TierNamespace>> ns_local;  // written by this process

  // Read-ahead.
  std::mutex rmu;
  std::condition_variable rcv;
  std::unordered_map<BlockKey, Slot, Hash128Hasher> slots;
  std::deque<std::shared_ptr<Chain>> chains;
  std::unordered_map<BlockKey, std::pair<std::shared_ptr<Chain>, size_t>, Hash128Hasher> where;
  uint64_t buffered = 0;  // bytes of ready slots
  std::condition_variable pcv;
  std::deque<std::pair<BlockKey, std::vector<BlockKey>>> ahead_queue;  // (namespace, keys)
  bool reader_stop = false;
  std::vector<std::thread> readers;

  mutable std::mutex smu;
  RemoteTierStats stats;
};

void RemoteTier::Impl::Remember(const BlockKey& k) {
  if (!known.insert(k).second) return;
  known_order.push_back(k);
  if (known_order.size() > kKnownKeys) {
    known.erase(known_order.front());
    known_order.pop_front();
  }
}

void RemoteTier::Impl::WriterLoop() {
  std::unique_lock<std::mutex> lock(wmu);
  for (;;) {
    wcv.wait(lock, [&] { return stop || !queue.empty(); });
    if (queue.empty()) return;  // stopping, all sent
    std::vector<Job> jobs;
    while (!queue.empty() && jobs.size() < opt.batch_blocks) {
      jobs.push_back(std::move(queue.front()));
      queue.pop_front();
    }
    writing += jobs.size();
    lock.unlock();
    WriteBatch(jobs);
    lock.lock();
    writing -= jobs.size();
    for (const Job& j : jobs) pending.erase(j.header.key);
    wdone.notify_all();
  }
}

void RemoteTier::Impl::WriteBatch(std::vector<Job>& jobs) {
  std::vector<RedisCommand> cmds;
  std::vector<uint8_t> buf;
  std::map<std::string, std::string> registrations;  // registry key -> member
  std::vector<size_t> job_of;                         // [cmds] job index or SIZE_MAX
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& j = jobs[i];
    const Status s = tier::EncodeBlockFile(j.header, *j.pool, j.block, &buf);
    const BlockId id = j.block;
    j.pool->Unref({&id, 1}, KvOwner::kTier);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(smu);
      ++stats.write_errors;
      continue;
    }
    RedisCommand c;
    c.argv = {"SET", remote::BlockRedisKey(j.header.namespace_key, j.header.key),
              std::string(buf.begin(), buf.end())};
    if (opt.ttl_s > 0) {
      c.argv.push_back("EX");
      c.argv.push_back(std::to_string(opt.ttl_s));
    }
    cmds.push_back(std::move(c));
    job_of.push_back(i);
    TierNamespace ns;
    ns.key = j.header.namespace_key;
    ns.model = j.header.model;
    ns.shape = j.header.shape;
    ns.k_format = j.header.k_format;
    ns.v_format = j.header.v_format;
    ns.block_tokens = j.header.block_tokens;
    registrations[remote::NamespaceSetKey(ns.model)] = remote::NamespaceMember(ns);
    std::lock_guard<std::mutex> lock(nmu);
    std::vector<TierNamespace>& local = ns_local[ns.model.ToHex()];
    if (std::none_of(local.begin(), local.end(), [&](const TierNamespace& t) { return t.key == ns.key; })) {
      local.push_back(ns);
    }
  }
  for (const auto& [set, member] : registrations) {
    cmds.push_back({{"SADD", set, member}});
    job_of.push_back(SIZE_MAX);
  }
  if (cmds.empty()) return;
  std::vector<RedisResult> out = client->Run(cmds);
  uint64_t ok = 0, bytes = 0, bad = 0;
  std::vector<BlockKey> done;
  for (size_t c = 0; c < cmds.size(); ++c) {
    if (job_of[c] == SIZE_MAX) continue;
    if (out[c].status.ok() && !out[c].is_error()) {
      ++ok;
      bytes += cmds[c].argv[2].size();
      done.push_back(jobs[job_of[c]].header.key);
    } else {
      ++bad;
    }
  }
  {
    std::lock_guard<std::mutex> lock(wmu);
    for (const BlockKey& k : done) Remember(k);
  }
  std::lock_guard<std::mutex> lock(smu);
  stats.written_blocks += ok;
  stats.written_bytes += bytes;
  stats.write_errors += bad;
}

Result<std::shared_ptr<RemoteTier>> RemoteTier::Open(RemoteTierOptions options) {
  if (options.batch_blocks == 0 || options.queue_blocks == 0) {
    return Status::InvalidArgument("remote tier: batch_blocks and queue_blocks must be > 0");
  }
  remote::RedisClientOptions co;
  co.deadline_ms = options.deadline_ms;
  co.backoff_min_ms = options.backoff_min_ms;
  co.backoff_max_ms = std::max(options.backoff_max_ms, options.backoff_min_ms);
  co.max_conns_per_node = options.connections_per_node;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RedisClient> client,
                          RedisClient::Create(options.url, co));
  auto impl = std::make_unique<Impl>(std::move(options));
  impl->client = std::move(client);
  impl->states = std::make_unique<remote::StateBlobs>(impl->client.get(), impl->opt);
  Impl* m = impl.get();
  m->writer = std::thread([m] { m->WriterLoop(); });
  for (int i = 0; i < 2; ++i) m->readers.emplace_back([m] { m->ReaderLoop(); });
  return std::shared_ptr<RemoteTier>(new RemoteTier(std::move(impl)));
}

RemoteTier::RemoteTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteTier::~RemoteTier() = default;
const RemoteTierOptions& RemoteTier::options() const { return impl_->opt; }

void RemoteTier::Spill(const EvictedBlock& b) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.wmu);
  if (m.Known(b.key) || m.pending.contains(b.key)) {
    std::lock_guard<std::mutex> sl(m.smu);
    ++m.stats.already_written;
    return;
  }
  if (m.queue.size() >= m.opt.queue_blocks) {
    std::lock_guard<std::mutex> sl(m.smu);
    ++m.stats.dropped_queue_full;
    return;
  }
  if (!b.pool->Ref({&b.block, 1}, KvOwner::kTier).ok()) {
    std::lock_guard<std::mutex> sl(m.smu);
    ++m.stats.write_errors;
    return;
  }
  Job j;
  j.header = tier::SpilledBlockHeader(b);
  j.pool = b.pool;
  j.block = b.block;
  m.pending.insert(b.key);
  m.queue.push_back(std::move(j));
  m.wcv.notify_one();
}

void RemoteTier::SpillState(const ModelFingerprint& model, const BlockKey& key,
                            std::shared_ptr<const StateSnapshot> snapshot) {
  impl_->states->Spill(model, key, std::move(snapshot));
}

std::shared_ptr<const StateSnapshot> RemoteTier::FindState(const ModelFingerprint& model,
                                                           std::span<const int32_t> tokens,
                                                           uint32_t min_position,
                                                           uint32_t max_position) {
  return impl_->states->Find(model, tokens, min_position, max_position);
}

void RemoteTier::Flush() {
  Impl& m = *impl_;
  m.states->Flush();
  std::unique_lock<std::mutex> lock(m.wmu);
  m.wdone.wait(lock, [&] { return m.queue.empty() && m.writing == 0; });
}

std::vector<TierNamespace> RemoteTier::Namespaces(const ModelFingerprint& model) {
  Impl& m = *impl_;
  const std::string hex = model.ToHex();
  std::vector<TierNamespace> out;
  bool fresh = false;
  {
    std::lock_guard<std::mutex> lock(m.nmu);
    auto it = m.ns_cache.find(hex);
    if (it != m.ns_cache.end() &&
        Clock::now() - it->second.second < std::chrono::milliseconds(m.opt.namespace_refresh_ms)) {
      out = it->second.first;
      fresh = true;
    }
  }
  if (!fresh) {
    std::vector<RedisResult> r =
        m.client->Run({{{"SMEMBERS", remote::NamespaceSetKey(model)}}});
    if (!r[0].status.ok()) m.Count(RemoteMiss::kUnavailable);  // the lookup could not start
    if (r[0].status.ok() && r[0].reply != nullptr) {
      for (std::string_view member : remote::ArrayStrings(r[0])) {
        Result<TierNamespace> ns = remote::ParseNamespaceMember(member);
        if (ns.ok() && ns->model == model) out.push_back(*ns);
      }
    }
    std::lock_guard<std::mutex> lock(m.nmu);
    m.ns_cache[hex] = {out, Clock::now()};  // a failed read is reused too: no hammering
  }
  std::lock_guard<std::mutex> lock(m.nmu);
  for (const TierNamespace& ns : m.ns_local[hex]) {
    if (std::none_of(out.begin(), out.end(), [&](const TierNamespace& t) { return t.key == ns.key; })) {
      out.push_back(ns);
    }
  }
  return out;
}

std::vector<TierBlock> RemoteTier::FindChain(const TierNamespace& ns,
                                             std::span<const int32_t> tokens) {
  Impl& m = *impl_;
  const uint32_t B = ns.block_tokens;
  std::vector<TierBlock> chain;
  if (B == 0 || tokens.empty()) return chain;
  // Every full block's key, asked in one pipelined round trip.
  const size_t full = tokens.size() / B;
  std::vector<BlockKey> keys;  // [full]
  std::vector<RedisCommand> cmds;
  BlockKey parent = ns.key;
  for (size_t i = 0; i < full; ++i) {
    parent = ChainBlockKey(parent, tokens.subspan(i * B, B));
    keys.push_back(parent);
    cmds.push_back({{"EXISTS", remote::BlockRedisKey(ns.key, parent)}});
  }
  bool failed = false;
  size_t have = 0;
  if (!cmds.empty()) {
    std::vector<RedisResult> r = m.client->Run(cmds);
    for (; have < full && r[have].status.ok() && r[have].integer() == 1; ++have) {}
    failed = have < full && !r[have].status.ok();
  }
  for (size_t i = 0; i < have; ++i) {
    TierBlock b;
    b.key = keys[i];
    b.tokens.assign(tokens.begin() + static_cast<long>(i * B),
                    tokens.begin() + static_cast<long>((i + 1) * B));
    chain.push_back(std::move(b));
  }
  // The tail: the longest shorter block after the chain that starts the rest of the request.
  const size_t pos = have * B;
  if (!failed && pos < tokens.size()) {
    const std::span<const int32_t> rest = tokens.subspan(pos);
    const BlockKey p = have > 0 ? keys[have - 1] : ns.key;
    std::vector<RedisCommand> tail;
    std::vector<BlockKey> tail_keys;
    for (size_t len = std::min<size_t>(B - 1, rest.size()); len >= 1; --len) {
      tail_keys.push_back(ChainBlockKey(p, rest.first(len)));
      tail.push_back({{"EXISTS", remote::BlockRedisKey(ns.key, tail_keys.back())}});
    }
    std::vector<RedisResult> r = m.client->Run(tail);
    for (size_t i = 0; i < r.size(); ++i) {
      if (!r[i].status.ok()) {
        failed = true;
        break;
      }
      if (r[i].integer() == 1) {
        TierBlock b;
        b.key = tail_keys[i];
        const size_t len = std::min<size_t>(B - 1, rest.size()) - i;
        b.tokens.assign(rest.begin(), rest.begin() + static_cast<long>(len));
        b.ends = {static_cast<uint32_t>(len)};
        chain.push_back(std::move(b));
        break;
      }
    }
  }
  if (!chain.empty() && chain.back().ends.empty()) chain.back().ends = {B};
  {
    std::lock_guard<std::mutex> lock(m.smu);
    ++m.stats.lookups;
    m.stats.lookup_blocks += chain.size();
    if (failed) ++m.stats.misses_by[static_cast<int>(RemoteMiss::kUnavailable)];
  }
  if (!chain.empty()) {
    auto c = std::make_shared<Chain>();
    c->ns = ns.key;
    for (const TierBlock& b : chain) c->keys.push_back(b.key);
    std::lock_guard<std::mutex> lock(m.rmu);
    for (size_t i = 0; i < c->keys.size(); ++i) m.where[c->keys[i]] = {c, i};
    m.chains.push_back(c);
    if (m.chains.size() > kChains) {
      const std::shared_ptr<Chain> old = m.chains.front();
      m.chains.pop_front();
      for (const BlockKey& k : old->keys) {
        auto it = m.where.find(k);
        if (it != m.where.end() && it->second.first == old) m.where.erase(it);
      }
    }
  }
  return chain;
}

void RemoteTier::Impl::ExpireSlots() {
  const Clock::time_point now = Clock::now();
  for (auto it = slots.begin(); it != slots.end();) {
    if (!it->second.pending && now - it->second.at > kSlotLife) {
      buffered -= it->second.value.reply != nullptr ? it->second.value.str().size() : 0;
      it = slots.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<BlockKey> RemoteTier::Impl::TakeBatch(const BlockKey& from, bool include_from,
                                                  BlockKey* ns, size_t max_ahead) {
  std::vector<BlockKey> out;
  auto it = where.find(from);
  if (it == where.end()) {
    if (include_from) out.push_back(from);
  } else {
    const Chain& c = *it->second.first;
    *ns = c.ns;
    size_t i = it->second.second + (include_from ? 0 : 1);
    // Skip what is fetched or on its way; take the next batch_blocks from there.
    if (!include_from) {
      while (i < c.keys.size() && slots.contains(c.keys[i])) ++i;
      if (i - it->second.second > max_ahead) return out;
      const uint64_t room = opt.read_ahead_bytes > buffered ? opt.read_ahead_bytes - buffered : 0;
      if (room < block_value_bytes_guess * opt.batch_blocks) return out;
    }
    for (; i < c.keys.size() && out.size() < opt.batch_blocks; ++i) {
      if (slots.contains(c.keys[i])) {
        if (out.empty()) continue;
        break;
      }
      out.push_back(c.keys[i]);
    }
  }
  const Clock::time_point now = Clock::now();
  for (const BlockKey& k : out) slots[k].at = now;  // pending
  return out;
}

void RemoteTier::Impl::Fetch(const BlockKey& ns, const std::vector<BlockKey>& keys) {
  std::vector<RedisCommand> cmds;
  for (const BlockKey& k : keys) cmds.push_back({{"GET", remote::BlockRedisKey(ns, k)}});
  std::vector<RedisResult> r = client->Run(cmds);
  std::lock_guard<std::mutex> lock(rmu);
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < keys.size(); ++i) {
    Slot& s = slots[keys[i]];
    s.pending = false;
    s.at = now;
    buffered += r[i].reply != nullptr ? r[i].str().size() : 0;
    if (r[i].reply != nullptr && !r[i].str().empty()) block_value_bytes_guess = r[i].str().size();
    s.value = std::move(r[i]);
  }
  rcv.notify_all();
}

Status RemoteTier::Impl::Verify(const TierNamespace& ns, const BlockKey& key,
                                const RedisResult& r, BlockPool& pool, BlockId id) {
  const std::string name = "redis " + remote::BlockRedisKey(ns.key, key);
  if (!r.status.ok()) {
    Count(RemoteMiss::kUnavailable);
    return Status::Unavailable(r.status.message());
  }
  if (r.is_nil()) {
    Count(RemoteMiss::kVanished);
    {
      std::lock_guard<std::mutex> lock(wmu);
      known.erase(key);  // a later spill writes it again (known_order keeps a stale entry)
    }
    return Status::NotFound(name + ": gone (evicted, expired or flushed)");
  }
  const std::string_view v = r.str();
  if (r.is_error() || v.empty()) {
    Count(RemoteMiss::kUnavailable);
    return Status::Unavailable(name + ": " + std::string(v));
  }
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(v.data()), v.size());
  Result<BlockFileHeader> h = tier::DecodeBlockHeader(bytes, bytes.size(), name);
  Status s = h.status();
  if (s.ok() && !(h->key == key && h->namespace_key == ns.key)) {
    s = Status::Corruption(name + ": holds block " + h->key.ToHex() + " of namespace " +
                           h->namespace_key.ToHex());
  }
  if (s.ok() && !(h->shape == pool.shape() && h->k_format == pool.k_format() &&
                  h->v_format == pool.v_format() && h->block_tokens == pool.block_tokens())) {
    s = Status::Unimplemented(name + ": stored for other formats or shape than the pool's");
  }
  if (s.ok()) {
    s = tier::DecodeBlockRowsFilled(*h, bytes, pool, id, name);
  }
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(smu);
    ++stats.hits;
    stats.hit_bytes += v.size();
    return s;
  }
  if (s.code() == StatusCode::kUnimplemented) {
    Count(RemoteMiss::kOtherVersion);
    return s;
  }
  Count(RemoteMiss::kCorrupt);
  if (opt.log) std::fprintf(stderr, "remote tier: %s (removed)\n", s.message().c_str());
  client->Run({{{"DEL", remote::BlockRedisKey(ns.key, key)}}});
  return Status::Corruption(s.message());
}

void RemoteTier::Impl::ScheduleAhead(const BlockKey& key, size_t window) {
  BlockKey ns;
  std::vector<BlockKey> batch = TakeBatch(key, false, &ns, window);
  if (batch.empty()) return;
  ahead_queue.emplace_back(ns, std::move(batch));
  pcv.notify_one();
}

void RemoteTier::Impl::ReaderLoop() {
  std::unique_lock<std::mutex> lock(rmu);
  for (;;) {
    pcv.wait(lock, [&] { return reader_stop || !ahead_queue.empty(); });
    if (reader_stop) return;
    auto [ns, keys] = std::move(ahead_queue.front());
    ahead_queue.pop_front();
    lock.unlock();
    Fetch(ns, keys);
    {
      std::lock_guard<std::mutex> sl(smu);
      stats.read_ahead_blocks += keys.size();
    }
    lock.lock();
  }
}

Status RemoteTier::Load(const TierNamespace& ns, const BlockKey& key, BlockPool& pool,
                        BlockId id) {
  Impl& m = *impl_;
  const Clock::time_point t0 = Clock::now();
  RedisResult value;
  {
    std::unique_lock<std::mutex> lock(m.rmu);
    m.ExpireSlots();
    if (auto old = m.slots.find(key); old != m.slots.end() && old->second.taken) {
      m.slots.erase(old);  // read before: fetch it again
    }
    if (!m.slots.contains(key)) {
      BlockKey batch_ns = ns.key;
      std::vector<BlockKey> batch = m.TakeBatch(key, true, &batch_ns);
      lock.unlock();
      m.Fetch(batch_ns, batch);
      lock.lock();
    }
    // While ours is on its way, fetch the chain's next batch (read-ahead) rather than idle.
    while (m.slots.contains(key) && m.slots[key].pending) {
      BlockKey ahead_ns = ns.key;
      std::vector<BlockKey> ahead = m.TakeBatch(key, false, &ahead_ns);
      if (!ahead.empty()) {
        lock.unlock();
        m.Fetch(ahead_ns, ahead);
        lock.lock();
        std::lock_guard<std::mutex> sl(m.smu);
        m.stats.read_ahead_blocks += ahead.size();
        continue;
      }
      m.rcv.wait_for(lock, std::chrono::milliseconds(m.opt.deadline_ms) * 8);
    }
    auto it = m.slots.find(key);
    if (it != m.slots.end() && !it->second.pending) {
      // Keep the network busy while this thread verifies: the next batch within two
      // batches ahead goes to a read-ahead worker.
      m.ScheduleAhead(key, 2 * size_t{m.opt.batch_blocks});
      value = std::move(it->second.value);
      m.buffered -= value.reply != nullptr ? value.str().size() : 0;
      it->second.value = RedisResult();
      it->second.taken = true;
    } else {
      value.status = Status::Unavailable("remote tier: no reply for the block");
    }
  }
  Status s = m.Verify(ns, key, value, pool, id);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(m.wmu);
    m.Remember(key);  // in Redis already: a later spill of it is not sent again
  }
  std::lock_guard<std::mutex> lock(m.smu);
  m.stats.load_ms_total +=
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return s;
}

namespace {

// Every key of `node` matching `pattern`, in SCAN batches (never KEYS, which blocks Redis).
Status ScanNode(RedisClient& c, const std::string& node, const std::string& pattern,
                std::vector<std::string>* keys) {
  std::string cursor = "0";
  do {
    RedisResult r = c.RunOn(node, {{"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}});
    if (!r.status.ok()) return r.status;
    if (r.is_error()) return Status::IOError("redis " + node + ": " + std::string(r.str()));
    cursor = remote::ScanReply(r, keys);
    if (cursor.empty()) return Status::IOError("redis " + node + ": malformed SCAN reply");
  } while (cursor != "0");
  return Status::OK();
}

// `kvtier cache verify --remote`: every snapshot value read back (one GET each: a snapshot
// is megabytes) and verified (tier::VerifyStateRecord); a bad one is deleted and counted, one
// of another format version is left alone, one gone meanwhile is skipped.
Status VerifyStates(RedisClient& c, const std::vector<std::string>& keys, RemoteScan* out) {
  for (const std::string& k : keys) {
    BlockKey key;
    const bool named = remote::ParseStateRedisKey(k, &key);
    std::vector<RedisResult> r = c.Run({{{"GET", k}}});
    if (!r[0].status.ok()) return r[0].status;
    if (r[0].is_nil()) continue;
    if (r[0].is_error()) return Status::IOError("redis GET " + k + ": " + std::string(r[0].str()));
    const std::string_view v = r[0].str();
    out->state_bytes += v.size();
    Status s = Status::Corruption("redis " + k + ": not a snapshot key name");
    if (named) {
      s = tier::VerifyStateRecord(
              std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size()),
              key, "redis " + k)
              .status();
    }
    if (s.ok()) {
      ++out->state_good;
    } else if (s.code() != StatusCode::kUnimplemented) {  // another version: left alone
      ++out->state_bad;
      c.Run({{{"DEL", k}}});
    }
  }
  return Status::OK();
}

}  // namespace

Result<RemoteScan> RemoteTier::Scan(bool verify) {
  Impl& m = *impl_;
  RemoteScan out;
  out.masters = m.client->Masters();
  std::vector<std::string> keys;
  for (const std::string& node : out.masters) {
    KVTIER_RETURN_IF_ERROR(ScanNode(*m.client, node, "kvt:*", &keys));
  }
  const std::string prefix = remote::KeyPrefix();
  std::map<std::string, uint64_t> per_ns;  // namespace hex -> blocks
  std::vector<std::pair<BlockKey, BlockKey>> blocks;
  std::vector<std::string> sets, states;
  for (const std::string& k : keys) {
    BlockKey ns, b;
    if (remote::ParseBlockRedisKey(k, &ns, &b)) {
      ++out.blocks;
      ++per_ns[ns.ToHex()];
      blocks.emplace_back(ns, b);
    } else if (k.compare(0, prefix.size() + 3, prefix + "ns:") == 0) {
      sets.push_back(k);
    } else if (k.compare(0, prefix.size() + 3, prefix + "st:") == 0) {
      ++out.states;
      states.push_back(k);
    } else if (k.compare(0, prefix.size() + 6, prefix + "stpos:") == 0) {
      // a state positions set (counted with its snapshots)
    } else {
      ++out.other_keys;
    }
  }
  std::map<std::string, TierNamespace> known;  // namespace hex -> record
  for (const std::string& set : sets) {
    std::vector<RedisResult> r = m.client->Run({{{"SMEMBERS", set}}});
    for (std::string_view member : remote::ArrayStrings(r[0])) {
      Result<TierNamespace> ns = remote::ParseNamespaceMember(member);
      if (ns.ok()) known[ns->key.ToHex()] = *ns;
    }
  }
  for (const auto& [hex, ns] : known) out.namespaces.emplace_back(ns, per_ns[hex]);
  if (!verify) return out;
  KVTIER_RETURN_IF_ERROR(VerifyStates(*m.client, states, &out));
  // Read every value back into a one-block pool of its namespace and check it.
  std::map<std::string, std::shared_ptr<BlockPool>> pools;
  for (size_t at = 0; at < blocks.size(); at += m.opt.batch_blocks) {
    const size_t end = std::min(blocks.size(), at + m.opt.batch_blocks);
    std::vector<RedisCommand> cmds;
    for (size_t i = at; i < end; ++i) {
      cmds.push_back({{"GET", remote::BlockRedisKey(blocks[i].first, blocks[i].second)}});
    }
    std::vector<RedisResult> r = m.client->Run(cmds);
    for (size_t i = at; i < end; ++i) {
      const RedisResult& v = r[i - at];
      if (!v.status.ok()) return v.status;
      if (v.is_nil()) continue;  // gone meanwhile
      out.bytes += v.str().size();
      auto ns_it = known.find(blocks[i].first.ToHex());
      Status s = Status::Corruption("no namespace record");
      if (ns_it != known.end()) {
        std::shared_ptr<BlockPool>& pool = pools[ns_it->first];
        const TierNamespace& ns = ns_it->second;
        if (pool == nullptr) {
          BlockPoolOptions po;
          po.shape = ns.shape;
          po.k_format = ns.k_format;
          po.v_format = ns.v_format;
          po.block_tokens = ns.block_tokens;
          Result<KvBlockLayout> layout =
              KvBlockLayout::Make(ns.shape, ns.k_format, ns.v_format, ns.block_tokens);
          KVTIER_RETURN_IF_ERROR(layout.status());
          po.capacity_bytes = layout->block_stride;
          KVTIER_ASSIGN_OR_RETURN(pool, BlockPool::Create(po));
        }
        std::vector<BlockId> one;
        KVTIER_RETURN_IF_ERROR(pool->Allocate(1, KvOwner::kTier, &one, "remote verify"));
        s = m.Verify(ns, blocks[i].second, v, *pool, one[0]);
        pool->Unref(one, KvOwner::kTier);
      }
      if (s.ok()) {
        ++out.good;
      } else {
        ++out.bad;
        m.client->Run({{{"DEL", remote::BlockRedisKey(blocks[i].first, blocks[i].second)}}});
      }
    }
  }
  return out;
}

Result<uint64_t> RemoteTier::Clear() {
  Impl& m = *impl_;
  std::vector<std::string> keys;
  for (const std::string& node : m.client->Masters()) {
    KVTIER_RETURN_IF_ERROR(ScanNode(*m.client, node, "kvt:*", &keys));
  }
  uint64_t n = 0;
  for (size_t at = 0; at < keys.size(); at += 256) {
    std::vector<RedisCommand> cmds;
    for (size_t i = at; i < std::min(keys.size(), at + 256); ++i) cmds.push_back({{"DEL", keys[i]}});
    for (const RedisResult& r : m.client->Run(cmds)) {
      if (!r.status.ok()) return r.status;
      n += static_cast<uint64_t>(r.integer());
    }
  }
  {
    std::lock_guard<std::mutex> lock(m.wmu);
    m.known.clear();
    m.known_order.clear();
  }
  m.states->Forget();
  std::lock_guard<std::mutex> lock(m.nmu);
  m.ns_cache.clear();
  m.ns_local.clear();
  return n;
}

RemoteTierStats RemoteTier::Stats() const {
  const Impl& m = *impl_;
  RemoteTierStats s;
  {
    std::lock_guard<std::mutex> lock(m.smu);
    s = m.stats;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->wmu);
    s.queued = m.queue.size();
  }
  const remote::RedisClientStats c = m.client->Stats();
  s.round_trips = c.round_trips;
  s.timeouts = c.timeouts;
  s.connect_failures = c.connect_failures;
  s.moved = c.moved;
  s.ask = c.ask;
  s.cluster = m.client->cluster();
  m.states->AddStats(&s);
  return s;
}

}  // namespace kvtier
