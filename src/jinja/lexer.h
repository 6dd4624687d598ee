// The lexer: template source -> tokens, with jinja2's whitespace control (`-`/`+` signs,
// trim_blocks, lstrip_blocks, one trailing newline dropped, newlines normalised to \n) and raw
// blocks. Pure function; throws JinjaError (kSyntax) naming line and column.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvtier::jinja {

enum class TK : uint8_t {
  kData,        // literal text
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOp,  // + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { }
  kEof,
};

struct Token {
  TK type;
  std::string text;
  int line, col;
};

std::vector<Token> Lex(std::string_view source);

}  // namespace kvtier::jinja
