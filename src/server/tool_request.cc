// OpenAI tool fields: see tool_request.h.
#include "server/tool_request.h"

#include <set>

#include "constrain/json_schema.h"
#include "server/json_body.h"

namespace kvtier::server {
namespace {

using nlohmann::json;

bool Bad(ApiError* e, std::string param, std::string message) {
  *e = ApiError{};
  e->message = param + ": " + message;
  e->param = std::move(param);
  return false;
}

bool WrongType(ApiError* e, std::string param, const char* want, const json& got) {
  return Bad(e, std::move(param), std::string("expected ") + want + ", got " + JsonTypeName(got));
}

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

bool ParseOpenAiTools(const json& body, ApiRequest* r, ApiError* e) {
  auto tools_it = body.find("tools");
  const bool have_tools = tools_it != body.end() && !tools_it->is_null();
  auto req = std::make_shared<ToolRequest>();
  if (have_tools) {
    if (!tools_it->is_array()) return WrongType(e, "tools", "an array", *tools_it);
    std::set<std::string> names;
    for (size_t i = 0; i < tools_it->size(); ++i) {
      const std::string p = "tools[" + std::to_string(i) + "]";
      const json& t = (*tools_it)[i];
      if (!t.is_object()) return WrongType(e, p, "an object", t);
      auto type = t.find("type");
      if (type == t.end() || !type->is_string() || type->get<std::string>() != "function") {
        return Bad(e, p + ".type",
                   "expected \"function\", got " +
                       (type == t.end() ? std::string("nothing") : type->dump()));
      }
      auto fn = t.find("function");
      if (fn == t.end()) return Bad(e, p + ".function", "required, and missing");
      if (!fn->is_object()) return WrongType(e, p + ".function", "an object", *fn);
      auto name = fn->find("name");
      if (name == fn->end()) return Bad(e, p + ".function.name", "required, and missing");
      if (!name->is_string()) return WrongType(e, p + ".function.name", "a string", *name);
      ToolDef def;
      def.name = name->get<std::string>();
      if (!ValidName(def.name)) {
        return Bad(e, p + ".function.name",
                   "expected 1 to 64 of a-z, A-Z, 0-9, _, . and -, got \"" + def.name + "\"");
      }
      if (!names.insert(def.name).second) {
        return Bad(e, p + ".function.name", "a second tool named \"" + def.name + "\"");
      }
      if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string()) {
        return WrongType(e, p + ".function.description", "a string", *d);
      }
      if (auto params = fn->find("parameters"); params != fn->end() && !params->is_null()) {
        if (!params->is_object()) {
          return WrongType(e, p + ".function.parameters", "an object (a JSON Schema)", *params);
        }
        def.parameters = *params;
      }
      req->tools.push_back(std::move(def));
    }
  }
  if (auto par = body.find("parallel_tool_calls"); par != body.end() && !par->is_null()) {
    if (!par->is_boolean()) return WrongType(e, "parallel_tool_calls", "a boolean", *par);
    req->parallel = par->get<bool>();
  }
  bool none = false;
  if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s == "none")
        none = true;
      else if (s == "auto")
        req->choice = ToolChoice::kAuto;
      else if (s == "required")
        req->choice = ToolChoice::kRequired;
      else {
        return Bad(e, "tool_choice",
                   "expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                   "\"function\": {\"name\": ...}}, got \"" +
                       s + "\"");
      }
    } else if (tc->is_object()) {
      auto type = tc->find("type");
      if (type == tc->end() || !type->is_string() || type->get<std::string>() != "function") {
        return Bad(e, "tool_choice.type", "expected \"function\"");
      }
      auto fn = tc->find("function");
      if (fn == tc->end() || !fn->is_object() || !fn->contains("name") ||
          !(*fn)["name"].is_string()) {
        return Bad(e, "tool_choice.function.name", "required: the name of one of tools");
      }
      req->choice = ToolChoice::kNamed;
      req->named = (*fn)["name"].get<std::string>();
      bool found = false;
      for (const ToolDef& d : req->tools) found |= d.name == req->named;
      if (!found) {
        return Bad(e, "tool_choice.function.name", "no tool named \"" + req->named + "\" in tools");
      }
    } else {
      return WrongType(e, "tool_choice", "a string or an object", *tc);
    }
    if (!none && req->choice != ToolChoice::kAuto && req->tools.empty()) {
      return Bad(e, "tool_choice", "requires a non-empty tools list");
    }
  }
  if (!have_tools || req->tools.empty() || none) return true;
  // A forced call is decoded under the tools' schemas: each must compile (with auto they are
  // only shown to the model, so keywords the compiler lacks, e.g. minimum or pattern, pass).
  if (req->choice != ToolChoice::kAuto) {
    for (size_t i = 0; i < req->tools.size(); ++i) {
      const ToolDef& d = req->tools[i];
      if (d.parameters.empty() || (req->choice == ToolChoice::kNamed && d.name != req->named)) {
        continue;
      }
      Result<std::shared_ptr<const constrain::JsonGrammar>> g =
          constrain::CompileJsonSchema(d.parameters);
      if (!g.ok()) {
        return Bad(e, "tools[" + std::to_string(i) + "].function.parameters",
                   g.status().message() + " (needed to force the call: tool_choice is " +
                       (req->choice == ToolChoice::kNamed ? "a named function" : "required") + ")");
      }
    }
  }
  r->tools = std::move(req);
  return true;
}

