// ReasoningSplitter (server/reasoning.h).
#include "server/reasoning.h"

#include <algorithm>
#include <utility>

namespace kvtier::server {

namespace {

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t PartialTag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}
}  // namespace

ReasoningTags ReasoningTagsFor(std::string_view src, bool* found) {
  // The first pair whose closing tag the template writes; the specific ones before <think>,
  // whose close tag is a substring of none of them.
  static const ReasoningTags kPairs[] = {
      {"<seed:think>", "</seed:think>"},
      {"[THINK]", "[/THINK]"},
      {"<|START_THINKING|>", "<|END_THINKING|>"},
      {"<think>", "</think>"},
      {"<thinking>", "</thinking>"},
  };
  for (const ReasoningTags& t : kPairs) {
    if (src.find(t.close) != std::string_view::npos) {
      *found = true;
      return t;
    }
  }
  *found = false;
  return ReasoningTags{};
}

ReasoningSplitter::ReasoningSplitter(bool prompt_opened, ReasoningTags tags)
    : tags_(std::move(tags)),
      state_(prompt_opened ? State::kReasoning : State::kStart),
      skip_newlines_(prompt_opened) {}

bool ReasoningSplitter::PromptOpensThinking(std::string_view prompt, const ReasoningTags& tags) {
  const size_t end = prompt.find_last_not_of(" \t\r\n");
  if (end == std::string_view::npos) return false;
  prompt = prompt.substr(0, end + 1);
  const std::string_view open = tags.open;
  return prompt.size() >= open.size() && prompt.substr(prompt.size() - open.size()) == open;
}

void ReasoningSplitter::Run(Out* out, bool final) {
  const std::string_view open_tag = tags_.open;
  const std::string_view close_tag = tags_.close;
  for (;;) {
    if (skip_newlines_) {
      const size_t n = held_.find_first_not_of("\r\n");
      held_.erase(0, n == std::string::npos ? held_.size() : n);
      if (held_.empty()) return;
      skip_newlines_ = false;
    }
    switch (state_) {
      case State::kStart: {
        const size_t ws = held_.find_first_not_of(" \t\r\n");
        if (ws == std::string::npos) {
          if (final) {
            out->content += held_;
            held_.clear();
          }
          return;
        }
        const std::string_view rest = std::string_view(held_).substr(ws);
        if (rest.substr(0, open_tag.size()) == open_tag) {
          held_.erase(0, ws + open_tag.size());
          state_ = State::kReasoning;
          skip_newlines_ = true;
          continue;
        }
        if (!final && rest.size() < open_tag.size() && open_tag.substr(0, rest.size()) == rest) return;
        state_ = State::kContent;
        continue;
      }
      case State::kReasoning: {
        const size_t close = held_.find(close_tag);
        if (close != std::string::npos) {
          out->reasoning.append(held_, 0, close);
          held_.erase(0, close + close_tag.size());
          state_ = State::kContent;
          skip_newlines_ = true;
          continue;
        }
        const size_t keep = final ? 0 : PartialTag(held_, close_tag);
        out->reasoning.append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return;
      }
      case State::kContent:
        out->content += held_;
        held_.clear();
        return;
    }
  }
}

ReasoningSplitter::Out ReasoningSplitter::Push(std::string_view text) {
  Out out;
  held_.append(text);
  Run(&out, false);
  return out;
}

ReasoningSplitter::Out ReasoningSplitter::Flush() {
  Out out;
  Run(&out, true);
  return out;
}

}  // namespace kvtier::server
