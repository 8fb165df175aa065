#!/usr/bin/env python3
"""Runs sparsec over the ONNX backend node tests (Debian's libonnx-testdata).

For every test whose ops are all supported by the importer and whose opset
is in the supported range, imports the model and checks that the import
(and the raise phase) succeeds. With --run, also compiles it for x86, runs
the binary on every test_data_set_*/input_*.pb and compares with
output_*.pb (rtol 1e-3, atol 1e-5 for floats, as ONNX's backend tests do;
exact for integers and booleans). Prints one line per failure and a summary:
    node tests: N passed, N failed, N unsupported ...
Exit status is non-zero if any supported test failed.
"""
import argparse
import os
import subprocess
import sys

import tempfile
from concurrent.futures import ThreadPoolExecutor

import onnx
from onnx import TensorProto, numpy_helper

DEFAULT_DIR = "/usr/share/libonnx-testdata/data/node"
SUPPORTED_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
                   TensorProto.BFLOAT16, TensorProto.INT64, TensorProto.INT32,
                   TensorProto.INT16, TensorProto.INT8, TensorProto.UINT8,
                   TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
                   TensorProto.BOOL}
INTEGER_TYPES = {TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL}
# Ops whose definition at opset 13 computes what their older versions did
# (later versions only added types or optional attributes these tests do
# not set): a test exported at an older opset whose ops are all here is run
# with its model's opset raised to 13 ("lifted"), so ONNX's own data checks
# them although sparsec takes opsets from 13.
LIFTABLE_OPS = {"Elu", "Selu", "Celu", "HardSigmoid", "Softplus", "Softsign",
                "ThresholdedRelu", "LeakyRelu", "Conv", "AveragePool", "MaxPool"}


def unsupported_type(model):
    """Graph inputs/outputs that are not tensors of a supported type."""
    for v in list(model.graph.input) + list(model.graph.output):
        if not v.type.HasField("tensor_type") or v.type.tensor_type.elem_type not in SUPPORTED_TYPES:
            return v.name
    return None


def freeze_integer_inputs(model, test_dir):
    """Turns integer graph inputs (axes, shapes, k, split sizes) into
    initializers holding the values of test_data_set_0, the way a deployed
    model carries them. Returns the new model or None."""
    data_dir = os.path.join(test_dir, "test_data_set_0")
    frozen = False
    inputs = list(model.graph.input)
    for i, v in enumerate(inputs):
        if v.type.tensor_type.elem_type not in INTEGER_TYPES:
            continue
        pb = os.path.join(data_dir, f"input_{i}.pb")
        if not os.path.isfile(pb):
            return None
        t = TensorProto()
        with open(pb, "rb") as f:
            t.ParseFromString(f.read())
        t.name = v.name
        model.graph.initializer.append(t)
        model.graph.input.remove(v)
        frozen = True
    return model if frozen else None


