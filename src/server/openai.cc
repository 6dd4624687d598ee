// OpenAI request parsing and response JSON (server/openai.h). nlohmann::json; pure functions.
#include "server/openai.h"

#include "server/json_body.h"
#include "server/response_format.h"
#include "server/tool_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace kvtier::server {
namespace {

using nlohmann::json;

// Fills *e and returns false: the common shape of every field error.
bool Bad(ApiError* e, std::string param, std::string message) {
  e->status = 400;
  e->type = "invalid_request_error";
  e->param = std::move(param);
  e->message = std::move(message);
  return false;
}

bool WrongType(ApiError* e, const std::string& param, const char* want, const json& got) {
  return Bad(e, param, param + ": expected " + want + ", got " + JsonTypeName(got));
}

bool GetNumber(const json& body, const char* key, double lo, double hi, double* out,
               ApiError* e) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_number()) return WrongType(e, key, "a number", *it);
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    return Bad(e, key, std::string(key) + ": expected " + std::to_string(lo) + " to " +
                           std::to_string(hi) + ", got " + it->dump());
  }
  *out = v;
  return true;
}

// An integer in [lo, hi] (a float with an integral value is accepted).
bool GetInteger(const json& body, const char* key, int64_t lo, int64_t hi,
                std::optional<int64_t>* out, ApiError* e) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  int64_t v = 0;
  if (it->is_number_integer()) {
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Bad(e, key, std::string(key) + ": expected at most " + std::to_string(hi) +
                             ", got " + it->dump());
    }
    v = it->get<int64_t>();
  } else if (it->is_number_float()) {
    const double d = it->get<double>();
    if (d != std::floor(d) || std::fabs(d) > 9.0e18) {
      return WrongType(e, key, "an integer", *it);
    }
    v = static_cast<int64_t>(d);
  } else {
    return WrongType(e, key, "an integer", *it);
  }
  if (v < lo || v > hi) {
    return Bad(e, key, std::string(key) + ": expected " + std::to_string(lo) + " to " +
                           std::to_string(hi) + ", got " + std::to_string(v));
  }
  *out = v;
  return true;
}

bool GetBool(const json& body, const char* key, bool* out, ApiError* e) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_boolean()) return WrongType(e, key, "a boolean", *it);
  *out = it->get<bool>();
  return true;
}

// Message content: a string, or an array of {"type": "text", "text": ...} parts.
bool GetContent(const json& c, const std::string& param, std::string* out, ApiError* e) {
  if (c.is_null()) return true;
  if (c.is_string()) {
    *out = c.get<std::string>();
    return true;
  }
  if (!c.is_array()) return WrongType(e, param, "a string or an array of text parts", c);
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const json& part = c[i];
    if (!part.is_object()) return WrongType(e, p, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string() || type->get<std::string>() != "text") {
      return Bad(e, p + ".type",
                 p + ".type: only \"text\" parts are supported, got " +
                     (type == part.end() ? std::string("none") : type->dump()));
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) {
      return Bad(e, p + ".text", p + ".text: expected a string");
    }
    *out += text->get<std::string>();
  }
  return true;
}

bool ParseMessages(const json& body, ApiRequest* r, ApiError* e) {
  auto it = body.find("messages");
  if (it == body.end()) return Bad(e, "messages", "messages: required, and missing");
  if (!it->is_array()) return WrongType(e, "messages", "an array", *it);
  if (it->empty()) return Bad(e, "messages", "messages: expected at least one message, got 0");
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const json& m = (*it)[i];
    if (!m.is_object()) return WrongType(e, p, "an object", m);
    auto role = m.find("role");
    if (role == m.end()) return Bad(e, p + ".role", p + ".role: required, and missing");
    if (!role->is_string()) return WrongType(e, p + ".role", "a string", *role);
    ChatMessage msg;
    msg.role = role->get<std::string>();
    static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
    bool known = false;
    for (const char* k : kRoles) known |= msg.role == k;
    if (!known) {
      return Bad(e, p + ".role",
                 p + ".role: expected system, developer, user, assistant or tool, got \"" +
                     msg.role + "\"");
    }
    if (msg.role == "developer") msg.role = "system";
    auto content = m.find("content");
    if (content == m.end() && msg.role != "assistant") {
      return Bad(e, p + ".content", p + ".content: required, and missing");
    }
    if (content != m.end() && !GetContent(*content, p + ".content", &msg.content, e)) {
      return false;
    }
    r->messages.push_back(std::move(msg));
  }
  return true;
}

