// The checks every JSON request body gets before its fields are read, shared by the OpenAI
// (openai.cc) and Anthropic (anthropic.cc) parsers: well-formed UTF-8, nesting at most
// kMaxJsonDepth, no string longer than kMaxJsonString bytes (nor than `max_prompt_bytes`: 413,
// context_length_exceeded, naming `context` tokens), valid JSON (the error names line and
// column), and an object at the top. Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "server/openai.h"

namespace kvtier::server {

// On success *out holds the parsed object; otherwise false with *error filled (400 or 413).
bool ParseJsonBody(std::string_view body, nlohmann::json* out, ApiError* error,
                   uint64_t max_prompt_bytes, uint32_t context);

// "a string", "an integer", ...: a JSON value's type as error messages name it.
const char* JsonTypeName(const nlohmann::json& v);

}  // namespace kvtier::server
