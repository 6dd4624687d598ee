// JsonMatcher against accept / reject corpora (JSONTestSuite-style cases written here) and,
// as a property, against nlohmann::json::accept on random and mutated texts.
#include "constrain/json_matcher.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace kvtier::constrain {
namespace {

bool Accepts(std::string_view text, bool object_only = false) {
  JsonMatcher m(JsonGrammar::AnyValue(object_only));
  return m.Feed(text) && m.CanEnd();
}

TEST(JsonMatcher, AcceptsRfc8259Values) {
  for (const char* t :
       {"0", "-0", "1", "-12", "1.5", "1e5", "1E+5", "-1.25e-10", "0.0", "true", "false", "null",
        "\"\"", "\"abc\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\u00e9\\uD83D\\uDE00\"",
        "\"caf\xc3\xa9\"", "\"\xe2\x82\xac\"", "\"\xf0\x9f\x98\x80\"", "[]", "[1]", "[1,2,3]",
        "{}", "{\"a\":1}", "{\"a\":{\"b\":[true,false,null]},\"c\":\"d\"}", " \t\r\n 1 \n",
        "[ 1 , [ ] , { } ]", "{ \"a\" : 1 , \"b\" : [ ] }", "[[[[[[[[[[]]]]]]]]]]", "123456789",
        "[-1e-0]", "{\"\":0}"}) {
    EXPECT_TRUE(Accepts(t)) << t;
  }
}

TEST(JsonMatcher, RejectsMalformedText) {
  for (const char* t :
       {"", " ", "01", "-", "+1", "1.", ".5", "1e", "1e+", "0x10", "--1", "1.e5", "tru", "truex",
        "True", "NULL", "nan", "Infinity", "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\u12G4\"",
        "\"tab\there\"", "\"nl\nx\"", "\"\xc3\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\\uD800\"", "\"\\uDC00\"", "\"\\uD800\\u0041\"", "\"\\uD800x\"",
        "\"\xf5\x80\x80\x80\"", "\"\xe0\x80\xaf\"", "\"\xff\"", "[", "]", "[1,]", "[,1]", "[1 2]",
        "{", "{\"a\"}", "{\"a\":}", "{\"a\" 1}", "{a:1}", "{'a':1}", "{\"a\":1,}", "{,}",
        "[1]]", "{}}", "1 2", "[1],", "\xef\xbb\xbf{}", "{\"a\":1 \"b\":2}", "[\"a\" \"b\"]"}) {
    EXPECT_FALSE(Accepts(t)) << t;
  }
}

TEST(JsonMatcher, ObjectOnlyTopLevel) {
  EXPECT_TRUE(Accepts("{\"x\":[1,{}]}", true));
  EXPECT_TRUE(Accepts(" {} ", true));
  for (const char* t : {"[]", "1", "\"{}\"", "null", "true"}) EXPECT_FALSE(Accepts(t, true)) << t;
}

TEST(JsonMatcher, CompletionStates) {
  JsonMatcher m(JsonGrammar::AnyValue(false));
  ASSERT_TRUE(m.Feed("12"));
  EXPECT_TRUE(m.CanEnd());   // a number may end here ...
  EXPECT_FALSE(m.Done());    // ... or go on
  ASSERT_TRUE(m.Feed("3 "));
  EXPECT_TRUE(m.Done());
  JsonMatcher o(JsonGrammar::AnyValue(false));
  ASSERT_TRUE(o.Feed("{\"a\":[1"));
  EXPECT_FALSE(o.CanEnd());
  ASSERT_TRUE(o.Feed("]}"));
  EXPECT_TRUE(o.Done());
  EXPECT_FALSE(o.Feed("x"));
  EXPECT_TRUE(o.dead());
}

TEST(JsonMatcher, WhitespaceCap) {
  JsonMatcher m(JsonGrammar::AnyValue(false), MatchLimits{3, 0, 0, 0});
  EXPECT_TRUE(m.Feed("[   1"));
  EXPECT_FALSE(m.Feed("    "));
  JsonMatcher s(JsonGrammar::AnyValue(false), MatchLimits{1, 0, 0, 0});
  EXPECT_TRUE(s.Feed("\"     \""));  // blanks inside a string are content, not counted
}

// Random JSON values (nlohmann), dumped compact and indented: all accepted; every strict prefix
// leaves the matcher alive (the property constrained decoding needs: no dead ends).
nlohmann::json RandomValue(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth > 3 ? 5 : 7);
  switch (kind(rng)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng()) - (1ll << 31);
    case 3: return std::ldexp(double(rng() % 100000) - 50000.0, int(rng() % 40) - 20);
    case 4:
    case 5: {
      static const char* parts[] = {"a", "\"", "\\", "\n", "\xc3\xa9", "\xf0\x9f\x98\x80", " ", "\x01", "/"};
      std::string s;
      for (int i = int(rng() % 6); i > 0; --i) s += parts[rng() % 9];
      return s;
    }
    case 6: {
      nlohmann::json a = nlohmann::json::array();
      for (int i = int(rng() % 4); i > 0; --i) a.push_back(RandomValue(rng, depth + 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      for (int i = int(rng() % 4); i > 0; --i) {
        const char key[3] = {'k', static_cast<char>('0' + rng() % 10), 0};
        o[key] = RandomValue(rng, depth + 1);
      }
      return o;
    }
  }
}

TEST(JsonMatcher, GenerationLimitsNumberDigits) {
  const MatchLimits lim{0, 3, 2, 1};
  for (const char* ok : {"123", "-1.25", "1e5", "[100,1.5e-3]"}) {
    JsonMatcher m(JsonGrammar::AnyValue(false), lim);
    EXPECT_TRUE(m.Feed(ok) && m.CanEnd()) << ok;
  }
  for (const char* bad : {"1234", "1.234", "1e10", "[1,2,3456]"}) {
    JsonMatcher m(JsonGrammar::AnyValue(false), lim);
    EXPECT_FALSE(m.Feed(bad) && m.CanEnd()) << bad;
  }
}

TEST(JsonMatcher, PropertyRandomValuesAndPrefixes) {
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    const nlohmann::json v = RandomValue(rng, 0);
    for (int indent : {-1, 2}) {
      const std::string text = v.dump(indent);
      JsonMatcher m(JsonGrammar::AnyValue(false));
      for (size_t k = 0; k < text.size(); ++k) {
        ASSERT_TRUE(m.FeedByte(static_cast<uint8_t>(text[k]))) << text << " at " << k;
      }
      EXPECT_TRUE(m.CanEnd()) << text;
    }
  }
}

