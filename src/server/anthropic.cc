// Anthropic Messages parsing and response JSON (server/anthropic.h). nlohmann::json; pure
// functions.
#include "server/anthropic.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "server/anthropic_tools.h"
#include "server/json_body.h"

namespace kvtier::server {
namespace {

using nlohmann::json;

bool Bad(ApiError* e, const std::string& param, const std::string& message) {
  e->status = 400;
  e->type = "invalid_request_error";
  e->param = param;
  e->message = param.empty() ? message : param + ": " + message;
  e->code.clear();
  return false;
}

bool WrongType(ApiError* e, const std::string& param, const char* want, const json& got) {
  return Bad(e, param, std::string("expected ") + want + ", got " + JsonTypeName(got));
}

// A string field of object `o` (at `p`); required ones must be present and non-empty.
bool GetString(const json& o, const std::string& p, const char* key, bool required,
               std::string* out, ApiError* e) {
  const std::string param = p.empty() ? key : p + "." + key;
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) {
    return required ? Bad(e, param, "required, and missing") : true;
  }
  if (!it->is_string()) return WrongType(e, param, "a string", *it);
  *out = it->get<std::string>();
  if (required && out->empty()) return Bad(e, param, "expected a non-empty string, got \"\"");
  return true;
}

bool GetNumber(const json& body, const char* key, double lo, double hi, double* out,
               ApiError* e) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_number()) return WrongType(e, key, "a number", *it);
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    return Bad(e, key, "expected " + std::to_string(lo) + " to " + std::to_string(hi) +
                           ", got " + it->dump());
  }
  *out = v;
  return true;
}

// An integer in [lo, hi]; absent: *present stays false.
bool GetInteger(const json& body, const char* key, int64_t lo, int64_t hi, int64_t* out,
                bool* present, ApiError* e) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  const bool integral =
      it->is_number_integer() ||
      (it->is_number_float() && it->get<double>() == std::floor(it->get<double>()) &&
       std::fabs(it->get<double>()) < 9.0e18);
  if (!integral) return WrongType(e, key, "an integer", *it);
  if (it->is_number_unsigned() &&
      it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Bad(e, key, "expected " + std::to_string(lo) + " to " + std::to_string(hi) +
                           ", got " + it->dump());
  }
  const int64_t v = it->is_number_float() ? static_cast<int64_t>(it->get<double>())
                                          : it->get<int64_t>();
  if (v < lo || v > hi) {
    return Bad(e, key, "expected " + std::to_string(lo) + " to " + std::to_string(hi) +
                           ", got " + std::to_string(v));
  }
  *out = v;
  *present = true;
  return true;
}

// A text block {"type":"text","text":...} (cache_control, citations: ignored).
bool TextBlock(const json& b, const std::string& p, std::string* out, ApiError* e) {
  auto it = b.find("text");
  if (it == b.end()) return Bad(e, p + ".text", "required, and missing");
  if (!it->is_string()) return WrongType(e, p + ".text", "a string", *it);
  *out += it->get<std::string>();
  return true;
}

// `system`: a string or an array of text blocks, joined by "\n".
bool ParseSystem(const json& body, std::string* out, bool* present, ApiError* e) {
  auto it = body.find("system");
  if (it == body.end() || it->is_null()) return true;
  *present = true;
  if (it->is_string()) {
    *out = it->get<std::string>();
    return true;
  }
  if (!it->is_array()) return WrongType(e, "system", "a string or an array of text blocks", *it);
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string p = "system[" + std::to_string(i) + "]";
    const json& b = (*it)[i];
    if (!b.is_object()) return WrongType(e, p, "an object", b);
    std::string type;
    if (!GetString(b, p, "type", true, &type, e)) return false;
    if (type != "text") return Bad(e, p + ".type", "expected \"text\", got \"" + type + "\"");
    if (i > 0) *out += "\n";
    if (!TextBlock(b, p, out, e)) return false;
  }
  return true;
}

// tool_result content: a string or an array of text blocks.
bool ToolResultContent(const json& b, const std::string& p, ApiError* e) {
  auto it = b.find("content");
  if (it == b.end() || it->is_null() || it->is_string()) return true;
  if (!it->is_array()) return WrongType(e, p + ".content", "a string or an array of blocks", *it);
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string q = p + ".content[" + std::to_string(i) + "]";
    const json& c = (*it)[i];
    if (!c.is_object()) return WrongType(e, q, "an object", c);
    std::string type, text;
    if (!GetString(c, q, "type", true, &type, e)) return false;
    if (type != "text") {
      return Bad(e, q + ".type", "expected \"text\" in a tool_result, got \"" + type + "\"");
    }
    if (!TextBlock(c, q, &text, e)) return false;
  }
  return true;
}