bool ParsePrompt(const json& body, ApiRequest* r, ApiError* e) {
  auto it = body.find("prompt");
  if (it == body.end()) return Bad(e, "prompt", "prompt: required, and missing");
  const json* p = &*it;
  // A batch of one is the same request; larger batches are not served.
  if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    if (p->size() != 1) {
      return Bad(e, "prompt", "prompt: one prompt per request is supported, got " +
                                  std::to_string(p->size()));
    }
    p = &(*p)[0];
  }
  if (p->is_string()) {
    r->prompt = p->get<std::string>();
    return true;
  }
  if (!p->is_array()) return WrongType(e, "prompt", "a string or an array of token ids", *p);
  r->prompt_is_tokens = true;
  for (size_t i = 0; i < p->size(); ++i) {
    const json& t = (*p)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return Bad(e, "prompt", "prompt[" + std::to_string(i) +
                                  "]: expected a token id (a non-negative integer), got " +
                                  t.dump());
    }
    r->prompt_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return true;
}

bool ParseStop(const json& body, ApiRequest* r, ApiError* e) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return true;
  if (it->is_string()) {
    if (!it->get<std::string>().empty()) r->stop.push_back(it->get<std::string>());
    return true;
  }
  if (!it->is_array()) return WrongType(e, "stop", "a string or an array of strings", *it);
  if (it->size() > 4) {
    return Bad(e, "stop", "stop: at most 4 sequences, got " + std::to_string(it->size()));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& s = (*it)[i];
    if (!s.is_string()) return WrongType(e, "stop[" + std::to_string(i) + "]", "a string", s);
    if (!s.get<std::string>().empty()) r->stop.push_back(s.get<std::string>());
  }
  return true;
}

// Options that would change the answer's shape and that kvtier does not serve: refused rather
// than silently ignored.
bool RefuseUnsupported(Endpoint endpoint, const json& body, ApiError* e) {
  std::optional<int64_t> n;
  if (!GetInteger(body, "n", 1, 1, &n, e)) {
    e->message = "n: only 1 choice per request is supported (" + e->message + ")";
    return false;
  }
  for (const char* key : {"logprobs", "echo"}) {
    auto it = body.find(key);
    if (it != body.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>()) &&
        !(it->is_number_integer() && it->get<int64_t>() == 0)) {
      return Bad(e, key, std::string(key) + ": not supported by this server");
    }
  }
  for (const char* key : {"tools", "functions", "logit_bias", "suffix"}) {
    if (endpoint == Endpoint::kChat && std::string_view(key) == "tools") continue;
    auto it = body.find(key);
    if (it != body.end() && !it->is_null() && !it->empty()) {
      return Bad(e, key, std::string(key) + ": not supported by this server");
    }
  }
  std::optional<int64_t> best_of;
  if (!GetInteger(body, "best_of", 1, 1, &best_of, e)) {
    e->message = "best_of: only 1 is supported (" + e->message + ")";
    return false;
  }
  return true;
}

