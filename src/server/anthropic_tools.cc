// Anthropic tool use: see anthropic_tools.h.
#include "server/anthropic_tools.h"

#include "server/tool_request.h"

namespace kvtier::server {
namespace {

using nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string BlockText(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (!content.is_array()) return out;
  for (const json& b : content) {
    if (b.is_object() && b.value("type", "") == "text" && b.contains("text") &&
        b["text"].is_string()) {
      out += b["text"].get<std::string>();
    }
  }
  return out;
}

}  // namespace

bool AnthropicToolChat(const json& body, MessagesRequest* r, ApiError* e) {
  // The conversation as OpenAI-shaped messages (the shape chat templates are written for).
  json msgs = json::array();
  if (auto sys = body.find("system"); sys != body.end() && !sys->is_null()) {
    std::string text;
    if (sys->is_string()) {
      text = sys->get<std::string>();
    } else {
      for (size_t i = 0; i < sys->size(); ++i)
        text += (i ? "\n" : "") + BlockText(json::array({(*sys)[i]}));
    }
    msgs.push_back({{"role", "system"}, {"content", text}});
  }
  for (const json& m : body["messages"]) {
    const std::string role = m["role"];
    const json& content = m["content"];
    if (content.is_string()) {
      msgs.push_back({{"role", role}, {"content", content}});
      continue;
    }
    std::string text;
    json calls = json::array();
    for (const json& b : content) {
      const std::string type = b["type"];
      if (type == "text") {
        text += b["text"].get<std::string>();
      } else if (type == "tool_use") {
        calls.push_back({{"id", b["id"]},
                         {"type", "function"},
                         {"function", {{"name", b["name"]}, {"arguments", Dump(b["input"])}}}});
      } else if (type == "tool_result") {
        std::string result = BlockText(b.value("content", json("")));
        if (b.value("is_error", false)) result = "Error: " + result;
        msgs.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
      }
    }
    if (role == "assistant") {
      json a{{"role", "assistant"}, {"content", text}};
      if (!calls.empty()) a["tool_calls"] = calls;
      msgs.push_back(std::move(a));
    } else if (!text.empty()) {
      msgs.push_back({{"role", "user"}, {"content", text}});
    }
  }
  // A final text-only assistant turn is the prefill (the handler appends it).
  if (!msgs.empty() && msgs.back()["role"] == "assistant" && !msgs.back().contains("tool_calls")) {
    msgs.erase(msgs.size() - 1);
  }
  // The tools, OpenAI-shaped, through the OpenAI parser (so both APIs validate alike).
  json oai{{"messages", msgs}};
  if (auto tools = body.find("tools"); tools != body.end() && tools->is_array()) {
    json list = json::array();
    for (const json& t : *tools) {
      json fn{{"name", t["name"]}, {"parameters", t["input_schema"]}};
      if (t.contains("description")) fn["description"] = t["description"];
      list.push_back({{"type", "function"}, {"function", fn}});
    }
    oai["tools"] = list;
    if (auto choice = body.find("tool_choice"); choice != body.end() && choice->is_object()) {
      const std::string type = (*choice)["type"];
      if (type == "none")
        oai["tool_choice"] = "none";
      else if (type == "any")
        oai["tool_choice"] = "required";
      else if (type == "tool") {
        oai["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*choice)["name"]}}}};
      }
      if (choice->value("disable_parallel_tool_use", false)) oai["parallel_tool_calls"] = false;
    }
  }
  ApiRequest tmp;
  if (!ParseOpenAiTools(oai, &tmp, e)) {
    // Name the Anthropic field: tools[i].function.parameters -> tools[i].input_schema.
    std::string p = e->param;
    if (auto at = p.find(".function.parameters"); at != std::string::npos) {
      p.replace(at, 20, ".input_schema");
    } else if (auto fn = p.find(".function."); fn != std::string::npos) {
      p.replace(fn, 10, ".");
    }
    if (p.rfind("tool_choice", 0) == 0) p = "tool_choice.name";
    e->message = p + e->message.substr(e->param.size());
    e->param = p;
    return false;
  }
  r->chat.tools = tmp.tools;
  std::vector<jinja::Value> jmsgs;
  for (const json& m : msgs) {
    Result<jinja::Value> v = jinja::ParseJson(Dump(m));
    if (!v.ok()) return false;
    jmsgs.push_back(TemplateMessage(*v));
  }
  r->chat.chat.messages = jinja::Value::List(std::move(jmsgs));
  if (r->chat.tools) {
    Result<jinja::Value> t = jinja::ParseJson(Dump(oai["tools"]));
    if (t.ok()) r->chat.chat.tools = *t;
  }
  r->chat.chat.add_generation_prompt = true;
  return true;
}

std::string ToolUseMessageJson(const CompletionInfo& info, std::string_view text,
                               std::string_view stop_reason, std::string_view stop_sequence,
                               const std::vector<ToolCallOut>& calls) {
  json content = json::array();
  if (!text.empty() || calls.empty())
    content.push_back({{"type", "text"}, {"text", std::string(text)}});
  for (const ToolCallOut& c : calls) {
    json input = json::parse(c.arguments, nullptr, false);
    if (input.is_discarded()) input = json::object();
    content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", input}});
  }
  const uint32_t cached = std::min(info.cached_tokens, info.prompt_tokens);
  json usage{{"input_tokens", info.prompt_tokens - cached},
             {"cache_creation_input_tokens", 0},
             {"cache_read_input_tokens", cached},
             {"output_tokens", info.completion_tokens}};
  const std::string reason = calls.empty() ? std::string(stop_reason) : "tool_use";
  return Dump(json{
      {"id", info.id},
      {"type", "message"},
      {"role", "assistant"},
      {"model", info.model},
      {"content", content},
      {"stop_reason", reason.empty() ? json(nullptr) : json(reason)},
      {"stop_sequence",
       stop_sequence.empty() || !calls.empty() ? json(nullptr) : json(std::string(stop_sequence))},
      {"usage", usage}});
}

std::string ToolUseBlockStartEvent(size_t index, const ToolCallOut& call) {
  return SseEvent("content_block_start", Dump(json{{"type", "content_block_start"},
                                                   {"index", index},
                                                   {"content_block",
                                                    {{"type", "tool_use"},
                                                     {"id", call.id},
                                                     {"name", call.name},
                                                     {"input", json::object()}}}}));
}

std::string InputJsonDeltaEvent(size_t index, std::string_view partial_json) {
  return SseEvent(
      "content_block_delta",
      Dump(json{
          {"type", "content_block_delta"},
          {"index", index},
          {"delta", {{"type", "input_json_delta"}, {"partial_json", std::string(partial_json)}}}}));
}

std::string BlockStopEvent(size_t index) {
  return SseEvent("content_block_stop",
                  Dump(json{{"type", "content_block_stop"}, {"index", index}}));
}

}  // namespace kvtier::server