bool ParseMessages(const json& body, MessagesRequest* r, ApiError* e) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return Bad(e, "messages", "required, and missing");
  if (!it->is_array()) return WrongType(e, "messages", "an array", *it);
  if (it->empty()) return Bad(e, "messages", "expected at least one message, got 0");
  std::set<std::string> last_tool_uses;  // ids of the previous assistant turn's tool_use blocks
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const json& m = (*it)[i];
    if (!m.is_object()) return WrongType(e, p, "an object", m);
    ChatMessage msg;
    if (!GetString(m, p, "role", true, &msg.role, e)) return false;
    if (msg.role != "user" && msg.role != "assistant") {
      return Bad(e, p + ".role", "expected \"user\" or \"assistant\", got \"" + msg.role + "\"" +
                                     (msg.role == "system" ? " (the system prompt is the "
                                                             "top-level `system` field)"
                                                           : ""));
    }
    const bool user = msg.role == "user";
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      return Bad(e, p + ".content", "required, and missing");
    }
    std::set<std::string> tool_uses;
    if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (!content->is_array()) {
      return WrongType(e, p + ".content", "a string or an array of content blocks", *content);
    } else {
      for (size_t j = 0; j < content->size(); ++j) {
        const std::string q = p + ".content[" + std::to_string(j) + "]";
        const json& b = (*content)[j];
        if (!b.is_object()) return WrongType(e, q, "an object", b);
        std::string type;
        if (!GetString(b, q, "type", true, &type, e)) return false;
        if (type == "text") {
          if (!TextBlock(b, q, &msg.content, e)) return false;
        } else if (type == "tool_use") {
          if (user) return Bad(e, q + ".type", "tool_use blocks belong to assistant messages");
          std::string id, name;
          if (!GetString(b, q, "id", true, &id, e) || !GetString(b, q, "name", true, &name, e)) {
            return false;
          }
          auto input = b.find("input");
          if (input == b.end()) return Bad(e, q + ".input", "required, and missing");
          if (!input->is_object()) return WrongType(e, q + ".input", "an object", *input);
          if (!tool_uses.insert(id).second) {
            return Bad(e, q + ".id", "the tool_use id \"" + id + "\" is used twice");
          }
          if (r->tools_param.empty()) r->tools_param = q;
        } else if (type == "tool_result") {
          if (!user) return Bad(e, q + ".type", "tool_result blocks belong to user messages");
          std::string id;
          if (!GetString(b, q, "tool_use_id", true, &id, e)) return false;
          if (last_tool_uses.erase(id) == 0) {
            return Bad(e, q + ".tool_use_id",
                       "\"" + id + "\" matches no tool_use block of the previous assistant "
                                   "message (or is answered twice)");
          }
          if (!ToolResultContent(b, q, e)) return false;
          if (auto err = b.find("is_error"); err != b.end() && !err->is_boolean()) {
            return WrongType(e, q + ".is_error", "a boolean", *err);
          }
          if (r->tools_param.empty()) r->tools_param = q;
        } else if (type == "thinking" || type == "redacted_thinking") {
          // An earlier turn's reasoning, sent back by clients: not part of the prompt.
          if (user) return Bad(e, q + ".type", type + " blocks belong to assistant messages");
        } else if (type == "image" || type == "document") {
          return Bad(e, q + ".type", "\"" + type + "\" blocks are not supported by this server");
        } else {
          return Bad(e, q + ".type",
                     "expected text, tool_use, tool_result, thinking or redacted_thinking, "
                     "got \"" + type + "\"");
        }
      }
    }
    if (!user) last_tool_uses = std::move(tool_uses);
    else last_tool_uses.clear();
    // Consecutive turns of one role are one turn, as Anthropic's API treats them.
    if (!r->chat.messages.empty() && r->chat.messages.back().role == msg.role) {
      r->chat.messages.back().content += "\n\n" + msg.content;
    } else {
      r->chat.messages.push_back(std::move(msg));
    }
  }
  return true;
}

