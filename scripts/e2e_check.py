#!/usr/bin/env python3
"""Compiles an ONNX model with sparsec, runs the binary, and compares its
outputs with references: shipped .npy files, the arrays of an .npz, and/or
ONNX Runtime on the same inputs.

  e2e_check.py --sparsec build/bin/sparsec --model m.onnx --out DIR
               [--input NAME=FILE.npy ...] [--npz FILE.npz]
               [--random] [--dim NAME=N ...] [--seed S]
               [--reference OUTPUT=FILE.npy ...] [--onnxruntime]
               [--rtol R] [--atol A] [--compile-arg ARG ...] [--threads N]

Prints one line per compared output ("PASS logits vs reference: max abs
err ..., max rel err ...") and exits non-zero on any mismatch or failure.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

NP_TYPES = {1: np.float32, 11: np.float64, 10: np.float16, 7: np.int64, 6: np.int32,
            5: np.int16, 3: np.int8, 2: np.uint8, 9: np.bool_}


def safe(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def gen_inputs(model_path, dims, seed, vocab):
    import onnx
    m = onnx.load(model_path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    rng = np.random.default_rng(seed)
    out = {}
    for v in m.graph.input:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        shape = []
        for d in t.shape.dim:
            if d.dim_value > 0:
                shape.append(d.dim_value)
            elif d.dim_param in dims:
                shape.append(dims[d.dim_param])
            else:
                sys.exit(f"error: input '{v.name}' has dynamic dim '{d.dim_param}': "
                         f"give it with --dim {d.dim_param}=N")
        dt = NP_TYPES[t.elem_type]
        if "mask" in v.name:
            a = np.ones(shape, dt)
        elif np.issubdtype(dt, np.integer):
            a = rng.integers(0, vocab, size=shape).astype(dt)
        elif dt == np.bool_:
            a = rng.integers(0, 2, size=shape).astype(dt)
        else:
            a = rng.standard_normal(shape).astype(dt)
        out[v.name] = a
    return out


def compare(name, got, want, rtol, atol, label):
    if got.shape != want.shape:
        print(f"FAIL {name} vs {label}: shape {got.shape} != {want.shape}")
        return False
    if got.dtype == np.bool_ or np.issubdtype(got.dtype, np.integer):
        ok = np.array_equal(got, want.astype(got.dtype))
        print(f"{'PASS' if ok else 'FAIL'} {name} vs {label}: exact "
              f"({int(np.sum(got != want))} mismatches)")
        return ok
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    abs_err = np.abs(g - w)
    max_abs = float(abs_err.max()) if abs_err.size else 0.0
    max_rel = float((abs_err / np.maximum(np.abs(w), 1e-30)).max()) if abs_err.size else 0.0
    ok = bool(np.all(abs_err <= atol + rtol * np.abs(w)))
    print(f"{'PASS' if ok else 'FAIL'} {name} vs {label}: max abs err {max_abs:.3g}, "
          f"max rel err {max_rel:.3g} (rtol {rtol:g}, atol {atol:g})")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sparsec", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--input", action="append", default=[])
    ap.add_argument("--npz")
    ap.add_argument("--random", action="store_true")
    ap.add_argument("--dim", action="append", default=[])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--reference", action="append", default=[])
    ap.add_argument("--onnxruntime", action="store_true")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--compile-arg", action="append", default=[])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true", help="reuse DIR/model")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    binary = os.path.join(args.out, "model")
    if not args.no_compile:
        r = subprocess.run([args.sparsec, "compile", args.model, "-o", args.out, "-q"]
                           + args.compile_arg)
        if r.returncode != 0:
            print(f"FAIL compile exited {r.returncode}")
            return 1

    inputs = {}
    references = {}
    for spec in args.input:
        name, path = spec.split("=", 1)
        inputs[name] = np.load(path)
    if args.npz:
        z = np.load(args.npz)
        import onnx
        names = {v.name for v in onnx.load(args.model, load_external_data=False).graph.input}
        for k in z.files:
            (inputs if k in names else references)[k] = z[k]
    if args.random:
        dims = {d.split("=")[0]: int(d.split("=")[1]) for d in args.dim}
        inputs.update(gen_inputs(args.model, dims, args.seed, args.vocab))
    for spec in args.reference:
        name, path = spec.split("=", 1)
        references[name] = np.load(path)

    in_dir = os.path.join(args.out, "inputs")
    res_dir = os.path.join(args.out, "results")
    os.makedirs(in_dir, exist_ok=True)
    cmd = [binary, "run", "--output-dir", res_dir, "--threads", str(args.threads)]
    for name, a in inputs.items():
        p = os.path.join(in_dir, safe(name) + ".npy")
        np.save(p, a)
        cmd += ["--input", f"{name}={p}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL run exited {r.returncode}: {r.stderr.strip()}")
        return 1

    ok = True
    compared = 0
    for name, want in references.items():
        got = np.load(os.path.join(res_dir, safe(name) + ".npy"))
        ok &= compare(name, got, want, args.rtol, args.atol, "reference")
        compared += 1
    if args.onnxruntime:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
        outs = sess.run(None, inputs)
        for meta, want in zip(sess.get_outputs(), outs):
            got = np.load(os.path.join(res_dir, safe(meta.name) + ".npy"))
            ok &= compare(meta.name, got, want, args.rtol, args.atol, "onnxruntime")
            compared += 1
    if compared == 0:
        print("FAIL nothing was compared")
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
