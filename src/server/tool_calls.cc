// Tool-call syntaxes, parsing and streaming: see tool_calls.h.
#include "server/tool_calls.h"

#include <algorithm>
#include <random>

namespace kvtier::server {
namespace {

using nlohmann::json;

constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// The end (one past) of the JSON object or array starting at s[from] ('{' or '['), by bracket
// depth outside strings; npos when it does not close.
size_t JsonValueEnd(std::string_view s, size_t from) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{' || c == '[')
      ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

bool ParseJson(std::string_view s, json* out) {
  *out = json::parse(s, nullptr, /*allow_exceptions=*/false);
  return !out->is_discarded();
}

// Arguments given as an object, or as a string holding one (OpenAI's wire shape).
bool ArgumentsText(const json& args, std::string* out) {
  if (args.is_object()) {
    *out = args.dump(-1, ' ', false, json::error_handler_t::replace);
    return true;
  }
  if (args.is_string()) {
    json parsed;
    if (!ParseJson(args.get<std::string>(), &parsed) || !parsed.is_object()) return false;
    *out = parsed.dump(-1, ' ', false, json::error_handler_t::replace);
    return true;
  }
  return false;
}

// {"name": N, "arguments" | "parameters": {...}} (either key; none: no arguments).
bool CallFromJson(const json& j, ToolCall* out) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  out->name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end() || args->is_null()) {
    out->arguments = "{}";
    return true;
  }
  return ArgumentsText(*args, &out->arguments);
}

const json* ParameterSchema(const ToolRequest* tools, const std::string& fn,
                            const std::string& param) {
  if (tools == nullptr) return nullptr;
  for (const ToolDef& t : tools->tools) {
    if (t.name != fn) continue;
    auto props = t.parameters.find("properties");
    if (props == t.parameters.end() || !props->is_object()) return nullptr;
    auto p = props->find(param);
    return p == props->end() ? nullptr : &*p;
  }
  return nullptr;
}

// <function=NAME><parameter=P>\nV\n</parameter>...</function>
bool ParseXmlFunction(std::string_view body, const ToolRequest* tools, ToolCall* out) {
  body = Trim(body);
  constexpr std::string_view kFn = "<function=";
  if (body.substr(0, kFn.size()) != kFn) return false;
  const size_t gt = body.find('>');
  if (gt == std::string_view::npos) return false;
  out->name = std::string(Trim(body.substr(kFn.size(), gt - kFn.size())));
  if (out->name.empty()) return false;
  std::string_view rest = body.substr(gt + 1);
  const size_t fn_end = rest.find("</function>");
  if (fn_end != std::string_view::npos) {
    if (!Trim(rest.substr(fn_end + 11)).empty()) return false;
    rest = rest.substr(0, fn_end);
  }
  json args = json::object();
  constexpr std::string_view kParam = "<parameter=";
  for (;;) {
    rest = Trim(rest);
    if (rest.empty()) break;
    if (rest.substr(0, kParam.size()) != kParam) return false;
    const size_t pgt = rest.find('>');
    if (pgt == std::string_view::npos) return false;
    const std::string pname(Trim(rest.substr(kParam.size(), pgt - kParam.size())));
    if (pname.empty()) return false;
    rest = rest.substr(pgt + 1);
    size_t vend = rest.find("</parameter>");
    size_t next = vend == std::string_view::npos ? std::string_view::npos : vend + 12;
    if (vend == std::string_view::npos) {  // an unclosed last parameter, or the next one
      vend = std::min(rest.find(kParam), rest.size());
      next = vend;
    }
    std::string_view v = rest.substr(0, vend);
    if (!v.empty() && v.front() == '\n') v.remove_prefix(1);
    if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
    const json* schema = ParameterSchema(tools, out->name, pname);
    const bool is_string = schema != nullptr && schema->is_object() &&
                           schema->value("type", json()).is_string() &&
                           (*schema)["type"].get<std::string>() == "string";
    json parsed;
    if (!is_string && ParseJson(v, &parsed))
      args[pname] = parsed;
    else
      args[pname] = std::string(v);
    rest = next >= rest.size() ? std::string_view() : rest.substr(next);
  }
  out->arguments = args.dump(-1, ' ', false, json::error_handler_t::replace);
  return true;
}

// Blocks between syntax.open and syntax.close (the last may be unclosed at the end).
ToolParse ParseBlocks(const ToolSyntax& syntax, std::string_view text, const ToolRequest* tools) {
  ToolParse out;
  size_t pos = text.find(syntax.open);
  if (pos == std::string_view::npos) return {std::string(text), {}};
  std::string content(text.substr(0, pos));
  while (pos != std::string_view::npos) {
    const size_t start = pos + syntax.open.size();
    const size_t end = text.find(syntax.close, start);
    const std::string_view body =
        text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    ToolCall call;
    json j;
    const bool ok = syntax.format == ToolFormat::kQwen3Coder
                        ? ParseXmlFunction(body, tools, &call)
                        : ParseJson(Trim(body), &j) && CallFromJson(j, &call);
    if (!ok) return {std::string(text), {}};
    out.calls.push_back(std::move(call));
    if (end == std::string_view::npos) break;
    const size_t after = end + syntax.close.size();
    pos = text.find(syntax.open, after);
    content +=
        text.substr(after, pos == std::string_view::npos ? std::string_view::npos : pos - after);
  }
  out.content = std::string(Trim(content));
  return out;
}

// JSON call objects one after another (separated by whitespace, ';' or ','), or one array.
bool ParseJsonCalls(std::string_view body, std::vector<ToolCall>* calls) {
  body = Trim(body);
  if (body.empty()) return false;
  while (!body.empty()) {
    if (body.front() != '{' && body.front() != '[') return false;
    const size_t end = JsonValueEnd(body, 0);
    if (end == std::string_view::npos) return false;
    json j;
    if (!ParseJson(body.substr(0, end), &j)) return false;
    if (j.is_array()) {
      if (j.empty()) return false;
      for (const json& item : j) {
        ToolCall c;
        if (!CallFromJson(item, &c)) return false;
        calls->push_back(std::move(c));
      }
    } else {
      ToolCall c;
      if (!CallFromJson(j, &c)) return false;
      calls->push_back(std::move(c));
    }
    body = body.substr(end);
    while (!body.empty() && (IsSpace(body.front()) || body.front() == ';' || body.front() == ',')) {
      body.remove_prefix(1);
    }
  }
  return true;
}

ToolParse ParseLlama3(std::string_view text) {
  std::string_view content, body;
  if (const size_t tag = text.find(kPythonTag); tag != std::string_view::npos) {
    content = text.substr(0, tag);
    body = text.substr(tag + kPythonTag.size());
  } else if (!Trim(text).empty() && Trim(text).front() == '{') {
    body = text;
  } else {
    return {std::string(text), {}};
  }
  ToolParse out;
  if (!ParseJsonCalls(body, &out.calls)) return {std::string(text), {}};
  out.content = std::string(Trim(content));
  return out;
}

// [TOOL_CALLS][{...}] or [TOOL_CALLS]NAME[ARGS]{...} (repeated, each after its own marker).
ToolParse ParseMistral(std::string_view text) {
  const size_t pos = text.find(kMistralCalls);
  if (pos == std::string_view::npos) return {std::string(text), {}};
  ToolParse out;
  out.content = std::string(Trim(text.substr(0, pos)));
  std::string_view rest = text.substr(pos);
  while (!rest.empty()) {
    if (rest.substr(0, kMistralCalls.size()) == kMistralCalls) {
      rest.remove_prefix(kMistralCalls.size());
    }
    rest = Trim(rest);
    if (rest.empty()) break;
    if (rest.front() == '[' || rest.front() == '{') {
      const size_t end = JsonValueEnd(rest, 0);
      if (end == std::string_view::npos || !ParseJsonCalls(rest.substr(0, end), &out.calls)) {
        return {std::string(text), {}};
      }
      rest = rest.substr(end);
      continue;
    }
    const size_t args = rest.find(kMistralArgs);
    if (args == std::string_view::npos) return {std::string(text), {}};
    ToolCall c;
    c.name = std::string(Trim(rest.substr(0, args)));
    std::string_view a = Trim(rest.substr(args + kMistralArgs.size()));
    const size_t end = a.empty() || a.front() != '{' ? std::string_view::npos : JsonValueEnd(a, 0);
    json j;
    if (c.name.empty() || end == std::string_view::npos || !ParseJson(a.substr(0, end), &j) ||
        !ArgumentsText(j, &c.arguments)) {
      return {std::string(text), {}};
    }
    out.calls.push_back(std::move(c));
    rest = a.substr(end);
  }
  if (out.calls.empty()) return {std::string(text), {}};
  return out;
}

const char* ArgsKey(ToolFormat f) { return f == ToolFormat::kLlama3 ? "parameters" : "arguments"; }

}  // namespace

std::string_view ToolFormatName(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kQwen3Coder:
      return "qwen3-coder";
    case ToolFormat::kLlama3:
      return "llama3";
    case ToolFormat::kMistral:
      return "mistral";
  }
  return "hermes";
}

