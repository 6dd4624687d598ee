// jinja2's filters, tests and globals (jinja2/filters.py, tests.py, defaults.py, 3.1), with
// transformers' tojson, raise_exception and strftime_now.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>

#include "jinja/internal.h"

namespace kvtier::jinja {

namespace {

using Filter = std::function<Value(Interp&, const Value&, Args&)>;
using Test = std::function<bool(Interp&, const Value&, Args&)>;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int64_t Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(CodePointCount(v.str()));
    case Value::Kind::kList:
      if (v.is_generator()) Fail("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.entries().size());
    default: Fail("object of type '" + TypeName(v) + "' has no len()");
  }
}

// make_attrgetter: "a.b.0" through getitem (item first, then attribute).
Value Attribute(const Value& item, const Value& attr) {
  if (!attr.is_string()) return GetItem(item, attr);
  Value v = item;
  const std::string& path = attr.str();
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
    v = GetItem(v, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return v;
}

// Key for sort / unique / min / max: lower-cased strings unless case-sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(Lower(v.str()));
  return v;
}

std::vector<Value> Sorted(std::vector<Value> items, bool reverse, bool cs, const Value& attr) {
  auto key = [&](const Value& v) { return SortKey(attr.is_none() || attr.is_undefined() ? v : Attribute(v, attr), cs); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? Compare(key(b), key(a), "<") < 0 : Compare(key(a), key(b), "<") < 0;
  });
  return items;
}

Value ToInt(const Value& v, const Value& def, int base) {
  if (v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool) return Value(v.as_int());
  if (v.kind() == Value::Kind::kFloat) {
    if (!std::isfinite(v.as_float())) return def;
    return Value(static_cast<int64_t>(v.as_float()));
  }
  if (v.is_undefined()) ThrowUndefined(v);
  if (v.is_string()) {
    std::string s;
    for (char c : v.str()) {
      if (c != '_') s.push_back(c);
    }
    const size_t b = s.find_first_not_of(" \t\n\r\f\v");
    const size_t e = s.find_last_not_of(" \t\n\r\f\v");
    if (b == std::string::npos) return def;
    s = s.substr(b, e - b + 1);
    try {
      size_t used = 0;
      const long long x = std::stoll(s, &used, base);
      if (used == s.size()) return Value(static_cast<int64_t>(x));
    } catch (const std::exception&) {
    }
    try {
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return Value(static_cast<int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return def;
}

Value ToFloat(const Value& v, const Value& def) {
  if (v.is_number()) return Value(v.as_float());
  if (v.is_undefined()) ThrowUndefined(v);
  if (v.is_string()) {
    try {
      size_t used = 0;
      std::string s = v.str();
      const double d = std::stod(s, &used);
      while (used < s.size() && IsPySpace(static_cast<unsigned char>(s[used]))) ++used;
      if (used == s.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return def;
}

Value Tojson(const Value& v, Args& a) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  JsonOptions o;
  o.ensure_ascii = Truthy(a.Get(0, "ensure_ascii", Value(false)));
  const Value indent = a.Get(1, "indent", Value::None());
  const Value seps = a.Get(2, "separators", Value::None());
  o.sort_keys = Truthy(a.Get(3, "sort_keys", Value(false)));
  if (indent.is_string()) {
    o.indent_str = indent.str();
    o.indent = o.indent_str.empty() ? 0 : -1;
    if (o.indent_str.empty()) o.indent = 0;
  } else if (indent.kind() == Value::Kind::kInt) {
    o.indent = static_cast<int>(std::max<int64_t>(0, indent.as_int()));
  }
  if (o.indent >= 0 || !o.indent_str.empty()) o.item_sep = ",";
  if (seps.is_list()) {
    if (seps.items().size() != 2) Fail("separators must be a pair");
    o.item_sep = ToStr(seps.items()[0]);
    o.key_sep = ToStr(seps.items()[1]);
  }
  return Value(ToJson(v, o));
}

Value Indent(const Value& v, Args& a) {
  const Value width = a.Get(0, "width", Value(int64_t{4}));
  const bool first = Truthy(a.Get(1, "first", Value(false)));
  const bool blank = Truthy(a.Get(2, "blank", Value(false)));
  const std::string ind = width.is_string() ? width.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), ' ');
  std::string s = ToStr(v) + "\n";
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t e = s.find_first_of("\n\r", pos);
    if (e == std::string::npos) {
      lines.push_back(s.substr(pos));
      break;
    }
    lines.push_back(s.substr(pos, e - pos));
    pos = e + 1;
    if (s[e] == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
  }
  if (first) rv = ind + rv;
  return v.is_markup() ? Value::Markup(rv) : Value(rv);
}

Value SelectOrReject(Interp& in, const Value& v, Args& a, bool attr, bool select) {
  std::vector<Value> out;
  if (!Truthy(v)) return Value::Generator({});
  size_t next = 0;
  Value attribute;
  if (attr) {
    if (a.pos.empty()) Fail("Missing parameter for attribute name");
    attribute = a.pos[next++];
  }
  const bool has_test = next < a.pos.size();
  std::string test = has_test ? ToStr(a.pos[next++]) : "";
  Args targs;
  targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(std::min(next, a.pos.size())), a.pos.end());
  targs.kw = a.kw;
  for (const Value& item : Iterate(v)) {
    const Value x = attr ? Attribute(item, attribute) : item;
    Args t = targs;
    const bool ok = has_test ? ApplyTest(in, test, x, t) : Truthy(x);
    if (ok == select) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

Value Map(Interp& in, const Value& v, Args& a) {
  std::vector<Value> out;
  if (!Truthy(v)) return Value::Generator({});
  if (a.pos.empty() && a.Kw("attribute")) {
    const Value attr = *a.Kw("attribute");
    const Value* def = a.Kw("default");
    for (const Value& item : Iterate(v)) {
      Value x = Attribute(item, attr);
      if (x.is_undefined() && def) x = *def;
      out.push_back(x);
    }
    return Value::Generator(std::move(out));
  }
  if (a.pos.empty()) Fail("map requires a filter argument");
  const std::string name = ToStr(a.pos[0]);
  if (!HasFilter(name)) Fail("No filter named '" + name + "'.");
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& item : Iterate(v)) {
    Args r = rest;
    out.push_back(ApplyFilter(in, name, item, r));
  }
  return Value::Generator(std::move(out));
}

Value MinMax(const Value& v, Args& a, bool max) {
  const bool cs = Truthy(a.Get(0, "case_sensitive", Value(false)));
  const Value attr = a.Get(1, "attribute", Value::None());
  std::vector<Value> items = Iterate(v);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) { return SortKey(attr.is_none() ? x : Attribute(x, attr), cs); };
  Value best = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    const int c = Compare(key(items[i]), key(best), max ? ">" : "<");
    if (max ? c > 0 : c < 0) best = items[i];
  }
  return best;
}

std::string Title(const std::string& s) {  // filters.do_title
  std::string out;
  bool start = true;
  for (char c : s) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(static_cast<unsigned char>(c));
    if (sep) {
      out.push_back(c);
      start = true;
    } else {
      out.push_back(static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c))));
      start = false;
    }
  }
  return out;
}

double PyRound(double x, int64_t digits) {  // round-half-even at `digits` decimals
  const double m = std::pow(10.0, static_cast<double>(digits));
  const double y = x * m;
  double r = std::nearbyint(y);
  return r / m;
}

