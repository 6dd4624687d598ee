// remote::StateBlobs (remote/remote_state.h): snapshots in Redis, written by their own thread,
// found by position and verified like the SSD tier's state files.
#include "remote/remote_state.h"

#include <algorithm>
#include <cstdio>

#include "remote/remote_keys.h"
#include "tier/state_store.h"

namespace kvtier::remote {

namespace {

constexpr size_t kBatch = 8;          // snapshots per pipelined write, at most ...
constexpr uint64_t kBatchBytes = 4 << 20;  // ... while under this many bytes
constexpr size_t kCandidates = 64;    // longest positions asked for per Find
constexpr size_t kKnown = 1 << 14;    // keys remembered as written or read

bool ParsePosition(std::string_view s, uint32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v == 0 || v > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

std::string StateRedisKey(const BlockKey& key) { return KeyPrefix() + "st:" + key.ToHex(); }

std::string StatePositionsKey(const ModelFingerprint& model) {
  return KeyPrefix() + "stpos:" + model.ToHex();
}

StateBlobs::StateBlobs(RedisClient* client, const RemoteTierOptions& options)
    : client_(client), opt_(options) {
  writer_ = std::thread([this] { WriterLoop(); });
}

StateBlobs::~StateBlobs() {
  {
    std::lock_guard<std::mutex> lock(wmu_);
    stop_ = true;
  }
  wcv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void StateBlobs::Spill(const ModelFingerprint& model, const BlockKey& key,
                       std::shared_ptr<const StateSnapshot> snapshot) {
  if (snapshot == nullptr) return;
  std::lock_guard<std::mutex> lock(wmu_);
  if (known_.contains(key) ||
      std::any_of(queue_.begin(), queue_.end(), [&](const Job& j) { return j.key == key; })) {
    std::lock_guard<std::mutex> sl(smu_);
    ++stats_.state_already_written;
    return;
  }
  if (queue_.size() >= opt_.queue_states) {
    std::lock_guard<std::mutex> sl(smu_);
    ++stats_.state_dropped_queue_full;
    return;
  }
  queue_.push_back({model, key, std::move(snapshot)});
  wcv_.notify_one();
}

void StateBlobs::WriterLoop() {
  std::unique_lock<std::mutex> lock(wmu_);
  for (;;) {
    wcv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, all sent
    std::vector<Job> jobs;
    uint64_t bytes = 0;  // a round trip has a deadline: large snapshots go one at a time
    while (!queue_.empty() && jobs.size() < kBatch && (jobs.empty() || bytes < kBatchBytes)) {
      bytes += queue_.front().s->bytes();
      jobs.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    writing_ += jobs.size();
    lock.unlock();
    Write(jobs);
    lock.lock();
    writing_ -= jobs.size();
    wdone_.notify_all();
  }
}

void StateBlobs::Write(std::vector<Job>& jobs) {
  std::vector<RedisCommand> cmds;
  for (const Job& j : jobs) {
    const std::vector<uint8_t> rec = tier::EncodeStateRecord(j.key, j.model, *j.s);
    RedisCommand c;
    c.argv = {"SET", StateRedisKey(j.key), std::string(rec.begin(), rec.end())};
    if (opt_.ttl_s > 0) {
      c.argv.push_back("EX");
      c.argv.push_back(std::to_string(opt_.ttl_s));
    }
    cmds.push_back(std::move(c));
  }
  for (const Job& j : jobs) {
    cmds.push_back({{"SADD", StatePositionsKey(j.model), std::to_string(j.s->position)}});
  }
  const std::vector<RedisResult> out = client_->Run(cmds);
  uint64_t ok = 0, bytes = 0, bad = 0;
  std::vector<BlockKey> done;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (out[i].status.ok() && !out[i].is_error()) {
      ++ok;
      bytes += cmds[i].argv[2].size();
      done.push_back(jobs[i].key);
      std::lock_guard<std::mutex> lock(pmu_);
      local_positions_[jobs[i].model.ToHex()].insert(jobs[i].s->position);
    } else {
      ++bad;
    }
  }
  {
    std::lock_guard<std::mutex> lock(wmu_);
    if (known_.size() + done.size() > kKnown) known_.clear();
    known_.insert(done.begin(), done.end());
  }
  std::lock_guard<std::mutex> lock(smu_);
  stats_.state_written += ok;
  stats_.state_written_bytes += bytes;
  stats_.state_write_errors += bad;
}

void StateBlobs::Flush() {
  std::unique_lock<std::mutex> lock(wmu_);
  wdone_.wait(lock, [&] { return queue_.empty() && writing_ == 0; });
}

void StateBlobs::Forget() {
  {
    std::lock_guard<std::mutex> lock(wmu_);
    known_.clear();
  }
  std::lock_guard<std::mutex> lock(pmu_);
  positions_.clear();
  local_positions_.clear();
}

void StateBlobs::Miss(RemoteMiss m) {
  {
    std::lock_guard<std::mutex> lock(smu_);
    ++stats_.state_misses_by[static_cast<int>(m)];
  }
  if (m == RemoteMiss::kUnavailable) {  // Redis may come back empty: write again
    std::lock_guard<std::mutex> lock(wmu_);
    known_.clear();
  }
}

std::vector<uint32_t> StateBlobs::Positions(const ModelFingerprint& model) {
  const std::string hex = model.ToHex();
  std::set<uint32_t> out;
  bool fresh = false;
  {
    std::lock_guard<std::mutex> lock(pmu_);
    auto it = positions_.find(hex);
    if (it != positions_.end() &&
        Clock::now() - it->second.second < std::chrono::milliseconds(opt_.namespace_refresh_ms)) {
      out = it->second.first;
      fresh = true;
    }
  }
  if (!fresh) {
    std::vector<RedisResult> r = client_->Run({{{"SMEMBERS", StatePositionsKey(model)}}});
    if (!r[0].status.ok()) Miss(RemoteMiss::kUnavailable);
    for (std::string_view m : ArrayStrings(r[0])) {
      uint32_t p = 0;
      if (ParsePosition(m, &p)) out.insert(p);
    }
    std::lock_guard<std::mutex> lock(pmu_);
    positions_[hex] = {out, Clock::now()};  // a failed read is reused too: no hammering
  }
  std::lock_guard<std::mutex> lock(pmu_);
  const std::set<uint32_t>& local = local_positions_[hex];
  out.insert(local.begin(), local.end());
  return {out.begin(), out.end()};
}

std::shared_ptr<const StateSnapshot> StateBlobs::Find(const ModelFingerprint& model,
                                                      std::span<const int32_t> tokens,
                                                      uint32_t min_position,
                                                      uint32_t max_position) {
  max_position = std::min<uint32_t>(max_position, static_cast<uint32_t>(tokens.size()));
  std::vector<uint32_t> pos = Positions(model);
  pos.erase(std::upper_bound(pos.begin(), pos.end(), max_position), pos.end());
  pos.erase(pos.begin(), std::upper_bound(pos.begin(), pos.end(), min_position));
  if (pos.size() > kCandidates) pos.erase(pos.begin(), pos.end() - kCandidates);
  if (pos.empty()) return nullptr;
  {
    std::lock_guard<std::mutex> lock(smu_);
    ++stats_.state_lookups;
  }
  const std::vector<BlockKey> keys = StateSnapshotKeys(model, tokens, pos);
  std::vector<RedisCommand> exists;
  for (const BlockKey& k : keys) exists.push_back({{"EXISTS", StateRedisKey(k)}});
  const std::vector<RedisResult> present = client_->Run(exists);
  if (!present.empty() && !present.back().status.ok()) {
    Miss(RemoteMiss::kUnavailable);
    return nullptr;
  }
  for (size_t i = pos.size(); i-- > 0;) {
    if (!present[i].status.ok() || present[i].integer() != 1) continue;
    const std::string name = "redis " + StateRedisKey(keys[i]);
    std::vector<RedisResult> r = client_->Run({{{"GET", StateRedisKey(keys[i])}}});
    if (!r[0].status.ok() || r[0].is_error()) {
      Miss(RemoteMiss::kUnavailable);
      return nullptr;
    }
    if (r[0].is_nil()) {
      Miss(RemoteMiss::kVanished);
      continue;
    }
    const std::string_view v = r[0].str();
    Result<StateSnapshot> d = tier::DecodeStateRecord(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size()), keys[i],
        model, pos[i], name);
    if (!d.ok()) {
      if (d.status().code() == StatusCode::kUnimplemented) {
        Miss(RemoteMiss::kOtherVersion);
        continue;
      }
      Miss(RemoteMiss::kCorrupt);
      if (opt_.log) std::fprintf(stderr, "remote tier: %s (removed)\n", d.status().message().c_str());
      client_->Run({{{"DEL", StateRedisKey(keys[i])}}});
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(smu_);
      ++stats_.state_hits;
      stats_.state_hit_bytes += v.size();
    }
    {
      std::lock_guard<std::mutex> lock(wmu_);
      if (known_.size() >= kKnown) known_.clear();
      known_.insert(keys[i]);  // in Redis already: a later spill is not sent again
    }
    return std::make_shared<const StateSnapshot>(std::move(*d));
  }
  return nullptr;
}

void StateBlobs::AddStats(RemoteTierStats* s) const {
  RemoteTierStats m;
  {
    std::lock_guard<std::mutex> lock(smu_);
    m = stats_;
  }
  s->state_lookups = m.state_lookups;
  s->state_hits = m.state_hits;
  s->state_hit_bytes = m.state_hit_bytes;
  s->state_misses_by = m.state_misses_by;
  s->state_written = m.state_written;
  s->state_written_bytes = m.state_written_bytes;
  s->state_write_errors = m.state_write_errors;
  s->state_dropped_queue_full = m.state_dropped_queue_full;
  s->state_already_written = m.state_already_written;
  std::lock_guard<std::mutex> lock(wmu_);
  s->state_queued = queue_.size();
}

}  // namespace kvtier::remote
