// `kvtier serve` through the official openai npm client: models, chat and completions (streamed
// and not), stop strings, seeds, and the operational endpoints. The bundled model writes
// English-ish nonsense: only determinism, lengths and the protocol are asserted.
// Run by src/server/e2e/run.sh (KVTIER_BIN=path/to/kvtier node --test server_e2e.test.mjs).
import assert from "node:assert/strict";
import { test } from "node:test";

import { TEST_TIMEOUT_MS, collectStream, getJson, rawRequest, useServer } from "./e2e_util.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
let server;
let openai;
useServer((s, c) => {
  server = s;
  openai = c;
});

const CHAT = [
  { role: "system", content: "You are a letter writer of the last century." },
  { role: "user", content: "Write to your sister about the ball at Netherfield." },
];

function chatRequest(extra = {}) {
  return { model: server.model, messages: CHAT, temperature: 0, max_tokens: 16, ...extra };
}

test("GET /v1/models lists the served model", T, async () => {
  const ids = [];
  for await (const m of openai.models.list()) ids.push(m.id);
  assert.ok(ids.includes(server.model), `models ${JSON.stringify(ids)} lack ${server.model}`);
  const m = await openai.models.retrieve(server.model).catch(() => null);
  if (m) assert.equal(m.id, server.model);  // GET /v1/models/{id} is optional
});

let chatText;

test("chat completion, greedy, non-streaming, is deterministic", T, async () => {
  const r = await openai.chat.completions.create(chatRequest());
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.finish_reason, "length");
  assert.equal(c.message.role, "assistant");
  assert.equal(typeof c.message.content, "string");
  assert.ok(c.message.content.length > 0, "empty content");
  assert.equal(r.usage.completion_tokens, 16);
  assert.ok(r.usage.prompt_tokens > 0, `prompt_tokens ${r.usage.prompt_tokens}`);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  chatText = c.message.content;

  const again = await openai.chat.completions.create(chatRequest());
  assert.equal(again.choices[0].message.content, chatText, "greedy decoding differs between two runs");
  assert.equal(again.choices[0].finish_reason, "length");
});

test("chat completion, streamed, equals the non-streamed answer", T, async () => {
  assert.ok(chatText !== undefined, "needs the non-streaming test");
  const stream = await openai.chat.completions.create(
    chatRequest({ stream: true, stream_options: { include_usage: true } }));
  let role = null;
  let text = "";
  let last = null;
  let usage = null;
  let n = 0;
  for await (const chunk of stream) {
    n++;
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices || chunk.choices.length === 0) continue;
    last = chunk;
    const d = chunk.choices[0].delta ?? {};
    if (d.role) role = d.role;
    if (typeof d.content === "string") text += d.content;
  }
  assert.ok(n >= 2, `only ${n} chunks`);
  assert.equal(role, "assistant");
  assert.equal(text, chatText);
  assert.ok(last, "no chunk with choices");
  assert.equal(last.choices[0].finish_reason, "length", "the last chunk with choices has the finish_reason");
  assert.ok(usage, "no usage chunk (stream_options.include_usage)");
  assert.equal(usage.completion_tokens, 16);
  assert.ok(usage.prompt_tokens > 0);
});

const PROMPT = "It was a fine morning in Hertfordshire, and Elizabeth";

test("completions API, greedy, streamed and not, agree", T, async () => {
  const req = { model: server.model, prompt: PROMPT, temperature: 0, max_tokens: 16 };
  const r = await openai.completions.create(req);
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(typeof r.choices[0].text, "string");
  assert.ok(r.choices[0].text.length > 0, "empty text");
  assert.equal(r.usage.completion_tokens, 16);
  assert.ok(r.usage.prompt_tokens > 0);
  const text = r.choices[0].text;

  const r2 = await openai.completions.create(req);
  assert.equal(r2.choices[0].text, text, "greedy decoding differs between two runs");

  const s = await collectStream(
    await openai.completions.create({ ...req, stream: true, stream_options: { include_usage: true } }),
    "completion");
  assert.equal(s.text, text);
  assert.equal(s.lastFinishReason, "length");
  assert.ok(s.usage, "no usage chunk");
  assert.equal(s.usage.completion_tokens, 16);
  assert.equal(s.usage.prompt_tokens, r.usage.prompt_tokens);
});