bool ParseTools(const json& body, MessagesRequest* r, ApiError* e) {
  auto it = body.find("tools");
  if (it != body.end() && !it->is_null()) {
    if (!it->is_array()) return WrongType(e, "tools", "an array", *it);
    std::set<std::string> names;
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string p = "tools[" + std::to_string(i) + "]";
      const json& t = (*it)[i];
      if (!t.is_object()) return WrongType(e, p, "an object", t);
      std::string type = "custom", name, description;
      if (!GetString(t, p, "type", false, &type, e)) return false;
      if (type != "custom") {
        return Bad(e, p + ".type", "only custom tools (with input_schema) are supported, got \"" +
                                       type + "\"");
      }
      if (!GetString(t, p, "name", true, &name, e) ||
          !GetString(t, p, "description", false, &description, e)) {
        return false;
      }
      auto schema = t.find("input_schema");
      if (schema == t.end()) return Bad(e, p + ".input_schema", "required, and missing");
      if (!schema->is_object()) return WrongType(e, p + ".input_schema", "an object", *schema);
      if (!names.insert(name).second) {
        return Bad(e, p + ".name", "the tool name \"" + name + "\" is used twice");
      }
    }
    if (!it->empty() && r->tools_param.empty()) r->tools_param = "tools";
  }
  auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (!choice->is_object()) return WrongType(e, "tool_choice", "an object", *choice);
    std::string type, name;
    if (!GetString(*choice, "tool_choice", "type", true, &type, e)) return false;
    if (type != "auto" && type != "any" && type != "tool" && type != "none") {
      return Bad(e, "tool_choice.type",
                 "expected auto, any, tool or none, got \"" + type + "\"");
    }
    if (type == "tool" && !GetString(*choice, "tool_choice", "name", true, &name, e)) {
      return false;
    }
    if ((type == "any" || type == "tool") && r->tools_param.empty()) {
      return Bad(e, "tool_choice", "\"" + type + "\" needs tools, and none were given");
    }
  }
  return true;
}

json Usage(const CompletionInfo& info) {
  const uint32_t cached = std::min(info.cached_tokens, info.prompt_tokens);
  return json{{"input_tokens", info.prompt_tokens - cached},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", cached},
              {"output_tokens", info.completion_tokens}};
}

json NullIfEmpty(std::string_view s) { return s.empty() ? json(nullptr) : json(std::string(s)); }

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

