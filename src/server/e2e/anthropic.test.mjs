// `kvtier serve` through the official @anthropic-ai/sdk npm client, unmodified: the Messages
// API (messages.create, messages.stream, stop_sequences, countTokens), usage from the prefix
// cache on a repeated long system prompt, and errors as Anthropic error objects.
// Run by src/server/e2e/run.sh (KVTIER_BIN=path/to/kvtier node --test anthropic.test.mjs).
import assert from "node:assert/strict";
import { test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";

import { TEST_TIMEOUT_MS, longText, rawRequest, useServer } from "./e2e_util.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
let server;
let anthropic;
useServer((s) => {
  server = s;
  anthropic = new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0, timeout: TEST_TIMEOUT_MS });
});

const QUESTION = "It is a truth universally acknowledged, that a single man in possession";

function request(extra = {}) {
  return {
    model: "local-model",  // clients name their own models; the server answers with its own
    max_tokens: 16,
    temperature: 0,
    system: "You are terse.",
    messages: [{ role: "user", content: QUESTION }],
    ...extra,
  };
}

function textOf(message) {
  assert.ok(Array.isArray(message.content), JSON.stringify(message));
  return message.content.filter((b) => b.type === "text").map((b) => b.text).join("");
}

test("messages.create answers a message; messages.stream's text deltas make the same text", T, async () => {
  const msg = await anthropic.messages.create(request());
  assert.match(msg.id, /^msg_/);
  assert.equal(msg.type, "message");
  assert.equal(msg.role, "assistant");
  assert.equal(msg.model, server.model);
  assert.equal(msg.content.length, 1);
  assert.equal(msg.content[0].type, "text");
  assert.ok(["end_turn", "max_tokens"].includes(msg.stop_reason), msg.stop_reason);
  assert.equal(msg.stop_sequence, null);
  assert.ok(msg.usage.input_tokens + msg.usage.cache_read_input_tokens > 0, JSON.stringify(msg.usage));
  assert.ok(msg.usage.output_tokens > 0 && msg.usage.output_tokens <= 16, JSON.stringify(msg.usage));
  const text = textOf(msg);

  const stream = anthropic.messages.stream(request());
  let deltas = "";
  const events = [];
  stream.on("text", (t) => { deltas += t; });
  stream.on("streamEvent", (e) => events.push(e.type));
  const final = await stream.finalMessage();
  assert.equal(deltas, text, "streamed text deltas differ from the non-streamed (greedy) answer");
  assert.equal(textOf(final), text);
  assert.equal(final.stop_reason, msg.stop_reason);
  assert.equal(final.usage.output_tokens, msg.usage.output_tokens);
  // The client's events (it drops pings) ...
  assert.deepEqual(events.slice(0, 2), ["message_start", "content_block_start"]);
  assert.deepEqual(events.slice(-3), ["content_block_stop", "message_delta", "message_stop"]);
  assert.ok(events.slice(2, -3).every((e) => e === "content_block_delta"), events.join(","));
  // ... and the wire's: `event:` lines naming each `data:` object's type, ping included.
  const raw = await rawRequest(server, "POST", "/v1/messages", JSON.stringify(request({ stream: true })));
  assert.equal(raw.status, 200, raw.text);
  assert.match(raw.headers["content-type"], /^text\/event-stream/);
  let wireText = "";
  const wire = raw.text.trim().split("\n\n").map((ev) => {
    const m = /^event: (\S+)\ndata: (.*)$/s.exec(ev);
    assert.ok(m, `not an SSE event with event: and data: lines: ${JSON.stringify(ev)}`);
    const data = JSON.parse(m[2]);
    assert.equal(data.type, m[1]);
    if (m[1] === "content_block_delta") wireText += data.delta.text;
    return m[1];
  });
  assert.deepEqual(wire.slice(0, 3), ["message_start", "content_block_start", "ping"]);
  // How many deltas carry the text depends on when the engine's tokens reach the writer (it
  // sends what has arrived), so the wire is compared by shape and by its text.
  assert.deepEqual(wire.slice(-3), ["content_block_stop", "message_delta", "message_stop"]);
  assert.ok(wire.slice(3, -3).every((e) => e === "content_block_delta"), wire.join(","));
  assert.equal(wireText, text);
});

