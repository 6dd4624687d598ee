// ParseJson: a strict JSON (RFC 8259) reader into Values, object keys in document order.
#include <cmath>
#include <cstdlib>

#include "jinja/internal.h"

namespace kvtier::jinja {

namespace {

class JsonReader {
 public:
  explicit JsonReader(std::string_view s) : s_(s) {}

  Value Document() {
    Value v = Any(0);
    Ws();
    if (p_ != s_.size()) Error("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void Error(const std::string& what) const {
    throw JinjaError(JinjaError::Type::kSyntax, "JSON: " + what + " at byte " + std::to_string(p_));
  }
  void Ws() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r')) ++p_;
  }
  bool Lit(std::string_view w) {
    if (s_.substr(p_, w.size()) != w) return false;
    p_ += w.size();
    return true;
  }

  Value Any(int depth) {
    if (depth > 512) Error("nesting too deep");
    Ws();
    if (p_ >= s_.size()) Error("unexpected end");
    const char c = s_[p_];
    if (c == '{') {
      ++p_;
      std::vector<std::pair<Value, Value>> items;
      Ws();
      if (p_ < s_.size() && s_[p_] == '}') {
        ++p_;
        return Value::Dict(std::move(items));
      }
      while (true) {
        Ws();
        if (p_ >= s_.size() || s_[p_] != '"') Error("expected a string key");
        Value k(String());
        Ws();
        if (p_ >= s_.size() || s_[p_] != ':') Error("expected ':'");
        ++p_;
        items.emplace_back(std::move(k), Any(depth + 1));
        Ws();
        if (p_ < s_.size() && s_[p_] == ',') {
          ++p_;
          continue;
        }
        if (p_ < s_.size() && s_[p_] == '}') {
          ++p_;
          return Value::Dict(std::move(items));
        }
        Error("expected ',' or '}'");
      }
    }
    if (c == '[') {
      ++p_;
      std::vector<Value> items;
      Ws();
      if (p_ < s_.size() && s_[p_] == ']') {
        ++p_;
        return Value::List(std::move(items));
      }
      while (true) {
        items.push_back(Any(depth + 1));
        Ws();
        if (p_ < s_.size() && s_[p_] == ',') {
          ++p_;
          continue;
        }
        if (p_ < s_.size() && s_[p_] == ']') {
          ++p_;
          return Value::List(std::move(items));
        }
        Error("expected ',' or ']'");
      }
    }
    if (c == '"') return Value(String());
    if (Lit("true")) return Value(true);
    if (Lit("false")) return Value(false);
    if (Lit("null")) return Value::None();
    return Number();
  }

  Value Number() {
    const size_t b = p_;
    bool is_float = false;
    if (p_ < s_.size() && s_[p_] == '-') ++p_;
    auto digits = [&] {
      const size_t d = p_;
      while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') ++p_;
      if (p_ == d) Error("expected a value");
    };
    digits();
    if (p_ < s_.size() && s_[p_] == '.') {
      is_float = true;
      ++p_;
      digits();
    }
    if (p_ < s_.size() && (s_[p_] == 'e' || s_[p_] == 'E')) {
      is_float = true;
      ++p_;
      if (p_ < s_.size() && (s_[p_] == '+' || s_[p_] == '-')) ++p_;
      digits();
    }
    const std::string text(s_.substr(b, p_ - b));
    if (!is_float) {
      errno = 0;
      const long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == 0) return Value(static_cast<int64_t>(v));
    }
    return Value(std::strtod(text.c_str(), nullptr));
  }

  unsigned Hex4() {
    if (p_ + 4 > s_.size()) Error("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[p_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else Error("bad \\u escape");
    }
    return v;
  }

  std::string String() {
    ++p_;  // "
    std::string out;
    while (true) {
      if (p_ >= s_.size()) Error("unterminated string");
      const char c = s_[p_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) Error("control character in string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (p_ >= s_.size()) Error("unterminated string");
      const char e = s_[p_++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          char32_t cp = Hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(p_, 2) == "\\u") {
            const size_t save = p_;
            p_ += 2;
            const unsigned lo = Hex4();
            if (lo >= 0xDC00 && lo < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              p_ = save;
            }
          }
          out += Encode(std::u32string_view(&cp, 1));
          break;
        }
        default: Error(std::string("bad escape \\") + e);
      }
    }
  }

  std::string_view s_;
  size_t p_ = 0;
};

}  // namespace

Result<Value> ParseJson(std::string_view json) {
  try {
    return JsonReader(json).Document();
  } catch (const JinjaError& e) {
    return Status::InvalidArgument(e.message);
  }
}

}  // namespace kvtier::jinja
