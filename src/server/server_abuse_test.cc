// The abuse suite (ctest label `abuse`, issue 36), the server in process on the bundled model,
// loopback only, every loop bounded in count and time:
// - 1,000 connections (idle, slowloris at one head byte a second, trickling a declared body)
//   held open while /health and a normal completion each answer within 1 s, every time;
// - 16 concurrent 15 MB bodies: each answered (413 or 503) in < 0.5 s, peak RSS within 1.2x
//   of idle RSS + the KV pool, and RSS back afterwards;
// - drain at 2 s with 8 long streams: each ends with the shutdown error event and [DONE];
// - the smaller messages: Content-Length: -5, 405 with Allow, 414, per-client bound 503.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "kvtier/server.h"
#include "server/server_test_util.h"

namespace kvtier {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint64_t RssBytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, rss = 0;
  f >> size >> rss;
  return rss * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

void RaiseFdLimit() {
  rlimit r{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  r.rlim_cur = r.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &r), 0);
  ASSERT_GE(r.rlim_cur, 2600u) << "the abuse test needs 2,600 descriptors";
}

// The bundled model served with `so` over a pool of 512 blocks, no prefix cache.
struct Running : testing::BundledServer {
  explicit Running(ServerOptions so) : BundledServer(Options(std::move(so))) {}
  static testing::BundledServerOptions Options(ServerOptions so) {
    testing::BundledServerOptions o;
    o.server = std::move(so);
    return o;
  }
};

