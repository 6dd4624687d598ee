// Attribute and item access as jinja2's ImmutableSandboxedEnvironment resolves them, the
// Python methods of str / list / dict that templates call (mutating ones are unsafe, as in the
// immutable sandbox), operators, slicing, str.format and str % args.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jinja/internal.h"

namespace kvtier::jinja {

namespace {

Value Unsafe(const std::string& attr, const Value& obj) {
  return Value::Undefined("access to attribute '" + attr + "' of '" + TypeName(obj) +
                          "' object is unsafe.");
}
Value NoAttr(const Value& obj, std::string_view attr) {
  return Value::Undefined("'" + TypeName(obj) + " object' has no attribute '" + std::string(attr) + "'");
}

std::string ArgStr(const Value& v, const char* what) {
  if (!v.is_string()) Fail(std::string(what) + " must be str, not " + TypeName(v));
  return v.str();
}

// Python str.strip family: `chars` none -> whitespace.
std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::u32string u = Decode(s);
  std::u32string set;
  const bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) set = Decode(ArgStr(chars, "strip arg"));
  auto strip_it = [&](char32_t c) { return ws ? IsPySpace(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left) while (b < e && strip_it(u[b])) ++b;
  if (right) while (e > b && strip_it(u[e - 1])) --e;
  return Encode(std::u32string_view(u).substr(b, e - b));
}

Value Split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<Value> out;
  if (sep.is_none() || sep.is_undefined()) {
    std::u32string u = Decode(s);
    std::vector<std::u32string> words;
    if (!from_right) {
      size_t i = 0;
      while (i < u.size()) {
        while (i < u.size() && IsPySpace(u[i])) ++i;
        if (i >= u.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          size_t e = u.size();
          while (e > i && IsPySpace(u[e - 1])) --e;
          words.push_back(u.substr(i, e - i));
          break;
        }
        size_t j = i;
        while (j < u.size() && !IsPySpace(u[j])) ++j;
        words.push_back(u.substr(i, j - i));
        i = j;
      }
    } else {
      size_t i = u.size();
      while (i > 0) {
        while (i > 0 && IsPySpace(u[i - 1])) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          size_t b = 0;
          while (b < i && IsPySpace(u[b])) ++b;
          words.push_back(u.substr(b, i - b));
          break;
        }
        size_t j = i;
        while (j > 0 && !IsPySpace(u[j - 1])) --j;
        words.push_back(u.substr(j, i - j));
        i = j;
      }
      std::reverse(words.begin(), words.end());
    }
    for (const auto& w : words) out.emplace_back(Encode(w));
    return Value::List(std::move(out));
  }
  const std::string d = ArgStr(sep, "separator");
  if (d.empty()) Fail("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    while (true) {
      const size_t f = s.find(d, pos);
      if (f == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
        parts.push_back(s.substr(pos));
        break;
      }
      parts.push_back(s.substr(pos, f - pos));
      pos = f + d.size();
    }
  } else {
    size_t end = s.size();
    while (true) {
      const size_t f = end >= d.size() ? s.rfind(d, end - d.size()) : std::string::npos;
      if (f == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
        parts.push_back(s.substr(0, end));
        break;
      }
      parts.push_back(s.substr(f + d.size(), end - f - d.size()));
      end = f;
    }
    std::reverse(parts.begin(), parts.end());
  }
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value::List(std::move(out));
}

std::string Replace(const std::string& s, const std::string& a, const std::string& b, int64_t count) {
  std::string out;
  if (a.empty()) {  // Python inserts `b` between every character
    const std::u32string u = Decode(s);
    int64_t n = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) {
        out += b;
        ++n;
      }
      if (i < u.size()) out += Encode(std::u32string_view(&u[i], 1));
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (true) {
    const size_t f = s.find(a, pos);
    if (f == std::string::npos || (count >= 0 && n >= count)) break;
    out.append(s, pos, f - pos);
    out += b;
    pos = f + a.size();
    ++n;
  }
  out.append(s, pos);
  return out;
}

