// Built-in chat templates (ChatML, Llama 3, Llama 2) and their recognition from Jinja source.
// Pure functions; thread-safe.
#include "kvtier/chat_template.h"

#include <string>
#include <string_view>

namespace kvtier {

namespace {

constexpr std::string_view kNames[] = {"plain", "chatml", "llama3", "llama2"};

std::string_view Trim(std::string_view s) {
  constexpr std::string_view kWs = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kWs);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(kWs);
  return s.substr(b, e - b + 1);
}

void Append(std::string* out, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts) out->append(p);
}

std::string ChatMl(std::span<const ChatMessage> messages, bool gen) {
  std::string out;
  for (const ChatMessage& m : messages) {
    Append(&out, {"<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n"});
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

std::string Llama3(std::span<const ChatMessage> messages, bool gen) {
  std::string out;
  for (const ChatMessage& m : messages) {
    Append(&out, {"<|start_header_id|>", m.role, "<|end_header_id|>\n\n", Trim(m.content),
                  "<|eot_id|>"});
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Meta's Llama 2 chat format. The first "<s>" is the BOS that Encode adds; later turns write it
// as text. A system message goes inside the first [INST] block.
std::string Llama2(std::span<const ChatMessage> messages) {
  std::string out;
  std::string system;
  bool in_turn = false;  // an [INST] block is open
  bool first_turn = true;
  for (const ChatMessage& m : messages) {
    const std::string_view content = Trim(m.content);
    if (m.role == "system") {
      if (!system.empty()) system += "\n";
      system.append(content);
      continue;
    }
    if (m.role == "assistant") {
      if (!in_turn) {  // an answer with no question before it
        Append(&out, {first_turn ? "" : "<s>", "[INST]  [/INST]"});
        first_turn = false;
      }
      Append(&out, {" ", content, " </s>"});
      in_turn = false;
      continue;
    }
    // user (or any other role): opens a turn.
    Append(&out, {first_turn ? "" : "<s>", "[INST] "});
    if (!system.empty()) {
      Append(&out, {"<<SYS>>\n", system, "\n<</SYS>>\n\n"});
      system.clear();
    }
    Append(&out, {content, " [/INST]"});
    in_turn = true;
    first_turn = false;
  }
  if (!system.empty()) {  // only system messages
    Append(&out, {first_turn ? "" : "<s>", "[INST] <<SYS>>\n", system, "\n<</SYS>>\n\n [/INST]"});
  }
  return out;
}

std::string Plain(std::span<const ChatMessage> messages, bool gen) {
  std::string out;
  for (const ChatMessage& m : messages) Append(&out, {m.role, ": ", m.content, "\n"});
  if (gen) out += "assistant:";
  return out;
}

}  // namespace

std::string_view ChatTemplateName(ChatTemplate t) {
  const auto i = static_cast<size_t>(t);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

Result<ChatTemplate> ParseChatTemplateName(std::string_view name) {
  for (size_t i = 0; i < std::size(kNames); ++i) {
    if (kNames[i] == name) return static_cast<ChatTemplate>(i);
  }
  std::string msg = "unknown chat template '";
  msg.append(name);
  msg += "' (expected plain, chatml, llama3 or llama2)";
  return Status::InvalidArgument(std::move(msg));
}

ChatTemplate DetectChatTemplate(std::string_view jinja, std::string* warning) {
  auto has = [jinja](std::string_view s) { return jinja.find(s) != std::string_view::npos; };
  ChatTemplate t = ChatTemplate::kPlain;
  if (has("<|im_start|>")) {
    t = ChatTemplate::kChatMl;
  } else if (has("<|start_header_id|>") && has("<|end_header_id|>")) {
    t = ChatTemplate::kLlama3;
  } else if (has("[INST]")) {
    t = ChatTemplate::kLlama2;
  }
  if (warning != nullptr) {
    warning->clear();
    if (t == ChatTemplate::kPlain) {
      *warning = jinja.empty()
                     ? "the model has no chat template (tokenizer.chat_template); using plain "
                       "'role: content' lines"
                     : "unrecognised chat template (tokenizer.chat_template); using plain "
                       "'role: content' lines";
    }
  }
  return t;
}

std::string ApplyChatTemplate(ChatTemplate t, std::span<const ChatMessage> messages,
                              bool add_generation_prompt) {
  switch (t) {
    case ChatTemplate::kChatMl:
      return ChatMl(messages, add_generation_prompt);
    case ChatTemplate::kLlama3:
      return Llama3(messages, add_generation_prompt);
    case ChatTemplate::kLlama2:
      return Llama2(messages);  // a prompt ending in [/INST] already asks for the answer
    case ChatTemplate::kPlain:
      break;
  }
  return Plain(messages, add_generation_prompt);
}

}  // namespace kvtier
