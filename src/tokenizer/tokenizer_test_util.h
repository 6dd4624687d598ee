// Small hand-built vocabularies for the tokenizer tests. Header-only; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

namespace kvtier::testing_tok {

// SPM: <unk>, <s>, </s>, the 256 byte tokens, then a few scored pieces that merge
// "hello world" into "▁hello" "▁world", and "<|im_end|>" as a control token.
inline TokenizerVocab SmallSpmVocab() {
  TokenizerVocab v;
  v.model = "llama";
  auto add = [&v](std::string t, float score, int32_t type) {
    v.tokens.push_back(std::move(t));
    v.scores.push_back(score);
    v.token_types.push_back(type);
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, 0, 6);
  }
  const std::string sp = "\xe2\x96\x81";
  for (const char* c : {"h", "e", "l", "o", "w", "r", "d"}) add(c, -2.0f, 1);
  add(sp, -2.0f, 1);
  add("he", -1.5f, 1);
  add("ll", -1.2f, 1);
  add(sp + "he", -1.0f, 1);
  add("llo", -1.1f, 1);
  add(sp + "hello", -0.5f, 1);
  add(sp + "w", -1.3f, 1);
  add("or", -1.4f, 1);
  add(sp + "wor", -1.0f, 1);
  add("ld", -1.6f, 1);
  add(sp + "world", -0.4f, 1);
  add("<|im_end|>", 0, 3);
  add("<tool>", 0, 4);
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return v;
}

// Byte-level BPE: the 256 byte symbols (id = byte), merges building "hello" and "Ġworld",
// then control tokens <|endoftext|>, <|im_start|>, <|im_end|>, <|end|> and the user-defined
// token "<tool>".
inline TokenizerVocab SmallBpeVocab(std::string pre = "gpt-2") {
  TokenizerVocab v;
  v.model = "gpt2";
  v.pre = std::move(pre);
  const auto& map = tokenizer_internal::ByteToCodepoint();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    tokenizer_internal::AppendUtf8(&s, map[b]);
    v.tokens.push_back(s);
    v.token_types.push_back(1);
  }
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"},    {"l", "l"},     {"he", "ll"},     {"hell", "o"},     {"\xc4\xa0", "w"},
      {"o", "r"},    {"\xc4\xa0w", "or"}, {"\xc4\xa0wor", "l"}, {"\xc4\xa0worl", "d"}};
  for (const auto& [a, b] : merges) {
    v.merges.push_back(a + " " + b);
    v.tokens.push_back(a + b);
    v.token_types.push_back(1);
  }
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|end|>"}) {
    v.tokens.push_back(s);
    v.token_types.push_back(3);
  }
  v.tokens.push_back("<tool>");
  v.token_types.push_back(4);
  v.bos_id = static_cast<int64_t>(v.tokens.size()) - 5;  // <|endoftext|>
  v.eos_id = v.bos_id;
  return v;
}

}  // namespace kvtier::testing_tok
