#!/usr/bin/env python3
"""Dense sparsec x86 binaries vs ONNX Runtime (CPU, same thread count) on
the shipped models, measured in one run. Prints a table.

  bench/bench_models.py --sparsec build/bin/sparsec [--models ../shared/models]
                        [--threads 2] [--runs 20] [--out /tmp/sparsec-bench]

Cases: opt-byte-s prefill (batch 1, 128 tokens, no-cache export), opt-byte-s
one decode step (KV-cache export, 127 cached tokens), and the two MLPs.
Latency is the median over --runs after warm-up; sparsec's comes from the
binary's own `bench --json`, ONNX Runtime's from the same loop in Python
around session.run (its Python overhead is a few microseconds).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def ort_median(model, feeds, threads, runs):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, feeds)
    t = []
    for _ in range(runs):
        s = time.perf_counter()
        sess.run(None, feeds)
        t.append((time.perf_counter() - s) * 1e3)
    return float(np.median(t))


def save_inputs(out, prefix, feeds):
    """Saves each feed as OUT/PREFIX_NAME.npy; returns the --input arguments."""
    args = []
    for name, a in feeds.items():
        p = os.path.join(out, f"{prefix}_{name}.npy")
        np.save(p, a)
        args += ["--input", f"{name}={p}"]
    return args


def kv_decode_step(binary, out, ids, layers, heads, head_dim, positions=False,
                   threads=None):
    """The feeds of one decode step of a KV-cache export after the first
    len(ids) - 1 tokens of ids [1, n]: `binary` (a build of it) runs that
    prefix with an empty cache, its present.* outputs become the step's
    past. With `positions`, position_ids too. Returns (feeds, --input
    arguments)."""
    n = ids.shape[1] - 1
    feeds = {"input_ids": ids[:, :n], "attention_mask": np.ones((1, n), np.int64)}
    if positions:
        feeds["position_ids"] = np.arange(n, dtype=np.int64)[None]
    for l in range(layers):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{l}.{kv}"] = np.zeros((1, heads, 0, head_dim), np.float32)
    prefill_out = os.path.join(out, "prefill")
    cmd = [binary, "run", "--output-dir", prefill_out] + save_inputs(out, "prefill", feeds)
    if threads:
        cmd += ["--threads", str(threads)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    step = {"input_ids": ids[:, n:n + 1], "attention_mask": np.ones((1, n + 1), np.int64)}
    if positions:
        step["position_ids"] = np.array([[n]], np.int64)
    for l in range(layers):
        for kv in ("key", "value"):
            step[f"past_key_values.{l}.{kv}"] = np.load(
                os.path.join(prefill_out, f"present.{l}.{kv}.npy"))
    return step, save_inputs(out, "step", step)


def print_step_table(title, rows, name_width, tps_digits):
    """A markdown table of (build, step ms) rows, tokens/s and the speed-up
    over rows[1] (sparsec dense), under `title`."""
    dense = rows[1][1]
    print(title)
    print(f"| {'build':<{name_width}} | {'step ms':>8} | {'tokens/s':>9} | {'vs sparsec dense':>16} |")
    print(f"|{'-' * (name_width + 2)}|{'-' * 9}:|{'-' * 10}:|{'-' * 17}:|")
    for name, ms in rows:
        print(f"| {name:<{name_width}} | {ms:8.3f} | {1000 / ms:9.{tps_digits}f} | {dense / ms:15.2f}x |")


def sparsec_median(sparsec, model, out, feeds, threads, runs):
    os.makedirs(out, exist_ok=True)
    subprocess.run([sparsec, "compile", model, "-o", out, "-q"], check=True)
    args = [os.path.join(out, "model"), "bench", "--json", "--runs", str(runs),
            "--threads", str(threads)]
    for name, a in feeds.items():
        p = os.path.join(out, name.replace("/", "_") + ".npy")
        np.save(p, a)
        args += ["--input", f"{name}={p}"]
    r = subprocess.run(args, check=True, capture_output=True, text=True)
    return float(json.loads(r.stdout)["latency_ms"]["median"])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sparsec", required=True)
    ap.add_argument("--models", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "shared", "models"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", default="/tmp/sparsec-bench")
    args = ap.parse_args()
    m = args.models
    rng = np.random.default_rng(0)

    ids = rng.integers(0, 256, size=(1, 128)).astype(np.int64)
    prefill = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    decode = {"input_ids": ids[:, :1], "attention_mask": np.ones((1, 128), np.int64)}
    for i in range(4):
        for kv in ("key", "value"):
            decode[f"past_key_values.{i}.{kv}"] = rng.standard_normal((1, 4, 127, 64)).astype(np.float32)
    mlp_in = lambda name: {"onnx::Flatten_0": np.load(f"{m}/mlp/{name}.in.0.npy")}
    cases = [
        ("opt-byte-s prefill 128", f"{m}/opt-byte-s/model_nocache_opset17.onnx", prefill),
        ("opt-byte-s decode step", f"{m}/opt-byte-s/model_kvcache_opset17.onnx", decode),
        ("mlp alexa", f"{m}/mlp/alexa_v0.1.onnx", mlp_in("alexa_v0.1")),
        ("mlp hey_rhasspy", f"{m}/mlp/hey_rhasspy_v0.1.onnx", mlp_in("hey_rhasspy_v0.1")),
    ]
    print(f"threads {args.threads}, median of {args.runs} runs")
    print(f"{'case':<26}{'sparsec ms':>12}{'ORT ms':>12}{'ORT/sparsec':>13}")
    for i, (name, model, feeds) in enumerate(cases):
        ours = sparsec_median(args.sparsec, model, os.path.join(args.out, str(i)), feeds,
                              args.threads, args.runs)
        ort_ms = ort_median(model, feeds, args.threads, args.runs)
        print(f"{name:<26}{ours:>12.3f}{ort_ms:>12.3f}{ort_ms / ours:>13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