std::string CaseMap(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  std::string out = s;
  bool prev_cased = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const auto c = static_cast<unsigned char>(out[i]);
    const bool alpha = std::isalpha(c) != 0;
    bool up = mode == 1 || (mode == 2 && !prev_cased) || (mode == 3 && i == 0);
    if (alpha) out[i] = static_cast<char>(up ? std::toupper(c) : std::tolower(c));
    prev_cased = alpha || c >= 0x80;
  }
  return out;
}

int64_t CpIndex(const std::string& s, size_t byte_pos) {
  return static_cast<int64_t>(CodePointCount(std::string_view(s).substr(0, byte_pos)));
}

Value StrMethod(const Value& self, const std::string& name, Args& a) {
  const std::string& s = self.str();
  auto arg = [&](size_t i) { return i < a.pos.size() ? a.pos[i] : Value(); };
  if (name == "strip") return Value(Strip(s, arg(0), true, true));
  if (name == "lstrip") return Value(Strip(s, arg(0), true, false));
  if (name == "rstrip") return Value(Strip(s, arg(0), false, true));
  if (name == "split" || name == "rsplit") {
    const Value sep = a.Get(0, "sep", Value::None());
    const Value max = a.Get(1, "maxsplit", Value(int64_t{-1}));
    return Split(s, sep, max.as_int(), name == "rsplit");
  }
  if (name == "splitlines") {
    std::vector<Value> out;
    const bool keep = Truthy(a.Get(0, "keepends", Value(false)));
    size_t pos = 0;
    while (pos < s.size()) {
      size_t e = s.find_first_of("\n\r", pos);
      if (e == std::string::npos) {
        out.emplace_back(s.substr(pos));
        break;
      }
      size_t next = e + 1;
      if (s[e] == '\r' && next < s.size() && s[next] == '\n') ++next;
      out.emplace_back(s.substr(pos, (keep ? next : e) - pos));
      pos = next;
    }
    return Value::List(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    const Value p = arg(0);
    std::vector<Value> cands = p.is_list() ? p.items() : std::vector<Value>{p};
    for (const Value& c : cands) {
      const std::string x = ArgStr(c, name.c_str());
      if (name == "startswith" ? s.compare(0, x.size(), x) == 0 && s.size() >= x.size()
                               : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) {
        return Value(true);
      }
    }
    return Value(false);
  }
  if (name == "replace") {
    return Value(Replace(s, ArgStr(arg(0), "replace() arg 1"), ArgStr(arg(1), "replace() arg 2"),
                         a.pos.size() > 2 ? a.pos[2].as_int() : -1));
  }
  if (name == "upper") return Value(CaseMap(s, 1));
  if (name == "lower" || name == "casefold") return Value(CaseMap(s, 0));
  if (name == "title") return Value(CaseMap(s, 2));
  if (name == "capitalize") return Value(CaseMap(s, 3));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    const std::string x = ArgStr(arg(0), "find arg");
    const size_t f = name[0] == 'r' ? s.rfind(x) : s.find(x);
    if (f == std::string::npos) {
      if (name.find("index") != std::string::npos) Fail("substring not found");
      return Value(int64_t{-1});
    }
    return Value(CpIndex(s, f));
  }
  if (name == "count") {
    const std::string x = ArgStr(arg(0), "count arg");
    if (x.empty()) return Value(static_cast<int64_t>(CodePointCount(s) + 1));
    int64_t n = 0;
    for (size_t p = s.find(x); p != std::string::npos; p = s.find(x, p + x.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& v : Iterate(arg(0))) {
      if (!first) out += s;
      first = false;
      out += ArgStr(v, "sequence item");
    }
    return Value(std::move(out));
  }
  if (name == "format") return StrFormat(s, a);
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string x = ArgStr(arg(0), name.c_str());
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
    if (name == "removesuffix" && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value(s.substr(0, s.size() - x.size()));
    }
    return Value(s);
  }
  auto all = [&](auto pred) {
    if (s.empty()) return Value(false);
    for (unsigned char c : s) {
      if (!pred(c)) return Value(false);
    }
    return Value(true);
  };
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return all([](unsigned char c) { return std::isdigit(c) != 0; });
  if (name == "isalpha") return all([](unsigned char c) { return std::isalpha(c) != 0 || c >= 0x80; });
  if (name == "isalnum") return all([](unsigned char c) { return std::isalnum(c) != 0 || c >= 0x80; });
  if (name == "isspace") return all([](unsigned char c) { return IsPySpace(c); });
  if (name == "islower") return Value(CaseMap(s, 0) == s && CaseMap(s, 1) != s);
  if (name == "isupper") return Value(CaseMap(s, 1) == s && CaseMap(s, 0) != s);
  Fail("'str' object has no attribute '" + name + "'");
}

