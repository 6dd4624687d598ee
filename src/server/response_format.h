// OpenAI's `response_format` for /v1/chat/completions and /v1/completions:
// {"type":"text"}, {"type":"json_object"}, {"type":"json_schema","json_schema":{"name":...,
// "schema":{...},"strict":...}}, compiled to a constrain::JsonGrammar (null: free text). Bad
// shapes and invalid or unsupported schemas are 400s naming the field. Pure functions,
// thread-safe.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "constrain/json_matcher.h"
#include "server/openai.h"

namespace kvtier::server {

// Parses body["response_format"] into r->json_grammar; false with *e set on a bad one.
bool ParseResponseFormat(const nlohmann::json& body, ApiRequest* r, ApiError* e);

}  // namespace kvtier::server
