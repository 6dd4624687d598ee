// Tool calling through the official clients, unmodified (issue 31): the openai client's tools
// with tool_choice auto / required / named, its streaming helper reassembling delta.tool_calls,
// and @anthropic-ai/sdk's tool use (messages.create and messages.stream with input_json_delta).
// The bundled model's template has no tools, so the server runs with --chat-template-file: a
// small ChatML template written here that teaches the Hermes <tool_call> syntax. Forced calls
// (required / named / any / tool) must always parse and validate against the tool's schema.
// Run by src/server/e2e/run.sh (KVTIER_BIN=path/to/kvtier node --test server_e2e_tools.test.mjs).
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";

import { TEST_TIMEOUT_MS, rawRequest, useServer } from "./e2e_util.mjs";

const TEMPLATE = `{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}Tools, one JSON object a line:
{% for t in tools %}{{ t | tojson }}
{% endfor %}To call one, answer <tool_call>{"name": NAME, "arguments": {...}}</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}{% if m.role != 'system' %}<|im_start|>{{ m.role }}
{% if m.content %}{{ m.content }}{% endif %}
{%- for tc in m.tool_calls or [] %}<tool_call>{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}</tool_call>{% endfor %}<|im_end|>
{% endif %}{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}`;

const templatePath = path.join(os.tmpdir(), `kvtier_e2e_tools_${process.pid}.jinja`);
fs.writeFileSync(templatePath, TEMPLATE);
process.on("exit", () => fs.rmSync(templatePath, { force: true }));

const T = { timeout: TEST_TIMEOUT_MS };
let server;
let openai;
let anthropic;
useServer((s, c) => {
  server = s;
  openai = c;
  anthropic = new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0, timeout: TEST_TIMEOUT_MS });
}, ["--chat-template-file", templatePath]);

const weather = {
  type: "object",
  properties: {
    city: { type: "string", maxLength: 12 },
    days: { type: "integer" },
    unit: { enum: ["celsius", "fahrenheit"] },
  },
  required: ["city", "days", "unit"],
  additionalProperties: false,
};
const clock = { type: "object", properties: { zone: { enum: ["UTC", "CET"] } }, required: ["zone"], additionalProperties: false };
const schemas = { get_weather: weather, get_time: clock };
const tools = [
  { type: "function", function: { name: "get_weather", description: "The weather in a city", parameters: weather } },
  { type: "function", function: { name: "get_time", description: "The time in a zone", parameters: clock } },
];
const messages = [
  { role: "system", content: "You answer with tool calls." },
  { role: "user", content: "What will the weather be in Bath for three days?" },
];

// The violations of `schema` (the subset above) by v.
function check(schema, v) {
  const bad = [];
  if (typeof v !== "object" || v === null || Array.isArray(v)) return ["not an object"];
  for (const r of schema.required) if (!(r in v)) bad.push(`missing ${r}`);
  for (const [k, x] of Object.entries(v)) {
    const p = schema.properties[k];
    if (!p) { bad.push(`unexpected ${k}`); continue; }
    if (p.enum && !p.enum.includes(x)) bad.push(`${k} not in enum`);
    if (p.type === "integer" && !Number.isInteger(x)) bad.push(`${k} not an integer`);
    if (p.type === "string" && (typeof x !== "string" || [...x].length > p.maxLength)) bad.push(`${k} bad string`);
  }
  return bad;
}

function assertCall(call, name = null) {
  assert.match(call.id, /^call_/);
  assert.equal(call.type, "function");
  if (name) assert.equal(call.function.name, name);
  assert.ok(call.function.name in schemas, call.function.name);
  assert.equal(typeof call.function.arguments, "string");
  const args = JSON.parse(call.function.arguments);
  assert.deepEqual(check(schemas[call.function.name], args), [], call.function.arguments);
}

test("openai: tool_choice required and named always give calls that parse and validate", T, async () => {
  for (let seed = 0; seed < 4; ++seed) {
    const named = seed % 2 === 1;
    const res = await openai.chat.completions.create({
      model: server.model, messages, tools, seed, temperature: seed === 0 ? 0 : 1, max_tokens: 200,
      tool_choice: named ? { type: "function", function: { name: "get_time" } } : "required",
    });
    const choice = res.choices[0];
    assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(res));
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    assertCall(choice.message.tool_calls[0], named ? "get_time" : null);
  }
});

