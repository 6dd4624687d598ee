// Tool calling through HTTP (issue 31) on a test GGUF carrying a real tool-capable template from
// the shared corpus (Qwen 2.5: Hermes <tool_call> JSON): the tools and the history's tool calls
// reach the template (arguments as objects), tool_choice required / named always give calls that
// parse and validate against the tool's schema (non-streaming, and streaming reassembled from
// delta.tool_calls), "auto" / "none" answer text, and bad tool fields are 400s naming the field,
// after which no KV block stays taken.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "constrain/json_validate_test_util.h"
#include "kvtier/chat_template.h"
#include "kvtier/engine.h"
#include "kvtier/gguf.h"
#include "kvtier/model.h"
#include "kvtier/server.h"
#include "kvtier/test_model.h"
#include "kvtier/tokenizer.h"
#include "server/server_test_util.h"
#include "test_model/test_model_test_util.h"

namespace kvtier {
namespace {

using nlohmann::json;

std::string ReadTemplate(const std::string& name) {
  std::ifstream in(std::string(KVTIER_TEST_CHAT_TEMPLATES) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The tiny test model carrying chat template `tmpl`, written to a file of this process's
// (removed when this goes).
struct ToolModelFile {
  explicit ToolModelFile(const std::string& tmpl) {
    path = "/tmp/kvtier_server_tools_" + std::to_string(::getpid()) + ".gguf";
    TestModelConfig c = testing::TinyF32ModelConfig();
    c.ctx = 4096;
    Result<GgufWriter> w = BuildTestModel(c);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    w->SetString("tokenizer.chat_template", tmpl);
    EXPECT_TRUE(w->WriteFile(path).ok());
  }
  ~ToolModelFile() { std::remove(path.c_str()); }

  std::string path;
};

// That model served as "tools" over 1024 blocks, no dashboard, clients waiting 120 s.
struct ToolServed : ToolModelFile, testing::ModelFileServer {
  explicit ToolServed(const std::string& tmpl)
      : ToolModelFile(tmpl), ModelFileServer(path, "tools", Options()) {}
  static testing::ModelFileServerOptions Options() {
    testing::ModelFileServerOptions o;
    o.pool_blocks = 1024;
    o.server.dashboard = false;
    o.read_timeout_s = 120;
    return o;
  }
  httplib::Result Post(const json& body) const {
    return PostJson("/v1/chat/completions", body);
  }
};

const json kWeatherParams = json::parse(R"({"type":"object","properties":{
    "city":{"type":"string","maxLength":10},"days":{"type":"integer"},
    "unit":{"enum":["c","f"]}},"required":["city","days","unit"],"additionalProperties":false})");
const json kNoopParams =
    json::parse(R"({"type":"object","properties":{},"additionalProperties":false})");

json Tools() {
  return json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "get_weather"},
          {"description", "Weather by city"},
          {"parameters", kWeatherParams}}}},
       {{"type", "function"},
        {"function",
         {{"name", "noop"}, {"description", "Nothing"}, {"parameters", kNoopParams}}}}});
}

json Body() {
  return json{{"messages", json::array({{{"role", "user"}, {"content", "Weather in Oslo?"}}})},
              {"tools", Tools()},
              {"max_tokens", 240}};
}

// Checks one call's shape and that its arguments validate against its tool's schema.
void ExpectValidCall(const json& call, const std::string& want_name = "") {
  ASSERT_TRUE(call["id"].is_string());
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u) << call;
  EXPECT_EQ(call["type"], "function");
  const std::string name = call["function"]["name"];
  if (!want_name.empty()) {
    EXPECT_EQ(name, want_name);
  }
  ASSERT_TRUE(name == "get_weather" || name == "noop") << name;
  ASSERT_TRUE(call["function"]["arguments"].is_string()) << call;
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  const json& schema = name == "noop" ? kNoopParams : kWeatherParams;
  EXPECT_TRUE(constrain::testing::ValidateJson(schema, args, schema)) << args;
}

