// Tool calling (issue 31): which call syntax a chat template teaches its model, the tools a
// request offers, and the model's output parsed into calls.
//
// Formats (DetectToolSyntax reads the template text; docs/results/chat.md lists the shared
// corpus, template by template):
//   kHermes      <tool_call>{"name": ..., "arguments": {...}}</tool_call>   (Hermes, Qwen 2.5/3)
//   kQwen3Coder  <tool_call><function=NAME><parameter=P>V</parameter></function></tool_call>
//                (Qwen3-Coder, Nemotron 3, Step 3.5; Seed-OSS with <seed:tool_call>)
//   kLlama3      {"name": ..., "parameters": {...}}, optionally after <|python_tag|>
//   kMistral     [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]  or
//                [TOOL_CALLS]NAME[ARGS]{...} (Devstral, Ministral 3)
// A template that shows none of them gets kHermes (the most common syntax) with
// recognised = false.
//
// Malformed output stays text: a call block that does not parse leaves the whole output as
// content. Pure functions; a ToolCallStream is one request's (not thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::server {

enum class ToolFormat : uint8_t { kHermes = 0, kQwen3Coder = 1, kLlama3 = 2, kMistral = 3 };
std::string_view ToolFormatName(ToolFormat f);  // "hermes", "qwen3-coder", "llama3", "mistral"

struct ToolSyntax {
  ToolFormat format = ToolFormat::kHermes;
  std::string open = "<tool_call>";  // kHermes / kQwen3Coder block markers
  std::string close = "</tool_call>";
  bool recognised = false;  // the template showed this syntax
};
ToolSyntax DetectToolSyntax(std::string_view template_source);

// One tool a request offers (OpenAI `tools[i].function`, Anthropic `tools[i]`).
struct ToolDef {
  std::string name;
  nlohmann::json parameters = nlohmann::json::object();  // a JSON Schema of the arguments
};

enum class ToolChoice : uint8_t { kAuto = 0, kRequired = 1, kNamed = 2 };

struct ToolRequest {
  std::vector<ToolDef> tools;
  ToolChoice choice = ToolChoice::kAuto;
  std::string named;         // kNamed: the function
  bool parallel = true;      // parallel_tool_calls
  bool constrained = false;  // the server forced the call's wrapper and grammar (kRequired/kNamed)
};

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, compact
};

struct ToolParse {
  std::string content;  // the text outside the calls (trimmed when there are calls)
  std::vector<ToolCall> calls;
};

// Parses a whole completion. `tools` (may be null) types kQwen3Coder's parameter values: a
// parameter whose schema type is "string" stays a string, others are read as JSON when they
// parse.
ToolParse ParseToolCalls(const ToolSyntax& syntax, std::string_view text,
                         const ToolRequest* tools = nullptr);

// Constrained decoding (tool_choice required / named): the text forced at the end of the prompt
// (the call's opening wrapper) and the JSON the model then writes: one call object
// {"name": N, <args key>: {...}} (an array of them for kMistral), each name a const and its
// arguments the tool's parameter schema. ParseConstrained reads that JSON back.
std::string ConstrainedPrefix(const ToolSyntax& syntax);
nlohmann::json ConstrainedSchema(const ToolSyntax& syntax, const ToolRequest& tools);
ToolParse ParseConstrained(const ToolSyntax& syntax, std::string_view json_text);

// One streamed completion: text that cannot start a call is passed on as content at once; from
// the first call marker on, the text is held and parsed at Flush (a marker split across pushes
// is held until it is whole or ruled out).
class ToolCallStream {
 public:
  // With tools->constrained the whole output is the call JSON (ParseConstrained).
  ToolCallStream(ToolSyntax syntax, const ToolRequest* tools);
  // Returns the content that can be sent now.
  std::string Push(std::string_view text);
  // The end: the calls, and any content still held (all of it when the calls are malformed).
  // Without parallel_tool_calls only the first call is kept.
  ToolParse Flush();

 private:
  ToolSyntax syntax_;
  const ToolRequest* tools_;
  bool started_ = false;  // some non-whitespace text came
  bool in_call_ = false;
  std::string held_;
};

// "call_" + 24 random alphanumerics (OpenAI's shape); "toolu_" for Anthropic.
std::string NewToolCallId(std::string_view prefix);

}  // namespace kvtier::server
