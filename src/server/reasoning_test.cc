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

TEST(ReasoningSplitter, OtherTemplatesTagsSplitTheSameWay) {
  // Each pair the detector knows, whole and a byte at a time, opened by the prompt or not.
  struct Case {
    const char* template_text;  // what the detector reads
    const char* open;
    const char* close;
  } cases[] = {
      {"{{ '<seed:think>' }}{{ m.reasoning }}</seed:think>", "<seed:think>", "</seed:think>"},
      {"[THINK]{{ m.reasoning }}[/THINK]", "[THINK]", "[/THINK]"},
      {"<|START_THINKING|>{{ r }}<|END_THINKING|>", "<|START_THINKING|>", "<|END_THINKING|>"},
      {"<think>{{ r }}</think>", "<think>", "</think>"},
      {"<thinking>{{ r }}</thinking>", "<thinking>", "</thinking>"},
  };
  for (const Case& c : cases) {
    bool found = false;
    const ReasoningTags tags = ReasoningTagsFor(c.template_text, &found);
    ASSERT_TRUE(found) << c.template_text;
    EXPECT_EQ(tags.open, c.open);
    EXPECT_EQ(tags.close, c.close);
    const std::string text = std::string(c.open) + "\nweigh it\n" + c.close + "\n\nanswer";
    const std::string opened = std::string("weigh it ") + c.close + " answer";
    for (size_t step : {size_t{1}, size_t{3}, text.size()}) {
      for (bool prompt_opened : {false, true}) {
        ReasoningSplitter sp(prompt_opened, tags);
        const std::string_view in = prompt_opened ? opened : text;
        std::string reasoning, content;
        for (size_t i = 0; i < in.size(); i += step) {
          ReasoningSplitter::Out o = sp.Push(in.substr(i, step));
          reasoning += o.reasoning;
          content += o.content;
        }
        ReasoningSplitter::Out o = sp.Flush();
        reasoning += o.reasoning;
        content += o.content;
        EXPECT_EQ(reasoning, prompt_opened ? "weigh it " : "weigh it\n")
            << c.open << " step " << step;
        EXPECT_EQ(content, prompt_opened ? " answer" : "answer") << c.open << " step " << step;
      }
    }
    // Another pair's tags are plain text to this one.
    ReasoningSplitter other(false, tags);
    const std::string foreign =
        std::string(c.open) == "<think>" ? "[THINK]x[/THINK]" : "<think>x</think>";
    ReasoningSplitter::Out a = other.Push(foreign), b = other.Flush();
    EXPECT_EQ(a.reasoning + b.reasoning, "") << c.open;
    EXPECT_EQ(a.content + b.content, foreign) << c.open;
    EXPECT_TRUE(
        ReasoningSplitter::PromptOpensThinking(std::string("assistant\n") + c.open + "\n", tags));
  }
  bool found = true;
  ReasoningTagsFor("{{ messages[0].content }}", &found);
  EXPECT_FALSE(found);
}

}  // namespace
}  // namespace kvtier::server
