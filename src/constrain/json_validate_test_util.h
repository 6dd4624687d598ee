// Test support: a small JSON-Schema validator for the subset json_schema.h compiles, written
// independently of the matcher (recursive descent over nlohmann::json values), so tests can
// check that constrained outputs validate. Thread-safe (pure functions).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kvtier::constrain::testing {

inline bool ValidateJson(const nlohmann::json& schema, const nlohmann::json& v,
                         const nlohmann::json& root, int depth = 0) {
  using json = nlohmann::json;
  if (depth > 64) return false;
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref")) {
    const std::string r = schema["$ref"].get<std::string>();
    return ValidateJson(root.at(json::json_pointer(r.substr(1))), v, root, depth + 1);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    int n = 0;
    for (const json& alt : schema[key]) n += ValidateJson(alt, v, root, depth + 1) ? 1 : 0;
    if (std::string(key) == "anyOf" ? n == 0 : n != 1) return false;
  }
  if (schema.contains("const") && schema["const"] != v) return false;
  if (schema.contains("enum")) {
    bool found = false;
    for (const json& e : schema["enum"]) found = found || e == v;
    if (!found) return false;
  }
  if (schema.contains("type")) {
    json types = schema["type"].is_array() ? schema["type"] : json::array({schema["type"]});
    bool ok = false;
    for (const json& t : types) {
      const std::string s = t.get<std::string>();
      ok = ok || (s == "object" && v.is_object()) || (s == "array" && v.is_array()) ||
           (s == "string" && v.is_string()) || (s == "number" && v.is_number()) ||
           (s == "integer" && v.is_number_integer()) || (s == "boolean" && v.is_boolean()) ||
           (s == "null" && v.is_null());
    }
    if (!ok) return false;
  }
  if (v.is_object()) {
    const json props = schema.value("properties", json::object());
    for (const json& r : schema.value("required", json::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (!ValidateJson(props[it.key()], it.value(), root, depth + 1)) return false;
      } else if (schema.contains("additionalProperties") &&
                 !ValidateJson(schema["additionalProperties"], it.value(), root, depth + 1)) {
        return false;
      }
    }
  }
  if (v.is_array()) {
    if (v.size() < schema.value("minItems", size_t{0})) return false;
    if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<size_t>()) return false;
    if (schema.contains("items")) {
      for (const json& x : v) {
        if (!ValidateJson(schema["items"], x, root, depth + 1)) return false;
      }
    }
  }
  if (v.is_string()) {
    size_t cps = 0;  // code points
    for (unsigned char c : v.get<std::string>()) cps += (c & 0xc0) != 0x80 ? 1 : 0;
    if (cps < schema.value("minLength", size_t{0})) return false;
    if (schema.contains("maxLength") && cps > schema["maxLength"].get<size_t>()) return false;
  }
  return true;
}

}  // namespace kvtier::constrain::testing
