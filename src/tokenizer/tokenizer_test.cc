// Tokenizer tests on hand-built vocabularies: segmentation, byte fallback, special tokens,
// round trips on random UTF-8, stream decoding, metadata validation, and loading through GGUF.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kvtier/gguf.h"
#include "kvtier/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace kvtier {
namespace {

using testing_tok::SmallBpeVocab;
using testing_tok::SmallSpmVocab;

std::unique_ptr<Tokenizer> Make(TokenizerVocab v) {
  auto t = Tokenizer::FromVocab(std::move(v));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

int32_t Id(const Tokenizer& t, const std::string& s) {
  const int32_t id = t.FindToken(s);
  EXPECT_GE(id, 0) << s;
  return id;
}

const std::string kSp = "\xe2\x96\x81";

TEST(SpmTokenizer, MergesByScoreWithSpacePrefix) {
  auto t = Make(SmallSpmVocab());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->kind(), TokenizerKind::kSpm);
  EXPECT_TRUE(t->add_bos_default());
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->Encode("hello world", false),
            (std::vector<int32_t>{Id(*t, kSp + "hello"), Id(*t, kSp + "world")}));
  EXPECT_EQ(t->Encode("hello world", true),
            (std::vector<int32_t>{1, Id(*t, kSp + "hello"), Id(*t, kSp + "world")}));
  EXPECT_TRUE(t->Encode("", false).empty());
  EXPECT_EQ(t->Encode("", true), std::vector<int32_t>{1});
}

TEST(SpmTokenizer, ByteFallback) {
  auto t = Make(SmallSpmVocab());
  ASSERT_TRUE(t);
  // "é" has no token: its two UTF-8 bytes become <0xC3> <0xA9>.
  EXPECT_EQ(t->Encode("h\xc3\xa9", false),
            (std::vector<int32_t>{Id(*t, kSp), Id(*t, "h"), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->TokenPiece(3 + 0xC3), "\xc3");
  EXPECT_EQ(t->TokenPiece(Id(*t, kSp + "hello")), " hello");
  EXPECT_EQ(t->Decode(t->Encode("h\xc3\xa9 world", true)), "h\xc3\xa9 world");
}

TEST(SpmTokenizer, SpecialTokens) {
  auto t = Make(SmallSpmVocab());
  ASSERT_TRUE(t);
  const int32_t end = Id(*t, "<|im_end|>");
  const int32_t tool = Id(*t, "<tool>");
  // Text after a special token gets the space prefix again, as in llama.cpp.
  EXPECT_EQ(t->Encode("hello<|im_end|>world", false),
            (std::vector<int32_t>{Id(*t, kSp + "hello"), end, Id(*t, kSp + "world")}));
  // Not parsed: the control token's text is ordinary text; user-defined tokens still match.
  const auto plain = t->Encode("<|im_end|><tool>", false, false);
  EXPECT_EQ(plain.back(), tool);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), end), 0);
  EXPECT_TRUE(t->IsEndOfGeneration(end));  // by name
  EXPECT_TRUE(t->IsEndOfGeneration(2));    // eos
  EXPECT_FALSE(t->IsEndOfGeneration(1));
  // Control tokens are left out of Decode unless asked for.
  const std::vector<int32_t> ids = {1, Id(*t, kSp + "hello"), end};
  EXPECT_EQ(t->Decode(ids), "hello");
  EXPECT_EQ(t->Decode(ids, true), "<s>hello<|im_end|>");  // one space stripped after BOS
}

TEST(BpeTokenizer, MergesByRank) {
  auto t = Make(SmallBpeVocab());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->kind(), TokenizerKind::kBpe);
  EXPECT_EQ(t->pre(), "gpt-2");
  EXPECT_FALSE(t->add_bos_default());
  EXPECT_EQ(t->Encode("hello world", false),
            (std::vector<int32_t>{Id(*t, "hello"), Id(*t, "\xc4\xa0world")}));
  // Pieces undo the byte-level mapping.
  EXPECT_EQ(t->TokenPiece(Id(*t, "\xc4\xa0world")), " world");
  EXPECT_EQ(t->TokenPiece(0xC3), "\xc3");
  // Unmerged multi-byte characters: one token per byte.
  EXPECT_EQ(t->Encode("\xc3\xa9", false), (std::vector<int32_t>{0xC3, 0xA9}));
}

