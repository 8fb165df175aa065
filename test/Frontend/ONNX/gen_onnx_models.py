#!/usr/bin/env python3
"""Writes small ONNX models for the importer tests.

Usage: gen_onnx_models.py CASE OUTPUT
Every case is deterministic (fixed seeds), so FileCheck lines can name
shapes and values.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), opset=17, name="test"):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


F = TensorProto.FLOAT
I64 = TensorProto.INT64


def case_elementwise():
    ops = ["Relu", "Sigmoid", "Tanh", "Exp", "Erf", "Sqrt", "Neg", "Abs",
           "Reciprocal", "Log"]
    nodes, prev = [], "x"
    for i, op in enumerate(ops):
        nodes.append(helper.make_node(op, [prev], [f"u{i}"], name=f"{op.lower()}_node"))
        prev = f"u{i}"
    for i, op in enumerate(["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"]):
        nodes.append(helper.make_node(op, [prev, "b"], [f"b{i}"], name=f"{op.lower()}_node"))
        prev = f"b{i}"
    nodes.append(helper.make_node("Less", [prev, "b"], ["lt"], name="less_node"))
    nodes.append(helper.make_node("Where", ["lt", prev, "b"], ["y"], name="where_node"))
    return model(nodes, [vi("x", F, ["n", 8]), vi("b", F, [8])], [vi("y", F, ["n", 8])], opset=13)


def case_gemm_mlp():
    nodes = [
        helper.make_node("Flatten", ["x"], ["f"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["f", "w1", "b1"], ["h"], transB=1, name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1, name="fc2"),
    ]
    inits = [init("w1", f32(16, 12)), init("b1", f32(16)), init("w2", f32(4, 16)),
             init("b2", f32(4))]
    return model(nodes, [vi("x", F, [1, 3, 4])], [vi("y", F, [1, 4])], inits, opset=13)


def case_matmul_ffn():
    # x . W1 + b1 -> relu -> . W2 + b2, as PyTorch exports nn.Linear.
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1/MatMul"),
        helper.make_node("Add", ["b1", "m1"], ["a1"], name="fc1/Add"),
        helper.make_node("Relu", ["a1"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["m2"], name="fc2/MatMul"),
        helper.make_node("Add", ["b2", "m2"], ["y"], name="fc2/Add"),
    ]
    inits = [init("w1", f32(8, 32)), init("b1", f32(32)), init("w2", f32(32, 8)),
             init("b2", f32(8))]
    return model(nodes, [vi("x", F, ["batch", "seq", 8])], [vi("y", F, ["batch", "seq", 8])],
                 inits, opset=14)


def case_layernorm_decomposed():
    eps = np.array(1e-5, np.float32)
    two = np.array(2.0, np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1], name="ln/ReduceMean"),
        helper.make_node("Sub", ["x", "m"], ["d"], name="ln/Sub"),
        helper.make_node("Pow", ["d", "two"], ["p"], name="ln/Pow"),
        helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1], name="ln/ReduceMean_1"),
        helper.make_node("Add", ["v", "eps"], ["ve"], name="ln/Add"),
        helper.make_node("Sqrt", ["ve"], ["s"], name="ln/Sqrt"),
        helper.make_node("Div", ["d", "s"], ["n"], name="ln/Div"),
        helper.make_node("Mul", ["n", "g"], ["ng"], name="ln/Mul"),
        helper.make_node("Add", ["ng", "beta"], ["y"], name="ln/Add_1"),
    ]
    inits = [init("two", two), init("eps", eps), init("g", f32(16)), init("beta", f32(16))]
    return model(nodes, [vi("x", F, ["n", 16])], [vi("y", F, ["n", 16])], inits, opset=14)


def case_layernorm():
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1,
                              epsilon=1e-6, name="ln")]
    inits = [init("g", f32(16)), init("b", f32(16))]
    return model(nodes, [vi("x", F, ["n", 16])], [vi("y", F, ["n", 16])], inits, opset=17)


def case_gelu_erf():
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["d"], name="gelu/Div"),
        helper.make_node("Erf", ["d"], ["e"], name="gelu/Erf"),
        helper.make_node("Add", ["e", "one"], ["a"], name="gelu/Add"),
        helper.make_node("Mul", ["x", "a"], ["m"], name="gelu/Mul"),
        helper.make_node("Mul", ["m", "half"], ["y"], name="gelu/Mul_1"),
    ]
    inits = [init("sqrt2", np.array(1.4142135, np.float32)),
             init("one", np.array(1.0, np.float32)), init("half", np.array(0.5, np.float32))]
    return model(nodes, [vi("x", F, ["n", 32])], [vi("y", F, ["n", 32])], inits, opset=14)


def case_gelu_op():
    nodes = [helper.make_node("Gelu", ["x"], ["y"], approximate="tanh", name="gelu")]
    return model(nodes, [vi("x", F, [2, 8])], [vi("y", F, [2, 8])], opset=20)


def case_shapes():
    # The exporters' shape arithmetic: Shape -> Gather -> Unsqueeze -> Concat
    # -> Reshape, plus Squeeze/Expand/Slice/Split/Transpose/Concat.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["s0"], axis=0, name="gather"),
        helper.make_node("Unsqueeze", ["s0", "ax0"], ["s0u"], name="unsqueeze"),
        helper.make_node("Concat", ["s0u", "c4", "c6"], ["shp"], axis=0, name="concat"),
        helper.make_node("Reshape", ["x", "shp"], ["r"], name="reshape"),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1], name="transpose"),
        helper.make_node("Split", ["t", "split"], ["p0", "p1"], axis=1, name="split"),
        helper.make_node("Concat", ["p1", "p0"], ["c"], axis=1, name="concat2"),
        helper.make_node("Slice", ["c", "st", "en", "ax2"], ["sl"], name="slice"),
        helper.make_node("Unsqueeze", ["sl", "ax0"], ["u"], name="unsqueeze2"),
        helper.make_node("Squeeze", ["u", "ax0"], ["sq"], name="squeeze"),
        helper.make_node("Expand", ["sq", "eshape"], ["y"], name="expand"),
    ]
    inits = [init("zero", np.array(0, np.int64)), init("ax0", np.array([0], np.int64)),
             init("c4", np.array([4], np.int64)), init("c6", np.array([6], np.int64)),
             init("split", np.array([2, 4], np.int64)), init("st", np.array([1], np.int64)),
             init("en", np.array([3], np.int64)), init("ax2", np.array([2], np.int64)),
             init("eshape", np.array([1, 1, 1], np.int64))]
    return model(nodes, [vi("x", F, ["b", 24])], [vi("y", F, ["b", 6, 2])], inits, opset=13)


def case_mask_arith():
    # Integer mask/position arithmetic that folds once seq is pinned.
    nodes = [
        helper.make_node("Shape", ["ids"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "one"], ["n"], axis=0, name="gather"),
        helper.make_node("Range", ["zero", "n", "one"], ["pos"], name="range"),
        helper.make_node("Unsqueeze", ["pos", "ax1"], ["col"], name="unsq_col"),
        helper.make_node("Unsqueeze", ["pos", "ax0"], ["row"], name="unsq_row"),
        helper.make_node("LessOrEqual", ["row", "col"], ["causal"], name="le"),
        helper.make_node("Where", ["causal", "fzero", "fneg"], ["mask"], name="where"),
        helper.make_node("CumSum", ["ids", "one"], ["cs"], name="cumsum"),
        helper.make_node("Trilu", ["mask"], ["tri"], upper=0, name="trilu"),
        helper.make_node("ConstantOfShape", ["s"], ["ones"],
                         value=helper.make_tensor("v", I64, [1], [1]), name="cos"),
        helper.make_node("Cast", ["ones"], ["onesf"], to=F, name="cast"),
    ]
    inits = [init("one", np.array(1, np.int64)), init("zero", np.array(0, np.int64)),
             init("ax0", np.array([0], np.int64)), init("ax1", np.array([1], np.int64)),
             init("fzero", np.array(0.0, np.float32)), init("fneg", np.array(-1e4, np.float32))]
    return model(nodes, [vi("ids", I64, [1, "seq"])],
                 [vi("tri", F, ["seq", "seq"]), vi("cs", I64, [1, "seq"]),
                  vi("onesf", F, [1, "seq"])], inits, opset=14)


def case_attention():
    # softmax(q . k^T * s + mask) . v over [B, H, S, D].
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="att/Transpose"),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="att/MatMul"),
        helper.make_node("Mul", ["s", "scale"], ["ss"], name="att/Mul"),
        helper.make_node("Add", ["ss", "mask"], ["sm"], name="att/Add"),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1, name="att/Softmax"),
        helper.make_node("MatMul", ["p", "v"], ["y"], name="att/MatMul_1"),
    ]
    inits = [init("scale", np.array(0.125, np.float32))]
    shp = ["b", 2, "s", 8]
    return model(nodes, [vi("q", F, shp), vi("k", F, shp), vi("v", F, shp),
                         vi("mask", F, ["b", 1, "s", "s"])], [vi("y", F, shp)], inits, opset=14)


def case_cnn():
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[1, 1], name="conv"),
        helper.make_node("BatchNormalization", ["c", "bs", "bb", "bm", "bv"], ["bn"],
                         epsilon=1e-5, name="bn"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["mp"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("AveragePool", ["mp"], ["ap"], kernel_shape=[2, 2], strides=[1, 1],
                         name="avgpool"),
        helper.make_node("GlobalAveragePool", ["ap"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1, name="fc"),
    ]
    inits = [init("w", f32(4, 3, 3, 3)), init("b", f32(4)), init("bs", f32(4)),
             init("bb", f32(4)), init("bm", f32(4)), init("bv", np.abs(f32(4)) + 0.5),
             init("fw", f32(10, 4)), init("fb", f32(10))]
    return model(nodes, [vi("x", F, [1, 3, 8, 8])], [vi("y", F, [1, 10])], inits, opset=13)


def case_conv_mix():
    # Every convolution and pooling path of both runtimes, batch "n": a
    # grouped conv (2 channels a group) with dilation, uneven pads and a
    # stride, batch norm + ReLU, max pooling with pads, average pooling
    # counting its padding, a pointwise conv, a strided 1x1 conv, ReduceMean
    # over the spatial dims and ReduceMax over the channels; a depthwise conv
    # with two outputs a channel and a batch norm; a strided depthwise conv
    # with dilation and uneven pads; a 3-D depthwise conv padding a depth-1
    # input (output depth 3, two planes of bias only); a 1-D conv with ReLU
    # and global max pooling.
    nodes = [
        helper.make_node("Conv", ["x", "wg", "bg"], ["g1"], kernel_shape=[3, 3], group=2,
                         dilations=[2, 1], pads=[2, 1, 1, 0], strides=[1, 2], name="grouped"),
        helper.make_node("BatchNormalization", ["g1", "bs", "bb", "bm", "bv"], ["bn"],
                         epsilon=1e-3, name="bn"),
        helper.make_node("Relu", ["bn"], ["r1"], name="relu"),
        helper.make_node("MaxPool", ["r1"], ["mp"], kernel_shape=[3, 2], strides=[2, 1],
                         pads=[1, 0, 1, 1], name="maxpool"),
        helper.make_node("AveragePool", ["mp"], ["ap"], kernel_shape=[2, 2], strides=[2, 2],
                         pads=[1, 1, 1, 1], count_include_pad=1, name="avgpool"),
        helper.make_node("Conv", ["ap", "wp", "bp"], ["pw"], kernel_shape=[1, 1],
                         name="pointwise"),
        helper.make_node("Conv", ["pw", "ws"], ["st"], kernel_shape=[1, 1], strides=[2, 2],
                         name="strided1x1"),
        helper.make_node("ReduceMean", ["st"], ["y1"], axes=[2, 3], keepdims=0, name="mean"),
        helper.make_node("ReduceMax", ["pw"], ["y2"], axes=[1], keepdims=1, name="chanmax"),
        helper.make_node("Conv", ["x", "wd", "bd"], ["dw"], kernel_shape=[3, 3], group=4,
                         pads=[1, 1, 1, 1], name="depthwise"),
        helper.make_node("BatchNormalization", ["dw", "ds", "db", "dm", "dv"], ["dwn"],
                         epsilon=1e-5, name="dw_bn"),
        helper.make_node("GlobalAveragePool", ["dwn"], ["y3"], name="gap"),
        helper.make_node("Conv", ["x", "wdd"], ["y5"], kernel_shape=[3, 3], group=4,
                         dilations=[2, 1], strides=[2, 2], pads=[2, 1, 1, 1],
                         name="depthwise_dilated"),
        helper.make_node("Conv", ["v", "wd3", "bd3"], ["y6"], kernel_shape=[1, 3, 3],
                         group=4, pads=[1, 1, 1, 1, 1, 1], name="depthwise_3d"),
        helper.make_node("Conv", ["s", "w1"], ["c1"], kernel_shape=[4], pads=[2, 1],
                         strides=[3], name="conv1d"),
        helper.make_node("Relu", ["c1"], ["r1d"], name="relu1d"),
        helper.make_node("GlobalMaxPool", ["r1d"], ["y4"], name="gmp"),
    ]
    inits = [init("wg", f32(6, 2, 3, 3)), init("bg", f32(6)), init("bs", f32(6)),
             init("bb", f32(6)), init("bm", f32(6)), init("bv", np.abs(f32(6)) + 0.5),
             init("wp", f32(8, 6, 1, 1)), init("bp", f32(8)), init("ws", f32(4, 8, 1, 1)),
             init("wd", f32(8, 1, 3, 3)), init("bd", f32(8)), init("w1", f32(5, 3, 4)),
             init("ds", f32(8)), init("db", f32(8)), init("dm", f32(8)),
             init("dv", np.abs(f32(8)) + 0.5), init("wdd", f32(4, 1, 3, 3)),
             init("wd3", f32(4, 1, 1, 3, 3)), init("bd3", f32(4))]
    return model(nodes, [vi("x", F, ["n", 4, 11, 10]), vi("s", F, ["n", 3, 16]),
                         vi("v", F, ["n", 4, 1, 6, 5])],
                 [vi("y1", F, ["n", 4]), vi("y2", F, ["n", 1, 3, 3]),
                  vi("y3", F, ["n", 8, 1, 1]), vi("y4", F, ["n", 5, 1]),
                  vi("y5", F, ["n", 4, 5, 5]), vi("y6", F, ["n", 4, 3, 6, 5])], inits,
                 opset=17)


def case_activations():
    # Each activation of x (and the ReLU6-style Clip of a product) as its own
    # output; x is drawn wide enough to cross every bound.
    nodes = [
        helper.make_node("Clip", ["x", "lo", "hi"], ["clip"], name="clip"),
        helper.make_node("Clip", ["x", "", "hi"], ["clip_hi"], name="clip_hi"),
        helper.make_node("Clip", ["x"], ["clip_none"], name="clip_none"),
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Clip", ["h", "zero", "six"], ["relu6"], name="relu6"),
        helper.make_node("LeakyRelu", ["x"], ["leaky"], alpha=0.1, name="leaky"),
        helper.make_node("PRelu", ["x", "slope"], ["prelu"], name="prelu"),
        helper.make_node("Elu", ["x"], ["elu"], alpha=0.7, name="elu"),
        helper.make_node("Selu", ["x"], ["selu"], name="selu"),
        helper.make_node("Celu", ["x"], ["celu"], alpha=2.0, name="celu"),
        helper.make_node("ThresholdedRelu", ["x"], ["thr"], alpha=0.3, name="thr"),
        helper.make_node("HardSigmoid", ["x"], ["hsig"], alpha=0.3, beta=0.4, name="hsig"),
        helper.make_node("HardSwish", ["x"], ["hswish"], name="hswish"),
        helper.make_node("Softplus", ["x"], ["softplus"], name="softplus"),
        helper.make_node("Softsign", ["x"], ["softsign"], name="softsign"),
    ]
    inits = [init("lo", np.float32(-0.5)), init("hi", np.float32(0.8)),
             init("zero", np.float32(0)), init("six", np.float32(6)),
             init("wd", 2 * f32(6, 1, 3, 3)), init("bd", f32(6)),
             init("w", 3 * f32(8, 8)), init("slope", f32(8))]
    outs = ["clip", "clip_hi", "clip_none", "relu6", "leaky", "prelu", "elu", "selu",
            "celu", "thr", "hsig", "hswish", "softplus", "softsign"]
    return model(nodes, [vi("x", F, ["n", 8])], [vi(o, F, ["n", 8]) for o in outs],
                 inits, opset=17)


def case_mobile_cnn():
    # MobileNet-style blocks: Conv, ReLU6 as Clip(0, 6), a strided depthwise
    # Conv with ReLU6, PRelu with a slope a channel, HardSwish, then pooling
    # and a classifier.
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Clip", ["c1", "zero", "six"], ["r1"], name="relu6"),
        helper.make_node("Conv", ["r1", "wd", "bd"], ["d1"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], strides=[2, 2], group=6, name="dw"),
        helper.make_node("Clip", ["d1", "zero", "six"], ["rd"], name="dw_relu6"),
        helper.make_node("Conv", ["rd", "w2", "b2"], ["c2"], kernel_shape=[1, 1], name="conv2"),
        helper.make_node("PRelu", ["c2", "slope"], ["p2"], name="prelu"),
        helper.make_node("HardSwish", ["p2"], ["s2"], name="hswish"),
        helper.make_node("GlobalAveragePool", ["s2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1, name="fc"),
    ]
    inits = [init("w1", f32(6, 3, 3, 3)), init("b1", f32(6)),
             init("zero", np.float32(0)), init("six", np.float32(6)),
             init("wd", 2 * f32(6, 1, 3, 3)), init("bd", f32(6)),
             init("w2", f32(5, 6, 1, 1)), init("b2", f32(5)),
             init("slope", 0.25 * f32(5, 1, 1)),
             init("fw", f32(4, 5)), init("fb", f32(4))]
    return model(nodes, [vi("x", F, [1, 3, 8, 8])], [vi("y", F, [1, 4])], inits, opset=17)


def case_same_pads():
    # auto_pad SAME_UPPER on a strided Conv (7 -> 4 positions: 2 pads, one a
    # side) and SAME_LOWER on a 2 x 2 MaxPool (4 -> 4: one pad, before).
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], auto_pad="SAME_UPPER",
                         name="conv"),
        helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2], auto_pad="SAME_LOWER",
                         name="pool"),
    ]
    return model(nodes, [vi("x", F, [1, 3, 7, 7])], [vi("y", F, [1, 2, 4, 4])],
                 [init("w", f32(2, 3, 3, 3))], opset=13)


def case_same_pads_dynamic():
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", name="conv")]
    return model(nodes, [vi("x", F, [1, 3, "h", 7])], [vi("y", F, [1, 2, "h", 7])],
                 [init("w", f32(2, 3, 3, 3))], opset=13)


def case_same_pads_and_pads():
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER",
                              pads=[1, 1, 1, 1], name="conv")]
    return model(nodes, [vi("x", F, [1, 3, 7, 7])], [vi("y", F, [1, 2, 7, 7])],
                 [init("w", f32(2, 3, 3, 3))], opset=13)


def case_pads():
    # Pad in every mode, a crop (negative pads) and a constant value; x
    # [n, 3, 5] with n dynamic, so only the padded axes are static.
    def pads(name, values):
        return init(name, np.array(values, np.int64))
    nodes = [
        helper.make_node("Pad", ["x", "p_const", "val"], ["constant"], mode="constant",
                         name="pad_constant"),
        helper.make_node("Pad", ["x", "p_edge"], ["edge"], mode="edge", name="pad_edge"),
        helper.make_node("Pad", ["x", "p_reflect"], ["reflect"], mode="reflect",
                         name="pad_reflect"),
        helper.make_node("Pad", ["x", "p_crop"], ["crop"], name="pad_crop"),
    ]
    inits = [pads("p_const", [0, 1, 2, 0, 0, 1]), init("val", np.float32(-2.5)),
             pads("p_edge", [0, 2, 1, 0, 0, 3]), pads("p_reflect", [0, 2, 3, 0, 1, 4]),
             pads("p_crop", [0, -1, 1, 0, 2, -2])]
    outs = [vi("constant", F, ["n", 4, 8]), vi("edge", F, ["n", 5, 9]),
            vi("reflect", F, ["n", 6, 12]), vi("crop", F, ["n", 4, 4])]
    return model(nodes, [vi("x", F, ["n", 3, 5])], outs, inits, opset=17)


def case_pad_dynamic():
    nodes = [helper.make_node("Pad", ["x", "p"], ["y"], name="pad")]
    return model(nodes, [vi("x", F, ["n", 3])], [vi("y", F, ["m", 3])],
                 [init("p", np.array([1, 0, 0, 0], np.int64))])


def case_clip_tensor_bound():
    nodes = [helper.make_node("Clip", ["x", "lo"], ["y"], name="clip")]
    return model(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])],
                 [init("lo", np.zeros(3, np.float32))])


def case_int_leaky():
    nodes = [helper.make_node("LeakyRelu", ["x"], ["y"], name="ileaky")]
    return model(nodes, [vi("x", TensorProto.INT32, [2, 3])],
                 [vi("y", TensorProto.INT32, [2, 3])])


def case_reduce18():
    # Opset 18 moved ReduceMean's axes from an attribute to an input.
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0, name="mean"),
             helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2, name="split"),
             helper.make_node("Add", ["a", "b"], ["z"], name="add")]
    inits = [init("axes", np.array([1], np.int64))]
    return model(nodes, [vi("x", F, [2, 6])], [vi("y", F, [2]), vi("z", F, [2, 3])], inits,
                 opset=18)


def case_split18_uneven():
    # num_outputs over a dim it does not divide: the last part is smaller
    # (7 -> 3, 3, 1), which Debian's libonnx 1.12 inference refuses.
    # A consumer of a part (the Relu) is also untyped by that inference.
    nodes = [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=0, num_outputs=3,
                              name="split"),
             helper.make_node("Relu", ["c"], ["rc"], name="relu")]
    return model(nodes, [vi("x", F, [7, 2])], [vi(n, F, None) for n in ["a", "b", "rc"]],
                 opset=18)


def case_large_constant():
    # A Constant node too large to inline becomes a weight named after it.
    w = helper.make_tensor("w", F, [64, 64], f32(64, 64).flatten().tolist())
    nodes = [helper.make_node("Constant", [], ["cw"], value=w, name="const_w"),
             helper.make_node("MatMul", ["x", "cw"], ["y"], name="mm")]
    return model(nodes, [vi("x", F, [1, 64])], [vi("y", F, [1, 64])], opset=13)


def case_gemm_general():
    nodes = [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, alpha=0.5, beta=2.0,
                              name="gemm")]
    inits = [init("b", f32(4, 5)), init("c", f32(3, 5))]
    return model(nodes, [vi("a", F, [4, 3])], [vi("y", F, [3, 5])], inits, opset=13)


def case_variadic_max():
    nodes = [helper.make_node("Max", ["a", "b", "c"], ["y"], name="max3")]
    return model(nodes, [vi("a", F, [3]), vi("b", F, [3]), vi("c", F, [1])], [vi("y", F, [3])],
                 opset=13)


def case_layernorm_stats():
    nodes = [helper.make_node("LayerNormalization", ["x", "g"], ["y", "mean", "inv"], axis=1,
                              name="ln")]
    inits = [init("g", f32(8))]
    return model(nodes, [vi("x", F, [2, 8])],
                 [vi("y", F, [2, 8]), vi("mean", F, [2, 1]), vi("inv", F, [2, 1])], inits, opset=17)


# --- error cases ------------------------------------------------------------

def case_unsupported():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok_relu"),
        helper.make_node("NonMaxSuppression", ["a", "a"], ["b"], name="nms_1"),
        helper.make_node("Hardmax", ["a"], ["c"], name="hardmax_1"),
        helper.make_node("NonMaxSuppression", ["c", "c"], ["y"], name="nms_2"),
    ]
    return model(nodes, [vi("x", F, [1, 4])], [vi("y", F, [1, 4])], opset=13)


def case_control_flow():
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                               [vi("t", F, [4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [vi("e", F, [4])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g,
                              name="branch")]
    return model(nodes, [vi("c", TensorProto.BOOL, []), vi("x", F, [4])], [vi("y", F, [4])],
                 opset=13)


def case_lstm():
    nodes = [helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=4, name="lstm")]
    inits = [init("w", f32(1, 16, 3)), init("r", f32(1, 16, 4))]
    return model(nodes, [vi("x", F, [5, 1, 3])], [vi("y", F, [5, 1, 1, 4])], inits, opset=14)


def case_inconsistent():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="bad_matmul")]
    inits = [init("w", f32(5, 3))]
    return model(nodes, [vi("x", F, [2, 4])], [vi("y", F, [2, 3])], inits, opset=13)


def case_old_opset():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, [4])], opset=9)


def case_undefined_input():
    nodes = [helper.make_node("Add", ["x", "nowhere"], ["y"], name="dangling_add")]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, [4])], opset=13)


def case_other_domain():
    nodes = [helper.make_node("FusedMatMul", ["x", "x"], ["y"], domain="com.microsoft",
                              name="ms_op")]
    m = model(nodes, [vi("x", F, [4, 4])], [vi("y", F, [4, 4])], opset=13)
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return m


def save_external(m, out, keep_data):
    """Saves `m` with every initializer in a side file next to `out`."""
    import os
    location = os.path.basename(out) + ".data"
    onnx.save_model(m, out, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    if not keep_data:
        os.remove(os.path.join(os.path.dirname(out) or ".", location))


EXTERNAL_CASES = {
    "external_ok": lambda out: save_external(case_matmul_ffn(), out, True),
    "external_missing": lambda out: save_external(case_matmul_ffn(), out, False),
}


def case_short_initializer():
    # An initializer whose data is shorter than its shape (found by fuzzing:
    # the importer used to crash reporting it).
    t = TensorProto()
    t.name = "axes"
    t.data_type = I64
    t.dims.append(94)
    t.raw_data = np.array([0], np.int64).tobytes()
    nodes = [helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="unsq")]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, [1, 4])], [t], opset=13)


def case_conv_zero_stride():
    # Found by fuzzing: libonnx's Conv shape inference divides by the stride.
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3],
                              strides=[0, 1], name="bad_conv")]
    return model(nodes, [vi("x", F, [1, 3, 8, 8])], [vi("y", F, [1, 4, 6, 6])],
                 [init("w", f32(4, 3, 3, 3))], opset=13)


def case_layernorm_bad_axis():
    # libonnx's LayerNormalization inference indexes the Mean shape with an
    # out-of-range negative axis (a crash); it is rejected before that runs.
    nodes = [helper.make_node("LayerNormalization", ["x", "g"], ["y", "mean"], axis=-5,
                              name="bad_ln")]
    return model(nodes, [vi("x", F, [2, 8])], [vi("y", F, [2, 8]), vi("mean", F, None)],
                 [init("g", f32(8))], opset=17)


def case_bad_axis_then_shape():
    # Found by scripts/fuzz-importer.sh: a node whose ONNX inference fails
    # on an axis out of range (Slice, Gather, Transpose, Concat, Unsqueeze),
    # read by a Shape. libonnx 1.12's data propagation through the Shape
    # dereferenced the failed node's missing type and crashed.
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["s"], name="bad_slice"),
             helper.make_node("Shape", ["s"], ["y"], name="shape_of_it")]
    inits = [init("starts", np.array([0], np.int64)), init("ends", np.array([-2], np.int64)),
             init("axes", np.array([3], np.int64))]
    return model(nodes, [vi("x", F, ["a", "b"])], [vi("y", I64, [None])], inits)


def case_cumsum_bad_axis():
    nodes = [helper.make_node("CumSum", ["x", "ax"], ["y"], name="bad_cumsum")]
    return model(nodes, [vi("x", F, [2, 8])], [vi("y", F, [2, 8])],
                 [init("ax", np.array(-9, np.int64))], opset=17)


def case_constant_of_shape_huge():
    # 2^62 x 2 elements: ONNX's inference makes that a static shape, and
    # the compiler used to hang on it.
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["y"], name="huge")]
    return model(nodes, [vi("x", F, [2])], [vi("y", F, None)],
                 [init("s", np.array([2**62, 2], np.int64))], opset=17)


def _reshape_case(target, computed=False):
    # x has a dynamic batch, so the reshape's element count is not
    # checkable against its input and only the target itself can be wrong.
    # `computed`: the target is `target` followed by x's shape (Concat of a
    # constant and Shape). ONNX's inference, run with data propagation,
    # still reads its constant part and rejects a bad size before the
    # compiler's own inference (which checks the same) sees it.
    nodes, inits = [], [init("c", np.array(target, np.int64))]
    shp = "c"
    if computed:
        nodes += [helper.make_node("Shape", ["x"], ["s"]),
                  helper.make_node("Concat", ["c", "s"], ["shp"], axis=0)]
        shp = "shp"
    nodes.append(helper.make_node("Reshape", ["x", shp], ["y"], name="reshape"))
    return model(nodes, [vi("x", F, ["n", 24])], [vi("y", F, None)], inits,
                 opset=17)


def case_reshape_huge():
    # 24 x (2^56 + 4) x 6 elements: the product overflowed int64 (found by
    # the importer fuzzer; the planner then reported negative bytes).
    return _reshape_case([24, 2**56 + 4, 6])


def case_split_huge():
    # Split sizes near 2^62 (found by the importer fuzzer: the results'
    # types carried them, and a Concat of them overflowed int64). x has a
    # dynamic dimension to split, so ONNX's inference cannot check the sum.
    nodes = [helper.make_node("Split", ["x", "split"], ["p0", "p1"], axis=1, name="split"),
             helper.make_node("Concat", ["p1", "p0"], ["y"], axis=1)]
    return model(nodes, [vi("x", F, [2, "n"])], [vi("y", F, None)],
                 [init("split", np.array([2**62 + 2**60, 2**60 + 3], np.int64))], opset=17)


def case_split_huge_elements():
    # Each size is small, but output 1 has 2^60 elements (found by the
    # fuzzer once it compiled what imports: the planner's byte count
    # overflowed).
    nodes = [helper.make_node("Split", ["x", "split"], ["p0", "p1"], axis=0, name="split"),
             helper.make_node("Concat", ["p1", "p0"], ["y"], axis=0)]
    return model(nodes, [vi("x", F, ["n", 2**20, 2**20])], [vi("y", F, None)],
                 [init("split", np.array([1, 2**20], np.int64))], opset=17)


def case_declared_wrong_shape():
    # The file declares r as 2 x 3 where the transpose of a 2 x 3 input is
    # 3 x 2 (ONNX's inference, when it runs, rejects this itself).
    nodes = [helper.make_node("Transpose", ["x"], ["r"], perm=[1, 0], name="transpose"),
             helper.make_node("Neg", ["r"], ["y"], name="neg")]
    m = model(nodes, [vi("x", F, [2, 3])], [vi("y", F, None)])
    m.graph.value_info.append(vi("r", F, [2, 3]))
    return m


def _layernorm_redeclared(where):
    nodes = [helper.make_node("LayerNormalization", ["x", "g"], ["y"], name="ln")]
    outputs = [vi("y", F, [2, 8])]
    if where == "output":
        outputs.append(vi("x", F, []))
    m = model(nodes, [vi("x", F, [2, 8])], outputs,
              [init("g", np.ones(8, np.float32))])
    if where == "value_info":
        m.graph.value_info.append(vi("g", F, [4]))
    return m


def case_output_redeclares_input():
    # The graph input x declared again as a rank-0 graph output: ONNX's
    # inference took that type for x and its LayerNormalization inference
    # crashed (found by the importer fuzzer).
    return _layernorm_redeclared("output")


def case_value_info_redeclares_initializer():
    return _layernorm_redeclared("value_info")


def case_output_redefines_input():
    # A Conv whose output is named like the graph input c, read by a
    # MaxPool: ONNX's Conv/Pool inference dereferenced null on such a
    # graph (found by the importer fuzzer, with c of undefined type).
    w = np.ones((4, 3, 3, 3), np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2], name="pool")]
    return model(nodes, [vi("c", F, [1, 4, 8, 8]), vi("x", F, [1, 3, 8, 8])],
                 [vi("y", F, None)], [init("w", w)])


def case_output_defined_twice():
    nodes = [helper.make_node("Split", ["x"], ["a", "a"], axis=1, num_outputs=2, name="split"),
             helper.make_node("Neg", ["a"], ["y"], name="neg")]
    return model(nodes, [vi("x", F, [2, 4])], [vi("y", F, None)], opset=18)


def case_input_declared_twice():
    # x declared as an image, then again as a matrix: ONNX's inference took
    # the second and its Conv inference dereferenced null (found by the
    # importer fuzzer).
    w = np.ones((4, 3, 3, 3), np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")]
    return model(nodes, [vi("x", F, [1, 3, 8, 8]), vi("x", F, [2, 8])],
                 [vi("y", F, None)], [init("w", w)])


def case_input_undefined_elem_type():
    nodes = [helper.make_node("Neg", ["x"], ["y"], name="neg")]
    return model(nodes, [vi("x", onnx.TensorProto.UNDEFINED, [2, 4])], [vi("y", F, None)])


def case_concat_huge():
    # Each input holds 2^47 + 1 elements; their concatenation passes 2^48.
    nodes = [helper.make_node("Concat", ["a", "b"], ["y"], axis=1, name="concat")]
    return model(nodes, [vi("a", F, [1, 2**47 + 1]), vi("b", F, [1, 2**47 + 1])],
                 [vi("y", F, None)], opset=17)


def case_reshape_bad_dim():
    return _reshape_case([-3], computed=True)


def case_reshape_two_inferred():
    return _reshape_case([-1, -1], computed=True)


def case_undefined_shape_input():
    # ONNX's own inference of Shape dereferenced the missing input's type
    # (a crash found by the importer fuzzer).
    nodes = [helper.make_node("Shape", ["nowhere"], ["s"], name="dangling_shape"),
             helper.make_node("Cast", ["s"], ["y"], to=F)]
    return model(nodes, [vi("x", F, [2, 3])], [vi("y", F, None)])


def case_untyped_input():
    # A graph input with an empty type, read by Shape: the same crash.
    x = onnx.ValueInfoProto()
    x.name = "x"
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["y"], to=F)]
    return model(nodes, [x], [vi("y", F, None)])


def case_short_propagated():
    c = init("c", np.array([6], np.int64))
    c.raw_data = c.raw_data[:6]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Concat", ["s", "c"], ["shp"], axis=0),
             helper.make_node("Reshape", ["x", "shp"], ["y"])]
    return model(nodes, [vi("x", F, [2, 3])], [vi("y", F, None)], [c])


def case_gather_weight():
    # A row lookup in an initializer (raised to an embedding): ONNX allows
    # indices in [-10, 10), the negative ones counting from the end.
    w = init("table", f32(10, 4))
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0,
                              name="lookup")]
    return model(nodes, [vi("ids", I64, ["n"])], [vi("rows", F, ["n", 4])], [w])


def case_positions():
    # The position arithmetic of an OPT export on a toy decoder: ids
    # cumsum(mask) * mask - 1 + 2 into a table of 18 rows (16 positions),
    # added to a 4-token embedding; the sum is the logits.
    tok = init("tok", f32(4, 4))
    pos = init("pos", f32(18, 4))
    one = init("one", np.array(1, np.int64))
    two = init("two", np.array(2, np.int64))
    nodes = [
        helper.make_node("CumSum", ["attention_mask", "one"], ["c"], name="cumsum"),
        helper.make_node("Mul", ["c", "attention_mask"], ["m"], name="mul"),
        helper.make_node("Sub", ["m", "one"], ["p0"], name="sub"),
        helper.make_node("Add", ["p0", "two"], ["p"], name="offset"),
        helper.make_node("Gather", ["tok", "input_ids"], ["te"], axis=0, name="tokens"),
        helper.make_node("Gather", ["pos", "p"], ["pe"], axis=0, name="positions"),
        helper.make_node("Add", ["te", "pe"], ["logits"], name="sum"),
    ]
    return model(nodes,
                 [vi("input_ids", I64, ["batch", "seq"]),
                  vi("attention_mask", I64, ["batch", "seq"])],
                 [vi("logits", F, ["batch", "seq", 4])], [tok, pos, one, two])


def case_rope_decoder():
    return _rope_decoder(with_past=False)


def case_rope_decoder_kv():
    # The same with Optimum's cache convention: past_key_values.0.key/value
    # inputs, present.0.key/value outputs, an attention_mask over the whole
    # sequence, the causal mask offset by the cached length.
    return _rope_decoder(with_past=True)


def case_rope_decoder_gqa():
    # rope_decoder with grouped-query attention: 4 query heads of 4 over 2
    # key/value heads, repeated before the attention (LLaMA's repeat_kv).
    return _rope_decoder(with_past=False, d=16, ffn=32, heads=4, kv_heads=2)


def case_rope_decoder_gqa_kv():
    # The same with a cache of 2 heads (Optimum's convention).
    return _rope_decoder(with_past=True, d=16, ffn=32, heads=4, kv_heads=2)


def case_rope_decoder_h16_kv():
    # rope_decoder_kv with heads of 16 (2 over d 32): rotary half rows of
    # whole 16-byte pieces, which the CUDA kernel moves four floats at a
    # time.
    return _rope_decoder(with_past=True, d=32, ffn=32, heads=2)


def case_gated_lm():
    # rope_decoder with two layers at a byte-level vocabulary (text
    # calibration works) and wider gated MLPs whose gates (of rank 4) have a
    # negative bias, so that most of their ReLU outputs are 0: what the
    # sparsity passes take.
    return llama_decoder(with_past=False, d=16, ffn=64, vocab=256, layers=2, gate_bias=-1.0)


def case_gated_lm_kv():
    return llama_decoder(with_past=True, d=16, ffn=64, vocab=256, layers=2, gate_bias=-1.0)


def case_relu6_lm():
    # gated_lm with capped-ReLU FFNs, Clip(x W + b, 0, 0.5) then down (a ReLU
    # capped low enough that the cap bites).
    return llama_decoder(with_past=True, d=16, ffn=64, vocab=256, layers=2, gate_bias=-1.0,
                         cap=0.5)


def case_relu2_lm():
    # gated_lm with squared-ReLU FFNs, relu(x W + b)^2 then down (ReLU^2).
    return llama_decoder(with_past=True, d=16, ffn=64, vocab=256, layers=2, gate_bias=-1.0,
                         squared=True)


def _rope_constants(hd):
    """The constants _rotate and _rope_tables_and_mask read (the rotate-half
    slice bounds, the mask's indices and values) and the attention's score
    scale, for heads of `hd`."""
    return [init("half0", np.array([0], np.int64)),
            init("half1", np.array([hd // 2], np.int64)),
            init("half2", np.array([hd], np.int64)),
            init("i0", np.array(0, np.int64)), init("i1", np.array(1, np.int64)),
            init("i2", np.array(2, np.int64)), init("one", np.array(1.0, np.float32)),
            init("axes_12", np.array([1, 2], np.int64)),
            init("scale", np.array(1 / np.sqrt(hd), np.float32)),
            init("neg_big", np.array(-1e4, np.float32)),
            init("zero", np.array(0.0, np.float32))]


def _rotate(node, x, out):
    """x * cos + rotate_half(x) * sin, rotate_half by Slice, Neg and Concat."""
    node("Slice", [x, "half0", "half1", "axis_last"], [out + "_a"])
    node("Slice", [x, "half1", "half2", "axis_last"], [out + "_b"])
    node("Neg", [out + "_b"], [out + "_nb"])
    node("Concat", [out + "_nb", out + "_a"], [out + "_rh"], axis=-1)
    node("Mul", [x, "cos"], [out + "_c"])
    node("Mul", [out + "_rh", "sin"], [out + "_s"])
    node("Add", [out + "_c", out + "_s"], [out])


def _rope_tables_and_mask(node, with_past):
    """The rotary tables `cos` and `sin` ([batch, 1, seq, hd], from
    position_ids) and the additive mask `causal` ([seq, past + seq]: -1e4
    where a key follows the query; with a cache, plus (1 - attention_mask)
    * -1e4 over [batch, 1, 1, total]), as the decoder cases export them."""
    # Rotary tables: [batch, 1, seq, hd].
    node("Cast", ["position_ids"], ["pos_f"], to=TensorProto.FLOAT)
    node("Unsqueeze", ["pos_f", "axis_last"], ["pos_u"])
    node("Mul", ["pos_u", "inv_freq"], ["freqs"])
    node("Concat", ["freqs", "freqs"], ["angles"], axis=-1)
    node("Cos", ["angles"], ["cos_t"])
    node("Sin", ["angles"], ["sin_t"])
    node("Unsqueeze", ["cos_t", "axis_1"], ["cos"])
    node("Unsqueeze", ["sin_t", "axis_1"], ["sin"])
    # Causal mask [seq, past + seq]: -1e4 where a key follows the query.
    node("Shape", ["input_ids"], ["ids_shape"])
    node("Gather", ["ids_shape", "i1"], ["seq"], axis=0)
    if with_past:
        node("Shape", ["past_key_values.0.key"], ["past_shape"])
        node("Gather", ["past_shape", "i2"], ["past"], axis=0)
    else:
        node("Identity", ["i0"], ["past"])
    node("Add", ["past", "seq"], ["total"])
    node("Range", ["past", "total", "i1"], ["query_steps"])
    node("Range", ["i0", "total", "i1"], ["key_steps"])
    node("Unsqueeze", ["query_steps", "axis_1"], ["rows"])
    node("Unsqueeze", ["key_steps", "axis_0"], ["cols"])
    node("Greater", ["cols", "rows"], ["future"])
    node("Where", ["future", "neg_big", "zero"], ["causal_only"])
    if with_past:  # padding: (1 - mask) * -1e4 over [batch, 1, 1, total]
        node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT)
        node("Sub", ["one", "mask_f"], ["unmasked"])
        node("Mul", ["unmasked", "neg_big"], ["pad"])
        node("Unsqueeze", ["pad", "axes_12"], ["pad4"])
        node("Add", ["causal_only", "pad4"], ["causal"])
    else:
        node("Identity", ["causal_only"], ["causal"])


def _rope_decoder(with_past, d=8, ffn=16, vocab=16, gate_bias=None, **kw):
    # A ReLU-fied LLaMA-style decoder layer as exporters write it: RMS norms
    # spelled out (Pow, ReduceMean, Sqrt, Div), rotary position embeddings
    # computed from position_ids (Cast, Sin, Cos, rotate_half by Slice, Neg
    # and Concat), a causal mask from Range and Greater, and a gated MLP
    # whose gate is a ReLU. By default d 8, 2 heads of 4, FFN 16, vocab 16.
    return llama_decoder(with_past, d=d, ffn=ffn, vocab=vocab, gate_bias=gate_bias, **kw)


def llama_decoder(with_past, d=8, ffn=16, vocab=16, heads=2, layers=1, scale=0.5,
                  gate_bias=None, gate_rank=4, gate_noise=0.0, squared=False,
                  cap=None, kv_heads=None):
    """The LLaMA-style decoder of rope_decoder with `layers` layers.

    Projections are standard normal times `scale`. With `gate_bias`, each
    gate projection is of rank `gate_rank` (plus `gate_noise` times a
    standard normal one) with biases around `gate_bias`: most ReLU outputs
    are then 0 and a low-rank predictor finds the rest. With `squared` the
    FFN is down(relu(gate(x))^2) (ReLU^2, written Mul(r, r)) instead of the
    gated product (the up weights stay in the model, unused); with `cap` it
    is down(Clip(gate(x), 0, cap)) (a capped ReLU, as ReLU6). Layer 0's names are
    those of the one-layer model; layer i > 0 prefixes nodes with 'l{i}_'
    and suffixes weights with '_{i}'. With `kv_heads` (dividing `heads`) the
    keys and values have that many heads (grouped-query attention), cached
    so, and are repeated to `heads` before the attention as LLaMA's
    repeat_kv exports (Unsqueeze, Expand, Reshape).
    """
    hd = d // heads
    kvh = kv_heads or heads
    kv = kvh * hd
    scale = np.float32(scale)
    inits = [init("tok", f32(vocab, d)), init("wq", f32(d, d) * scale),
             init("wk", f32(d, kv) * scale), init("wv", f32(d, kv) * scale),
             init("wo", f32(d, d) * scale), init("wg", f32(d, ffn) * scale),
             init("wu", f32(d, ffn) * scale), init("wd", f32(ffn, d) * scale),
             init("wlm", f32(d, vocab)), init("n1", 1 + 0.1 * f32(d)),
             init("n2", 1 + 0.1 * f32(d)), init("nf", 1 + 0.1 * f32(d)),
             init("two", np.array(2.0, np.float32)),
             init("eps", np.array(1e-6, np.float32)),
             init("inv_freq", (1.0 / 10000 ** (np.arange(0, hd, 2) / hd)).astype(np.float32)),
             init("heads_shape", np.array([0, 0, heads, hd], np.int64)),
             init("model_shape", np.array([0, 0, d], np.int64)),
             init("axis_last", np.array([-1], np.int64)),
             init("axis_1", np.array([1], np.int64)),
             init("axis_0", np.array([0], np.int64)),
             *_rope_constants(hd)]
    for i in range(1, layers):
        for w, shape in (("wq", (d, d)), ("wk", (d, kv)), ("wv", (d, kv)), ("wo", (d, d)),
                         ("wg", (d, ffn)), ("wu", (d, ffn)), ("wd", (ffn, d))):
            inits.append(init(f"{w}_{i}", f32(*shape) * scale))
        for w in ("n1", "n2"):
            inits.append(init(f"{w}_{i}", 1 + 0.1 * f32(d)))
    if kvh != heads:
        inits += [init("kv_heads_shape", np.array([0, 0, kvh, hd], np.int64)),
                  init("axis_2", np.array([2], np.int64)),
                  init("repeat_shape", np.array([1, kvh, heads // kvh, 1, hd], np.int64)),
                  init("repeated_shape", np.array([0, heads, -1, hd], np.int64))]
    nodes = []

    def node(op, ins, outs, **kw):
        nodes.append(helper.make_node(op, ins, outs, name=outs[0] + "_node", **kw))

    def rms(x, w, out):
        node("Pow", [x, "two"], [out + "_sq"])
        node("ReduceMean", [out + "_sq"], [out + "_ms"], axes=[-1], keepdims=1)
        node("Add", [out + "_ms", "eps"], [out + "_e"])
        node("Sqrt", [out + "_e"], [out + "_r"])
        node("Div", [x, out + "_r"], [out + "_n"])
        node("Mul", [out + "_n", w], [out])

    def split_heads(x, out, shape="heads_shape"):
        node("Reshape", [x, shape], [out + "_r"])
        node("Transpose", [out + "_r"], [out], perm=[0, 2, 1, 3])

    def repeat_kv(x, out):  # [B, kvh, T, hd] -> [B, heads, T, hd]
        if kvh == heads:
            node("Identity", [x], [out])
            return
        node("Unsqueeze", [x, "axis_2"], [out + "_u"])
        node("Expand", [out + "_u", "repeat_shape"], [out + "_e"])
        node("Reshape", [out + "_e", "repeated_shape"], [out])

    node("Gather", ["tok", "input_ids"], ["x0"], axis=0)
    _rope_tables_and_mask(node, with_past)
    x = "x0"
    for i in range(layers):
        def n(name, i=i):  # a node's output in layer i
            return name if i == 0 else f"l{i}_{name}"

        def w(name, i=i):  # a weight of layer i
            return name if i == 0 else f"{name}_{i}"
        past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        # Attention.
        rms(x, w("n1"), n("h1"))
        for name, weight in (("q", "wq"), ("k", "wk"), ("v", "wv")):
            node("MatMul", [n("h1"), w(weight)], [n(name + "_p")])
            split_heads(n(name + "_p"), n(name + "_h"),
                        "heads_shape" if name == "q" or kvh == heads else "kv_heads_shape")
        _rotate(node, n("q_h"), n("q_rot"))
        _rotate(node, n("k_h"), n("k_new"))
        if with_past:
            node("Concat", [past_k, n("k_new")], [f"present.{i}.key"], axis=2)
            node("Concat", [past_v, n("v_h")], [f"present.{i}.value"], axis=2)
            repeat_kv(f"present.{i}.key", n("k_rot"))
            repeat_kv(f"present.{i}.value", n("v_all"))
        else:
            repeat_kv(n("k_new"), n("k_rot"))
            repeat_kv(n("v_h"), n("v_all"))
        node("Transpose", [n("k_rot")], [n("k_t")], perm=[0, 1, 3, 2])
        node("MatMul", [n("q_rot"), n("k_t")], [n("qk")])
        node("Mul", [n("qk"), "scale"], [n("qk_s")])
        node("Add", [n("qk_s"), "causal"], [n("qk_m")])
        node("Softmax", [n("qk_m")], [n("probs")], axis=-1)
        node("MatMul", [n("probs"), n("v_all")], [n("ctx")])
        node("Transpose", [n("ctx")], [n("ctx_t")], perm=[0, 2, 1, 3])
        node("Reshape", [n("ctx_t"), "model_shape"], [n("ctx_m")])
        node("MatMul", [n("ctx_m"), w("wo")], [n("attn")])
        node("Add", [x, n("attn")], [n("x1")])
        # Gated MLP with a ReLU gate.
        rms(n("x1"), w("n2"), n("h2"))
        if gate_bias is None:
            node("MatMul", [n("h2"), w("wg")], [n("gate")])
        else:
            # A low-rank gate projection: a low-rank predictor can find the
            # gate's active neurons (as in trained models, whose gate
            # pre-activations are close to low rank on the data).
            low = (f32(d, gate_rank) @ f32(gate_rank, ffn)) / np.sqrt(gate_rank)
            low = (low + gate_noise * f32(d, ffn)) * scale
            inits[[t.name for t in inits].index(w("wg"))] = init(w("wg"), low.astype(np.float32))
            inits.append(init(w("bg"), np.full(ffn, gate_bias, np.float32) + 0.1 * f32(ffn)))
            node("MatMul", [n("h2"), w("wg")], [n("gate_mm")])
            node("Add", [n("gate_mm"), w("bg")], [n("gate")])
        if cap is not None:  # Clip(x W + b, 0, cap), then down
            inits += [init(w("c0"), np.float32(0)), init(w("cap"), np.float32(cap))]
            node("Clip", [n("gate"), w("c0"), w("cap")], [n("act")])
        else:
            node("Relu", [n("gate")], [n("gate_r")])
        if cap is not None:
            pass
        elif squared:  # relu(x W + b)^2, then down: no up projection
            node("Mul", [n("gate_r"), n("gate_r")], [n("act")])
        else:
            node("MatMul", [n("h2"), w("wu")], [n("up")])
            node("Mul", [n("gate_r"), n("up")], [n("act")])
        node("MatMul", [n("act"), w("wd")], [n("down")])
        node("Add", [n("x1"), n("down")], [n("x2")])
        x = n("x2")
    rms(x, "nf", "hf")
    node("MatMul", ["hf", "wlm"], ["logits"])
    inputs = [vi("input_ids", I64, ["batch", "seq"])]
    outputs = [vi("logits", F, ["batch", "seq", vocab])]
    if with_past:
        inputs.append(vi("attention_mask", I64, ["batch", "total_seq"]))
    inputs.append(vi("position_ids", I64, ["batch", "seq"]))
    if with_past:
        for i in range(layers):
            for kind in ("key", "value"):
                inputs.append(vi(f"past_key_values.{i}.{kind}", F, ["batch", kvh, "past_seq", hd]))
                outputs.append(vi(f"present.{i}.{kind}", F, ["batch", kvh, "total_seq", hd]))
    return model(nodes, inputs, outputs, inits)


def case_falcon_decoder():
    # A ReLU-fied Falcon-style decoder as torch exports it (no cache): one
    # LayerNormalization feeding both the attention and the MLP (parallel
    # residual: x + attn + mlp), q, k and v from one fused projection
    # reshaped to [batch, seq, heads + 2, hd] and picked by a Slice (q) and
    # Gathers of one index (k, v: multi-query attention, one key/value head
    # that the score and context MatMuls broadcast over the query heads),
    # rotary embeddings, and a bias-free ReLU MLP. d 16, 4 heads of 4,
    # FFN 64, two layers, a byte-level vocabulary.
    return falcon_decoder(with_past=False)


def case_falcon_decoder_kv():
    # The same with Optimum's cache convention (one key/value head cached).
    return falcon_decoder(with_past=True)


def case_falcon40_decoder():
    # falcon_decoder in Falcon-40B's layout (no cache): 8 heads in 2 groups,
    # each group's key and value head broadcast over its 4 query heads.
    return falcon_decoder(with_past=False, d=32, heads=8, kv_groups=2)


def case_falcon40_decoder_view():
    # falcon40_decoder with transformers' reshape after each head transpose
    # (`transpose(1, 2).reshape(batch, heads, q_len, hd)`, batch and q_len
    # from the query split's shape), as its Falcon exports write it.
    return falcon_decoder(with_past=False, d=32, heads=8, kv_groups=2, view_heads=True)


def case_falcon40_decoder_kv():
    # falcon_decoder_kv in Falcon-40B's layout: 8 heads in 2 groups, each
    # group's key and value head broadcast over its 4 query heads before the
    # cache (which holds all 8), separate attention and MLP norms.
    return falcon_decoder(with_past=True, d=32, heads=8, kv_groups=2)


def falcon_decoder(with_past, d=16, ffn=64, vocab=256, heads=4, layers=2, scale=0.5,
                   ffn_bias=-1.0, kv_groups=None, view_heads=False):
    """A Falcon-7B-style decoder (parallel attention and MLP, multi-query).

    Projections are standard normal times `scale`; the up projection's
    ReLU sees a bias around `ffn_bias` through a rank-4 weight, so most of
    its outputs are 0 and a low-rank predictor finds the rest, as in
    gated_lm. Layer 0's names are unprefixed; layer i > 0 prefixes nodes
    with 'l{i}_' and suffixes weights with '_{i}'. With `kv_groups`, the
    layout of Falcon-40B's new decoder architecture: separate norms for the
    attention and the MLP, the fused projection reshaped to [batch, seq,
    groups, heads / groups + 2, hd], each group's key and value broadcast
    (Expand) to its query heads and flattened with them to [batch, seq,
    heads, hd]; the cache then holds every head, as the export's does.
    With `view_heads`, each head transpose is followed by transformers'
    `.reshape(batch, heads, q_len, hd)`, batch and q_len read from the
    query split's shape (Shape, Gather, Unsqueeze, Concat): a copy of the
    same shape that only an analysis of where the dims come from can drop;
    and with `kv_groups` the split and the flattening of the groups are
    torch's `view(batch, seq, -1, per + 2, hd)` and `flatten(2, 3)`, targets
    that start with the tensor's own dims and infer one.
    """
    hd = d // heads
    scale = np.float32(scale)
    inits = [init("tok", f32(vocab, d)), init("wlm", f32(d, vocab)),
             init("gf", 1 + 0.1 * f32(d)), init("bf", 0.1 * f32(d)),
             init("inv_freq", (1.0 / 10000 ** (np.arange(0, hd, 2) / hd)).astype(np.float32)),
             init("qkv_shape", np.array([0, 0, heads + 2, hd], np.int64)
                  if kv_groups is None else
                  np.array([0, 0, kv_groups, heads // kv_groups + 2, hd], np.int64)),
             init("model_shape", np.array([0, 0, d], np.int64)),
             init("axis_last", np.array([-1], np.int64)),
             init("axis_1", np.array([1], np.int64)),
             init("axis_0", np.array([0], np.int64)),
             init("axis_2", np.array([2], np.int64)),
             init("q_end", np.array([-2], np.int64)),
             init("k_index", np.array([-2], np.int64)),
             init("v_index", np.array([-1], np.int64)),
             *_rope_constants(hd)]
    if kv_groups is not None:
        inits += [init("heads_shape", np.array([0, 0, heads, hd], np.int64)),
                  init("axis_3", np.array([3], np.int64))]
    if view_heads:
        inits += [init("view_heads", np.array([heads], np.int64)),
                  init("view_kv_heads", np.array([heads if kv_groups else 1], np.int64)),
                  init("view_hd", np.array([hd], np.int64)),
                  init("index_0", np.array(0, np.int64)), init("index_1", np.array(1, np.int64)),
                  init("view_lead_start", np.array([0], np.int64)),
                  init("view_lead_end", np.array([2], np.int64)),
                  init("view_infer", np.array([-1], np.int64)),
                  init("view_per", np.array([heads // kv_groups + 2 if kv_groups else heads + 2],
                                            np.int64))]
    qkv_width = (heads + 2) * hd if kv_groups is None else (heads + 2 * kv_groups) * hd
    for i in range(layers):
        sfx = "" if i == 0 else f"_{i}"
        low = (f32(d, 4) @ f32(4, ffn)) / 2.0 * scale
        inits += [init("g" + sfx, 1 + 0.1 * f32(d)), init("b" + sfx, 0.1 * f32(d)),
                  init("wqkv" + sfx, f32(d, qkv_width) * scale),
                  init("wo" + sfx, f32(d, d) * scale),
                  init("wup" + sfx, low.astype(np.float32)),
                  init("bup" + sfx, np.full(ffn, ffn_bias, np.float32) + 0.1 * f32(ffn)),
                  init("wdown" + sfx, f32(ffn, d) * scale)]
        if kv_groups is not None:
            inits += [init("gm" + sfx, 1 + 0.1 * f32(d)), init("bm" + sfx, 0.1 * f32(d))]
    nodes = []

    def node(op, ins, outs, **kw):
        nodes.append(helper.make_node(op, ins, outs, name=outs[0] + "_node", **kw))

    node("Gather", ["tok", "input_ids"], ["x0"], axis=0)
    _rope_tables_and_mask(node, with_past)
    x = "x0"
    for i in range(layers):
        def n(name, i=i):
            return name if i == 0 else f"l{i}_{name}"

        def w(name, i=i):
            return name if i == 0 else f"{name}_{i}"
        node("LayerNormalization", [x, w("g"), w("b")], [n("ln")], axis=-1, epsilon=1e-5)
        node("MatMul", [n("ln"), w("wqkv")], [n("qkv")])
        def lead_dims_then(x, rest, out):
            # torch's view(batch, seq, *rest) / flatten(2, 3): the target
            # starts with x's own first two dims, read from its shape.
            node("Shape", [x], [out + "_shape"])
            node("Slice", [out + "_shape", "view_lead_start", "view_lead_end"],
                 [out + "_lead"])
            node("Concat", [out + "_lead"] + rest, [out + "_target"], axis=0)
            node("Reshape", [x, out + "_target"], [out])

        if view_heads and kv_groups is not None:
            lead_dims_then(n("qkv"), ["view_infer", "view_per", "view_hd"], n("qkv4"))
        else:
            node("Reshape", [n("qkv"), "qkv_shape"], [n("qkv4")])
        if kv_groups is None:
            node("Slice", [n("qkv4"), "half0", "q_end", "axis_2"], [n("q_s")])
            node("Gather", [n("qkv4"), "k_index"], [n("k_s")], axis=2)
            node("Gather", [n("qkv4"), "v_index"], [n("v_s")], axis=2)
        else:  # [B, T, groups, per + 2, hd]: broadcast k and v over the group
            node("Slice", [n("qkv4"), "half0", "q_end", "axis_3"], [n("q_g")])
            node("Gather", [n("qkv4"), "k_index"], [n("k_g")], axis=3)
            node("Gather", [n("qkv4"), "v_index"], [n("v_g")], axis=3)
            node("Shape", [n("q_g")], [n("q_g_shape")])
            for name in ("k", "v"):
                node("Expand", [n(name + "_g"), n("q_g_shape")], [n(name + "_e")])
                if view_heads:
                    lead_dims_then(n(name + "_e"), ["view_infer", "view_hd"], n(name + "_s"))
                else:
                    node("Reshape", [n(name + "_e"), "heads_shape"], [n(name + "_s")])
            if view_heads:
                lead_dims_then(n("q_g"), ["view_infer", "view_hd"], n("q_s"))
            else:
                node("Reshape", [n("q_g"), "heads_shape"], [n("q_s")])
        for name in ("q", "k", "v"):
            if not view_heads:
                node("Transpose", [n(name + "_s")], [n(name + "_h")], perm=[0, 2, 1, 3])
                continue
            node("Transpose", [n(name + "_s")], [n(name + "_t0")], perm=[0, 2, 1, 3])
            if name == "q":  # batch and q_len of the query split
                node("Shape", [n("q_s")], [n("q_shape")])
                for dim, idx in (("b", "index_0"), ("len", "index_1")):
                    node("Gather", [n("q_shape"), idx], [n("q_" + dim)], axis=0)
                    node("Unsqueeze", [n("q_" + dim), "axis_0"], [n("q_" + dim + "_1")])
            node("Concat", [n("q_b_1"), "view_heads" if name == "q" else "view_kv_heads",
                            n("q_len_1"), "view_hd"], [n(name + "_view")], axis=0)
            node("Reshape", [n(name + "_t0"), n(name + "_view")], [n(name + "_h")])
        _rotate(node, n("q_h"), n("q_rot"))
        _rotate(node, n("k_h"), n("k_new"))
        if with_past:
            node("Concat", [f"past_key_values.{i}.key", n("k_new")], [f"present.{i}.key"], axis=2)
            node("Concat", [f"past_key_values.{i}.value", n("v_h")], [f"present.{i}.value"], axis=2)
            k_all, v_all = f"present.{i}.key", f"present.{i}.value"
        else:
            k_all, v_all = n("k_new"), n("v_h")
        node("Transpose", [k_all], [n("k_t")], perm=[0, 1, 3, 2])
        node("MatMul", [n("q_rot"), n("k_t")], [n("qk")])
        node("Mul", [n("qk"), "scale"], [n("qk_s")])
        node("Add", [n("qk_s"), "causal"], [n("qk_m")])
        node("Softmax", [n("qk_m")], [n("probs")], axis=-1)
        node("MatMul", [n("probs"), v_all], [n("ctx")])
        node("Transpose", [n("ctx")], [n("ctx_t")], perm=[0, 2, 1, 3])
        node("Reshape", [n("ctx_t"), "model_shape"], [n("ctx_m")])
        node("MatMul", [n("ctx_m"), w("wo")], [n("attn")])
        # The MLP reads the same norm (parallel attention and MLP), or its
        # own in the new architecture.
        mlp_in = n("ln")
        if kv_groups is not None:
            node("LayerNormalization", [x, w("gm"), w("bm")], [n("ln_mlp")], axis=-1,
                 epsilon=1e-5)
            mlp_in = n("ln_mlp")
        node("MatMul", [mlp_in, w("wup")], [n("up_mm")])
        node("Add", [n("up_mm"), w("bup")], [n("up")])
        node("Relu", [n("up")], [n("act")])
        node("MatMul", [n("act"), w("wdown")], [n("mlp")])
        node("Add", [n("mlp"), n("attn")], [n("both")])
        node("Add", [n("both"), x], [n("x1")])
        x = n("x1")
    node("LayerNormalization", [x, "gf", "bf"], ["hf"], axis=-1, epsilon=1e-5)
    node("MatMul", ["hf", "wlm"], ["logits"])
    inputs = [vi("input_ids", I64, ["batch", "seq"])]
    outputs = [vi("logits", F, ["batch", "seq", vocab])]
    if with_past:
        inputs.append(vi("attention_mask", I64, ["batch", "total_seq"]))
    inputs.append(vi("position_ids", I64, ["batch", "seq"]))
    if with_past:
        for i in range(layers):
            for kind in ("key", "value"):
                cached = 1 if kv_groups is None else heads
                inputs.append(vi(f"past_key_values.{i}.{kind}", F,
                                 ["batch", cached, "past_seq", hd]))
                outputs.append(vi(f"present.{i}.{kind}", F, ["batch", cached, "total_seq", hd]))
    return model(nodes, inputs, outputs, inits)


def case_mixed_dtypes():
    # MatMul of a float32 input by a float64 weight: ONNX's MatMul takes one
    # element type T for both inputs, so the model is invalid.
    w = numpy_helper.from_array(RNG.standard_normal((4, 3)), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    return model(nodes, [vi("x", F, ["b", 4])], [vi("y", F, ["b", 3])], [w])


def case_two_dims():
    # Two named dims that must agree for the Add: pinning them apart breaks it.
    nodes = [helper.make_node("Add", ["x", "y"], ["z"], name="sum")]
    return model(nodes, [vi("x", F, ["a"]), vi("y", F, ["b"])], [vi("z", F, None)])


def case_f16_matmul():
    # A float16 export: MatMul + Relu over half-precision activations.
    w = numpy_helper.from_array(f32(4, 3).astype(np.float16), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    return model(nodes, [vi("x", TensorProto.FLOAT16, ["b", 4])],
                 [vi("y", TensorProto.FLOAT16, ["b", 3])], [w])


def case_f16_mlp():
    # A float16 export of a small block: MatMul + bias + Relu, a second
    # projection, LayerNormalization and Softmax, all in half precision.
    h16 = lambda *shape: numpy_helper.from_array(f32(*shape).astype(np.float16) * np.float16(0.5))
    inits = [h16(8, 16), h16(16), h16(16, 8), h16(8), h16(8), h16(8)]
    for t, n in zip(inits, ["w1", "b1", "w2", "b2", "g", "beta"]):
        t.name = n
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="up_bias"),
             helper.make_node("Relu", ["hb"], ["a"], name="relu"),
             helper.make_node("MatMul", ["a", "w2"], ["o"], name="down"),
             helper.make_node("Add", ["o", "b2"], ["ob"], name="down_bias"),
             helper.make_node("LayerNormalization", ["ob", "g", "beta"], ["n"], axis=-1,
                              epsilon=1e-5, name="norm"),
             helper.make_node("Softmax", ["n"], ["y"], axis=-1, name="softmax")]
    return model(nodes, [vi("x", TensorProto.FLOAT16, ["b", 8])],
                 [vi("y", TensorProto.FLOAT16, ["b", 8])], inits)


def case_f64_matmul():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="dmm")]
    return model(nodes, [vi("a", TensorProto.DOUBLE, [2, 3]), vi("b", TensorProto.DOUBLE, [3, 4])],
                 [vi("y", TensorProto.DOUBLE, [2, 4])])


def case_split_no_outputs():
    # Found by fuzzing: libonnx's Split-18 inference divides by the output
    # count, here 0.
    nodes = [helper.make_node("Split", ["x"], [], axis=0, name="split")]
    return model(nodes, [vi("x", F, [4, 2])], [], opset=18)


def case_conv_rank_mismatch():
    # Found by fuzzing: libonnx's Conv inference reads as many input dims as
    # the weight has spatial dims, here past a computed rank-3 input.
    w = init("w", np.zeros((4, 3, 3, 3), np.float32))
    shape = init("s", np.array([1, 3, 64], np.int64))
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"], name="flat"),
             helper.make_node("Conv", ["r", "w"], ["y"], name="conv")]
    return model(nodes, [vi("x", F, [1, 3, 8, 8])], [vi("y", F, None)], [w, shape], opset=13)


def case_pool_kernel_mismatch():
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2], name="pool")]
    return model(nodes, [vi("x", F, [1, 3, 8, 8])], [vi("y", F, None)], opset=13)


def case_int_matmul():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="imm")]
    return model(nodes, [vi("a", I64, [2, 3]), vi("b", I64, [3, 4])],
                 [vi("y", I64, [2, 4])])


def case_int_relu():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="irelu")]
    return model(nodes, [vi("x", TensorProto.INT32, [2, 3])],
                 [vi("y", TensorProto.INT32, [2, 3])])


def case_hostile_names():
    # Names are the model's text: a newline in a node name must not end the
    # generated code's comment (and a trailing backslash not continue it),
    # and a newline before hex digits in an input name must stay one
    # character of the string literal.
    nodes = [helper.make_node("Relu", ["x\nab"], ["y"],
                              name='r\nstatic_assert(false, "injected");\\')]
    return model(nodes, [vi("x\nab", F, [2])], [vi("y", F, [2])])


RAW_CASES = {
    # Not protobuf at all.
    "not_onnx": lambda: b"this is plainly not a protobuf model\n",
}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    case, out = sys.argv[1], sys.argv[2]
    if case in EXTERNAL_CASES:
        EXTERNAL_CASES[case](out)
        return
    if case in RAW_CASES:
        data = RAW_CASES[case]()
    elif case.startswith("truncated_"):
        # The first half of another case's bytes.
        full = globals()["case_" + case[len("truncated_"):]]().SerializeToString()
        data = full[: len(full) // 2]
    else:
        fn = globals().get("case_" + case)
        if fn is None:
            sys.exit(f"unknown case '{case}'")
        data = fn().SerializeToString()
    with open(out, "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main()
