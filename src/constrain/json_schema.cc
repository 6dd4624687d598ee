// CompileJsonSchema: see json_schema.h.
#include "constrain/json_schema.h"

#include <map>
#include <set>
#include <string>

namespace kvtier::constrain {
namespace {

using json = nlohmann::json;
constexpr int kMaxDepth = 64;

const std::set<std::string>& Annotations() {
  static const std::set<std::string> k = {"title",    "description", "default",  "examples",
                                          "format",   "$schema",     "$id",      "$comment",
                                          "deprecated", "readOnly",  "writeOnly", "$defs",
                                          "definitions"};
  return k;
}
const std::set<std::string>& Assertions() {
  static const std::set<std::string> k = {
      "type",  "properties", "required",  "additionalProperties", "items",     "enum",
      "const", "anyOf",      "oneOf",     "minItems",             "maxItems",  "minLength",
      "maxLength", "$ref"};
  return k;
}

std::string Escape(const std::string& s) {  // a JSON-pointer token
  std::string o;
  for (char c : s) {
    if (c == '~') o += "~0";
    else if (c == '/') o += "~1";
    else o += c;
  }
  return o;
}

class Compiler {
 public:
  explicit Compiler(const json& root) : root_(root), g_(JsonGrammar::Base()) {}

  Result<uint32_t> Compile(const json& s, const std::string& path, int depth) {
    if (depth > kMaxDepth) return Bad(path, "schema nested deeper than 64 levels");
    if (s.is_boolean()) {
      if (s.get<bool>()) return 0u;
      return Bad(path, "the schema false matches no value");
    }
    if (!s.is_object()) {
      return Bad(path, "expected a schema (an object or a boolean), got " + TypeName(s));
    }
    std::set<std::string> present;
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (Annotations().count(it.key()) > 0) continue;
      if (Assertions().count(it.key()) == 0) {
        return Bad(path + "/" + Escape(it.key()),
                   "the keyword '" + it.key() + "' is not supported");
      }
      present.insert(it.key());
    }
    if (present.count("$ref") > 0) {
      if (present.size() > 1) {
        return Bad(path, "$ref beside other keywords (" + *present.begin() + ") is not supported");
      }
      return Ref(s["$ref"], path + "/$ref", depth);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (present.count(key) == 0) continue;
      const std::string p = path + "/" + key;
      if (present.size() > 1) {
        return Bad(path, std::string(key) + " beside other keywords is not supported");
      }
      const json& alts = s[key];
      if (!alts.is_array() || alts.empty()) return Bad(p, "expected a non-empty array of schemas");
      JsonNode n;
      n.kind = NodeKind::kAnyOf;
      for (size_t i = 0; i < alts.size(); ++i) {
        Result<uint32_t> a = Compile(alts[i], p + "/" + std::to_string(i), depth + 1);
        if (!a.ok()) return a.status();
        n.alts.push_back(*a);
      }
      return Add(std::move(n));
    }
    // Types: given, or implied by the keywords present.
    std::vector<std::string> types;
    if (present.count("type") > 0) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) return Bad(path + "/type", "expected type names, got " + x.dump());
          types.push_back(x.get<std::string>());
        }
      } else {
        return Bad(path + "/type", "expected a type name or a non-empty array of them, got " +
                                       t.dump());
      }
      for (const std::string& t2 : types) {
        static const std::set<std::string> known = {"object", "array",   "string", "number",
                                                    "integer", "boolean", "null"};
        if (known.count(t2) == 0) return Bad(path + "/type", "unknown type '" + t2 + "'");
      }
    } else {
      if (present.count("properties") || present.count("required") ||
          present.count("additionalProperties")) {
        types.push_back("object");
      }
      if (present.count("items") || present.count("minItems") || present.count("maxItems")) {
        types.push_back("array");
      }
      if (present.count("minLength") || present.count("maxLength")) types.push_back("string");
    }
    if (present.count("enum") > 0 || present.count("const") > 0) {
      return Literals(s, path, types);
    }
    if (types.empty()) return 0u;  // any value
    JsonNode alts;
    alts.kind = NodeKind::kAnyOf;
    for (const std::string& t : types) {
      Result<uint32_t> n = Typed(s, path, t, depth);
      if (!n.ok()) return n.status();
      alts.alts.push_back(*n);
    }
    if (alts.alts.size() == 1) return alts.alts[0];
    return Add(std::move(alts));
  }

  JsonGrammar Take(uint32_t root) {
    g_.root = root;
    return std::move(g_);
  }

 private:
  static std::string TypeName(const json& v) { return v.type_name(); }
  static Status Bad(const std::string& path, const std::string& what) {
    return Status::InvalidArgument("schema at '" + path + "': " + what);
  }
  uint32_t Add(JsonNode n) {
    g_.nodes.push_back(std::move(n));
    return static_cast<uint32_t>(g_.nodes.size() - 1);
  }

  Result<uint32_t> Ref(const json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) return Bad(path, "expected a string, got " + ref.dump());
    const std::string r = ref.get<std::string>();
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    if (r.empty() || r[0] != '#') {
      return Bad(path, "only local references (\"#/...\") are supported, got \"" + r + "\"");
    }
    json::json_pointer ptr;
    try {
      ptr = json::json_pointer(r.substr(1));
    } catch (const json::exception&) {
      return Bad(path, "\"" + r + "\" is not a JSON pointer");
    }
    if (!root_.contains(ptr)) return Bad(path, "\"" + r + "\" points at nothing");
    // Reserve the node first so that the target may refer back to itself.
    JsonNode fwd;
    fwd.kind = NodeKind::kAnyOf;
    const uint32_t slot = Add(std::move(fwd));
    refs_[r] = slot;
    Result<uint32_t> target = Compile(root_.at(ptr), r, depth + 1);
    if (!target.ok()) return target.status();
    g_.nodes[slot].alts = {*target};
    return slot;
  }

  static bool OfType(const json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number_integer() ||
                                (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>())));
    if (t == "boolean") return v.is_boolean();
    return v.is_null();
  }

  Result<uint32_t> Literals(const json& s, const std::string& path,
                            const std::vector<std::string>& types) {
    std::vector<const json*> values;
    std::string where = path + "/const";
    if (s.contains("const")) {
      values.push_back(&s["const"]);
    }
    if (s.contains("enum")) {
      where = path + "/enum";
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return Bad(where, "expected a non-empty array");
      if (!values.empty()) return Bad(path, "both const and enum is not supported");
      for (const json& v : e) values.push_back(&v);
    }
    JsonNode alts;
    alts.kind = NodeKind::kAnyOf;
    for (const json* v : values) {
      bool typed = types.empty();
      for (const std::string& t : types) typed = typed || OfType(*v, t);
      if (!typed) continue;  // a value the type excludes can never validate
      JsonNode lit;
      lit.kind = NodeKind::kLiteral;
      lit.literal = v->dump(-1, ' ', false, json::error_handler_t::strict);
      alts.alts.push_back(Add(std::move(lit)));
    }
    if (alts.alts.empty()) return Bad(where, "no value is of the schema's type");
    if (alts.alts.size() == 1) return alts.alts[0];
    return Add(std::move(alts));
  }

  Result<uint32_t> Count(const json& s, const char* key, const std::string& path, uint32_t def,
                         uint32_t* out) {
    *out = def;
    auto it = s.find(key);
    if (it == s.end()) return 0u;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 0x7fffffff) {
      return Bad(path + "/" + key, "expected a non-negative integer, got " + it->dump());
    }
    *out = static_cast<uint32_t>(it->get<int64_t>());
    return 0u;
  }

  Result<uint32_t> Typed(const json& s, const std::string& path, const std::string& t, int depth) {
    if (t == "boolean") {
      JsonNode n;
      n.kind = NodeKind::kAnyOf;
      n.alts = {1, 2};
      return Add(std::move(n));
    }
    if (t == "null") return 3u;
    JsonNode n;
    if (t == "number" || t == "integer") {
      n.kind = t == "number" ? NodeKind::kNumber : NodeKind::kInteger;
      return Add(std::move(n));
    }
    if (t == "string") {
      n.kind = NodeKind::kString;
      for (auto r : {Count(s, "minLength", path, 0, &n.min_length),
                     Count(s, "maxLength", path, 0xffffffffu, &n.max_length)}) {
        if (!r.ok()) return r.status();
      }
      if (n.min_length > n.max_length) return Bad(path + "/minLength", "greater than maxLength");
      return Add(std::move(n));
    }
    if (t == "array") {
      n.kind = NodeKind::kArray;
      for (auto r : {Count(s, "minItems", path, 0, &n.min_items),
                     Count(s, "maxItems", path, 0xffffffffu, &n.max_items)}) {
        if (!r.ok()) return r.status();
      }
      if (n.min_items > n.max_items) return Bad(path + "/minItems", "greater than maxItems");
      n.items = 0;
      if (s.contains("items")) {
        if (s["items"].is_array()) {
          return Bad(path + "/items", "tuple items (an array of schemas) are not supported");
        }
        if (s["items"].is_boolean() && !s["items"].get<bool>()) {
          n.max_items = 0;  // items: false: only the empty array
          if (n.min_items > 0) return Bad(path + "/items", "false with minItems > 0");
        } else {
          Result<uint32_t> it = Compile(s["items"], path + "/items", depth + 1);
          if (!it.ok()) return it.status();
          n.items = *it;
        }
      }
      return Add(std::move(n));
    }
    // object
    n.kind = NodeKind::kObject;
    n.additional = 0;
    if (s.contains("properties")) {
      const json& props = s["properties"];
      if (!props.is_object()) {
        return Bad(path + "/properties", "expected an object of schemas, got " + TypeName(props));
      }
      if (props.size() > kMaxProperties) {
        return Bad(path + "/properties", "at most 64 properties are supported, got " +
                                             std::to_string(props.size()));
      }
      for (auto it = props.begin(); it != props.end(); ++it) {
        Result<uint32_t> p =
            Compile(it.value(), path + "/properties/" + Escape(it.key()), depth + 1);
        if (!p.ok()) return p.status();
        n.prop_names.push_back(it.key());
        n.prop_nodes.push_back(*p);
      }
    }
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (a.is_boolean()) {
        n.additional = a.get<bool>() ? 0 : kNoNode;
      } else {
        Result<uint32_t> p = Compile(a, path + "/additionalProperties", depth + 1);
        if (!p.ok()) return p.status();
        n.additional = *p;
      }
    }
    if (s.contains("required")) {
      const json& req = s["required"];
      if (!req.is_array()) return Bad(path + "/required", "expected an array of property names");
      for (size_t i = 0; i < req.size(); ++i) {
        const std::string p = path + "/required/" + std::to_string(i);
        if (!req[i].is_string()) return Bad(p, "expected a property name, got " + req[i].dump());
        const std::string name = req[i].get<std::string>();
        size_t k = 0;
        while (k < n.prop_names.size() && n.prop_names[k] != name) ++k;
        if (k == n.prop_names.size()) {  // required but not described: any value
          if (n.additional == kNoNode) {
            return Bad(p, "'" + name + "' is required but not in properties, and "
                          "additionalProperties is false");
          }
          if (k >= kMaxProperties) return Bad(p, "more than 64 properties");
          n.prop_names.push_back(name);
          n.prop_nodes.push_back(n.additional);
        }
        n.required |= uint64_t{1} << k;
      }
    }
    return Add(std::move(n));
  }

  const json& root_;
  JsonGrammar g_;
  std::map<std::string, uint32_t> refs_;
};

}  // namespace

Result<std::shared_ptr<const JsonGrammar>> CompileJsonSchema(const nlohmann::json& schema) {
  Compiler c(schema);
  Result<uint32_t> root = c.Compile(schema, "#", 0);
  if (!root.ok()) return root.status();
  return std::make_shared<const JsonGrammar>(c.Take(*root));
}

}  // namespace kvtier::constrain
