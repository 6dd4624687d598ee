// The status page at `/` in headless Chromium (Debian's `chromium`, driven by playwright-core),
// against a real `kvtier serve` with an SSD tier and a 1 MiB RAM prefix cache: after requests
// with a prefix hit, a spill to SSD and a reload, every number the page shows under a
// data-stat="cache...." attribute equals GET /v1/cache/stats, the tables show the hottest
// prefixes and the tier events, and a screenshot goes to ./dashboard.png (run.sh runs this
// in BUILD_DIR/e2e). KVTIER_CHROMIUM overrides the browser (default /usr/bin/chromium).
// Run by src/server/e2e/run.sh KVTIER_BIN BUILD_DIR '*.browser.mjs'.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { chromium } from "playwright-core";

import { TEST_TIMEOUT_MS, client, getJson, startServer } from "./e2e_util.mjs";

const CHROMIUM = process.env.KVTIER_CHROMIUM || "/usr/bin/chromium";
const T = { timeout: 2 * TEST_TIMEOUT_MS };

// Distinct openings (Persuasion's first lines), each ~50 tokens: 4 blocks of 16 tokens with
// the completion, so the 1 MiB cache (8 f16 blocks of this model) holds two at most.
const A = "Sir Walter Elliot, of Kellynch Hall, in Somersetshire, was a man who, for his own " +
  "amusement, never took up any book but the Baronetage; there he found occupation for an idle hour.";
const B = "Vanity was the beginning and the end of Sir Walter Elliot's character; vanity of person " +
  "and of situation. He had been remarkably handsome in his youth.";
const C = "Lady Elliot had been an excellent woman, sensible and amiable; whose judgement and " +
  "conduct, if they might be pardoned the youthful infatuation which made her Lady Elliot.";
const D = "Three girls, the two eldest sixteen and fourteen, was an awful legacy for a mother to " +
  "bequeath, an awful charge rather, to confide to the authority and guidance of a conceited father.";
const E = "She had, however, one very intimate friend, a sensible, deserving woman, who had been " +
  "brought, by strong attachment to herself, to settle close by her, in the village of Kellynch.";

// The value at "a.b.c" of an object.
function at(obj, dotted) {
  return dotted.split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);
}

// A number as the page writes it: "1,234" or "1.23 MiB" (bytes). Returns [value, tolerance]:
// the page rounds bytes to 2 or 1 decimals of their unit.
function parseShown(text) {
  const units = { B: 1, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3, TiB: 1024 ** 4 };
  const m = /^([0-9.,]+)(?: (B|KiB|MiB|GiB|TiB))?$/.exec(text.trim());
  if (!m) return [NaN, 0];
  const v = Number(m[1].replace(/,/g, ""));
  if (!m[2]) return [v, 0];
  const decimals = (m[1].split(".")[1] || "").length;
  return [v * units[m[2]], units[m[2]] * 0.5 * 10 ** -decimals];
}

