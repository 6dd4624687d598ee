// The Anthropic Messages API: request parsing (each bad field a 400 naming it), the response and
// stream shapes against the OpenAI path's answer to the same conversation on the bundled model
// (greedy: the same text), stop sequences, usage from the prefix cache, and no K/V left behind
// after errors and clients that leave.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "kvtier/server.h"
#include "server/anthropic.h"
#include "server/server_test_util.h"

namespace kvtier {
namespace {

using nlohmann::json;
using server::ApiError;
using server::MessagesRequest;
using server::ParseMessagesRequest;

bool Parse(const std::string& body, MessagesRequest* r, ApiError* e, bool count = false) {
  return ParseMessagesRequest(body, count, r, e, UINT64_MAX, 0);
}

json Minimal() {
  return json{{"model", "m"},
              {"max_tokens", 8},
              {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
}

TEST(AnthropicParse, ReadsSystemBlocksSamplingAndStops) {
  json b = Minimal();
  b["system"] = json::array({{{"type", "text"}, {"text", "Be brief."}},
                             {{"type", "text"}, {"text", "Be kind."}, {"cache_control",
                                                                       {{"type", "ephemeral"}}}}});
  b["messages"] = json::array(
      {{{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "a"}},
                                                   {{"type", "text"}, {"text", "b"}}})}},
       {{"role", "assistant"}, {"content", "c"}},
       {{"role", "user"}, {"content", "d"}},
       {{"role", "user"}, {"content", "e"}}});
  b["temperature"] = 0.5;
  b["top_p"] = 0.9;
  b["top_k"] = 40;
  b["stop_sequences"] = json::array({"END", "\n\nHuman:"});
  b["stream"] = true;
  b["metadata"] = {{"user_id", "u"}};
  MessagesRequest r;
  ApiError e;
  ASSERT_TRUE(Parse(b.dump(), &r, &e)) << e.message;
  ASSERT_EQ(r.chat.messages.size(), 4u);  // system, user, assistant, user (d and e merged)
  EXPECT_EQ(r.chat.messages[0].role, "system");
  EXPECT_EQ(r.chat.messages[0].content, "Be brief.\nBe kind.");
  EXPECT_EQ(r.chat.messages[1].content, "ab");
  EXPECT_EQ(r.chat.messages[2].role, "assistant");
  EXPECT_EQ(r.chat.messages[3].content, "d\n\ne");
  EXPECT_EQ(*r.chat.max_tokens, 8u);
  EXPECT_FLOAT_EQ(r.chat.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.chat.sampling.top_p, 0.9f);
  EXPECT_EQ(r.chat.sampling.top_k, 40u);
  EXPECT_EQ(r.chat.stop, (std::vector<std::string>{"END", "\n\nHuman:"}));
  EXPECT_TRUE(r.chat.stream);
  EXPECT_TRUE(r.tools_param.empty());
  // Defaults: temperature 1, not streamed.
  ASSERT_TRUE(Parse(Minimal().dump(), &r, &e));
  EXPECT_FLOAT_EQ(r.chat.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.chat.stream);
}

TEST(AnthropicParse, ToolsAreValidatedAndReportedWhereUsed) {
  json b = Minimal();
  b["tools"] = json::array({{{"name", "get_weather"},
                             {"description", "Weather"},
                             {"input_schema", {{"type", "object"}}}}});
  b["messages"] = json::array(
      {{{"role", "user"}, {"content", "weather?"}},
       {{"role", "assistant"},
        {"content", json::array({{{"type", "text"}, {"text", "Checking."}},
                                 {{"type", "tool_use"}, {"id", "toolu_1"},
                                  {"name", "get_weather"}, {"input", {{"city", "Oslo"}}}}})}},
       {{"role", "user"},
        {"content", json::array({{{"type", "tool_result"}, {"tool_use_id", "toolu_1"},
                                  {"content", "rain"}}})}}});
  MessagesRequest r;
  ApiError e;
  ASSERT_TRUE(Parse(b.dump(), &r, &e)) << e.message;
  EXPECT_EQ(r.tools_param, "messages[1].content[1]");
  b.erase("tools");
  b["messages"] = json::array({b["messages"][0]});
  b["tools"] = json::array({{{"name", "f"}, {"input_schema", {{"type", "object"}}}}});
  ASSERT_TRUE(Parse(b.dump(), &r, &e)) << e.message;
  EXPECT_EQ(r.tools_param, "tools");
}

