// Serving tool calls (issue 31), shared by /v1/chat/completions and /v1/messages: the
// constrained call for tool_choice required / named (the call's opening wrapper forced at the
// prompt's end, a JSON grammar of the call object from the tools' parameter schemas), and the
// parsed calls given ids. Pure functions, thread-safe.
#pragma once

#include <string_view>
#include <vector>

#include "server/openai.h"
#include "server/tool_calls.h"

namespace kvtier::server {

// For r->tools with choice required / named: sets r->prompt_suffix, r->json_grammar and marks
// r->tools constrained. 400 naming `tools_param` when the combined grammar cannot be built.
bool PrepareToolRequest(const ToolSyntax& syntax, ApiRequest* r, ApiError* e,
                        std::string_view tools_param = "tools");

// Calls with fresh ids (`prefix`: "call_" or "toolu_").
std::vector<ToolCallOut> WithIds(const std::vector<ToolCall>& calls, std::string_view prefix);

// A call's arguments in about three streamed pieces (at least 8 bytes each), cut on UTF-8
// character boundaries.
std::vector<std::string_view> ArgumentPieces(std::string_view arguments);

// The finish reason once calls were parsed: "tool_calls" instead of "stop".
std::string_view ToolFinish(std::string_view finish, bool have_calls);

}  // namespace kvtier::server
