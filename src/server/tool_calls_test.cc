// Tool-call syntaxes (issue 31): the detector over the shared template corpus, each format's
// parser (one call, several, text around them, malformed output staying text), the stream
// splitter against the whole-text parser at every split point, the constrained grammar, and
// the request fields' 400s.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "constrain/json_schema.h"
#include "server/tool_request.h"
#include "server/tool_serve.h"

namespace kvtier::server {
namespace {

using nlohmann::json;

ToolSyntax Syntax(ToolFormat f) {
  ToolSyntax s;
  s.format = f;
  s.recognised = true;
  return s;
}

// Arguments compared as JSON values (key order and spacing aside).
void ExpectCall(const ToolCall& c, const std::string& name, const json& args) {
  EXPECT_EQ(c.name, name);
  EXPECT_EQ(json::parse(c.arguments), args) << c.arguments;
}

TEST(ToolSyntaxDetect, SharedCorpus) {
  const std::filesystem::path dir = KVTIER_TEST_CHAT_TEMPLATES;
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no template corpus at " << dir;
  // Which template -> which syntax (docs/results/chat.md has the same table).
  const std::map<std::string, std::string> want = {
      {"Bielik-11B-v3.0-Instruct", "hermes"},
      {"ByteDance-Seed-OSS", "qwen3-coder"},
      {"MiMo-VL", "hermes"},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "qwen3-coder"},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "hermes"},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes"},
      {"Qwen-QwQ-32B", "hermes"},
      {"Qwen-Qwen2.5-7B-Instruct", "hermes"},
      {"Qwen-Qwen3-0.6B", "hermes"},
      {"Reka-Edge", "hermes"},
      {"StepFun3.5-Flash", "qwen3-coder"},
      {"ibm-granite-granite-4.1", "hermes"},
      {"meetkai-functionary-medium-v3.1", "llama3"},
      {"meta-llama-Llama-3.1-8B-Instruct", "llama3"},
      {"meta-llama-Llama-3.2-3B-Instruct", "llama3"},
      {"mistralai-Ministral-3-14B-Reasoning-2512", "mistral"},
      {"mistralai-Mistral-Nemo-Instruct-2407", "mistral"},
      {"unsloth-Apriel-1.5", "hermes"},
      {"unsloth-mistral-Devstral-Small-2507", "mistral"},
  };
  size_t seen = 0, recognised = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    std::ifstream in(entry.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const ToolSyntax s = DetectToolSyntax(ss.str());
    const std::string stem = entry.path().stem().string();
    ++seen;
    auto it = want.find(stem);
    if (it == want.end()) {
      EXPECT_FALSE(s.recognised) << stem << " detected as " << ToolFormatName(s.format);
      EXPECT_EQ(s.format, ToolFormat::kHermes) << stem;  // the fallback
      continue;
    }
    ++recognised;
    EXPECT_TRUE(s.recognised) << stem;
    EXPECT_EQ(ToolFormatName(s.format), it->second) << stem;
    if (stem == "ByteDance-Seed-OSS") {
      EXPECT_EQ(s.open, "<seed:tool_call>");
    }
  }
  EXPECT_EQ(recognised, want.size());
  EXPECT_GE(seen, want.size());
}

TEST(ToolSyntaxDetect, EmptyTemplateFallsBack) {
  const ToolSyntax s = DetectToolSyntax("");
  EXPECT_FALSE(s.recognised);
  EXPECT_EQ(s.format, ToolFormat::kHermes);
}

TEST(ToolCallParse, HermesOneCallWithTextBefore) {
  ToolParse p =
      ParseToolCalls(Syntax(ToolFormat::kHermes),
                     "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                     "{\"city\": \"Paris\", \"days\": 3}}\n</tool_call>");
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.calls.size(), 1u);
  ExpectCall(p.calls[0], "get_weather", {{"city", "Paris"}, {"days", 3}});
}

