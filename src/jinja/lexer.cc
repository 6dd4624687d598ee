// jinja2's lexer rules (jinja2/lexer.py, 3.1) for the default delimiters, trim_blocks=True and
// lstrip_blocks=True.
#include "jinja/lexer.h"

#include <cstdint>
#include <cstdlib>

#include "jinja/internal.h"

namespace kvtier::jinja {

namespace {

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.rstrip() (ASCII whitespace and the Unicode spaces of chat text).
std::string RStripWs(const std::string& s) {
  std::u32string u = Decode(s);
  while (!u.empty() && IsPySpace(u.back())) u.pop_back();
  return Encode(u);
}

// Length of the \s* run at `pos` (Unicode whitespace, as Python's re).
size_t SkipPyWs(std::string_view s, size_t pos) {
  size_t p = pos;
  while (p < s.size()) {
    const auto c = static_cast<unsigned char>(s[p]);
    if (c < 0x80) {
      if (!IsPySpace(c)) break;
      ++p;
      continue;
    }
    const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    const std::u32string u = Decode(s.substr(p, n));
    if (u.size() != 1 || !IsPySpace(u[0])) break;
    p += n;
  }
  return p - pos;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) {
    // Newlines normalised; one trailing newline dropped (keep_trailing_newline=False).
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      } else {
        src_.push_back(src[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      const size_t m = FindTagStart(pos);
      std::string text = src_.substr(pos, m - pos);
      if (m == src_.size()) {
        Emit(TK::kData, text, pos);
        break;
      }
      const char kind = src_[m + 1];  // '{', '%' or '#'
      const char sign = m + 2 < src_.size() ? src_[m + 2] : '\0';
      if (sign == '-') {
        text = RStripWs(text);
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          if (text.find_first_not_of(" \t", l_pos) == std::string::npos) text.resize(l_pos);
        }
      }
      Emit(TK::kData, text, pos);
      size_t p = m + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        pos = EndComment(p, m);
      } else if (kind == '%' && IsRaw(p)) {
        pos = Raw(p, m);
      } else {
        pos = Tag(kind == '%', p, m);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back({TK::kEof, "", Line(src_.size()), Col(src_.size())});
    return std::move(tokens_);
  }

 private:
  int Line(size_t pos) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      if (line_starts_[mid] <= pos) lo = mid; else hi = mid;
    }
    return static_cast<int>(lo) + 1;
  }
  int Col(size_t pos) const {
    return static_cast<int>(pos - line_starts_[static_cast<size_t>(Line(pos) - 1)]) + 1;
  }
  [[noreturn]] void Error(const std::string& msg, size_t pos) const {
    throw JinjaError(JinjaError::Type::kSyntax, msg, Line(pos), Col(pos));
  }
  void Emit(TK t, std::string text, size_t pos) {
    if (t == TK::kData && text.empty()) return;
    tokens_.push_back({t, std::move(text), Line(pos), Col(pos)});
  }

