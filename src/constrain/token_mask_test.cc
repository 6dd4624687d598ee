// VocabTrie / JsonConstraint over the bundled model's vocabulary: the trie walk's mask equals
// the brute-force mask (every token's piece fed to a copy of the matcher), and constrained
// generation from random logits always yields text that parses and validates.
#include "constrain/token_mask.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "constrain/json_schema.h"
#include "constrain/json_validate_test_util.h"
#include "kvtier/gguf.h"

namespace kvtier::constrain {
namespace {

using json = nlohmann::json;

class TokenMaskTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto f = GgufFile::Open(std::string(KVTIER_SOURCE_DIR) + "/models/kvtier-austen-30m.gguf");
    ASSERT_TRUE(f.ok()) << f.status().message();
    auto t = Tokenizer::FromGguf(**f);
    ASSERT_TRUE(t.ok()) << t.status().message();
    tok_ = std::move(*t).release();
    trie_ = new std::shared_ptr<const VocabTrie>(VocabTrie::Build(*tok_));
  }
  static std::vector<int32_t> EndIds() {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < tok_->vocab_size(); ++i) {
      if (tok_->IsEndOfGeneration(static_cast<int32_t>(i))) ids.push_back(static_cast<int32_t>(i));
    }
    return ids;
  }
  static Tokenizer* tok_;
  static std::shared_ptr<const VocabTrie>* trie_;
};
Tokenizer* TokenMaskTest::tok_ = nullptr;
std::shared_ptr<const VocabTrie>* TokenMaskTest::trie_ = nullptr;

TEST_F(TokenMaskTest, TrieMaskEqualsBruteForce) {
  auto g = CompileJsonSchema(json::parse(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":4},
          "n":{"type":"array","items":{"type":"integer"}}},"required":["name"],
          "additionalProperties":false})"));
  ASSERT_TRUE(g.ok());
  for (const char* prefix : {"", "{", "{\"", "{\"na", "{\"name\":\"ab", "{\"name\":\"abcd",
                             "{\"n\":[1", "{\"n\":[12,", "{\"n\":[],\"name\":\"\""}) {
    JsonMatcher m(*g, MatchLimits::Generation());
    ASSERT_TRUE(m.Feed(prefix)) << prefix;
    std::vector<uint64_t> mask;
    (*trie_)->Allowed(m, &mask);
    size_t allowed = 0;
    for (size_t id = 0; id < tok_->vocab_size(); ++id) {
      const auto i = static_cast<int32_t>(id);
      bool want = false;
      if (!tok_->IsControl(i)) {
        const std::string piece = tok_->TokenPiece(i);
        JsonMatcher t = m;
        want = !piece.empty() && t.Feed(piece);
      }
      const bool got = mask[id >> 6] >> (id & 63) & 1;
      ASSERT_EQ(got, want) << "prefix " << prefix << " token " << id << " '"
                           << tok_->TokenPiece(i) << "'";
      allowed += got ? 1 : 0;
    }
    EXPECT_GT(allowed, 0u) << prefix;
  }
}

// Random logits stand in for a model: whatever they prefer, the masked choice keeps the text
// valid, and generation ends with a complete value.
TEST_F(TokenMaskTest, PropertyRandomLogitsGiveValidJson) {
  const json schemas[] = {
      json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
          "age":{"type":"integer"},"pets":{"type":"array","items":{"enum":["cat","dog"]},
          "maxItems":3}},"required":["name","age","pets"],"additionalProperties":false})"),
      json::parse(R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":4})"),
      json::parse(R"({"anyOf":[{"type":"null"},{"type":"object","properties":{"x":{"type":"number"}},
          "required":["x"],"additionalProperties":false}]})")};
  const std::vector<int32_t> end = EndIds();
  std::mt19937 rng(5);
  int complete = 0;
  for (const json& schema : schemas) {
    auto g = CompileJsonSchema(schema);
    ASSERT_TRUE(g.ok()) << g.status().message();
    for (int run = 0; run < 20; ++run) {
      JsonConstraint c(*g, *trie_, *tok_, end);
      std::vector<float> logits(tok_->vocab_size());
      std::string text;
      bool finished = false;
      for (int step = 0; step < 300 && !finished; ++step) {
        std::normal_distribution<float> nd(0.0f, 3.0f);
        for (float& l : logits) l = nd(rng);
        // Late in a run, favour short tokens that close things.
        if (step > 60) {
          for (const char* close : {"\"", "}", "]", "1", "true"}) {
            const int32_t id = tok_->FindToken(close);
            if (id >= 0) logits[static_cast<size_t>(id)] += 20.0f;
          }
        }
        c.Mask(logits);
        const size_t pick = static_cast<size_t>(
            std::max_element(logits.begin(), logits.end()) - logits.begin());
        ASSERT_TRUE(std::isfinite(logits[pick])) << "nothing allowed after " << text;
        const auto id = static_cast<int32_t>(pick);
        if (std::find(end.begin(), end.end(), id) == end.end()) text += tok_->TokenPiece(id);
        finished = c.Accept(id);
      }
      if (!finished) continue;
      ++complete;
      const json v = json::parse(text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << text;
      EXPECT_TRUE(testing::ValidateJson(schema, v, schema)) << text;
    }
  }
  EXPECT_GE(complete, 45);
}

}  // namespace
}  // namespace kvtier::constrain
