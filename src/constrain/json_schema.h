// JSON Schema -> JsonGrammar (module constrain; see json_matcher.h).
//
// The subset real clients send (OpenAI structured outputs, pydantic, zod): type (one or a list of
// object, array, string, number, integer, boolean, null), properties, required,
// additionalProperties (bool or schema; absent means any), items (one schema), enum, const,
// anyOf / oneOf (oneOf is matched as anyOf), minItems / maxItems, minLength / maxLength, $defs /
// definitions with local $ref ("#", "#/$defs/x", "#/definitions/x", any local JSON pointer),
// recursion included. Annotations (title, description, default, examples, format, $schema, $id,
// $comment, deprecated, readOnly, writeOnly) are ignored. Any other keyword, or a malformed one,
// is InvalidArgument naming the keyword and its JSON-pointer path ("#/properties/age").
// const / enum values are matched in their compact serialization (nlohmann dump).
//
// Thread-safe (pure function).
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "constrain/json_matcher.h"
#include "kvtier/status.h"

namespace kvtier::constrain {

Result<std::shared_ptr<const JsonGrammar>> CompileJsonSchema(const nlohmann::json& schema);

}  // namespace kvtier::constrain
