// Serving tool calls: see tool_serve.h.
#include "server/tool_serve.h"

#include <algorithm>

#include "constrain/json_schema.h"

namespace kvtier::server {

bool PrepareToolRequest(const ToolSyntax& syntax, ApiRequest* r, ApiError* e,
                        std::string_view tools_param) {
  if (!r->tools || r->tools->choice == ToolChoice::kAuto) return true;
  auto t = std::make_shared<ToolRequest>(*r->tools);
  t->constrained = true;
  Result<std::shared_ptr<const constrain::JsonGrammar>> g =
      constrain::CompileJsonSchema(ConstrainedSchema(syntax, *t));
  if (!g.ok()) {
    *e = ApiError{};
    e->param = std::string(tools_param);
    e->message = std::string(tools_param) + ": the tool-call grammar: " + g.status().message();
    return false;
  }
  r->json_grammar = *g;
  r->prompt_suffix = ConstrainedPrefix(syntax);
  r->tools = std::move(t);
  return true;
}

std::vector<ToolCallOut> WithIds(const std::vector<ToolCall>& calls, std::string_view prefix) {
  std::vector<ToolCallOut> out;
  out.reserve(calls.size());
  for (const ToolCall& c : calls) out.push_back({NewToolCallId(prefix), c.name, c.arguments});
  return out;
}

std::vector<std::string_view> ArgumentPieces(std::string_view a) {
  std::vector<std::string_view> out;
  const size_t piece = std::max<size_t>(8, (a.size() + 2) / 3);
  for (size_t at = 0; at < a.size();) {
    size_t cut = std::min(a.size(), at + piece);
    while (cut < a.size() && (static_cast<unsigned char>(a[cut]) & 0xC0) == 0x80) ++cut;
    out.push_back(a.substr(at, cut - at));
    at = cut;
  }
  return out;
}

std::string_view ToolFinish(std::string_view finish, bool have_calls) {
  return have_calls && finish == "stop" ? std::string_view("tool_calls") : finish;
}

}  // namespace kvtier::server
