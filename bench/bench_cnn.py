#!/usr/bin/env python3
"""Dense sparsec x86 binaries vs ONNX Runtime (CPU, same thread count) on two
ReLU CNNs generated here (random weights, fixed seed), measured in one run.
Prints a table.

  bench/bench_cnn.py --sparsec build/bin/sparsec [--threads 1,2] [--runs 30]
                     [--out /tmp/sparsec-bench-cnn]

Cases:
  plain      224x224x3 input, five 3x3 convolutions (32-128 channels, three of
             stride 2) each with bias and ReLU, global pooling, a classifier
             (about 714 MFLOP);
  plain_bn   plain with a BatchNormalization between each convolution and its
             ReLU (as an export that kept its norms; sparsec folds each into
             its convolution's weights, ONNX Runtime into the convolution too);
  mobile     a 32x112x112 input through five MobileNet-style blocks: a 3x3
             depthwise convolution (strides 1, 2, 1, 2, 1), ReLU6 as Clip(0, 6),
             a 1x1 convolution to 64-256 channels, ReLU6; pooling, classifier.
Latency is the median over --runs after warm-up (bench_models.py's timing).
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import ort_median, sparsec_median  # noqa: E402


def _init(name, a):
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def _model(nodes, inits, shape, classes, c):
    rng = np.random.default_rng(1)
    nodes += [helper.make_node("GlobalAveragePool", [nodes[-1].output[0]], ["g"]),
              helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    inits += [_init("fw", rng.standard_normal((classes, c)) * 0.1), _init("fb", np.zeros(classes))]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def plain(batch_norm=False):
    rng = np.random.default_rng(0)
    nodes, inits, prev, c = [], [], "x", 3
    for i, (co, s) in enumerate([(32, 2), (64, 2), (64, 1), (128, 2), (128, 1)]):
        inits += [_init(f"w{i}", rng.standard_normal((co, c, 3, 3)) * np.sqrt(2 / (c * 9))),
                  _init(f"b{i}", rng.standard_normal(co) * 0.1)]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"],
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[s, s]))
        if batch_norm:
            inits += [_init(f"s{i}", 1 + 0.1 * rng.standard_normal(co)),
                      _init(f"o{i}", 0.1 * rng.standard_normal(co)),
                      _init(f"m{i}", 0.1 * rng.standard_normal(co)),
                      _init(f"v{i}", 1 + 0.1 * np.abs(rng.standard_normal(co)))]
            nodes.append(helper.make_node("BatchNormalization",
                                          [f"c{i}", f"s{i}", f"o{i}", f"m{i}", f"v{i}"],
                                          [f"n{i}"]))
        nodes.append(helper.make_node("Relu", [f"n{i}" if batch_norm else f"c{i}"], [f"r{i}"]))
        prev, c = f"r{i}", co
    return _model(nodes, inits, [1, 3, 224, 224], 10, c)


def plain_bn():
    return plain(batch_norm=True)


def mobile():
    rng = np.random.default_rng(0)
    nodes, inits, prev, c = [], [_init("zero", 0.0), _init("six", 6.0)], "x", 32
    for i, (co, s) in enumerate([(64, 1), (128, 2), (128, 1), (256, 2), (256, 1)]):
        inits += [_init(f"dw{i}", rng.standard_normal((c, 1, 3, 3)) * 0.3),
                  _init(f"db{i}", rng.standard_normal(c) * 0.1),
                  _init(f"pw{i}", rng.standard_normal((co, c, 1, 1)) * np.sqrt(2 / c)),
                  _init(f"pb{i}", rng.standard_normal(co) * 0.1)]
        nodes += [helper.make_node("Conv", [prev, f"dw{i}", f"db{i}"], [f"d{i}"], kernel_shape=[3, 3],
                                   pads=[1, 1, 1, 1], strides=[s, s], group=c),
                  helper.make_node("Clip", [f"d{i}", "zero", "six"], [f"dr{i}"]),
                  helper.make_node("Conv", [f"dr{i}", f"pw{i}", f"pb{i}"], [f"p{i}"],
                                   kernel_shape=[1, 1]),
                  helper.make_node("Clip", [f"p{i}", "zero", "six"], [f"pr{i}"])]
        prev, c = f"pr{i}", co
    return _model(nodes, inits, [1, 32, 112, 112], 10, c)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sparsec", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default="/tmp/sparsec-bench-cnn")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(f"median of {args.runs} runs")
    print(f"| case | threads | sparsec ms | ORT ms | ORT / sparsec |")
    print(f"|---|---:|---:|---:|---:|")
    for name, make in (("plain", plain), ("plain_bn", plain_bn), ("mobile", mobile)):
        path = os.path.join(args.out, name + ".onnx")
        m = make()
        onnx.save(m, path)
        shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
        feeds = {"x": np.random.default_rng(2).standard_normal(shape).astype(np.float32)}
        for t in (int(v) for v in args.threads.split(",")):
            ours = sparsec_median(args.sparsec, path, os.path.join(args.out, name), feeds, t,
                                  args.runs)
            theirs = ort_median(path, feeds, t, args.runs)
            print(f"| {name} | {t} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
