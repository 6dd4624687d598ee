// The event-driven HTTP front (server/http_front.h). The loop thread owns the sockets, the
// input buffers and the parse state; a connection's output buffer and flags are shared with
// its Exchange under Conn::mu, and an Exchange wakes the loop through an eventfd.
#include "server/http_front.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <unordered_map>

namespace kvtier::server {

using Clock = std::chrono::steady_clock;

namespace {
constexpr size_t kOutHigh = 1 << 20;  // a stream's writer waits above this many unsent bytes
constexpr size_t kReadChunk = 64 << 10;
constexpr uint64_t kSmallBody = 64 << 10;  // bodies up to this size skip the memory budget

std::string Ms(uint32_t ms) { return std::to_string(ms) + " ms"; }
}  // namespace

const char* StatusText(int s) {
  switch (s) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return s < 300 ? "OK" : s < 500 ? "Bad Request" : "Internal Server Error";
  }
}

// Wakes the loop for connections with new output. Outlives the loop (Exchanges hold it).
struct Waker {
  int efd = -1;
  std::mutex mu;
  std::vector<std::shared_ptr<Conn>> dirty;
  bool dead = false;
  void Notify(std::shared_ptr<Conn> c) {
    std::lock_guard<std::mutex> lock(mu);
    if (dead) return;
    dirty.push_back(std::move(c));
    const uint64_t one = 1;
    (void)!::write(efd, &one, sizeof one);
  }
};

struct Conn {
  enum class St : uint8_t { kHead, kBody, kBusy, kClosing };
  // Loop thread only.
  int fd = -1;
  std::string peer;
  St st = St::kHead;
  std::string in;
  HttpHead head;
  bool fresh = true;            // no request yet on this connection
  Clock::time_point since;      // accept, or the end of the previous answer
  Clock::time_point head_start; // first byte of this head (or `since` for a fresh one)
  Clock::time_point body_start;
  Clock::time_point closing_until;
  uint32_t events = 0;
  uint64_t reserved = 0;        // body budget held while the body is read
  std::shared_ptr<Waker> waker;
  uint32_t write_timeout_ms = 30000;
  // Shared with the Exchange, under mu.
  std::mutex mu;
  std::condition_variable cv;
  std::string out;
  bool done = false;         // the answer is complete (out may still hold some of it)
  bool close_after = false;  // close once out is sent
  bool gone = false;         // the client left (or the front stops)
};

// ---- Exchange ----

Exchange::Exchange(std::shared_ptr<Conn> conn, HttpHead head, std::string body, std::string peer)
    : conn_(std::move(conn)), head_(std::move(head)), body_(std::move(body)), peer_(std::move(peer)) {}

Exchange::~Exchange() {
  if (!answered_) Reply(500, "text/plain", "no answer\n");
  else if (streaming_) End();
  if (budget_ != nullptr) *budget_ -= reserved_;
}

void Exchange::Push(std::string bytes, bool done) {
  {
    std::lock_guard<std::mutex> lock(conn_->mu);
    if (conn_->gone) return;
    conn_->out += bytes;
    if (done) conn_->done = true;
  }
  conn_->waker->Notify(conn_);
}

static std::string HeadBytes(int status, const std::string& type, bool keep_alive,
                             const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + StatusText(status) + "\r\n";
  if (!type.empty()) h += "Content-Type: " + type + "\r\n";
  for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
  h += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  return h;
}

void Exchange::Reply(int status, const std::string& type, const std::string& body,
                     const std::vector<std::pair<std::string, std::string>>& headers) {
  if (answered_) return;
  answered_ = true;
  bool keep = head_.keep_alive;
  for (const auto& [k, v] : headers) {
    if (k == "Connection" && v == "close") keep = false;
  }
  std::vector<std::pair<std::string, std::string>> hs;
  for (const auto& kv : headers) {
    if (kv.first != "Connection") hs.push_back(kv);
  }
  std::string bytes = HeadBytes(status, type, keep, hs);
  bytes += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  if (head_.method != "HEAD") bytes += body;
  if (!keep) {
    std::lock_guard<std::mutex> lock(conn_->mu);
    conn_->close_after = true;
  }
  Push(std::move(bytes), true);
}

