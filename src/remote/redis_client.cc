// RedisClient (remote/redis_client.h): hiredis connections per node, slot routing, MOVED/ASK,
// deadlines and backoff.
#include "remote/redis_client.h"

#include <hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

namespace kvtier::remote {

namespace {

constexpr int kSlots = 16384;

using Clock = std::chrono::steady_clock;

timeval Tv(uint32_t ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

// "host:port" -> host, port; false if malformed.
bool SplitAddr(const std::string& addr, std::string* host, int* port) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) return false;
  *host = addr.substr(0, colon);
  int p = 0;
  for (size_t i = colon + 1; i < addr.size(); ++i) {
    if (addr[i] < '0' || addr[i] > '9') return false;
    p = p * 10 + (addr[i] - '0');
    if (p > 65535) return false;
  }
  if (p == 0) return false;
  *port = p;
  return true;
}

// "MOVED 3999 127.0.0.1:6381" / "ASK ..." -> slot, address.
bool ParseRedirect(std::string_view err, std::string_view word, uint16_t* slot,
                   std::string* addr) {
  if (err.substr(0, word.size() + 1) != std::string(word) + " ") return false;
  err.remove_prefix(word.size() + 1);
  const size_t sp = err.find(' ');
  if (sp == std::string_view::npos) return false;
  int s = 0;
  for (char c : err.substr(0, sp)) {
    if (c < '0' || c > '9') return false;
    s = s * 10 + (c - '0');
    if (s >= kSlots) return false;
  }
  *slot = static_cast<uint16_t>(s);
  *addr = std::string(err.substr(sp + 1));
  return !addr->empty();
}

// hiredis writes with write(2): a connection Redis closed would raise SIGPIPE and kill the
// process. While alive, SIGPIPE is blocked in this thread; one raised meanwhile is consumed.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~NoSigpipe() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        sigtimedwait(&pipe_, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe&) = delete;
  NoSigpipe& operator=(const NoSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

uint64_t ReplyBytes(const redisReply* r) {
  if (r == nullptr) return 0;
  if (r->type == REDIS_REPLY_STRING) return r->len;
  uint64_t n = 0;
  if (r->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < r->elements; ++i) n += ReplyBytes(r->element[i]);
  }
  return n;
}

}  // namespace

