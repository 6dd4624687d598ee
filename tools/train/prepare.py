#!/usr/bin/env python3
"""Trains the byte-level BPE tokenizer and encodes the corpus for train.py. Stdlib only.

Reads data/corpus/ (tools/corpus/fetch.sh) and writes data/train/:
  tokenizer.json   merges (GPT-2 byte alphabet), vocab layout in bpe.py
  austen.bin       the five training novels, uint16 little-endian ids, each novel ended by
                   <|endoftext|>, without its last VAL_FRAC (the in-domain validation split)
  brown.bin        the 500 Brown corpus texts, each ended by <|endoftext|>
  val.bin          the last VAL_FRAC of each training novel (checkpoint choice, never trained on)
  eval.bin         the held-out novel (data/corpus/eval.txt): reported, never trained on or
                   used for any choice
The tokenizer is trained on the training text only (not on val or eval).

Usage: prepare.py [--vocab 8192] [--root REPO]
"""
import argparse
import array
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402

TRAIN_NOVELS = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey"]
EVAL_NOVEL = "persuasion"
VAL_FRAC = 0.03


def split_at_paragraph(text, frac):
    cut = int(len(text) * (1 - frac))
    p = text.rfind("\n\n", 0, cut)
    cut = p + 2 if p > 0 else cut
    return text[:cut], text[cut:]


def write_ids(path, ids):
    a = array.array("H", ids)
    if sys.byteorder != "little":
        a.byteswap()
    with open(path, "wb") as f:
        a.tofile(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    a = ap.parse_args()
    corpus = os.path.join(a.root, "data", "corpus")
    out = os.path.join(a.root, "data", "train")
    os.makedirs(out, exist_ok=True)

    def read(p):
        with open(os.path.join(corpus, p), encoding="utf-8") as f:
            return f.read()

    train_novels, val_parts = [], []
    for n in TRAIN_NOVELS:
        tr, va = split_at_paragraph(read("austen/%s.txt" % n), VAL_FRAC)
        train_novels.append(tr)
        val_parts.append(va)
    brown = [t.strip("\n") + "\n" for t in read("brown.txt").split("\n\n\n") if t.strip()]
    eval_text = read("eval.txt")
    if eval_text != read("austen/%s.txt" % EVAL_NOVEL):
        print("prepare: eval.txt is not %s" % EVAL_NOVEL, file=sys.stderr)
        return 1

    t0 = time.time()
    tok_path = os.path.join(out, "tokenizer.json")
    if os.path.exists(tok_path):
        tok = bpe.Tokenizer.load(tok_path)
        print("prepare: reusing %s" % tok_path, file=sys.stderr)
    else:
        merges = bpe.train(train_novels + brown, a.vocab)
        tok = bpe.Tokenizer(merges)
        tok.save(tok_path)
        print("prepare: tokenizer %d tokens in %.0f s" % (len(tok.tokens), time.time() - t0),
              file=sys.stderr)
    if len(tok.tokens) > 65535:
        raise SystemExit("vocab too large for uint16 ids")

    def enc_docs(docs):
        ids = []
        for d in docs:
            ids.extend(tok.encode(d))
            ids.append(tok.eot_id)
        return ids

    stats = {}
    for name, docs in (("austen", train_novels), ("brown", brown), ("val", val_parts),
                       ("eval", [eval_text])):
        ids = enc_docs(docs) if name != "eval" else tok.encode(eval_text)
        write_ids(os.path.join(out, name + ".bin"), ids)
        nbytes = sum(len(d.encode()) for d in docs)
        stats[name] = (len(ids), nbytes)
        print("prepare: %-6s %9d tokens  %9d bytes  %.2f bytes/token"
              % (name, len(ids), nbytes, nbytes / len(ids)), file=sys.stderr)
    # round trip check
    sample = eval_text[:20000]
    if tok.decode(tok.encode(sample)) != sample:
        raise SystemExit("prepare: tokenizer round trip failed")
    print("prepare: done in %.0f s" % (time.time() - t0), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
