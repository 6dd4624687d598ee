// `kvtier serve` under bad input: every bad request gets its HTTP status and an OpenAI error
// ({"error":{"message","type","param","code"}}) naming the problem, and the server still answers
// a normal request afterwards. Plain HTTP for what the openai client would refuse to send.
// Run by src/server/e2e/run.sh (KVTIER_BIN=path/to/kvtier node --test server_e2e_errors.test.mjs).
import assert from "node:assert/strict";
import http from "node:http";
import { afterEach, test } from "node:test";

import OpenAI from "openai";

import {
  TEST_TIMEOUT_MS, assertError, client, collectStream, longText, metrics, rawRequest, useServer,
} from "./e2e_util.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
let server;
let openai;
useServer((s, c) => {
  server = s;
  openai = c;
});

// After every test: the server still serves a normal request.
afterEach(async () => {
  const r = await openai.chat.completions.create({
    model: server.model, messages: [{ role: "user", content: "Are you well?" }], temperature: 0, max_tokens: 4 });
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 4);
}, T);

const chatBody = (extra = {}) => JSON.stringify({
  model: server.model, messages: [{ role: "user", content: "Hello" }], max_tokens: 4, ...extra });
const post = (path, body, headers) => rawRequest(server, "POST", path, body, headers);

test("malformed JSON: 400", T, async () => {
  const r = await post("/v1/chat/completions", '{"model": "x", "messages": [{"role": "user", "content": "Hi"}');
  assertError(r, 400, /json|pars/i, "malformed JSON");
  const r2 = await post("/v1/completions", "not json at all");
  assertError(r2, 400, /json|pars/i, "malformed JSON (completions)");
});

test("wrong types: 400 naming the field", T, async () => {
  assertError(await post("/v1/chat/completions", chatBody({ max_tokens: "ten" })), 400, /max_tokens/,
              "max_tokens: \"ten\"");
  assertError(await post("/v1/chat/completions", chatBody({ temperature: "hot" })), 400, /temperature/,
              "temperature: \"hot\"");
  assertError(await post("/v1/chat/completions", chatBody({ messages: "Hello" })), 400, /messages/,
              "messages: \"Hello\"");
  assertError(await post("/v1/chat/completions", chatBody({ messages: [{ role: "user", content: 42 }] })), 400,
              /content|messages/, "content: 42");
  assertError(await post("/v1/completions", JSON.stringify({ model: server.model, prompt: 42, max_tokens: 4 })),
              400, /prompt/, "prompt: 42");
  assertError(await post("/v1/chat/completions", "[1, 2, 3]"), 400, null, "a JSON array body");
});

test("missing messages / prompt: 400", T, async () => {
  assertError(await post("/v1/chat/completions", JSON.stringify({ model: server.model, max_tokens: 4 })), 400,
              /messages/, "no messages");
  assertError(await post("/v1/completions", JSON.stringify({ model: server.model, max_tokens: 4 })), 400,
              /prompt/, "no prompt");
});

test("invalid UTF-8 in a content string: 400", T, async () => {
  const body = Buffer.concat([
    Buffer.from(`{"model": ${JSON.stringify(server.model)}, "messages": [{"role": "user", "content": "ab`),
    Buffer.from([0xc3, 0x28]),
    Buffer.from('cd"}], "max_tokens": 4}'),
  ]);
  assertError(await post("/v1/chat/completions", body), 400, /utf-?8/i, "invalid UTF-8");
});