test("the SSE wire format: text/event-stream, data: lines, [DONE] last", T, async () => {
  const res = await fetch(`${server.baseURL}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(chatRequest({ max_tokens: 4, stream: true })),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/event-stream/);
  const body = await res.text();
  const events = body.split("\n\n").filter((e) => e.trim().length > 0);
  assert.ok(events.length >= 3, body);
  for (const e of events) assert.ok(e.startsWith("data: "), `not a data event: ${JSON.stringify(e)}`);
  assert.equal(events.at(-1).trim(), "data: [DONE]");
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice("data: ".length)));
  const ids = new Set(chunks.map((c) => c.id));
  assert.equal(ids.size, 1, "every chunk of a stream has the same id");
  assert.ok(chunks.every((c) => c.model === server.model && c.object === "chat.completion.chunk"));
  assert.equal(chunks.filter((c) => c.choices[0]?.finish_reason).length, 1, "exactly one finish_reason");
  assert.ok(!chunks.some((c) => c.usage), "usage only with stream_options.include_usage");
});

test("completions API, streamed without include_usage, still ends properly", T, async () => {
  const s = await collectStream(await openai.completions.create(
    { model: server.model, prompt: PROMPT, temperature: 0, max_tokens: 5, stream: true }), "completion");
  assert.ok(s.text.length > 0);
  assert.equal(s.lastFinishReason, "length");
});

// A printable-ASCII substring of `text` from its middle whose first occurrence is at p > 0.
function pickStop(text) {
  const mid = Math.floor(text.length / 2);
  for (const len of [4, 5, 3]) {
    for (let d = 0; d < text.length; d++) {
      for (const start of [mid + d, mid - d]) {
        if (start < 1 || start + len > text.length) continue;
        const s = text.slice(start, start + len);
        if (!/^[\x21-\x7e][\x20-\x7e]*[\x21-\x7e]$/.test(s)) continue;  // no edge spaces
        const p = text.indexOf(s);
        if (p > 0) return { stop: s, p };
      }
    }
  }
  return null;
}

for (const api of ["completions", "chat"]) {
  test(`stop strings (${api}): the text ends right before the first match`, T, async () => {
    const base = api === "chat"
      ? { model: server.model, messages: [{ role: "user", content: "Tell me about Mr. Darcy." }] }
      : { model: server.model, prompt: "Mr. Darcy walked into the room and" };
    const get = async (extra) => {
      if (api === "chat") {
        const r = await openai.chat.completions.create({ ...base, temperature: 0, ...extra });
        return { text: r.choices[0].message.content ?? "", finish: r.choices[0].finish_reason, usage: r.usage };
      }
      const r = await openai.completions.create({ ...base, temperature: 0, ...extra });
      return { text: r.choices[0].text, finish: r.choices[0].finish_reason, usage: r.usage };
    };
    const full = await get({ max_tokens: 40 });
    assert.equal(full.finish, "length");
    const pick = pickStop(full.text);
    assert.ok(pick, `no usable stop string in ${JSON.stringify(full.text)}`);
    const want = full.text.slice(0, pick.p);
    const what = `stop ${JSON.stringify(pick.stop)} in ${JSON.stringify(full.text)}`;

    const cut = await get({ max_tokens: 40, stop: [pick.stop] });
    assert.equal(cut.finish, "stop", what);
    assert.equal(cut.text, want, what);
    assert.ok(cut.usage.completion_tokens < 40, what);

    // A stop string that never occurs changes nothing; a list of several works like its first match.
    const none = await get({ max_tokens: 40, stop: ["@@never@@"] });
    assert.equal(none.text, full.text);
    assert.equal(none.finish, "length");
    const several = await get({ max_tokens: 40, stop: ["@@never@@", pick.stop] });
    assert.equal(several.text, want, what);
    assert.equal(several.finish, "stop");

    const streamReq = { ...base, temperature: 0, max_tokens: 40, stop: pick.stop, stream: true,
                        stream_options: { include_usage: true } };
    const s = api === "chat"
      ? await collectStream(await openai.chat.completions.create(streamReq), "chat")
      : await collectStream(await openai.completions.create(streamReq), "completion");
    assert.equal(s.text, want, `streamed, ${what}`);
    assert.equal(s.lastFinishReason, "stop", `streamed, ${what}`);
    assert.ok(s.usage);
  });
}

test("seeds: the same seed samples the same text, other seeds differ", T, async () => {
  const req = (seed) => ({ model: server.model, prompt: "Dear Jane, I write in haste because",
                           temperature: 0.9, max_tokens: 24, seed });
  const a = (await openai.completions.create(req(1234))).choices[0].text;
  const b = (await openai.completions.create(req(1234))).choices[0].text;
  assert.equal(b, a, "same seed, different text");
  const others = [];
  for (const seed of [99, 7, 31337]) others.push((await openai.completions.create(req(seed))).choices[0].text);
  assert.ok(others.some((t) => t !== a), `seeds 99, 7, 31337 all sampled seed 1234's text ${JSON.stringify(a)}`);

  const c = await openai.chat.completions.create({ model: server.model, messages: CHAT, temperature: 0.9,
                                                   max_tokens: 24, seed: 5 });
  const d = await openai.chat.completions.create({ model: server.model, messages: CHAT, temperature: 0.9,
                                                   max_tokens: 24, seed: 5 });
  assert.equal(d.choices[0].message.content, c.choices[0].message.content, "chat: same seed, different text");
});

test("GET /health, /metrics, /v1/cache/stats", T, async () => {
  const h = await rawRequest(server, "GET", "/health");
  assert.equal(h.status, 200, h.text);

  const m = await rawRequest(server, "GET", "/metrics");
  assert.equal(m.status, 200, m.text.slice(0, 300));
  assert.match(m.headers["content-type"] ?? "", /^text\/plain/);
  assert.ok(m.text.includes("# TYPE"), `no "# TYPE" in /metrics:\n${m.text.slice(0, 500)}`);

  const stats = await getJson(server, "/v1/cache/stats");
  assert.equal(typeof stats, "object");
});