const std::map<std::string, Filter, std::less<>>& Filters() {
  static const auto* filters = new std::map<std::string, Filter, std::less<>>{
      {"abs", [](Interp&, const Value& v, Args&) {
         if (!v.is_number()) Fail("bad operand type for abs(): '" + TypeName(v) + "'");
         return v.kind() == Value::Kind::kFloat ? Value(std::fabs(v.as_float())) : Value(static_cast<int64_t>(std::llabs(v.as_int())));
       }},
      {"attr", [](Interp&, const Value& v, Args& a) { return GetAttr(v, ToStr(a.Get(0, "name"))); }},
      {"batch", [](Interp&, const Value& v, Args& a) {
         const int64_t n = a.Get(0, "linecount").as_int();
         if (n <= 0) Fail("batch size must be positive");
         const Value fill = a.Get(1, "fill_with", Value::None());
         std::vector<Value> out, cur;
         for (const Value& x : Iterate(v)) {
           cur.push_back(x);
           if (static_cast<int64_t>(cur.size()) == n) {
             out.push_back(Value::List(std::move(cur)));
             cur.clear();
           }
         }
         if (!cur.empty()) {
           if (!fill.is_none()) while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
           out.push_back(Value::List(std::move(cur)));
         }
         return Value::List(std::move(out));
       }},
      {"capitalize", [](Interp&, const Value& v, Args&) {
         std::string s = Lower(ToStr(v));
         if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
         return Value(s);
       }},
      {"center", [](Interp&, const Value& v, Args& a) {
         const std::string s = ToStr(v);
         const auto w = static_cast<size_t>(std::max<int64_t>(0, a.Get(0, "width", Value(int64_t{80})).as_int()));
         const size_t len = CodePointCount(s);
         if (len >= w) return Value(s);
         const size_t pad = w - len, left = pad / 2 + (pad & w & 1);
         return Value(std::string(left, ' ') + s + std::string(pad - left, ' '));
       }},
      {"count", [](Interp&, const Value& v, Args&) { return Value(Length(v)); }},
      {"default", [](Interp&, const Value& v, Args& a) {
         const bool boolean = Truthy(a.Get(1, "boolean", Value(false)));
         if (v.is_undefined() || (boolean && !Truthy(v))) return a.Get(0, "default_value", Value(""));
         return v;
       }},
      {"dictsort", [](Interp&, const Value& v, Args& a) {
         const bool cs = Truthy(a.Get(0, "case_sensitive", Value(false)));
         const std::string by = ToStr(a.Get(1, "by", Value("key")));
         const bool reverse = Truthy(a.Get(2, "reverse", Value(false)));
         if (!v.is_dict()) Fail("dictsort requires a mapping");
         std::vector<Value> items;
         for (const auto& [k, x] : v.entries()) items.push_back(Value::List({k, x}, true));
         return Value::List(Sorted(std::move(items), reverse, cs, Value(int64_t{by == "value" ? 1 : 0})));
       }},
      {"escape", [](Interp&, const Value& v, Args&) {
         return v.is_markup() ? v : Value::Markup(HtmlEscape(ToStr(v)));
       }},
      {"first", [](Interp&, const Value& v, Args&) {
         std::vector<Value> items = Iterate(v);
         return items.empty() ? Value::Undefined("No first item, sequence was empty.") : items[0];
       }},
      {"float", [](Interp&, const Value& v, Args& a) { return ToFloat(v, a.Get(0, "default", Value(0.0))); }},
      {"forceescape", [](Interp&, const Value& v, Args&) { return Value::Markup(HtmlEscape(ToStr(v))); }},
      {"format", [](Interp&, const Value& v, Args& a) {
         return PercentFormat(Value(ToStr(v)), a.pos.size() == 1 ? a.pos[0] : Value::List(a.pos, true));
       }},
      {"indent", [](Interp&, const Value& v, Args& a) { return Indent(v, a); }},
      {"int", [](Interp&, const Value& v, Args& a) {
         return ToInt(v, a.Get(0, "default", Value(int64_t{0})), static_cast<int>(a.Get(1, "base", Value(int64_t{10})).as_int()));
       }},
      {"items", [](Interp&, const Value& v, Args&) {
         if (v.is_undefined()) return Value::List({});
         if (!v.is_dict()) Fail("Can only get item pairs from a mapping.");
         std::vector<Value> out;
         for (const auto& [k, x] : v.entries()) out.push_back(Value::List({k, x}, true));
         return Value::Generator(std::move(out));
       }},
      {"join", [](Interp&, const Value& v, Args& a) {
         const std::string d = ToStr(a.Get(0, "d", Value("")));
         const Value attr = a.Get(1, "attribute", Value::None());
         std::string out;
         bool first = true;
         for (const Value& x : Iterate(v)) {
           if (!first) out += d;
           first = false;
           out += ToStr(attr.is_none() ? x : Attribute(x, attr));
         }
         return Value(out);
       }},
      {"last", [](Interp&, const Value& v, Args&) {
         std::vector<Value> items = Iterate(v);
         return items.empty() ? Value::Undefined("No last item, sequence was empty.") : items.back();
       }},
      {"length", [](Interp&, const Value& v, Args&) { return Value(Length(v)); }},
      {"list", [](Interp&, const Value& v, Args&) { return Value::List(Iterate(v)); }},
      {"lower", [](Interp&, const Value& v, Args&) { return Value(Lower(ToStr(v))); }},
      {"map", [](Interp& in, const Value& v, Args& a) { return Map(in, v, a); }},
      {"max", [](Interp&, const Value& v, Args& a) { return MinMax(v, a, true); }},
      {"min", [](Interp&, const Value& v, Args& a) { return MinMax(v, a, false); }},
      {"reject", [](Interp& in, const Value& v, Args& a) { return SelectOrReject(in, v, a, false, false); }},
      {"rejectattr", [](Interp& in, const Value& v, Args& a) { return SelectOrReject(in, v, a, true, false); }},
      {"replace", [](Interp&, const Value& v, Args& a) {
         Args m;
         m.pos = {a.Get(0, "old"), a.Get(1, "new")};
         const Value count = a.Get(2, "count", Value::None());
         if (!count.is_none()) m.pos.push_back(count);
         const Value s(ToStr(v));
         return GetAttr(s, "replace").callable()->fn(m);
       }},
      {"reverse", [](Interp&, const Value& v, Args&) {
         if (v.is_string()) {
           std::u32string u = Decode(v.str());
           std::reverse(u.begin(), u.end());
           return Value(Encode(u));
         }
         std::vector<Value> items = Iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::Generator(std::move(items));
       }},
      {"round", [](Interp&, const Value& v, Args& a) {
         const int64_t prec = a.Get(0, "precision", Value(int64_t{0})).as_int();
         const std::string method = ToStr(a.Get(1, "method", Value("common")));
         const double m = std::pow(10.0, static_cast<double>(prec));
         if (method == "ceil") return Value(std::ceil(v.as_float() * m) / m);
         if (method == "floor") return Value(std::floor(v.as_float() * m) / m);
         return Value(PyRound(v.as_float(), prec));
       }},
      {"safe", [](Interp&, const Value& v, Args&) { return v.is_markup() ? v : Value::Markup(ToStr(v)); }},
      {"select", [](Interp& in, const Value& v, Args& a) { return SelectOrReject(in, v, a, false, true); }},
      {"selectattr", [](Interp& in, const Value& v, Args& a) { return SelectOrReject(in, v, a, true, true); }},
      {"sort", [](Interp&, const Value& v, Args& a) {
         return Value::List(Sorted(Iterate(v), Truthy(a.Get(0, "reverse", Value(false))),
                                   Truthy(a.Get(1, "case_sensitive", Value(false))),
                                   a.Get(2, "attribute", Value::None())));
       }},
      {"string", [](Interp&, const Value& v, Args&) { return v.is_string() ? v : Value(ToStr(v)); }},
      {"sum", [](Interp&, const Value& v, Args& a) {
         const Value attr = a.Get(0, "attribute", Value::None());
         Value total = a.Get(1, "start", Value(int64_t{0}));
         for (const Value& x : Iterate(v)) total = BinaryOp("+", total, attr.is_none() ? x : Attribute(x, attr));
         return total;
       }},
      {"title", [](Interp&, const Value& v, Args&) { return Value(Title(ToStr(v))); }},
      {"tojson", [](Interp&, const Value& v, Args& a) { return Tojson(v, a); }},
      {"trim", [](Interp&, const Value& v, Args& a) {
         Args m;
         m.pos.push_back(a.Get(0, "chars", Value::None()));
         return GetAttr(Value(ToStr(v)), "strip").callable()->fn(m);
       }},
      {"truncate", [](Interp&, const Value& v, Args& a) {
         const std::string s = ToStr(v);
         const int64_t length = a.Get(0, "length", Value(int64_t{255})).as_int();
         const bool killwords = Truthy(a.Get(1, "killwords", Value(false)));
         const std::string end = ToStr(a.Get(2, "end", Value("...")));
         const int64_t leeway = a.Get(3, "leeway", Value(int64_t{5})).as_int();
         std::u32string u = Decode(s);
         if (static_cast<int64_t>(u.size()) <= length + leeway) return Value(s);
         const auto keep = static_cast<size_t>(std::max<int64_t>(0, length - static_cast<int64_t>(CodePointCount(end))));
         std::u32string cut = u.substr(0, keep);
         if (!killwords) {
           const size_t sp = cut.rfind(U' ');
           if (sp != std::u32string::npos) cut.resize(sp);
         }
         return Value(Encode(cut) + end);
       }},
      {"unique", [](Interp&, const Value& v, Args& a) {
         const bool cs = Truthy(a.Get(0, "case_sensitive", Value(false)));
         const Value attr = a.Get(1, "attribute", Value::None());
         std::vector<Value> out, seen;
         for (const Value& x : Iterate(v)) {
           const Value k = SortKey(attr.is_none() ? x : Attribute(x, attr), cs);
           if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, k); })) {
             seen.push_back(k);
             out.push_back(x);
           }
         }
         return Value::Generator(std::move(out));
       }},
      {"upper", [](Interp&, const Value& v, Args&) {
         std::string s = ToStr(v);
         for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
         return Value(s);
       }},
      {"wordcount", [](Interp&, const Value& v, Args&) {
         int64_t n = 0;
         bool in_word = false;
         for (unsigned char c : ToStr(v)) {
           const bool w = std::isalnum(c) || c == '_' || c >= 0x80;
           if (w && !in_word) ++n;
           in_word = w;
         }
         return Value(n);
       }},
  };
  return *filters;
}

