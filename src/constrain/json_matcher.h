// Module constrain (src/constrain, kvtier_constrain; order and include rule:
// docs/architecture.md) owns constrained decoding: an incremental JSON matcher, the JSON-Schema
// compiler to it, and token masks over a tokenizer's vocabulary.
//
// JsonGrammar: a compiled value description (any JSON value, or a JSON-Schema subset; see
// json_schema.h), a flat table of nodes referring to each other by index (so $ref may recurse).
// JsonMatcher: a pushdown automaton over bytes that accepts exactly the RFC 8259 texts whose
// value the grammar describes (UTF-8 checked, no BOM; one deliberate narrowing: a \u escape of a
// UTF-16 surrogate must be a high-low pair, as every JSON parser that decodes strings needs). anyOf is matched by keeping one stack per
// live alternative. Feed() advances by bytes; a rejected byte leaves the matcher dead.
//
// Ownership: a JsonMatcher holds a shared_ptr to its (immutable) grammar. Thread safety: a
// grammar is immutable and shareable; a matcher is thread-compatible (copy it per thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::constrain {

enum class NodeKind : uint8_t {
  kAny = 0,      // any JSON value
  kObject = 1,   // properties / required / additionalProperties
  kArray = 2,    // items, min/max items
  kString = 3,   // min/max length in code points
  kNumber = 4,   // any JSON number
  kInteger = 5,  // a JSON number without fraction or exponent
  kLiteral = 6,  // exactly `literal` (true, false, null, const and enum values, compact)
  kAnyOf = 7,    // one of `alts`
};

inline constexpr uint32_t kNoNode = 0xffffffffu;
inline constexpr size_t kMaxProperties = 64;  // per object node (bit masks)

struct JsonNode {
  NodeKind kind = NodeKind::kAny;
  // kObject
  std::vector<std::string> prop_names;  // raw (unescaped) names
  std::vector<uint32_t> prop_nodes;
  uint64_t required = 0;                // bit i: prop_names[i] is required
  uint32_t additional = 0;              // node for other keys, kNoNode: forbidden (0: any)
  // kArray
  uint32_t items = 0;                   // node of every item (0: any)
  uint32_t min_items = 0, max_items = 0xffffffffu;
  // kString
  uint32_t min_length = 0, max_length = 0xffffffffu;
  // kLiteral
  std::string literal;
  // kAnyOf
  std::vector<uint32_t> alts;
};

// Node 0 is always kAny; nodes 1, 2, 3 are the literals true, false, null.
struct JsonGrammar {
  std::vector<JsonNode> nodes;
  uint32_t root = 0;

  // Any JSON value, or (object_only) any JSON object: OpenAI's {"type":"json_object"}.
  static std::shared_ptr<const JsonGrammar> AnyValue(bool object_only);
  // A grammar with the four fixed nodes; callers append theirs and set root.
  static JsonGrammar Base();
};

// One stack frame: a value being matched (plain struct; compared and hashed as bytes).
struct JsonFrame {
  uint32_t node = 0;
  uint8_t kind = 0;    // FrameKind (json_matcher.cc)
  uint8_t phase = 0;
  uint8_t esc = 0;     // string lexer: 0, 1 after '\', 2..5: hex digits of \u left + 1
  uint8_t u8need = 0;  // UTF-8 continuation bytes still due
  uint8_t u8lo = 0, u8hi = 0;  // range of the next continuation byte
  uint16_t low_due = 0;  // string lexer: a \uD800-\uDBFF came; its low surrogate escape is due
  uint32_t count = 0;  // array: items; string: code points; literal / key: byte position;
                       // number: digits in the current part
  uint32_t hex = 0;    // string lexer: the \u digits so far
  uint64_t seen = 0;   // object: properties seen
  uint64_t cand = 0;   // object key: properties whose name still matches the key so far
};
static_assert(sizeof(JsonFrame) == 40);

struct JsonStack {
  std::vector<JsonFrame> frames;  // [depth]; empty: the value is complete
  uint32_t ws_run = 0;            // whitespace bytes in a row (for the whitespace cap)
  bool operator==(const JsonStack& o) const;
};

// Limits beyond RFC 8259 for generation (0: unlimited): most whitespace bytes in a row (so that
// a model cannot spend its budget on blanks), most digits in a number's integer part, fraction
// and exponent (so that every number fits a double, an integer an int64).
struct MatchLimits {
  uint32_t max_ws_run = 0;
  uint32_t max_int_digits = 0, max_frac_digits = 0, max_exp_digits = 0;
  static MatchLimits Generation() { return {8, 15, 15, 2}; }
};

class JsonMatcher {
 public:
  explicit JsonMatcher(std::shared_ptr<const JsonGrammar> grammar, MatchLimits limits = {});

  // Advances over `bytes`; false (and dead from then on) when some byte is rejected.
  bool Feed(std::string_view bytes);
  bool FeedByte(uint8_t b);
  bool dead() const { return stacks_.empty(); }
  // A complete value has been read (only whitespace, or more digits of a number, may follow).
  bool CanEnd() const;
  // Complete and nothing but whitespace may follow.
  bool Done() const;
  // Appends a byte key of the state (for mask caches): equal keys accept the same bytes.
  void StateKey(std::string* out) const;

  const JsonGrammar& grammar() const { return *g_; }

 private:
  // Feeds b to `s`; the surviving stacks (0, 1, or more when anyOf forks) go to `out`.
  void Step(JsonStack s, uint8_t b, std::vector<JsonStack>* out) const;
  // Pushes a value of `node` on `s` (forking on anyOf) into `out`.
  void PushValue(JsonStack s, uint32_t node, std::vector<JsonStack>* out, int depth = 0) const;

  std::shared_ptr<const JsonGrammar> g_;
  MatchLimits lim_;
  std::vector<JsonStack> stacks_;  // live alternatives
  std::vector<JsonStack> next_;    // scratch
};

}  // namespace kvtier::constrain
