#!/usr/bin/env python3
"""A small stdlib-only reader for R's serialization format (XDR, versions 2 and 3).

It reads what R packages ship their data in:
  * lazy-load databases: data/Rdata.rdx (gzip-compressed serialized index) plus
    data/Rdata.rdb (each object: 4-byte big-endian length, then a zlib stream, or a
    one-byte type tag '0' none / '2' bzip2 / 'Z' xz followed by the stream);
  * *.rda / *.RData files ("RDX2\n"/"RDX3\n" + serialization, gzip/bzip2/xz/none);
  * *.rds files (a single serialization, compressed or not).

Only what data needs is decoded: vectors (logical, integer, double, complex, character,
list, raw), pairlists, symbols, attributes, references, environments as plain dicts, and the
ALTREP classes R writes for data (compact sequences, wrapped and deferred strings). Anything
else raises an error naming the type and the offset.

Usage (the Austen package):
  read_rda.py --rdb PKG/data/Rdata OUTDIR      # every character vector -> OUTDIR/<name>.txt
  read_rda.py --list PKG/data/Rdata            # names and types
"""
import argparse
import bz2
import gzip
import lzma
import os
import struct
import sys
import zlib

NILVALUE_SXP = 254
REFSXP = 255
SPECIAL_NIL_LIKE = {253: "GlobalEnv", 252: "UnboundValue", 251: "MissingArg",
                    250: "BaseNamespace", 242: "EmptyEnv", 241: "BaseEnv"}


class RError(Exception):
    pass


class Sym:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "Sym(%r)" % self.name


class RObj:
    """An R value: type code, payload, attributes (dict name -> value)."""
    __slots__ = ("type", "value", "attrs")

    def __init__(self, type_, value, attrs=None):
        self.type = type_
        self.value = value
        self.attrs = attrs or {}

    def __repr__(self):
        v = self.value
        if isinstance(v, list) and len(v) > 4:
            v = "[%d items]" % len(v)
        return "RObj(type=%d, %s, attrs=%s)" % (self.type, v, list(self.attrs))


TYPE_NAMES = {0: "NULL", 1: "symbol", 2: "pairlist", 3: "closure", 4: "environment",
              5: "promise", 6: "language", 9: "char", 10: "logical", 13: "integer",
              14: "double", 15: "complex", 16: "character", 19: "list", 20: "expression",
              24: "raw", 25: "S4"}


