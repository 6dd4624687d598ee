// ParseResponseFormat: see response_format.h.
#include "server/response_format.h"

#include <string>

#include "constrain/json_schema.h"

namespace kvtier::server {
namespace {

using json = nlohmann::json;

bool Bad(ApiError* e, std::string param, std::string message) {
  *e = ApiError{};
  e->param = std::move(param);
  e->message = std::move(message);
  return false;
}

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace

bool ParseResponseFormat(const json& body, ApiRequest* r, ApiError* e) {
  auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return true;
  const json& rf = *it;
  if (!rf.is_object()) {
    return Bad(e, "response_format",
               std::string("response_format: expected an object, got ") + rf.type_name());
  }
  auto t = rf.find("type");
  if (t == rf.end() || !t->is_string()) {
    return Bad(e, "response_format.type",
               "response_format.type: required: one of 'text', 'json_object', 'json_schema'");
  }
  const std::string type = t->get<std::string>();
  if (type == "text") return true;
  if (type == "json_object") {
    r->json_grammar = constrain::JsonGrammar::AnyValue(/*object_only=*/true);
    return true;
  }
  if (type != "json_schema") {
    return Bad(e, "response_format.type",
               "response_format.type: expected one of 'text', 'json_object', 'json_schema', got '" +
                   type + "'");
  }
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object()) {
    return Bad(e, "response_format.json_schema",
               "response_format.json_schema: required with type 'json_schema': an object with "
               "'name' and 'schema'");
  }
  auto name = js->find("name");
  if (name == js->end() || !name->is_string() || !ValidName(name->get<std::string>())) {
    return Bad(e, "response_format.json_schema.name",
               "response_format.json_schema.name: required: 1 to 64 of a-z, A-Z, 0-9, _ and -");
  }
  if (auto strict = js->find("strict");
      strict != js->end() && !strict->is_null() && !strict->is_boolean()) {
    return Bad(e, "response_format.json_schema.strict",
               std::string("response_format.json_schema.strict: expected a boolean, got ") +
                   strict->type_name());
  }
  auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null()) {  // no schema: any JSON value
    r->json_grammar = constrain::JsonGrammar::AnyValue(false);
    return true;
  }
  Result<std::shared_ptr<const constrain::JsonGrammar>> g = constrain::CompileJsonSchema(*schema);
  if (!g.ok()) {
    return Bad(e, "response_format.json_schema.schema",
               "response_format.json_schema.schema: " + g.status().message());
  }
  r->json_grammar = *g;
  return true;
}

}  // namespace kvtier::server
