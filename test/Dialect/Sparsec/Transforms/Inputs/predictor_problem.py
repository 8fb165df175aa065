#!/usr/bin/env python3
"""Writes a small FFN (.mlir, weights inline) and a .sprof with sampled
(layer input, active mask) pairs for the insert-predictors lit test.

  predictor_problem.py OUT.mlir OUT.sprof [--samples N] [--hash HEX]

The up projection W [16, 64] has rank 4 plus small noise, so a rank-4
predictor finds the active neurons almost perfectly.
"""
import argparse
import json
import struct

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("mlir")
ap.add_argument("sprof")
ap.add_argument("--samples", type=int, default=512)
ap.add_argument("--hash", default="00000000000000aa")
a = ap.parse_args()

rng = np.random.default_rng(7)
d, n = 16, 64
w = (rng.standard_normal((d, 4)) @ rng.standard_normal((4, n)) +
     0.01 * rng.standard_normal((d, n))).astype(np.float32)
b = (-1.5 * np.ones(n)).astype(np.float32)
x = rng.standard_normal((a.samples, d)).astype(np.float32)
mask = (x @ w + b) > 0


def dense(arr):
    return "dense<[" + ", ".join(
        "[" + ", ".join(f"{v:.8e}" for v in row) + "]" for row in arr) + "]>" \
        if arr.ndim == 2 else "dense<[" + ", ".join(f"{v:.8e}" for v in arr) + "]>"


with open(a.mlir, "w") as f:
    f.write(f'''module attributes {{sparsec.model_hash = "0x{a.hash}"}} {{
  sparsec.global @up : tensor<{d}x{n}xf32> {{source = "", value = {dense(w)} : tensor<{d}x{n}xf32>}}
  sparsec.global @up_b : tensor<{n}xf32> {{source = "", value = {dense(b)} : tensor<{n}xf32>}}
  sparsec.global @down : tensor<{n}x{d}xf32> {{source = "", value = dense<0.5> : tensor<{n}x{d}xf32>}}
  func.func @ffn(%x: tensor<?x{d}xf32>) -> tensor<?x{d}xf32> {{
    %w = sparsec.weight @up : tensor<{d}x{n}xf32>
    %b = sparsec.weight @up_b : tensor<{n}xf32>
    %w2 = sparsec.weight @down : tensor<{n}x{d}xf32>
    %h = sparsec.linear %x, %w, %b : tensor<?x{d}xf32>, tensor<{d}x{n}xf32>, tensor<{n}xf32> -> tensor<?x{n}xf32>
    %r = sparsec.relu %h : tensor<?x{n}xf32> loc("ffn/Relu")
    %y = sparsec.linear %r, %w2 : tensor<?x{n}xf32>, tensor<{n}x{d}xf32> -> tensor<?x{d}xf32>
    return %y : tensor<?x{d}xf32>
  }}
}}
''')

meta = {"model_hash": a.hash, "model": "predictor_problem",
        "sites": [{"name": "ffn/Relu", "neurons": n, "tokens": a.samples,
                   "samples": a.samples, "input_dim": d}]}
if a.samples == 0:
    meta["sites"][0]["tokens"] = 1
    del meta["sites"][0]["samples"], meta["sites"][0]["input_dim"]
text = json.dumps(meta).encode()
counts = mask.sum(0).astype(np.uint64) if a.samples else np.zeros(n, np.uint64)
bits = np.packbits(mask, axis=1, bitorder="little")
with open(a.sprof, "wb") as f:
    f.write(b"SPARSECP" + struct.pack("<II", 2, len(text)) + text)
    f.write(b"\0" * ((8 - (16 + len(text)) % 8) % 8))
    f.write(counts.tobytes())
    if a.samples:
        f.write(x.tobytes())
        f.write(bits.tobytes())
        f.write(b"\0" * ((8 - bits.size % 8) % 8))