class Reader:
    def __init__(self, data):
        self.d = data
        self.pos = 0
        self.refs = []

    def need(self, n, what):
        if self.pos + n > len(self.d):
            raise RError("truncated data reading %s at offset %d (need %d bytes, have %d)"
                         % (what, self.pos, n, len(self.d) - self.pos))

    def int(self, what="int"):
        self.need(4, what)
        (v,) = struct.unpack_from(">i", self.d, self.pos)
        self.pos += 4
        return v

    def length(self):
        n = self.int("length")
        if n == -1:
            hi = self.int("long length hi")
            lo = self.int("long length lo")
            n = (hi << 32) + (lo & 0xFFFFFFFF)
        if n < 0 or n > len(self.d) * 8 + 16:
            raise RError("implausible vector length %d at offset %d" % (n, self.pos))
        return n

    def bytes(self, n, what):
        self.need(n, what)
        b = self.d[self.pos:self.pos + n]
        self.pos += n
        return b

    def header(self):
        fmt = self.bytes(2, "format")
        if fmt != b"X\n":
            raise RError("only XDR serialization is supported, got %r" % fmt)
        version = self.int("version")
        self.int("writer version")
        self.int("min reader version")
        if version == 3:
            n = self.int("native encoding length")
            self.bytes(n, "native encoding")
        elif version != 2:
            raise RError("unsupported serialization version %d" % version)
        return version

    def string(self, flags):
        n = self.int("CHARSXP length")
        if n == -1:
            return None  # NA_character_
        raw = self.bytes(n, "CHARSXP bytes")
        levels = flags >> 12
        if levels & (1 << 2):  # LATIN1
            return raw.decode("latin-1")
        return raw.decode("utf-8", errors="replace")

    def attributes(self):
        pl = self.item()
        out = {}
        if isinstance(pl, RObj) and pl.type == 2:
            for tag, val in pl.value:
                out[tag.name if isinstance(tag, Sym) else str(tag)] = val
        return out

    def item(self):
        at = self.pos
        flags = self.int("flags")
        t = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        if t == NILVALUE_SXP:
            return None
        if t in SPECIAL_NIL_LIKE:
            return Sym("<" + SPECIAL_NIL_LIKE[t] + ">")
        if t == REFSXP:
            idx = flags >> 8
            if idx == 0:
                idx = self.int("ref index")
            if not 1 <= idx <= len(self.refs):
                raise RError("bad reference %d at offset %d" % (idx, at))
            return self.refs[idx - 1]
        if t == 247:  # PERSISTSXP
            if self.int("persist flag") != 0:
                raise RError("bad persistent string vector at offset %d" % at)
            n = self.int("persist length")
            names = [self.item() for _ in range(n)]
            obj = RObj(247, names)
            self.refs.append(obj)
            return obj
        if t in (249, 248):  # NAMESPACESXP, PACKAGESXP
            if self.int("ns flag") != 0:
                raise RError("bad namespace info at offset %d" % at)
            n = self.int("ns length")
            obj = RObj(t, [self.item() for _ in range(n)])
            self.refs.append(obj)
            return obj
        if t == 238:  # ALTREP_SXP
            info = self.item()
            state = self.item()
            attr = self.item()
            return self.altrep(info, state, attr, at)
        if t == 1:  # SYMSXP
            name = self.item()
            s = Sym(name.value if isinstance(name, RObj) else name)
            self.refs.append(s)
            return s
        if t == 9:  # CHARSXP
            return RObj(9, self.string(flags))
        if t in (2, 6, 3, 5, 17, 240, 239):  # pairlist-like
            cells = []
            attrs = {}
            while True:
                if has_attr:
                    a = self.attributes()
                    if not cells:
                        attrs = a
                tag = self.item() if has_tag else None
                car = self.item()
                cells.append((tag, car))
                # CDR: read the next flags; continue the loop while it is a pairlist cell
                save = self.pos
                nflags = self.int("flags")
                nt = nflags & 0xFF
                if nt == t and t == 2:
                    has_attr = bool(nflags & (1 << 9))
                    has_tag = bool(nflags & (1 << 10))
                    continue
                self.pos = save
                cdr = self.item()
                if cdr is not None:
                    cells.append((Sym("<cdr>"), cdr))
                break
            return RObj(2 if t in (2, 239) else t, cells, attrs)
        if t == 4:  # ENVSXP
            obj = RObj(4, {})
            self.refs.append(obj)
            self.int("locked")
            enclos = self.item()
            frame = self.item()
            hashtab = self.item()
            attrs = self.item()
            env = {}
            for part in (frame,):
                if isinstance(part, RObj) and part.type == 2:
                    for tag, v in part.value:
                        env[tag.name if isinstance(tag, Sym) else str(tag)] = v
            if isinstance(hashtab, RObj) and hashtab.type == 19:
                for bucket in hashtab.value:
                    if isinstance(bucket, RObj) and bucket.type == 2:
                        for tag, v in bucket.value:
                            env[tag.name if isinstance(tag, Sym) else str(tag)] = v
            obj.value = env
            obj.attrs = {"enclos": enclos}
            return obj
        if t in (10, 13):
            n = self.length()
            raw = self.bytes(4 * n, TYPE_NAMES[t])
            val = list(struct.unpack(">%di" % n, raw))
        elif t == 14:
            n = self.length()
            val = list(struct.unpack(">%dd" % n, self.bytes(8 * n, "double")))
        elif t == 15:
            n = self.length()
            v = struct.unpack(">%dd" % (2 * n), self.bytes(16 * n, "complex"))
            val = [complex(v[2 * i], v[2 * i + 1]) for i in range(n)]
        elif t == 16:
            n = self.length()
            val = []
            for _ in range(n):
                f = self.int("CHARSXP flags")
                if f & 0xFF != 9:
                    raise RError("expected CHARSXP in character vector at offset %d, got type %d"
                                 % (self.pos - 4, f & 0xFF))
                val.append(self.string(f))
        elif t in (19, 20):
            n = self.length()
            val = [self.item() for _ in range(n)]
        elif t == 24:
            n = self.length()
            val = self.bytes(n, "raw")
        elif t == 25:
            val = None
        else:
            raise RError("unsupported R type %d (%s) at offset %d"
                         % (t, TYPE_NAMES.get(t, "?"), at))
        attrs = self.attributes() if has_attr else {}
        return RObj(t, val, attrs)

    def altrep(self, info, state, attr, at):
        cls = None
        if isinstance(info, RObj) and info.type == 2 and info.value:
            first = info.value[0][1]
            cls = first.name if isinstance(first, Sym) else None
        attrs = {}
        if isinstance(attr, RObj) and attr.type == 2:
            for tag, val in attr.value:
                attrs[tag.name if isinstance(tag, Sym) else str(tag)] = val
        if cls in ("compact_intseq", "compact_realseq"):
            n, start, step = state.value[:3]
            n = int(n)
            seq = [start + i * step for i in range(n)]
            if cls == "compact_intseq":
                return RObj(13, [int(x) for x in seq], attrs)
            return RObj(14, seq, attrs)
        if cls and cls.startswith("wrap_"):
            inner = state.value[0]
            return RObj(inner.type, inner.value, attrs or inner.attrs)
        if cls == "deferred_string":
            arg = state.value[0][1] if state.type == 2 else state
            if arg.type == 13:
                return RObj(16, [None if x == -2147483648 else str(x) for x in arg.value], attrs)
            if arg.type == 14:
                return RObj(16, ["%.15g" % x for x in arg.value], attrs)
            return RObj(16, arg.value, attrs)
        raise RError("unsupported ALTREP class %r at offset %d" % (cls, at))


