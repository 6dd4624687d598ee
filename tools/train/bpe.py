#!/usr/bin/env python3
"""Byte-level BPE (GPT-2 style), standard library only.

* bytes_to_unicode: GPT-2's map of the 256 byte values to printable characters; token strings
  in the vocabulary and the merges are written in that alphabet, as llama.cpp's "gpt2"
  tokenizer model expects.
* pre-tokenizer: the GPT-2 regex
    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
  (llama.cpp's pre-tokenizer "gpt-2"), with \\p{L} and \\p{N} built from unicodedata.
* train(): learns merges from a word-frequency table, incrementally (a heap of pair counts);
  ties go to the lexicographically smallest pair, so the result is deterministic.
* Tokenizer.encode(): applies merges by rank, lowest first (GPT-2's and llama.cpp's rule).

Vocabulary layout: ids 0..255 are the byte tokens (id = byte value), then one token for each
merge in order, then the special "<|endoftext|>" last.
"""
import collections
import heapq
import json
import re
import sys
import unicodedata

EOT = "<|endoftext|>"


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
          + list(range(ord("\xae"), ord("\xff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_ENC = bytes_to_unicode()
BYTE_DEC = {v: k for k, v in BYTE_ENC.items()}


def _char_class(prefix):
    """A regex character class body for every code point whose category starts with prefix."""
    ranges = []
    start = prev = None
    for cp in range(0x110000):
        if unicodedata.category(chr(cp)).startswith(prefix):
            if start is None:
                start = prev = cp
            elif cp == prev + 1:
                prev = cp
            else:
                ranges.append((start, prev))
                start = prev = cp
    if start is not None:
        ranges.append((start, prev))

    def esc(c):
        return "\\U%08x" % c

    return "".join(esc(a) if a == b else esc(a) + "-" + esc(b) for a, b in ranges)


_PAT = None


def pretokenize_pattern():
    global _PAT
    if _PAT is None:
        L = _char_class("L")
        N = _char_class("N")
        _PAT = re.compile(
            r"'s|'t|'re|'ve|'m|'ll|'d| ?[%s]+| ?[%s]+| ?[^\s%s%s]+|\s+(?!\S)|\s+" % (L, N, L, N))
    return _PAT


def pretokenize(text):
    return pretokenize_pattern().findall(text)


def to_byte_chars(piece):
    return "".join(BYTE_ENC[b] for b in piece.encode("utf-8"))


def train(texts, vocab_size, min_count=2, log=sys.stderr):
    """Returns the merges (list of (a, b) strings in the byte alphabet)."""
    counts = collections.Counter()
    for t in texts:
        counts.update(pretokenize(t))
    words = []  # [symbols, count]
    for piece, c in counts.items():
        if c < 1:
            continue
        words.append([list(to_byte_chars(piece)), c])
    n_merges = vocab_size - 256 - 1
    pair_count = collections.defaultdict(int)
    pair_words = collections.defaultdict(set)
    for wi, (syms, c) in enumerate(words):
        for a, b in zip(syms, syms[1:]):
            pair_count[(a, b)] += c
            pair_words[(a, b)].add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    print("bpe: %d distinct pre-tokens, %d pairs" % (len(words), len(pair_count)), file=log)
    while len(merges) < n_merges and heap:
        negc, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc:
            continue  # stale entry
        if -negc < min_count:
            break
        merges.append(pair)
        a, b = pair
        ab = a + b
        changed = collections.defaultdict(int)
        for wi in list(pair_words[pair]):
            syms, c = words[wi]
            # drop this word's old pairs
            for x, y in zip(syms, syms[1:]):
                pair_count[(x, y)] -= c
                changed[(x, y)] += 0
            out = []
            i = 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(ab)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            words[wi][0] = out
            for x, y in zip(out, out[1:]):
                pair_count[(x, y)] += c
                pair_words[(x, y)].add(wi)
                changed[(x, y)] += 0
        del pair_count[pair]
        del pair_words[pair]
        for p in changed:
            if p == pair:
                continue
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            else:
                pair_count.pop(p, None)
                pair_words.pop(p, None)
        if len(merges) % 1000 == 0:
            print("bpe: %d merges, last %r (%d)" % (len(merges), ab, -negc), file=log)
    return merges


class Tokenizer:
    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.tokens = [BYTE_ENC[b] for b in range(256)] + [a + b for a, b in self.merges] + [EOT]
        self.token_to_id = {t: i for i, t in enumerate(self.tokens)}
        if len(self.token_to_id) != len(self.tokens):
            raise ValueError("duplicate tokens in vocabulary")
        self.ranks = {m: i for i, m in enumerate(self.merges)}
        self.eot_id = len(self.tokens) - 1
        self.cache = {}

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        return cls([m.split(" ") for m in d["merges"]])

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"model": "gpt2-bytelevel-bpe", "pre": "gpt-2", "eot": EOT,
                       "vocab_size": len(self.tokens),
                       "merges": [a + " " + b for a, b in self.merges]}, f, ensure_ascii=False)

    def bpe(self, piece):
        r = self.cache.get(piece)
        if r is not None:
            return r
        syms = list(to_byte_chars(piece))
        while len(syms) > 1:
            best = None
            best_rank = None
            for i in range(len(syms) - 1):
                rk = self.ranks.get((syms[i], syms[i + 1]))
                if rk is not None and (best_rank is None or rk < best_rank):
                    best_rank, best = rk, i
            if best is None:
                break
            a, b = syms[best], syms[best + 1]
            out = []
            i = 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        r = [self.token_to_id[s] for s in syms]
        if len(self.cache) < 500000:
            self.cache[piece] = r
        return r

    def encode(self, text):
        ids = []
        for piece in pretokenize(text):
            ids.extend(self.bpe(piece))
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            t = self.tokens[i]
            if t == EOT:
                out += EOT.encode()
            else:
                out += bytes(BYTE_DEC[ch] for ch in t)
        return out.decode("utf-8", errors="replace")
