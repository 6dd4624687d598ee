// The HTTP server in process, on the bundled model: bad input is a 4xx naming the problem and
// the server keeps serving; a client that leaves cancels its request and frees its K/V;
// streams equal non-streamed answers; stop strings; preemption under a tiny pool; drain.
#include "kvtier/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/server_test_util.h"

namespace kvtier {
namespace {

using nlohmann::json;

std::shared_ptr<BlockPool> Pool(uint64_t blocks, uint32_t block_tokens = 16) {
  return testing::BundledPool(blocks, block_tokens);
}

// A server on a free port, with its engine and prefix cache, listening on its own thread.
struct Running : testing::BundledServer {
  explicit Running(std::shared_ptr<BlockPool> p = Pool(512), uint32_t max_num_seqs = 8)
      : BundledServer(Options(std::move(p), max_num_seqs)) {}
  static testing::BundledServerOptions Options(std::shared_ptr<BlockPool> p,
                                               uint32_t max_num_seqs) {
    testing::BundledServerOptions o;
    o.pool = std::move(p);
    o.prefix_cache_bytes = 256ull << 20;
    o.engine.max_num_seqs = max_num_seqs;
    o.server.max_body_bytes = 1 << 20;
    return o;
  }
};

// Body with extra raw fields spliced before the closing brace.
std::string Body(json j, const std::string& raw_fields = "") {
  std::string s = j.dump();
  if (!raw_fields.empty()) s.insert(s.size() - 1, "," + raw_fields);
  return s;
}

json GreedyBody(const std::string& prompt, int max_tokens, bool stream = false) {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
              {"stream", stream}};
}

// The text of an SSE completion stream, and its finish reason.
std::string StreamText(const std::string& sse, std::string* finish) {
  std::string text;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    const std::string data = sse.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") break;
    json c = json::parse(data);
    if (c.contains("error")) {
      *finish = "error";
      break;
    }
    if (c["choices"].empty()) continue;
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) *finish = c["choices"][0]["finish_reason"];
  }
  return text;
}

// A raw TCP connection to the server (for clients that vanish).
int Connect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

void SendRequest(int fd, const std::string& path, const std::string& body) {
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: "
                          "application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
}