const char* const kStrMethods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
    "replace", "upper", "lower", "casefold", "title", "capitalize", "find", "rfind", "index",
    "rindex", "count", "join", "format", "removeprefix", "removesuffix", "isdigit", "isnumeric",
    "isdecimal", "isalpha", "isalnum", "isspace", "islower", "isupper"};
const char* const kListMutators[] = {"append", "extend", "insert", "pop", "remove", "reverse",
                                     "sort", "clear"};
const char* const kDictMutators[] = {"pop", "popitem", "setdefault", "update", "clear"};

template <size_t N>
bool In(const char* const (&list)[N], std::string_view s) {
  for (const char* x : list) {
    if (s == x) return true;
  }
  return false;
}

Value Bound(const Value& self, std::string name, std::function<Value(const Value&, const std::string&, Args&)> fn) {
  return MakeFunction(name, [self, name, fn](Args& a) { return fn(self, name, a); });
}

Value ListMethod(const Value& self, const std::string& name, Args& a) {
  const auto& items = self.items();
  const Value x = a.Get(0, "value");
  if (name == "count") {
    return Value(static_cast<int64_t>(std::count_if(items.begin(), items.end(), [&](const Value& v) { return Equal(v, x); })));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (Equal(items[i], x)) return Value(static_cast<int64_t>(i));
  }
  Fail(Repr(x) + " is not in list");
}

Value DictMethod(const Value& self, const std::string& name, Args& a) {
  std::vector<Value> out;
  if (name == "get") {
    const Value* v = self.Find(a.Get(0, "key"));
    return v ? *v : a.Get(1, "default", Value::None());
  }
  if (name == "copy") return Value::Dict(self.entries());
  for (const auto& [k, v] : self.entries()) {
    if (name == "items") out.push_back(Value::List({k, v}, true));
    if (name == "keys") out.push_back(k);
    if (name == "values") out.push_back(v);
  }
  return Value::List(std::move(out));
}

int64_t Index(const Value& key) {
  return key.as_int();
}

}  // namespace

