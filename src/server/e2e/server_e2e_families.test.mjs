// Cache correctness of every model family through `kvtier serve`'s HTTP API (issue 33): for a
// dense model (llama), phi3, gemma3 (sliding-window layers) and qwen35 (Gated DeltaNet state
// snapshots), greedy completions are identical to a server without a prefix cache when the
// prompt is cold, an exact RAM hit, a hit that falls between two resume points (inside the
// generated part of a stored conversation: a window model resumes where its window rows are,
// a hybrid one from the prompt's state snapshot), and an SSD hit after a restart (RAM + SSD
// tiers, write-through).
// Models: random weights from `kvtier make-test-model` (text fillers, so answers render as
// text), or the files KVTIER_E2E_FAMILY_MODELS names ("arch=path,arch=path": the tiny trained
// models; tools/e2e_families.sh passes them). Run by src/server/e2e/run.sh.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";

import { TEST_TIMEOUT_MS, cachedTokens, client, kvtierBin, longText, rawRequest, startServer } from "./e2e_util.mjs";

const T = { timeout: 4 * TEST_TIMEOUT_MS };
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kvtier_e2e_families_"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// Small random shapes; gemma3's window (16) and qwen35's snapshots lie well inside the prompts.
const COMMON = ["--hidden", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "64", "--ffn", "256",
                "--vocab", "512", "--ctx", "2048", "--weight-type", "f32", "--weight-std", "0.08",
                "--text-fillers", "--no-tied"];
const SHAPES = {
  llama: ["--layers", "2"],
  phi3: ["--layers", "2"],
  gemma3: ["--layers", "4", "--window", "16", "--swa-period", "3"],
  qwen35: ["--layers", "4", "--ssm-state", "32", "--ssm-k-heads", "2", "--ssm-v-heads", "2"],
};

function models() {
  const named = process.env.KVTIER_E2E_FAMILY_MODELS;
  if (named) {
    return named.split(",").map((kv) => {
      const [arch, file] = kv.split("=");
      assert.ok(arch && file && fs.existsSync(file), `KVTIER_E2E_FAMILY_MODELS: bad entry '${kv}'`);
      return { arch, file, trained: true };
    });
  }
  return Object.entries(SHAPES).map(([arch, shape]) => {
    const file = path.join(tmp, `${arch}.gguf`);
    execFileSync(kvtierBin(), ["make-test-model", "--out", file, "--arch", arch, ...COMMON, ...shape,
                               "--seed", "33"], { stdio: ["ignore", "ignore", "inherit"] });
    return { arch, file, trained: false };
  });
}

const SERVE = ["--threads", "2", "--block-tokens", "16", "--prefill-step-size", "32", "--max-num-seqs", "4"];

async function complete(server, prompt, maxTokens) {
  const r = await client(server).completions.create({
    model: server.model, prompt, temperature: 0, max_tokens: maxTokens,
  });
  return { text: r.choices[0].text, prompt: r.usage.prompt_tokens, cached: cachedTokens(r.usage) };
}

for (const m of models()) {
  test(`${m.arch}: cold, RAM hit, hit between resume points, SSD hit after a restart`, T, async () => {
    const GEN = 24;
    const prompt = longText(`Family ${m.arch}, letter one.`, 90);
    const ssd = path.join(tmp, `ssd_${m.arch}`);
    const tiered = ["--model", m.file, ...SERVE, "--cache-memory-mb", "64", "--ssd-cache-dir", ssd,
                    "--cache-write-policy", "write-through"];
    // The reference: the same server without a prefix cache.
    const ref = await startServer(["--model", m.file, ...SERVE, "--disable-prefix-cache"]);
    let want, conversationText;
    try {
      want = await complete(ref, prompt, GEN);
    } finally {
      await ref.stop();
    }
    assert.ok(want.prompt >= 64, `${m.arch}: prompt of ${want.prompt} tokens`);
    if (!m.trained) assert.ok(want.text.length > 0, `${m.arch}: the random model's answer is empty`);

    let server = await startServer(tiered);
    try {
      const cold = await complete(server, prompt, GEN);
      assert.equal(cold.cached, 0, `${m.arch}: cold`);
      assert.equal(cold.text, want.text, `${m.arch}: cold answer`);
      const ram = await complete(server, prompt, GEN);
      assert.ok(ram.cached >= ram.prompt - 1, `${m.arch}: exact RAM hit cached ${ram.cached} of ${ram.prompt}`);
      assert.equal(ram.text, want.text, `${m.arch}: RAM hit answer`);

      // The stored conversation (prompt + answer) matched up to half its answer: past the
      // prompt's resume point, before the conversation's end.
      const half = want.text.slice(0, Math.floor(want.text.length / 2));
      conversationText = `${prompt}${half} And then, a new line of the letter.`;
      const between = await complete(server, conversationText, 12);
      const refBetween = await startServer(["--model", m.file, ...SERVE, "--disable-prefix-cache"]);
      let wantBetween;
      try {
        wantBetween = await complete(refBetween, conversationText, 12);
      } finally {
        await refBetween.stop();
      }
      console.log(`${m.arch}: hit between resume points: cached ${between.cached} of ${between.prompt} ` +
                  `(prompt ${cold.prompt})`);
      assert.ok(between.cached >= Math.min(cold.prompt - 1, 32),
                `${m.arch}: the prompt's resume point: cached ${between.cached}`);
      assert.ok(between.cached < between.prompt, `${m.arch}: cached ${between.cached} of ${between.prompt}`);
      assert.equal(between.text, wantBetween.text, `${m.arch}: answer of a hit between resume points`);
    } finally {
      await server.stop();
    }

    // A restart: the RAM cache is empty, the SSD tier has every block and state snapshot.
    server = await startServer(tiered);
    try {
      const stats = await rawRequest(server, "GET", "/v1/cache/stats");
      assert.equal(stats.status, 200, stats.text);
      const warm = await complete(server, prompt, GEN);
      console.log(`${m.arch}: SSD hit after a restart: cached ${warm.cached} of ${warm.prompt}`);
      assert.ok(warm.cached >= 32, `${m.arch}: SSD hit after a restart cached ${warm.cached} of ${warm.prompt}`);
      assert.equal(warm.text, want.text, `${m.arch}: SSD hit answer after a restart`);
    } finally {
      await server.stop();
    }
  });
}