ToolSyntax DetectToolSyntax(std::string_view t) {
  auto has = [t](std::string_view s) { return t.find(s) != std::string_view::npos; };
  ToolSyntax s;
  s.recognised = true;
  if (has(kMistralCalls)) {
    s.format = ToolFormat::kMistral;
  } else if (has("<function=") && has("<parameter=") &&
             (has("<tool_call>") || has("<seed:tool_call>"))) {
    s.format = ToolFormat::kQwen3Coder;
    if (!has("<tool_call>")) s.open = "<seed:tool_call>", s.close = "</seed:tool_call>";
  } else if (has("<tool_call>") && !has("<arg_key>") && !has("<invoke")) {
    s.format = ToolFormat::kHermes;
  } else if (has(kPythonTag) ||
             (has("<|start_header_id|>") && has("tool_call") && has("\"parameters\""))) {
    s.format = ToolFormat::kLlama3;
  } else {
    s.recognised = false;
  }
  return s;
}

ToolParse ParseToolCalls(const ToolSyntax& syntax, std::string_view text,
                         const ToolRequest* tools) {
  switch (syntax.format) {
    case ToolFormat::kHermes:
    case ToolFormat::kQwen3Coder:
      return ParseBlocks(syntax, text, tools);
    case ToolFormat::kLlama3:
      return ParseLlama3(text);
    case ToolFormat::kMistral:
      return ParseMistral(text);
  }
  return {std::string(text), {}};
}