TEST(ToolCallParse, HermesSeveralCallsAndStringArguments) {
  ToolParse p = ParseToolCalls(
      Syntax(ToolFormat::kHermes),
      "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": [1, 2]}}</tool_call>\n"
      "<tool_call>{\"name\": \"b\", \"arguments\": \"{\\\"y\\\": \\\"é\\\"}\"}</tool_call>\n"
      "<tool_call>{\"name\": \"c\"}");  // the last unclosed: the output ended there
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 3u);
  ExpectCall(p.calls[0], "a", {{"x", {1, 2}}});
  ExpectCall(p.calls[1], "b", {{"y", "é"}});
  ExpectCall(p.calls[2], "c", json::object());
}

TEST(ToolCallParse, HermesMalformedStaysText) {
  for (const char* text : {
           "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": </tool_call>",  // bad JSON
           "<tool_call>{\"arguments\": {}}</tool_call>",                        // no name
           "<tool_call>{\"name\": \"a\", \"arguments\": 5}</tool_call>",        // not an object
           "<tool_call>[1, 2]</tool_call>",
           "ok <tool_call>{\"name\": \"a\"}</tool_call><tool_call>nope</tool_call>",
       }) {
    ToolParse p = ParseToolCalls(Syntax(ToolFormat::kHermes), text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
  ToolParse plain = ParseToolCalls(Syntax(ToolFormat::kHermes), "just an answer");
  EXPECT_TRUE(plain.calls.empty());
  EXPECT_EQ(plain.content, "just an answer");
}

TEST(ToolCallParse, Qwen3CoderXmlTypedByTheSchema) {
  ToolRequest tools;
  tools.tools.push_back({"run", json::parse(R"({"type":"object","properties":{
      "cmd":{"type":"string"},"n":{"type":"integer"},"opts":{"type":"object"}}})")});
  ToolParse p = ParseToolCalls(
      Syntax(ToolFormat::kQwen3Coder),
      "I will run it.\n<tool_call>\n<function=run>\n<parameter=cmd>\n123\n</parameter>\n"
      "<parameter=n>\n7\n</parameter>\n<parameter=opts>\n{\"v\": true}\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=run>\n<parameter=cmd>\nls -l\nmore\n"
      "</parameter>\n</function>\n</tool_call>",
      &tools);
  EXPECT_EQ(p.content, "I will run it.");
  ASSERT_EQ(p.calls.size(), 2u);
  ExpectCall(p.calls[0], "run", {{"cmd", "123"}, {"n", 7}, {"opts", {{"v", true}}}});
  ExpectCall(p.calls[1], "run", {{"cmd", "ls -l\nmore"}});
  // Seed-OSS's markers.
  ToolSyntax seed = Syntax(ToolFormat::kQwen3Coder);
  seed.open = "<seed:tool_call>";
  seed.close = "</seed:tool_call>";
  ToolParse s = ParseToolCalls(seed,
                               "<seed:tool_call>\n<function=f>\n<parameter=a>x</parameter>\n"
                               "</function>\n</seed:tool_call>");
  ASSERT_EQ(s.calls.size(), 1u);
  ExpectCall(s.calls[0], "f", {{"a", "x"}});
  // Malformed: no function, text after </function>, an empty name.
  for (const char* text : {"<tool_call>\n<parameter=a>1</parameter>\n</tool_call>",
                           "<tool_call><function=f></function>junk</tool_call>",
                           "<tool_call><function=>\n</function></tool_call>"}) {
    ToolParse bad = ParseToolCalls(Syntax(ToolFormat::kQwen3Coder), text);
    EXPECT_TRUE(bad.calls.empty()) << text;
    EXPECT_EQ(bad.content, text);
  }
}

TEST(ToolCallParse, Llama3JsonAndPythonTag) {
  ToolParse p = ParseToolCalls(Syntax(ToolFormat::kLlama3),
                               " {\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}");
  ASSERT_EQ(p.calls.size(), 1u);
  ExpectCall(p.calls[0], "get_time", {{"tz", "UTC"}});
  ToolParse t =
      ParseToolCalls(Syntax(ToolFormat::kLlama3),
                     "Sure<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", "
                     "\"parameters\": {\"k\": 1}}");
  EXPECT_EQ(t.content, "Sure");
  ASSERT_EQ(t.calls.size(), 2u);
  ExpectCall(t.calls[1], "b", {{"k", 1}});
  for (const char* text : {"{\"answer\": 42}", "{\"name\": \"a\", \"parameters\": {",
                           "The JSON is {\"name\": \"a\"}"}) {
    ToolParse bad = ParseToolCalls(Syntax(ToolFormat::kLlama3), text);
    EXPECT_TRUE(bad.calls.empty()) << text;
    EXPECT_EQ(bad.content, text);
  }
}

TEST(ToolCallParse, MistralBothShapes) {
  ToolParse p =
      ParseToolCalls(Syntax(ToolFormat::kMistral),
                     "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", "
                     "\"arguments\": {}}]");
  ASSERT_EQ(p.calls.size(), 2u);
  ExpectCall(p.calls[0], "a", {{"x", 1}});
  ExpectCall(p.calls[1], "b", json::object());
  ToolParse d = ParseToolCalls(Syntax(ToolFormat::kMistral),
                               "Checking.[TOOL_CALLS]search[ARGS]{\"q\": \"kv cache\"}"
                               "[TOOL_CALLS]open[ARGS]{\"id\": 3}");
  EXPECT_EQ(d.content, "Checking.");
  ASSERT_EQ(d.calls.size(), 2u);
  ExpectCall(d.calls[0], "search", {{"q", "kv cache"}});
  ExpectCall(d.calls[1], "open", {{"id", 3}});
  for (const char* text : {"[TOOL_CALLS][{\"name\": \"a\"", "[TOOL_CALLS]f[ARGS]nope",
                           "[TOOL_CALLS]", "[TOOL_CALLS][{\"x\": 1}]"}) {
    ToolParse bad = ParseToolCalls(Syntax(ToolFormat::kMistral), text);
    EXPECT_TRUE(bad.calls.empty()) << text;
    EXPECT_EQ(bad.content, text);
  }
}

// The stream at every split point gives what the whole-text parser gives: the content streamed
// plus the flushed content, and the same calls.
TEST(ToolCallStreamTest, EverySplitMatchesTheWholeParse) {
  const std::vector<std::pair<ToolFormat, std::string>> cases = {
      {ToolFormat::kHermes,
       "Let me look <tool> up.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n"
       "</tool_call>"},
      {ToolFormat::kHermes, "no calls here, only a < sign"},
      {ToolFormat::kHermes, "<tool_call>{\"name\": broken}</tool_call>"},
      {ToolFormat::kQwen3Coder,
       "x\n<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"},
      {ToolFormat::kLlama3, "  {\"name\": \"f\", \"parameters\": {\"a\": 1}}"},
      {ToolFormat::kLlama3, "Hi<|python_tag|>{\"name\": \"f\", \"parameters\": {}}"},
      {ToolFormat::kMistral, "ok[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}}]"},
  };
  for (const auto& [format, text] : cases) {
    const ToolParse whole = ParseToolCalls(Syntax(format), text);
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      for (size_t cut2 = cut; cut2 <= text.size(); cut2 += 7) {
        ToolCallStream s(Syntax(format), nullptr);
        std::string content = s.Push(text.substr(0, cut));
        content += s.Push(text.substr(cut, cut2 - cut));
        content += s.Push(text.substr(cut2));
        ToolParse end = s.Flush();
        ASSERT_EQ(end.calls.size(), whole.calls.size()) << text << " cut " << cut;
        for (size_t i = 0; i < whole.calls.size(); ++i) {
          EXPECT_EQ(end.calls[i].name, whole.calls[i].name);
          EXPECT_EQ(end.calls[i].arguments, whole.calls[i].arguments);
        }
        if (whole.calls.empty()) {
          EXPECT_EQ(content + end.content, text) << "cut " << cut;
        } else {
          // Text before the call streams as it comes (its whitespace kept).
          EXPECT_EQ(std::string(content.begin(),
                                content.begin() + static_cast<long>(std::min(
                                                      content.size(), whole.content.size()))),
                    whole.content.substr(0, content.size()));
        }
      }
    }
  }
}

TEST(ToolCallStreamTest, WithoutParallelCallsOnlyTheFirstIsKept) {
  ToolRequest tools;
  tools.parallel = false;
  ToolCallStream s(Syntax(ToolFormat::kHermes), &tools);
  EXPECT_EQ(s.Push("<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}"
                   "</tool_call>"),
            "");
  ToolParse p = s.Flush();
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "a");
}