json Usage(const CompletionInfo& info) {
  return json{{"prompt_tokens", info.prompt_tokens},
              {"completion_tokens", info.completion_tokens},
              {"total_tokens", info.prompt_tokens + info.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", info.cached_tokens}}}};
}

json Head(Endpoint endpoint, const CompletionInfo& info, bool chunk) {
  const char* object = endpoint == Endpoint::kChat
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return json{{"id", info.id}, {"object", object}, {"created", info.created},
              {"model", info.model}, {"system_fingerprint", "kvtier"}};
}

json Finish(std::string_view finish_reason) {
  return finish_reason.empty() ? json(nullptr) : json(std::string(finish_reason));
}

// The messages as the chat template sees them (every field, key order as sent; "developer"
// is "system" as for the built-in formats) and chat_template_kwargs (e.g. enable_thinking).
bool ParseChatTemplateInput(std::string_view body_text, const json& body, ApiRequest* r,
                            ApiError* e) {
  if (auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return WrongType(e, "chat_template_kwargs", "an object", *it);
  }
  Result<jinja::Value> all = jinja::ParseJson(body_text);
  if (!all.ok()) return Bad(e, "", "malformed JSON in the request body: " + all.status().message());
  std::vector<jinja::Value> messages;
  if (const jinja::Value* m = all->Find("messages")) {
    for (const jinja::Value& sent : m->items()) {
      const jinja::Value msg = TemplateMessage(sent);
      const jinja::Value* role = msg.Find("role");
      if (role == nullptr || !role->is_string() || role->str() != "developer") {
        messages.push_back(msg);
        continue;
      }
      std::vector<std::pair<jinja::Value, jinja::Value>> fields = msg.entries();
      for (auto& [k, v] : fields) {
        if (k.is_string() && k.str() == "role") v = jinja::Value("system");
      }
      messages.push_back(jinja::Value::Dict(std::move(fields)));
    }
  }
  r->chat.messages = jinja::Value::List(std::move(messages));
  if (const jinja::Value* kw = all->Find("chat_template_kwargs"); kw && kw->is_dict()) {
    r->chat.kwargs = *kw;
  }
  if (r->tools) {
    if (const jinja::Value* t = all->Find("tools"); t != nullptr && t->is_list()) {
      r->chat.tools = *t;
    }
  }
  r->chat.add_generation_prompt = true;
  return true;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

const char* JsonTypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "an unknown type";
  }
}

bool ParseJsonBody(std::string_view body_text, nlohmann::json* out, ApiError* e,
                   uint64_t max_prompt_bytes, uint32_t context) {
  if (!IsValidUtf8(body_text)) {
    return Bad(e, "", "the request body is not valid UTF-8");
  }
  // Bounds before the parse: nesting (the parsed value is freed recursively) and any one
  // string's length.
  {
    size_t depth = 0, max_depth = 0, run = 0, longest = 0;
    bool in_string = false, escaped = false;
    for (const char c : body_text) {
      if (in_string) {
        ++run;
        if (escaped) escaped = false;
        else if (c == '\\') escaped = true;
        else if (c == '"') in_string = false, longest = std::max(longest, run - 1);
        continue;
      }
      if (c == '"') in_string = true, run = 0;
      else if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
      else if ((c == ']' || c == '}') && depth > 0) --depth;
    }
    if (max_depth > kMaxJsonDepth) {
      return Bad(e, "", "the request body nests JSON " + std::to_string(max_depth) +
                            " levels deep; at most " + std::to_string(kMaxJsonDepth) +
                            " are accepted");
    }
    if (longest > max_prompt_bytes && longest <= kMaxJsonString) {
      *e = ApiError{413,
                    "the request body has a JSON string of " + std::to_string(longest) +
                        " bytes: more than " + std::to_string(context) +
                        " tokens whatever it holds; this model's maximum context length is " +
                        std::to_string(context) + " tokens (prompt and completion together)",
                    "invalid_request_error", "", "context_length_exceeded"};
      return false;
    }
    if (longest > kMaxJsonString) {
      return Bad(e, "", "the request body has a JSON string of " + std::to_string(longest) +
                            " bytes; at most " + std::to_string(kMaxJsonString) +
                            " are accepted");
    }
  }
  json& body = *out;
  body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    // Parse again only to say where: the exception names line and column.
    std::string where;
    try {
      const json again = json::parse(body_text);
      (void)again;
    } catch (const json::exception& ex) {  // parse_error, or out_of_range (a number overflow:
                                           // found by kvtier_http_fuzz; it ended the process)
      where = ex.what();
      const size_t cut = where.find("] ");
      if (cut != std::string::npos) where = where.substr(cut + 2);
    }
    return Bad(e, "", "malformed JSON in the request body: " + where);
  }
  if (!body.is_object()) {
    return Bad(e, "", std::string("the request body: expected a JSON object, got ") +
                          JsonTypeName(body));
  }
  return true;
}