TEST(AnthropicParse, EachBadFieldIsA400NamingIt) {
  struct Case {
    std::function<void(json&)> edit;
    std::string param, says;
  };
  const json tool_use_turn = {
      {"role", "assistant"},
      {"content", json::array({{{"type", "tool_use"}, {"id", "t1"}, {"name", "f"},
                                {"input", json::object()}}})}};
  const std::vector<Case> cases = {
      {[](json& b) { b.erase("max_tokens"); }, "max_tokens", "required"},
      {[](json& b) { b["max_tokens"] = 0; }, "max_tokens", "got 0"},
      {[](json& b) { b["max_tokens"] = "8"; }, "max_tokens", "an integer"},
      {[](json& b) { b.erase("model"); }, "model", "required"},
      {[](json& b) { b.erase("messages"); }, "messages", "required"},
      {[](json& b) { b["messages"] = json::array(); }, "messages", "at least one"},
      {[](json& b) { b["messages"][0]["role"] = "system"; }, "messages[0].role",
       "top-level `system`"},
      {[](json& b) { b["messages"][0]["role"] = "robot"; }, "messages[0].role", "\"robot\""},
      {[](json& b) { b["messages"][0].erase("content"); }, "messages[0].content", "required"},
      {[](json& b) { b["messages"][0]["content"] = 7; }, "messages[0].content", "an integer"},
      {[](json& b) { b["messages"][0]["content"] = json::array({{{"type", "video"}}}); },
       "messages[0].content[0].type", "\"video\""},
      {[](json& b) { b["messages"][0]["content"] = json::array({{{"type", "text"}}}); },
       "messages[0].content[0].text", "required"},
      {[](json& b) {
         b["messages"][0]["content"] = json::array({{{"type", "image"}, {"source", {}}}});
       },
       "messages[0].content[0].type", "not supported"},
      {[](json& b) {
         b["messages"][0]["content"] =
             json::array({{{"type", "tool_result"}, {"tool_use_id", "nope"}}});
       },
       "messages[0].content[0].tool_use_id", "matches no tool_use"},
      {[&](json& b) {
         b["messages"] = json::array(
             {b["messages"][0], tool_use_turn,
              {{"role", "user"},
               {"content", json::array({{{"type", "tool_result"}, {"tool_use_id", "t2"}}})}}});
       },
       "messages[2].content[0].tool_use_id", "\"t2\""},
      {[&](json& b) {
         json turn = tool_use_turn;
         turn["content"][0].erase("input");
         b["messages"] = json::array({b["messages"][0], turn});
       },
       "messages[1].content[0].input", "required"},
      {[&](json& b) {
         b["messages"] = json::array(
             {{{"role", "user"}, {"content", tool_use_turn["content"]}}});
       },
       "messages[0].content[0].type", "assistant messages"},
      {[](json& b) { b["system"] = json::array({{{"type", "image"}}}); }, "system[0].type",
       "\"image\""},
      {[](json& b) { b["system"] = 3; }, "system", "a string or an array"},
      {[](json& b) { b["temperature"] = 1.5; }, "temperature", "1.5"},
      {[](json& b) { b["top_p"] = 0; }, "top_p", "more than 0"},
      {[](json& b) { b["top_k"] = -1; }, "top_k", "got -1"},
      {[](json& b) { b["stop_sequences"] = "END"; }, "stop_sequences", "an array"},
      {[](json& b) { b["stop_sequences"] = json::array({""}); }, "stop_sequences[0]",
       "non-empty"},
      {[](json& b) { b["stream"] = "yes"; }, "stream", "a boolean"},
      {[](json& b) { b["metadata"] = "x"; }, "metadata", "an object"},
      {[](json& b) { b["tools"] = json::array({{{"input_schema", json::object()}}}); },
       "tools[0].name", "required"},
      {[](json& b) { b["tools"] = json::array({{{"name", "f"}, {"input_schema", 1}}}); },
       "tools[0].input_schema", "an object"},
      {[](json& b) { b["tool_choice"] = {{"type", "any"}}; }, "tool_choice", "needs tools"},
      {[](json& b) { b["tool_choice"] = {{"type", "maybe"}}; }, "tool_choice.type", "maybe"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    json b = Minimal();
    cases[i].edit(b);
    MessagesRequest r;
    ApiError e;
    EXPECT_FALSE(Parse(b.dump(), &r, &e)) << i << ": " << b.dump();
    EXPECT_EQ(e.status, 400) << i;
    EXPECT_EQ(e.param, cases[i].param) << i << ": " << e.message;
    EXPECT_NE(e.message.find(cases[i].param), std::string::npos) << i << ": " << e.message;
    EXPECT_NE(e.message.find(cases[i].says), std::string::npos) << i << ": " << e.message;
  }
  // count_tokens needs no max_tokens.
  json b = Minimal();
  b.erase("max_tokens");
  MessagesRequest r;
  ApiError e;
  EXPECT_TRUE(Parse(b.dump(), &r, &e, /*count=*/true)) << e.message;
  // Malformed JSON: named, and an Anthropic error object.
  EXPECT_FALSE(Parse("{\"model\": ", &r, &e));
  const json err = json::parse(server::AnthropicErrorJson(e));
  EXPECT_EQ(err["type"], "error");
  EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  EXPECT_NE(err["error"]["message"].get<std::string>().find("malformed JSON"), std::string::npos);
}

TEST(AnthropicParse, ErrorTypesAndStopReasons) {
  EXPECT_STREQ(server::AnthropicErrorType(400), "invalid_request_error");
  EXPECT_STREQ(server::AnthropicErrorType(404), "not_found_error");
  EXPECT_STREQ(server::AnthropicErrorType(413), "request_too_large");
  EXPECT_STREQ(server::AnthropicErrorType(503), "overloaded_error");
  EXPECT_STREQ(server::AnthropicErrorType(500), "api_error");
  EXPECT_EQ(server::StopReason("length", ""), "max_tokens");
  EXPECT_EQ(server::StopReason("stop", ""), "end_turn");
  EXPECT_EQ(server::StopReason("stop", "END"), "stop_sequence");
}

// ---- The server in process, on the bundled model.

struct Running : testing::BundledServer {
  Running() : BundledServer(Options()) {}
  static testing::BundledServerOptions Options() {
    testing::BundledServerOptions o;
    o.prefix_cache_bytes = 256ull << 20;
    o.server.max_body_bytes = 1 << 20;
    return o;
  }
  httplib::Result Post(const std::string& path, const std::string& body) const {
    return Client().Post(path, {{"x-api-key", "any"}, {"anthropic-version", "2023-06-01"}}, body,
                         "application/json");
  }
};

const char* kQuestion = "It is a truth universally acknowledged, that a single man in possession";

json Greedy(int max_tokens, bool stream = false) {
  return json{{"model", "claude-anything"},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"stream", stream},
              {"system", "You are terse."},
              {"messages", json::array({{{"role", "user"}, {"content", kQuestion}}})}};
}