TEST(BpeTokenizer, SpecialTokensLongestFirst) {
  auto t = Make(SmallBpeVocab());
  ASSERT_TRUE(t);
  const int32_t start = Id(*t, "<|im_start|>");
  const int32_t end = Id(*t, "<|im_end|>");
  const int32_t eot = Id(*t, "<|endoftext|>");
  auto ids = t->Encode("<|im_start|>hello<|im_end|><|endoftext|>", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{start, Id(*t, "hello"), end, eot}));
  // "<|end|>" is a prefix of nothing here, but "<|endoftext|>" must not be cut at "<|end".
  ids = t->Encode("<|endoftext|><|end|>", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{eot, Id(*t, "<|end|>")}));
  ids = t->Encode("<|im_start|>", false, /*parse_special=*/false);
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(t->Decode(ids), "<|im_start|>");
  EXPECT_EQ(t->Encode("a<tool>b", false, false),
            (std::vector<int32_t>{'a', Id(*t, "<tool>"), 'b'}));
  for (int32_t id : {end, eot, Id(*t, "<|end|>")}) EXPECT_TRUE(t->IsEndOfGeneration(id)) << id;
  EXPECT_FALSE(t->IsEndOfGeneration(start));
  EXPECT_EQ(t->Encode("hi", true).front(), eot);  // bos = <|endoftext|>
}

// Random strings of code points from several planes, with extra spaces, newlines, digits and
// apostrophes so that every branch of the pre-tokenizers is taken.
std::string RandomUtf8(std::mt19937& rng, size_t n) {
  static const char* kBits[] = {" ", "  ", "\n", "\t", "'s", "'LL", "123", "4", ".", "?!"};
  std::uniform_int_distribution<int> pick(0, 9);
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const int k = pick(rng);
    if (k < 3) {
      s += kBits[std::uniform_int_distribution<int>(0, 9)(rng)];
      continue;
    }
    uint32_t cp = 0;
    switch (k) {
      case 3: case 4: cp = std::uniform_int_distribution<uint32_t>(0x20, 0x7E)(rng); break;
      case 5: cp = std::uniform_int_distribution<uint32_t>(0x80, 0x7FF)(rng); break;
      case 6: cp = std::uniform_int_distribution<uint32_t>(0x800, 0xFFFD)(rng); break;
      case 7: cp = std::uniform_int_distribution<uint32_t>(0x10000, 0x10FFFF)(rng); break;
      default: cp = std::uniform_int_distribution<uint32_t>(0x01, 0x1F)(rng); break;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xE000;
    tokenizer_internal::AppendUtf8(&s, cp);
  }
  return s;
}

TEST(Tokenizer, RoundTripRandomUtf8) {
  std::mt19937 rng(1234);
  std::vector<std::unique_ptr<Tokenizer>> toks;
  toks.push_back(Make(SmallSpmVocab()));
  for (const char* pre : {"gpt-2", "default", "llama-bpe", "qwen2", "smollm"}) {
    toks.push_back(Make(SmallBpeVocab(pre)));
  }
  for (int iter = 0; iter < 300; ++iter) {
    const std::string s = RandomUtf8(rng, 1 + iter % 40);
    for (const auto& t : toks) {
      ASSERT_TRUE(t);
      for (bool bos : {false, true}) {
        const auto ids = t->Encode(s, bos, /*parse_special=*/false);
        ASSERT_EQ(t->Decode(ids), s) << TokenizerKindName(t->kind()) << " " << t->pre();
      }
    }
  }
}