std::string_view Canonical(std::string_view name) {
  if (name == "d") return "default";
  if (name == "e") return "escape";
  return name;
}

bool Cmp(const Value& v, Args& a, std::string_view op) {
  const Value other = a.Get(0, "b");
  if (op == "==") return Equal(v, other);
  if (op == "!=") return !Equal(v, other);
  const int c = Compare(v, other, op);
  return op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
}

const std::map<std::string, Test, std::less<>>& Tests() {
  using K = Value::Kind;
  static const auto* tests = new std::map<std::string, Test, std::less<>>{
      {"defined", [](Interp&, const Value& v, Args&) { return !v.is_undefined(); }},
      {"undefined", [](Interp&, const Value& v, Args&) { return v.is_undefined(); }},
      {"none", [](Interp&, const Value& v, Args&) { return v.is_none(); }},
      {"boolean", [](Interp&, const Value& v, Args&) { return v.kind() == K::kBool; }},
      {"true", [](Interp&, const Value& v, Args&) { return v.kind() == K::kBool && v.as_bool(); }},
      {"false", [](Interp&, const Value& v, Args&) { return v.kind() == K::kBool && !v.as_bool(); }},
      {"integer", [](Interp&, const Value& v, Args&) { return v.kind() == K::kInt; }},
      {"float", [](Interp&, const Value& v, Args&) { return v.kind() == K::kFloat; }},
      {"number", [](Interp&, const Value& v, Args&) { return v.is_number(); }},
      {"string", [](Interp&, const Value& v, Args&) { return v.is_string(); }},
      {"mapping", [](Interp&, const Value& v, Args&) { return v.is_dict(); }},
      {"iterable", [](Interp&, const Value& v, Args&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"sequence", [](Interp&, const Value& v, Args&) {
         return v.is_undefined() || v.is_string() || (v.is_list() && !v.is_generator()) || v.is_dict();
       }},
      {"callable", [](Interp&, const Value& v, Args&) { return v.kind() == K::kCallable; }},
      {"sameas", [](Interp&, const Value& v, Args& a) {
         const Value o = a.Get(0, "other");
         if (v.kind() != o.kind()) return false;
         if (v.is_none() || v.is_undefined()) return true;
         if (v.kind() == K::kBool) return v.as_bool() == o.as_bool();
         if (v.is_list()) return &v.items() == &o.items();
         if (v.is_dict() || v.kind() == K::kNamespace) return v.dict_rep() == o.dict_rep();
         return Equal(v, o) && v.kind() == K::kInt && v.as_int() >= -5 && v.as_int() <= 256;
       }},
      {"escaped", [](Interp&, const Value& v, Args&) { return v.is_markup(); }},
      {"in", [](Interp&, const Value& v, Args& a) {
         const Value seq = a.Get(0, "seq");
         if (seq.is_string()) {
           if (!v.is_string()) Fail("'in <string>' requires string as left operand, not " + TypeName(v));
           return seq.str().find(v.str()) != std::string::npos;
         }
         if (seq.is_dict()) return seq.Find(v) != nullptr;
         if (seq.is_list() || seq.is_undefined()) {
           for (const Value& x : seq.items()) {
             if (Equal(x, v)) return true;
           }
           return false;
         }
         Fail("argument of type '" + TypeName(seq) + "' is not iterable");
       }},
      {"eq", [](Interp&, const Value& v, Args& a) { return Cmp(v, a, "=="); }},
      {"ne", [](Interp&, const Value& v, Args& a) { return Cmp(v, a, "!="); }},
      {"lt", [](Interp&, const Value& v, Args& a) { return Cmp(v, a, "<"); }},
      {"le", [](Interp&, const Value& v, Args& a) { return Cmp(v, a, "<="); }},
      {"gt", [](Interp&, const Value& v, Args& a) { return Cmp(v, a, ">"); }},
      {"ge", [](Interp&, const Value& v, Args& a) { return Cmp(v, a, ">="); }},
      {"odd", [](Interp&, const Value& v, Args&) { return (v.as_int() & 1) != 0; }},
      {"even", [](Interp&, const Value& v, Args&) { return (v.as_int() & 1) == 0; }},
      {"divisibleby", [](Interp&, const Value& v, Args& a) {
         const int64_t n = a.Get(0, "num").as_int();
         if (n == 0) Fail("integer division or modulo by zero");
         return v.as_int() % n == 0;
       }},
      {"lower", [](Interp&, const Value& v, Args&) { const std::string s = ToStr(v); return Lower(s) == s; }},
      {"upper", [](Interp&, const Value& v, Args&) {
         std::string s = ToStr(v), u = s;
         for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
         return u == s;
       }},
      {"filter", [](Interp&, const Value& v, Args&) { return v.is_string() && HasFilter(v.str()); }},
      {"test", [](Interp&, const Value& v, Args&) { return v.is_string() && HasTest(v.str()); }},
  };
  return *tests;
}

std::string_view CanonicalTest(std::string_view name) {
  if (name == "==" || name == "equalto") return "eq";
  if (name == "!=") return "ne";
  if (name == "<" || name == "lessthan") return "lt";
  if (name == "<=") return "le";
  if (name == ">" || name == "greaterthan") return "gt";
  if (name == ">=") return "ge";
  return name;
}

}  // namespace

