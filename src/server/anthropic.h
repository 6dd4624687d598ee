// The Anthropic Messages wire format (POST /v1/messages, /v1/messages/count_tokens): request
// bodies parsed and validated into the chat request the OpenAI path serves (server/openai.h),
// every bad field named; the JSON of messages, of the stream's events and of errors
// ({"type":"error","error":{"type","message"}}). Only src/server knows JSON; these are pure
// functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "server/openai.h"

namespace kvtier::server {

// A parsed /v1/messages (or count_tokens) request.
struct MessagesRequest {
  // endpoint kChat: `system` first (its text blocks joined by "\n"), then user / assistant
  // messages (text blocks concatenated); sampling (temperature defaults to 1, as Anthropic's),
  // max_tokens, stop (stop_sequences), stream. `model` is any string (clients name their own
  // models); the server answers with its own.
  ApiRequest chat;
  // Where tools were used ("tools", "messages[2].content[0]", ...; "" when nowhere): then
  // chat.chat holds the template's messages and tools (anthropic_tools.h).
  std::string tools_param;
};

inline constexpr size_t kMaxStopSequences = 64;

// Parses and validates `body`. count_tokens: max_tokens is not required. On failure returns
// false and fills *error (400 naming the field in `param` and the message; 413 for a body
// string longer than `max_prompt_bytes`, which cannot fit `context` tokens).
bool ParseMessagesRequest(std::string_view body, bool count_tokens, MessagesRequest* out,
                          ApiError* error, uint64_t max_prompt_bytes, uint32_t context);

// Anthropic's error type for an HTTP status (invalid_request_error, not_found_error,
// request_too_large, overloaded_error, api_error, ...).
const char* AnthropicErrorType(int status);
// {"type":"error","error":{"type":...,"message":...}}.
std::string AnthropicErrorJson(const ApiError& e);

// Anthropic's stop_reason for a Generation's finish: "stop" with a stop string: stop_sequence;
// "stop": end_turn; "length": max_tokens.
std::string_view StopReason(std::string_view finish_reason, std::string_view stop_sequence);

// The non-streaming message: content [{type:text, text}], stop_reason, stop_sequence and usage
// (input_tokens: prompt tokens not read from the prefix cache; cache_read_input_tokens: those
// read from it; cache_creation_input_tokens: 0). info.id is "msg_...".
std::string MessageJson(const CompletionInfo& info, std::string_view text,
                        std::string_view stop_reason, std::string_view stop_sequence);
std::string CountTokensJson(uint32_t input_tokens);

// One server-sent event: "event: <name>\ndata: <json>\n\n".
std::string SseEvent(std::string_view name, const std::string& data);
// The stream, in order: message_start, content_block_start, ping, content_block_delta
// (text_delta)..., content_block_stop, message_delta (stop_reason, usage), message_stop; or an
// error event.
std::string MessageStartEvent(const CompletionInfo& info);
std::string ContentBlockStartEvent();
std::string PingEvent();
std::string TextDeltaEvent(std::string_view text);
std::string ContentBlockStopEvent();
std::string MessageDeltaEvent(const CompletionInfo& info, std::string_view stop_reason,
                              std::string_view stop_sequence);
std::string MessageStopEvent();
std::string ErrorEvent(const ApiError& e);

}  // namespace kvtier::server