test("stop_sequences cut the text and are reported", T, async () => {
  const full = textOf(await anthropic.messages.create(request({ max_tokens: 24 })));
  assert.ok(full.length > 12, full);
  const stop = full.slice(Math.floor(full.length / 2), Math.floor(full.length / 2) + 3);
  const want = full.slice(0, full.indexOf(stop));
  const msg = await anthropic.messages.create(request({ max_tokens: 24, stop_sequences: ["\u0001never", stop] }));
  assert.equal(textOf(msg), want);
  assert.equal(msg.stop_reason, "stop_sequence");
  assert.equal(msg.stop_sequence, stop);
  const final = await anthropic.messages.stream(request({ max_tokens: 24, stop_sequences: [stop] })).finalMessage();
  assert.equal(textOf(final), want);
  assert.equal(final.stop_reason, "stop_sequence");
  assert.equal(final.stop_sequence, stop);
});

test("countTokens counts the prompt that messages.create reads", T, async () => {
  const { max_tokens: _, temperature: __, ...counted } = request();
  const count = await anthropic.messages.countTokens(counted);
  assert.ok(Number.isInteger(count.input_tokens) && count.input_tokens > 10, JSON.stringify(count));
  const msg = await anthropic.messages.create(request({ max_tokens: 1 }));
  const u = msg.usage;
  assert.equal(u.input_tokens + u.cache_read_input_tokens + (u.cache_creation_input_tokens ?? 0), count.input_tokens,
               JSON.stringify(u));
});

test("a repeated long system prompt is read from the prefix cache", T, async () => {
  // ~1200 tokens of the bundled model's tokenizer (context 2048).
  const system = longText("You are the assistant of a lady of quality.", 900);
  const turn = (content) => request({ system, max_tokens: 8, messages: [{ role: "user", content }] });
  const cold = await anthropic.messages.create(turn("Who is Mr. Darcy?"));
  const warm = await anthropic.messages.create(turn("Who is Mr. Bingley?"));
  const total = warm.usage.input_tokens + warm.usage.cache_read_input_tokens;
  assert.ok(total > 900, JSON.stringify(warm.usage));
  assert.ok(warm.usage.cache_read_input_tokens > 900,
            `second turn with the same system prompt: ${JSON.stringify(warm.usage)} (cold: ${JSON.stringify(cold.usage)})`);
  // Streamed too: message_start's usage already tells.
  const stream = anthropic.messages.stream(turn("Who is Mr. Collins?"));
  const final = await stream.finalMessage();
  assert.ok(final.usage.cache_read_input_tokens > 900, JSON.stringify(final.usage));
});

test("bad requests are Anthropic error objects naming the field", T, async () => {
  await assert.rejects(anthropic.messages.create(request({ max_tokens: undefined })), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError, String(e));
    assert.equal(e.status, 400);
    assert.equal(e.error.type, "error");
    assert.equal(e.error.error.type, "invalid_request_error");
    assert.match(e.error.error.message, /max_tokens/);
    return true;
  });
  await assert.rejects(anthropic.messages.create(request({ messages: [{ role: "robot", content: "x" }] })),
                       (e) => e.status === 400 && /messages\[0\]\.role/.test(e.error.error.message));
  await assert.rejects(
    anthropic.messages.create(request({
      messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_x", content: "42" }] }],
    })),
    (e) => e.status === 400 && /tool_use_id/.test(e.error.error.message));
  const raw = await rawRequest(server, "POST", "/v1/messages", JSON.stringify({ model: "m", max_tokens: 4, messages: [] }),
                               { "x-api-key": "k", "anthropic-version": "2023-06-01" });
  assert.equal(raw.status, 400, raw.text);
  assert.equal(raw.json.type, "error");
  assert.match(raw.json.error.message, /messages/);
  // The server serves on.
  const ok = await anthropic.messages.create(request({ max_tokens: 2 }));
  assert.equal(ok.type, "message");
});
