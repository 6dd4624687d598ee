// Reasoning models' output split into reasoning and answer: text inside the template's reasoning
// tags (<think>...</think> for most; ReasoningTagsFor picks the others) becomes
// message.reasoning_content / delta.reasoning_content, the rest the content (issue 31).
// A ReasoningSplitter follows one completion's text as it streams: a tag split across pushes is
// held back until it is whole. One per request; not thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace kvtier::server {

// The open / close tags of a template's reasoning block.
struct ReasoningTags {
  std::string open = "<think>";
  std::string close = "</think>";
};

// The tags the template text uses: Seed-OSS <seed:think>, Mistral's reasoning [THINK],
// Cohere's <|START_THINKING|>, <thinking> (Apriel), else <think>. `found` is false when the
// template shows none of the closing tags (no reasoning split then).
ReasoningTags ReasoningTagsFor(std::string_view template_source, bool* found);

class ReasoningSplitter {
 public:
  // `prompt_opened`: the prompt ends inside <think> (the template's generation prompt opened
  // it), so the output starts as reasoning. Otherwise the output is reasoning only when it
  // starts with <think> (after whitespace).
  explicit ReasoningSplitter(bool prompt_opened, ReasoningTags tags = {});

  struct Out {
    std::string reasoning;
    std::string content;
  };
  Out Push(std::string_view text);
  Out Flush();  // the end of the output: everything held back

  // True when the rendered prompt ends with an open <think> (trailing whitespace ignored).
  static bool PromptOpensThinking(std::string_view prompt, const ReasoningTags& tags = {});

 private:
  enum class State : uint8_t { kStart, kReasoning, kContent };
  ReasoningTags tags_;
  void Run(Out* out, bool final);
  State state_;
  bool skip_newlines_;  // right after a tag: its newlines belong to the tag
  std::string held_;
};

}  // namespace kvtier::server
