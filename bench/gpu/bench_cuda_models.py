#!/usr/bin/env python3
"""Whole-model latency of `--target cuda` builds of opt-byte-s, with peers
measured in the same run.

  bench_cuda_models.py --dir DIR [--onnx model_kvcache_opset17.onnx] [--runs N]

DIR holds the builds of scripts/gpu_models.py (run it first: `run` builds
them). For one KV-cache decode step (past 128 tokens) at batch 1, 4 and 16
and a 128-token no-cache prefill, `model bench` medians in ms for the dense,
exact, predicted and fp16 builds, with CUDA graphs (the default: the second
step of a shape is captured, later ones replay) and without
(SPARSEC_CUDA_GRAPHS=0). Peers: ONNX Runtime on the same ONNX file (CUDA
execution provider when installed, else its CPU provider), timed the same
way (inputs from host memory, outputs back to host memory).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

BUILDS = ["kv", "kv_exact", "kv_pred", "kv_f16", "kv_pred_f16"]


def bench(binary, dims, runs, graphs):
    env = dict(os.environ)
    if not graphs:
        env["SPARSEC_CUDA_GRAPHS"] = "0"
    cmd = [binary, "bench", "--json", "--runs", str(runs), "--warmup", "20"]
    for k, v in dims.items():
        cmd += ["--dim", f"{k}={v}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return json.loads(r.stdout)["latency_ms"]["median"], ""


def ort_step(onnx, batch, past, runs):
    try:
        import onnxruntime as ort
    except ImportError:
        return None, "onnxruntime not installed"
    providers = ort.get_available_providers()
    provider = "CUDAExecutionProvider" if "CUDAExecutionProvider" in providers \
        else "CPUExecutionProvider"
    sess = ort.InferenceSession(onnx, providers=[provider])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, 256, (batch, 1)).astype(np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((batch, past + 1), np.int64)
        else:
            feeds[i.name] = rng.standard_normal((batch, 4, past, 64)).astype(np.float32)
    for _ in range(20):
        sess.run(None, feeds)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times)), provider


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--onnx")
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()

    print("## KV-cache decode step, past 128 tokens (median ms per step)\n")
    header = "| build | graphs | batch 1 | batch 4 | batch 16 |"
    print(header)
    print("|---|---|---:|---:|---:|")
    for name in BUILDS:
        binary = os.path.join(args.dir, name, "model")
        for graphs in (True, False):
            cells = []
            for batch in (1, 4, 16):
                ms, err = bench(binary, {"batch": batch, "seq": 1, "past_seq": 128,
                                         "total_seq": 129}, args.runs, graphs)
                cells.append(f"{ms:.4f}" if ms is not None else "error")
                if err:
                    print(f"<!-- {name} batch {batch}: {err} -->", file=sys.stderr)
            print(f"| {name} | {'on' if graphs else 'off'} | " + " | ".join(cells) + " |")
    if args.onnx:
        cells, provider = [], ""
        for batch in (1, 4, 16):
            ms, provider = ort_step(args.onnx, batch, 128, args.runs)
            cells.append(f"{ms:.4f}" if ms is not None else "n/a")
        print(f"| ONNX Runtime ({provider}) | - | " + " | ".join(cells) + " |")

    print("\n## generate: 256 new bytes after the 71-byte reference prompt\n")
    print("| build | decode tokens/s (graphs) | decode tokens/s (no graphs) | time to first token |")
    print("|---|---:|---:|---:|")
    prompt = os.path.join(args.dir, "refs", "ref_input_ids.npy")
    for name in BUILDS:
        cells, ttft = [], ""
        for graphs in (True, False):
            env = dict(os.environ)
            if not graphs:
                env["SPARSEC_CUDA_GRAPHS"] = "0"
            r = subprocess.run([os.path.join(args.dir, name, "model"), "generate",
                                "--prompt-ids", prompt, "--max-new-tokens", "256"],
                               capture_output=True, text=True, env=env)
            line = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
            tps = line.split("decode ")[1].split(" tokens/s")[0] if "decode " in line else "error"
            cells.append(tps)
            if graphs and "first token " in line:
                ttft = line.split("first token ")[1].split(";")[0]
        print(f"| {name} | {cells[0]} | {cells[1]} | {ttft} |")

    print("\n## No-cache prefill, 128 tokens, batch 1 (median ms)\n")
    print("| build | graphs | ms |")
    print("|---|---|---:|")
    for name in ("nc17", "nc17_exact", "nc17_f16"):
        for graphs in (True, False):
            ms, err = bench(os.path.join(args.dir, name, "model"),
                            {"batch": 1, "seq": 128, "total_seq": 128}, args.runs, graphs)
            print(f"| {name} | {'on' if graphs else 'off'} | "
                  f"{ms:.4f} |" if ms is not None else f"| {name} | error: {err} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