TEST(ToolCallStreamTest, ContentBeforeAMarkerIsNotHeldLonger) {
  ToolCallStream s(Syntax(ToolFormat::kHermes), nullptr);
  EXPECT_EQ(s.Push("Hello wor"), "Hello wor");
  EXPECT_EQ(s.Push("ld <tool"), "ld ");  // "<tool" may begin the marker
  EXPECT_EQ(s.Push("box>"), "<toolbox>");
  EXPECT_EQ(s.Push(" <tool_call>{\"name\": \"f\"}"), " ");
  ToolParse p = s.Flush();
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "f");
}

TEST(ToolConstrained, GrammarAcceptsExactlyTheToolsCalls) {
  ToolRequest tools;
  tools.tools.push_back({"get_weather", json::parse(R"({"type":"object","properties":{
      "city":{"type":"string"}},"required":["city"],"additionalProperties":false})")});
  tools.tools.push_back({"noop", json::object()});
  tools.choice = ToolChoice::kRequired;
  for (ToolFormat f : {ToolFormat::kHermes, ToolFormat::kLlama3, ToolFormat::kMistral}) {
    const ToolSyntax s = Syntax(f);
    auto g = constrain::CompileJsonSchema(ConstrainedSchema(s, tools));
    ASSERT_TRUE(g.ok()) << g.status().message();
    const char* key = f == ToolFormat::kLlama3 ? "parameters" : "arguments";
    json good = {{"name", "get_weather"}, {key, {{"city", "Oslo"}}}};
    json noop = {{"name", "noop"}, {key, {{"anything", 1}}}};
    json bad_name = {{"name", "other"}, {key, json::object()}};
    json bad_args = {{"name", "get_weather"}, {key, {{"town", "Oslo"}}}};
    auto accepts = [&](const json& call) {
      const json v = f == ToolFormat::kMistral ? json::array({call}) : call;
      constrain::JsonMatcher m(*g);
      return m.Feed(v.dump()) && m.CanEnd();
    };
    EXPECT_TRUE(accepts(good)) << ToolFormatName(f);
    EXPECT_TRUE(accepts(noop)) << ToolFormatName(f);
    EXPECT_FALSE(accepts(bad_name)) << ToolFormatName(f);
    EXPECT_FALSE(accepts(bad_args)) << ToolFormatName(f);
    const std::string text = f == ToolFormat::kMistral ? json::array({good}).dump() : good.dump();
    ToolParse p = ParseConstrained(s, text);
    ASSERT_EQ(p.calls.size(), 1u);
    ExpectCall(p.calls[0], "get_weather", {{"city", "Oslo"}});
  }
  // Named: only that tool.
  tools.choice = ToolChoice::kNamed;
  tools.named = "noop";
  auto g = constrain::CompileJsonSchema(ConstrainedSchema(Syntax(ToolFormat::kHermes), tools));
  ASSERT_TRUE(g.ok());
  constrain::JsonMatcher m(*g);
  EXPECT_FALSE(m.Feed(R"({"name": "get_weather")"));
  EXPECT_EQ(ConstrainedPrefix(Syntax(ToolFormat::kHermes)), "<tool_call>\n");
  EXPECT_EQ(ConstrainedPrefix(Syntax(ToolFormat::kMistral)), "[TOOL_CALLS]");
}

