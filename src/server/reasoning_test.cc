// ReasoningSplitter: the same split whether the text arrives whole or a byte at a time, tags
// split across pushes, a prompt that opened <think>, outputs without reasoning.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/openai.h"
#include "server/reasoning.h"

namespace kvtier::server {
namespace {

struct Split {
  std::string reasoning, content;
};

Split SplitAll(bool opened, std::string_view text, size_t step) {
  ReasoningSplitter s(opened);
  Split out;
  for (size_t i = 0; i < text.size(); i += step) {
    ReasoningSplitter::Out o = s.Push(text.substr(i, step));
    out.reasoning += o.reasoning;
    out.content += o.content;
  }
  ReasoningSplitter::Out o = s.Flush();
  out.reasoning += o.reasoning;
  out.content += o.content;
  return out;
}

TEST(ReasoningSplitter, SplitsThinkTagsWhicheverWayTheTextArrives) {
  struct Case {
    bool opened;
    const char* text;
    const char* reasoning;
    const char* content;
  } cases[] = {
      {false, "<think>\n91 = 7 * 13.\n</think>\n\nNo, 91 is not prime.", "91 = 7 * 13.\n",
       "No, 91 is not prime."},
      {true, "\nthe prompt opened it\n</think>\n\nanswer", "the prompt opened it\n", "answer"},
      {false, "no reasoning at all", "", "no reasoning at all"},
      {false, "  <thinking> is not the tag", "", "  <thinking> is not the tag"},
      {false, "<think>cut off before the end", "cut off before the end", ""},
      {true, "</think>only an answer", "", "only an answer"},
      {false, "a < b </think> c", "", "a < b </think> c"},
      {false, "<think>x</thi", "x</thi", ""},
      {false, "<th", "", "<th"},
      {false, "", "", ""},
  };
  for (const Case& c : cases) {
    for (size_t step : {1, 2, 3, 5, 1000}) {
      SCOPED_TRACE(std::string(c.text) + " step " + std::to_string(step));
      const Split s = SplitAll(c.opened, c.text, step);
      EXPECT_EQ(s.reasoning, c.reasoning);
      EXPECT_EQ(s.content, c.content);
    }
  }
}

TEST(ReasoningSplitter, PromptOpensThinking) {
  EXPECT_TRUE(ReasoningSplitter::PromptOpensThinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(ReasoningSplitter::PromptOpensThinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(ReasoningSplitter::PromptOpensThinking("<|im_start|>assistant\n"));
  EXPECT_FALSE(ReasoningSplitter::PromptOpensThinking(""));
}

TEST(ReasoningSplitter, ResponsesCarryReasoningContent) {
  CompletionInfo info;
  info.id = "chatcmpl-1";
  info.model = "m";
  const auto msg = nlohmann::json::parse(ResponseJson(Endpoint::kChat, info, "answer", "stop", "why"));
  EXPECT_EQ(msg["choices"][0]["message"]["content"], "answer");
  EXPECT_EQ(msg["choices"][0]["message"]["reasoning_content"], "why");
  const auto plain = nlohmann::json::parse(ResponseJson(Endpoint::kChat, info, "answer", "stop"));
  EXPECT_FALSE(plain["choices"][0]["message"].contains("reasoning_content"));
  const auto chunk = nlohmann::json::parse(ChunkJson(Endpoint::kChat, info, "", false, "", "step"));
  EXPECT_EQ(chunk["choices"][0]["delta"]["reasoning_content"], "step");
  EXPECT_FALSE(chunk["choices"][0]["delta"].contains("content"));
}

}  // namespace
}  // namespace kvtier::server
