// The OpenAI wire format: request bodies of /v1/chat/completions and /v1/completions parsed into
// plain structs (every bad field named, as OpenAI's own errors do), and the JSON of responses,
// stream chunks and errors. Only src/server knows JSON; these are pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "constrain/json_matcher.h"
#include "kvtier/chat_template.h"
#include "kvtier/sampler.h"

namespace kvtier::server {

struct ToolRequest;  // server/tool_calls.h

enum class Endpoint : uint8_t { kChat = 0, kCompletion = 1 };

// An error as OpenAI reports it: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field ("" -> null)
  std::string code;   // "" -> null
};
std::string ErrorJson(const ApiError& e);

struct ApiRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;                  // "" when not given
  std::vector<ChatMessage> messages;  // chat
  ChatRenderInput chat;               // chat: messages as sent (key order kept), kwargs
  std::string prompt;                 // completions: the prompt text ...
  std::vector<int32_t> prompt_tokens; // ... or token ids (prompt_is_tokens)
  bool prompt_is_tokens = false;
  SamplingParams sampling;            // temperature defaults to 1, as OpenAI's
  bool seeded = false;                // `seed` was given
  std::optional<uint32_t> max_tokens; // max_tokens or max_completion_tokens
  std::vector<std::string> stop;      // at most 4, non-empty
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  // response_format json_object / json_schema (response_format.h); null: free text.
  std::shared_ptr<const constrain::JsonGrammar> json_grammar;
  // chat: the tools offered (tool_calls.h); null when none or tool_choice "none".
  std::shared_ptr<const ToolRequest> tools;
  // Text the server appends to the rendered prompt (a forced tool-call wrapper).
  std::string prompt_suffix;
};

// Parses and validates `body`. On failure returns false and fills *error (400, the field named
// in `param` and the message: expected vs got).
// Bodies nested deeper than kMaxJsonDepth, or with a string longer than kMaxJsonString bytes,
// are refused (400) before they are parsed.
inline constexpr size_t kMaxJsonDepth = 64;
inline constexpr size_t kMaxJsonString = 16u << 20;
bool ParseRequest(Endpoint endpoint, std::string_view body, ApiRequest* out, ApiError* error);
// The same with the server's bound on prompt text: a JSON string longer than `max_prompt_bytes`
// cannot fit the context whatever it holds, so it is refused (413, context_length_exceeded,
// naming `context` tokens) before the parse.
bool ParseRequest(Endpoint endpoint, std::string_view body, ApiRequest* out, ApiError* error,
                  uint64_t max_prompt_bytes, uint32_t context);

// What a finished (or finishing) request reports.
struct CompletionInfo {
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  uint32_t cached_tokens = 0;
};

// The non-streaming response body.
// `reasoning` (chat): message.reasoning_content when not empty.
std::string ResponseJson(Endpoint endpoint, const CompletionInfo& info, std::string_view text,
                         std::string_view finish_reason, std::string_view reasoning = {});
// A parsed tool call as the response carries it (id "call_...", arguments a JSON string).
struct ToolCallOut {
  std::string id, name, arguments;
};
// The chat response with message.tool_calls (content null when `text` is empty).
std::string ResponseJson(const CompletionInfo& info, std::string_view text,
                         std::string_view finish_reason, std::string_view reasoning,
                         const std::vector<ToolCallOut>& calls);
// A chat chunk whose delta carries one tool call's piece: the first of a call names index, id,
// type and function.name (arguments ""), later ones only index and an arguments piece.
std::string ToolCallChunkJson(const CompletionInfo& info, size_t index, const ToolCallOut* head,
                              std::string_view arguments_piece);

// One stream chunk ("data: " and the blank line not included). `role` adds the assistant role
// to a chat delta (the first chunk); `finish_reason` empty: null.
// `reasoning` (chat): delta.reasoning_content when not empty.
std::string ChunkJson(Endpoint endpoint, const CompletionInfo& info, std::string_view text,
                      bool role, std::string_view finish_reason, std::string_view reasoning = {});
// The last chunk of a stream with stream_options.include_usage: no choices, the usage.
std::string UsageChunkJson(Endpoint endpoint, const CompletionInfo& info);

// /v1/models.
std::string ModelsJson(std::string_view model_id, int64_t created);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool IsValidUtf8(std::string_view s);

}  // namespace kvtier::server
