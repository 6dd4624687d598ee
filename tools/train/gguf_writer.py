#!/usr/bin/env python3
"""A minimal GGUF v3 writer in plain Python (no `gguf` package).

Layout: magic "GGUF", u32 version 3, u64 tensor count, u64 metadata count; metadata
key/value pairs (key: u64 length + UTF-8 bytes; u32 value type; value); tensor infos (name,
u32 n_dims, u64 dims innermost first, u32 ggml type, u64 offset into the data section);
padding to general.alignment (32); the tensor data, each tensor aligned to 32 bytes.
"""
import struct

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGN = 32

# metadata value types
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, \
    T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(13)

# ggml tensor types
GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8
GGML_BF16 = 30

# llama_ftype
FTYPE_ALL_F32, FTYPE_MOSTLY_F16, FTYPE_MOSTLY_Q8_0 = 0, 1, 7


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


_SCALAR = {T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I",
           T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q",
           T_FLOAT64: "<d"}


def _value(vtype, v, atype=None):
    if vtype == T_STRING:
        return _str(v)
    if vtype == T_ARRAY:
        out = [struct.pack("<IQ", atype, len(v))]
        if atype == T_STRING:
            out.extend(_str(x) for x in v)
        else:
            fmt = _SCALAR[atype]
            out.append(struct.pack("<%d%s" % (len(v), fmt[1]), *v))
        return b"".join(out)
    return struct.pack(_SCALAR[vtype], v)


class GGUFWriter:
    def __init__(self):
        self.kv = []       # (key, vtype, value, atype)
        self.tensors = []  # (name, dims innermost-first, ggml type, bytes)

    def add(self, key, vtype, value, atype=None):
        if any(k == key for k, *_ in self.kv):
            raise ValueError("duplicate key " + key)
        self.kv.append((key, vtype, value, atype))

    def add_string(self, key, v):
        self.add(key, T_STRING, v)

    def add_u32(self, key, v):
        self.add(key, T_UINT32, v)

    def add_f32(self, key, v):
        self.add(key, T_FLOAT32, v)

    def add_bool(self, key, v):
        self.add(key, T_BOOL, v)

    def add_array(self, key, atype, v):
        self.add(key, T_ARRAY, list(v), atype)

    def add_tensor(self, name, shape_rowmajor, ggml_type, data):
        """shape_rowmajor: the numpy/PyTorch shape (outermost first); data: raw bytes."""
        dims = list(reversed(shape_rowmajor))
        n = 1
        for d in dims:
            n *= d
        expect = {GGML_F32: 4 * n, GGML_F16: 2 * n, GGML_BF16: 2 * n,
                  GGML_Q8_0: (n // 32) * 34}[ggml_type]
        if len(data) != expect:
            raise ValueError("%s: %d bytes, expected %d" % (name, len(data), expect))
        self.tensors.append((name, dims, ggml_type, bytes(data)))

    def write(self, path):
        head = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))]
        for key, vtype, value, atype in self.kv:
            head.append(_str(key) + struct.pack("<I", vtype) + _value(vtype, value, atype))
        offset = 0
        for name, dims, t, data in self.tensors:
            head.append(_str(name) + struct.pack("<I", len(dims))
                        + struct.pack("<%dQ" % len(dims), *dims) + struct.pack("<IQ", t, offset))
            offset += len(data)
            offset += (-offset) % ALIGN
        h = b"".join(head)
        h += b"\0" * ((-len(h)) % ALIGN)
        with open(path, "wb") as f:
            f.write(h)
            for name, dims, t, data in self.tensors:
                f.write(data)
                f.write(b"\0" * ((-len(data)) % ALIGN))
        return len(h) + offset


def quantize_q8_0(values):
    """values: a flat sequence of floats (length a multiple of 32) -> q8_0 bytes (numpy if
    available)."""
    import numpy as np
    x = np.asarray(values, dtype=np.float32).reshape(-1, 32)
    amax = np.abs(x).max(axis=1)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0)
    q = np.round(x * inv[:, None]).clip(-127, 127).astype(np.int8)
    out = np.empty((x.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()
