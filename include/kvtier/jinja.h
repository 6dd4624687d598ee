// Module jinja (src/jinja, kvtier_jinja; order and include rule: docs/architecture.md): a Jinja2
// template engine for chat templates, rendering as Python's jinja2 does in Hugging Face
// transformers' apply_chat_template: ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True), loopcontrols, raise_exception(), strftime_now(), a tojson filter that keeps
// non-ASCII text, and the {% generation %} block. Depends on base only.
//
// Value: Python-like data (undefined, none, bool, int, float, string, list, dict, plus the
// engine's namespaces and callables). Lists and dicts are shared, immutable once built (as in
// the immutable sandbox); copying a Value is cheap. A Value is thread-compatible; distinct
// Values built independently may be used from different threads.
// Template: parsed once, immutable; Render may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::jinja {

class Value;
struct DictRep;   // ordered key/value pairs (src/jinja)
struct Callable;  // macros, builtins, bound methods (src/jinja)

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,  // also tuples (is_tuple)
    kDict,
    kNamespace,  // namespace(): the one mutable object templates have
    kCallable,
  };

  Value() = default;  // undefined
  static Value None();
  static Value Undefined(std::string hint);  // hint: the error an operation on it raises
  Value(bool b);                              // NOLINT(google-explicit-constructor)
  Value(int v) : Value(static_cast<int64_t>(v)) {}  // NOLINT
  Value(int64_t v);                           // NOLINT
  Value(double v);                            // NOLINT
  Value(std::string s);                       // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}       // NOLINT
  static Value List(std::vector<Value> items, bool tuple = false);
  static Value Dict(std::vector<std::pair<Value, Value>> items = {});  // later keys replace earlier
  static Value Markup(std::string s);  // a "safe" string (jinja2's Markup)
  // A lazy sequence as filters such as map / select return in Python: iterable, but without
  // len(), indexing or JSON; always true.
  static Value Generator(std::vector<Value> items);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_tuple() const { return tuple_; }
  bool is_markup() const { return markup_; }
  bool is_generator() const { return gen_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const;                 // string value, or an undefined's hint
  const std::vector<Value>& items() const;        // list items (empty for non-lists)
  const std::vector<std::pair<Value, Value>>& entries() const;  // dict / namespace pairs
  // Dict / namespace lookup by string key; nullptr when absent or not a mapping.
  const Value* Find(std::string_view key) const;
  const Value* Find(const char* key) const { return Find(std::string_view(key)); }
  const Value* Find(const Value& key) const;

  // Building (before the Value is handed to a template): append to a list, set a dict key.
  void Append(Value v);
  void Set(Value key, Value v);

  // Internals for src/jinja.
  const std::shared_ptr<DictRep>& dict_rep() const { return dict_; }
  const std::shared_ptr<const Callable>& callable() const { return fn_; }
  static Value FromCallable(std::shared_ptr<const Callable> fn);
  static Value Namespace(std::vector<std::pair<Value, Value>> items);

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  bool markup_ = false;
  bool gen_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<std::string> s_;  // string, or an undefined's hint
  std::shared_ptr<std::vector<Value>> list_;
  std::shared_ptr<DictRep> dict_;
  std::shared_ptr<const Callable> fn_;
};

// JSON text -> Value, keeping object key order (as Python's json.loads): objects become dicts,
// arrays lists, integers int (beyond int64: float), other numbers float. InvalidArgument naming
// the byte offset on malformed JSON.
Result<Value> ParseJson(std::string_view json);

struct RenderOptions {
  // strftime_now() formats this time (seconds since the epoch, UTC) when >= 0; else the
  // local clock, as transformers does.
  int64_t now_epoch_seconds = -1;
};

struct Program;  // the parsed template (src/jinja)

class Template {
 public:
  // Parses `source`; InvalidArgument "template:LINE:COL: message" on a syntax error.
  static Result<Template> Parse(std::string_view source);
  // Renders with `variables` (a dict: messages, tools, add_generation_prompt, bos_token, ...).
  // InvalidArgument "template:LINE:COL: message" when the template raises (raise_exception,
  // an undefined value used, a type error, ...); the message of raise_exception is kept whole.
  Result<std::string> Render(const Value& variables, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace kvtier::jinja
