// Reasoning content through the official openai client, unmodified (issue 31): a template whose
// generation prompt opens <think> (as Qwen3 / QwQ / DeepSeek-R1 templates do) makes the output
// reasoning until </think>; the server returns it as message.reasoning_content, streams it as
// delta.reasoning_content, and chat_template_kwargs {enable_thinking: false} (the template then
// closes the think block itself) gives plain content. The bundled model never writes </think>
// in a few tokens, so the whole completion is reasoning there.
// Run by src/server/e2e/run.sh (KVTIER_BIN=path/to/kvtier node --test server_e2e_reasoning.test.mjs).
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";

import { TEST_TIMEOUT_MS, useServer } from "./e2e_util.mjs";

const TEMPLATE = `{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% else %}<think>
{% endif %}{% endif %}`;

const templatePath = path.join(os.tmpdir(), `kvtier_e2e_reasoning_${process.pid}.jinja`);
fs.writeFileSync(templatePath, TEMPLATE);
process.on("exit", () => fs.rmSync(templatePath, { force: true }));

const T = { timeout: TEST_TIMEOUT_MS };
let server;
let openai;
useServer((s, c) => {
  server = s;
  openai = c;
}, ["--chat-template-file", templatePath]);

const messages = [
  { role: "system", content: "You are a careful reader of old novels." },
  { role: "user", content: "Who was Anne Elliot's father, and what did he care for most?" },
];
const request = { messages, temperature: 0, max_tokens: 24 };

test("openai: the open think block comes back as message.reasoning_content", T, async () => {
  const res = await openai.chat.completions.create({ model: server.model, ...request });
  const msg = res.choices[0].message;
  assert.equal(typeof msg.reasoning_content, "string", JSON.stringify(msg));
  assert.ok(msg.reasoning_content.length > 0, JSON.stringify(msg));
  assert.ok(!/<\/?think>/.test(msg.reasoning_content), "a think tag leaked into reasoning_content");
  assert.ok(!/<\/?think>/.test(msg.content ?? ""), "a think tag leaked into content");
  assert.equal(res.usage.completion_tokens, 24);
});

test("openai: streamed delta.reasoning_content joins to the same text", T, async () => {
  const whole = (await openai.chat.completions.create({ model: server.model, ...request })).choices[0].message;
  const stream = await openai.chat.completions.create({ model: server.model, ...request, stream: true });
  let reasoning = "";
  let content = "";
  let reasoningChunks = 0;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    if (typeof d.reasoning_content === "string" && d.reasoning_content.length > 0) {
      reasoning += d.reasoning_content;
      reasoningChunks += 1;
    }
    if (typeof d.content === "string") content += d.content;
  }
  assert.ok(reasoningChunks > 1, `expected reasoning in several deltas, got ${reasoningChunks}`);
  assert.equal(reasoning, whole.reasoning_content);
  assert.equal(content, whole.content ?? "");
});

test("openai: chat_template_kwargs enable_thinking false gives content, no reasoning", T, async () => {
  const res = await openai.chat.completions.create({
    model: server.model, ...request, chat_template_kwargs: { enable_thinking: false },
  });
  const msg = res.choices[0].message;
  assert.ok(!msg.reasoning_content, `unexpected reasoning_content: ${JSON.stringify(msg)}`);
  assert.equal(typeof msg.content, "string");
  assert.ok(msg.content.length > 0, JSON.stringify(msg));
});
