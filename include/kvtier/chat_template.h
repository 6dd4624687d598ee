// Chat prompts for the model families kvtier serves: the template is recognised from the GGUF's
// tokenizer.chat_template (Jinja source, not executed) and applied by built-in formatters.
// Pure functions; thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier {

enum class ChatTemplate : uint8_t {
  kPlain = 0,   // fallback: "role: content" lines
  kChatMl = 1,  // <|im_start|>role\ncontent<|im_end|>\n (Qwen, SmolLM, ...)
  kLlama3 = 2,  // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
  kLlama2 = 3,  // [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ...
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (others are kept verbatim where possible)
  std::string content;
};

std::string_view ChatTemplateName(ChatTemplate t);  // "plain", "chatml", "llama3", "llama2"
// Inverse of ChatTemplateName; InvalidArgument listing the names otherwise.
Result<ChatTemplate> ParseChatTemplateName(std::string_view name);

// Recognises the family of a Jinja chat template by its marker tokens. Empty or unrecognised
// source gives kPlain and sets *warning (when non-null) to a sentence saying so; otherwise the
// warning is cleared.
ChatTemplate DetectChatTemplate(std::string_view jinja_or_empty, std::string* warning);

// The prompt text for `messages`; with `add_generation_prompt` it ends where the assistant's
// answer starts. The BOS token is not included (Encode adds it); special tokens are written as
// text, so encode the result with parse_special.
std::string ApplyChatTemplate(ChatTemplate t, std::span<const ChatMessage> messages,
                              bool add_generation_prompt);

}  // namespace kvtier