// The events of an SSE stream: (event name, data).
std::vector<std::pair<std::string, json>> Events(const std::string& sse) {
  std::vector<std::pair<std::string, json>> out;
  size_t pos = 0;
  while ((pos = sse.find("event: ", pos)) != std::string::npos) {
    const size_t nl = sse.find('\n', pos);
    const std::string name = sse.substr(pos + 7, nl - pos - 7);
    EXPECT_EQ(sse.compare(nl + 1, 6, "data: "), 0);
    const size_t end = sse.find("\n\n", nl);
    out.emplace_back(name, json::parse(sse.substr(nl + 7, end - nl - 7)));
    pos = end;
  }
  return out;
}

TEST(AnthropicServer, MessagesMatchTheChatAnswerAndStreamTheSameText) {
  Running s;
  // The same conversation through /v1/chat/completions: greedy, so the same text.
  json chat{{"max_tokens", 16}, {"temperature", 0},
            {"messages", json::array({{{"role", "system"}, {"content", "You are terse."}},
                                      {{"role", "user"}, {"content", kQuestion}}})}};
  httplib::Result c = s.Post("/v1/chat/completions", chat.dump());
  ASSERT_TRUE(c);
  ASSERT_EQ(c->status, 200) << c->body;
  const json cj = json::parse(c->body);
  const std::string want = cj["choices"][0]["message"]["content"];
  const uint32_t prompt_tokens = cj["usage"]["prompt_tokens"];

  httplib::Result m = s.Post("/v1/messages", Greedy(16).dump());
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  const json mj = json::parse(m->body);
  EXPECT_EQ(mj["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(mj["type"], "message");
  EXPECT_EQ(mj["role"], "assistant");
  EXPECT_EQ(mj["model"], "bundled");
  ASSERT_EQ(mj["content"].size(), 1u);
  EXPECT_EQ(mj["content"][0]["type"], "text");
  EXPECT_EQ(mj["content"][0]["text"], want);
  const std::string reason = cj["choices"][0]["finish_reason"];
  EXPECT_EQ(mj["stop_reason"], reason == "length" ? "max_tokens" : "end_turn");
  EXPECT_TRUE(mj["stop_sequence"].is_null());
  const json& u = mj["usage"];
  // The chat request left the prompt in the prefix cache: read from it now.
  EXPECT_GT(u["cache_read_input_tokens"].get<uint32_t>(), 0u) << u;
  EXPECT_EQ(u["input_tokens"].get<uint32_t>() + u["cache_read_input_tokens"].get<uint32_t>() +
                u["cache_creation_input_tokens"].get<uint32_t>(),
            prompt_tokens);
  EXPECT_EQ(u["output_tokens"], cj["usage"]["completion_tokens"]);

  // count_tokens: the prompt's tokens.
  json ct = Greedy(1);
  ct.erase("max_tokens");
  httplib::Result n = s.Post("/v1/messages/count_tokens", ct.dump());
  ASSERT_TRUE(n);
  ASSERT_EQ(n->status, 200) << n->body;
  EXPECT_EQ(json::parse(n->body)["input_tokens"], prompt_tokens);

  // The stream: the exact event sequence, deltas concatenating to the same text.
  httplib::Result st = s.Post("/v1/messages", Greedy(16, true).dump());
  ASSERT_TRUE(st);
  ASSERT_EQ(st->status, 200);
  EXPECT_NE(st->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  const auto ev = Events(st->body);
  ASSERT_GE(ev.size(), 6u) << st->body;
  EXPECT_EQ(ev[0].first, "message_start");
  EXPECT_EQ(ev[0].second["type"], "message_start");
  EXPECT_EQ(ev[0].second["message"]["content"], json::array());
  EXPECT_TRUE(ev[0].second["message"]["stop_reason"].is_null());
  EXPECT_GT(ev[0].second["message"]["usage"]["cache_read_input_tokens"].get<uint32_t>(), 0u);
  EXPECT_EQ(ev[1].first, "content_block_start");
  EXPECT_EQ(ev[1].second["content_block"], (json{{"type", "text"}, {"text", ""}}));
  EXPECT_EQ(ev[2].first, "ping");
  std::string text;
  size_t i = 3;
  for (; i < ev.size() && ev[i].first == "content_block_delta"; ++i) {
    EXPECT_EQ(ev[i].second["index"], 0);
    EXPECT_EQ(ev[i].second["delta"]["type"], "text_delta");
    text += ev[i].second["delta"]["text"].get<std::string>();
  }
  EXPECT_EQ(text, want);
  ASSERT_EQ(ev.size(), i + 3) << st->body;
  EXPECT_EQ(ev[i].first, "content_block_stop");
  EXPECT_EQ(ev[i + 1].first, "message_delta");
  EXPECT_EQ(ev[i + 1].second["delta"]["stop_reason"], mj["stop_reason"]);
  EXPECT_EQ(ev[i + 1].second["usage"]["output_tokens"], u["output_tokens"]);
  EXPECT_EQ(ev[i + 2].first, "message_stop");
  for (const auto& [name, data] : ev) EXPECT_EQ(data["type"], name);
  EXPECT_TRUE(s.NoActiveKv());
}

TEST(AnthropicServer, StopSequencesCutTheTextAndAreReported) {
  Running s;
  httplib::Result m = s.Post("/v1/messages", Greedy(24).dump());
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  const std::string text = json::parse(m->body)["content"][0]["text"];
  ASSERT_GT(text.size(), 12u);
  const std::string stop = text.substr(text.size() / 2, 3);
  for (bool stream : {false, true}) {
    json b = Greedy(24, stream);
    b["stop_sequences"] = json::array({"\x01never", stop});
    httplib::Result r = s.Post("/v1/messages", b.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::string got, reason, seq;
    if (stream) {
      for (const auto& [name, data] : Events(r->body)) {
        if (name == "content_block_delta") got += data["delta"]["text"].get<std::string>();
        if (name == "message_delta") {
          reason = data["delta"]["stop_reason"];
          seq = data["delta"]["stop_sequence"];
        }
      }
    } else {
      const json j = json::parse(r->body);
      got = j["content"][0]["text"];
      reason = j["stop_reason"];
      seq = j["stop_sequence"];
    }
    EXPECT_EQ(got, text.substr(0, text.find(stop))) << "stream=" << stream;
    EXPECT_EQ(reason, "stop_sequence");
    EXPECT_EQ(seq, stop);
  }
}

TEST(AnthropicServer, AFinalAssistantMessageIsAPrefillTheAnswerContinues) {
  Running s;
  const std::string prefill = "Mr. Darcy said";
  json plain = Greedy(12);
  json pre = Greedy(12);
  pre["messages"].push_back({{"role", "assistant"}, {"content", prefill}});
  auto count = [&](json b) {
    b.erase("max_tokens");
    httplib::Result r = s.Post("/v1/messages/count_tokens", b.dump());
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    return r ? json::parse(r->body)["input_tokens"].get<size_t>() : 0;
  };
  // The prompt is the one without it, ending where the answer starts, then the prefill's tokens.
  const std::vector<int32_t> tokens =
      testing::Bundled().tokenizer->Encode(prefill, /*add_bos=*/false, /*parse_special=*/false);
  ASSERT_FALSE(tokens.empty());
  EXPECT_EQ(count(pre), count(plain) + tokens.size());
  // Streamed and not: the same continuation, without the prefill itself.
  httplib::Result m = s.Post("/v1/messages", pre.dump());
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  const json mj = json::parse(m->body);
  EXPECT_EQ(mj["usage"]["input_tokens"].get<size_t>() +
                mj["usage"]["cache_read_input_tokens"].get<size_t>(),
            count(pre));
  pre["stream"] = true;
  httplib::Result st = s.Post("/v1/messages", pre.dump());
  ASSERT_TRUE(st);
  std::string text;
  for (const auto& [name, data] : Events(st->body)) {
    if (name == "content_block_delta") text += data["delta"]["text"].get<std::string>();
  }
  EXPECT_EQ(text, mj["content"][0]["text"]);
  // Anthropic refuses a prefill ending in whitespace; so does kvtier.
  pre["messages"].back()["content"] = prefill + " ";
  httplib::Result ws = s.Post("/v1/messages", pre.dump());
  ASSERT_TRUE(ws);
  EXPECT_EQ(ws->status, 400);
  EXPECT_NE(ws->body.find("cannot end with whitespace"), std::string::npos) << ws->body;
  EXPECT_TRUE(s.NoActiveKv());
}

TEST(AnthropicServer, ErrorsAreAnthropicErrorObjectsAndNothingLeaks) {
  Running s;
  std::string long_text;
  for (int i = 0; i < 600; ++i) long_text += "the carriage came round to the door. ";
  json too_long = Greedy(4);
  too_long["messages"][0]["content"] = long_text;
  json too_many = Greedy(1000000);
  json tools = Greedy(4);
  // Tools are served now (anthropic_tools.h); an input_schema the grammar cannot take is not.
  tools["tools"] = json::array(
      {{{"name", "f"}, {"input_schema", {{"type", "object"}, {"patternProperties", json::object()}}}}});
  tools["tool_choice"] = {{"type", "any"}};  // a forced call needs the schema compiled
  const std::vector<std::tuple<std::string, std::string, int, std::string>> cases = {
      {"/v1/messages", "{\"model\":", 400, "malformed JSON"},
      {"/v1/messages", R"({"model":"m","messages":[{"role":"user","content":"x"}]})", 400,
       "max_tokens: required"},
      {"/v1/messages", too_long.dump(), 413, "maximum context length"},
      {"/v1/messages", too_many.dump(), 400, "max_tokens: 1000000 is too many"},
      {"/v1/messages", tools.dump(), 400, "tools[0].input_schema: "},
      {"/v1/messages/count_tokens", R"({"model":"m","messages":[]})", 400, "messages"},
  };
  for (const auto& [path, body, status, says] : cases) {
    httplib::Result r = s.Post(path, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << body.substr(0, 80) << " -> " << r->body;
    const json e = json::parse(r->body);
    EXPECT_EQ(e["type"], "error") << r->body;
    EXPECT_EQ(e["error"]["type"], server::AnthropicErrorType(status)) << r->body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(says), std::string::npos) << r->body;
  }
  httplib::Client get("127.0.0.1", s.port);
  httplib::Result wrong = get.Get("/v1/messages");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->get_header_value("Allow"), "POST");
  EXPECT_EQ(json::parse(wrong->body)["error"]["message"],
            "method not allowed: GET /v1/messages; use POST");

  // Clients that leave, streamed or not: cancelled, their K/V freed.
  for (bool stream : {true, false}) {
    const uint64_t cancelled = s.engine->Stats().cancelled;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(s.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    const std::string body = Greedy(1500, stream).dump();
    const std::string req = "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: "
                            "application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    if (stream) {
      char buf[512];
      ASSERT_GT(recv(fd, buf, sizeof(buf), 0), 0);
    } else {
      for (int i = 0; i < 400 && s.engine->Stats().running == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    close(fd);
    for (int i = 0; i < 400 && s.engine->Stats().cancelled == cancelled; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(s.engine->Stats().cancelled, cancelled + 1) << "stream=" << stream;
    EXPECT_TRUE(s.NoActiveKv()) << "stream=" << stream;
  }
  httplib::Result ok = s.Post("/v1/messages", Greedy(2).dump());
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_TRUE(s.NoActiveKv());
}

}  // namespace
}  // namespace kvtier
