// `kvtier serve` structured output with the official openai client, unmodified:
// response_format json_schema (greedy, sampled, streamed) and json_object; every answer is
// parsed and checked against its schema by a small JSON-schema check written here; a bad schema
// and an unknown type are 400s naming the field.
// Run by src/server/e2e/run.sh (KVTIER_BIN=path/to/kvtier node --test server_e2e_json.test.mjs).
import assert from "node:assert/strict";
import { test } from "node:test";

import { TEST_TIMEOUT_MS, assertError, rawRequest, useServer } from "./e2e_util.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
let server;
let openai;
useServer((s, c) => {
  server = s;
  openai = c;
});

// The JSON-schema subset the server compiles, checked independently: the violations found.
function check(schema, v, root = schema, path = "$") {
  if (schema === true || schema === undefined) return [];
  if (schema.$ref) return check(root.$defs[schema.$ref.split("/").pop()], v, root, path);
  const bad = [];
  if (schema.anyOf && !schema.anyOf.some((s) => check(s, v, root, path).length === 0)) {
    return [`${path}: matches no anyOf alternative`];
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) {
    bad.push(`${path}: not in enum`);
  }
  const types = schema.type === undefined ? [] : [].concat(schema.type);
  const typeOf = (x) => x === null ? "null" : Array.isArray(x) ? "array"
    : Number.isInteger(x) ? "integer" : typeof x;
  if (types.length && !types.some((t) => t === typeOf(v) || (t === "number" && typeOf(v) === "integer"))) {
    return [`${path}: expected ${types.join("|")}, got ${typeOf(v)}`];
  }
  if (typeOf(v) === "object") {
    for (const r of schema.required ?? []) if (!(r in v)) bad.push(`${path}: missing ${r}`);
    for (const [k, x] of Object.entries(v)) {
      if (schema.properties && k in schema.properties) bad.push(...check(schema.properties[k], x, root, `${path}.${k}`));
      else if (schema.additionalProperties === false) bad.push(`${path}: unexpected key ${k}`);
    }
  }
  if (typeOf(v) === "array") {
    if (v.length < (schema.minItems ?? 0) || v.length > (schema.maxItems ?? Infinity)) bad.push(`${path}: item count`);
    v.forEach((x, i) => bad.push(...check(schema.items, x, root, `${path}[${i}]`)));
  }
  if (typeOf(v) === "string") {
    const n = [...v].length;
    if (n < (schema.minLength ?? 0) || n > (schema.maxLength ?? Infinity)) bad.push(`${path}: length ${n}`);
  }
  return bad;
}

const character = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 16 },
    age: { type: "integer" },
    temper: { enum: ["calm", "proud", "lively"] },
    sisters: { type: "array", items: { type: "string", maxLength: 10 }, maxItems: 3 },
    married: { type: ["boolean", "null"] },
  },
  required: ["name", "age", "temper", "sisters", "married"],
  additionalProperties: false,
};
const format = { type: "json_schema", json_schema: { name: "character", schema: character, strict: true } };

test("json_schema: greedy and sampled answers parse and validate", T, async () => {
  for (const extra of [{ temperature: 0 }, { temperature: 1, seed: 1 }, { temperature: 1, seed: 2 }]) {
    const r = await openai.chat.completions.create({
      model: server.model, messages: [{ role: "user", content: "Describe Elizabeth Bennet." }],
      max_tokens: 300, response_format: format, ...extra });
    assert.equal(r.choices[0].finish_reason, "stop");
    const v = JSON.parse(r.choices[0].message.content);
    assert.deepEqual(check(character, v), [], r.choices[0].message.content);
  }
});

test("json_schema: a streamed answer parses and validates", T, async () => {
  const stream = await openai.chat.completions.create({
    model: server.model, messages: [{ role: "user", content: "Describe Mr. Bingley." }],
    max_tokens: 300, response_format: format, stream: true, temperature: 0.7, seed: 3 });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
  assert.deepEqual(check(character, JSON.parse(text)), [], text);
});

test("json_object: the answer is an object", T, async () => {
  const r = await openai.chat.completions.create({
    model: server.model, messages: [{ role: "user", content: "Reply in JSON." }], max_tokens: 300,
    temperature: 0, response_format: { type: "json_object" } });
  if (r.choices[0].finish_reason === "stop") {
    const v = JSON.parse(r.choices[0].message.content);
    assert.equal(typeof v, "object");
    assert.ok(v !== null && !Array.isArray(v));
  }
});

test("bad response_format: 400 naming the field", T, async () => {
  const body = (rf) => JSON.stringify({ model: server.model, messages: [{ role: "user", content: "Hi" }],
                                        max_tokens: 4, response_format: rf });
  const post = (b) => rawRequest(server, "POST", "/v1/chat/completions", b);
  assertError(await post(body({ type: "yaml" })), 400, /response_format\.type/, "unknown type");
  assertError(await post(body({ type: "json_schema", json_schema: { name: "x", schema: { type: "object",
    properties: { a: { type: "string", pattern: "^x" } } } } })), 400, /response_format\.json_schema\.schema/,
              "unsupported keyword");
  assertError(await post(body({ type: "json_schema", json_schema: { name: "x", schema: { type: "strng" } } })),
              400, /strng/, "invalid schema");
});
