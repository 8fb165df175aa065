#!/usr/bin/env python3
"""A ReLU-fied LLaMA-style decoder (gated MLPs, down(relu(gate(x)) * up(x)))
on x86: one decode step (KV-cache export, batch 1) in sparsec's dense,
exact and predicted modes, with ONNX Runtime on the same step, in one run.
Prints a table of decode tokens/s.

  bench/bench_gated_decode.py --sparsec build/bin/sparsec
        [--d 1024] [--heads 16] [--ffn 2816] [--layers 4]
        [--gate-bias -1.3] [--gate-rank 32] [--gate-noise 0.1]
        [--calib ../shared/models/opt-byte-s/calib.txt] [--threads 1,2]
        [--runs 100] [--out /tmp/sparsec-gated-bench]

The weights are synthetic (no trained ReLU-LLaMA fits this machine's
tests): projections N(0, 1/d); each gate projection is of rank
--gate-rank plus --gate-noise times an i.i.d. one, with biases around
--gate-bias, so that about 10 % of the gates fire (ProSparse reports about
90 % sparsity for its ReLU LLaMA-2-7B) and a low-rank predictor can find
them, as in trained models. The graph is gen_onnx_models.py's
llama_decoder (rotary embeddings, RMS norms, causal mask). Byte-level
vocabulary: the profile runs on --calib text; the cached context is 127
bytes of it, and the step decodes byte 128. tokens/s = 1000 / median step
latency of the binary's own `bench`, one table per thread count (the
profile and the prefill use the last).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "test", "Frontend", "ONNX"))
from bench_models import kv_decode_step, ort_median, print_step_table  # noqa: E402
import gen_onnx_models  # noqa: E402  (the LLaMA-style graph)


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sparsec", required=True)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--gate-bias", type=float, default=-1.3)
    ap.add_argument("--gate-rank", type=int, default=32)
    ap.add_argument("--gate-noise", type=float, default=0.1)
    ap.add_argument("--calib", default=os.path.join(HERE, "..", "..", "shared", "models",
                                                    "opt-byte-s", "calib.txt"))
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--out", default="/tmp/sparsec-gated-bench")
    a = ap.parse_args()
    try:
        thread_counts = [int(t) for t in a.threads.split(",")]
    except ValueError:
        sys.exit(f"error: --threads wants comma-separated counts, got '{a.threads}'")
    if not thread_counts or min(thread_counts) < 1:
        sys.exit(f"error: --threads wants counts of at least 1, got '{a.threads}'")
    threads = thread_counts[-1]
    if a.d % a.heads or (a.d // a.heads) % 2:
        sys.exit(f"error: --d {a.d} must split into --heads {a.heads} heads of even size")
    if not os.path.isfile(a.calib):
        sys.exit(f"error: calibration text '{a.calib}' not found (give --calib)")
    os.makedirs(a.out, exist_ok=True)
    model = os.path.join(a.out, "model.onnx")
    print(f"building the model (d {a.d}, {a.heads} heads, FFN {a.ffn}, {a.layers} layers)",
          file=sys.stderr)
    gen_onnx_models.RNG = np.random.default_rng(0)
    m = gen_onnx_models.llama_decoder(
        True, d=a.d, ffn=a.ffn, vocab=256, heads=a.heads, layers=a.layers,
        scale=1 / np.sqrt(a.d), gate_bias=a.gate_bias, gate_rank=a.gate_rank,
        gate_noise=a.gate_noise)
    with open(model, "wb") as f:
        f.write(m.SerializeToString())

    prof = os.path.join(a.out, "model.sprof")
    print("profiling", file=sys.stderr)
    table = run([a.sparsec, "profile", model, "--calib", a.calib, "--max-chunks", "64",
                 "-o", prof, "-q", "--threads", str(threads)]).stdout
    builds = {
        "dense": [],
        "exact": ["--profile", prof, "--sparsity", "exact"],
        "predicted": ["--profile", prof, "--sparsity", "predicted"],
        "predicted, fp16 sparse rows": ["--profile", prof, "--sparsity", "predicted",
                                        "--sparse-weights", "f16"],
    }
    remarks = ""
    for i, (name, extra) in enumerate(builds.items()):
        print(f"compiling {name}", file=sys.stderr)
        r = run([a.sparsec, "compile", model, "-o", os.path.join(a.out, str(i)), "-q"] + extra)
        if name == "predicted":
            remarks = r.stderr

    # The cached context: 127 bytes of the calibration text, through the
    # dense build.
    text = open(a.calib, "rb").read()[:128]
    ids = np.frombuffer(text, np.uint8).astype(np.int64)[None]
    step, step_args = kv_decode_step(os.path.join(a.out, "0", "model"), a.out, ids,
                                     layers=a.layers, heads=a.heads,
                                     head_dim=a.d // a.heads, positions=True,
                                     threads=threads)

    import onnxruntime as ort
    tables = []
    for t in thread_counts:
        rows = [(f"ONNX Runtime {ort.__version__}", ort_median(model, step, t, a.runs))]
        for i, name in enumerate(builds):
            r = json.loads(run([os.path.join(a.out, str(i), "model"), "bench", "--json",
                                "--runs", str(a.runs), "--threads", str(t)]
                               + step_args).stdout)
            rows.append((f"sparsec {name}", float(r["latency_ms"]["median"])))
        tables.append((t, rows))

    print(table.strip())
    for line in remarks.splitlines():
        if "predictor for" in line:
            print(line.split("remark: ", 1)[-1])
    weights = os.path.getsize(os.path.join(a.out, "0", "model.weights")) / 2**20
    for t, rows in tables:
        print_step_table(f"\nReLU-LLaMA-style decoder, d {a.d}, FFN {a.ffn}, {a.layers} layers "
                         f"({weights:.0f} MiB of float32 weights), decode step after 127 cached "
                         f"bytes, batch 1, {t} thread(s), median of {a.runs} runs", rows, 35, 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
