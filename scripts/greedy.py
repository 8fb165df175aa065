#!/usr/bin/env python3
"""Greedy generation with a compiled no-cache byte-level LM binary (one full
forward pass per new byte), compared with an expected continuation.

  greedy.py --binary out/model --prompt-ids ids.npy --n 64 [--expect ref.bin]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--expect")
    args = ap.parse_args()
    ids = np.load(args.prompt_ids).astype(np.int64).reshape(1, -1)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.n):
            np.save(os.path.join(tmp, "ids.npy"), ids)
            np.save(os.path.join(tmp, "mask.npy"), np.ones_like(ids))
            subprocess.run([args.binary, "run", "--input", f"input_ids={tmp}/ids.npy",
                            "--input", f"attention_mask={tmp}/mask.npy", "--output-dir",
                            tmp, "--threads", "2"], check=True, stdout=subprocess.DEVNULL)
            nxt = int(np.load(os.path.join(tmp, "logits.npy"))[0, -1].argmax())
            out.append(nxt)
            ids = np.concatenate([ids, [[nxt]]], axis=1)
    text = bytes(out)
    print("generated:", repr(text.decode("utf-8", "replace")))
    if args.expect:
        want = open(args.expect, "rb").read()
        if text == want:
            print(f"MATCH {len(want)} bytes")
            return 0
        first = next(i for i in range(min(len(text), len(want))) if text[i] != want[i])
        print(f"MISMATCH at byte {first}: expected {want!r}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
