// Shared helpers of the `kvtier serve` end-to-end tests: start / stop a server process, build
// an OpenAI client for it, raw HTTP for what the client would refuse to send, test texts.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import http from "node:http";
import { after, before } from "node:test";
import OpenAI from "openai";

export const TEST_TIMEOUT_MS = 120_000;
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 30_000;
const LISTEN_RE = /^kvtier serve: listening on http:\/\/127\.0\.0\.1:(\d+) model=(\S+)/;
const KEEP_STDERR = 64 * 1024;  // last bytes of the server's stderr kept for messages

export function kvtierBin() {
  const bin = process.env.KVTIER_BIN;
  assert.ok(bin, "KVTIER_BIN must point to the kvtier binary (src/server/e2e/run.sh sets it)");
  return bin;
}

// Starts `$KVTIER_BIN serve --port 0 --host 127.0.0.1 ...extraArgs` and resolves once it
// printed its listening line: { port, model, baseURL, url, proc, stderr(), stop() }.
// The tests' memory arithmetic (tiny KV pools, 1 MiB caches, bytes on the status page) counts
// f16 blocks, so they name f16 unless they pass a format (serve's default is quantized).
export function startServer(extraArgs = []) {
  const named = (f) => extraArgs.includes(f);
  const formats = named("--kv-type") || named("--kv-cache-dtype") ? [] : ["--kv-type", "f16"];
  if (!named("--kv-store-type") && !named("--kv-cache-quantization")) formats.push("--kv-store-type", "active");
  const args = ["serve", "--port", "0", "--host", "127.0.0.1", ...formats, ...extraArgs];
  const proc = spawn(kvtierBin(), args, { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  let stdoutBuf = "";
  proc.stderr.setEncoding("utf8");
  proc.stderr.on("data", (d) => {
    stderr = (stderr + d).slice(-KEEP_STDERR);
  });
  proc.stdout.setEncoding("utf8");
  const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
  // A test process that dies must not leave its server behind.
  const killOnExit = () => proc.kill("SIGKILL");
  process.once("exit", killOnExit);
  const describeArgs = `kvtier ${args.join(" ")}`;

  return new Promise((resolve, reject) => {
    let done = false;
    const timer = setTimeout(() => {
      if (done) return;
      done = true;
      proc.kill("SIGKILL");
      reject(new Error(`${describeArgs}: no listening line within ${START_TIMEOUT_MS / 1000} s; ` +
                       `stdout: ${JSON.stringify(stdoutBuf.slice(-2000))}; stderr:\n${stderr}`));
    }, START_TIMEOUT_MS);
    proc.on("error", (e) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      reject(new Error(`${describeArgs}: cannot start: ${e.message}`));
    });
    exited.then(({ code, signal }) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      reject(new Error(`${describeArgs}: exited (code ${code}, signal ${signal}) before listening; ` +
                       `stderr:\n${stderr}`));
    });
    proc.stdout.on("data", (d) => {
      stdoutBuf = (stdoutBuf + d).slice(-KEEP_STDERR);
      if (done) return;
      for (const line of stdoutBuf.split("\n")) {
        const m = LISTEN_RE.exec(line);
        if (!m) continue;
        done = true;
        clearTimeout(timer);
        const port = Number(m[1]);
        const url = `http://127.0.0.1:${port}`;
        resolve({
          port,
          model: m[2],
          url,
          baseURL: `${url}/v1`,
          proc,
          stderr: () => stderr,
          // SIGTERM; the server must exit with code 0 within 30 s.
          async stop() {
            process.removeListener("exit", killOnExit);
            if (proc.exitCode !== null || proc.signalCode !== null) {
              const r = await exited;
              const external = /received SIG(TERM|INT)/.test(stderr)
                ? " after a signal this test did not send (did another process kill it?)" : "";
              assert.fail(`server exited early${external} (code ${r.code}, signal ${r.signal}); ` +
                          `stderr:\n${stderr.slice(-4000)}`);
            }
            proc.kill("SIGTERM");
            const t0 = Date.now();
            let timer2;
            const timeout = new Promise((res) => { timer2 = setTimeout(() => res(null), STOP_TIMEOUT_MS); });
            const r = await Promise.race([exited, timeout]);
            clearTimeout(timer2);
            if (r === null) {
              proc.kill("SIGKILL");
              assert.fail(`server did not exit within ${STOP_TIMEOUT_MS / 1000} s of SIGTERM; stderr:\n${stderr.slice(-4000)}`);
            }
            assert.equal(r.signal, null, `server died of ${r.signal}; stderr:\n${stderr.slice(-4000)}`);
            assert.equal(r.code, 0, `server exit code after SIGTERM; stderr:\n${stderr.slice(-4000)}`);
            console.log(`server on port ${port} exited ${Date.now() - t0} ms after SIGTERM`);
          },
        });
        return;
      }
    });
  });
}

// The official client; no retries, so a failure shows as itself.
export function client(server, options = {}) {
  return new OpenAI({ baseURL: server.baseURL, apiKey: "none", maxRetries: 0, timeout: TEST_TIMEOUT_MS, ...options });
}

// One server for a test file: started before its tests (onReady(server, client) hands them
// over), stopped after them.
export function useServer(onReady, extraArgs = []) {
  let server = null;
  before(async () => {
    server = await startServer(extraArgs);
    onReady(server, client(server));
  }, { timeout: TEST_TIMEOUT_MS });
  after(async () => {
    if (server) await server.stop();
  }, { timeout: TEST_TIMEOUT_MS });
}