bool HasFilter(std::string_view name) { return Filters().count(Canonical(name)) > 0; }
bool HasTest(std::string_view name) { return Tests().count(CanonicalTest(name)) > 0; }

Value ApplyFilter(Interp& in, std::string_view name, const Value& v, Args& args) {
  auto it = Filters().find(Canonical(name));
  if (it == Filters().end()) Fail("No filter named '" + std::string(name) + "'.");
  return it->second(in, v, args);
}

bool ApplyTest(Interp& in, std::string_view name, const Value& v, Args& args) {
  auto it = Tests().find(CanonicalTest(name));
  if (it == Tests().end()) Fail("No test named '" + std::string(name) + "'.");
  return it->second(in, v, args);
}

Value MakeRange(Args& a) {
  int64_t start = 0, stop = 0, step = 1;
  if (a.pos.size() == 1) {
    stop = a.pos[0].as_int();
  } else if (a.pos.size() >= 2) {
    start = a.pos[0].as_int();
    stop = a.pos[1].as_int();
    if (a.pos.size() > 2) step = a.pos[2].as_int();
  } else {
    Fail("range expected at least 1 argument, got 0");
  }
  for (const Value& x : a.pos) {
    if (x.kind() != Value::Kind::kInt && x.kind() != Value::Kind::kBool) {
      Fail("'" + TypeName(x) + "' object cannot be interpreted as an integer");
    }
  }
  if (step == 0) Fail("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() >= 100000) Fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.emplace_back(i);
  }
  return Value::List(std::move(out));
}