// Waits until pred() holds (true) or 20 s pass (false).
template <class F>
bool Eventually(F pred) {
  for (int i = 0; i < 400; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

#ifdef KVTIER_SANITIZE
constexpr int kTinyPoolTokens = 12;  // instrumented builds are ~10x slower
#else
constexpr int kTinyPoolTokens = 40;
#endif

const char* kPrompt = "It is a truth universally acknowledged, that a single man in possession";

TEST(Server, BadInputIsA4xxNamingTheProblemAndTheServerKeepsServing) {
  Running s;
  struct Case {
    std::string path, body;
    int status;
    std::string says;
  };
  const std::string chat = "/v1/chat/completions", cmpl = "/v1/completions";
  std::string long_prompt;
  for (int i = 0; i < 600; ++i) long_prompt += "the carriage came round to the door. ";
  const std::vector<Case> cases = {
      {chat, "{\"messages\": [", 400, "malformed JSON"},
      {chat, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"})", 400,
       "max_tokens"},
      {chat, R"({"max_tokens": 4})", 400, "messages"},
      {chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"\xC3\x28\"}]}", 400, "UTF-8"},
      {chat, R"({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]})", 404,
       "gpt-9"},
      {cmpl, Body(GreedyBody(long_prompt, 4)), 413, "maximum context length is 2048"},
      {cmpl, Body(GreedyBody(kPrompt, 0)), 400, "max_tokens"},
      {cmpl, Body(GreedyBody(kPrompt, 1000000000)), 400, "at most"},
      {cmpl, R"({"prompt": [1, 99999]})", 400, "prompt: token 1"},
      {"/v1/nowhere", "{}", 404, "unknown route"},
  };
  for (const Case& c : cases) {
    httplib::Result r = s.Post(c.path, c.body);
    ASSERT_TRUE(r) << c.body;
    EXPECT_EQ(r->status, c.status) << c.body << " -> " << r->body;
    json e = json::parse(r->body);
    ASSERT_TRUE(e.contains("error")) << r->body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(c.says), std::string::npos)
        << r->body;
    httplib::Result ok = s.Post(cmpl, Body(GreedyBody(kPrompt, 2)));
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body;
  }
  // A body larger than the limit (1 MiB here; 100 MB in the e2e test): 413, or the connection
  // closed while sending, and the server serves on.
  httplib::Result big = s.Post(cmpl, std::string(3 << 20, ' '));
  if (big) {
    EXPECT_EQ(big->status, 413) << big->body;
  }
  httplib::Result ok = s.Post(cmpl, Body(GreedyBody(kPrompt, 2)));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  // The same limit for a chunked body (no Content-Length): 413 before it is all read.
  const int fd = Connect(s.port);
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                           "chunked\r\nContent-Type: application/json\r\n\r\n";
  ASSERT_GT(send(fd, head.data(), head.size(), MSG_NOSIGNAL), 0);
  const std::string chunk = "10000\r\n" + std::string(0x10000, 'a') + "\r\n";
  for (int i = 0; i < 64; ++i) {  // 4 MiB, the limit is 1 MiB; the server may stop reading
    if (send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0) break;
  }
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) {
    reply.append(buf, static_cast<size_t>(n));
    if (reply.find("\r\n\r\n") != std::string::npos && reply.find("}}") != std::string::npos) break;
  }
  close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0u) << reply.substr(0, 200);
  ok = s.Post(cmpl, Body(GreedyBody(kPrompt, 2)));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(Server, StreamsEqualAnswersAndStopStringsCutThem) {
  Running s;
  httplib::Result plain = s.Post("/v1/completions", Body(GreedyBody(kPrompt, 24)));
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  const json pj = json::parse(plain->body);
  const std::string text = pj["choices"][0]["text"];
  EXPECT_EQ(pj["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(pj["usage"]["completion_tokens"], 24);

  httplib::Result streamed = s.Post("/v1/completions", Body(GreedyBody(kPrompt, 24, true)));
  ASSERT_TRUE(streamed);
  std::string finish;
  EXPECT_EQ(StreamText(streamed->body, &finish), text);
  EXPECT_EQ(finish, "length");
  EXPECT_NE(streamed->body.find("data: [DONE]"), std::string::npos);

  // A stop string from the middle of the greedy text: the answer is cut right before it.
  ASSERT_GT(text.size(), 12u);
  const std::string stop = text.substr(text.size() / 2, 3);
  const size_t at = text.find(stop);
  for (bool stream : {false, true}) {
    json body = GreedyBody(kPrompt, 24, stream);
    body["stop"] = json::array({stop});
    httplib::Result r = s.Post("/v1/completions", body.dump());
    ASSERT_TRUE(r);
    std::string got, why;
    if (stream) {
      got = StreamText(r->body, &why);
    } else {
      const json j = json::parse(r->body);
      got = j["choices"][0]["text"];
      why = j["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(got, text.substr(0, at)) << "stream=" << stream << " stop=" << stop;
    EXPECT_EQ(why, "stop");
  }
}

TEST(Server, AClientThatLeavesCancelsItsRequestAndFreesItsKv) {
  Running s;
  for (bool stream : {true, false}) {
    const uint64_t cancelled = s.engine->Stats().cancelled;
    const int fd = Connect(s.port);
    SendRequest(fd, "/v1/completions", Body(GreedyBody(kPrompt, 1500, stream)));
    if (stream) {  // read a little of the stream first
      char buf[512];
      ASSERT_GT(recv(fd, buf, sizeof(buf), 0), 0);
    } else {
      ASSERT_TRUE(Eventually([&] { return s.engine->Stats().running == 1; }));
    }
    close(fd);
    EXPECT_TRUE(Eventually([&] { return s.engine->Stats().cancelled == cancelled + 1; }))
        << "stream=" << stream;
    EXPECT_TRUE(Eventually([&] { return s.engine->Stats().running == 0; }));
    // Nothing but the prefix cache holds K/V afterwards.
    EXPECT_TRUE(Eventually([&] {
      const PoolStats ps = s.pool->Stats();
      return ps.owner_bytes[static_cast<int>(KvOwner::kActive)] == 0;
    })) << "stream=" << stream;
    EXPECT_LT(s.engine->Stats().generated_tokens, 1500u * (stream ? 1 : 2));
  }
  httplib::Result ok = s.Post("/v1/completions", Body(GreedyBody(kPrompt, 2)));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(Server, ATinyPoolStillAnswersEveryRequestCorrectly) {
  std::vector<std::string> prompts = {
      "Anne had been a most useful friend to her sister, and ",
      "\"I cannot speak well enough to be unintelligible,\" said Catherine, ",
      "It was a fine morning in May when Mrs. Jennings arrived at the cottage with ",
      "Sir Walter Elliot, of Kellynch Hall, in Somersetshire, was a man who ",
      "The family of Dashwood had long been settled in Sussex. Their estate was ",
      "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and "};
  std::vector<std::string> want;
  {
    Running big;
    for (const std::string& p : prompts) {
      httplib::Result r = big.Post("/v1/completions", Body(GreedyBody(p, kTinyPoolTokens)));
      ASSERT_TRUE(r);
      want.push_back(json::parse(r->body)["choices"][0]["text"]);
    }
  }
  // 96 tokens for six requests of ~16-token prompts: admission lets four in (prompt blocks and
  // two more each), and they outgrow the pool as they decode.
  Running tiny(Pool(24, 4), 6);
  std::vector<std::future<std::string>> got;
  for (const std::string& p : prompts) {
    got.push_back(std::async(std::launch::async, [&tiny, p] {
      httplib::Result r = tiny.Post("/v1/completions", Body(GreedyBody(p, kTinyPoolTokens)));
      if (!r || r->status != 200) return std::string("HTTP error");
      return json::parse(r->body)["choices"][0]["text"].get<std::string>();
    }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].get(), want[i]) << i;
  EXPECT_GT(tiny.engine->Stats().preemptions, 0u);
  EXPECT_LE(tiny.pool->Stats().blocks_in_use, tiny.pool->capacity_blocks());
  const PrefixCacheStats cs = tiny.cache->Stats();
  EXPECT_LE(cs.bytes, cs.budget_bytes);
  EXPECT_TRUE(tiny.cache->CheckInvariants().ok());
}

TEST(Server, ShutdownLetsRequestsInFlightFinish) {
  auto s = std::make_unique<Running>();
  auto answer = std::async(std::launch::async, [&] {
    return s->Post("/v1/completions", Body(GreedyBody(kPrompt, 64, true)));
  });
  ASSERT_TRUE(Eventually([&] { return s->engine->Stats().running == 1; }));
  std::thread stopper([&] { s->server->Shutdown(30000); });
  httplib::Result r = answer.get();
  stopper.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  std::string finish;
  StreamText(r->body, &finish);
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(s->engine->Stats().cancelled, 0u);
  s->listener.join();
  s->listener = std::thread([] {});
  s.reset();
}

}  // namespace
}  // namespace kvtier
