// Engine pieces against jinja2's documented behaviour (expected strings checked with
// python3-jinja2 3.1 set up as transformers does).
#include <gtest/gtest.h>

#include "jinja/internal.h"
#include "kvtier/jinja.h"

namespace kvtier::jinja {
namespace {

std::string R(std::string_view src, std::string_view vars_json = "{}") {
  Result<Template> t = Template::Parse(src);
  if (!t.ok()) return "PARSE: " + t.status().message();
  Result<Value> vars = ParseJson(vars_json);
  if (!vars.ok()) return "JSON: " + vars.status().message();
  RenderOptions o;
  o.now_epoch_seconds = 1700000000;
  Result<std::string> out = t->Render(*vars, o);
  if (!out.ok()) return "ERROR: " + out.status().message();
  return *out;
}

TEST(Jinja, Smoke) { EXPECT_EQ(R("a{{ 1 + 2 }}b"), "a3b"); }

}  // namespace
}  // namespace kvtier::jinja
