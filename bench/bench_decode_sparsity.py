#!/usr/bin/env python3
"""opt-byte-s decode step (KV-cache export, batch 1) in sparsec's dense,
exact and predicted modes (fp32 and fp16-stored sparse weights), with ONNX
Runtime on the same step as the peer, in one run. Prints decode tokens/s.

  bench/bench_decode_sparsity.py --sparsec build/bin/sparsec
        [--models ../shared/models] [--threads 2] [--runs 200]
        [--out /tmp/sparsec-decode-bench]

The profile comes from `sparsec profile` on calib.txt; the cached context is
the first 127 bytes of heldout.txt (its K/V computed by the dense build), and
the step decodes byte 128. tokens/s = 1000 / median step latency.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import kv_decode_step, ort_median, print_step_table  # noqa: E402


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sparsec", required=True)
    ap.add_argument("--models", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "shared", "models"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--out", default="/tmp/sparsec-decode-bench")
    a = ap.parse_args()
    base = os.path.join(a.models, "opt-byte-s")
    model = os.path.join(base, "model_kvcache_opset17.onnx")
    os.makedirs(a.out, exist_ok=True)
    prof = os.path.join(a.out, "kv.sprof")
    run([a.sparsec, "profile", model, "--calib", os.path.join(base, "calib.txt"),
         "-o", prof, "-q"])

    builds = {
        "dense": [],
        "exact": ["--profile", prof, "--sparsity", "exact"],
        "predicted": ["--profile", prof, "--sparsity", "predicted"],
        "predicted fp16": ["--profile", prof, "--sparsity", "predicted",
                           "--sparse-weights", "f16"],
    }
    for i, (name, extra) in enumerate(builds.items()):
        subprocess.run([a.sparsec, "compile", model, "-o",
                        os.path.join(a.out, str(i)), "-q"] + extra, check=True,
                       stderr=subprocess.DEVNULL)

    # The cached context: 127 bytes of held-out text through the dense build.
    text = open(os.path.join(base, "heldout.txt"), "rb").read()[:128]
    ids = np.frombuffer(text, np.uint8).astype(np.int64)[None]
    step, step_args = kv_decode_step(os.path.join(a.out, "0", "model"), a.out, ids,
                                     layers=4, heads=4, head_dim=64)

    rows = []
    for i, name in enumerate(builds):
        r = json.loads(run([os.path.join(a.out, str(i), "model"), "bench", "--json",
                            "--runs", str(a.runs), "--threads", str(a.threads)] + step_args))
        rows.append((f"sparsec {name}", float(r["latency_ms"]["median"])))

    import onnxruntime as ort
    ort_ms = ort_median(model, step, a.threads, a.runs)
    rows.insert(0, (f"ONNX Runtime {ort.__version__}", ort_ms))

    print_step_table(f"opt-byte-s decode step (127 cached bytes), batch 1, {a.threads} "
                     f"thread(s), median of {a.runs} runs", rows, 26, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
