#!/usr/bin/env python3
"""One FFN decode step at OPT-6.7B shapes: sparsec's dense, exact and
predicted modes (bench_sparse_ffn.cpp) next to ONNX Runtime running the same
FFN (MatMul + Add + Relu + MatMul + Add, fp32) with the same thread count,
in one run. Prints a table.

  bench/bench_sparse_ffn.py --bench build/bin/sparsec-bench-sparse-ffn
        [--threads 2] [--runs 20] [--sparsity 0.9] [--d 4096] [--ffn 16384]
        [--rank 256] [--precision 0.7]

ONNX Runtime computes the dense FFN (it has no activation-sparse path); its
latency is the median over --runs of session.run after warm-up.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def ort_ffn_ms(d, ffn, threads, runs):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = (rng.uniform(-1, 1, (d, ffn)) * 0.02).astype(np.float32)
    w2 = (rng.uniform(-1, 1, (ffn, d)) * 0.02).astype(np.float32)
    b1 = rng.uniform(-1, 1, ffn).astype(np.float32)
    b2 = rng.uniform(-1, 1, d).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["u"]),
             helper.make_node("Add", ["u", "b1"], ["ub"]),
             helper.make_node("Relu", ["ub"], ["h"]),
             helper.make_node("MatMul", ["h", "w2"], ["v"]),
             helper.make_node("Add", ["v", "b2"], ["y"])]
    graph = helper.make_graph(
        nodes, "ffn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, d])],
        [numpy_helper.from_array(a, n) for a, n in
         ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ffn.onnx")
        onnx.save(model, path, save_as_external_data=True,
                  all_tensors_to_one_file=True, location="ffn.data")
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    x = {"x": rng.uniform(-1, 1, (1, d)).astype(np.float32)}
    for _ in range(3):
        sess.run(None, x)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, x)
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times)), ort.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True,
                    help="path of sparsec-bench-sparse-ffn")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=16384)
    ap.add_argument("--rank", type=int, default=256)
    ap.add_argument("--precision", type=float, default=0.7)
    a = ap.parse_args()
    out = subprocess.run(
        [a.bench, "--json", "--threads", str(a.threads), "--runs", str(a.runs),
         "--sparsity", str(a.sparsity), "--d", str(a.d), "--ffn", str(a.ffn),
         "--rank", str(a.rank), "--precision", str(a.precision)],
        check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    ort_ms, ort_version = ort_ffn_ms(a.d, a.ffn, a.threads, a.runs)
    dense = next(m["ms"] for m in r["modes"] if m["name"] == "dense")
    bw = r["bandwidth_gbs"]
    print(f"FFN decode step, batch 1, d {r['d']}, FFN {r['ffn']}, fp32 "
          f"activations, {r['threads']} thread(s), median of {a.runs} runs")
    print(f"sparsity {r['sparsity']:.3f} (power law), predicted density "
          f"{r['predicted_density']:.3f}, predictor rank {r['rank']}; "
          f"read bandwidth {bw:.1f} GB/s")
    print()
    print(f"| {'mode':<28} | {'ms':>8} | {'vs sparsec dense':>16} | "
          f"{'vs ONNX Runtime':>15} | {'weight MB read':>14} | {'bandwidth bound ms':>18} |")
    print(f"|{'-' * 30}|{'-' * 10}:|{'-' * 18}:|{'-' * 17}:|{'-' * 16}:|{'-' * 20}:|")
    rows = [(f"ONNX Runtime {ort_version} (dense)", ort_ms, 2 * r["d"] * r["ffn"] * 4)]
    rows += [(f"sparsec {m['name']}", m["ms"], m["bytes"]) for m in r["modes"]]
    for name, ms, nbytes in rows:
        print(f"| {name:<28} | {ms:8.3f} | {dense / ms:15.2f}x | "
              f"{ort_ms / ms:14.2f}x | {nbytes / 1e6:14.1f} | "
              f"{nbytes / (bw * 1e6):18.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
