#!/usr/bin/env python3
"""Latency of `--target cuda` builds of bench/bench_cnn.py's two ReLU CNNs
against ONNX Runtime and PyTorch on the same GPU, measured in one run.

  bench_cuda_cnn.py --dir DIR [--runs N]

DIR holds scripts/gpu_models.py's builds (`prepare`, then `run` builds them):
cnn_plain (224 x 224 x 3, five 3 x 3 convolutions with ReLU), cnn_plain_bn
(the same with a batch norm before each ReLU) and cnn_mobile (32 x 112 x 112,
five depthwise + pointwise blocks with ReLU6). Batch 1,
float32 everywhere and no TF32 (sparsec's GEMMs are exact fp32, so the peers
are asked for the same: ONNX Runtime's CUDA provider with use_tf32=0, PyTorch
with TF32 off); PyTorch with TF32 allowed is printed too. The fp16 columns:
sparsec's *_f16 builds (--weights f16: fp16 weights and GEMM operands, fp32
accumulation, fp32 activations between ops) against PyTorch with every
weight and activation in fp16 (its CUDA graph). Every column times
one call from a host input to a host output, median over --runs after 20
warm-up calls. sparsec: `model bench` (CUDA graphs on, the default, and off).
PyTorch: the ONNX graph's ops (Conv, BatchNormalization, Relu, Clip,
GlobalAveragePool, Flatten, Gemm) as torch.nn.functional calls on the same weights, cuDNN with benchmark
mode on, eagerly and captured as one CUDA graph. ONNX Runtime is n/a where
its CUDA execution provider is not installed.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))
import bench_cnn  # noqa: E402

BUILDS = {"cnn_plain": "plain", "cnn_plain_bn": "plain_bn", "cnn_mobile": "mobile"}
F16_SUFFIX = "_f16"  # scripts/gpu_models.py's fp16-weight builds


def sparsec_ms(binary, runs, graphs):
    if not os.path.exists(binary):
        return None, f"{binary} not built"
    env = dict(os.environ)
    if not graphs:
        env["SPARSEC_CUDA_GRAPHS"] = "0"
    r = subprocess.run([binary, "bench", "--json", "--runs", str(runs), "--warmup", "20"],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return json.loads(r.stdout)["latency_ms"]["median"], ""


def median_ms(fn, runs):
    for _ in range(20):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def ort_ms(model, x, runs, tf32=False):
    try:
        import onnxruntime as ort
    except ImportError:
        return None, "onnxruntime not installed"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return None, "no CUDA execution provider"
    sess = ort.InferenceSession(model.SerializeToString(), providers=[
        ("CUDAExecutionProvider", {"use_tf32": 1 if tf32 else 0})])
    return median_ms(lambda: sess.run(None, {"x": x}), runs), ""


def torch_fn(model, tf32, half=False):
    import torch
    import torch.nn.functional as F
    from onnx import numpy_helper
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    arrays = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    w = {k: torch.from_numpy(a.copy()).cuda() for k, a in arrays.items()}
    if half:
        w = {k: t.half() for k, t in w.items()}

    def attr(node, name, default):
        for a in node.attribute:
            if a.name == name:
                return list(a.ints) if a.ints else a.i
        return default

    def forward(x):
        v = {"x": x}
        for n in model.graph.node:
            a = [v[i] if i in v else w[i] for i in n.input if i]
            if n.op_type == "Conv":
                p = attr(n, "pads", [0, 0, 0, 0])
                y = F.conv2d(a[0], a[1], a[2] if len(a) > 2 else None,
                             stride=attr(n, "strides", [1, 1]), padding=p[:2],
                             groups=attr(n, "group", 1))
            elif n.op_type == "BatchNormalization":
                y = F.batch_norm(a[0], a[3], a[4], a[1], a[2], training=False,
                                 eps=attr(n, "epsilon", 1e-5))
            elif n.op_type == "Relu":
                y = F.relu(a[0])
            elif n.op_type == "Clip":
                # Bounds from the host copies: no device read a call.
                y = torch.clamp(a[0], float(arrays[n.input[1]]), float(arrays[n.input[2]]))
            elif n.op_type == "GlobalAveragePool":
                y = a[0].mean(dim=(2, 3), keepdim=True)
            elif n.op_type == "Flatten":
                y = a[0].flatten(1)
            elif n.op_type == "Gemm":
                y = F.linear(a[0], a[1], a[2])
            else:
                raise SystemExit(f"bench_cuda_cnn: no PyTorch form of {n.op_type}")
            v[n.output[0]] = y
        return v[model.graph.output[0].name]
    return forward


def capture(fn, static_in):
    """fn(static_in) captured once as a CUDA graph (after warm-up on a side
    stream, as PyTorch asks): the graph, to replay on the static input, and
    its static output."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            fn(static_in)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        static_out = fn(static_in)
    return g, static_out


def torch_ms(model, x, runs, tf32, graph, half=False):
    try:
        import torch
    except ImportError:
        return None, "PyTorch not installed"
    body = torch_fn(model, tf32, half)
    # fp16: the input converted on the device, the output back to fp32.
    fn = (lambda t: body(t.half()).float()) if half else body
    if not graph:
        def call():
            with torch.no_grad():
                return fn(torch.from_numpy(x).cuda()).cpu()
        return median_ms(call, runs), ""
    static_in = torch.from_numpy(x).cuda()
    g, static_out = capture(fn, static_in)

    def replay():
        static_in.copy_(torch.from_numpy(x))
        g.replay()
        return static_out.cpu()
    return median_ms(replay, runs), ""


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    print("| model | sparsec (graphs) | sparsec (no graphs) | ONNX Runtime CUDA | "
          "PyTorch eager | PyTorch CUDA graph | PyTorch CUDA graph, TF32 | "
          "sparsec, fp16 weights | PyTorch CUDA graph, fp16 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for build, case in BUILDS.items():
        model = getattr(bench_cnn, case)()
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        binary = os.path.join(args.dir, build, "model")
        cells = []
        for ms, err in (sparsec_ms(binary, args.runs, True),
                        sparsec_ms(binary, args.runs, False),
                        ort_ms(model, x, args.runs, False),
                        torch_ms(model, x, args.runs, False, False),
                        torch_ms(model, x, args.runs, False, True),
                        torch_ms(model, x, args.runs, True, True),
                        sparsec_ms(os.path.join(args.dir, build + F16_SUFFIX, "model"),
                                   args.runs, True),
                        torch_ms(model, x, args.runs, False, True, half=True)):
            cells.append(f"{ms:.3f}" if ms is not None else "n/a")
            if err:
                print(f"<!-- {build}: {err} -->", file=sys.stderr)
        print(f"| {case} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