bool ParseMessagesRequest(std::string_view body_text, bool count_tokens, MessagesRequest* r,
                          ApiError* e, uint64_t max_prompt_bytes, uint32_t context) {
  *r = MessagesRequest();
  r->chat.endpoint = Endpoint::kChat;
  r->chat.sampling.temperature = 1.0f;
  json body;
  if (!ParseJsonBody(body_text, &body, e, max_prompt_bytes, context)) return false;
  if (!GetString(body, "", "model", true, &r->chat.model, e)) return false;
  std::string system;
  bool has_system = false;
  if (!ParseSystem(body, &system, &has_system, e)) return false;
  if (has_system) r->chat.messages.push_back(ChatMessage{"system", std::move(system)});
  if (!ParseMessages(body, r, e) || !ParseTools(body, r, e)) return false;
  if (!r->tools_param.empty() && !AnthropicToolChat(body, r, e)) return false;
  if (!count_tokens) {
    int64_t max_tokens = 0;
    bool present = false;
    if (!GetInteger(body, "max_tokens", 1, std::numeric_limits<int32_t>::max(), &max_tokens,
                    &present, e)) {
      return false;
    }
    if (!present) return Bad(e, "max_tokens", "required, and missing");
    r->chat.max_tokens = static_cast<uint32_t>(max_tokens);
  }
  double temperature = 1.0, top_p = 1.0;
  if (!GetNumber(body, "temperature", 0.0, 1.0, &temperature, e) ||
      !GetNumber(body, "top_p", 0.0, 1.0, &top_p, e)) {
    return false;
  }
  if (top_p <= 0.0) return Bad(e, "top_p", "expected more than 0 and at most 1, got 0");
  int64_t top_k = 0;
  bool has_top_k = false;
  if (!GetInteger(body, "top_k", 0, 1 << 20, &top_k, &has_top_k, e)) return false;
  r->chat.sampling.temperature = static_cast<float>(temperature);
  r->chat.sampling.top_p = static_cast<float>(top_p);
  r->chat.sampling.top_k = static_cast<uint32_t>(top_k);
  if (auto it = body.find("stop_sequences"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return WrongType(e, "stop_sequences", "an array of strings", *it);
    if (it->size() > kMaxStopSequences) {
      return Bad(e, "stop_sequences", "at most " + std::to_string(kMaxStopSequences) +
                                          " sequences, got " + std::to_string(it->size()));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const json& s = (*it)[i];
      const std::string p = "stop_sequences[" + std::to_string(i) + "]";
      if (!s.is_string()) return WrongType(e, p, "a string", s);
      if (s.get<std::string>().empty()) return Bad(e, p, "expected a non-empty string");
      r->chat.stop.push_back(s.get<std::string>());
    }
  }
  if (auto it = body.find("stream"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return WrongType(e, "stream", "a boolean", *it);
    r->chat.stream = it->get<bool>();
  }
  if (auto it = body.find("metadata"); it != body.end() && !it->is_null() && !it->is_object()) {
    return WrongType(e, "metadata", "an object", *it);
  }
  return true;
}

const char* AnthropicErrorType(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string AnthropicErrorJson(const ApiError& e) {
  return Dump(json{{"type", "error"},
                   {"error", {{"type", AnthropicErrorType(e.status)}, {"message", e.message}}}});
}

std::string_view StopReason(std::string_view finish_reason, std::string_view stop_sequence) {
  if (finish_reason == "length") return "max_tokens";
  if (finish_reason == "stop" && !stop_sequence.empty()) return "stop_sequence";
  return "end_turn";
}

std::string MessageJson(const CompletionInfo& info, std::string_view text,
                        std::string_view stop_reason, std::string_view stop_sequence) {
  json content = json::array();
  content.push_back(json{{"type", "text"}, {"text", std::string(text)}});
  return Dump(json{{"id", info.id},
                   {"type", "message"},
                   {"role", "assistant"},
                   {"model", info.model},
                   {"content", content},
                   {"stop_reason", NullIfEmpty(stop_reason)},
                   {"stop_sequence", NullIfEmpty(stop_sequence)},
                   {"usage", Usage(info)}});
}

std::string CountTokensJson(uint32_t input_tokens) {
  return json{{"input_tokens", input_tokens}}.dump();
}

std::string SseEvent(std::string_view name, const std::string& data) {
  std::string out = "event: ";
  out.append(name).append("\ndata: ").append(data).append("\n\n");
  return out;
}

std::string MessageStartEvent(const CompletionInfo& info) {
  json message{{"id", info.id},
               {"type", "message"},
               {"role", "assistant"},
               {"model", info.model},
               {"content", json::array()},
               {"stop_reason", nullptr},
               {"stop_sequence", nullptr},
               {"usage", Usage(info)}};
  return SseEvent("message_start", Dump(json{{"type", "message_start"}, {"message", message}}));
}

std::string ContentBlockStartEvent() {
  return SseEvent("content_block_start",
                  Dump(json{{"type", "content_block_start"},
                            {"index", 0},
                            {"content_block", {{"type", "text"}, {"text", ""}}}}));
}

std::string PingEvent() { return SseEvent("ping", R"({"type":"ping"})"); }

std::string TextDeltaEvent(std::string_view text) {
  return SseEvent("content_block_delta",
                  Dump(json{{"type", "content_block_delta"},
                            {"index", 0},
                            {"delta", {{"type", "text_delta"}, {"text", std::string(text)}}}}));
}

std::string ContentBlockStopEvent() {
  return SseEvent("content_block_stop", R"({"type":"content_block_stop","index":0})");
}

std::string MessageDeltaEvent(const CompletionInfo& info, std::string_view stop_reason,
                              std::string_view stop_sequence) {
  return SseEvent("message_delta",
                  Dump(json{{"type", "message_delta"},
                            {"delta",
                             {{"stop_reason", NullIfEmpty(stop_reason)},
                              {"stop_sequence", NullIfEmpty(stop_sequence)}}},
                            {"usage", Usage(info)}}));
}

std::string MessageStopEvent() { return SseEvent("message_stop", R"({"type":"message_stop"})"); }

std::string ErrorEvent(const ApiError& e) { return SseEvent("error", AnthropicErrorJson(e)); }

}  // namespace kvtier::server
