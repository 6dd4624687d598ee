// OpenAI request parsing and response shapes: every field, every refusal names its field.
#include "server/openai.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvtier::server {
namespace {

using nlohmann::json;

ApiRequest Ok(Endpoint ep, const std::string& body) {
  ApiRequest r;
  ApiError e;
  EXPECT_TRUE(ParseRequest(ep, body, &r, &e)) << body << " -> " << e.message;
  return r;
}

ApiError Bad(Endpoint ep, const std::string& body) {
  ApiRequest r;
  ApiError e;
  EXPECT_FALSE(ParseRequest(ep, body, &r, &e)) << body;
  EXPECT_EQ(e.status, 400);
  EXPECT_FALSE(e.message.empty());
  return e;
}

TEST(OpenAiParse, ChatWithEveryOption) {
  ApiRequest r = Ok(Endpoint::kChat, R"({
    "model": "m", "messages": [{"role": "system", "content": "be brief"},
                               {"role": "user", "content": [{"type": "text", "text": "hi "},
                                                            {"type": "text", "text": "there"}]},
                               {"role": "assistant", "content": null},
                               {"role": "developer", "content": "x"}],
    "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": -3,
    "presence_penalty": 0.25, "frequency_penalty": -0.5, "stop": ["a", "", "bc"],
    "stream": true, "stream_options": {"include_usage": true}, "n": 1, "logprobs": false,
    "user": "ignored"})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "hi there");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].role, "system");
  EXPECT_EQ(*r.max_tokens, 7u);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40u);
  EXPECT_TRUE(r.seeded);
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.25f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiParse, DefaultsAreOpenAis) {
  ApiRequest r = Ok(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FALSE(r.seeded);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.stop.empty());
  ApiRequest c = Ok(Endpoint::kChat,
                    R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 3,
                        "stop": "END", "max_tokens": 2.0})");
  EXPECT_EQ(*c.max_tokens, 3u);  // max_completion_tokens wins
  EXPECT_EQ(c.stop, (std::vector<std::string>{"END"}));
}

TEST(OpenAiParse, CompletionPrompts) {
  EXPECT_EQ(Ok(Endpoint::kCompletion, R"({"prompt": "once"})").prompt, "once");
  EXPECT_EQ(Ok(Endpoint::kCompletion, R"({"prompt": ["once"]})").prompt, "once");
  ApiRequest t = Ok(Endpoint::kCompletion, R"({"prompt": [1, 2, 3]})");
  EXPECT_TRUE(t.prompt_is_tokens);
  EXPECT_EQ(t.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  ApiRequest tt = Ok(Endpoint::kCompletion, R"({"prompt": [[4, 5]]})");
  EXPECT_EQ(tt.prompt_tokens, (std::vector<int32_t>{4, 5}));
}

TEST(OpenAiParse, EveryRefusalNamesItsField) {
  struct Case {
    Endpoint ep;
    std::string body;
    const char* param;
    const char* says;
  };
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  const Case cases[] = {
      {Endpoint::kChat, "{", "", "malformed JSON"},
      {Endpoint::kChat, "[1]", "", "expected a JSON object"},
      {Endpoint::kChat, "{}", "messages", "required"},
      {Endpoint::kChat, R"({"messages": "hi"})", "messages", "expected an array"},
      {Endpoint::kChat, R"({"messages": []})", "messages", "at least one"},
      {Endpoint::kChat, R"({"messages": [{"content": "x"}]})", "messages[0].role", "required"},
      {Endpoint::kChat, R"({"messages": [{"role": "king", "content": "x"}]})", "messages[0].role",
       "king"},
      {Endpoint::kChat, R"({"messages": [{"role": "user"}]})", "messages[0].content", "required"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": 5}]})",
       "messages[0].content", "expected a string"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type", "only \"text\""},
      {Endpoint::kChat, ("{" + msgs + R"(, "max_tokens": "ten"})"), "max_tokens",
       "expected an integer, got a string"},
      {Endpoint::kChat, ("{" + msgs + R"(, "max_tokens": 0})"), "max_tokens", "got 0"},
      {Endpoint::kChat, ("{" + msgs + R"(, "max_tokens": -4})"), "max_tokens", "got -4"},
      {Endpoint::kChat, ("{" + msgs + R"(, "max_tokens": 1.5})"), "max_tokens",
       "expected an integer"},
      {Endpoint::kChat, ("{" + msgs + R"(, "temperature": 3})"), "temperature", "got 3"},
      {Endpoint::kChat, ("{" + msgs + R"(, "temperature": "hot"})"), "temperature",
       "expected a number"},
      {Endpoint::kChat, ("{" + msgs + R"(, "top_p": 0})"), "top_p", "more than 0"},
      {Endpoint::kChat, ("{" + msgs + R"(, "presence_penalty": 2.5})"),
       "presence_penalty", "2.5"},
      {Endpoint::kChat, ("{" + msgs + R"(, "seed": "x"})"), "seed", "integer"},
      {Endpoint::kChat, ("{" + msgs + R"(, "stop": 3})"), "stop", "expected a string"},
      {Endpoint::kChat, ("{" + msgs + R"(, "stop": ["a","b","c","d","e"]})"), "stop",
       "at most 4"},
      {Endpoint::kChat, ("{" + msgs + R"(, "stream": "yes"})"), "stream", "boolean"},
      {Endpoint::kChat, ("{" + msgs + R"(, "stream_options": {"include_usage": 1}})"),
       "stream_options.include_usage", "boolean"},
      {Endpoint::kChat, ("{" + msgs + R"(, "n": 2})"), "n", "only 1"},
      {Endpoint::kChat, ("{" + msgs + R"(, "logprobs": true})"), "logprobs",
       "not supported"},
      {Endpoint::kChat, ("{" + msgs + R"(, "tools": [{"type": "function"}]})"),
       "tools[0].function", "required"},
      {Endpoint::kCompletion, R"({"prompt": "x", "tools": [{"type": "function"}]})", "tools",
       "not supported"},
      {Endpoint::kChat, ("{" + msgs + R"(, "model": 7})"), "model", "expected a string"},
      {Endpoint::kCompletion, "{}", "prompt", "required"},
      {Endpoint::kCompletion, R"({"prompt": 5})", "prompt", "expected a string"},
      {Endpoint::kCompletion, R"({"prompt": ["a", "b"]})", "prompt", "one prompt"},
      {Endpoint::kCompletion, R"({"prompt": [1, -2]})", "prompt", "prompt[1]"},
      {Endpoint::kCompletion, R"({"prompt": "x", "echo": true})", "echo", "not supported"},
      {Endpoint::kCompletion, R"({"prompt": "x", "best_of": 3})", "best_of", "only 1"},
  };
  for (const Case& c : cases) {
    ApiError e = Bad(c.ep, c.body);
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << c.body << " -> " << e.message;
  }
}

TEST(OpenAiParse, InvalidUtf8IsRefused) {
  const std::string body = "{\"messages\": [{\"role\": \"user\", \"content\": \"\xC3\x28\"}]}";
  ApiError e = Bad(Endpoint::kChat, body);
  EXPECT_NE(e.message.find("UTF-8"), std::string::npos) << e.message;
  // A lone surrogate escape is refused by the JSON parser.
  Bad(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "\ud800"}]})");
}