Value GetAttr(const Value& obj, std::string_view name) {
  const std::string n(name);
  if (obj.is_undefined()) ThrowUndefined(obj);
  if (!n.empty() && n[0] == '_') return Value::Undefined("access to attribute '" + n + "' is unsafe");
  switch (obj.kind()) {
    case Value::Kind::kString:
      if (In(kStrMethods, n)) return Bound(obj, n, StrMethod);
      break;
    case Value::Kind::kList:
      if (n == "index" || n == "count") return Bound(obj, n, ListMethod);
      if (In(kListMutators, n)) return Unsafe(n, obj);
      break;
    case Value::Kind::kDict: {
      if (n == "get" || n == "items" || n == "keys" || n == "values" || n == "copy") {
        return Bound(obj, n, DictMethod);
      }
      if (In(kDictMutators, n)) return Unsafe(n, obj);
      if (const Value* v = obj.Find(name)) return *v;
      break;
    }
    case Value::Kind::kNamespace:
      if (const Value* v = obj.Find(name)) return *v;
      break;
    default: break;
  }
  return NoAttr(obj, name);
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) ThrowUndefined(obj);
  if (obj.is_generator()) return Value::Undefined("'generator' object is not subscriptable");
  if ((obj.is_list() || obj.is_string()) && (key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool)) {
    int64_t i = Index(key);
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined(TypeName(obj) + " object has no element " + std::to_string(key.as_int()));
      return obj.items()[static_cast<size_t>(i)];
    }
    const std::u32string u = Decode(obj.str());
    const auto n = static_cast<int64_t>(u.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::Undefined("str object has no element " + std::to_string(key.as_int()));
    return Value(Encode(std::u32string_view(&u[static_cast<size_t>(i)], 1)));
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.Find(key)) return *v;
  }
  if (key.is_string()) {
    if (obj.is_dict()) {
      Value v = GetAttr(obj, key.str());
      return v;
    }
    return GetAttr(obj, key.str());
  }
  return Value::Undefined("'" + TypeName(obj) + " object' has no element " + Repr(key));
}

Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) ThrowUndefined(obj);
  if ((!obj.is_list() && !obj.is_string()) || obj.is_generator()) Fail("'" + TypeName(obj) + "' object is not subscriptable");
  const std::u32string u = obj.is_string() ? Decode(obj.str()) : std::u32string();
  const auto n = static_cast<int64_t>(obj.is_string() ? u.size() : obj.items().size());
  const int64_t st = step.is_none() ? 1 : step.as_int();
  if (st == 0) Fail("slice step cannot be zero");
  auto norm = [&](const Value& v, int64_t def) {
    if (v.is_none()) return def;
    int64_t i = v.as_int();
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = norm(start, st > 0 ? 0 : n - 1);
  const int64_t e = norm(stop, st > 0 ? n : -1);
  std::vector<Value> items;
  std::u32string chars;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.is_string()) chars.push_back(u[static_cast<size_t>(i)]);
    else items.push_back(obj.items()[static_cast<size_t>(i)]);
  }
  if (obj.is_string()) return Value(Encode(chars));
  return Value::List(std::move(items), obj.is_tuple());
}

std::vector<Value> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, x] : v.entries()) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> out;
      for (char32_t c : Decode(v.str())) out.emplace_back(Encode(std::u32string_view(&c, 1)));
      return out;
    }
    default: Fail("'" + TypeName(v) + "' object is not iterable");
  }
}

Value BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) ThrowUndefined(a);
  if (b.is_undefined()) ThrowUndefined(b);
  const bool ints = (a.kind() == Value::Kind::kInt || a.kind() == Value::Kind::kBool) &&
                    (b.kind() == Value::Kind::kInt || b.kind() == Value::Kind::kBool);
  auto unsupported = [&]() -> Value {
    Fail("unsupported operand type(s) for " + std::string(op) + ": '" + TypeName(a) + "' and '" + TypeName(b) + "'");
  };
  if (op == "+") {
    if (a.is_number() && b.is_number()) return ints ? Value(a.as_int() + b.as_int()) : Value(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() || b.is_markup()) {  // Markup + str escapes the str
        return Value::Markup((a.is_markup() ? a.str() : HtmlEscape(a.str())) +
                             (b.is_markup() ? b.str() : HtmlEscape(b.str())));
      }
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_generator() && !b.is_generator()) {
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::List(std::move(items), a.is_tuple());
    }
    if (a.is_string()) Fail("can only concatenate str (not \"" + TypeName(b) + "\") to str");
    return unsupported();
  }
  if (op == "*") {
    if (a.is_number() && b.is_number()) return ints ? Value(a.as_int() * b.as_int()) : Value(a.as_float() * b.as_float());
    const Value* seq = a.is_string() || a.is_list() ? &a : &b;
    const Value* cnt = seq == &a ? &b : &a;
    if ((seq->is_string() || seq->is_list()) && (cnt->kind() == Value::Kind::kInt || cnt->kind() == Value::Kind::kBool)) {
      const int64_t n = std::max<int64_t>(0, cnt->as_int());
      if (n > 1000000) Fail("repeat count too large");
      if (seq->is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq->str();
        return Value(std::move(out));
      }
      std::vector<Value> out;
      for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq->items().begin(), seq->items().end());
      return Value::List(std::move(out), seq->is_tuple());
    }
    return unsupported();
  }
  if (op == "%" && a.is_string()) return PercentFormat(a, b);
  if (!a.is_number() || !b.is_number()) return unsupported();
  if (op == "-") return ints ? Value(a.as_int() - b.as_int()) : Value(a.as_float() - b.as_float());
  if (op == "/") {
    if (b.as_float() == 0) Fail("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) Fail("integer division or modulo by zero");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return op == "//" ? Value(q) : Value(r);
    }
    const double x = a.as_float(), y = b.as_float();
    if (y == 0) Fail("float division by zero");
    if (op == "//") return Value(std::floor(x / y));
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value(r);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.as_int() && i < 64; ++i) r *= a.as_int();
      return Value(r);
    }
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  return unsupported();
}