bool ParseTools(const std::string& body, ApiRequest* r, ApiError* e) {
  return ParseOpenAiTools(json::parse(body), r, e);
}

TEST(ToolRequestParse, BadFieldsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"tools": {}})", "tools"},
      {R"({"tools": [{"type": "retrieval"}]})", "tools[0].type"},
      {R"({"tools": [{"type": "function"}]})", "tools[0].function"},
      {R"({"tools": [{"type": "function", "function": {"description": "x"}}]})",
       "tools[0].function.name"},
      {R"({"tools": [{"type": "function", "function": {"name": "a b"}}]})",
       "tools[0].function.name"},
      {R"({"tools": [{"type": "function", "function": {"name": "a", "parameters": [1]}}]})",
       "tools[0].function.parameters"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}},
                     {"type": "function", "function": {"name": "b", "parameters":
                      {"type": "object", "patternProperties": {}}}}], "tool_choice": "required"})",
       "tools[1].function.parameters"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}},
                     {"type": "function", "function": {"name": "a"}}]})",
       "tools[1].function.name"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "any"})",
       "tool_choice"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": 3})",
       "tool_choice"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}],
           "tool_choice": {"type": "function", "function": {"name": "b"}}})",
       "tool_choice.function.name"},
      {R"({"tool_choice": "required"})", "tool_choice"},
      {R"({"tools": [], "parallel_tool_calls": "yes"})", "parallel_tool_calls"},
  };
  for (const auto& [body, param] : cases) {
    ApiRequest r;
    ApiError e;
    EXPECT_FALSE(ParseTools(body, &r, &e)) << body;
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, param) << body << " -> " << e.message;
    EXPECT_NE(e.message.find(param), std::string::npos) << e.message;
  }
}