  size_t FindTagStart(size_t pos) const {
    for (size_t i = pos; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  // After `#}` (or `-#}`): the position past it and the whitespace it eats.
  size_t EndComment(size_t p, size_t start) {
    for (size_t i = p; i + 1 < src_.size(); ++i) {
      if (src_[i] == '-' && src_.compare(i + 1, 2, "#}") == 0) {
        return i + 3 + SkipPyWs(src_, i + 3);
      }
      if (src_[i] == '#' && src_[i + 1] == '}') {
        size_t e = i + 2;
        if (e < src_.size() && src_[e] == '\n') ++e;  // trim_blocks
        return e;
      }
    }
    Error("missing end of comment tag", start);
  }

  bool IsRaw(size_t p) const {
    size_t q = p;
    while (q < src_.size() && IsWs(src_[q])) ++q;
    if (src_.compare(q, 3, "raw") != 0) return false;
    q += 3;
    while (q < src_.size() && IsWs(src_[q])) ++q;
    return src_.compare(q, 2, "%}") == 0 || src_.compare(q, 3, "-%}") == 0;
  }

  size_t Raw(size_t p, size_t start) {
    size_t q = src_.find("raw", p) + 3;
    while (IsWs(src_[q])) ++q;
    if (src_[q] == '-') {
      q += 3;
      q += SkipPyWs(src_, q);
    } else {
      q += 2;
    }
    // Find {% endraw %}.
    for (size_t i = q; i + 1 < src_.size(); ++i) {
      if (src_[i] != '{' || src_[i + 1] != '%') continue;
      size_t j = i + 2;
      const char sign = src_[j];
      if (sign == '-' || sign == '+') ++j;
      while (j < src_.size() && IsWs(src_[j])) ++j;
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      while (j < src_.size() && IsWs(src_[j])) ++j;
      std::string text = src_.substr(q, i - q);
      if (sign == '-') text = RStripWs(text);
      Emit(TK::kData, text, q);
      if (src_.compare(j, 3, "-%}") == 0) return j + 3 + SkipPyWs(src_, j + 3);
      if (src_.compare(j, 3, "+%}") == 0) return j + 3;
      if (src_.compare(j, 2, "%}") == 0) {
        j += 2;
        if (j < src_.size() && src_[j] == '\n') ++j;
        return j;
      }
      Error("expected end of endraw tag", j);
    }
    Error("missing end of raw directive", start);
  }

  // Tokens of a {{ }} or {% %} tag from `p`; returns the position after its end.
  size_t Tag(bool block, size_t p, size_t start) {
    Emit(block ? TK::kBlockBegin : TK::kVarBegin, block ? "{%" : "{{", start);
    int depth = 0;
    const char close = block ? '%' : '}';
    while (true) {
      while (p < src_.size() && IsWs(src_[p])) ++p;
      if (p >= src_.size()) Error(block ? "unexpected end of template, expected '%}'"
                                        : "unexpected end of template, expected '}}'", start);
      if (depth == 0) {
        if (src_[p] == '-' && p + 2 < src_.size() + 0 && src_[p + 1] == close && src_[p + 2] == '}') {
          Emit(block ? TK::kBlockEnd : TK::kVarEnd, "", p);
          return p + 3 + SkipPyWs(src_, p + 3);
        }
        if (block && src_[p] == '+' && src_.compare(p + 1, 2, "%}") == 0) {
          Emit(TK::kBlockEnd, "", p);
          return p + 3;
        }
        if (src_[p] == close && p + 1 < src_.size() && src_[p + 1] == '}') {
          Emit(block ? TK::kBlockEnd : TK::kVarEnd, "", p);
          size_t e = p + 2;
          if (block && e < src_.size() && src_[e] == '\n') ++e;  // trim_blocks
          return e;
        }
      }
      const char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
        Emit(TK::kName, src_.substr(p, q - p), p);
        p = q;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = Number(p);
      } else if (c == '\'' || c == '"') {
        p = String(p);
      } else {
        static constexpr std::string_view kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (std::string_view o : kOps2) {
          if (src_.compare(p, 2, o) == 0) op = std::string(o);
        }
        if (op.size() == 1 && std::string_view("+-*/%~<>=.,:|()[]{}").find(c) == std::string_view::npos) {
          Error(std::string("unexpected char '") + c + "'", p);
        }
        if (c == '(' || c == '[' || c == '{') ++depth;
        if (c == ')' || c == ']' || c == '}') {
          if (depth == 0) Error(std::string("unexpected '") + c + "'", p);
          --depth;
        }
        Emit(TK::kOp, op, p);
        p += op.size();
      }
    }
  }

  size_t Number(size_t p) {
    size_t q = p;
    auto digits = [&] {
      while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
    };
    digits();
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      is_float = true;
      ++q;
      digits();
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
        is_float = true;
        q = r;
        digits();
      }
    }
    std::string text;
    for (size_t i = p; i < q; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    Emit(is_float ? TK::kFloat : TK::kInt, text, p);
    return q;
  }

  // A Python string literal; escapes as jinja2 decodes them (unicode-escape).
  size_t String(size_t p) {
    const char q = src_[p];
    std::string out;
    size_t i = p + 1;
    while (true) {
      if (i >= src_.size()) Error("unexpected end of string", p);
      const char c = src_[i];
      if (c == q) break;
      if (c != '\\') {
        out.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) Error("unexpected end of string", p);
      const char e = src_[i + 1];
      i += 2;
      auto hex = [&](int n) {
        if (i + static_cast<size_t>(n) > src_.size()) Error("truncated escape", i);
        const std::string h = src_.substr(i, static_cast<size_t>(n));
        i += static_cast<size_t>(n);
        char* end = nullptr;
        const unsigned long v = std::strtoul(h.c_str(), &end, 16);
        if (end != h.c_str() + h.size()) Error("bad escape \\" + std::string(1, e) + h, i);
        const char32_t cp = static_cast<char32_t>(v);
        out += Encode(std::u32string_view(&cp, 1));
      };
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case 'a': out.push_back('\a'); break;
        case '0': out.push_back('\0'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case '\n': break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          out.push_back('\\');
          out.push_back(e);
      }
    }
    Emit(TK::kString, out, p);
    return i + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Lex(std::string_view source) { return Lexer(source).Run(); }

}  // namespace kvtier::jinja
