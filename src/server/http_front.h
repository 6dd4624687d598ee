// The server's HTTP/1.1 front: one event-loop thread (epoll) owns every socket, so slow or
// idle clients cost a descriptor and a buffer, never a thread. It bounds what a client can
// hold: a whole request head must arrive within header_timeout_ms of its first byte (or of
// the accept), a body at body_min_bytes_per_s after that grace, a keep-alive wait
// idle_timeout_ms; connections are bounded in total and per client address, the excess
// answered 503 at once; a declared Content-Length over the limit is answered 413 before any
// body byte is read. Routes marked inline (health, metrics) run on the loop thread and so are
// served whatever the workers do; every other request runs on its own worker thread with an
// Exchange to answer through (plain or chunked), which tells it when the client went away.
//
// Thread safety: Run() is the loop (one thread); Stop() and every Exchange method are
// thread-safe. Handlers run on the loop thread (inline) or on a worker thread each.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/status.h"
#include "server/http_parse.h"

namespace kvtier::server {

struct HttpFrontOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port
  HttpLimits limits;
  uint32_t max_connections = 4096;            // open at once; more get 503 and are closed
  uint32_t max_connections_per_client = 256;  // per remote address
  uint32_t header_timeout_ms = 10000;         // a whole request head (408 after it)
  uint32_t idle_timeout_ms = 5000;            // keep-alive wait for the next request
  uint32_t body_min_bytes_per_s = 4096;       // after header_timeout_ms of grace (408)
  uint32_t write_timeout_ms = 30000;          // a client that reads nothing is dropped
  // Admission by memory: a request reserves body_memory_factor x its Content-Length (the
  // body, its parsed JSON and prompt copies) from this budget while it is read and served;
  // one that does not fit gets 503 at once, before its body is read (one request is always
  // admitted when none holds any). Chunked bodies reserve limits.max_body.
  uint64_t body_budget_bytes = 96ull << 20;
  uint32_t body_memory_factor = 3;
  // The body of an error the front answers by itself (JSON, from the server).
  std::function<std::string(int status, const std::string& message)> error_body;
};

struct Conn;

// One request and its answer. Owned jointly by the worker and the loop.
class Exchange {
 public:
  Exchange(std::shared_ptr<Conn> conn, HttpHead head, std::string body, std::string peer);
  ~Exchange();
  const HttpHead& head() const { return head_; }
  const std::string& body() const { return body_; }
  std::string& mutable_body() { return body_; }
  const std::string& peer() const { return peer_; }

  // A whole answer (Content-Length). Extra headers as "Name: value" pairs.
  void Reply(int status, const std::string& content_type, const std::string& body,
             const std::vector<std::pair<std::string, std::string>>& headers = {});
  // A chunked answer: the head now, Write() per piece, End() once.
  void StartStream(int status, const std::string& content_type,
                   const std::vector<std::pair<std::string, std::string>>& headers = {});
  // False when the client is gone (or has not read for write_timeout_ms): stop writing.
  bool Write(const std::string& data);
  void End();
  // The client closed its side, reset, or the front is stopping.
  bool Gone() const;

 private:
  void Push(std::string bytes, bool done);
  std::shared_ptr<Conn> conn_;
  HttpHead head_;
  std::string body_;
  std::string peer_;
  uint64_t reserved_ = 0;                          // of the front's body budget
  std::shared_ptr<std::atomic<uint64_t>> budget_;  // returned to on destruction
  friend class HttpFront;
  bool answered_ = false;
  bool streaming_ = false;
};

class HttpFront {
 public:
  using Handler = std::function<void(std::shared_ptr<Exchange>)>;
  // Which handler serves a head, and whether inline (on the loop thread: must be quick).
  struct Route {
    Handler handler;
    bool inline_ = false;
  };
  using Router = std::function<Route(const HttpHead&)>;

  HttpFront(HttpFrontOptions options, Router router);
  ~HttpFront();
  // Binds and listens (IOError naming host:port).
  Status Bind();
  uint16_t port() const { return port_; }
  // The loop; returns after Stop().
  Status Run();
  // Makes Run return: closes the listener and every connection (workers see Gone()), then
  // waits up to `wait_ms` for worker threads to finish.
  void Stop(uint32_t wait_ms = 5000);
  // Open connections now (for tests and metrics).
  uint32_t connections() const { return n_conns_.load(); }
  // Worker threads running now.
  uint32_t workers() const { return n_workers_.load(); }

  // Loop internals (http_front.cc).
  struct Loop;

 private:
  const HttpFrontOptions opt_;
  const Router router_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::unique_ptr<Loop> loop_;
  std::atomic<uint32_t> n_conns_{0};
  std::atomic<uint32_t> n_workers_{0};
  std::shared_ptr<std::atomic<uint64_t>> reserved_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::mutex workers_mu_;
  std::condition_variable workers_cv_;
};

// "OK", "Not Found", ... for a status code.
const char* StatusText(int status);

}  // namespace kvtier::server