bool ParseRequest(Endpoint endpoint, std::string_view body_text, ApiRequest* r, ApiError* e) {
  return ParseRequest(endpoint, body_text, r, e, UINT64_MAX, 0);
}

bool ParseRequest(Endpoint endpoint, std::string_view body_text, ApiRequest* r, ApiError* e,
                  uint64_t max_prompt_bytes, uint32_t context) {
  *r = ApiRequest();
  r->endpoint = endpoint;
  r->sampling.temperature = 1.0f;
  json body;
  if (!ParseJsonBody(body_text, &body, e, max_prompt_bytes, context)) return false;
  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return WrongType(e, "model", "a string", *it);
    r->model = it->get<std::string>();
  }
  if (endpoint == Endpoint::kChat ? !ParseMessages(body, r, e) : !ParsePrompt(body, r, e)) {
    return false;
  }
  if (endpoint == Endpoint::kChat &&
      (!CheckToolHistory(body.at("messages"), e) || !ParseOpenAiTools(body, r, e) ||
       !ParseChatTemplateInput(body_text, body, r, e))) {
    return false;
  }
  if (!RefuseUnsupported(endpoint, body, e) || !ParseResponseFormat(body, r, e)) return false;
  std::optional<int64_t> max_tokens;
  const char* mt_key = body.contains("max_completion_tokens") &&
                               !body["max_completion_tokens"].is_null()
                           ? "max_completion_tokens"
                           : "max_tokens";
  if (!GetInteger(body, mt_key, 1, std::numeric_limits<int32_t>::max(), &max_tokens, e)) {
    return false;
  }
  if (max_tokens) r->max_tokens = static_cast<uint32_t>(*max_tokens);
  double temperature = 1.0, top_p = 1.0, presence = 0.0, frequency = 0.0;
  if (!GetNumber(body, "temperature", 0.0, 2.0, &temperature, e) ||
      !GetNumber(body, "top_p", 0.0, 1.0, &top_p, e) ||
      !GetNumber(body, "presence_penalty", -2.0, 2.0, &presence, e) ||
      !GetNumber(body, "frequency_penalty", -2.0, 2.0, &frequency, e)) {
    return false;
  }
  if (top_p <= 0.0) return Bad(e, "top_p", "top_p: expected more than 0 and at most 1, got 0");
  std::optional<int64_t> top_k, seed;
  if (!GetInteger(body, "top_k", -1, 1 << 20, &top_k, e) ||
      !GetInteger(body, "seed", std::numeric_limits<int64_t>::min(),
                  std::numeric_limits<int64_t>::max(), &seed, e)) {
    return false;
  }
  r->sampling.temperature = static_cast<float>(temperature);
  r->sampling.top_p = static_cast<float>(top_p);
  r->sampling.presence_penalty = static_cast<float>(presence);
  r->sampling.frequency_penalty = static_cast<float>(frequency);
  r->sampling.top_k = top_k && *top_k > 0 ? static_cast<uint32_t>(*top_k) : 0;
  if (seed) {
    r->seeded = true;
    r->sampling.seed = static_cast<uint64_t>(*seed);
  }
  if (!ParseStop(body, r, e) || !GetBool(body, "stream", &r->stream, e)) return false;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return WrongType(e, "stream_options", "an object", *it);
    if (!GetBool(*it, "include_usage", &r->include_usage, e)) {
      e->param = "stream_options.include_usage";
      e->message = "stream_options." + e->message;
      return false;
    }
  }
  return true;
}

