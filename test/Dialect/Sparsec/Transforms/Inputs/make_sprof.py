#!/usr/bin/env python3
"""Writes a small .sprof profile (format: runtime/include/sparsec/rt/Profile.h).

  make_sprof.py OUT MODEL_HASH SITE:TOKENS:c0,c1,... [SITE:...]
                [tiles:SITE:ROWS:BLOCKS:c0,c1,... ...]
  make_sprof.py OUT --garbage

With tile counts (per neuron, the active blocks of ROWS consecutive rows
out of BLOCKS) the file is version 3, else version 1.
"""
import json
import struct
import sys

out = sys.argv[1]
if sys.argv[2] == "--garbage":
    open(out, "wb").write(b"SPARSECP\x01\x00\x00\x00\xff\xff\x00\x00{")
    sys.exit(0)
sites, counts, tiles = [], [], {}
for spec in sys.argv[3:]:
    if spec.startswith("tiles:"):
        _, name, rows, blocks, values = spec.split(":")
        tiles.setdefault(name, []).append(
            (int(rows), int(blocks), [int(v) for v in values.split(",")]))
        continue
    name, tokens, values = spec.rsplit(":", 2)
    c = [int(v) for v in values.split(",")]
    sites.append({"name": name, "neurons": len(c), "tokens": int(tokens)})
    counts += c
tile_counts = []
for site in sites:
    for rows, blocks, c in tiles.get(site["name"], []):
        site.setdefault("tile_rows", []).append(rows)
        site.setdefault("tile_blocks", []).append(blocks)
        tile_counts += c
meta = json.dumps({"model_hash": sys.argv[2], "model": "test", "sites": sites}).encode()
data = b"SPARSECP" + struct.pack("<II", 3 if tiles else 1, len(meta)) + meta
data += b"\0" * ((8 - len(data) % 8) % 8)
data += struct.pack(f"<{len(counts)}Q", *counts)
data += struct.pack(f"<{len(tile_counts)}Q", *tile_counts)
open(out, "wb").write(data)
