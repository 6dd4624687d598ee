// `kvtier serve` through the official openai npm client: the prefix cache (cached_tokens,
// DELETE /v1/cache), 32 concurrent streams, and preemption in a tiny KV pool.
// Run by src/server/e2e/run.sh (KVTIER_BIN=path/to/kvtier node --test server_e2e_cache.test.mjs).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  TEST_TIMEOUT_MS, cachedTokens, client, collectStream, getJson, longText, metrics, rawRequest, startServer, useServer,
} from "./e2e_util.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
let server;
let openai;
useServer((s, c) => {
  server = s;
  openai = c;
});

// ~1200 tokens of the bundled model's tokenizer (context 2048).
const LONG = longText("Volume the first, by a lady of quality.", 900);
let cold;

async function complete(prompt, extra = {}) {
  return openai.completions.create({ model: server.model, prompt, temperature: 0, max_tokens: 16, ...extra });
}

test("prefix cache: a repeated long prompt reports cached tokens and the same greedy text", T, async () => {
  cold = await complete(LONG);
  const n = cold.usage.prompt_tokens;
  assert.ok(n >= 900 && n <= 2048 - 16, `long prompt is ${n} tokens`);
  assert.equal(cachedTokens(cold.usage), 0, `cold request: ${JSON.stringify(cold.usage)}`);
  assert.equal(cold.choices[0].finish_reason, "length");

  const warm = await complete(LONG);
  assert.equal(warm.usage.prompt_tokens, n);
  const cached = warm.usage.prompt_tokens_details?.cached_tokens;
  assert.ok(typeof cached === "number" && cached >= n - 1 && cached <= n,
            `identical prompt of ${n} tokens: ${JSON.stringify(warm.usage)}`);
  assert.equal(warm.choices[0].text, cold.choices[0].text, "greedy text from the cache differs from the cold run");

  const longer = await complete(`${LONG} Mrs. Bennet said nothing more that evening.`);
  const c2 = cachedTokens(longer.usage);
  assert.ok(longer.usage.prompt_tokens > n);
  assert.ok(c2 > n / 2 && c2 < longer.usage.prompt_tokens,
            `prompt extending a cached one (${n} tokens): ${JSON.stringify(longer.usage)}`);

  // The chat API shares the cache too.
  const messages = [{ role: "user", content: LONG }];
  const chatCold = await openai.chat.completions.create({ model: server.model, messages, temperature: 0, max_tokens: 8 });
  const chatWarm = await openai.chat.completions.create({ model: server.model, messages, temperature: 0, max_tokens: 8 });
  assert.ok(cachedTokens(chatWarm.usage) >= chatWarm.usage.prompt_tokens - 1, JSON.stringify(chatWarm.usage));
  assert.equal(chatWarm.choices[0].message.content, chatCold.choices[0].message.content);
});

test("DELETE /v1/cache empties the prefix cache", T, async () => {
  assert.ok(cold, "needs the prefix cache test");
  const before = await getJson(server, "/v1/cache/stats");
  const del = await rawRequest(server, "DELETE", "/v1/cache");
  assert.equal(del.status, 200, del.text);
  const afterStats = await getJson(server, "/v1/cache/stats");
  assert.equal(typeof afterStats, "object", JSON.stringify({ before, afterStats }));

  const again = await complete(LONG);
  assert.equal(cachedTokens(again.usage), 0, `after DELETE /v1/cache: ${JSON.stringify(again.usage)}`);
  assert.equal(again.choices[0].text, cold.choices[0].text);
});

const OPENINGS = ["Dear", "My", "The", "At", "When", "Upon", "In", "Of"];
const SUBJECTS = ["Lizzy", "the Colonel", "Mr. Collins", "Lady Catherine"];

test("32 concurrent streams complete and each equals its non-streamed answer", T, async () => {
  const prompts = [];
  for (let i = 0; i < 32; i++) {
    prompts.push(`${OPENINGS[i % 8]} ${SUBJECTS[Math.floor(i / 8)]}, letter ${i + 1}: it was`);
  }
  const streams = await Promise.all(prompts.map(async (prompt) => collectStream(
    await openai.completions.create({ model: server.model, prompt, temperature: 0, max_tokens: 24, stream: true,
                                      stream_options: { include_usage: true } }), "completion")));
  for (const [i, s] of streams.entries()) {
    assert.equal(s.lastFinishReason, "length", `stream ${i}`);
    assert.ok(s.usage && s.usage.completion_tokens === 24, `stream ${i}: ${JSON.stringify(s.usage)}`);
    assert.ok(s.text.length > 0, `stream ${i}: empty`);
  }
  for (let i = 0; i < prompts.length; i += 4) {
    const batch = await Promise.all(prompts.slice(i, i + 4).map((p) => complete(p, { max_tokens: 24 })));
    for (const [j, r] of batch.entries()) {
      assert.equal(r.choices[0].text, streams[i + j].text, `prompt ${i + j}: ${JSON.stringify(prompts[i + j])}`);
    }
  }
});

// The bundled model's K/V is 8 KiB per token (8 layers x 2 KV heads x 128 x f16, K and V):
// --kv-pool-mb 2 holds 8 blocks of 32 tokens, so 8 requests of ~76 tokens (3 blocks) each
// cannot all run at once: the engine admits some, and must preempt when they grow.
test("a tiny KV pool: 8 concurrent greedy requests finish with the big pool's answers", T, async () => {
  const prompts = [];
  for (let i = 0; i < 8; i++) prompts.push(`${OPENINGS[i]} ${SUBJECTS[i % 4]}, in the ${i + 1}th chapter, said that`);
  const req = (p) => ({ model: server.model, prompt: p, temperature: 0, max_tokens: 64 });
  const want = [];
  for (const p of prompts) want.push((await openai.completions.create(req(p))).choices[0].text);

  const small = await startServer(["--kv-pool-mb", "2"]);
  try {
    const c = client(small);
    const before = (await metrics(small)).value("kvtier_engine_preemptions_total");
    const got = await Promise.all(prompts.map(async (p, i) => {
      if (i % 2 === 0) return (await c.completions.create(req(p))).choices[0];
      const s = await collectStream(await c.completions.create({ ...req(p), stream: true }), "completion");
      return { text: s.text, finish_reason: s.lastFinishReason };
    }));
    for (const [i, g] of got.entries()) {
      assert.equal(g.finish_reason, "length", `request ${i}`);
      assert.equal(g.text, want[i], `request ${i} (${JSON.stringify(prompts[i])}) in the tiny pool`);
    }
    const afterCount = (await metrics(small)).value("kvtier_engine_preemptions_total");
    if (before !== undefined) {
      console.log(`tiny pool: ${afterCount - before} preemptions`);
      assert.ok(afterCount > before, "no preemption in the tiny pool: shrink it or lengthen the requests");
    }
  } finally {
    await small.stop();
  }
});
