// response_format on the bundled model, through HTTP: every completion (greedy and sampled,
// several seeds, several schemas, chat and completions) parses and validates against its schema
// (an independent validator); bad response_format shapes and schemas are 400s naming the field,
// and the pool holds no request's blocks afterwards.
#include "kvtier/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "constrain/json_validate_test_util.h"
#include "server/server_test_util.h"

namespace kvtier {
namespace {

using nlohmann::json;

struct Running : testing::BundledServer {
  Running() : BundledServer(Options()) {}
  static testing::BundledServerOptions Options() {
    testing::BundledServerOptions o;
    o.engine.max_num_seqs = 4;
    o.server.dashboard = false;
    o.read_timeout_s = 300;
    return o;
  }
};

Running& Server() {
  static Running* r = new Running();
  return *r;
}

const json kSchemas[] = {
    json::parse(R"({"type":"object","properties":{
        "name":{"type":"string","maxLength":12},
        "age":{"type":"integer"},
        "mood":{"enum":["happy","sad","vexed"]},
        "friends":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},
      "required":["name","age","mood","friends"],"additionalProperties":false})"),
    json::parse(R"({"type":"array","items":{"type":"object","properties":{
        "ok":{"type":"boolean"},"score":{"type":["number","null"]}},
        "required":["ok","score"],"additionalProperties":false},"minItems":1,"maxItems":2})"),
    json::parse(R"({"$defs":{"letter":{"type":"object","properties":{
        "to":{"type":"string","minLength":1,"maxLength":10},
        "reply":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/letter"}]}},
        "required":["to","reply"],"additionalProperties":false}},"$ref":"#/$defs/letter"})"),
};

json SchemaFormat(const json& schema) {
  return {{"type", "json_schema"},
          {"json_schema", {{"name", "answer"}, {"schema", schema}, {"strict", true}}}};
}

TEST(ServerJson, EveryCompletionParsesAndValidates) {
  int checked = 0;
  for (size_t k = 0; k < std::size(kSchemas); ++k) {
    const json& schema = kSchemas[k];
    for (int variant = 0; variant < 4; ++variant) {  // greedy, then three seeds
      json body = {{"messages", {{{"role", "user"}, {"content", "Describe Mr. Darcy as JSON."}}}},
                   {"max_tokens", 400},
                   {"response_format", SchemaFormat(schema)}};
      if (variant == 0) {
        body["temperature"] = 0;
      } else {
        body["temperature"] = 1.0;
        body["seed"] = variant * 7919;
      }
      const bool chat = variant % 2 == 0;
      if (!chat) {
        body.erase("messages");
        body["prompt"] = "Mr. Darcy, described as JSON: ";
      }
      auto res = Server().PostJson(chat ? "/v1/chat/completions" : "/v1/completions", body);
      ASSERT_TRUE(res);
      ASSERT_EQ(res->status, 200) << res->body;
      const json out = json::parse(res->body);
      const json& choice = out["choices"][0];
      const std::string text =
          chat ? choice["message"]["content"].get<std::string>() : choice["text"].get<std::string>();
      EXPECT_EQ(choice["finish_reason"], "stop") << text;
      const json v = json::parse(text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << "schema " << k << " variant " << variant << ": " << text;
      EXPECT_TRUE(constrain::testing::ValidateJson(schema, v, schema))
          << "schema " << k << " variant " << variant << ": " << text;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 12);
}

TEST(ServerJson, JsonObjectGivesAnObject) {
  for (int seed : {1, 2, 3}) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Reply in JSON."}}}},
                 {"max_tokens", 150}, {"seed", seed}, {"temperature", 0.8},
                 {"response_format", {{"type", "json_object"}}}};
    auto res = Server().PostJson("/v1/chat/completions", body);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json out = json::parse(res->body);
    const std::string text = out["choices"][0]["message"]["content"].get<std::string>();
    if (out["choices"][0]["finish_reason"] != "stop") continue;  // ran out of tokens
    const json v = json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << text;
    EXPECT_TRUE(v.is_object()) << text;
  }
}

TEST(ServerJson, BadResponseFormatIsA400NamingTheField) {
  struct Case {
    json format;
    const char* param;
    const char* says;
  };
  const Case cases[] = {
      {json("json"), "response_format", "expected an object"},
      {json{{"type", "yaml"}}, "response_format.type", "got 'yaml'"},
      {json::object(), "response_format.type", "required"},
      {json{{"type", "json_schema"}}, "response_format.json_schema", "required"},
      {json{{"type", "json_schema"}, {"json_schema", {{"schema", json::object()}}}},
       "response_format.json_schema.name", "name"},
      {SchemaFormat(json{{"type", "object"}, {"properties", {{"a", {{"pattern", "x+"}}}}}}),
       "response_format.json_schema.schema", "'#/properties/a/pattern'"},
      {SchemaFormat(json{{"type", "bogus"}}), "response_format.json_schema.schema",
       "unknown type 'bogus'"},
      {SchemaFormat(json{{"$ref", "#/$defs/nope"}}), "response_format.json_schema.schema",
       "points at nothing"},
  };
  for (const Case& c : cases) {
    for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
      json body = {{"max_tokens", 5}, {"response_format", c.format}};
      if (std::string(path) == "/v1/completions") body["prompt"] = "x";
      else body["messages"] = {{{"role", "user"}, {"content", "x"}}};
      auto res = Server().PostJson(path, body);
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 400) << c.format.dump();
      const json err = json::parse(res->body)["error"];
      EXPECT_EQ(err["param"], c.param) << res->body;
      EXPECT_NE(err["message"].get<std::string>().find(c.says), std::string::npos) << res->body;
    }
  }
  EXPECT_EQ(Server().pool->Stats().blocks_in_use, 0u);  // nothing leaked
}

}  // namespace
}  // namespace kvtier