void Exchange::StartStream(int status, const std::string& type,
                           const std::vector<std::pair<std::string, std::string>>& headers) {
  if (answered_) return;
  answered_ = streaming_ = true;
  std::string bytes = HeadBytes(status, type, head_.keep_alive, headers);
  bytes += "Transfer-Encoding: chunked\r\n\r\n";
  if (!head_.keep_alive) {
    std::lock_guard<std::mutex> lock(conn_->mu);
    conn_->close_after = true;
  }
  Push(std::move(bytes), false);
}

bool Exchange::Write(const std::string& data) {
  if (!streaming_ || data.empty()) return !Gone();
  {
    // Backpressure: a client that does not read stalls its own writer, up to the timeout.
    std::unique_lock<std::mutex> lock(conn_->mu);
    if (!conn_->cv.wait_for(lock, std::chrono::milliseconds(conn_->write_timeout_ms),
                            [&] { return conn_->gone || conn_->out.size() < kOutHigh; })) {
      conn_->gone = true;
    }
    if (conn_->gone) return false;
  }
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  Push(size + data + "\r\n", false);
  return !Gone();
}

void Exchange::End() {
  if (!streaming_) return;
  streaming_ = false;
  Push("0\r\n\r\n", true);
}

bool Exchange::Gone() const {
  std::lock_guard<std::mutex> lock(conn_->mu);
  return conn_->gone;
}

// ---- The loop ----

struct HttpFront::Loop {
  HttpFront& f;
  const HttpFrontOptions& opt;
  int ep = -1;
  std::shared_ptr<Waker> waker = std::make_shared<Waker>();
  std::unordered_map<int, std::shared_ptr<Conn>> conns;  // by fd
  std::unordered_map<std::string, uint32_t> per_peer;
  std::atomic<bool> stop{false};
  bool listening = true;

  explicit Loop(HttpFront& front) : f(front), opt(front.opt_) {}