std::string ConstrainedPrefix(const ToolSyntax& syntax) {
  switch (syntax.format) {
    case ToolFormat::kHermes:
    case ToolFormat::kQwen3Coder:
      return syntax.open + "\n";
    case ToolFormat::kLlama3:
      return "";
    case ToolFormat::kMistral:
      return std::string(kMistralCalls);
  }
  return "";
}

json ConstrainedSchema(const ToolSyntax& syntax, const ToolRequest& tools) {
  const char* key = ArgsKey(syntax.format);
  json alts = json::array();
  for (const ToolDef& t : tools.tools) {
    if (tools.choice == ToolChoice::kNamed && t.name != tools.named) continue;
    json params =
        t.parameters.is_object() && !t.parameters.empty() ? t.parameters : json{{"type", "object"}};
    alts.push_back(json{{"type", "object"},
                        {"properties", {{"name", {{"const", t.name}}}, {key, params}}},
                        {"required", {"name", key}},
                        {"additionalProperties", false}});
  }
  json one = alts.size() == 1 ? alts[0] : json{{"anyOf", alts}};
  if (syntax.format != ToolFormat::kMistral) return one;
  json arr{{"type", "array"}, {"items", one}, {"minItems", 1}};
  if (!tools.parallel) arr["maxItems"] = 1;
  return arr;
}

ToolParse ParseConstrained(const ToolSyntax& syntax, std::string_view json_text) {
  (void)syntax;
  ToolParse out;
  if (!ParseJsonCalls(json_text, &out.calls)) return {std::string(json_text), {}};
  return out;
}

ToolCallStream::ToolCallStream(ToolSyntax syntax, const ToolRequest* tools)
    : syntax_(std::move(syntax)), tools_(tools) {
  in_call_ = tools_ != nullptr && tools_->constrained;
}

std::string ToolCallStream::Push(std::string_view text) {
  held_ += text;
  if (in_call_) return "";
  if (!started_) {
    const size_t first = held_.find_first_not_of(" \n\r\t");
    if (first == std::string::npos) return "";  // whitespace: held until it is known
    started_ = true;
    if (syntax_.format == ToolFormat::kLlama3 && held_[first] == '{') {
      in_call_ = true;
      return "";
    }
  }
  std::string_view marker;
  switch (syntax_.format) {
    case ToolFormat::kHermes:
    case ToolFormat::kQwen3Coder:
      marker = syntax_.open;
      break;
    case ToolFormat::kLlama3:
      marker = kPythonTag;
      break;
    case ToolFormat::kMistral:
      marker = kMistralCalls;
      break;
  }
  std::string out;
  if (const size_t p = held_.find(marker); p != std::string::npos) {
    out = held_.substr(0, p);
    held_.erase(0, p);
    in_call_ = true;
    return out;
  }
  // Hold back the longest tail that may begin the marker.
  size_t keep = 0;
  for (size_t n = std::min(marker.size() - 1, held_.size()); n > 0; --n) {
    if (std::string_view(held_).substr(held_.size() - n) == marker.substr(0, n)) {
      keep = n;
      break;
    }
  }
  out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

ToolParse ToolCallStream::Flush() {
  std::string held = std::move(held_);
  held_.clear();
  if (!in_call_) return {std::move(held), {}};
  ToolParse p = tools_ != nullptr && tools_->constrained ? ParseConstrained(syntax_, held)
                                                         : ParseToolCalls(syntax_, held, tools_);
  if (p.calls.empty()) return {std::move(held), {}};
  if (tools_ != nullptr && !tools_->parallel && p.calls.size() > 1) p.calls.resize(1);
  return p;
}

std::string NewToolCallId(std::string_view prefix) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

}  // namespace kvtier::server