test("unknown model: 404", T, async () => {
  assertError(await post("/v1/chat/completions", chatBody({ model: "no-such-model" })), 404, /model/i,
              "unknown model");
  // The same through the client: a NotFoundError.
  await assert.rejects(
    openai.completions.create({ model: "no-such-model", prompt: "Hi", max_tokens: 4 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && /model/i.test(e.message));
});

test("a prompt longer than the context: 413 or 400 naming the context length", T, async () => {
  const prompt = longText("Too long.", 2600);  // ~3000+ tokens; the context is 2048
  for (const [path, body] of [
    ["/v1/completions", JSON.stringify({ model: server.model, prompt, max_tokens: 4 })],
    ["/v1/chat/completions", chatBody({ messages: [{ role: "user", content: prompt }] })],
  ]) {
    const r = await post(path, body);
    assert.ok(r.status === 413 || r.status === 400, `${path}: status ${r.status}: ${r.text.slice(0, 300)}`);
    assertError(r, r.status, /context|2048/i, `${path}: prompt past the context`);
  }
});

test("max_tokens 0: 400", T, async () => {
  assertError(await post("/v1/chat/completions", chatBody({ max_tokens: 0 })), 400, /max_tokens/, "max_tokens 0");
  assertError(await post("/v1/chat/completions", chatBody({ max_tokens: -3 })), 400, /max_tokens/, "max_tokens -3");
});

test("huge max_tokens: 400, or clamped to the context and finished", { timeout: 90_000 }, async () => {
  // A long prompt leaves little room, so a clamped request finishes quickly.
  const prompt = longText("Clamp me.", 1500);
  const r = await post("/v1/completions", JSON.stringify(
    { model: server.model, prompt, max_tokens: 1e9, temperature: 0 }));
  if (r.status === 400) {
    assertError(r, 400, /max_tokens|context/, "max_tokens 1e9");
    return;
  }
  assert.equal(r.status, 200, r.text.slice(0, 300));
  const u = r.json.usage;
  assert.equal(r.json.choices[0].finish_reason, "length");
  assert.ok(u.prompt_tokens + u.completion_tokens <= 2048, JSON.stringify(u));
  assert.ok(u.completion_tokens > 0, JSON.stringify(u));
});

// POSTs `size` bytes of "a" (with a content-length, or chunked when `chunked`) and resolves the
// status of the first answer, which may come before the body is all sent (the rest is then not
// sent), or "error CODE" when the connection fails before any answer.
function postHuge(path, size, chunked) {
  const chunk = Buffer.alloc(1024 * 1024, "a");
  return new Promise((resolve) => {
    let settled = false;
    const headers = { "content-type": "application/json" };
    if (!chunked) headers["content-length"] = size;
    const req = http.request({ host: "127.0.0.1", port: server.port, method: "POST", path, headers }, (res) => {
      settled = true;
      res.resume();
      resolve(res.statusCode);
      req.destroy();  // stop sending the rest
    });
    req.on("error", (e) => {
      if (!settled) { settled = true; resolve(`error ${e.code ?? e.message}`); }
    });
    req.setTimeout(60_000, () => req.destroy(new Error(`no answer to a ${size}-byte body in 60 s`)));
    let sent = 0;
    const write = () => {
      while (!settled && sent < size) {
        sent += chunk.length;
        if (!req.write(chunk)) { req.once("drain", write); return; }
      }
      if (!settled && sent >= size) req.end();
    };
    write();
  });
}

test("a 100 MB body: 413, and the server still serves", T, async () => {
  assert.equal(await postHuge("/v1/chat/completions", 100 * 1024 * 1024, false), 413);
});

// cpp-httplib 0.11.4 applies set_payload_max_length to content-length bodies only: the server
// reads completion bodies itself and stops at --max-body-mb, chunked or not.
test("a 100 MB chunked body (no content-length): 413 before buffering it all", T, async () => {
  const status = await postHuge("/v1/completions", 100 * 1024 * 1024, true);
  assert.ok(status === 413 || status === 411 || /^error (ECONNRESET|EPIPE)/.test(String(status)),
            `a 100 MB chunked body got ${status}`);
});

test("unknown route: 404", T, async () => {
  const r = await rawRequest(server, "GET", "/v1/no-such-route");
  assert.equal(r.status, 404, r.text);
  const r2 = await post("/v2/chat/completions", chatBody());
  assert.equal(r2.status, 404, r2.text);
});

test("a client that disconnects mid-stream: the server cancels and keeps serving", T, async () => {
  const before = (await metrics(server)).value("kvtier_requests_cancelled_total");
  const ac = new AbortController();
  const stream = await openai.chat.completions.create(
    { model: server.model, messages: [{ role: "user", content: "Tell me a very long story." }], temperature: 0,
      max_tokens: 1500, stream: true }, { signal: ac.signal });
  let chunks = 0;
  try {
    for await (const chunk of stream) {
      if (chunk.choices?.[0]?.delta?.content) chunks++;
      if (chunks === 2) ac.abort();  // the client's stream then ends (or throws an abort error)
      assert.ok(chunks <= 2 || ac.signal.aborted, "the stream went on after the abort");
      if (chunk.choices?.[0]?.finish_reason) assert.fail("a 1500-token stream finished before the abort");
    }
  } catch (e) {
    if (!(e instanceof OpenAI.APIUserAbortError || e.name === "AbortError")) throw e;
  }
  assert.ok(ac.signal.aborted && chunks >= 2, `${chunks} chunks before the stream ended`);

  const m = await metrics(server);
  assert.ok(m.text.includes("# TYPE"));
  const stats = await rawRequest(server, "GET", "/v1/cache/stats");
  assert.equal(stats.status, 200);
  if (before !== undefined) {
    // The server notices the disconnect on its next write: give it a moment.
    let now = m.value("kvtier_requests_cancelled_total");
    for (let i = 0; i < 100 && now <= before; i++) {
      await new Promise((r) => setTimeout(r, 100));
      now = (await metrics(server)).value("kvtier_requests_cancelled_total");
    }
    assert.ok(now > before, `kvtier_requests_cancelled_total stayed ${before}`);
  }
  // The engine stops generating for the client that left (1500 tokens would take much longer).
  let running = (await metrics(server)).value("kvtier_requests_running");
  for (let i = 0; i < 100 && running > 0; i++) {
    await new Promise((r) => setTimeout(r, 100));
    running = (await metrics(server)).value("kvtier_requests_running");
  }
  assert.ok(running === undefined || running === 0, `kvtier_requests_running is ${running} 10 s after the abort`);
  const s = await collectStream(await openai.chat.completions.create(
    { model: server.model, messages: [{ role: "user", content: "And now?" }], temperature: 0, max_tokens: 8,
      stream: true }), "chat");
  assert.equal(s.lastFinishReason, "length");
});