// str.format: {} {0} {name} with an optional !r/!s and a format spec of fill/align/width/.prec.
Value StrFormat(const std::string& fmt, Args& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}' ) {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t e = fmt.find('}', i);
    if (e == std::string::npos) Fail("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, e - i - 1);
    i = e;
    std::string spec;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    bool repr = false;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      repr = field.substr(bang + 1) == "r";
      field.resize(bang);
    }
    Value v;
    if (field.empty()) {
      v = a.Get(auto_idx++, "\x01", Value());
      if (auto_idx > a.pos.size()) Fail("Replacement index " + std::to_string(auto_idx - 1) + " out of range for positional args tuple");
    } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      const size_t k = std::stoul(field);
      if (k >= a.pos.size()) Fail("Replacement index " + field + " out of range for positional args tuple");
      v = a.pos[k];
    } else {
      const Value* kv = a.Kw(field);
      if (kv == nullptr) Fail("KeyError: '" + field + "'");
      v = *kv;
    }
    std::string s = repr ? Repr(v) : ToStr(v);
    if (!spec.empty()) {
      char fill = ' ', align = v.is_number() ? '>' : '<';
      size_t p = 0;
      if (spec.size() >= 2 && std::string_view("<>^").find(spec[1]) != std::string_view::npos) {
        fill = spec[0];
        align = spec[1];
        p = 2;
      } else if (std::string_view("<>^").find(spec[0]) != std::string_view::npos) {
        align = spec[0];
        p = 1;
      }
      size_t width = 0;
      while (p < spec.size() && std::isdigit(static_cast<unsigned char>(spec[p]))) width = width * 10 + static_cast<size_t>(spec[p++] - '0');
      if (p < spec.size() && spec[p] == '.' && v.is_number()) {
        const int prec = std::atoi(spec.c_str() + p + 1);
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.*f", prec, v.as_float());
        s = buf;
      }
      const size_t len = CodePointCount(s);
      if (len < width) {
        const size_t padn = width - len;
        if (align == '<') s += std::string(padn, fill);
        else if (align == '>') s = std::string(padn, fill) + s;
        else s = std::string(padn / 2, fill) + s + std::string(padn - padn / 2, fill);
      }
    }
    out += s;
  }
  return Value(std::move(out));
}

Value PercentFormat(const Value& fmt_v, const Value& args_v) {
  const std::string& fmt = fmt_v.str();
  std::vector<Value> args = args_v.is_list() && args_v.is_tuple() ? args_v.items() : std::vector<Value>{args_v};
  std::string out;
  size_t k = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) Fail("incomplete format");
    const char c = fmt[i];
    if (c == '%') {
      out.push_back('%');
      continue;
    }
    if (k >= args.size()) Fail("not enough arguments for format string");
    const Value& v = args[k++];
    if (c == 's') out += ToStr(v);
    else if (c == 'r') out += Repr(v);
    else if (c == 'd' || c == 'i') {
      if (!v.is_number()) Fail("%d format: a real number is required, not " + TypeName(v));
      out += std::to_string(v.kind() == Value::Kind::kFloat ? static_cast<int64_t>(v.as_float()) : v.as_int());
    } else if (c == 'f') {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%f", v.as_float());
      out += buf;
    } else {
      Fail(std::string("unsupported format character '") + c + "'");
    }
  }
  if (k < args.size()) Fail("not all arguments converted during string formatting");
  return Value(std::move(out));
}

}  // namespace kvtier::jinja