  void Mask(Conn& c, uint32_t ev) {
    ev |= EPOLLRDHUP;
    if (ev == c.events) return;
    epoll_event e{};
    e.events = ev;
    e.data.fd = c.fd;
    (void)epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &e);
    c.events = ev;
  }

  void Close(const std::shared_ptr<Conn>& c) {
    if (c->fd < 0) return;
    {
      std::lock_guard<std::mutex> lock(c->mu);
      c->gone = true;
    }
    c->cv.notify_all();
    (void)epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
    ::close(c->fd);
    conns.erase(c->fd);
    c->fd = -1;
    if (c->reserved > 0) *f.reserved_ -= c->reserved, c->reserved = 0;
    auto it = per_peer.find(c->peer);
    if (it != per_peer.end() && --it->second == 0) per_peer.erase(it);
    f.n_conns_ = static_cast<uint32_t>(conns.size());
  }

  // Answers an error the front decides by itself and closes after it.
  void Fail(const std::shared_ptr<Conn>& c, int status, const std::string& message,
            const std::string& extra_headers = "") {
    const std::string body = opt.error_body ? opt.error_body(status, message) : message;
    std::string bytes = "HTTP/1.1 " + std::to_string(status) + " " + StatusText(status) +
                        "\r\nContent-Type: application/json\r\nConnection: close\r\n" +
                        extra_headers + "Content-Length: " + std::to_string(body.size()) +
                        "\r\n\r\n" + body;
    {
      std::lock_guard<std::mutex> lock(c->mu);
      c->out += bytes;
      c->done = true;
      c->close_after = true;
    }
    c->st = Conn::St::kClosing;
    c->closing_until = Clock::now() + std::chrono::milliseconds(2000);
    c->in.clear();
    Flush(c);
  }

  void Accept() {
    for (;;) {
      sockaddr_storage sa{};
      socklen_t len = sizeof sa;
      const int fd = ::accept4(f.listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) {  // out of descriptors: pause accepting
          (void)epoll_ctl(ep, EPOLL_CTL_DEL, f.listen_fd_, nullptr);
          listening = false;
        }
        return;
      }
      char host[INET6_ADDRSTRLEN] = "?";
      if (sa.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&sa)->sin_addr, host, sizeof host);
      } else if (sa.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&sa)->sin6_addr, host, sizeof host);
      }
      const int one = 1;
      (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_shared<Conn>();
      c->fd = fd;
      c->peer = host;
      c->since = c->head_start = Clock::now();
      c->waker = waker;
      c->write_timeout_ms = opt.write_timeout_ms;
      epoll_event e{};
      e.events = EPOLLIN | EPOLLRDHUP;
      e.data.fd = fd;
      c->events = e.events;
      (void)epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
      conns[fd] = c;
      const uint32_t mine = ++per_peer[c->peer];
      f.n_conns_ = static_cast<uint32_t>(conns.size());
      if (conns.size() > opt.max_connections) {
        Fail(c, 503, "the server is overloaded: " + std::to_string(opt.max_connections) +
                         " connections are open", "Retry-After: 1\r\n");
      } else if (mine > opt.max_connections_per_client) {
        Fail(c, 503, "too many connections from " + c->peer + ": at most " +
                         std::to_string(opt.max_connections_per_client) + " per client address",
             "Retry-After: 1\r\n");
      }
    }
  }

  // Sends what it can of c's output; finishes the answer when all is sent.
  void Flush(const std::shared_ptr<Conn>& c) {
    if (c->fd < 0) return;
    bool finished = false, close = false, want_out = false;
    {
      std::lock_guard<std::mutex> lock(c->mu);
      while (!c->out.empty()) {
        const ssize_t n = ::send(c->fd, c->out.data(), c->out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          c->out.erase(0, static_cast<size_t>(n));
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          want_out = true;
        } else if (n < 0 && errno == EINTR) {
          continue;
        } else {
          c->gone = true;
          close = true;
        }
        break;
      }
      if (c->out.size() < kOutHigh) c->cv.notify_all();
      if (c->out.capacity() > (4u << 20) && c->out.size() < (64u << 10)) c->out.shrink_to_fit();
      if (!close && c->out.empty() && c->done) {
        finished = true;
        close = c->close_after;
      }
    }
    if (close && c->st != Conn::St::kClosing) return Close(c);
    if (close) {
      // Said what it had to: stop sending, read (and drop) what the client still sends for a
      // moment so the answer is not lost to a reset.
      if (!finished) return Close(c);
      (void)::shutdown(c->fd, SHUT_WR);
      Mask(*c, EPOLLIN);
      return;
    }
    if (finished) {  // ready for the next request on this connection
      {
        std::lock_guard<std::mutex> lock(c->mu);
        c->done = false;
      }
      c->st = Conn::St::kHead;
      c->fresh = false;
      c->since = c->head_start = Clock::now();
      Mask(*c, EPOLLIN);
      if (!c->in.empty()) Advance(c);
      return;
    }
    Mask(*c, (want_out ? EPOLLOUT : 0u) | (c->st == Conn::St::kBusy ? 0u : EPOLLIN));
  }

  void Readable(const std::shared_ptr<Conn>& c) {
    char buf[kReadChunk];
    for (int i = 0; i < 16 && c->fd >= 0; ++i) {
      const ssize_t n = ::recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        if (c->st == Conn::St::kClosing) continue;  // dropped
        if (c->in.empty() && c->st == Conn::St::kHead && !c->fresh) c->head_start = Clock::now();
        c->in.append(buf, static_cast<size_t>(n));
        if (c->st == Conn::St::kBody) {
          // Stop reading past this body and a little of the next request.
          const uint64_t want = c->head.chunked ? opt.limits.max_body + 2 * kReadChunk
                                                : c->head.content_length + kReadChunk;
          if (c->in.size() > c->head.head_bytes + want) break;
        } else if (c->in.size() > opt.limits.max_head + kReadChunk && c->st == Conn::St::kHead) {
          break;
        }
        continue;
      }
      if (n == 0) return Close(c);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return Close(c);
      break;
    }
    if (c->fd >= 0 && c->st != Conn::St::kClosing) Advance(c);
  }

  // Moves a connection through head and body as far as its input allows.
  void Advance(const std::shared_ptr<Conn>& c) {
    if (c->st == Conn::St::kHead) {
      ParseError e;
      const ParseState s = ParseHead(c->in, opt.limits, &c->head, &e);
      if (s == ParseState::kNeedMore) return;
      if (s == ParseState::kError) return Fail(c, e.status, e.message);
      // Admission by memory, before any body byte is read.
      const uint64_t declared = c->head.chunked ? opt.limits.max_body : c->head.content_length;
      const uint64_t need = declared * opt.body_memory_factor;
      if (declared > kSmallBody) {
        const uint64_t held = f.reserved_->load();
        if (held > 0 && held + need > opt.body_budget_bytes) {
          return Fail(c, 503,
                      "the server is overloaded: request bodies in memory would exceed " +
                          std::to_string(opt.body_budget_bytes >> 20) + " MiB; retry later",
                      "Retry-After: 1\r\n");
        }
        *f.reserved_ += need;
        c->reserved = need;
      }
      c->st = Conn::St::kBody;
      c->body_start = Clock::now();
      if (!c->head.chunked) c->in.reserve(c->head.head_bytes + c->head.content_length);
      if (c->head.expect_continue && c->in.size() == c->head.head_bytes && declared > 0) {
        std::lock_guard<std::mutex> lock(c->mu);
        c->out += "HTTP/1.1 100 Continue\r\n\r\n";
      }
      if (c->head.expect_continue) Flush(c);
      if (c->fd < 0) return;
    }
    if (c->st != Conn::St::kBody) return;
    std::string body;
    size_t used = 0;
    const std::string_view rest = std::string_view(c->in).substr(c->head.head_bytes);
    if (c->head.chunked) {
      // Decoded once it may be whole (ends like a last chunk) or is past the limit anyway.
      if (rest.size() <= opt.limits.max_body + kReadChunk && !rest.ends_with("\r\n\r\n")) return;
      ParseError e;
      const ParseState s = DecodeChunked(rest, opt.limits.max_body, &body, &used, &e);
      if (s == ParseState::kNeedMore) return;
      if (s == ParseState::kError) return Fail(c, e.status, e.message);
    } else {
      if (rest.size() < c->head.content_length) return;
      used = c->head.content_length;
      if (rest.size() == used) {  // the usual case: no pipelined bytes, no copy of the body
        body = std::move(c->in);
        body.erase(0, c->head.head_bytes);
        c->in = std::string();
        used = 0;
      } else {
        body.assign(rest.substr(0, used));
      }
    }
    c->in.erase(0, std::min(c->in.size(), c->head.head_bytes + used));
    if (c->in.capacity() > (1u << 20)) c->in.shrink_to_fit();
    Dispatch(c, std::move(body));
  }

  void Dispatch(const std::shared_ptr<Conn>& c, std::string body) {
    c->st = Conn::St::kBusy;
    Mask(*c, 0);  // only EPOLLRDHUP: the client leaving
    Route r = f.router_(c->head);
    auto x = std::make_shared<Exchange>(c, c->head, std::move(body), c->peer);
    x->reserved_ = c->reserved;
    x->budget_ = f.reserved_;
    c->reserved = 0;
    if (r.inline_ || !r.handler) {
      if (r.handler) r.handler(x);
      return;  // the Exchange answers (or its destructor does) and wakes the loop
    }
    {
      std::lock_guard<std::mutex> lock(f.workers_mu_);
      ++f.n_workers_;
    }
    std::thread([this, x = std::move(x), h = std::move(r.handler)]() mutable {
      h(x);
      x.reset();
      std::lock_guard<std::mutex> lock(f.workers_mu_);
      --f.n_workers_;
      f.workers_cv_.notify_all();
    }).detach();
  }

  // Deadlines: heads, bodies, keep-alive waits and closing connections.
  void Sweep() {
    const auto now = Clock::now();
    std::vector<std::shared_ptr<Conn>> late, timed_out;
    for (auto& [fd, c] : conns) {
      switch (c->st) {
        case Conn::St::kHead: {
          const bool waiting = c->in.empty() && !c->fresh;
          const auto limit = waiting ? c->since + std::chrono::milliseconds(opt.idle_timeout_ms)
                                     : c->head_start + std::chrono::milliseconds(opt.header_timeout_ms);
          if (now > limit) (waiting || c->in.empty() ? timed_out : late).push_back(c);
          break;
        }
        case Conn::St::kBody: {
          const double secs = std::chrono::duration<double>(now - c->body_start).count() -
                              opt.header_timeout_ms / 1000.0;
          const double got = static_cast<double>(c->in.size() - c->head.head_bytes);
          if (secs > 0 && got < secs * opt.body_min_bytes_per_s) late.push_back(c);
          break;
        }
        case Conn::St::kClosing:
          if (now > c->closing_until) timed_out.push_back(c);
          break;
        case Conn::St::kBusy:
          break;
      }
    }
    for (auto& c : timed_out) Close(c);
    for (auto& c : late) {
      if (c->st == Conn::St::kBody) {
        Fail(c, 408, "request timeout: the body arrived slower than " +
                         std::to_string(opt.body_min_bytes_per_s) + " bytes/s");
      } else {
        Fail(c, 408, "request timeout: the request head did not arrive within " +
                         Ms(opt.header_timeout_ms));
      }
    }
    if (!listening) {
      epoll_event e{};
      e.events = EPOLLIN;
      e.data.fd = f.listen_fd_;
      listening = epoll_ctl(ep, EPOLL_CTL_ADD, f.listen_fd_, &e) == 0;
    }
  }

  Status Run() {
    ep = epoll_create1(EPOLL_CLOEXEC);
    waker->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ep < 0 || waker->efd < 0) return Status::IOError("server: epoll/eventfd failed");
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = f.listen_fd_;
    (void)epoll_ctl(ep, EPOLL_CTL_ADD, f.listen_fd_, &e);
    e.data.fd = waker->efd;
    (void)epoll_ctl(ep, EPOLL_CTL_ADD, waker->efd, &e);
    std::vector<epoll_event> evs(256);
    auto last_sweep = Clock::now();
    while (!stop) {
      const int n = epoll_wait(ep, evs.data(), static_cast<int>(evs.size()), 50);
      for (int i = 0; i < n; ++i) {
        const int fd = evs[i].data.fd;
        if (fd == f.listen_fd_) {
          Accept();
          continue;
        }
        if (fd == waker->efd) {
          uint64_t v;
          (void)!::read(waker->efd, &v, sizeof v);
          std::vector<std::shared_ptr<Conn>> dirty;
          {
            std::lock_guard<std::mutex> lock(waker->mu);
            dirty.swap(waker->dirty);
          }
          for (auto& c : dirty) Flush(c);
          continue;
        }
        auto it = conns.find(fd);
        if (it == conns.end()) continue;
        std::shared_ptr<Conn> c = it->second;
        const uint32_t ev = evs[i].events;
        if (ev & EPOLLOUT) Flush(c);
        if (c->fd < 0) continue;
        if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
          if (c->st == Conn::St::kBusy) {
            if (ev & (EPOLLERR | EPOLLHUP)) Close(c);
          } else {
            Readable(c);
          }
        }
        if (c->fd >= 0 && (ev & EPOLLRDHUP) && c->st == Conn::St::kBusy) {
          Close(c);  // the client left while its request runs: the handler sees Gone()
        }
      }
      if (Clock::now() - last_sweep > std::chrono::milliseconds(100)) {
        Sweep();
        last_sweep = Clock::now();
      }
    }
    {
      std::lock_guard<std::mutex> lock(waker->mu);
      waker->dead = true;
      waker->dirty.clear();
    }
    std::vector<std::shared_ptr<Conn>> all;
    for (auto& [fd, c] : conns) all.push_back(c);
    for (auto& c : all) {
      Flush(c);  // a last chance for answers already made
      Close(c);
    }
    ::close(ep);
    ::close(waker->efd);
    return Status::OK();
  }
};

