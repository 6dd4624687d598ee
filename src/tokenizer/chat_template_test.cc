// Chat templates: recognition from Jinja source and the exact prompt text of each family.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvtier/chat_template.h"
#include "kvtier/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace kvtier {
namespace {

const std::vector<ChatMessage> kChat = {
    {"system", "You are terse."},
    {"user", "Hi"},
    {"assistant", "Hello."},
    {"user", "2+2?"},
};

TEST(ChatTemplate, Detect) {
  std::string w = "stale";
  EXPECT_EQ(DetectChatTemplate(
                "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
                &w),
            ChatTemplate::kChatMl);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(DetectChatTemplate("{{ '<|start_header_id|>' + message['role'] + "
                               "'<|end_header_id|>\\n\\n' }}",
                               &w),
            ChatTemplate::kLlama3);
  EXPECT_EQ(DetectChatTemplate("{{ bos_token + '[INST] ' + content + ' [/INST]' }}", &w),
            ChatTemplate::kLlama2);
  EXPECT_EQ(DetectChatTemplate("", &w), ChatTemplate::kPlain);
  EXPECT_NE(w.find("no chat template"), std::string::npos);
  EXPECT_EQ(DetectChatTemplate("{{ '<start_of_turn>' }}", &w), ChatTemplate::kPlain);
  EXPECT_NE(w.find("unrecognised"), std::string::npos);
  EXPECT_EQ(DetectChatTemplate("{{ x }}", nullptr), ChatTemplate::kPlain);
}

TEST(ChatTemplate, Names) {
  for (auto t : {ChatTemplate::kPlain, ChatTemplate::kChatMl, ChatTemplate::kLlama3,
                 ChatTemplate::kLlama2}) {
    auto p = ParseChatTemplateName(ChatTemplateName(t));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, t);
  }
  EXPECT_FALSE(ParseChatTemplateName("jinja").ok());
}

TEST(ChatTemplate, ChatMl) {
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kChatMl, kChat, true),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kChatMl, std::span(kChat).subspan(1, 1), false),
            "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Llama3) {
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kLlama3, kChat, true),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama2) {
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kLlama2, kChat, true),
            "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. </s>"
            "<s>[INST] 2+2? [/INST]");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kLlama2, std::span(kChat).subspan(1, 1), true),
            "[INST] Hi [/INST]");
}

TEST(ChatTemplate, PlainFallback) {
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kPlain, std::span(kChat).subspan(0, 2), true),
            "system: You are terse.\nuser: Hi\nassistant:");
}

// The ChatML prompt encodes its markers as single special tokens.
TEST(ChatTemplate, MarkersEncodeAsSpecialTokens) {
  auto tok = Tokenizer::FromVocab(testing_tok::SmallBpeVocab("qwen2"));
  ASSERT_TRUE(tok.ok());
  const std::string prompt =
      ApplyChatTemplate(ChatTemplate::kChatMl, std::span(kChat).subspan(1, 1), true);
  const auto ids = (*tok)->Encode(prompt, false);
  const int32_t start = (*tok)->FindToken("<|im_start|>");
  const int32_t end = (*tok)->FindToken("<|im_end|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), start), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), end), 1);
  EXPECT_EQ((*tok)->Decode(ids, /*render_special=*/true), prompt);
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

TEST(ChatRenderer, RunsTheModelsTemplateWithKwargsAndFallsBack) {
  const ChatRenderer r = ChatRenderer::FromSource(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% if enable_thinking %}<think>{% endif %}{% endif %}",
      "<s>", "</s>");
  ASSERT_TRUE(r.uses_jinja());
  EXPECT_EQ(r.warning(), "");
  const ChatMessage msgs[] = {{"system", "S"}, {"user", "U"}};
  EXPECT_EQ(*r.Render(msgs, true), "<s>[system]S[user]U[assistant]");
  const jinja::Value kwargs = jinja::Value::Dict({{jinja::Value("enable_thinking"), jinja::Value(true)}});
  EXPECT_EQ(*r.Render(msgs, false, kwargs), "<s>[system]S[user]U");
  EXPECT_EQ(*r.Render(msgs, true, kwargs), "<s>[system]S[user]U[assistant]<think>");
  // The template wrote the BOS: Encode must not add a second.
  EXPECT_FALSE(r.AddBos(true, "<s>[user]U"));
  EXPECT_TRUE(r.AddBos(true, "[user]U"));
  EXPECT_FALSE(r.AddBos(false, "[user]U"));

  const ChatRenderer raising = ChatRenderer::FromSource(
      "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not "
      "supported') }}{% endif %}{% endfor %}<|im_start|>",
      "", "");
  Result<std::string> e = raising.Render(msgs, true);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.status().message(), "chat template: template:1:54: System role not supported");

  // No template, or one that does not parse: the built-in family, with a warning.
  const ChatRenderer none = ChatRenderer::FromSource("", "", "");
  EXPECT_FALSE(none.uses_jinja());
  EXPECT_NE(none.warning(), "");
  EXPECT_EQ(*none.Render(msgs, true), ApplyChatTemplate(ChatTemplate::kPlain, msgs, true));
  const ChatRenderer broken = ChatRenderer::FromSource("<|im_start|>{% for m in messages %}", "", "");
  EXPECT_FALSE(broken.uses_jinja());
  EXPECT_EQ(broken.fallback(), ChatTemplate::kChatMl);
  EXPECT_NE(broken.warning().find("does not parse"), std::string::npos) << broken.warning();
  EXPECT_EQ(*broken.Render(msgs, true), ApplyChatTemplate(ChatTemplate::kChatMl, msgs, true));
}

}  // namespace
}  // namespace kvtier