int Connect(uint16_t port, bool nonblocking = false) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  if (nonblocking) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// One request on a fresh connection; the whole answer (Connection: close), or "" after
// `timeout_s`. *secs: how long it took.
std::string Exchange(uint16_t port, const std::string& req, double timeout_s, double* secs) {
  const auto t0 = Clock::now();
  const int fd = Connect(port);
  if (fd < 0) return "";
  size_t sent = 0;
  std::string out;
  while (Since(t0) < timeout_s) {
    pollfd p{fd, static_cast<short>(POLLIN | (sent < req.size() ? POLLOUT : 0)), 0};
    if (poll(&p, 1, 20) <= 0) continue;
    if ((p.revents & POLLOUT) && sent < req.size()) {
      const ssize_t n = send(fd, req.data() + sent, std::min<size_t>(req.size() - sent, 1 << 20),
                             MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) sent += static_cast<size_t>(n);
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[65536];
      const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  *secs = Since(t0);
  return out;
}

int StatusOf(const std::string& answer) {
  return answer.size() > 12 ? std::atoi(answer.c_str() + 9) : 0;
}

std::string Post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
         "application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string Completion(int max_tokens, bool stream = false) {
  return json{{"prompt", "It is a truth universally acknowledged"},
              {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", stream}}
      .dump();
}

TEST(Abuse, AThousandSlowConnectionsDoNotStallHealthOrACompletion) {
  RaiseFdLimit();
  ServerOptions so;
  so.max_connections = 4096;
  so.max_connections_per_client = 2048;  // every client here is 127.0.0.1
  Running s(so);
  std::vector<int> idle, slow, trickle;
  for (int i = 0; i < 1000; ++i) {
    const int fd = Connect(s.port, true);
    ASSERT_GE(fd, 0) << i;
    (i % 3 == 0 ? idle : i % 3 == 1 ? slow : trickle).push_back(fd);
  }
  // Trickles declare a 60 KB body (under the memory budget's floor: all are held).
  const std::string trickle_head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                   "application/json\r\nContent-Length: 60000\r\n\r\n{";
  for (int fd : trickle) (void)send(fd, trickle_head.data(), trickle_head.size(), MSG_NOSIGNAL);
  const std::string slow_text = "GET /health HTTP/1.1\r\nHost: x\r\n";
  std::atomic<bool> stop{false};
  std::thread driver([&] {
    for (size_t k = 0; k < 20 && !stop; ++k) {  // one byte a second each, 20 s at most
      for (int fd : slow) (void)send(fd, &slow_text[k % slow_text.size()], 1, MSG_NOSIGNAL);
      for (int fd : trickle) (void)send(fd, " ", 1, MSG_NOSIGNAL);
      for (int i = 0; i < 10 && !stop; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  double worst_health = 0, worst_completion = 0;
  int rounds = 0;
  const auto t0 = Clock::now();
  while (Since(t0) < 6.0 && rounds < 40) {  // bounded: 6 s or 40 rounds
    double secs = 0;
    const std::string h = Exchange(s.port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2.0, &secs);
    EXPECT_EQ(StatusOf(h), 200) << h.substr(0, 200);
    EXPECT_LT(secs, 1.0);
    worst_health = std::max(worst_health, secs);
    const std::string c = Exchange(s.port, Post("/v1/completions", Completion(2)), 2.0, &secs);
    EXPECT_EQ(StatusOf(c), 200) << c.substr(0, 300);
    EXPECT_LT(secs, 1.0);
    worst_completion = std::max(worst_completion, secs);
    ++rounds;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Still open, all of them (none was answered or closed: a read finds nothing or EAGAIN).
  int open = 0;
  for (const auto* v : {&idle, &slow, &trickle}) {
    for (int fd : *v) {
      char b;
      const ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
      open += n < 0 && errno == EAGAIN;
    }
  }
  stop = true;
  driver.join();
  std::printf("[abuse] 1000 slow connections (334 idle, 333 slowloris, 333 trickling): %d still "
              "open after %.1f s; %d rounds: worst /health %.3f s, worst completion %.3f s\n",
              open, Since(t0), rounds, worst_health, worst_completion);
  EXPECT_GE(open, 990);
  EXPECT_GE(rounds, 5);
  for (const auto* v : {&idle, &slow, &trickle}) for (int fd : *v) close(fd);
}

TEST(Abuse, SixteenConcurrent15MbBodiesAreRefusedFastWithinTheMemoryBound) {
  RaiseFdLimit();
  ServerOptions so;  // defaults: 16 MiB bodies, 96 MiB body budget
  Running s(so);
  // One shared 15 MB body (a prompt far past the context): the senders copy nothing.
  const std::string body = "{\"prompt\":\"" + std::string(15u << 20, 'a') + "\",\"max_tokens\":4}";
  const std::string req = Post("/v1/completions", body);
  double secs = 0;
  ASSERT_EQ(StatusOf(Exchange(s.port, Post("/v1/completions", Completion(2)), 10, &secs)), 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const uint64_t idle = RssBytes();
  const uint64_t pools = s.pool->Stats().capacity_bytes;
  std::atomic<uint64_t> peak{idle};
  std::atomic<bool> stop{false};
  std::thread sampler([&] {
    for (int i = 0; i < 20000 && !stop; ++i) {  // 2 ms apart, 40 s at most
      peak = std::max<uint64_t>(peak, RssBytes());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<std::thread> senders;
  std::vector<double> took(16);
  std::vector<int> status(16);
  for (int i = 0; i < 16; ++i) {
    senders.emplace_back([&, i] {
      double t = 0;
      status[i] = StatusOf(Exchange(s.port, req, 5.0, &t));
      took[i] = t;
    });
  }
  for (auto& t : senders) t.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  sampler.join();
  const uint64_t after = RssBytes();
  const double bound = 1.2 * static_cast<double>(idle + pools);
  double worst = 0;
  int n413 = 0, n503 = 0;
  for (int i = 0; i < 16; ++i) {
    EXPECT_TRUE(status[i] == 413 || status[i] == 503) << i << ": " << status[i];
    EXPECT_LT(took[i], 0.5) << i;
    worst = std::max(worst, took[i]);
    n413 += status[i] == 413;
    n503 += status[i] == 503;
  }
  std::printf("[abuse] 16 x 15 MB bodies: %d x 413 (past the context), %d x 503 (body budget); "
              "slowest %.3f s; RSS idle %.1f MB + pool %.1f MB, peak %.1f MB (bound %.1f MB), "
              "after %.1f MB\n",
              n413, n503, worst, idle / 1e6, pools / 1e6, peak / 1e6, bound / 1e6, after / 1e6);
  EXPECT_LE(static_cast<double>(peak.load()), bound);
  EXPECT_LE(static_cast<double>(after), 1.05 * static_cast<double>(idle + pools));
}

TEST(Abuse, DrainAtTwoSecondsEndsEveryStreamWithTheShutdownErrorAndDone) {
  ServerOptions so;
  Running s(so);
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    fds.push_back(Connect(s.port));
    const std::string r = Post("/v1/completions", Completion(1900, true));
    ASSERT_EQ(send(fds.back(), r.data(), r.size(), MSG_NOSIGNAL), static_cast<ssize_t>(r.size()));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t0 = Clock::now();
  std::thread stopper([&] { s.Stop(2000); });
  int ended = 0;
  for (int fd : fds) {
    std::string got;
    char buf[65536];
    const auto t1 = Clock::now();
    while (Since(t1) < 15) {  // bounded
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
      if (got.find("0\r\n\r\n", got.size() > 16 ? got.size() - 16 : 0) != std::string::npos) break;
    }
    close(fd);
    const bool error = got.find("\"code\":\"shutdown\"") != std::string::npos;
    const bool finish = got.find("\"finish_reason\":\"cancelled\"") != std::string::npos;
    const bool done = got.find("data: [DONE]") != std::string::npos;
    EXPECT_TRUE(error && finish && done) << got.substr(got.size() > 600 ? got.size() - 600 : 0);
    ended += error && finish && done;
  }
  stopper.join();
  std::printf("[abuse] drain at 2 s: %d of 8 streams ended with the shutdown error event, "
              "finish_reason and [DONE]; shutdown took %.2f s\n", ended, Since(t0));
  EXPECT_EQ(ended, 8);
}

TEST(Abuse, SmallerMessagesAndThePerClientBound) {
  RaiseFdLimit();
  ServerOptions so;
  so.max_connections_per_client = 8;
  Running s(so);
  double secs = 0;
  std::string a = Exchange(s.port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 2, &secs);
  EXPECT_EQ(StatusOf(a), 400) << a;
  EXPECT_NE(a.find("Content-Length: '-5' is not a valid length"), std::string::npos) << a;
  a = Exchange(s.port, "GET /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2, &secs);
  EXPECT_EQ(StatusOf(a), 405) << a;
  EXPECT_NE(a.find("Allow: POST"), std::string::npos) << a;
  a = Exchange(s.port, "POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", 2, &secs);
  EXPECT_EQ(StatusOf(a), 405) << a;
  EXPECT_NE(a.find("Allow: GET"), std::string::npos) << a;
  a = Exchange(s.port, "GET /" + std::string(20000, 'x') + " HTTP/1.1\r\n\r\n", 2, &secs);
  EXPECT_EQ(StatusOf(a), 414) << a.substr(0, 300);
  EXPECT_NE(a.find("URI too long: the request line is"), std::string::npos) << a.substr(0, 300);
  a = Exchange(s.port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 209715200\r\n\r\n{", 2, &secs);
  EXPECT_EQ(StatusOf(a), 413) << a;
  EXPECT_LT(secs, 0.5);
  // Past 8 connections from this address: 503 at once, and /health is back once they close.
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) held.push_back(Connect(s.port));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  a = Exchange(s.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 2, &secs);
  EXPECT_EQ(StatusOf(a), 503) << a;
  EXPECT_NE(a.find("too many connections from 127.0.0.1"), std::string::npos) << a;
  EXPECT_LT(secs, 0.5);
  for (int fd : held) close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  a = Exchange(s.port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2, &secs);
  EXPECT_EQ(StatusOf(a), 200) << a;
  // An out-of-range token id: 400 naming the prompt (param "prompt", not null).
  a = Exchange(s.port, Post("/v1/completions", R"({"prompt":[1,2,999999],"max_tokens":2})"), 2, &secs);
  EXPECT_EQ(StatusOf(a), 400) << a;
  EXPECT_NE(a.find("\"param\":\"prompt\""), std::string::npos) << a;
  EXPECT_NE(a.find("token 2 is 999999"), std::string::npos) << a;
  // A deeply nested body: 400 before the parse.
  a = Exchange(s.port, Post("/v1/completions", std::string(100, '[') + std::string(100, ']')), 2, &secs);
  EXPECT_EQ(StatusOf(a), 400) << a;
  EXPECT_NE(a.find("levels deep"), std::string::npos) << a;
}

// The deadlines themselves, shortened: a head that trickles gets 408 at header_timeout_ms, a
// body under the minimum rate gets 408 after its grace, an idle connection is closed.
TEST(Abuse, HeadAndBodyDeadlinesAnswer408) {
  ServerOptions so;
  so.header_timeout_ms = 300;
  so.idle_timeout_ms = 300;
  so.body_min_bytes_per_s = 100000;
  Running s(so);
  const int head = Connect(s.port), body = Connect(s.port), idle = Connect(s.port);
  ASSERT_GE(head, 0);
  (void)send(head, "GET /hea", 8, MSG_NOSIGNAL);
  const std::string b = "POST /v1/completions HTTP/1.1\r\nContent-Length: 50000\r\n\r\n{";
  (void)send(body, b.data(), b.size(), MSG_NOSIGNAL);
  const auto t0 = Clock::now();
  auto read_all = [](int fd) {
    std::string got;
    char buf[4096];
    const auto t1 = Clock::now();
    while (Since(t1) < 3) {  // bounded
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  };
  const std::string h = read_all(head);
  const double head_s = Since(t0);
  EXPECT_EQ(StatusOf(h), 408) << h;
  EXPECT_NE(h.find("did not arrive within 300 ms"), std::string::npos) << h;
  EXPECT_LT(head_s, 1.0);
  const std::string bb = read_all(body);
  EXPECT_EQ(StatusOf(bb), 408) << bb;
  EXPECT_NE(bb.find("slower than 100000 bytes/s"), std::string::npos) << bb;
  EXPECT_EQ(read_all(idle), "");  // closed without an answer
  EXPECT_LT(Since(t0), 2.0);
  std::printf("[abuse] deadlines: a trickled head got 408 after %.2f s (header_timeout 0.3 s); "
              "a slow body 408; an idle connection closed\n", head_s);
  for (int fd : {head, body, idle}) close(fd);
}

}  // namespace
}  // namespace kvtier