TEST(ServerTools, RequiredAndNamedAlwaysParse) {
  const std::string tmpl = ReadTemplate("Qwen-Qwen2.5-7B-Instruct.jinja");
  if (tmpl.empty()) GTEST_SKIP() << "no template corpus at " << KVTIER_TEST_CHAT_TEMPLATES;
  ToolServed s(tmpl);
  for (int seed = 0; seed < 6; ++seed) {
    json body = Body();
    body["seed"] = seed;
    body["temperature"] = seed == 0 ? 0.0 : 1.0;
    body["tool_choice"] = "required";
    if (seed % 2 == 1) {
      body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
    }
    httplib::Result r = s.Post(body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json out = json::parse(r->body);
    const json& choice = out["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << r->body;
    EXPECT_TRUE(choice["message"]["content"].is_null()) << r->body;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r->body;
    ExpectValidCall(choice["message"]["tool_calls"][0], seed % 2 == 1 ? "get_weather" : "");
  }
  EXPECT_EQ(s.pool->TotalRefs(), 0u);
}

// The other JSON syntaxes: Llama 3.1 (a bare {"name", "parameters"} object, no wrapper) and
// Mistral Nemo ([TOOL_CALLS] and an array of calls) under the same forced decoding.
TEST(ServerTools, RequiredParsesWithLlama3AndMistralTemplates) {
  for (const char* name :
       {"meta-llama-Llama-3.1-8B-Instruct.jinja", "mistralai-Mistral-Nemo-Instruct-2407.jinja"}) {
    const std::string tmpl = ReadTemplate(name);
    if (tmpl.empty()) GTEST_SKIP() << "no template corpus";
    ToolServed s(tmpl);
    for (int seed = 0; seed < 3; ++seed) {
      json body = Body();
      body["seed"] = seed;
      body["tool_choice"] = "required";
      body["parallel_tool_calls"] = false;
      httplib::Result r = s.Post(body);
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << name << ": " << r->body;
      const json out = json::parse(r->body);
      const json& choice = out["choices"][0];
      EXPECT_EQ(choice["finish_reason"], "tool_calls") << name << ": " << r->body;
      ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << name << ": " << r->body;
      ExpectValidCall(choice["message"]["tool_calls"][0]);
    }
    EXPECT_EQ(s.pool->TotalRefs(), 0u);
  }
}

// The SSE stream's chunks, reassembled as the openai client does.
struct Reassembled {
  std::string content;
  json calls = json::array();
  std::string finish;
  bool id_and_name_first = true;
};

Reassembled Stream(const ToolServed& s, const json& body) {
  httplib::Result r = s.Post(body);
  Reassembled out;
  EXPECT_TRUE(r);
  if (!r) return out;
  EXPECT_EQ(r->status, 200) << r->body;
  std::istringstream lines(r->body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
    const json chunk = json::parse(line.substr(6));
    if (chunk["choices"].empty()) continue;
    const json& c = chunk["choices"][0];
    if (c["finish_reason"].is_string()) out.finish = c["finish_reason"];
    const json& d = c["delta"];
    if (d.contains("content") && d["content"].is_string())
      out.content += d["content"].get<std::string>();
    if (!d.contains("tool_calls")) continue;
    for (const json& tc : d["tool_calls"]) {
      const size_t i = tc["index"];
      if (i >= out.calls.size()) {
        if (!tc.contains("id") || !tc["function"].contains("name")) out.id_and_name_first = false;
        out.calls.push_back(
            {{"id", tc.value("id", "")},
             {"type", tc.value("type", "")},
             {"function", {{"name", tc["function"].value("name", "")}, {"arguments", ""}}}});
      }
      out.calls[i]["function"]["arguments"] =
          out.calls[i]["function"]["arguments"].get<std::string>() +
          tc["function"].value("arguments", "");
    }
  }
  return out;
}

TEST(ServerTools, StreamedCallsReassemble) {
  const std::string tmpl = ReadTemplate("Qwen-Qwen2.5-7B-Instruct.jinja");
  if (tmpl.empty()) GTEST_SKIP() << "no template corpus";
  ToolServed s(tmpl);
  for (int seed = 0; seed < 3; ++seed) {
    json body = Body();
    body["stream"] = true;
    body["seed"] = seed;
    body["tool_choice"] = "required";
    Reassembled r = Stream(s, body);
    EXPECT_EQ(r.finish, "tool_calls");
    EXPECT_EQ(r.content, "");
    EXPECT_TRUE(r.id_and_name_first);
    ASSERT_EQ(r.calls.size(), 1u);
    ExpectValidCall(r.calls[0]);
  }
  // auto on the tiny model: text, streamed as content; no call unless one parsed.
  json body = Body();
  body["stream"] = true;
  body["temperature"] = 0;
  body["max_tokens"] = 16;
  Reassembled a = Stream(s, body);
  EXPECT_TRUE(a.finish == "length" || a.finish == "stop" || a.finish == "tool_calls") << a.finish;
  if (a.finish != "tool_calls") {
    EXPECT_TRUE(a.calls.empty());
  }
  EXPECT_EQ(s.pool->TotalRefs(), 0u);
}

TEST(ServerTools, ToolsAndHistoryReachTheTemplate) {
  const std::string tmpl = ReadTemplate("Qwen-Qwen2.5-7B-Instruct.jinja");
  if (tmpl.empty()) GTEST_SKIP() << "no template corpus";
  ToolServed s(tmpl);
  const json history = json::parse(R"([
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"days\": 1, \"unit\": \"c\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 4 C"},
      {"role": "user", "content": "And tomorrow?"}])");
  json body = Body();
  body["messages"] = history;
  body["max_tokens"] = 1;
  httplib::Result r = s.Post(body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  // The expected prompt: the template rendered with the tools and the arguments as an object.
  json expect_msgs = history;
  expect_msgs[1]["tool_calls"][0]["function"]["arguments"] =
      json{{"city", "Oslo"}, {"days", 1}, {"unit", "c"}};
  ChatRenderer renderer = ChatRenderer::ForTokenizer(*s.tokenizer);
  ChatRenderInput in;
  in.messages = jinja::ParseJson(expect_msgs.dump()).value();
  in.tools = jinja::ParseJson(Tools().dump()).value();
  const std::string text = renderer.Render(in).value();
  EXPECT_NE(text.find("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\""),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<tool_response>\nsunny, 4 C\n</tool_response>"), std::string::npos);
  EXPECT_NE(text.find("\"name\": \"noop\""), std::string::npos);  // the tool list
  const size_t want =
      s.tokenizer->Encode(text, renderer.AddBos(s.tokenizer->add_bos_default(), text), true).size();
  EXPECT_EQ(json::parse(r->body)["usage"]["prompt_tokens"].get<size_t>(), want);
  // tool_choice none: the tools are not rendered.
  body["tool_choice"] = "none";
  r = s.Post(body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_LT(json::parse(r->body)["usage"]["prompt_tokens"].get<size_t>(), want);
}

TEST(ServerTools, BadToolFieldsAre400sAndLeakNothing) {
  const std::string tmpl = ReadTemplate("Qwen-Qwen2.5-7B-Instruct.jinja");
  if (tmpl.empty()) GTEST_SKIP() << "no template corpus";
  ToolServed s(tmpl);
  std::vector<std::pair<json, std::string>> cases;
  json b = Body();
  b["tools"][0]["function"].erase("name");
  cases.push_back({b, "tools[0].function.name"});
  b = Body();
  b["tools"][1]["function"]["parameters"] = "object";
  cases.push_back({b, "tools[1].function.parameters"});
  b = Body();
  b["tools"][0]["function"]["parameters"]["properties"]["city"]["type"] = "text";
  b["tool_choice"] = "required";  // auto only renders the schema
  cases.push_back({b, "tools[0].function.parameters"});
  b = Body();
  b["tool_choice"] = "sometimes";
  cases.push_back({b, "tool_choice"});
  b = Body();
  b["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_404"}, {"content", "x"}});
  cases.push_back({b, "messages[1].tool_call_id"});
  for (const auto& [body, param] : cases) {
    httplib::Result r = s.Post(body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    const json e = json::parse(r->body);
    EXPECT_EQ(e["error"]["param"], param) << r->body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(param), std::string::npos) << r->body;
  }
  // Still serving; nothing taken.
  json ok = Body();
  ok["max_tokens"] = 2;
  httplib::Result r = s.Post(ok);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(s.pool->TotalRefs(), 0u);
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

json AnthropicBody() {
  return json{
      {"model", "claude-test"},
      {"max_tokens", 240},
      {"messages", json::array({{{"role", "user"}, {"content", "Weather in Oslo?"}}})},
      {"tools",
       json::array(
           {{{"name", "get_weather"}, {"description", "Weather"}, {"input_schema", kWeatherParams}},
            {{"name", "noop"}, {"input_schema", kNoopParams}}})}};
}

httplib::Result PostMessages(const ToolServed& s, const json& body) {
  return s.PostJson("/v1/messages", body);
}

TEST(ServerToolsAnthropic, AnyAndNamedToolUse) {
  const std::string tmpl = ReadTemplate("Qwen-Qwen2.5-7B-Instruct.jinja");
  if (tmpl.empty()) GTEST_SKIP() << "no template corpus";
  ToolServed s(tmpl);
  for (int i = 0; i < 4; ++i) {
    json body = AnthropicBody();
    body["tool_choice"] =
        i % 2 ? json{{"type", "tool"}, {"name", "get_weather"}} : json{{"type", "any"}};
    httplib::Result r = PostMessages(s, body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json m = json::parse(r->body);
    EXPECT_EQ(m["stop_reason"], "tool_use") << r->body;
    const json& block = m["content"].back();
    ASSERT_EQ(block["type"], "tool_use") << r->body;
    EXPECT_EQ(block["id"].get<std::string>().rfind("toolu_", 0), 0u);
    const std::string name = block["name"];
    if (i % 2) {
      EXPECT_EQ(name, "get_weather");
    }
    const json& schema = name == "noop" ? kNoopParams : kWeatherParams;
    EXPECT_TRUE(constrain::testing::ValidateJson(schema, block["input"], schema)) << block;
  }
  // Streamed: a tool_use block started with its id and name, input_json_delta pieces that
  // join to its input, then message_delta with stop_reason tool_use.
  json body = AnthropicBody();
  body["tool_choice"] = {{"type", "any"}};
  body["stream"] = true;
  httplib::Result r = PostMessages(s, body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::istringstream lines(r->body);
  std::string line, partial, stop_reason, name;
  size_t tool_index = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("data: ", 0) != 0) continue;
    const json ev = json::parse(line.substr(6));
    if (ev["type"] == "content_block_start" && ev["content_block"]["type"] == "tool_use") {
      tool_index = ev["index"];
      name = ev["content_block"]["name"];
      EXPECT_EQ(ev["content_block"]["id"].get<std::string>().rfind("toolu_", 0), 0u);
      EXPECT_EQ(ev["content_block"]["input"], json::object());
    } else if (ev["type"] == "content_block_delta" && ev["delta"]["type"] == "input_json_delta") {
      EXPECT_EQ(ev["index"], tool_index);
      partial += ev["delta"]["partial_json"].get<std::string>();
    } else if (ev["type"] == "message_delta") {
      stop_reason = ev["delta"]["stop_reason"];
    }
  }
  EXPECT_EQ(stop_reason, "tool_use");
  ASSERT_FALSE(name.empty()) << r->body;
  const json& schema = name == "noop" ? kNoopParams : kWeatherParams;
  EXPECT_TRUE(constrain::testing::ValidateJson(schema, json::parse(partial), schema)) << partial;

  // History: tool_use / tool_result blocks reach the template as tool calls and tool messages.
  json hist = AnthropicBody();
  hist["max_tokens"] = 1;
  hist["messages"].push_back(
      {{"role", "assistant"},
       {"content", json::array({{{"type", "tool_use"},
                                 {"id", "toolu_1"},
                                 {"name", "get_weather"},
                                 {"input", {{"city", "Oslo"}, {"days", 1}, {"unit", "c"}}}}})}});
  hist["messages"].push_back({{"role", "user"},
                              {"content", json::array({{{"type", "tool_result"},
                                                        {"tool_use_id", "toolu_1"},
                                                        {"content", "sunny, 4 C"}}})}});
  httplib::Result counted = s.PostJson("/v1/messages/count_tokens", hist);
  ASSERT_TRUE(counted);
  ASSERT_EQ(counted->status, 200) << counted->body;
  json oai = Body();
  oai["max_tokens"] = 1;
  oai["messages"] = json::parse(R"([
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "toolu_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\",\"days\":1,\"unit\":\"c\"}"}}]},
      {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny, 4 C"}])");
  oai["tools"][1]["function"].erase("description");
  oai["tools"][0]["function"]["description"] = "Weather";
  httplib::Result o = s.Post(oai);
  ASSERT_TRUE(o);
  ASSERT_EQ(o->status, 200) << o->body;
  EXPECT_EQ(json::parse(counted->body)["input_tokens"],
            json::parse(o->body)["usage"]["prompt_tokens"]);
  EXPECT_EQ(s.pool->TotalRefs(), 0u);
}

}  // namespace
}  // namespace kvtier