// text with [at, at + n) replaced by `with` (built by appends: g++ 12's -Wrestrict misfires on
// std::string::insert / erase here).
std::string Splice(const std::string& text, size_t at, size_t n, const std::string& with) {
  std::string out;
  out.append(text.data(), at);
  out.append(with);
  out.append(text.data() + at + n, text.size() - at - n);
  return out;
}

// Differential: on mutated texts the matcher agrees with nlohmann's RFC 8259 parser (texts with
// \u escapes are skipped: RFC 8259's grammar allows lone surrogates, nlohmann rejects them).
TEST(JsonMatcher, PropertyAgreesWithNlohmannOnMutations) {
  std::mt19937 rng(11);
  const std::string alphabet = "{}[]:,\"\\ 0123456789.eE+-truefalsn\t\n\xc3\xa9\x80";
  int checked = 0, valid = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = RandomValue(rng, 0).dump();
    for (int k = int(rng() % 3); k >= 0 && !text.empty(); --k) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: text = Splice(text, at, 1, ""); break;
        default: text = Splice(text, at, 0, std::string(1, alphabet[rng() % alphabet.size()])); break;
      }
    }
    if (text.find("\\u") != std::string::npos) continue;
    bool want = true;
    try {
      const nlohmann::json parsed = nlohmann::json::parse(text);
      (void)parsed;
    } catch (const nlohmann::json::parse_error&) {
      want = false;
    } catch (const nlohmann::json::out_of_range&) {
      continue;  // a number past double's range: valid RFC 8259 text nlohmann refuses
    }
    EXPECT_EQ(Accepts(text), want) << text;
    ++checked;
    valid += want ? 1 : 0;
  }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(valid, 100);              // both kinds were exercised
  EXPECT_LT(valid, checked - 100);
}

}  // namespace
}  // namespace kvtier::constrain
