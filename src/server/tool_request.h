// The tool fields of an OpenAI /v1/chat/completions body (issue 31): `tools`, `tool_choice`,
// `parallel_tool_calls`, and the history's assistant `tool_calls` / `role: tool` messages.
// Every bad field is a 400 naming it (tools[1].function.name, messages[3].tool_call_id, ...).
// With a forced call (tool_choice required / named) each forced tool's `parameters` schema is
// compiled (constrain/json_schema.h), and one the compiler refuses is a 400 naming it; with
// auto the schemas are only rendered for the model. Pure functions, thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "kvtier/jinja.h"
#include "server/openai.h"
#include "server/tool_calls.h"

namespace kvtier::server {

// Parses tools / tool_choice / parallel_tool_calls into r->tools (null when there are no tools
// or tool_choice is "none": then nothing is rendered or parsed).
bool ParseOpenAiTools(const nlohmann::json& body, ApiRequest* r, ApiError* e);

// Checks the history's tool_calls (array of {id, type: "function", function: {name,
// arguments: a string}}) and that every tool message's tool_call_id names an earlier call.
bool CheckToolHistory(const nlohmann::json& messages, ApiError* e);

// The message as the template sees it: each tool_calls[i].function.arguments string that holds
// a JSON object becomes that object (templates write it with `| tojson`, as vLLM and
// llama-server pass it).
jinja::Value TemplateMessage(const jinja::Value& message);

}  // namespace kvtier::server
