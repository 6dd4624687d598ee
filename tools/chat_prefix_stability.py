#!/usr/bin/env python3
"""Prefix-cache stability of chat templates across agent turns (issue 31).

For every template in --templates, an agent conversation (system prompt, two tools, tool calls
and tool results, 3 user turns) is sent turn by turn as a client would: request k holds the
conversation so far and asks for the answer (add_generation_prompt). The prefix cache can reuse
request k's prompt for request k+1 only when prompt k is a prefix of prompt k+1, in tokens.
Renders with `kvtier render-chat` (the engine the server runs), tokenizes with
`kvtier tokenize --model VOCAB` (a stand-in vocabulary: special-token markers are plain text
to it, which is the harder case for token boundaries), and reports per template whether every
turn's prompt is a text prefix and a token prefix of the next one, and the fraction of the
next prompt's tokens that are cached otherwise. Two scenarios: plain assistant turns, and
assistant turns carrying reasoning_content (what reasoning models return).

Usage: chat_prefix_stability.py --kvtier BIN --templates DIR --vocab GGUF [--markdown]
"""
import argparse
import json
import os
import subprocess
import sys

SYSTEM = "You are a coding agent. Use the tools to answer; be brief."
TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file of the repository.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "run", "description": "Run a shell command.",
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}, "timeout": {"type": "integer"}},
                    "required": ["cmd"]}}},
]


def call(i, name, args):
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


def turns(reasoning):
    """The requests of one agent session: lists of messages, each ending where the model answers."""
    def asst(content, tool_calls=None, think=None):
        m = {"role": "assistant", "content": content}
        if tool_calls:
            m["tool_calls"] = tool_calls
        if reasoning and think:
            m["reasoning_content"] = think
        return m
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Why does the build fail?"}]
    out = [list(msgs)]
    msgs += [asst("", [call(1, "run", {"cmd": "ninja -C build"})], "Run the build first."),
             {"role": "tool", "tool_call_id": "call_1", "name": "run", "content": "error: missing ';' at foo.cc:12"}]
    out.append(list(msgs))
    msgs += [asst("", [call(2, "read_file", {"path": "foo.cc"})], "Look at foo.cc."),
             {"role": "tool", "tool_call_id": "call_2", "name": "read_file", "content": "int main() { return 0 }"}]
    out.append(list(msgs))
    msgs += [asst("foo.cc:12 lacks a ';' after `return 0`.", None, "The return lacks a semicolon."),
             {"role": "user", "content": "Fix it and rebuild."}]
    out.append(list(msgs))
    msgs += [asst("", [call(3, "run", {"cmd": "sed -i 's/0 }/0; }/' foo.cc && ninja -C build"})], "Patch, rebuild."),
             {"role": "tool", "tool_call_id": "call_3", "name": "run", "content": "ok"}]
    out.append(list(msgs))
    msgs += [asst("Fixed; the build passes.", None, "Done."), {"role": "user", "content": "Thanks!"}]
    out.append(list(msgs))
    return out


def render(kvtier, template, messages):
    req = {"messages": messages, "tools": TOOLS, "add_generation_prompt": True,
           "bos_token": "<s>", "eos_token": "</s>"}
    p = subprocess.run([kvtier, "render-chat", "--template", template, "--now", "1786000000"],
                       input=json.dumps(req).encode(), capture_output=True)
    return p.stdout.decode() if p.returncode == 0 else None


def tokenize(kvtier, vocab, text):
    p = subprocess.run([kvtier, "tokenize", "--model", vocab], input=text.encode(), capture_output=True,
                       check=True)
    return p.stdout.decode().split()


def measure(kvtier, vocab, template, reasoning):
    prompts = [render(kvtier, template, m) for m in turns(reasoning)]
    if any(p is None for p in prompts):
        return None
    toks = [tokenize(kvtier, vocab, p) for p in prompts]
    text_ok = all(prompts[i + 1].startswith(prompts[i]) for i in range(len(prompts) - 1))
    tok_ok = all(toks[i + 1][:len(toks[i])] == toks[i] for i in range(len(toks) - 1))
    cached = total = 0
    for i in range(len(toks) - 1):
        a, b = toks[i], toks[i + 1]
        n = 0
        while n < len(a) and n < len(b) and a[n] == b[n]:
            n += 1
        cached += n
        total += len(b)
    return text_ok, tok_ok, cached / total, [len(t) for t in toks]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvtier", required=True)
    ap.add_argument("--templates", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rows = []
    for name in sorted(os.listdir(args.templates)):
        if not name.endswith(".jinja"):
            continue
        path = os.path.join(args.templates, name)
        rows.append((name[:-6], measure(args.kvtier, args.vocab, path, False),
                     measure(args.kvtier, args.vocab, path, True)))
    def cell(r):
        if r is None:
            return "raises"
        text_ok, tok_ok, frac, _ = r
        return f"{'yes' if text_ok else 'no'} / {'yes' if tok_ok else 'no'} / {100 * frac:.1f}%"
    print("| template | plain turns: text prefix / token prefix / reused | with reasoning_content |")
    print("|---|---|---|")
    for name, a, b in rows:
        print(f"| {name} | {cell(a)} | {cell(b)} |")
    for label, idx in (("plain", 1), ("reasoning", 2)):
        ok = [r[idx] for r in rows if r[idx] is not None]
        print(f"\n{label}: {len(ok)} templates render; text prefix every turn: "
              f"{sum(1 for r in ok if r[0])}; token prefix every turn: {sum(1 for r in ok if r[1])}; "
              f"raise: {sum(1 for r in rows if r[idx] is None)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
