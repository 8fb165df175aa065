#!/usr/bin/env python3
"""Out-of-range attribute and constant values through the whole compiler.

  scripts/fuzz-attrs.py [--sparsec build/bin/sparsec] [--dir /tmp/sparsec-fuzz-attrs] [--run]

For every supported op that takes an axis, axes, a permutation, a size, a
count or a shape (as an attribute or a constant input), builds one-node
ONNX models with values far out of range (-2^62 .. 2^62), runs `sparsec
import`, then `sparsec compile --compile-to=emit` for x86 and CUDA, and
with --run builds the x86 binary and runs it on random inputs. Any crash
(a signal) or hang (import/emit 15 s, build 60 s, run 30 s) is printed;
an error message with a non-zero exit is the expected outcome. Exit status
1 if anything crashed or hung. (scripts/fuzz-importer.sh mutates bytes
under sanitizers; this one mutates meaning.)
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
BAD = [-100, -3, 3, 100, 2**31, -(2**31) - 1, 2**62, -(2**62)]


def vi(name, shape):
    return helper.make_tensor_value_info(name, F, shape)


def i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def f32(name, v):
    return numpy_helper.from_array(np.array(v, np.float32), name)


def cases():
    """(tag, model, runnable) triples; not runnable: a valid but huge
    result (2^32 elements and more), slow to fill rather than wrong."""
    out = []

    def add(tag, node, inits=(), x=(2, 4), outs=("y",), runnable=True):
        graph = helper.make_graph([node], "g", [vi("x", list(x))],
                                  [vi(o, None) for o in outs], list(inits))
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        out.append((tag, m, runnable))

    N = helper.make_node
    for a in BAD:
        for op in ("Softmax", "Flatten"):
            add(f"{op}{a}", N(op, ["x"], ["y"], axis=a))
        add(f"Concat{a}", N("Concat", ["x", "x"], ["y"], axis=a))
        add(f"Gather{a}", N("Gather", ["x", "i"], ["y"], axis=a), [i64("i", [0])])
        add(f"GatherIdx{a}", N("Gather", ["x", "i"], ["y"], axis=0), [i64("i", [a])])
        add(f"Split{a}", N("Split", ["x"], ["y", "z"], axis=a), outs=("y", "z"))
        add(f"SplitSizes{a}", N("Split", ["x", "s"], ["y", "z"], axis=1),
            [i64("s", [a, 1])], outs=("y", "z"))
        add(f"Squeeze{a}", N("Squeeze", ["x", "a"], ["y"]), [i64("a", [a])])
        add(f"Unsqueeze{a}", N("Unsqueeze", ["x", "a"], ["y"]), [i64("a", [a])])
        add(f"Transpose{a}", N("Transpose", ["x"], ["y"], perm=[a, 0]))
        for r in ("ReduceMax", "ReduceMean", "ReduceMin"):
            add(f"{r}{a}", N(r, ["x"], ["y"], axes=[a]))
        add(f"ReduceSum{a}", N("ReduceSum", ["x", "a"], ["y"]), [i64("a", [a])])
        add(f"CumSum{a}", N("CumSum", ["x", "a"], ["y"]), [i64("a", a)])
        add(f"SliceAxes{a}", N("Slice", ["x", "s", "e", "a"], ["y"]),
            [i64("s", [0]), i64("e", [1]), i64("a", [a])])
        add(f"SliceBounds{a}", N("Slice", ["x", "s", "e"], ["y"]),
            [i64("s", [a]), i64("e", [-a])])
        add(f"SliceStep{a}", N("Slice", ["x", "s", "e", "a", "t"], ["y"]),
            [i64("s", [0]), i64("e", [2]), i64("a", [0]), i64("t", [a])])
        add(f"Trilu{a}", N("Trilu", ["x", "k"], ["y"]), [i64("k", a)])
        add(f"LayerNorm{a}", N("LayerNormalization", ["x", "g"], ["y", "m", "v"], axis=a),
            [f32("g", [1, 1, 1, 1])], outs=("y", "m", "v"))
        add(f"Expand{a}", N("Expand", ["x", "s"], ["y"]), [i64("s", [a, 4])])
        add(f"Reshape{a}", N("Reshape", ["x", "s"], ["y"]), [i64("s", [a, -1])])
        add(f"ConstantOfShape{a}", N("ConstantOfShape", ["s"], ["y"]), [i64("s", [a, 2])],
            runnable=a < 2**31)
        add(f"Range{a}", N("Range", ["s", "l", "d"], ["y"]),
            [f32("s", 0.0), f32("l", float(a)), f32("d", 0.0)])
        add(f"Cast{a}", N("Cast", ["x"], ["y"], to=a))
        add(f"MaxPoolPads{a}", N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[0, 0, 0, a]),
            x=(1, 2, 4, 4))
        add(f"ConvGroup{a}", N("Conv", ["x", "w"], ["y"], group=a),
            [f32("w", np.ones((2, 2, 1, 1)))], x=(1, 2, 4, 4))
        add(f"BatchNorm{a}", N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"]),
            [f32("s", np.ones(abs(a) % 7 + 1)), f32("b", [0.0]), f32("m", [0.0]), f32("v", [1.0])],
            x=(1, 2, 4, 4))
        add(f"Gemm{a}", N("Gemm", ["x", "w"], ["y"], transA=a), [f32("w", np.ones((4, 3)))])
        add(f"Dropout{a}", N("Dropout", ["x", "r"], ["y"]), [f32("r", float(a))])
    return out


def run(cmd, timeout):
    """'ok', 'error', 'crash' or 'hang'."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hang", ""
    if r.returncode < 0 or r.returncode >= 128 or "Stack dump" in r.stderr:
        return "crash", (r.stderr.strip().splitlines() or [""])[-1][:160]
    return ("ok" if r.returncode == 0 else "error"), ""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sparsec", default="build/bin/sparsec")
    p.add_argument("--dir", default="/tmp/sparsec-fuzz-attrs")
    p.add_argument("--run", action="store_true", help="also build and run the x86 binaries")
    args = p.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    problems = imported = 0
    all_cases = cases()
    for tag, m, runnable in all_cases:
        path = os.path.join(args.dir, tag + ".onnx")
        onnx.save(m, path)
        steps = [("import", [args.sparsec, "import", path, "-o", os.devnull], 15)]
        for target in ("x86", "cuda"):
            steps.append((f"emit {target}", [args.sparsec, "compile", path, "--target", target,
                                             "--compile-to=emit", "-q", "-o",
                                             os.path.join(args.dir, "emit_" + target)], 15))
        for name, cmd, limit in steps:
            status, msg = run(cmd, limit)
            if status in ("crash", "hang"):
                problems += 1
                print(f"{status.upper()} {name} {tag} {msg}")
            if status != "ok":
                break
            if name == "import":
                imported += 1
        else:
            if not args.run or not runnable:
                continue
            binary = os.path.join(args.dir, "bin_" + tag)
            status, msg = run([args.sparsec, "compile", path, "-q", "-o", binary], 60)
            if status in ("crash", "hang"):
                problems += 1
                print(f"{status.upper()} build {tag} {msg}")
            if status != "ok":
                continue
            inputs = []
            for i in m.graph.input:
                shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
                npy = os.path.join(args.dir, f"in_{tag}_{i.name}.npy")
                np.save(npy, np.random.rand(*shape).astype(np.float32))
                inputs += ["--input", f"{i.name}={npy}"]
            status, msg = run([os.path.join(binary, "model"), "run"] + inputs +
                              ["--output-dir", os.path.join(args.dir, "out")], 30)
            if status in ("crash", "hang"):
                problems += 1
                print(f"{status.upper()} run {tag} {msg}")
    print(f"{len(all_cases)} models, {imported} imported, {problems} crashes or hangs")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