std::string ErrorJson(const ApiError& e) {
  json err{{"message", e.message},
           {"type", e.type},
           {"param", e.param.empty() ? json(nullptr) : json(e.param)},
           {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ResponseJson(Endpoint endpoint, const CompletionInfo& info, std::string_view text,
                         std::string_view finish_reason, std::string_view reasoning) {
  json out = Head(endpoint, info, false);
  json choice{{"index", 0}, {"finish_reason", Finish(finish_reason)}, {"logprobs", nullptr}};
  if (endpoint == Endpoint::kChat) {
    choice["message"] = json{{"role", "assistant"}, {"content", std::string(text)}};
    if (!reasoning.empty()) choice["message"]["reasoning_content"] = std::string(reasoning);
  } else {
    choice["text"] = std::string(text);
  }
  out["choices"] = json::array({choice});
  out["usage"] = Usage(info);
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ResponseJson(const CompletionInfo& info, std::string_view text,
                         std::string_view finish_reason, std::string_view reasoning,
                         const std::vector<ToolCallOut>& calls) {
  json out = Head(Endpoint::kChat, info, false);
  json choice{{"index", 0}, {"finish_reason", Finish(finish_reason)}, {"logprobs", nullptr}};
  json message{{"role", "assistant"},
               {"content", text.empty() && !calls.empty() ? json(nullptr) : json(std::string(text))}};
  if (!reasoning.empty()) message["reasoning_content"] = std::string(reasoning);
  if (!calls.empty()) {
    json list = json::array();
    for (const ToolCallOut& c : calls) {
      list.push_back(json{{"id", c.id}, {"type", "function"},
                          {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    message["tool_calls"] = std::move(list);
  }
  choice["message"] = std::move(message);
  out["choices"] = json::array({choice});
  out["usage"] = Usage(info);
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ToolCallChunkJson(const CompletionInfo& info, size_t index, const ToolCallOut* head,
                              std::string_view arguments_piece) {
  json out = Head(Endpoint::kChat, info, true);
  json call{{"index", index}};
  if (head != nullptr) {
    call["id"] = head->id;
    call["type"] = "function";
    call["function"] = json{{"name", head->name}, {"arguments", std::string(arguments_piece)}};
  } else {
    call["function"] = json{{"arguments", std::string(arguments_piece)}};
  }
  json choice{{"index", 0},
              {"delta", {{"tool_calls", json::array({call})}}},
              {"finish_reason", nullptr},
              {"logprobs", nullptr}};
  out["choices"] = json::array({choice});
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ChunkJson(Endpoint endpoint, const CompletionInfo& info, std::string_view text,
                      bool role, std::string_view finish_reason, std::string_view reasoning) {
  json out = Head(endpoint, info, true);
  json choice{{"index", 0}, {"finish_reason", Finish(finish_reason)}, {"logprobs", nullptr}};
  if (endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (!text.empty() || role) delta["content"] = std::string(text);
    if (!reasoning.empty()) delta["reasoning_content"] = std::string(reasoning);
    choice["delta"] = delta;
  } else {
    choice["text"] = std::string(text);
  }
  out["choices"] = json::array({choice});
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string UsageChunkJson(Endpoint endpoint, const CompletionInfo& info) {
  json out = Head(endpoint, info, true);
  out["choices"] = json::array();
  out["usage"] = Usage(info);
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ModelsJson(std::string_view model_id, int64_t created) {
  json m{{"id", std::string(model_id)}, {"object", "model"}, {"created", created},
         {"owned_by", "kvtier"}};
  return json{{"object", "list"}, {"data", json::array({m})}}.dump();
}

}  // namespace kvtier::server