test("openai: auto answers text or parsed calls; none renders no tools", T, async () => {
  const res = await openai.chat.completions.create({ model: server.model, messages, tools, temperature: 0, max_tokens: 24 });
  const choice = res.choices[0];
  if (choice.finish_reason === "tool_calls") choice.message.tool_calls.forEach((c) => assertCall(c));
  else assert.equal(typeof choice.message.content, "string");
  const none = await openai.chat.completions.create({ model: server.model, messages, tools, tool_choice: "none", temperature: 0, max_tokens: 1 });
  assert.ok(none.usage.prompt_tokens < res.usage.prompt_tokens, "tool_choice none still rendered the tools");
});

test("openai: streamed tool-call deltas reassemble in the client's stream helper", T, async () => {
  const stream = openai.chat.completions.stream({
    model: server.model, messages, tools, tool_choice: "required", seed: 7, max_tokens: 200,
  });
  let deltas = 0;
  stream.on("chunk", (c) => { if (c.choices[0]?.delta?.tool_calls) deltas += 1; });
  const final = await stream.finalChatCompletion();
  const choice = final.choices[0];
  assert.equal(choice.finish_reason, "tool_calls");
  assert.equal(choice.message.tool_calls.length, 1);
  assertCall(choice.message.tool_calls[0]);
  assert.ok(deltas >= 2, `${deltas} tool_calls deltas: the name first, then argument pieces`);
});

test("openai: a conversation with tool calls and results continues", T, async () => {
  const first = await openai.chat.completions.create({ model: server.model, messages, tools, tool_choice: "required", max_tokens: 200 });
  const call = first.choices[0].message.tool_calls[0];
  const history = [...messages, first.choices[0].message,
    { role: "tool", tool_call_id: call.id, content: "Rain, 12 degrees." },
    { role: "user", content: "And the time?" }];
  const next = await openai.chat.completions.create({ model: server.model, messages: history, tools, max_tokens: 8 });
  assert.ok(next.usage.prompt_tokens > first.usage.prompt_tokens);
  // A tool result whose id matches no call is refused, naming the field.
  const bad = [...history];
  bad[3] = { ...bad[3], tool_call_id: "call_nobody" };
  await assert.rejects(openai.chat.completions.create({ model: server.model, messages: bad, tools, max_tokens: 4 }),
    (e) => e.status === 400 && /messages\[3\]\.tool_call_id/.test(e.message));
});

test("openai: malformed tools are 400s naming the field", T, async () => {
  const cases = [
    [{ tools: [{ type: "function", function: { description: "no name" } }] }, "tools[0].function.name"],
    [{ tools: [{ type: "function", function: { name: "f", parameters: "object" } }] }, "tools[0].function.parameters"],
    [{ tools, tool_choice: "sometimes" }, "tool_choice"],
  ];
  for (const [extra, param] of cases) {
    const res = await rawRequest(server, "POST", "/v1/chat/completions",
      JSON.stringify({ model: server.model, messages, max_tokens: 4, ...extra }));
    assert.equal(res.status, 400, res.text);
    assert.equal(res.json.error.param, param, res.text);
  }
});

const anthropicTools = tools.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters }));

test("anthropic: tool_choice any / tool give tool_use blocks; stream's input_json_delta too", T, async () => {
  for (const choice of [{ type: "any" }, { type: "tool", name: "get_weather" }]) {
    const msg = await anthropic.messages.create({
      model: "local", max_tokens: 200, system: "You answer with tool calls.",
      messages: [messages[1]], tools: anthropicTools, tool_choice: choice,
    });
    assert.equal(msg.stop_reason, "tool_use", JSON.stringify(msg));
    const use = msg.content.find((b) => b.type === "tool_use");
    assert.ok(use, JSON.stringify(msg));
    assert.match(use.id, /^toolu_/);
    if (choice.name) assert.equal(use.name, choice.name);
    assert.deepEqual(check(schemas[use.name], use.input), [], JSON.stringify(use.input));
  }
  const stream = anthropic.messages.stream({
    model: "local", max_tokens: 200, messages: [messages[1]], tools: anthropicTools, tool_choice: { type: "any" },
  });
  let partial = "";
  stream.on("inputJson", (delta) => { partial += delta; });
  const final = await stream.finalMessage();
  assert.equal(final.stop_reason, "tool_use");
  const use = final.content.find((b) => b.type === "tool_use");
  assert.ok(use, JSON.stringify(final));
  assert.deepEqual(JSON.parse(partial), use.input);
  assert.deepEqual(check(schemas[use.name], use.input), [], JSON.stringify(use.input));
  // The result goes back as a tool_result block and the conversation continues.
  const next = await anthropic.messages.create({
    model: "local", max_tokens: 8, tools: anthropicTools,
    messages: [messages[1], { role: "assistant", content: final.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "Rain." }] }],
  });
  assert.ok(["end_turn", "max_tokens", "tool_use"].includes(next.stop_reason), next.stop_reason);
});
