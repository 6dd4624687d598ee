#!/usr/bin/env python3
"""Chat-template conformance: `kvtier render-chat` against Python's jinja2 (issue 31).

Every template in --templates (../shared/testdata/chat-templates) is rendered over every
conversation of --conversations by both, and the outputs must be identical byte for byte, or
both must fail. The reference is set up as Hugging Face transformers' apply_chat_template sets up
jinja2 (see ../shared/testdata/README.md): ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True), the loopcontrols extension and transformers' {% generation %} block,
raise_exception(), strftime_now() and a tojson filter keeping non-ASCII text. strftime_now()
reads a fixed time (--now, seconds since the epoch, UTC) on both sides.

Usage: chat_template_conformance.py --kvtier BIN --templates DIR [--conversations FILE]
       [--now EPOCH] [--show N]   (exit 0: every case matches)
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    """transformers' {% generation %} ... {% endgeneration %}: renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.fromtimestamp(now, tz=datetime.timezone.utc).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def reference(env, source, variables):
    try:
        return True, env.from_string(source).render(**variables)
    except Exception as e:  # any failure counts as "raises"
        return False, f"{type(e).__name__}: {e}"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvtier", required=True)
    ap.add_argument("--templates", required=True)
    ap.add_argument("--conversations", default=os.path.join(here, "testdata", "conversations.json"))
    ap.add_argument("--now", type=int, default=1786000000)
    ap.add_argument("--show", type=int, default=5, help="mismatches to print in full")
    ap.add_argument("--only", default="", help="substring of template names to run")
    args = ap.parse_args()

    if not os.path.isdir(args.templates):
        print(f"conformance: no template folder {args.templates}", file=sys.stderr)
        return 2
    with open(args.conversations, encoding="utf-8") as f:
        convs = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    env = make_env(args.now)
    templates = sorted(t for t in os.listdir(args.templates) if t.endswith(".jinja") and args.only in t)
    total = same = both_raise = 0
    shown = 0
    failures = []
    for name in templates:
        path = os.path.join(args.templates, name)
        with open(path, encoding="utf-8") as f:
            source = f.read()
        for cname, conv in convs.items():
            variables = {"bos_token": "<s>", "eos_token": "</s>", **conv}
            ok, expected = reference(env, source, variables)
            p = subprocess.run([args.kvtier, "render-chat", "--template", path, "--now", str(args.now)],
                               input=json.dumps(variables, ensure_ascii=False).encode(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            got = p.stdout.decode("utf-8", errors="replace")
            total += 1
            if ok and p.returncode == 0 and got == expected:
                same += 1
                continue
            if not ok and p.returncode != 0:
                both_raise += 1
                continue
            failures.append(f"{name} x {cname}")
            if shown < args.show:
                shown += 1
                print(f"--- MISMATCH {name} x {cname}")
                print(f"python: {'ok' if ok else 'raised'}: {expected!r}"[:3000])
                print(f"kvtier: rc={p.returncode}: {got!r}"[:3000])
                if p.stderr:
                    print("kvtier stderr:", p.stderr.decode(errors="replace")[:500])
    print(f"conformance: {len(templates)} templates x {len(convs)} conversations = {total} cases: "
          f"{same} identical, {both_raise} raise in both, {len(failures)} differ")
    for f in failures:
        print("  differs:", f)
    return 0 if not failures and total > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