std::vector<std::pair<std::string, Value>> Globals(const RenderOptions& o) {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("range", MakeFunction("range", [](Args& a) { return MakeRange(a); }));
  g.emplace_back("dict", MakeFunction("dict", [](Args& a) {
    std::vector<std::pair<Value, Value>> items;
    if (!a.pos.empty()) {
      for (const auto& [k, v] : a.pos[0].entries()) items.emplace_back(k, v);
    }
    for (const auto& [k, v] : a.kw) items.emplace_back(Value(k), v);
    return Value::Dict(std::move(items));
  }));
  g.emplace_back("namespace", MakeFunction("namespace", [](Args& a) {
    std::vector<std::pair<Value, Value>> items;
    if (!a.pos.empty()) {
      for (const auto& [k, v] : a.pos[0].entries()) items.emplace_back(k, v);
    }
    for (const auto& [k, v] : a.kw) items.emplace_back(Value(k), v);
    return Value::Namespace(std::move(items));
  }));
  g.emplace_back("raise_exception", MakeFunction("raise_exception", [](Args& a) -> Value {
    throw JinjaError(JinjaError::Type::kRaised, ToStr(a.Get(0, "message")));
  }));
  const int64_t now = o.now_epoch_seconds;
  g.emplace_back("strftime_now", MakeFunction("strftime_now", [now](Args& a) {
    const std::string fmt = ToStr(a.Get(0, "format"));
    std::tm tm{};
    if (now >= 0) {
      const auto t = static_cast<std::time_t>(now);
      gmtime_r(&t, &tm);
    } else {
      const std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    char buf[512];
    const size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
    return Value(std::string(buf, n));
  }));
  g.emplace_back("joiner", MakeFunction("joiner", [](Args& a) {
    const std::string sep = ToStr(a.Get(0, "sep", Value(", ")));
    auto used = std::make_shared<bool>(false);
    return MakeFunction("joiner", [sep, used](Args&) {
      if (!*used) {
        *used = true;
        return Value("");
      }
      return Value(sep);
    });
  }));
  g.emplace_back("cycler", MakeFunction("cycler", [](Args& a) {
    auto items = std::make_shared<std::vector<Value>>(a.pos);
    auto pos = std::make_shared<size_t>(0);
    std::vector<std::pair<Value, Value>> ns;
    ns.emplace_back(Value("next"), MakeFunction("next", [items, pos](Args&) {
      if (items->empty()) return Value::None();
      Value v = (*items)[*pos];
      *pos = (*pos + 1) % items->size();
      return v;
    }));
    ns.emplace_back(Value("reset"), MakeFunction("reset", [pos](Args&) {
      *pos = 0;
      return Value::None();
    }));
    return Value::Namespace(std::move(ns));
  }));
  return g;
}

}  // namespace kvtier::jinja