test("the status page shows what /v1/cache/stats says, after a prefix hit and an SSD spill", T, async (t) => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: the status page test needs Debian's ` +
            "chromium (tools/setup.sh installs it) or KVTIER_CHROMIUM pointing to a Chromium");
  const dir = mkdtempSync(path.join(tmpdir(), "kvtier-dashboard-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const server = await startServer(["--ssd-cache-dir", dir, "--cache-memory-mb", "1",
                                    "--block-tokens", "16", "--dashboard-show-text"]);
  let browser;
  t.after(async () => {
    if (browser) await browser.close();
    await server.stop();
  });
  const openai = client(server);
  const complete = (prompt) => openai.completions.create({ model: server.model, prompt, temperature: 0, max_tokens: 8 });

  await complete(A);
  const hit = await complete(A + " Sir Walter");  // extends a cached prompt: a prefix hit
  assert.ok((hit.usage.prompt_tokens_details?.cached_tokens ?? 0) > 0, JSON.stringify(hit.usage));
  for (const p of [B, C, D, E]) await complete(p);  // A's blocks leave RAM for the SSD tier
  await complete(A);                                 // and come back from it
  // Settle: the SSD writer's queue empty, and the counters no longer moving.
  let stats;
  for (let i = 0; i < 100; ++i) {
    stats = await getJson(server, "/v1/cache/stats");
    if (stats.ssd.queued === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(stats.ssd.spilled_blocks > 0, `no spill: ${JSON.stringify(stats)}`);
  assert.ok(stats.ssd.loaded_blocks > 0, `no reload from SSD: ${JSON.stringify(stats)}`);
  const hits = stats.prefix_cache.lookups - stats.prefix_cache.hits.miss;
  assert.ok(hits >= 2, `prefix hits: ${JSON.stringify(stats.prefix_cache)}`);

  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const res = await page.goto(server.url + "/");
  assert.equal(res.status(), 200);
  assert.ok((await res.body()).length < 100 * 1024, "the page is 100 KB or more");
  // The page renders its inlined snapshot at once, then polls /dashboard.json every 2 s.
  // Compare a render from a poll that started after the stats were read, with the stats read
  // again after it: the engine may still store a finished conversation meanwhile, so a
  // mismatch is tried again (up to 5 polls) before it counts.
  const seen = new Set();
  let mismatch = null;
  for (let attempt = 0; attempt < 5; ++attempt) {
    const before = await getJson(server, "/v1/cache/stats");
    const t0 = Date.now();
    await page.waitForFunction((t) => Number(document.body.dataset.rendered) > t, t0, { timeout: 15000 });
    const shown = await page.$$eval("[data-stat^='cache.']",
                                    (els) => els.map((e) => [e.dataset.stat, e.dataset.value, e.textContent]));
    stats = await getJson(server, "/v1/cache/stats");
    mismatch = null;
    seen.clear();
    for (const [stat, value, text] of shown) {
      const want = at(stats, stat.slice("cache.".length));
      assert.notEqual(want, undefined, `the page shows ${stat}, which /v1/cache/stats lacks`);
      const [v, tol] = parseShown(text);
      if (value !== String(want) || !(Math.abs(v - want) <= tol)) {
        mismatch = `${stat}: the page shows "${text}" (data-value ${value}), /v1/cache/stats says ${want}`;
      }
      seen.add(stat);
    }
    if (mismatch === null) break;
    console.log(`attempt ${attempt}: ${mismatch} (stats before the poll: ${JSON.stringify(before.prefix_cache)})`);
  }
  assert.equal(mismatch, null, mismatch);
  for (const s of ["active_pool.bytes_in_use", "active_pool.capacity_bytes", "active_pool.blocks_in_use",
                   "prefix_cache.bytes", "prefix_cache.budget_bytes", "prefix_cache.entries",
                   "prefix_cache.lookups", "prefix_cache.tokens_reused", "prefix_cache.evicted_blocks",
                   "prefix_cache.promoted_blocks", ...["miss", "exact", "prefix", "supersequence", "lcp"].map((k) => `prefix_cache.hits.${k}`),
                   "ssd.blocks", "ssd.bytes", "ssd.max_bytes", "ssd.spilled_blocks", "ssd.loaded_blocks",
                   "ssd.quarantined", "ssd.evicted_blocks"]) {
    assert.ok(seen.has(`cache.${s}`), `the page does not show cache.${s}`);
  }
  // The tables: the hottest prefixes with their text, the tier events with the spill.
  const hot = await page.$$eval("#hot tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  assert.ok(hot.length >= 1 && hot.length <= Math.min(20, stats.prefix_cache.entries), JSON.stringify(hot));
  assert.ok(hot.every((r) => r.length === 8 && /^(RAM)/.test(r[4])), JSON.stringify(hot));
  assert.ok(hot.some((r) => r[7].startsWith("Sir Walter") || r[7].startsWith("Vanity") || r[7].startsWith("Lady")),
            JSON.stringify(hot));
  const events = await page.$$eval("#events tr td:nth-child(2)", (tds) => tds.map((t) => t.textContent));
  for (const e of ["spilled to SSD", "RAM eviction", "reloaded from SSD"]) {
    assert.ok(events.includes(e), `no "${e}" event: ${JSON.stringify(events)}`);
  }
  assert.deepEqual(errors, [], "script errors on the page");
  const out = path.resolve(process.env.KVTIER_E2E_OUT || ".", "dashboard.png");
  await page.screenshot({ path: out, fullPage: true });
  console.log(`screenshot: ${out}`);
});