TEST(Tokenizer, InvalidUtf8BytesSurvive) {
  const std::string s = "ab\xff\xc3(\xe2\x82 x\xf0\x9f";
  for (auto v : {SmallSpmVocab(), SmallBpeVocab("qwen2"), SmallBpeVocab("gpt-2")}) {
    auto t = Make(std::move(v));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->Decode(t->Encode(s, false)), s);
  }
}

TEST(StreamDecoder, HoldsSplitCharacters) {
  auto t = Make(SmallBpeVocab());
  ASSERT_TRUE(t);
  // U+1F999 (4 bytes) and U+00E9 (2 bytes) arrive one byte token at a time.
  const std::string text = "hello \xf0\x9f\xa6\x99\xc3\xa9!";
  const auto ids = t->Encode(text, false);
  StreamDecoder d(*t);
  std::string got;
  std::vector<std::string> emitted;
  for (int32_t id : ids) {
    std::string part = d.Push(id);
    // Every emitted chunk is whole UTF-8.
    EXPECT_EQ(tokenizer_internal::IncompleteUtf8Tail(part), 0u) << part;
    emitted.push_back(part);
    got += part;
  }
  got += d.Flush();
  EXPECT_EQ(got, text);
  // The emoji's first three bytes produced nothing.
  EXPECT_EQ(d.Push(0xF0), "");
  EXPECT_EQ(d.Push(0x9F), "");
  EXPECT_EQ(d.Flush(), "\xf0\x9f");  // incomplete at the end: passed through as is
  EXPECT_EQ(d.Push(Id(*t, "<|im_end|>")), "");
}

TEST(StreamDecoder, SpmByteTokensAndLeadingSpace) {
  auto t = Make(SmallSpmVocab());
  ASSERT_TRUE(t);
  const auto ids = t->Encode("hello h\xc3\xa9", false);
  StreamDecoder keep(*t);
  StreamDecoder strip(*t, /*strip_leading_space=*/true);
  std::string a;
  std::string b;
  for (int32_t id : ids) {
    a += keep.Push(id);
    b += strip.Push(id);
  }
  EXPECT_EQ(a, " hello h\xc3\xa9");  // continuing a prompt: the space is the text's
  EXPECT_EQ(b, "hello h\xc3\xa9");
  EXPECT_EQ(keep.Push(3 + 0xC3), "");
  EXPECT_EQ(keep.Push(3 + 0xA9), "\xc3\xa9");
}

// --- metadata validation -------------------------------------------------------------------

void ExpectError(TokenizerVocab v, const std::string& key) {
  auto t = Tokenizer::FromVocab(std::move(v));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find(key), std::string::npos) << t.status().message();
}

TEST(TokenizerVocab, MalformedMetadataNamesTheKey) {
  auto v = SmallBpeVocab();
  v.tokens.clear();
  v.token_types.clear();
  ExpectError(v, "tokenizer.ggml.tokens");

  v = SmallBpeVocab();
  v.model = "wordpiece";
  ExpectError(v, "tokenizer.ggml.model");
  v.model.clear();
  ExpectError(v, "tokenizer.ggml.model");

  v = SmallBpeVocab();
  v.merges.push_back("he zz");
  ExpectError(v, "tokenizer.ggml.merges[9]");
  v = SmallBpeVocab();
  v.merges.push_back("nospace");
  ExpectError(v, "tokenizer.ggml.merges[9]");
  v = SmallBpeVocab();
  v.merges.clear();  // no merges: valid, every byte is its own token
  EXPECT_TRUE(Tokenizer::FromVocab(v).ok());

  v = SmallBpeVocab();
  v.token_types.pop_back();
  ExpectError(v, "tokenizer.ggml.token_type");
  v = SmallBpeVocab();
  v.token_types[7] = 42;
  ExpectError(v, "tokenizer.ggml.token_type[7]");

  auto s = SmallSpmVocab();
  s.scores.pop_back();
  ExpectError(s, "tokenizer.ggml.scores");
  s = SmallSpmVocab();
  s.tokens[265] = s.tokens[264];
  ExpectError(s, "tokenizer.ggml.tokens[265]");
  s = SmallSpmVocab();
  s.token_types[266] = 6;  // a byte token that is not <0xNN>
  ExpectError(s, "tokenizer.ggml.tokens[266]");
  s = SmallSpmVocab();
  s.bos_id = 100000;
  ExpectError(s, "tokenizer.ggml.bos_token_id");

  v = SmallBpeVocab("no-such-pre");
  ExpectError(v, "tokenizer.ggml.pre");

  // An out-of-range padding id is only a warning.
  v = SmallBpeVocab();
  v.pad_id = -5;
  auto t = Tokenizer::FromVocab(v);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ((*t)->warnings().size(), 1u);
  EXPECT_NE((*t)->warnings()[0].find("tokenizer.ggml.padding_token_id"), std::string::npos);
}

