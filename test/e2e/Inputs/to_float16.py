#!/usr/bin/env python3
"""Rewrites an ONNX model in float16 the way a half-precision export is:
every float32 initializer, Constant tensor, ConstantOfShape value, Cast
target, graph input/output and value_info becomes float16 (integer and bool
tensors stay as they are). ONNX Runtime's check that the result is a valid
model is the caller's.

  to_float16.py IN.onnx OUT.onnx
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper


def half(t):
    """A float32 TensorProto as float16, same name."""
    a = numpy_helper.to_array(t)
    with np.errstate(over="ignore"):  # -3.4e38 mask values saturate to -inf
        h = numpy_helper.from_array(np.clip(a, -65504, 65504).astype(np.float16), t.name)
    return h


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    m = onnx.load(sys.argv[1])
    g = m.graph
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(half(t))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(half(a.t))
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
    for v in list(g.input) + list(g.output) + list(g.value_info):
        tt = v.type.tensor_type
        if tt.elem_type == TensorProto.FLOAT:
            tt.elem_type = TensorProto.FLOAT16
    onnx.save(m, sys.argv[2])


if __name__ == "__main__":
    main()