bool CheckToolHistory(const json& messages, ApiError* e) {
  if (!messages.is_array()) return true;
  std::set<std::string> ids;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const json& m = messages[i];
    if (!m.is_object()) continue;
    const std::string role = m.value("role", json("")).is_string() ? m.value("role", "") : "";
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      if (role != "assistant")
        return Bad(e, p + ".tool_calls", "only assistant messages have tool_calls");
      if (!tc->is_array()) return WrongType(e, p + ".tool_calls", "an array", *tc);
      for (size_t k = 0; k < tc->size(); ++k) {
        const std::string q = p + ".tool_calls[" + std::to_string(k) + "]";
        const json& c = (*tc)[k];
        if (!c.is_object()) return WrongType(e, q, "an object", c);
        auto id = c.find("id");
        if (id == c.end() || !id->is_string() || id->get<std::string>().empty()) {
          return Bad(e, q + ".id", "required: a non-empty string");
        }
        ids.insert(id->get<std::string>());
        if (auto type = c.find("type");
            type != c.end() && !(type->is_string() && type->get<std::string>() == "function")) {
          return Bad(e, q + ".type", "expected \"function\", got " + type->dump());
        }
        auto fn = c.find("function");
        if (fn == c.end() || !fn->is_object())
          return Bad(e, q + ".function", "required: an object");
        auto name = fn->find("name");
        if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
          return Bad(e, q + ".function.name", "required: a non-empty string");
        }
        auto args = fn->find("arguments");
        if (args == fn->end() || !args->is_string()) {
          return Bad(e, q + ".function.arguments", "required: a string (JSON-encoded arguments)");
        }
      }
    }
    if (role == "tool") {
      auto id = m.find("tool_call_id");
      if (id == m.end() || !id->is_string()) {
        return Bad(e, p + ".tool_call_id",
                   "required for a tool message: the id of the call it answers");
      }
      if (ids.count(id->get<std::string>()) == 0) {
        return Bad(e, p + ".tool_call_id",
                   "\"" + id->get<std::string>() + "\" matches no earlier assistant tool_calls id");
      }
    }
  }
  return true;
}

jinja::Value TemplateMessage(const jinja::Value& message) {
  const jinja::Value* calls = message.Find("tool_calls");
  if (calls == nullptr || !calls->is_list()) return message;
  std::vector<jinja::Value> out_calls;
  for (const jinja::Value& c : calls->items()) {
    const jinja::Value* fn = c.Find("function");
    const jinja::Value* args = fn != nullptr ? fn->Find("arguments") : nullptr;
    if (args == nullptr || !args->is_string()) {
      out_calls.push_back(c);
      continue;
    }
    Result<jinja::Value> parsed = jinja::ParseJson(args->str());
    if (!parsed.ok() || !parsed->is_dict()) {
      out_calls.push_back(c);
      continue;
    }
    std::vector<std::pair<jinja::Value, jinja::Value>> fields = fn->entries();
    for (auto& [k, v] : fields) {
      if (k.is_string() && k.str() == "arguments") v = *parsed;
    }
    std::vector<std::pair<jinja::Value, jinja::Value>> cf = c.entries();
    for (auto& [k, v] : cf) {
      if (k.is_string() && k.str() == "function") v = jinja::Value::Dict(std::move(fields));
    }
    out_calls.push_back(jinja::Value::Dict(std::move(cf)));
  }
  std::vector<std::pair<jinja::Value, jinja::Value>> mf = message.entries();
  for (auto& [k, v] : mf) {
    if (k.is_string() && k.str() == "tool_calls") v = jinja::Value::List(std::move(out_calls));
  }
  return jinja::Value::Dict(std::move(mf));
}

}  // namespace kvtier::server