TEST(OpenAiUtf8, AgreesWithTheDefinition) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));  // é € 😀
  EXPECT_FALSE(IsValidUtf8("\xC3"));                  // truncated
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));              // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));          // surrogate U+D800
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));      // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\x80"));                  // lone continuation
  EXPECT_FALSE(IsValidUtf8("\xFF"));
}

TEST(OpenAiJson, ResponsesHaveOpenAisShape) {
  CompletionInfo info;
  info.id = "chatcmpl-1";
  info.created = 1700000000;
  info.model = "m";
  info.prompt_tokens = 10;
  info.completion_tokens = 4;
  info.cached_tokens = 9;
  json r = json::parse(ResponseJson(Endpoint::kChat, info, "hello", "length"));
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["total_tokens"], 14);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 9);
  json c = json::parse(ResponseJson(Endpoint::kCompletion, info, "hi", "stop"));
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "hi");

  json first = json::parse(ChunkJson(Endpoint::kChat, info, "", true, ""));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  json last = json::parse(ChunkJson(Endpoint::kChat, info, "", false, "stop"));
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  json usage = json::parse(UsageChunkJson(Endpoint::kChat, info));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);

  ApiError e;
  e.status = 404;
  e.message = "no such model";
  e.param = "model";
  e.code = "model_not_found";
  json err = json::parse(ErrorJson(e));
  EXPECT_EQ(err["error"]["message"], "no such model");
  EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  EXPECT_EQ(err["error"]["param"], "model");
  EXPECT_EQ(err["error"]["code"], "model_not_found");
  e.param.clear();
  EXPECT_TRUE(json::parse(ErrorJson(e))["error"]["param"].is_null());
}

TEST(OpenAiJson, BrokenUtf8FromTheModelBecomesReplacementCharacters) {
  CompletionInfo info;
  json r = json::parse(ResponseJson(Endpoint::kCompletion, info, "a\xE2\x82", "length"));
  EXPECT_EQ(r["choices"][0]["text"].get<std::string>().substr(0, 1), "a");
  EXPECT_TRUE(IsValidUtf8(r["choices"][0]["text"].get<std::string>()));
}

}  // namespace
}  // namespace kvtier::server