// --- through GGUF --------------------------------------------------------------------------

std::vector<uint8_t> VocabGguf(const TokenizerVocab& v, bool drop_merges = false) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w.SetString("tokenizer.ggml.pre", v.pre);
  w.SetStringArray("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.SetFloat32Array("tokenizer.ggml.scores", v.scores);
  w.SetInt32Array("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty() && !drop_merges) w.SetStringArray("tokenizer.ggml.merges", v.merges);
  if (v.bos_id) w.SetUint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*v.bos_id));
  if (v.eos_id) w.SetUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(*v.eos_id));
  w.SetBool("tokenizer.ggml.add_bos_token", true);
  w.SetString("tokenizer.chat_template", "{% for m in messages %}<|im_start|>{% endfor %}");
  return w.Serialize();
}

TEST(TokenizerGguf, LoadsLikeFromVocab) {
  for (const auto& v : {SmallSpmVocab(), SmallBpeVocab()}) {
    const auto bytes = VocabGguf(v);
    auto file = GgufFile::FromMemory(bytes, "vocab.gguf");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto t = Tokenizer::FromGguf(**file);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto ref = Make(v);
    EXPECT_EQ((*t)->vocab_size(), ref->vocab_size());
    EXPECT_TRUE((*t)->add_bos_default());
    EXPECT_EQ((*t)->bos_id(), ref->bos_id());
    EXPECT_EQ((*t)->chat_template(), "{% for m in messages %}<|im_start|>{% endfor %}");
    const std::string text = "hello world <|im_end|> h\xc3\xa9";
    EXPECT_EQ((*t)->Encode(text, true), ref->Encode(text, true));
  }
}

TEST(TokenizerGguf, MalformedMetadataNamesTheKey) {
  auto check = [](const std::vector<uint8_t>& bytes, const std::string& key) {
    auto file = GgufFile::FromMemory(bytes, "vocab.gguf");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto t = Tokenizer::FromGguf(**file);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find(key), std::string::npos) << t.status().message();
  };
  check(VocabGguf(SmallBpeVocab(), /*drop_merges=*/true), "tokenizer.ggml.merges");
  {
    GgufWriter w;  // no tokenizer at all
    w.SetString("general.architecture", "llama");
    check(w.Serialize(), "tokenizer.ggml.model");
  }
  {
    GgufWriter w;  // tokens of the wrong type
    w.SetString("tokenizer.ggml.model", "llama");
    w.SetInt32Array("tokenizer.ggml.tokens", {1, 2, 3});
    check(w.Serialize(), "tokenizer.ggml.tokens");
  }
  {
    GgufWriter w;  // tokens missing
    w.SetString("tokenizer.ggml.model", "llama");
    check(w.Serialize(), "tokenizer.ggml.tokens");
  }
  {
    auto v = SmallSpmVocab();
    v.scores.resize(10);
    check(VocabGguf(v), "tokenizer.ggml.scores");
  }
}

}  // namespace
}  // namespace kvtier
