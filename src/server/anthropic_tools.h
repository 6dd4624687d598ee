// Anthropic tool use on /v1/messages (issue 31): `tools` (name, description, input_schema),
// `tool_choice` ({type: auto | any | tool | none}), assistant `tool_use` and user `tool_result`
// blocks mapped to what the chat template knows (OpenAI-shaped tool_calls and role "tool"
// messages, as transformers passes them); the answer's tool calls as `tool_use` content blocks
// (id "toolu_...", name, input object), stop_reason "tool_use", and the stream's
// content_block_start (tool_use) / input_json_delta / content_block_stop events.
// Pure functions, thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/anthropic.h"
#include "server/tool_calls.h"

namespace kvtier::server {

// For a request that uses tools anywhere (r->tools_param set; ParseMessagesRequest validated
// the shapes): fills r->chat.chat (the template's messages and tools) and r->chat.tools (null
// with tool_choice none). A final text-only assistant message stays out of the template's
// messages (it is the prefill, which the handler appends). 400 naming the field otherwise.
bool AnthropicToolChat(const nlohmann::json& body, MessagesRequest* r, ApiError* e);

// The message with `calls` as tool_use blocks after the text (the text block left out when
// empty); stop_reason "tool_use" when there are calls.
std::string ToolUseMessageJson(const CompletionInfo& info, std::string_view text,
                               std::string_view stop_reason, std::string_view stop_sequence,
                               const std::vector<ToolCallOut>& calls);

// Stream events of content block `index`.
std::string ToolUseBlockStartEvent(size_t index, const ToolCallOut& call);
std::string InputJsonDeltaEvent(size_t index, std::string_view partial_json);
std::string BlockStopEvent(size_t index);

}  // namespace kvtier::server