HttpFront::HttpFront(HttpFrontOptions options, Router router)
    : opt_(std::move(options)), router_(std::move(router)), loop_(std::make_unique<Loop>(*this)) {}

HttpFront::~HttpFront() {
  {
    // Detached workers use this object to the end: wait for them (they see Gone() by now).
    std::unique_lock<std::mutex> lock(workers_mu_);
    workers_cv_.wait(lock, [&] { return n_workers_ == 0; });
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

Status HttpFront::Bind() {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string port = std::to_string(opt_.port);
  const std::string where = opt_.host + ":" + port;
  if (getaddrinfo(opt_.host.empty() ? nullptr : opt_.host.c_str(), port.c_str(), &hints, &res) != 0 ||
      res == nullptr) {
    return Status::IOError("server: cannot listen on " + where + " (not this host's address)");
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 4096) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return Status::IOError("server: cannot listen on " + where +
                           " (address in use, or not this host's)");
  }
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
  listen_fd_ = fd;
  return Status::OK();
}

Status HttpFront::Run() {
  if (listen_fd_ < 0) return Status::InvalidArgument("server: Run before Bind");
  return loop_->Run();
}

void HttpFront::Stop(uint32_t wait_ms) {
  loop_->stop = true;
  std::unique_lock<std::mutex> lock(workers_mu_);
  workers_cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return n_workers_ == 0; });
}

}  // namespace kvtier::server
