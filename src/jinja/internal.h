// The engine's inside: the AST, the lexer's tokens, Python semantics of values (value.cc),
// the interpreter (eval.cc) and the builtins it calls (builtins.cc, methods.cc).
// Errors travel inside the module as JinjaError and leave it as a Status (Template::Parse /
// Render); nothing here is shared between threads except a parsed Program, which is immutable.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/jinja.h"

namespace kvtier::jinja {

// An error with the template position (line/col 0: not known yet; the interpreter adds the
// position of the node that raised it).
struct JinjaError : std::runtime_error {
  enum class Type : uint8_t { kSyntax, kRuntime, kRaised };
  JinjaError(Type t, std::string msg, int line = 0, int col = 0)
      : std::runtime_error(msg), type(t), message(std::move(msg)), line(line), col(col) {}
  Type type;
  std::string message;
  int line, col;
};
[[noreturn]] void Fail(std::string msg);  // a runtime error (TypeError, UndefinedError, ...)

struct DictRep {
  std::vector<std::pair<Value, Value>> items;
  Value* Find(const Value& key);
  Value* Find(std::string_view key);
  void Set(Value key, Value v);
};

// Arguments of a call: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* Kw(std::string_view name) const;
  // The argument at `index` or named `name`, or `fallback`.
  Value Get(size_t index, std::string_view name, Value fallback = Value()) const;
};

struct Callable {
  std::string name;
  std::function<Value(Args&)> fn;
};
Value MakeFunction(std::string name, std::function<Value(Args&)> fn);

// ---- Python semantics (value.cc) ----
bool Truthy(const Value& v);
std::string ToStr(const Value& v);   // str(v); undefined -> ""
std::string Repr(const Value& v);    // repr(v)
std::string TypeName(const Value& v);  // "dict", "str", ... as Python names them
bool Equal(const Value& a, const Value& b);
int Compare(const Value& a, const Value& b, std::string_view op);  // <0, 0, >0; TypeError
std::string FloatRepr(double d);
struct JsonOptions {
  int indent = -1;  // < 0: none
  std::string indent_str;  // used when indent given as a string
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string ToJson(const Value& v, const JsonOptions& o);
// UTF-8 helpers: code points of `s` and back.
std::u32string Decode(std::string_view s);
std::string Encode(std::u32string_view s);
size_t CodePointCount(std::string_view s);
bool IsPySpace(char32_t c);
std::string HtmlEscape(std::string_view s);
[[noreturn]] void ThrowUndefined(const Value& v);  // UndefinedError for an undefined value

// ---- AST ----
enum class NK : uint8_t {
  // expressions
  kConst, kName, kList, kTuple, kDict, kGetAttr, kGetItem, kSlice, kCall, kFilter, kTest,
  kNeg, kPos, kNot, kAnd, kOr, kBinary, kCompare, kCondExpr, kConcat,
  // statements
  kOutput, kPrint, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kBreak,
  kContinue, kScope,
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

struct Node {
  NK kind;
  int line = 0, col = 0;
  std::string name;             // identifier / attribute / filter / test / operator
  Value value;                  // kConst; kOutput's text
  std::vector<NodePtr> args;    // items, call args, body statements
  std::vector<std::string> kw_names;  // names of kw_args / macro params / set targets
  std::vector<NodePtr> kw_args;       // keyword args / macro defaults (null: none)
  std::vector<NodePtr> else_body;     // for-else, else of if chains
  NodePtr a, b, c;              // operands: object, key, condition, ...
  std::vector<std::string> ops;  // kCompare operators
  bool flag = false;             // kTest: negated; kSet: namespace attribute; kFor: recursive
  bool soft = false;             // kFilter / kTest: unknown, raise when run
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;  // kMacro
};

struct Program {
  std::vector<NodePtr> body;
};

// Lexes and parses (lexer.cc, parser.cc); throws JinjaError (kSyntax).
std::unique_ptr<Program> ParseProgram(std::string_view source);

// ---- builtins (builtins.cc, methods.cc) ----
bool HasFilter(std::string_view name);
bool HasTest(std::string_view name);
class Interp;
Value ApplyFilter(Interp& in, std::string_view name, const Value& v, Args& args);
bool ApplyTest(Interp& in, std::string_view name, const Value& v, Args& args);
// obj.name as jinja2's sandbox resolves it (attribute first, then item); bound methods.
Value GetAttr(const Value& obj, std::string_view name);
Value GetItem(const Value& obj, const Value& key);  // obj[key] (item first, then attribute)
Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
Value CallValue(Interp& in, const Value& fn, Args& args);
Value MakeRange(Args& args);
Value BinaryOp(std::string_view op, const Value& a, const Value& b);
std::vector<Value> Iterate(const Value& v);  // for loops / list(): keys of dicts, characters
Value StrFormat(const std::string& fmt, Args& args);  // str.format in the sandbox
Value PercentFormat(const Value& fmt, const Value& args);  // str % args

}  // namespace kvtier::jinja