def decompress(data):
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    if data[:3] == b"BZh":
        return bz2.decompress(data)
    if data[:6] == b"\xfd7zXZ\x00":
        return lzma.decompress(data)
    return data


def unserialize(data):
    r = Reader(data)
    r.header()
    return r.item()


def read_rds(path):
    with open(path, "rb") as f:
        return unserialize(decompress(f.read()))


def read_rda(path):
    """An .rda / .RData file: returns {name: value}."""
    with open(path, "rb") as f:
        data = decompress(f.read())
    if data[:5] not in (b"RDX2\n", b"RDX3\n"):
        raise RError("%s: not an RDX2/RDX3 file (magic %r)" % (path, data[:5]))
    pl = unserialize(data[5:])
    return {tag.name: v for tag, v in pl.value}


def read_lazyload_db(base):
    """A lazy-load database BASE.rdx + BASE.rdb: returns {name: value}."""
    index = read_rds(base + ".rdx")
    idx = {tag: v for tag, v in zip(index.attrs["names"].value, index.value)}
    variables = idx["variables"]
    names = variables.attrs["names"].value
    with open(base + ".rdb", "rb") as f:
        db = f.read()
    out = {}
    for name, loc in zip(names, variables.value):
        off, n = loc.value[:2]
        off, n = int(off), int(n)
        if off < 0 or n < 5 or off + n > len(db):
            raise RError("%s.rdb: entry %r at offset %d length %d out of range (file %d bytes)"
                         % (base, name, off, n, len(db)))
        blob = db[off:off + n]
        (ulen,) = struct.unpack(">I", blob[:4])
        body = blob[4:]
        if body[:1] == b"x" or body[:1] == b"\x78":
            raw = zlib.decompress(body)
        elif body[:1] == b"2":
            raw = bz2.decompress(body[1:])
        elif body[:1] == b"Z":
            raw = lzma.decompress(body[1:])
        elif body[:1] == b"0":
            raw = body[1:]
        else:
            raise RError("%s.rdb: entry %r: unknown compression tag %r" % (base, name, body[:1]))
        if len(raw) != ulen:
            raise RError("%s.rdb: entry %r: inflated to %d bytes, header says %d"
                         % (base, name, len(raw), ulen))
        out[name] = unserialize(raw)
    return out


def describe(v):
    if isinstance(v, RObj):
        n = len(v.value) if isinstance(v.value, (list, bytes)) else "-"
        return "%s[%s]" % (TYPE_NAMES.get(v.type, v.type), n)
    return repr(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rdb", help="lazy-load DB base path (without .rdx/.rdb)")
    ap.add_argument("--rda", help="an .rda/.RData file")
    ap.add_argument("--list", action="store_true", help="only list the objects")
    ap.add_argument("outdir", nargs="?")
    a = ap.parse_args()
    if a.rdb:
        objs = read_lazyload_db(a.rdb)
    elif a.rda:
        objs = read_rda(a.rda)
    else:
        ap.error("give --rdb or --rda")
    if a.list or not a.outdir:
        for k, v in objs.items():
            print(k, describe(v))
        return 0
    os.makedirs(a.outdir, exist_ok=True)
    for k, v in objs.items():
        if isinstance(v, RObj) and v.type == 16:
            lines = ["" if s is None else s for s in v.value]
            path = os.path.join(a.outdir, k + ".txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
            print("%s: %d lines" % (path, len(lines)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
