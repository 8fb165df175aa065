#!/usr/bin/env python3
"""Writes a small .sprof profile (format: runtime/include/sparsec/rt/Profile.h).

  make_sprof.py OUT MODEL_HASH SITE:TOKENS:c0,c1,... [SITE:...]
  make_sprof.py OUT --garbage
"""
import json
import struct
import sys

out = sys.argv[1]
if sys.argv[2] == "--garbage":
    open(out, "wb").write(b"SPARSECP\x01\x00\x00\x00\xff\xff\x00\x00{")
    sys.exit(0)
sites, counts = [], []
for spec in sys.argv[3:]:
    name, tokens, values = spec.rsplit(":", 2)
    c = [int(v) for v in values.split(",")]
    sites.append({"name": name, "neurons": len(c), "tokens": int(tokens)})
    counts += c
meta = json.dumps({"model_hash": sys.argv[2], "model": "test", "sites": sites}).encode()
data = b"SPARSECP" + struct.pack("<II", 1, len(meta)) + meta
data += b"\0" * ((8 - len(data) % 8) % 8)
data += struct.pack(f"<{len(counts)}Q", *counts)
open(out, "wb").write(data)