// Raw HTTP through node:http (no client-side checks, exact bytes). body: string | Buffer | null.
// Resolves { status, headers, text, json } (json null when the body is not JSON).
export function rawRequest(server, method, path, body = null, headers = {}) {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    if (body !== null) {
      if (!("content-type" in h)) h["content-type"] = "application/json";
      h["content-length"] = Buffer.byteLength(body);
    }
    const req = http.request({ host: "127.0.0.1", port: server.port, method, path, headers: h }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("error", reject);
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
    });
    req.setTimeout(TEST_TIMEOUT_MS, () => req.destroy(new Error(`${method} ${path}: no answer`)));
    req.on("error", reject);
    req.end(body === null ? undefined : body);
  });
}

// Asserts an OpenAI error answer: the status, the {"error":{"message","type","param","code"}}
// shape, and that the message (or param) matches `names` (a RegExp).
export function assertError(res, status, names, what) {
  assert.equal(res.status, status, `${what}: status (body: ${res.text.slice(0, 500)})`);
  assert.ok(res.json && typeof res.json === "object", `${what}: body is not JSON: ${res.text.slice(0, 500)}`);
  const e = res.json.error;
  assert.ok(e && typeof e === "object", `${what}: no "error" object: ${res.text.slice(0, 500)}`);
  for (const k of ["message", "type", "param", "code"]) {
    assert.ok(k in e, `${what}: error has no "${k}": ${res.text.slice(0, 500)}`);
  }
  assert.equal(typeof e.message, "string", `${what}: error.message`);
  assert.ok(e.message.length > 0, `${what}: empty error.message`);
  assert.equal(typeof e.type, "string", `${what}: error.type`);
  if (names) {
    assert.ok(names.test(e.message) || (typeof e.param === "string" && names.test(e.param)),
              `${what}: error should name ${names}: ${res.text.slice(0, 500)}`);
  }
  return e;
}

export async function getJson(server, path) {
  const res = await rawRequest(server, "GET", path);
  assert.equal(res.status, 200, `GET ${path}: ${res.text.slice(0, 300)}`);
  assert.ok(res.json !== null, `GET ${path}: not JSON: ${res.text.slice(0, 300)}`);
  return res.json;
}

// Parses `GET /metrics` (Prometheus text); returns { text, value(name) } where value sums every
// sample of that metric name (any labels), or is undefined when the metric is absent.
export async function metrics(server) {
  const res = await rawRequest(server, "GET", "/metrics");
  assert.equal(res.status, 200, `GET /metrics: ${res.text.slice(0, 300)}`);
  const text = res.text;
  return {
    res,
    text,
    value(name) {
      let sum;
      for (const line of text.split("\n")) {
        if (line.startsWith("#")) continue;
        const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
        if (m && m[1] === name) sum = (sum ?? 0) + Number(m[3]);
      }
      return sum;
    },
  };
}

// Reads an openai stream: { text, chunks, lastChoice, finishReason, usage, contentChunks }.
// kind: "chat" (delta.content) or "completion" (text).
export async function collectStream(stream, kind) {
  let text = "";
  let chunks = 0;
  let contentChunks = 0;
  let finishReason = null;
  let lastWithChoices = null;
  let usage = null;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices && chunk.choices.length > 0) {
      lastWithChoices = chunk;
      const c = chunk.choices[0];
      const piece = kind === "chat" ? c.delta?.content : c.text;
      if (typeof piece === "string" && piece.length > 0) {
        text += piece;
        contentChunks++;
      }
      if (c.finish_reason) finishReason = c.finish_reason;
    }
  }
  return {
    text,
    chunks,
    contentChunks,
    finishReason,
    lastFinishReason: lastWithChoices?.choices[0].finish_reason ?? null,
    usage,
  };
}

export function cachedTokens(usage) {
  return usage?.prompt_tokens_details?.cached_tokens ?? 0;
}

// Varied English prose (public-domain Austen, Pride and Prejudice ch. 1), for long prompts.
const PROSE = `It is a truth universally acknowledged, that a single man in possession of a good
fortune, must be in want of a wife. However little known the feelings or views of such a man may
be on his first entering a neighbourhood, this truth is so well fixed in the minds of the
surrounding families, that he is considered the rightful property of some one or other of their
daughters. "My dear Mr. Bennet," said his lady to him one day, "have you heard that Netherfield
Park is let at last?" Mr. Bennet replied that he had not. "But it is," returned she; "for Mrs.
Long has just been here, and she told me all about it." Mr. Bennet made no answer. "Do you not
want to know who has taken it?" cried his wife impatiently. "You want to tell me, and I have no
objection to hearing it." This was invitation enough. "Why, my dear, you must know, Mrs. Long
says that Netherfield is taken by a young man of large fortune from the north of England; that
he came down on Monday in a chaise and four to see the place, and was so much delighted with it,
that he agreed with Mr. Morris immediately; that he is to take possession before Michaelmas, and
some of his servants are to be in the house by the end of next week." "What is his name?"
"Bingley." "Is he married or single?" "Oh! Single, my dear, to be sure! A single man of large
fortune; four or five thousand a year. What a fine thing for our girls!" "How so? How can it
affect them?" "My dear Mr. Bennet," replied his wife, "how can you be so tiresome! You must know
that I am thinking of his marrying one of them." "Is that his design in settling here?"
"Design! Nonsense, how can you talk so! But it is very likely that he may fall in love with one
of them, and therefore you must visit him as soon as he comes." "I see no occasion for that. You
and the girls may go, or you may send them by themselves, which perhaps will be still better, for
as you are as handsome as any of them, Mr. Bingley may like you the best of the party."`
  .replace(/\s+/g, " ");

// About `words` words of prose, starting with a marker that makes the text unique.
export function longText(marker, words) {
  const all = PROSE.split(" ");
  const out = [marker];
  for (let i = 0; out.length < words; i++) out.push(all[i % all.length]);
  return out.join(" ");
}
