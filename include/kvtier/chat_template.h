// Chat prompts: ChatRenderer runs the GGUF's tokenizer.chat_template on the Jinja engine
// (kvtier/jinja.h) as transformers' apply_chat_template does; a model without a template (or
// with one the engine cannot parse) falls back to a built-in family recognised from the source
// (ChatML, Llama 3, Llama 2, or plain "role: content" lines).
// Pure functions; a ChatRenderer is immutable once built and thread-safe.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/jinja.h"
#include "kvtier/status.h"
#include "kvtier/tokenizer.h"

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

// What a chat template renders: the variables transformers passes.
struct ChatRenderInput {
  jinja::Value messages;  // a list of message dicts: role, content, tool_calls, reasoning_content...
  jinja::Value tools;     // a list of tool dicts, or undefined (not passed) when none
  jinja::Value kwargs;    // a dict of extra variables (chat_template_kwargs), or undefined
  bool add_generation_prompt = true;
};

class ChatRenderer {
 public:
  // The tokenizer's template, bos_token / eos_token its BOS / EOS texts.
  static ChatRenderer ForTokenizer(const Tokenizer& tok);
  static ChatRenderer FromSource(std::string_view jinja_or_empty, std::string bos_token,
                                 std::string eos_token);

  bool uses_jinja() const { return tmpl_.has_value(); }
  ChatTemplate fallback() const { return fallback_; }
  // Why the fallback is used ("" when the model's template runs).
  const std::string& warning() const { return warning_; }

  // The prompt text. InvalidArgument "chat template: template:LINE:COL: message" when the
  // template raises (raise_exception, a value it cannot use). The fallback reads each message's
  // role and content (a string or a list of {"type": "text", "text": ...} parts).
  Result<std::string> Render(const ChatRenderInput& in) const;
  Result<std::string> Render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                             const jinja::Value& kwargs = {}) const;
  // Whether to encode `text` with a BOS token: the tokenizer's default, except when the
  // template already wrote the BOS text at its start (as most Jinja templates do).
  bool AddBos(bool add_bos_default, std::string_view text) const;

 private:
  std::optional<jinja::Template> tmpl_;
  ChatTemplate fallback_ = ChatTemplate::kPlain;
  std::string warning_;
  std::string bos_, eos_;
};

}  // namespace kvtier
