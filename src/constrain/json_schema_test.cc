// CompileJsonSchema: accepted and rejected instances per keyword, errors naming the path, and
// the property that everything the matcher accepts validates (random walks through the matcher
// checked by an independent validator).
#include "constrain/json_schema.h"

#include <gtest/gtest.h>

#include <random>

#include "constrain/json_validate_test_util.h"

namespace kvtier::constrain {
namespace {

using json = nlohmann::json;

bool Accepts(const json& schema, std::string_view text) {
  auto g = CompileJsonSchema(schema);
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return false;
  JsonMatcher m(*g);
  return m.Feed(text) && m.CanEnd();
}

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 5},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 2},
    "ok": {"type": ["boolean", "null"]},
    "kind": {"const": "person"}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})");

TEST(JsonSchema, ObjectKeywords) {
  EXPECT_TRUE(Accepts(kPerson, R"({"name":"Ann","age":3})"));
  EXPECT_TRUE(Accepts(kPerson, R"( { "age" : -7 , "name" : "\u00e9" , "ok" : null } )"));
  EXPECT_TRUE(Accepts(kPerson, R"({"name":"Ann","age":3,"tags":["a",3],"kind":"person","ok":true})"));
  for (const char* bad :
       {R"({"name":"Ann"})", R"({"age":3})", R"({"name":"","age":3})",
        R"({"name":"abcdef","age":3})", R"({"name":"Ann","age":3.5})",
        R"({"name":"Ann","age":3,"x":1})", R"({"name":"Ann","age":3,"tags":[]})",
        R"({"name":"Ann","age":3,"tags":["a","b","a"]})", R"({"name":"Ann","age":3,"tags":["c"]})",
        R"({"name":"Ann","age":3,"ok":1})", R"({"name":"Ann","age":3,"kind":"dog"})",
        R"({"name":"Ann","age":3,"name":"Bo"})", R"([])", R"("x")"}) {
    EXPECT_FALSE(Accepts(kPerson, bad)) << bad;
  }
}

TEST(JsonSchema, AdditionalPropertiesDefaultsToAny) {
  const json s = {{"type", "object"}, {"properties", {{"a", {{"type", "number"}}}}}};
  EXPECT_TRUE(Accepts(s, R"({"b":[1,{"c":null}],"a":2.5e3})"));
  EXPECT_FALSE(Accepts(s, R"({"a":"x"})"));
  const json typed = {{"type", "object"}, {"additionalProperties", {{"type", "integer"}}}};
  EXPECT_TRUE(Accepts(typed, R"({"x":1,"y":2})"));
  EXPECT_FALSE(Accepts(typed, R"({"x":1.5})"));
}

TEST(JsonSchema, AnyOfRefsAndRecursion) {
  const json tree = json::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"], "additionalProperties": false}},
    "$ref": "#/$defs/node"})");
  EXPECT_TRUE(Accepts(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(Accepts(tree, R"({"v":1,"kids":[{"w":2}]})"));
  const json any = json::parse(R"({"anyOf": [{"type": "string", "maxLength": 2},
                                             {"type": "array", "items": {"type": "null"}},
                                             {"type": "number"}]})");
  EXPECT_TRUE(Accepts(any, R"("ab")"));
  EXPECT_TRUE(Accepts(any, R"([null,null])"));
  EXPECT_TRUE(Accepts(any, R"(-2.5)"));
  EXPECT_FALSE(Accepts(any, R"("abc")"));
  EXPECT_FALSE(Accepts(any, R"([1])"));
  EXPECT_TRUE(Accepts(json::object(), R"({"anything":[true]})"));
  EXPECT_TRUE(Accepts(json(true), "null"));
}

TEST(JsonSchema, ErrorsNameKeywordAndPath) {
  struct Case {
    const char* schema;
    const char* want;  // substring of the message
  };
  for (const Case& c : {
           Case{R"({"type":"object","properties":{"a":{"type":"string","pattern":"x"}}})",
                "'#/properties/a/pattern': the keyword 'pattern' is not supported"},
           Case{R"({"type":"strin"})", "'#/type': unknown type 'strin'"},
           Case{R"({"type":"array","items":[{"type":"string"}]})", "'#/items'"},
           Case{R"({"$ref":"#/$defs/missing"})", "points at nothing"},
           Case{R"({"$ref":"http://x/y.json"})", "only local references"},
           Case{R"({"anyOf":[]})", "'#/anyOf'"},
           Case{R"({"type":"string","minLength":-1})", "'#/minLength'"},
           Case{R"({"type":"string","minLength":3,"maxLength":2})", "greater than maxLength"},
           Case{R"({"type":"object","required":["z"],"additionalProperties":false})",
                "'#/required/0'"},
           Case{R"({"allOf":[{}]})", "'allOf' is not supported"},
           Case{R"(false)", "matches no value"},
           Case{R"(3)", "expected a schema"},
       }) {
    auto g = CompileJsonSchema(json::parse(c.schema));
    ASSERT_FALSE(g.ok()) << c.schema;
    EXPECT_NE(g.status().message().find(c.want), std::string::npos)
        << c.schema << " -> " << g.status().message();
  }
}

// Property: random byte walks that stay inside the matcher (choosing uniformly among accepted
// next bytes, closing as soon as possible late in the walk) end in text that parses and
// validates against the schema.
TEST(JsonSchema, PropertyAcceptedTextValidates) {
  const json schemas[] = {kPerson, json::parse(R"({"type":"array","items":{"anyOf":[
      {"type":"integer"},{"type":"object","properties":{"q":{"enum":[1,"x",null]}},
      "required":["q"],"additionalProperties":false}]},"maxItems":3})"),
                          json::parse(R"({"type":"object","properties":{"s":{"type":"string",
      "maxLength":3}},"required":["s"]})")};
  std::mt19937 rng(3);
  std::string alphabet;
  for (char c = 0x20; c < 0x7f; ++c) alphabet += c;
  int done = 0;
  for (const json& schema : schemas) {
    auto g = CompileJsonSchema(schema);
    ASSERT_TRUE(g.ok()) << g.status().message();
    for (int run = 0; run < 200; ++run) {
      JsonMatcher m(*g, MatchLimits{2, 6, 6, 2});
      std::string text;
      for (int step = 0; step < 400 && !m.Done(); ++step) {
        std::vector<char> ok;
        for (char c : alphabet) {
          JsonMatcher t = m;
          if (t.FeedByte(static_cast<uint8_t>(c))) ok.push_back(c);
        }
        ASSERT_FALSE(ok.empty()) << "dead end after " << text;
        // Late in the walk prefer closing bytes so that most walks finish.
        char c = ok[rng() % ok.size()];
        if (step > 150) {
          for (char pref : {'"', '}', ']', '1'}) {
            if (std::find(ok.begin(), ok.end(), pref) != ok.end()) { c = pref; break; }
          }
        }
        text += c;
        ASSERT_TRUE(m.FeedByte(static_cast<uint8_t>(c)));
      }
      if (!m.CanEnd()) continue;
      ++done;
      const json v = json::parse(text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << text;
      EXPECT_TRUE(testing::ValidateJson(schema, v, schema)) << text;
    }
  }
  EXPECT_GT(done, 300);
}

}  // namespace
}  // namespace kvtier::constrain
