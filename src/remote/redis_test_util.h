// Test-only: redis-server processes on loopback ports in temporary directories (one Redis, or a
// three-master Redis Cluster made with redis-cli --cluster create), and a TCP proxy that adds
// latency. Tests skip with a clear message when redis-server is not installed.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "remote/redis_client.h"
#include "remote/remote_keys.h"

namespace kvtier::testing {

inline std::string FindProgram(const std::string& name) {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"}) {
    const std::string p = std::string(dir) + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

#define KVTIER_REQUIRE_REDIS()                                                              \
  do {                                                                                      \
    if (::kvtier::testing::FindProgram("redis-server").empty()) {                           \
      GTEST_SKIP() << "redis-server is not installed (Debian redis-server; tools/setup.sh)"; \
    }                                                                                       \
  } while (0)

// Whether loopback TCP port `port` can be bound now (0: any; *port gets the one bound).
inline bool CanBind(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(*port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  *port = ntohs(a.sin_port);
  return ok;
}

// A free loopback TCP port. Cluster nodes also need port + 10000 (the cluster bus), so they
// get one below 30000 whose bus port is free too (outside the kernel's ephemeral range).
inline int FreePort(bool cluster = false) {
  static std::atomic<int> next{20000 + static_cast<int>(::getpid() % 4000)};
  for (int tries = 0; cluster && tries < 5000; ++tries) {
    int p = next.fetch_add(1);
    if (p >= 30000) next = p = 20000;
    int bus = p + 10000;
    if (CanBind(&p) && CanBind(&bus)) return p;
  }
  int p = 0;
  CanBind(&p);
  return p;
}

inline std::string TempDir(const char* what) {
  std::string t = std::string("/tmp/kvtier_") + what + "_XXXXXX";
  if (::mkdtemp(t.data()) == nullptr) return "";
  return t;
}

// One redis-server on 127.0.0.1:port, persistence off, killed by the destructor.
class RedisProcess {
 public:
  RedisProcess(bool cluster = false, std::vector<std::string> extra = {})
      : cluster_(cluster), extra_(std::move(extra)), port_(FreePort(cluster)),
        dir_(TempDir("redis")) {
    Start();
  }
  ~RedisProcess() {
    Kill();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void Start() {
    std::vector<std::string> args = {FindProgram("redis-server"), "--port",
                                     std::to_string(port_), "--bind", "127.0.0.1", "--dir",
                                     dir_, "--save", "", "--appendonly", "no", "--daemonize",
                                     "no", "--loglevel", "warning", "--logfile",
                                     dir_ + "/redis.log"};
    if (cluster_) {
      for (const char* a : {"--cluster-enabled", "yes", "--cluster-config-file",
                            "nodes.conf", "--cluster-node-timeout", "2000"}) {
        args.emplace_back(a);
      }
    }
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // Up when it answers PING.
    auto c = remote::RedisClient::Create(url(), {}).value();
    for (int i = 0; i < 200; ++i) {
      remote::RedisResult r = c->RunOn(addr(), {{"PING"}});
      if (r.status.ok() && r.str() == "PONG") return;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ADD_FAILURE() << "redis-server on port " << port_ << " did not start";
  }
  void Kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  int port() const { return port_; }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string url() const { return "redis://" + addr(); }
  // Every key matching `pattern` (SCAN).
  std::vector<std::string> Keys(const std::string& pattern) const {
    auto c = remote::RedisClient::Create(url(), {}).value();
    std::vector<std::string> keys;
    std::string cursor = "0";
    do {
      remote::RedisResult r = c->RunOn(addr(), {{"SCAN", cursor, "MATCH", pattern}});
      cursor = remote::ScanReply(r, &keys);
    } while (!cursor.empty() && cursor != "0");
    return keys;
  }
  // Runs one command on this server alone.
  remote::RedisResult Cmd(std::vector<std::string> argv) const {
    auto c = remote::RedisClient::Create(url(), {}).value();
    return c->RunOn(addr(), {std::move(argv)});
  }

 private:
  bool cluster_;
  std::vector<std::string> extra_;
  int port_;
  std::string dir_;
  pid_t pid_ = -1;
};

// Three masters joined by `redis-cli --cluster create`, waiting for cluster_state:ok.
class RedisCluster {
 public:
  RedisCluster() {
    for (int i = 0; i < 3; ++i) nodes.push_back(std::make_unique<RedisProcess>(true));
    std::string cmd = FindProgram("redis-cli") + " --cluster create";
    for (const auto& n : nodes) {
      cmd += " ";
      cmd += n->addr();
    }
    cmd += " --cluster-replicas 0 --cluster-yes > /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    for (int i = 0; i < 400; ++i) {
      bool ok = true;
      for (const auto& n : nodes) {
        remote::RedisResult r = n->Cmd({"CLUSTER", "INFO"});
        ok = ok && r.str().find("cluster_state:ok") != std::string_view::npos;
      }
      if (ok) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ADD_FAILURE() << "the cluster did not reach cluster_state:ok";
  }
  std::string url() const {
    std::string u = "redis://";
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (i > 0) u += ",";
      u += nodes[i]->addr();
    }
    return u;
  }
  std::vector<std::unique_ptr<RedisProcess>> nodes;
};

// A TCP proxy on a free loopback port to `target_port` that holds every chunk of bytes, in
// both directions, `delay_ms` before passing it on (a slow network).
class LatencyProxy {
 public:
  LatencyProxy(int target_port, int delay_ms)
      : target_(target_port), delay_ms_(delay_ms), port_(FreePort()) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::listen(listen_fd_, 64);
    accept_ = std::thread([this] { AcceptLoop(); });
  }
  ~LatencyProxy() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    accept_.join();
    for (std::thread& t : pipes_) t.join();
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  void set_delay_ms(int ms) { delay_ms_ = ms; }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int in = ::accept(listen_fd_, nullptr, nullptr);
      if (in < 0) continue;
      const int out = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(target_));
      if (::connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(in);
        ::close(out);
        continue;
      }
      pipes_.emplace_back([this, in, out] { Pipe(in, out); });
    }
  }
  void Pipe(int a, int b) {
    std::thread other([this, a, b] { Copy(b, a); });
    Copy(a, b);
    ::shutdown(a, SHUT_RDWR);
    ::shutdown(b, SHUT_RDWR);
    other.join();
    ::close(a);
    ::close(b);
  }
  void Copy(int from, int to) {
    std::vector<char> buf(1 << 16);
    while (!stop_) {
      pollfd p{from, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::read(from, buf.data(), buf.size());
      if (n <= 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_.load()));
      for (ssize_t at = 0; at < n;) {
        const ssize_t w = ::send(to, buf.data() + at, static_cast<size_t>(n - at), MSG_NOSIGNAL);
        if (w <= 0) return;
        at += w;
      }
    }
  }
  int target_;
  std::atomic<int> delay_ms_;
  int port_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread accept_;
  std::vector<std::thread> pipes_;
};

}  // namespace kvtier::testing