uint16_t Crc16(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char c : data) {
    crc ^= static_cast<uint16_t>(c) << 8;
    for (int i = 0; i < 8; ++i) {
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

uint16_t HashSlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return static_cast<uint16_t>(Crc16(key) & (kSlots - 1));
}

void ReplyDeleter::operator()(redisReply* r) const {
  if (r != nullptr) freeReplyObject(r);
}

bool RedisResult::is_nil() const { return reply != nullptr && reply->type == REDIS_REPLY_NIL; }
bool RedisResult::is_error() const {
  return reply != nullptr && reply->type == REDIS_REPLY_ERROR;
}
std::string_view RedisResult::str() const {
  if (reply == nullptr || reply->str == nullptr) return {};
  if (reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_STATUS &&
      reply->type != REDIS_REPLY_ERROR) {
    return {};
  }
  return std::string_view(reply->str, reply->len);
}
long long RedisResult::integer() const {
  return reply != nullptr && reply->type == REDIS_REPLY_INTEGER ? reply->integer : 0;
}

struct RedisClient::Conn {
  redisContext* ctx = nullptr;
  ~Conn() {
    if (ctx != nullptr) redisFree(ctx);
  }
};

struct RedisClient::Node {
  std::string addr, host;
  int port = 0;
  std::mutex mu;
  std::vector<std::unique_ptr<Conn>> idle;
  uint32_t open = 0;                // connections out of `idle` plus in it
  Clock::time_point retry_at{};     // in backoff until then
  uint32_t backoff_ms = 0;
  std::string last_error;           // why it went into backoff
};

RedisClient::RedisClient(std::vector<std::string> seeds, RedisClientOptions options)
    : opt_(options), seeds_(std::move(seeds)), slot_node_(kSlots) {}

RedisClient::~RedisClient() = default;

Result<std::unique_ptr<RedisClient>> RedisClient::Create(const std::string& url,
                                                         RedisClientOptions options) {
  const std::string scheme = "redis://";
  if (url.compare(0, scheme.size(), scheme) != 0) {
    return Status::InvalidArgument("remote cache '" + url +
                                   "': expected redis://HOST:PORT[,HOST:PORT...]");
  }
  std::vector<std::string> seeds;
  std::string rest = url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  size_t at = 0;
  while (at <= rest.size()) {
    const size_t comma = std::min(rest.find(',', at), rest.size());
    std::string addr = rest.substr(at, comma - at);
    std::string host;
    int port = 0;
    if (!SplitAddr(addr, &host, &port)) {
      return Status::InvalidArgument("remote cache '" + url + "': '" + addr +
                                     "' is not HOST:PORT (port 1..65535)");
    }
    seeds.push_back(addr);
    at = comma + 1;
  }
  if (options.deadline_ms == 0 || options.max_conns_per_node == 0) {
    return Status::InvalidArgument("remote cache: deadline_ms and max_conns_per_node must be > 0");
  }
  return std::unique_ptr<RedisClient>(new RedisClient(std::move(seeds), options));
}

RedisClient::Node* RedisClient::GetNode(const std::string& addr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(addr);
  if (it != nodes_.end()) return it->second.get();
  auto n = std::make_unique<Node>();
  n->addr = addr;
  if (!SplitAddr(addr, &n->host, &n->port)) {
    n->host = addr;
    n->port = 0;
  }
  Node* p = n.get();
  nodes_.emplace(addr, std::move(n));
  return p;
}

std::unique_ptr<RedisClient::Conn> RedisClient::Acquire(Node* n, Status* why) {
  {
    std::lock_guard<std::mutex> lock(n->mu);
    if (!n->idle.empty()) {
      std::unique_ptr<Conn> c = std::move(n->idle.back());
      n->idle.pop_back();
      return c;
    }
    if (Clock::now() < n->retry_at) {
      *why = Status::Unavailable("redis " + n->addr + ": in backoff after a failure (" +
                                 n->last_error + ")");
      std::lock_guard<std::mutex> sl(stats_mu_);
      ++stats_.backoff_refusals;
      return nullptr;
    }
    if (n->open >= opt_.max_conns_per_node) {
      *why = Status::Unavailable("redis " + n->addr + ": all " +
                                 std::to_string(opt_.max_conns_per_node) + " connections busy");
      return nullptr;
    }
    ++n->open;
  }
  auto c = std::make_unique<Conn>();
  if (n->port > 0) c->ctx = redisConnectWithTimeout(n->host.c_str(), n->port, Tv(opt_.deadline_ms));
  const bool ok = c->ctx != nullptr && c->ctx->err == 0 &&
                  redisSetTimeout(c->ctx, Tv(opt_.deadline_ms)) == REDIS_OK;
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    ++(ok ? stats_.connects : stats_.connect_failures);
  }
  if (ok) {
    std::lock_guard<std::mutex> lock(n->mu);
    n->backoff_ms = 0;
    return c;
  }
  *why = Status::Unavailable("redis " + n->addr + ": cannot connect" +
                             (c->ctx != nullptr ? std::string(": ") + c->ctx->errstr : ""));
  {
    std::lock_guard<std::mutex> lock(n->mu);
    n->last_error = why->message();
  }
  Release(n, std::move(c), false);
  return nullptr;
}

void RedisClient::Release(Node* n, std::unique_ptr<Conn> c, bool healthy) {
  std::lock_guard<std::mutex> lock(n->mu);
  if (healthy) {
    n->idle.push_back(std::move(c));
    return;
  }
  --n->open;
  // A broken connection puts the node in backoff; idle ones may be just as stale, drop them.
  n->open -= static_cast<uint32_t>(n->idle.size());
  n->idle.clear();
  n->backoff_ms = n->backoff_ms == 0 ? opt_.backoff_min_ms
                                     : std::min(opt_.backoff_max_ms, n->backoff_ms * 2);
  n->retry_at = Clock::now() + std::chrono::milliseconds(n->backoff_ms);
  refresh_ = true;  // the topology may have changed
}