def load_pb(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def compile_and_compare(sparsec, tmp, name, model_path, frozen, test_dir):
    """Compiles one node test and checks every data set. Returns (ok, message);
    ok is None when the compiler rejects the model as unsupported."""
    import numpy as np
    out = os.path.join(tmp, name)
    r = subprocess.run([sparsec, "compile", model_path, "-o", out, "-q"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        msg = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        if "does not support" in r.stderr or "is not supported" in r.stderr:
            return None, msg
        return False, "compile: " + msg
    model = onnx.load(os.path.join(test_dir, name, "model.onnx"), load_external_data=False)
    inputs = [v.name for v in model.graph.input]
    outputs = [v.name for v in model.graph.output]
    data_sets = sorted(d for d in os.listdir(os.path.join(test_dir, name))
                       if d.startswith("test_data_set_"))
    for ds in data_sets:
        ds_dir = os.path.join(test_dir, name, ds)
        cmd = [os.path.join(out, "model"), "run", "--threads", "1",
               "--output-dir", os.path.join(out, ds)]
        for i, iname in enumerate(inputs):
            pb = os.path.join(ds_dir, f"input_{i}.pb")
            if iname in frozen or not os.path.isfile(pb):
                continue
            _, a = load_pb(pb)
            p = os.path.join(out, f"{ds}_in{i}.npy")
            np.save(p, a)
            cmd += ["--input", f"{iname}={p}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            msg = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
            if "not supported" in msg:
                return None, msg
            return False, f"{ds}: run: {msg}"
        for i, oname in enumerate(outputs):
            _, want = load_pb(os.path.join(ds_dir, f"output_{i}.pb"))
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in oname)
            got = np.load(os.path.join(out, ds, safe + ".npy"))
            if got.shape != want.shape:
                return False, f"{ds}: output {oname}: shape {got.shape} != {want.shape}"
            if np.issubdtype(want.dtype, np.floating):
                if not np.allclose(got, want, rtol=1e-3, atol=1e-5, equal_nan=True):
                    err = np.nanmax(np.abs(got.astype(np.float64) - want))
                    return False, f"{ds}: output {oname}: max abs err {err:.3g}"
            elif not np.array_equal(got, want):
                return False, f"{ds}: output {oname}: values differ"
    return True, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sparsec", required=True, help="path to the sparsec binary")
    ap.add_argument("--dir", default=DEFAULT_DIR, help="node test directory")
    ap.add_argument("--filter", default="", help="only tests whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--run", action="store_true",
                    help="compile, run and compare outputs (x86)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()

    if not os.path.isdir(args.dir):
        print(f"error: node test directory not found: {args.dir}", file=sys.stderr)
        return 2
    supported = set(subprocess.run([args.sparsec, "import", "--list-ops"], check=True,
                                   capture_output=True, text=True).stdout.split())
    passed = failed = unsupported = unsupported_config = frozen_count = 0
    lifted_count = 0
    importable = []
    tmp = tempfile.mkdtemp()

    def run(path):
        return subprocess.run([args.sparsec, "import", path, "-o", os.devnull],
                              capture_output=True, text=True)

    for name in sorted(os.listdir(args.dir)):
        if args.filter and args.filter not in name:
            continue
        path = os.path.join(args.dir, name, "model.onnx")
        if not os.path.isfile(path):
            continue
        model = onnx.load(path, load_external_data=False)
        opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                    default=0)
        ops = {n.op_type for n in model.graph.node}
        domains = {n.domain for n in model.graph.node} - {"", "ai.onnx"}
        if opset < 13 and ops <= LIFTABLE_OPS and ops <= supported and not domains:
            for o in model.opset_import:
                if o.domain in ("", "ai.onnx"):
                    o.version = 13
            path = os.path.join(tmp, name + ".lifted.onnx")
            onnx.save(model, path)
            lifted_count += 1
            opset = 13
        if not ops <= supported or domains or not 13 <= opset <= 21:
            unsupported += 1
            if args.verbose:
                print(f"UNSUPPORTED {name}: {sorted(ops - supported)} opset {opset}")
            continue
        if unsupported_type(model):
            unsupported += 1
            if args.verbose:
                print(f"UNSUPPORTED {name}: non-tensor or unsupported element type")
            continue
        r = run(path)
        frozen_path, frozen_names = None, set()
        if r.returncode != 0 and "must be a constant" in r.stderr or "must be constant" in r.stderr:
            before = {v.name for v in model.graph.input}
            frozen = freeze_integer_inputs(model, os.path.join(args.dir, name))
            if frozen is not None:
                frozen_path = os.path.join(tmp, name + ".onnx")
                frozen_names = before - {v.name for v in frozen.graph.input}
                onnx.save(frozen, frozen_path)
                r = run(frozen_path)
                frozen_count += 1
        # Refusals that name what is not supported: an op's configuration or
        # output, a data type, an element type an op's operand cannot have.
        if r.returncode == 1 and ("is not supported" in r.stderr or
                                  "does not support" in r.stderr or
                                  "unsupported data type" in r.stderr or
                                  "must be ranked tensor of" in r.stderr):
            unsupported_config += 1
            if args.verbose:
                print(f"UNSUPPORTED {name}: {r.stderr.strip().splitlines()[0]}")
            continue
        if r.returncode == 0:
            importable.append((name, path if frozen_path is None else frozen_path,
                               frozen_names))
        else:
            failed += 1
            msg = r.stderr.strip().splitlines()
            print(f"FAIL {name}: {msg[0] if msg else 'exit %d' % r.returncode}")
    if not args.run:
        passed += len(importable)
        if args.verbose:
            for name, _, _ in importable:
                print(f"PASS {name}")
    else:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(lambda t: compile_and_compare(args.sparsec, tmp, *t,
                                                                  args.dir),
                                    importable))
        for (name, _, _), (ok, msg) in zip(importable, results):
            if ok is None:
                unsupported_config += 1
                if args.verbose:
                    print(f"UNSUPPORTED {name}: {msg}")
            elif ok:
                passed += 1
                if args.verbose:
                    print(f"PASS {name}")
            else:
                failed += 1
                print(f"FAIL {name}: {msg}")
    print(f"node tests: {passed} passed, {failed} failed, {unsupported} unsupported "
          f"(ops, opset or types), {unsupported_config} unsupported configurations "
          f"(rejected with a message); {frozen_count} run with integer inputs frozen "
          f"from their test data, {lifted_count} lifted to opset 13")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
