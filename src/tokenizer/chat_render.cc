// ChatRenderer (kvtier/chat_template.h): the model's Jinja chat template, or a built-in family.
#include <utility>

#include "kvtier/chat_template.h"

namespace kvtier {

ChatRenderer ChatRenderer::FromSource(std::string_view source, std::string bos_token,
                                      std::string eos_token) {
  ChatRenderer r;
  r.bos_ = std::move(bos_token);
  r.eos_ = std::move(eos_token);
  r.fallback_ = DetectChatTemplate(source, &r.warning_);
  if (source.empty()) return r;
  Result<jinja::Template> t = jinja::Template::Parse(source);
  if (t.ok()) {
    r.tmpl_ = std::move(*t);
    r.warning_.clear();
  } else {
    r.warning_ = "the model's chat template (tokenizer.chat_template) does not parse (" +
                 t.status().message() + "); using the built-in " +
                 std::string(ChatTemplateName(r.fallback_)) + " format";
  }
  return r;
}

ChatRenderer ChatRenderer::ForTokenizer(const Tokenizer& tok) {
  auto text = [&tok](int32_t id) { return id >= 0 ? tok.TokenText(id) : std::string(); };
  return FromSource(tok.chat_template(), text(tok.bos_id()), text(tok.eos_id()));
}

Result<std::string> ChatRenderer::Render(const ChatRenderInput& in) const {
  if (!tmpl_) {
    std::vector<ChatMessage> msgs;
    for (const jinja::Value& m : in.messages.items()) {
      ChatMessage cm;
      if (const jinja::Value* role = m.Find("role"); role && role->is_string()) cm.role = role->str();
      if (const jinja::Value* c = m.Find("content")) {
        if (c->is_string()) {
          cm.content = c->str();
        } else {
          for (const jinja::Value& part : c->items()) {
            const jinja::Value* t = part.Find("text");
            if (t && t->is_string()) cm.content += t->str();
          }
        }
      }
      msgs.push_back(std::move(cm));
    }
    return ApplyChatTemplate(fallback_, msgs, in.add_generation_prompt);
  }
  std::vector<std::pair<jinja::Value, jinja::Value>> vars;
  for (const auto& [k, v] : in.kwargs.entries()) vars.emplace_back(k, v);
  vars.emplace_back(jinja::Value("messages"), in.messages);
  if (!in.tools.is_undefined()) vars.emplace_back(jinja::Value("tools"), in.tools);
  vars.emplace_back(jinja::Value("add_generation_prompt"), jinja::Value(in.add_generation_prompt));
  vars.emplace_back(jinja::Value("bos_token"), jinja::Value(bos_));
  vars.emplace_back(jinja::Value("eos_token"), jinja::Value(eos_));
  Result<std::string> out = tmpl_->Render(jinja::Value::Dict(std::move(vars)));
  if (!out.ok()) return Status::InvalidArgument("chat template: " + out.status().message());
  return out;
}

Result<std::string> ChatRenderer::Render(std::span<const ChatMessage> messages,
                                         bool add_generation_prompt,
                                         const jinja::Value& kwargs) const {
  ChatRenderInput in;
  std::vector<jinja::Value> list;
  for (const ChatMessage& m : messages) {
    list.push_back(jinja::Value::Dict({{jinja::Value("role"), jinja::Value(m.role)},
                                       {jinja::Value("content"), jinja::Value(m.content)}}));
  }
  in.messages = jinja::Value::List(std::move(list));
  in.kwargs = kwargs;
  in.add_generation_prompt = add_generation_prompt;
  return Render(in);
}

bool ChatRenderer::AddBos(bool add_bos_default, std::string_view text) const {
  if (!add_bos_default) return false;
  return bos_.empty() || text.substr(0, bos_.size()) != bos_;
}

}  // namespace kvtier