void RedisClient::RunBatch(const std::string& addr, const std::vector<RedisCommand>& cmds,
                           const std::vector<size_t>& idx, bool ask,
                           std::vector<RedisResult>& out) {
  Node* n = GetNode(addr);
  Status why;
  std::unique_ptr<Conn> c = Acquire(n, &why);
  if (c == nullptr) {
    for (size_t i : idx) out[i].status = why;
    return;
  }
  const NoSigpipe no_sigpipe;
  static const char* kAsking = "ASKING";
  static const size_t kAskingLen = 6;
  uint64_t sent = 0;
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (size_t i : idx) {
    if (ask) redisAppendCommandArgv(c->ctx, 1, &kAsking, &kAskingLen);
    argv.clear();
    lens.clear();
    for (const std::string& a : cmds[i].argv) {
      argv.push_back(a.data());
      lens.push_back(a.size());
      sent += a.size();
    }
    redisAppendCommandArgv(c->ctx, static_cast<int>(argv.size()), argv.data(), lens.data());
  }
  bool healthy = true;
  bool timed_out = false;
  uint64_t received = 0;
  const Clock::time_point start = Clock::now();
  for (size_t i : idx) {
    for (int k = ask ? 2 : 1; k > 0; --k) {
      void* r = nullptr;
      if (!healthy || redisGetReply(c->ctx, &r) != REDIS_OK || r == nullptr) {
        if (healthy) {
          timed_out = c->ctx->err == REDIS_ERR_IO &&
                      (std::strstr(c->ctx->errstr, "temporarily") != nullptr ||
                       std::strstr(c->ctx->errstr, "timed out") != nullptr);
          why = Status::Unavailable("redis " + addr + ": " +
                                    (timed_out ? "no reply within " +
                                                     std::to_string(opt_.deadline_ms) + " ms"
                                               : std::string(c->ctx->errstr)));
        }
        healthy = false;
        out[i].status = why;
        break;
      }
      ReplyPtr reply(static_cast<redisReply*>(r));
      if (k == 1) {
        received += ReplyBytes(reply.get());
        out[i].reply = std::move(reply);
      }
    }
    // The whole batch shares one deadline (a reply read resets the socket timeout).
    if (healthy && Clock::now() - start > std::chrono::milliseconds(opt_.deadline_ms) * 4) {
      healthy = false;
      timed_out = true;
      why = Status::Unavailable("redis " + addr + ": batch past its deadline");
    }
  }
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    ++stats_.round_trips;
    stats_.commands += idx.size();
    stats_.sent_bytes += sent;
    stats_.received_bytes += received;
    if (!healthy) ++(timed_out ? stats_.timeouts : stats_.io_errors);
  }
  if (!healthy) {
    std::lock_guard<std::mutex> lock(n->mu);
    n->last_error = why.message();
  }
  Release(n, std::move(c), healthy);
}

bool RedisClient::RefreshSlots() {
  std::vector<std::string> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& s : slot_node_) {
      if (!s.empty() && std::find(candidates.begin(), candidates.end(), s) == candidates.end()) {
        candidates.push_back(s);
      }
    }
  }
  for (const std::string& s : seeds_) {
    if (std::find(candidates.begin(), candidates.end(), s) == candidates.end()) {
      candidates.push_back(s);
    }
  }
  for (const std::string& addr : candidates) {
    RedisCommand cmd{{"CLUSTER", "SLOTS"}};
    std::vector<RedisResult> out(1);
    RunBatch(addr, {cmd}, {0}, false, out);
    if (!out[0].status.ok()) continue;
    {
      std::lock_guard<std::mutex> sl(stats_mu_);
      ++stats_.slot_refreshes;
    }
    const redisReply* r = out[0].reply.get();
    if (r->type == REDIS_REPLY_ERROR) {
      // Not a cluster (ERR This instance has cluster support disabled): a single Redis.
      std::lock_guard<std::mutex> lock(mu_);
      cluster_ = false;
      probed_ = true;
      std::fill(slot_node_.begin(), slot_node_.end(), seeds_.front());
      return true;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) continue;
    std::vector<std::string> map(kSlots);
    for (size_t i = 0; i < r->elements; ++i) {
      const redisReply* e = r->element[i];
      if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) continue;
      const redisReply* m = e->element[2];
      if (e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER ||
          m->type != REDIS_REPLY_ARRAY || m->elements < 2 || m->element[0]->type != REDIS_REPLY_STRING) {
        continue;
      }
      std::string host(m->element[0]->str, m->element[0]->len);
      if (host.empty()) host = addr.substr(0, addr.rfind(':'));
      const std::string node = host + ":" + std::to_string(m->element[1]->integer);
      const long long lo = std::max<long long>(0, e->element[0]->integer);
      const long long hi = std::min<long long>(kSlots - 1, e->element[1]->integer);
      for (long long s = lo; s <= hi; ++s) map[static_cast<size_t>(s)] = node;
    }
    std::lock_guard<std::mutex> lock(mu_);
    cluster_ = true;
    probed_ = true;
    slot_node_ = std::move(map);
    return true;
  }
  return false;
}

std::string RedisClient::NodeForSlot(uint16_t slot) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!slot_node_[slot].empty()) return slot_node_[slot];
  return seeds_[slot % seeds_.size()];
}

std::vector<RedisResult> RedisClient::Run(const std::vector<RedisCommand>& cmds) {
  std::vector<RedisResult> out(cmds.size());
  if (cmds.empty()) return out;
  if (refresh_.exchange(false)) {
    const Clock::time_point now = Clock::now();
    bool due;
    {
      std::lock_guard<std::mutex> lock(mu_);
      due = !probed_ || now - last_refresh_ > std::chrono::milliseconds(opt_.backoff_min_ms);
      if (due) last_refresh_ = now;
    }
    if (due && !RefreshSlots()) refresh_ = true;  // nobody answered: try again next time
  }
  // Group by node, then one pipeline per node (nodes in turn).
  std::map<std::string, std::vector<size_t>> by_node;
  for (size_t i = 0; i < cmds.size(); ++i) {
    const uint16_t slot = cmds[i].argv.size() > 1 ? HashSlot(cmds[i].argv[1]) : 0;
    by_node[NodeForSlot(slot)].push_back(i);
  }
  if (by_node.size() == 1) {
    RunBatch(by_node.begin()->first, cmds, by_node.begin()->second, false, out);
  } else {
    std::vector<std::thread> threads;
    for (const auto& [addr, idx] : by_node) {
      threads.emplace_back([&, a = addr, ix = idx] { RunBatch(a, cmds, ix, false, out); });
    }
    for (std::thread& t : threads) t.join();
  }
  // Redirects: MOVED updates the slot and retries; ASK asks once.
  for (uint32_t hop = 0; hop < opt_.max_redirects; ++hop) {
    std::map<std::pair<std::string, bool>, std::vector<size_t>> again;
    for (size_t i = 0; i < cmds.size(); ++i) {
      if (!out[i].is_error()) continue;
      uint16_t slot = 0;
      std::string addr;
      const std::string_view err = out[i].str();
      if (ParseRedirect(err, "MOVED", &slot, &addr)) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          slot_node_[slot] = addr;
          cluster_ = true;
        }
        refresh_ = true;
        {
          std::lock_guard<std::mutex> sl(stats_mu_);
          ++stats_.moved;
        }
        again[{addr, false}].push_back(i);
      } else if (ParseRedirect(err, "ASK", &slot, &addr)) {
        {
          std::lock_guard<std::mutex> sl(stats_mu_);
          ++stats_.ask;
        }
        again[{addr, true}].push_back(i);
      }
    }
    if (again.empty()) break;
    for (const auto& [where, idx] : again) {
      for (size_t i : idx) out[i] = RedisResult();
      RunBatch(where.first, cmds, idx, where.second, out);
    }
  }
  return out;
}

std::vector<std::string> RedisClient::Masters() {
  if (refresh_.load()) {
    bool probed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      probed = probed_;
    }
    if (!probed && RefreshSlots()) refresh_ = false;
  }
  std::vector<std::string> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& s : slot_node_) {
    if (!s.empty() && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  if (out.empty()) out = seeds_;
  if (!cluster_ && !out.empty()) out.resize(1);
  return out;
}

RedisResult RedisClient::RunOn(const std::string& node, const RedisCommand& cmd) {
  std::vector<RedisResult> out(1);
  RunBatch(node, {cmd}, {0}, false, out);
  return std::move(out[0]);
}

std::vector<RedisResult> RedisClient::RunOnEveryMaster(const RedisCommand& cmd,
                                                       std::vector<std::string>* nodes) {
  const std::vector<std::string> masters = Masters();
  if (nodes != nullptr) *nodes = masters;
  std::vector<RedisResult> out;
  for (const std::string& m : masters) out.push_back(RunOn(m, cmd));
  return out;
}

bool RedisClient::cluster() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cluster_;
}

RedisClientStats RedisClient::Stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

}  // namespace kvtier::remote
