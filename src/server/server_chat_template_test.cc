// The model's own Jinja chat template in /v1/chat/completions (issue 31): the prompt is the
// template's text (its BOS written once, not twice), chat_template_kwargs reach the template
// (enable_thinking), and a template that raises is a 400 naming its message, after which the
// server keeps serving and no KV block stays taken.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "kvtier/test_model.h"
#include "server/server_test_util.h"
#include "test_model/test_model_test_util.h"

namespace kvtier {
namespace {

using nlohmann::json;

constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}"
    "{% if m.content == 'raise please' %}{{ raise_exception('the template refuses: ' ~ m.content) }}{% endif %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}";

// The model at `path` served in process on a free port.
struct Served : testing::ModelFileServer {
  explicit Served(const std::string& path) : ModelFileServer(path, "templated") {}
  httplib::Result Post(const json& body) const {
    return PostJson("/v1/chat/completions", body);
  }
};

TEST(ServerChatTemplate, RendersTheModelsTemplateWithKwargsAndA400WhenItRaises) {
  const std::string path = "/tmp/kvtier_server_chat_template_" + std::to_string(::getpid()) + ".gguf";
  {
    Result<GgufWriter> w = BuildTestModel(testing::TinyF32ModelConfig());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    w->SetString("tokenizer.chat_template", kTemplate);
    ASSERT_TRUE(w->WriteFile(path).ok());
  }
  Served s(path);
  const Tokenizer& tok = *s.tokenizer;
  const std::string bos = tok.TokenText(tok.bos_id());
  ASSERT_TRUE(tok.add_bos_default());  // the llama test model adds BOS: the template's counts
  auto prompt_tokens = [&](const json& body) -> int64_t {
    httplib::Result r = s.Post(body);
    EXPECT_TRUE(r);
    if (!r) return -1;
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body)["usage"]["prompt_tokens"].get<int64_t>();
  };
  json body{{"max_tokens", 1}, {"temperature", 0},
            {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  // The template's text, BOS included once.
  const std::string text = bos + "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(prompt_tokens(body), static_cast<int64_t>(tok.Encode(text, false, true).size()));

  // chat_template_kwargs reach the template.
  json off = body;
  off["chat_template_kwargs"] = {{"enable_thinking", false}};
  EXPECT_EQ(prompt_tokens(off),
            static_cast<int64_t>(tok.Encode(text + "<think></think>", false, true).size()));
  json on = body;
  on["chat_template_kwargs"] = {{"enable_thinking", true}};
  EXPECT_EQ(prompt_tokens(on), static_cast<int64_t>(tok.Encode(text, false, true).size()));
  json bad_kwargs = body;
  bad_kwargs["chat_template_kwargs"] = "enable_thinking";
  httplib::Result r = s.Post(bad_kwargs);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "chat_template_kwargs") << r->body;

  // A template that raises: 400 naming its message and where.
  json raising = body;
  raising["messages"].push_back({{"role", "assistant"}, {"content", "ok"}});
  raising["messages"].push_back({{"role", "user"}, {"content", "raise please"}});
  r = s.Post(raising);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const json e = json::parse(r->body);
  EXPECT_EQ(e["error"]["param"], "messages") << r->body;
  const std::string msg = e["error"]["message"];
  EXPECT_NE(msg.find("the template refuses: raise please"), std::string::npos) << msg;
  EXPECT_NE(msg.find("template:1:"), std::string::npos) << msg;

  // Still serving; nothing left taken in the pool (the prefix cache is off).
  EXPECT_GT(prompt_tokens(body), 0);
  EXPECT_EQ(s.pool->TotalRefs(), 0u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvtier
