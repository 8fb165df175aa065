#!/usr/bin/env python3
"""Per-convolution GPU time of sparsec's CUDA convolutions, float32 and fp16
weights, against PyTorch + cuDNN in the same run, shape by shape.

  bench_cuda_conv_shapes.py prepare --sparsec BIN --out DIR   (compiler machine)
  bench_cuda_conv_shapes.py run --dir DIR --lib LIB [--runs N] (GPU machine)

Each shape is a chain of convolutions with a bias and a ReLU, all reading one
shared weight (so a build's weight pack holds it once): a pointwise
(1 x 1) or 3 x 3 convolution of C channels to C over H x H, or a depthwise
3 x 3 one (group C). `prepare` emits a `--target cuda` build of a chain of 1
and of 9 convolutions per shape, with float32 and with fp16 weights
(`--weights f16`: tensor-core GEMMs, fp32 accumulation, fp32 activations
between ops), storing each weight pack once by digest. `run` builds them with
nvcc against the runtime archives in LIB and times `model bench` (CUDA graphs,
median over --runs); one convolution's time is (t9 - t1) / 8, which leaves
out the copies to and from the host and the launch of the step. PyTorch is
timed the same way: the chains as F.conv2d + F.relu captured as CUDA graphs,
float32 with TF32 off (sparsec's fp32 GEMMs are exact) and everything in
fp16, cuDNN's benchmark mode on. Times in microseconds.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

import bench_cuda_cnn  # noqa: E402 (this directory; its capture())

# (kind, channels, spatial size): pointwise as in MobileNet-style blocks and
# ResNet bottlenecks, 3 x 3 as in VGG/ResNet stages, depthwise 3 x 3.
SHAPES = [("pw", 32, 112), ("pw", 64, 112), ("pw", 128, 56), ("pw", 256, 28),
          ("pw", 256, 56), ("pw", 512, 28), ("pw", 1024, 14),
          ("3x3", 64, 56), ("3x3", 128, 28), ("3x3", 256, 14),
          ("dw", 32, 112), ("dw", 128, 56), ("dw", 256, 28), ("dw", 512, 14)]
LENGTHS = (1, 9)
WEIGHTS = ("f32", "f16")


def name_of(kind, c, h, length, weights):
    return f"{kind}_c{c}_h{h}_x{length}_{weights}"


def chain_model(kind, c, h, length):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(c * 1000 + h)
    k = 1 if kind == "pw" else 3
    cin = 1 if kind == "dw" else c
    w = (rng.standard_normal((c, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
    b = (rng.standard_normal(c) * 0.1).astype(np.float32)
    attrs = {"kernel_shape": [k, k], "pads": [k // 2] * 4}
    if kind == "dw":
        attrs["group"] = c
    nodes, prev = [], "x"
    for i in range(length):
        nodes += [helper.make_node("Conv", [prev, "w", "b"], [f"c{i}"], **attrs),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev = f"r{i}"
    nodes[-1].output[0] = "y"
    shape = [1, c, h, h]
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def prepare(args):
    import onnx
    packs = os.path.join(args.out, "packs")
    os.makedirs(packs, exist_ok=True)
    tmp = os.path.join(args.out, "onnx")
    os.makedirs(tmp, exist_ok=True)
    for kind, c, h in SHAPES:
        for length in LENGTHS:
            path = os.path.join(tmp, f"{kind}_{c}_{h}_{length}.onnx")
            onnx.save(chain_model(kind, c, h, length), path)
            for weights in WEIGHTS:
                d = os.path.join(args.out, name_of(kind, c, h, length, weights))
                subprocess.run([args.sparsec, "compile", path, "--target=cuda",
                                "--compile-to=emit", f"--weights={weights}", "-o", d, "-q"],
                               check=True, stderr=subprocess.DEVNULL)
                w = os.path.join(d, "model.weights")
                digest = hashlib.sha256(open(w, "rb").read()).hexdigest()[:16]
                shutil.move(w, os.path.join(packs, digest))
                with open(os.path.join(d, "weights.ref"), "w") as f:
                    f.write(digest)
    shutil.rmtree(tmp)
    return 0


def build_all(args, names):
    inc = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "runtime", "include")
    arch = ["-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_90,code=compute_90"]
    procs = []
    for n in names:
        d = os.path.join(args.dir, n)
        digest = open(os.path.join(d, "weights.ref")).read().strip()
        shutil.copyfile(os.path.join(args.dir, "packs", digest), os.path.join(d, "model.weights"))
        procs.append((n, subprocess.Popen(
            [args.nvcc, "-std=c++17", "-O3"] + arch +
            ["-I", inc, os.path.join(d, "model.cu"),
             os.path.join(args.lib, "libsparsec_runtime_cuda.a"),
             os.path.join(args.lib, "libsparsec_runtime.a"), "-lcublas", "-lcublasLt", "-lpthread",
             "-o", os.path.join(d, "model")], stderr=subprocess.DEVNULL)))
    for n, p in procs:
        if p.wait() != 0:
            sys.exit(f"bench_cuda_conv_shapes: building {n} failed")


def sparsec_us(args, name):
    r = subprocess.run([os.path.join(args.dir, name, "model"), "bench", "--json", "--runs",
                        str(args.runs), "--warmup", "20"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench_cuda_conv_shapes: {name}: {r.stderr.strip()}")
    return 1e3 * json.loads(r.stdout)["latency_ms"]["median"]


def torch_us(kind, c, h, length, half, runs):
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    m = chain_model(kind, c, h, length)
    from onnx import numpy_helper
    arrays = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    dtype = torch.float16 if half else torch.float32
    w = torch.from_numpy(arrays["w"].copy()).cuda().to(dtype)
    b = torch.from_numpy(arrays["b"].copy()).cuda().to(dtype)
    k = w.shape[-1]
    groups = c if kind == "dw" else 1
    x = torch.randn(1, c, h, h, device="cuda", dtype=dtype)

    def forward(t):
        for _ in range(length):
            t = F.relu(F.conv2d(t, w, b, padding=k // 2, groups=groups))
        return t
    g, _ = bench_cuda_cnn.capture(forward, x)
    for _ in range(20):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e6)
    return float(np.median(times))


def run(args):
    names = [name_of(k, c, h, n, w) for k, c, h in SHAPES for n in LENGTHS for w in WEIGHTS]
    if not args.no_build:
        build_all(args, names)
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    print(f"one convolution (+ bias + ReLU) a shape, (t9 - t1) / 8, us; median of {args.runs}")
    print("| conv | channels | H x W | sparsec fp32 | sparsec fp16 weights | fp16 / fp32 | "
          "PyTorch fp32 | PyTorch fp16 | sparsec fp32 / PyTorch fp32 | "
          "sparsec fp16 / PyTorch fp16 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    span = LENGTHS[1] - LENGTHS[0]
    for kind, c, h in SHAPES:
        ours = {}
        for weights in WEIGHTS:
            t = [sparsec_us(args, name_of(kind, c, h, n, weights)) for n in LENGTHS]
            ours[weights] = (t[1] - t[0]) / span
        theirs = {}
        for half in (False, True):
            if have_torch:
                t = [torch_us(kind, c, h, n, half, args.runs) for n in LENGTHS]
                theirs[half] = (t[1] - t[0]) / span
            else:
                theirs[half] = None

        def cell(v):
            return f"{v:.1f}" if v is not None else "n/a"

        def ratio(a, b):
            return f"{b / a:.2f}x" if a and b else "n/a"
        print(f"| {kind} | {c} | {h} x {h} | {cell(ours['f32'])} | {cell(ours['f16'])} | "
              f"{ratio(ours['f16'], ours['f32'])} | {cell(theirs[False])} | "
              f"{cell(theirs[True])} | {ratio(ours['f32'], theirs[False])} | "
              f"{ratio(ours['f16'], theirs[True])} |", flush=True)
    print("(ratios: how many times faster the first is; > 1 means faster)")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--sparsec", required=True)
    p.add_argument("--out", required=True)
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--lib", required=True, help="directory of the runtime archives")
    r.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    r.add_argument("--runs", type=int, default=200)
    r.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    return prepare(args) if args.cmd == "prepare" else run(args)


if __name__ == "__main__":
    sys.exit(main())
