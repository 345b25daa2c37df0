#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Reads safetensors files with the standard library alone and prints what they hold, for the engine's tests.

For each file: {"tensors": {name: {"dtype", "shape", "sum", "sum_abs"}}, "metadata": ...}; with two files, also
"max_relative": the largest |a - b| / max(|b|_inf, tiny) of any tensor (by name, same shapes). The format is read
from its specification (github.com/huggingface/safetensors): an unsigned 64-bit little-endian header length, a
UTF-8 JSON header, then each tensor's bytes at its data_offsets, little-endian, row-major.
"""
import array
import json
import struct
import sys

SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}


def values(dtype, raw):
    if dtype == "F32":
        a = array.array("f")
        a.frombytes(raw)
    elif dtype == "F64":
        a = array.array("d")
        a.frombytes(raw)
    elif dtype == "BF16":
        h = array.array("H")
        h.frombytes(raw)
        a = array.array("f")
        a.frombytes(struct.pack(f"<{len(h)}I", *(x << 16 for x in h)))
    elif dtype == "F16":
        a = [struct.unpack("<e", raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
    else:
        raise SystemExit(f"dtype {dtype} is not read here")
    if sys.byteorder != "little" and dtype in ("F32", "F64"):
        a.byteswap()
    return a


def read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
        data = f.read()
    out = {"metadata": header.pop("__metadata__", None), "tensors": {}, "values": {}}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        count = 1
        for d in e["shape"]:
            count *= d
        if end - begin != count * SIZES[e["dtype"]] or end > len(data):
            raise SystemExit(f"{path}: {name}: {end - begin} bytes for {e['shape']} of {e['dtype']}")
        v = values(e["dtype"], data[begin:end])
        out["values"][name] = v
        out["tensors"][name] = {"dtype": e["dtype"], "shape": e["shape"], "sum": float(sum(v)),
                                "sum_abs": float(sum(abs(x) for x in v))}
    return out


def main():
    files = [read(p) for p in sys.argv[1:]]
    report = {"files": [{"tensors": f["tensors"], "metadata": f["metadata"]} for f in files]}
    if len(files) == 2:
        a, b = files[0]["values"], files[1]["values"]
        worst = 0.0
        for name in set(a) & set(b):
            scale = max((abs(x) for x in b[name]), default=0.0) or 1e-30
            worst = max(worst, max((abs(x - y) for x, y in zip(a[name], b[name])), default=0.0) / scale)
        report["max_relative"] = worst
    json.dump(report, sys.stdout)
    print()


if __name__ == "__main__":
    main()