TEST(ToolRequestParse, AutoAcceptsSchemasTheGrammarCannotForce) {
  const std::string tools = R"({"tools": [{"type": "function", "function": {"name": "a",
      "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}}}])";
  ApiRequest r;
  ApiError e;
  EXPECT_TRUE(ParseTools(tools + "}", &r, &e)) << e.message;
  r = {};
  EXPECT_FALSE(ParseTools(tools + R"(, "tool_choice": "required"})", &r, &e));
  EXPECT_EQ(e.param, "tools[0].function.parameters");
  EXPECT_NE(e.message.find("minimum"), std::string::npos) << e.message;
}

TEST(ToolRequestParse, ChoicesAndHistory) {
  ApiRequest r;
  ApiError e;
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "a",
      "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}])";
  ASSERT_TRUE(ParseTools("{" + tools + "}", &r, &e)) << e.message;
  ASSERT_TRUE(r.tools);
  EXPECT_EQ(r.tools->choice, ToolChoice::kAuto);
  r = {};
  ASSERT_TRUE(ParseTools("{" + tools + R"(, "tool_choice": "none"})", &r, &e));
  EXPECT_FALSE(r.tools);  // none: nothing rendered or parsed
  r = {};
  ASSERT_TRUE(ParseTools("{" + tools +
                             R"(, "tool_choice": {"type": "function", "function": {"name": "a"}},
                                "parallel_tool_calls": false})",
                         &r, &e));
  ASSERT_TRUE(r.tools);
  EXPECT_EQ(r.tools->choice, ToolChoice::kNamed);
  EXPECT_FALSE(r.tools->parallel);
  ASSERT_TRUE(PrepareToolRequest(Syntax(ToolFormat::kHermes), &r, &e));
  EXPECT_TRUE(r.tools->constrained);
  EXPECT_EQ(r.prompt_suffix, "<tool_call>\n");
  ASSERT_TRUE(r.json_grammar);

  const json ok = json::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "a", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "2"}])");
  EXPECT_TRUE(CheckToolHistory(ok, &e)) << e.message;
  json orphan = ok;
  orphan[2]["tool_call_id"] = "call_9";
  EXPECT_FALSE(CheckToolHistory(orphan, &e));
  EXPECT_EQ(e.param, "messages[2].tool_call_id");
  json no_args = ok;
  no_args[1]["tool_calls"][0]["function"].erase("arguments");
  EXPECT_FALSE(CheckToolHistory(no_args, &e));
  EXPECT_EQ(e.param, "messages[1].tool_calls[0].function.arguments");

  // The template sees the arguments as an object.
  Result<jinja::Value> msg = jinja::ParseJson(ok[1].dump());
  ASSERT_TRUE(msg.ok());
  const jinja::Value t = TemplateMessage(*msg);
  const jinja::Value* args = t.Find("tool_calls")->items()[0].Find("function")->Find("arguments");
  ASSERT_TRUE(args->is_dict());
  EXPECT_EQ(args->Find("x")->as_int(), 1);
}

}  // namespace
}  // namespace kvtier::server
