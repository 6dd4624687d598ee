// Value and the Python semantics templates see: truth, str(), repr(), ==, ordering, json.dumps.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "jinja/internal.h"

namespace kvtier::jinja {

namespace {
const std::string kEmpty;
const std::vector<Value> kNoItems;
const std::vector<std::pair<Value, Value>> kNoEntries;
}  // namespace

void Fail(std::string msg) { throw JinjaError(JinjaError::Type::kRuntime, std::move(msg)); }

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<std::string>(std::move(hint));
  return v;
}
Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t v) : kind_(Kind::kInt), i_(v) {}
Value::Value(double v) : kind_(Kind::kFloat), f_(v) {}
Value::Value(std::string s) : kind_(Kind::kString), s_(std::make_shared<std::string>(std::move(s))) {}
Value Value::Markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}
Value Value::List(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = tuple;
  v.list_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}
Value Value::Generator(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.gen_ = true;
  return v;
}
Value Value::Dict(std::vector<std::pair<Value, Value>> items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<DictRep>();
  for (auto& [k, x] : items) v.dict_->Set(std::move(k), std::move(x));
  return v;
}
Value Value::Namespace(std::vector<std::pair<Value, Value>> items) {
  Value v = Dict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::FromCallable(std::shared_ptr<const Callable> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::move(fn);
  return v;
}
const std::string& Value::str() const { return s_ ? *s_ : kEmpty; }
const std::vector<Value>& Value::items() const { return list_ ? *list_ : kNoItems; }
const std::vector<std::pair<Value, Value>>& Value::entries() const {
  return dict_ ? dict_->items : kNoEntries;
}
const Value* Value::Find(std::string_view key) const { return dict_ ? dict_->Find(key) : nullptr; }
const Value* Value::Find(const Value& key) const { return dict_ ? dict_->Find(key) : nullptr; }
void Value::Append(Value v) {
  if (list_) list_->push_back(std::move(v));
}
void Value::Set(Value key, Value v) {
  if (dict_) dict_->Set(std::move(key), std::move(v));
}

Value* DictRep::Find(const Value& key) {
  for (auto& [k, v] : items) {
    if (Equal(k, key)) return &v;
  }
  return nullptr;
}
Value* DictRep::Find(std::string_view key) {
  for (auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}
void DictRep::Set(Value key, Value v) {
  if (Value* old = Find(key)) {
    *old = std::move(v);
  } else {
    items.emplace_back(std::move(key), std::move(v));
  }
}

const Value* Args::Kw(std::string_view name) const {
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return nullptr;
}
Value Args::Get(size_t index, std::string_view name, Value fallback) const {
  if (index < pos.size()) return pos[index];
  if (const Value* v = Kw(name)) return *v;
  return fallback;
}
Value MakeFunction(std::string name, std::function<Value(Args&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value::FromCallable(std::move(c));
}

// ---- UTF-8 ----
std::u32string Decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (i + n > s.size()) n = 1;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}
std::string Encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}
size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}
bool IsPySpace(char32_t c) {  // str.isspace()
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}
std::string HtmlEscape(std::string_view s) {  // markupsafe.escape
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

void ThrowUndefined(const Value& v) {
  Fail(v.str().empty() ? "undefined value" : v.str());
}

// ---- truth, str, repr ----
bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.as_bool();
    case Value::Kind::kInt: return v.as_int() != 0;
    case Value::Kind::kFloat: return v.as_float() != 0.0;
    case Value::Kind::kString: return !v.str().empty();
    case Value::Kind::kList: return v.is_generator() || !v.items().empty();
    case Value::Kind::kDict: return !v.entries().empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable: return true;
  }
  return false;
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  // Shortest digits that round-trip, then Python's layout: fixed for 1e-4 <= |d| < 1e16.
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  bool neg = false;
  if (!mant.empty() && mant[0] == '-') {
    neg = true;
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits.push_back(c);
  }
  std::string out;
  if (exp >= -5 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." +
            digits.substr(static_cast<size_t>(exp + 1));
    }
    if (exp < -4) {  // Python switches to exponent below 1e-4
      out.clear();
    }
  }
  if (out.empty()) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return neg ? "-" + out : out;
}

namespace {

bool IsPrintable(char32_t c) {  // str.isprintable(), close enough for chat text
  if (c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x2064) || c == 0x3000 || c == 0xFEFF) return false;
  if (c >= 0xD800 && c <= 0xDFFF) return false;
  return true;
}

std::string ReprString(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : Decode(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!IsPrintable(c)) {
      char buf[16];
      if (c < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      out += Encode(std::u32string_view(&c, 1));
    }
  }
  out.push_back(q);
  return out;
}

}  // namespace

std::string Repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return v.is_markup() ? "Markup(" + ReprString(v.str()) + ")" : ReprString(v.str());
    case Value::Kind::kList: {
      if (v.is_generator()) return "<generator object>";
      std::string out = v.is_tuple() ? "(" : "[";
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += Repr(items[i]);
      }
      if (v.is_tuple() && items.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return out;
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.entries()) {
        if (!first) out += ", ";
        first = false;
        out += Repr(k) + ": " + Repr(x);
      }
      return out + "}";
    }
    case Value::Kind::kNamespace: {
      Value d = Value::Dict(v.entries());
      return "<Namespace " + Repr(d) + ">";
    }
    case Value::Kind::kUndefined: return "Undefined";
    default: return ToStr(v);
  }
}

std::string ToStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return FloatRepr(v.as_float());
    case Value::Kind::kString: return v.str();
    case Value::Kind::kCallable: return "<function " + v.callable()->name + ">";
    default: return Repr(v);
  }
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return v.is_markup() ? "Markup" : "str";
    case Value::Kind::kList: return v.is_generator() ? "generator" : v.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kCallable: return "function";
  }
  return "object";
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
      return a.as_float() == b.as_float();
    }
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_generator() || b.is_generator()) return &a.items() == &b.items();
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!Equal(a.items()[i], b.items()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.entries().size() != b.entries().size()) return false;
      for (const auto& [k, x] : a.entries()) {
        const Value* y = b.Find(k);
        if (y == nullptr || !Equal(x, *y)) return false;
      }
      return true;
    }
    default: return a.dict_rep() == b.dict_rep() && a.callable() == b.callable();
  }
}

int Compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) {
    const double x = a.as_float(), y = b.as_float();
    if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat) {
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equal(x[i], y[i])) return Compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) ThrowUndefined(a);
  if (b.is_undefined()) ThrowUndefined(b);
  Fail("'" + std::string(op) + "' not supported between instances of '" + TypeName(a) +
       "' and '" + TypeName(b) + "'");
}

// ---- json.dumps ----
namespace {

void JsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (char32_t c : Decode(s)) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default: {
        char buf[16];
        if (c < 0x20 || (ensure_ascii && c > 0x7E && c != 0x7F) || (ensure_ascii && c == 0x7F)) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                          0xDC00 + (v & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          }
          *out += buf;
        } else {
          *out += Encode(std::u32string_view(&c, 1));
        }
      }
    }
  }
  out->push_back('"');
}

void Json(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  auto newline = [&](int d) {
    if (o.indent < 0 && o.indent_str.empty()) return;
    out->push_back('\n');
    for (int i = 0; i < d; ++i) {
      if (!o.indent_str.empty()) {
        *out += o.indent_str;
      } else {
        out->append(static_cast<size_t>(o.indent), ' ');
      }
    }
  };
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return;
    case Value::Kind::kBool: *out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: *out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d < 0 ? "-Infinity" : "Infinity";
      } else {
        *out += FloatRepr(d);
      }
      return;
    }
    case Value::Kind::kString: JsonString(v.str(), o.ensure_ascii, out); return;
    case Value::Kind::kList: {
      if (v.is_generator()) Fail("Object of type generator is not JSON serializable");
      if (v.items().empty()) {
        *out += "[]";
        return;
      }
      out->push_back('[');
      bool first = true;
      for (const Value& x : v.items()) {
        if (!first) *out += o.item_sep;
        first = false;
        newline(depth + 1);
        Json(x, o, depth + 1, out);
      }
      newline(depth);
      out->push_back(']');
      return;
    }
    case Value::Kind::kDict: {
      if (v.entries().empty()) {
        *out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& e : v.entries()) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](const auto* x, const auto* y) {
          return Compare(x->first, y->first, "<") < 0;
        });
      }
      out->push_back('{');
      bool first = true;
      for (const auto* e : entries) {
        if (!first) *out += o.item_sep;
        first = false;
        newline(depth + 1);
        const Value& k = e->first;
        if (k.is_string()) {
          JsonString(k.str(), o.ensure_ascii, out);
        } else if (k.is_none()) {
          *out += "\"null\"";
        } else if (k.kind() == Value::Kind::kBool) {
          *out += k.as_bool() ? "\"true\"" : "\"false\"";
        } else if (k.kind() == Value::Kind::kInt || k.kind() == Value::Kind::kFloat) {
          *out += "\"" + ToStr(k) + "\"";
        } else {
          Fail("keys must be str, int, float, bool or None, not " + TypeName(k));
        }
        *out += o.key_sep;
        Json(e->second, o, depth + 1, out);
      }
      newline(depth);
      out->push_back('}');
      return;
    }
    default:
      if (v.is_undefined()) ThrowUndefined(v);
      Fail("Object of type " + TypeName(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string ToJson(const Value& v, const JsonOptions& o) {
  std::string out;
  Json(v, o, 0, &out);
  return out;
}

}  // namespace kvtier::jinja
