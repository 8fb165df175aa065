#!/usr/bin/env python3
"""OPT-shaped decoders with synthetic weights for the large-model benchmarks.

The weights are a deterministic function of each parameter's name (numpy's
PCG64 seeded with its CRC-32), so the compiler machine and the GPU machine
produce the same bytes without moving gigabytes between them; the FFN
biases are set so that each neuron fires with a power-law frequency (mean
`--density`, default 0.1: about 90 % ReLU sparsity). The up projections
are i.i.d. by default, so which neurons fire has no low-rank structure for
a predictor to find; `--predictable R:A` makes each up projection a rank-R
map plus an i.i.d. part holding the share A of every pre-activation's
variance (trained models' FFN activations are predictable by low-rank
predictors, the premise of DejaVu-style prediction): a rank-R predictor
then sees all but that share. Every command that makes weights (materialize,
pack, bench, selftest) must be given the same option.

  opt_synth.py export --shape 1.3b --out G.onnx        # GPU machine (PyTorch):
        the KV-cache ONNX graph (Optimum naming), weights left out
  opt_synth.py materialize --graph G.onnx --shape 1.3b --out DIR
        DIR/model.onnx + DIR/weights.bin with the synthetic weights
  opt_synth.py pack --manifest model.manifest.json --shape 1.3b --out model.weights
        a sparsec weight pack from a manifest (`sparsec compile` writes it),
        rebuilt from the synthetic weights (or --onnx FILE's initializers):
        byte-identical to the compiler's, so the binary's checksum holds
  opt_synth.py lookahead --shape 1.3b [--layers N]    # GPU machine (PyTorch):
        how well each FFN is predicted from the attention block's input
        against its own input on these weights (DejaVu's look-ahead)
  opt_synth.py bench --dir DIR --shape 1.3b            # GPU machine: packs,
        builds, `model generate` per build, PyTorch (transformers' OPT with
        the same weights) eager and compiled, one table; --batches 1,4,16
        --prompts 128,1024 adds static-batch runs (B random prompts of P
        tokens decoded together)
"""
import argparse
import concurrent.futures
import json
import math
import os
import struct
import subprocess
import sys
import threading
import time
import zlib

import numpy as np

SHAPES = {
    # OPT-1.3B: d 2048, 32 heads, FFN 8192, 24 layers, vocabulary 50272.
    "1.3b": dict(d=2048, heads=32, ffn=8192, layers=24, vocab=50272, maxpos=2048),
    "6.7b": dict(d=4096, heads=32, ffn=16384, layers=32, vocab=50272, maxpos=2048),
    "125m": dict(d=768, heads=12, ffn=3072, layers=12, vocab=50272, maxpos=2048),
    "tiny": dict(d=128, heads=4, ffn=512, layers=2, vocab=256, maxpos=256),
}


def shape_cfg(args):
    """The shape's configuration with the weight options of `args`."""
    cfg = dict(SHAPES[args.shape])
    if getattr(args, "predictable", None):
        try:
            r, a = args.predictable.split(":")
            cfg["pred"] = (int(r), float(a))
        except ValueError:
            sys.exit(f"error: --predictable wants RANK:SHARE, got '{args.predictable}'")
        if not (0 < cfg["pred"][0] <= cfg["d"] and 0.0 <= cfg["pred"][1] <= 1.0):
            sys.exit(f"error: --predictable {args.predictable}: rank 1..{cfg['d']}, "
                     "share 0..1")
    return cfg


def shape_of(name, cfg):
    d, f, v = cfg["d"], cfg["ffn"], cfg["vocab"]
    if name == "emb":
        return (v, d)
    if name == "pos":
        return (cfg["maxpos"] + 2, d)
    if name == "head":
        return (d, v)
    if name in ("lnf_w", "lnf_b"):
        return (d,)
    part = name.split(".")[-1]
    return {"ln1_w": (d,), "ln1_b": (d,), "ln2_w": (d,), "ln2_b": (d,),
            "wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d),
            "bq": (d,), "bk": (d,), "bv": (d,), "bo": (d,),
            "w1": (d, f), "b1": (f,), "w2": (f, d), "b2": (d,)}[part]


def param_names(cfg):
    names = ["emb", "pos"]
    for i in range(cfg["layers"]):
        names += [f"l{i}.{p}" for p in ("ln1_w", "ln1_b", "wq", "bq", "wk", "bk", "wv",
                                        "bv", "wo", "bo", "ln2_w", "ln2_b", "w1", "b1",
                                        "w2", "b2")]
    return names + ["lnf_w", "lnf_b", "head"]


def norm_ppf(p):
    """Inverse standard normal CDF (Acklam's rational approximation)."""
    a = [-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
         1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00]
    b = [-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
         6.680131188771972e+01, -1.328068155288572e+01]
    c = [-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
         -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00]
    dd = [7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
          3.754408661907416e+00]
    p = np.asarray(p, np.float64)
    out = np.empty_like(p)
    lo, hi = p < 0.02425, p > 1 - 0.02425
    mid = ~(lo | hi)
    q = np.sqrt(-2 * np.log(p[lo]))
    out[lo] = (((((c[0]*q+c[1])*q+c[2])*q+c[3])*q+c[4])*q+c[5]) / \
        ((((dd[0]*q+dd[1])*q+dd[2])*q+dd[3])*q+1)
    q = p[mid] - 0.5
    r = q * q
    out[mid] = (((((a[0]*r+a[1])*r+a[2])*r+a[3])*r+a[4])*r+a[5])*q / \
        (((((b[0]*r+b[1])*r+b[2])*r+b[3])*r+b[4])*r+1)
    q = np.sqrt(-2 * np.log(1 - p[hi]))
    out[hi] = -(((((c[0]*q+c[1])*q+c[2])*q+c[3])*q+c[4])*q+c[5]) / \
        ((((dd[0]*q+dd[1])*q+dd[2])*q+dd[3])*q+1)
    return out


_made = {}


def make(name, cfg, density=0.1):
    """The synthetic value of parameter `name` (float32, deterministic;
    memoised: the packs and the PyTorch peer share one copy)."""
    key = (name, tuple(sorted(cfg.items())), density)
    if key not in _made:
        _made[key] = _make(name, cfg, density)
    return _made[key]


def _make(name, cfg, density):
    shape = shape_of(name, cfg)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    part = name.split(".")[-1]
    d, f = cfg["d"], cfg["ffn"]
    if part.endswith("_w") and part.startswith(("ln", "lnf")):
        return np.ones(shape, np.float32)
    if part in ("ln1_b", "ln2_b", "lnf_b", "bq", "bk", "bv", "bo", "b2"):
        return np.zeros(shape, np.float32)
    if part == "b1":
        # Neuron j fires on a fraction p_j of tokens: power law in a random
        # order, mean `density`. The pre-activation without bias is about
        # N(0, 1) (layer-normed input, weights N(0, 1/d)).
        ranks = rng.permutation(f) + 1.0
        p = ranks ** -0.7
        for _ in range(50):  # scale to the mean density
            p = np.clip(p * density / p.mean(), 1e-4, 0.95)
        return (norm_ppf(p)).astype(np.float32)  # h + b > 0 iff h > -b
    if part == "w1" and cfg.get("pred"):
        # x . w1 = sqrt(1 - A) * (x Q) u / sqrt(R) + sqrt(A) * x n / sqrt(d):
        # Q [d, R] of random signs over sqrt(d) (R nearly orthogonal unit
        # directions), u and n i.i.d. N(0, 1), so for isotropic x of unit
        # variance each pre-activation is about N(0, 1), its share 1 - A
        # coming from R directions of x. The product Q u is exact (u in
        # steps of 2^-20, integers in float64 sums), so every machine's
        # BLAS makes the same bytes: a float32 product (or a QR) rounds
        # differently on different CPUs, and the pack's checksum breaks.
        r, a = cfg["pred"]
        signs = rng.integers(0, 2, (d, r)).astype(np.float64) * 2.0 - 1.0
        u = np.round(rng.standard_normal((r, f)) * 2.0 ** 20)
        w = ((signs @ u) * 2.0 ** -20).astype(np.float32)
        w *= np.float32(math.sqrt((1.0 - a) / (r * d)))
        w += rng.standard_normal((d, f), dtype=np.float32) * np.float32(math.sqrt(a / d))
        return w
    std = {"emb": 1.0, "pos": 0.1, "head": 1.0 / math.sqrt(d),
           "wq": 1.0 / math.sqrt(d), "wk": 1.0 / math.sqrt(d),
           "wv": 1.0 / math.sqrt(d), "wo": 1.0 / math.sqrt(d),
           "w1": 1.0 / math.sqrt(d), "w2": 1.0 / math.sqrt(f)}[part]
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std))


# ---------------------------------------------------------------------------
# export (PyTorch): the graph with Optimum-style KV-cache inputs and outputs
# ---------------------------------------------------------------------------

def torch_module(cfg):
    import torch
    import torch.nn as nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            d, f = cfg["d"], cfg["ffn"]
            for n in ("ln1_w", "ln1_b", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo",
                      "ln2_w", "ln2_b", "w1", "b1", "w2", "b2"):
                shp = shape_of("x." + n, cfg)
                setattr(self, n, nn.Parameter(torch.empty(shp)))

    class OPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Parameter(torch.empty(shape_of("emb", cfg)))
            self.pos = nn.Parameter(torch.empty(shape_of("pos", cfg)))
            self.layers = nn.ModuleList([Layer() for _ in range(cfg["layers"])])
            self.lnf_w = nn.Parameter(torch.empty(cfg["d"]))
            self.lnf_b = nn.Parameter(torch.empty(cfg["d"]))
            self.head = nn.Parameter(torch.empty(shape_of("head", cfg)))

        def forward(self, input_ids, attention_mask, *past):
            F = torch.nn.functional
            B, S = input_ids.shape
            H, D = cfg["heads"], cfg["d"] // cfg["heads"]
            P = past[0].shape[2]
            T = P + S
            pos = (torch.cumsum(attention_mask, 1) * attention_mask - 1)[:, P:] + 2
            x = F.embedding(input_ids, self.emb) + F.embedding(pos, self.pos)
            pad = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            qi = torch.arange(S, device=x.device)[:, None] + P
            kj = torch.arange(T, device=x.device)[None, :]
            causal = torch.where(kj <= qi, 0.0, -10000.0)
            mask = causal[None, None] + pad
            presents = []
            for i, l in enumerate(self.layers):
                h = F.layer_norm(x, (cfg["d"],), l.ln1_w, l.ln1_b)

                def heads(t):
                    return t.reshape(B, S, H, D).transpose(1, 2)
                q = heads(h @ l.wq + l.bq)
                k = torch.cat([past[2 * i], heads(h @ l.wk + l.bk)], dim=2)
                v = torch.cat([past[2 * i + 1], heads(h @ l.wv + l.bv)], dim=2)
                presents += [k, v]
                s = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(D)) + mask
                o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, S, H * D)
                x = x + (o @ l.wo + l.bo)
                h = F.layer_norm(x, (cfg["d"],), l.ln2_w, l.ln2_b)
                x = x + (torch.relu(h @ l.w1 + l.b1) @ l.w2 + l.b2)
            x = F.layer_norm(x, (cfg["d"],), self.lnf_w, self.lnf_b)
            return (x @ self.head, *presents)

    return OPT()


def rename(torch_name):
    """PyTorch parameter name -> synthetic name (layers.3.w1 -> l3.w1)."""
    if torch_name.startswith("layers."):
        _, i, n = torch_name.split(".")
        return f"l{i}.{n}"
    return torch_name


def cmd_export(args):
    import onnx
    import torch
    cfg = shape_cfg(args)
    model = torch_module(cfg).eval()
    # Distinct values: the exporter merges identical parameters.
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.fill_(1e-3 * (i + 1))
    L, H, D = cfg["layers"], cfg["heads"], cfg["d"] // cfg["heads"]
    ids = torch.zeros(1, 1, dtype=torch.long)
    mask = torch.ones(1, 3, dtype=torch.long)
    past = [torch.zeros(1, H, 2, D) for _ in range(2 * L)]
    names = ["input_ids", "attention_mask"]
    outs = ["logits"]
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total_seq"},
           "logits": {0: "batch", 1: "seq"}}
    for i in range(L):
        for kv in ("key", "value"):
            names.append(f"past_key_values.{i}.{kv}")
            outs.append(f"present.{i}.{kv}")
            dyn[names[-1]] = {0: "batch", 2: "past_seq"}
            dyn[outs[-1]] = {0: "batch", 2: "total_seq"}
    # Parameters become graph inputs (no data): materialize turns them into
    # initializers with the synthetic values.
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask, *past), args.out, input_names=names,
                          output_names=outs, dynamic_axes=dyn, opset_version=17,
                          do_constant_folding=False, export_params=False, dynamo=False)
    m = onnx.load(args.out)
    params = {n for n, _ in model.named_parameters()}
    mapping = {n: rename(n) for n in params}
    for v in m.graph.input:
        if v.name in mapping:
            v.name = mapping[v.name]
    for node in m.graph.node:
        node.input[:] = [mapping.get(i, i) for i in node.input]
    onnx.save(m, args.out)
    found = sum(v.name in set(mapping.values()) for v in m.graph.input)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes; "
          f"{found} of {len(params)} parameters as inputs)")
    if found != len(params):
        sys.exit("error: the exporter merged parameters")


# ---------------------------------------------------------------------------
# materialize: the graph + the synthetic weights as ONNX external data
# ---------------------------------------------------------------------------

def cmd_materialize(args):
    import onnx
    cfg = shape_cfg(args)
    m = onnx.load(args.graph, load_external_data=False)
    os.makedirs(args.out, exist_ok=True)
    known = set(param_names(cfg))
    # (name, dims) of each parameter: graph inputs, or, in a graph
    # materialized before, external initializers (new weights, same graph).
    params = [(v.name, tuple(d.dim_value for d in v.type.tensor_type.shape.dim))
              for v in m.graph.input if v.name in known]
    if not params:
        params = [(i.name, tuple(i.dims)) for i in m.graph.initializer if i.name in known]
        kept = [i for i in m.graph.initializer if i.name not in known]
        del m.graph.initializer[:]
        m.graph.initializer.extend(kept)
    missing = known - {name for name, _ in params}
    if missing:
        sys.exit(f"error: the graph lacks parameters {sorted(missing)[:5]}...")
    offset = 0
    with open(os.path.join(args.out, "weights.bin"), "wb") as f:
        for name, dims in params:
            a = _make(name, cfg, args.density)  # not memoised: one at a time
            if dims != a.shape:
                sys.exit(f"error: {name}: graph {dims}, synthetic {a.shape}")
            init = m.graph.initializer.add()
            init.name = name
            init.data_type = onnx.TensorProto.FLOAT
            init.dims[:] = a.shape
            init.data_location = onnx.TensorProto.EXTERNAL
            for k, val in (("location", "weights.bin"), ("offset", str(offset)),
                           ("length", str(a.nbytes))):
                e = init.external_data.add()
                e.key, e.value = k, val
            f.write(a.tobytes())
            offset += a.nbytes
            pad = (-offset) % 64
            f.write(b"\0" * pad)
            offset += pad
    keep = [v for v in m.graph.input if v.name not in known]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    onnx.save(m, os.path.join(args.out, "model.onnx"))
    print(f"wrote {args.out}/model.onnx and weights.bin ({offset} bytes)")


# ---------------------------------------------------------------------------
# pack: a sparsec weight pack from a manifest
# ---------------------------------------------------------------------------

def half(a):
    return a.astype(np.float16)


def apply_transforms(a, seg):
    for t in seg["transforms"]:
        if t == "transpose":
            a = np.ascontiguousarray(a.T)
        elif t == "f16":
            a = half(a)
        elif t == "widen":  # a half-precision source read as float32
            a = a.astype(np.float32)
        elif t in ("permute_rows", "permute_cols"):
            perm = np.asarray(seg["permutation"], np.int64)
            a = a[perm] if t == "permute_rows" else a[:, perm]
        elif t.startswith(("slice_rows:", "slice_cols:")):
            _, lo, hi = t.split(":")
            lo, hi = int(lo), int(hi)
            a = a[lo:hi] if t.startswith("slice_rows") else a[:, lo:hi]
        else:
            raise SystemExit(f"error: transform '{t}' is not supported here")
    return np.ascontiguousarray(a)


def load_manifest(manifest_path):
    import gzip
    if manifest_path.endswith(".gz") or not os.path.exists(manifest_path):
        path = manifest_path if manifest_path.endswith(".gz") else manifest_path + ".gz"
        return json.load(gzip.open(path, "rt"))
    return json.load(open(manifest_path))


def inline_path(manifest_path):
    """Where the compiler-made segments of a build travel (next to its
    manifest): model.inline.bin.gz, or .xz where it was recompressed."""
    gz = os.path.join(os.path.dirname(manifest_path), "model.inline.bin.gz")
    xz = gz[:-3] + ".xz"
    return xz if os.path.exists(xz) and not os.path.exists(gz) else gz


def open_inline(path):
    import gzip
    import lzma
    return lzma.open(path, "rb") if path.endswith(".xz") else gzip.open(path, "rb")


def cmd_extract_inline(args):
    """Saves the compiler-made segments (predictors) of a compiled pack, in
    segment order, so that write_pack can rebuild the whole pack elsewhere."""
    import gzip
    man = load_manifest(args.manifest)
    segs = [s for s in man["segments"] if s["source"] == "<inline>"]
    if not segs:
        print("no compiler-made segments")
        return 0
    with open(args.weights, "rb") as f:
        header = f.read(64)
        payload_off = struct.unpack("<IIQQQQQQ", header[8:64])[3]
        with gzip.open(inline_path(args.manifest), "wb", compresslevel=6) as out:
            for s in segs:
                f.seek(payload_off + s["offset"])
                out.write(f.read(s["bytes"]))
    print(f"wrote {inline_path(args.manifest)}: {len(segs)} segments, "
          f"{sum(s['bytes'] for s in segs)} bytes")
    return 0


def segment_key(s):
    """What a segment's bytes depend on (not where the pack puts them)."""
    if s["source"] == "<inline>":
        return None
    return json.dumps([s["source"], s["transforms"], s["permutation"], s["dtype"],
                       s["shape"]])


def once_per_name(source):
    """`source` made safe for threads, each name computed once (a second
    caller of a name waits for the first's result)."""
    lock = threading.Lock()
    futures = {}

    def get(name):
        with lock:
            fut = futures.get(name)
            mine = fut is None
            if mine:
                fut = futures[name] = concurrent.futures.Future()
        if mine:
            try:
                fut.set_result(source(name))
            except BaseException as e:  # re-raised in every caller
                fut.set_exception(e)
        return fut.result()
    return get


# Segments built ahead of the one being written, by worker threads (numpy's
# generators, arithmetic and casts release the GIL on large arrays): an
# OPT-6.7B pack took 205-259 s of one core on the GPU machine.
PACK_THREADS = min(16, os.cpu_count() or 1)


def write_pack(manifest_path, out, source, reuse=None):
    """Writes the pack; `source(name)` gives a segment's source array, the
    compiler-made segments come from model.inline.bin.gz (extract-inline).
    `reuse` (or None): segment key -> (pack path, offset) of packs written
    before; such segments are copied from there instead of rebuilt, and the
    segments written here are added to it. Segments are built by
    PACK_THREADS threads, at most twice that many ahead of the writer; the
    bytes are the same as built one by one."""
    man = load_manifest(manifest_path)
    inline = None
    written = []
    copied = 0
    segs = man["segments"]
    count = len(segs)
    source = once_per_name(source)
    # The segments rebuilt from sources, in write order, built ahead.
    built = [s for s in segs if s["source"] != "<inline>" and
             not (reuse is not None and segment_key(s) in reuse)]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=PACK_THREADS)
    pending = {}
    ahead = iter(built)

    def top_up():
        while len(pending) < 2 * PACK_THREADS:
            s = next(ahead, None)
            if s is None:
                return
            pending[id(s)] = pool.submit(
                lambda s=s: apply_transforms(source(s["source"]), s))
    payload_off = (64 + 16 * count + 63) // 64 * 64
    try:
        with open(out, "wb") as f:
            # 64 bytes: magic, version, count, table offset, payload offset,
            # payload bytes, checksum, reserved, padding (Runtime.h).
            header = b"SPCWPACK" + struct.pack("<IIQQQQQQ", 1, count, 64, payload_off,
                                               man["payload_bytes"], int(man["checksum"], 16),
                                               0, 0)
            f.write(header)
            for s in segs:
                f.write(struct.pack("<QQ", s["offset"], s["bytes"]))
            f.write(b"\0" * (payload_off - 64 - 16 * count))
            pos = 0
            for s in segs:
                if s["source"] == "<inline>":
                    if inline is None:
                        if not os.path.exists(inline_path(manifest_path)):
                            raise SystemExit("error: compiler-made segments (predictors) need "
                                             f"{inline_path(manifest_path)} (extract-inline)")
                        inline = open_inline(inline_path(manifest_path))
                    f.write(b"\0" * (s["offset"] - pos))
                    data = inline.read(s["bytes"])
                    if len(data) != s["bytes"]:
                        raise SystemExit(f"error: {inline_path(manifest_path)} is short")
                    f.write(data)
                    pos = s["offset"] + s["bytes"]
                    continue
                key = segment_key(s)
                if reuse is not None and key in reuse:
                    copied += 1
                    path, offset = reuse[key]
                    f.write(b"\0" * (s["offset"] - pos))
                    with open(path, "rb") as src:
                        src.seek(offset)
                        left = s["bytes"]
                        while left:
                            chunk = src.read(min(left, 1 << 26))
                            if not chunk:
                                raise SystemExit(f"error: {path} is short")
                            f.write(chunk)
                            left -= len(chunk)
                    pos = s["offset"] + s["bytes"]
                    continue
                top_up()
                a = pending.pop(id(s)).result()
                want = {"float32": np.float32, "float16": np.float16}[s["dtype"]]
                if a.dtype != want or list(a.shape) != s["shape"] or a.nbytes != s["bytes"]:
                    raise SystemExit(f"error: segment {s['index']} ({s['symbol']}) rebuilt as "
                                     f"{a.dtype}{list(a.shape)}, manifest {s['dtype']}{s['shape']}")
                f.write(b"\0" * (s["offset"] - pos))
                f.write(a.data)  # contiguous (apply_transforms)
                pos = s["offset"] + s["bytes"]
                written.append((key, payload_off + s["offset"]))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    if reuse is not None:
        for key, offset in written:
            reuse.setdefault(key, (out, offset))
    return copied



def cmd_pack(args):
    cache = {}
    if args.onnx:
        import onnx
        from onnx import numpy_helper
        m = onnx.load(args.onnx)
        for init in m.graph.initializer:
            cache[init.name] = numpy_helper.to_array(init)

        def source(n):
            return cache[n]
    else:
        cfg = shape_cfg(args)

        def source(n):
            if n not in cache:
                cache[n] = make(n, cfg, args.density)
            return cache[n]
    reuse = None
    if args.reuse:
        # Segments of an existing pack (its manifest beside it) are copied.
        reuse = pack_index(os.path.join(os.path.dirname(args.reuse),
                                        "model.manifest.json"), args.reuse)
    copied = write_pack(args.manifest, args.out, source, reuse)
    print(f"wrote {args.out}" + (f" ({copied} segments copied from {args.reuse})"
                                 if args.reuse else ""))


def pack_index(manifest_path, pack_path):
    """segment key -> (pack_path, file offset) for every source segment of a
    written pack (for write_pack's `reuse`)."""
    with open(pack_path, "rb") as f:
        header = f.read(64)
    if header[:8] != b"SPCWPACK":
        raise SystemExit(f"error: {pack_path} is not a weight pack")
    payload_off = struct.unpack("<IIQQQQQQ", header[8:64])[3]
    index = {}
    for s in load_manifest(manifest_path)["segments"]:
        key = segment_key(s)
        if key is not None:
            index.setdefault(key, (pack_path, payload_off + s["offset"]))
    return index


# ---------------------------------------------------------------------------
# bench (GPU machine)
# ---------------------------------------------------------------------------

def hf_model(cfg, density, device="cuda"):
    import torch
    from transformers import OPTConfig, OPTForCausalLM
    conf = OPTConfig(vocab_size=cfg["vocab"], hidden_size=cfg["d"],
                     num_hidden_layers=cfg["layers"], ffn_dim=cfg["ffn"],
                     num_attention_heads=cfg["heads"], max_position_embeddings=cfg["maxpos"],
                     do_layer_norm_before=True, word_embed_proj_dim=cfg["d"],
                     activation_function="relu", tie_word_embeddings=False,
                     enable_bias=True, dropout=0.0, attention_dropout=0.0)
    with torch.device("meta"):
        model = OPTForCausalLM(conf)
    # Every parameter made first, PACK_THREADS at a time (make memoises).
    with concurrent.futures.ThreadPoolExecutor(PACK_THREADS) as pool:
        list(pool.map(lambda n: make(n, cfg, density), param_names(cfg)))
    sd = {}
    t = lambda n: torch.from_numpy(make(n, cfg, density))
    dec = "model.decoder."
    sd[dec + "embed_tokens.weight"] = t("emb")
    sd[dec + "embed_positions.weight"] = t("pos")
    sd[dec + "final_layer_norm.weight"] = t("lnf_w")
    sd[dec + "final_layer_norm.bias"] = t("lnf_b")
    sd["lm_head.weight"] = t("head").T.contiguous()
    for i in range(cfg["layers"]):
        p = f"{dec}layers.{i}."
        for hf, ours in (("self_attn.q_proj", "q"), ("self_attn.k_proj", "k"),
                         ("self_attn.v_proj", "v"), ("self_attn.out_proj", "o")):
            sd[p + hf + ".weight"] = t(f"l{i}.w{ours}").T.contiguous()
            sd[p + hf + ".bias"] = t(f"l{i}.b{ours}")
        sd[p + "self_attn_layer_norm.weight"] = t(f"l{i}.ln1_w")
        sd[p + "self_attn_layer_norm.bias"] = t(f"l{i}.ln1_b")
        sd[p + "final_layer_norm.weight"] = t(f"l{i}.ln2_w")
        sd[p + "final_layer_norm.bias"] = t(f"l{i}.ln2_b")
        sd[p + "fc1.weight"] = t(f"l{i}.w1").T.contiguous()
        sd[p + "fc1.bias"] = t(f"l{i}.b1")
        sd[p + "fc2.weight"] = t(f"l{i}.w2").T.contiguous()
        sd[p + "fc2.bias"] = t(f"l{i}.b2")
    model.load_state_dict(sd, assign=True, strict=True)
    return model.to(device=device, dtype=torch.float16).eval()


def read_bandwidth():
    """Bytes per second a plain reduction streams from device memory: the
    measured ceiling for the decode steps' weight reads."""
    import torch
    x = torch.ones(2 << 30, dtype=torch.float16, device="cuda")
    x.sum(dtype=torch.float32)  # warm-up
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x.sum(dtype=torch.float32)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    del x
    torch.cuda.empty_cache()
    return (4 << 30) / best


def torch_decode(model, prompt, new, warmup=8):
    """Greedy decode with the HF KV cache; (steps/s, ttft s, tokens of the
    first row). `prompt` is one list of ids or a batch of equal-length lists.
    A short untimed decode of the same shapes runs first (`warmup` steps):
    a cold first call (library loading, kernel selection for each new
    shape) took several times as long a step."""
    import torch
    ids = torch.tensor(prompt, device="cuda")
    if ids.dim() == 1:
        ids = ids[None]
    if warmup > 0:
        torch_decode(model, prompt, warmup, warmup=0)
    with torch.no_grad():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        ttft = time.perf_counter() - t0
        toks = [int(nxt[0])]
        B = ids.shape[0]
        mask = torch.ones(B, ids.shape[1] + 1, dtype=torch.long, device="cuda")
        t1 = time.perf_counter()
        for _ in range(new - 1):
            out = model(nxt, past_key_values=past, attention_mask=mask, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            toks.append(int(nxt[0]))
            mask = torch.ones(B, mask.shape[1] + 1, dtype=torch.long, device="cuda")
        torch.cuda.synchronize()
        return (new - 1) / (time.perf_counter() - t1), ttft, toks


def torch_generate_static(model, prompt, new):
    """transformers' generate with a static KV cache, which compiles the
    decoding forward pass (torch.compile, mode reduce-overhead: CUDA
    graphs), the documented fast path for decoding. Decode steps/s from two timed runs
    (new and 1 new tokens) after a warm-up that compiles; (steps/s, tokens of
    the first row). `prompt` is one list of ids or a batch of equal-length
    lists (a batch of B decodes B tokens a step)."""
    import torch
    from transformers import CompileConfig
    ids = torch.tensor(prompt, device="cuda")
    if ids.dim() == 1:
        ids = ids[None]
    # generate compiles the decoding forward itself for a static cache.
    kw = dict(do_sample=False, cache_implementation="static", pad_token_id=0,
              compile_config=CompileConfig(mode="reduce-overhead", fullgraph=True))

    def timed(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
        torch.cuda.synchronize()
        return time.perf_counter() - t0, out[0, ids.shape[1]:].tolist()
    timed(new)  # compiles
    timed(new)
    t_all, toks = timed(new)
    t_one, _ = timed(1)
    return (new - 1) / (t_all - t_one), toks


SDPA_MODES = ("default", "no-cudnn")


def sdpa_modes(arg):
    """The eager runs' attention backends: PyTorch's choice ("default"), and
    its choice with cuDNN's SDPA kernels turned off ("no-cudnn"). Where
    PyTorch picks cuDNN's attention (fp16 with a mask), each new key length
    builds a new cuDNN plan, tens of ms, so a decode step, whose length is
    new every step, measures the plan build rather than the step."""
    return SDPA_MODES if arg == "both" else (arg,)


class sdpa_backend:
    """Context: PyTorch's SDPA backend choice per `mode` (SDPA_MODES)."""

    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        import torch
        self.was = torch.backends.cuda.cudnn_sdp_enabled()
        if self.mode == "no-cudnn":
            torch.backends.cuda.enable_cudnn_sdp(False)

    def __exit__(self, *exc):
        import torch
        torch.backends.cuda.enable_cudnn_sdp(self.was)


def sweep_prompts(args):
    """(batch, prompt length, ids [batch, length]) of the batch sweep: random
    prompts, the same for sparsec and PyTorch."""
    for bsz in [int(v) for v in args.batches.split(",")] if args.batches else []:
        for plen in [int(v) for v in args.prompts.split(",")]:
            yield bsz, plen, np.random.default_rng(bsz * 7919 + plen).integers(
                0, 256, (bsz, plen)).astype(np.int64)


def cmd_bench(args):
    cfg = shape_cfg(args)
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, 256, args.prompt).astype(np.int64)
    np.save(os.path.join(args.dir, "prompt.npy"), prompt[None])
    # CUDA and hybrid builds (model.cu) and all-CPU builds (model.cpp).
    builds = sorted(d for d in os.listdir(args.dir)
                    if any(os.path.exists(os.path.join(args.dir, d, f))
                           for f in ("model.cu", "model.cpp")) and
                    (not args.only or d in args.only.split(",")))
    # Extra runs of a build with environment settings: LABEL:VAR=VALUE,...
    variants = [("", {})]
    for v in args.variant or []:
        label, _, assigns = v.partition(":")
        # VAR=VALUE pairs split at the commas that start a new VAR= (a
        # value may hold commas itself: SPARSEC_CUDA_SPLIT=64,8).
        pairs = []
        for piece in assigns.split(","):
            if "=" in piece or not pairs:
                pairs.append(piece)
            else:
                pairs[-1] += "," + piece
        variants.append((label, dict(a.split("=", 1) for a in pairs if a)))
    inc = os.path.join(args.root, "runtime", "include")
    # --build-lib NAME=DIR: that build links the runtime libraries of DIR
    # (two runtimes compared on one build: copies of its folder).
    libs = {}
    for spec in args.build_lib or []:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            sys.exit(f"error: --build-lib wants NAME=DIR, got '{spec}'")
        if name not in builds:
            sys.exit(f"error: --build-lib {spec}: '{name}' is not a build run "
                     f"here (builds: {', '.join(builds) or 'none'})")
        libs[name] = path
    cache = {}
    if args.onnx:  # another model's weights (e.g. llama_synth.py's)
        import onnx
        from onnx import numpy_helper
        for init in onnx.load(args.onnx).graph.initializer:
            cache[init.name] = numpy_helper.to_array(init)

    def source(n):
        if n not in cache:
            cache[n] = make(n, cfg, args.density)
        return cache[n]
    procs = []
    for b in builds:
        d = os.path.join(args.dir, b)
        lib = libs.get(b, args.lib)
        if os.path.exists(os.path.join(d, "model.cpp")):  # as `sparsec compile` builds it
            procs.append(subprocess.Popen(
                ["g++", "-std=c++17", "-O2", "-I", inc, os.path.join(d, "model.cpp"),
                 os.path.join(lib, "libsparsec_runtime.a"), "-lpthread", "-o",
                 os.path.join(d, "model")]))
            continue
        procs.append(subprocess.Popen(
            [args.nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90,code=sm_90", "-I", inc,
             os.path.join(d, "model.cu"), os.path.join(lib, "libsparsec_runtime_cuda.a"),
             os.path.join(lib, "libsparsec_runtime.a"), "-lcublas", "-lcublasLt", "-lpthread", "-o",
             os.path.join(d, "model")]))
    for p in procs:
        p.wait()
    rows = []
    ref_tokens = None

    # Builds with the same manifest (the same weights, e.g. builds that
    # differ only in how the norms run) share one pack, hard-linked.
    manifests = {b: load_manifest(os.path.join(args.dir, b, "model.manifest.json"))
                 for b in builds}
    linked = set()
    # Segments already written by an earlier build's pack are copied from it
    # (a predicted build shares every weight with the dense one).
    reuse = {}
    kept = []  # packs kept for later builds to copy from, dropped at the end
    for i, b in enumerate(builds):
        d = os.path.join(args.dir, b)
        t0 = time.perf_counter()
        pack = os.path.join(d, "model.weights")
        if b not in linked:
            write_pack(os.path.join(d, "model.manifest.json"), pack, source, reuse)
            for later in builds[i + 1:]:
                if later not in linked and manifests[later] == manifests[b]:
                    other = os.path.join(args.dir, later, "model.weights")
                    if os.path.exists(other):
                        os.remove(other)
                    os.link(pack, other)
                    linked.add(later)
        packed = time.perf_counter() - t0
        place = open(os.path.join(d, "placement.txt")).read().strip() \
            if os.path.exists(os.path.join(d, "placement.txt")) else ""
        for label, extra in variants:
            # SPARSEC_CUDA_PROFILE: the runtime's per-step host / GPU split;
            # SPARSEC_GENERATE_PHASES: where the time to first token went.
            env = dict(os.environ, SPARSEC_CUDA_PROFILE="1",
                       SPARSEC_GENERATE_PHASES="1", **extra)
            r = subprocess.run([os.path.join(d, "model"), "generate", "--prompt-ids",
                                os.path.join(args.dir, "prompt.npy"), "--max-new-tokens",
                                str(args.new), "--threads", str(args.threads)],
                               capture_output=True, text=True, env=env)
            lines = r.stderr.strip().splitlines()
            prof = [l for l in lines if l.startswith("sparsec cuda profile:")]
            phases = [l for l in lines if l.startswith("[generate] first token (ms):")]
            rest = [l for l in lines if not l.startswith("sparsec cuda profile:")
                    and l not in phases]
            line = rest[-1] if rest else ""
            toks = [int(x) for x in r.stdout.split()] if r.returncode == 0 else []
            name = b + (f" [{label}]" if label else "")
            rows.append((name, line if r.returncode == 0 else
                         "FAILED: " + r.stderr.strip()[-300:], place, toks))
            print(f"{name}: {rows[-1][1]} (pack {packed:.1f} s) {place[:160]}", flush=True)
            for l in phases:
                print("    " + l[len("[generate] "):], flush=True)
            for l in prof:
                print("    " + l[len("sparsec cuda profile: "):], flush=True)
            if (label or b != "dense") and ref_tokens is not None:
                print(f"    greedy tokens equal to the default run: "
                      f"{sum(a == c for a, c in zip(toks, ref_tokens))}/{len(toks)}")
            if b == "dense" and not label:
                ref_tokens = toks
        # Batch and prompt-length sweep: B independent random prompts of P
        # tokens decoded together (`generate --prompt-ids [B, P]`).
        for bsz, plen, ids in sweep_prompts(args):
            path = os.path.join(args.dir, f"prompt_{bsz}x{plen}.npy")
            np.save(path, ids)
            r = subprocess.run([os.path.join(d, "model"), "generate", "--prompt-ids",
                                path, "--max-new-tokens", str(args.sweep_new),
                                "--threads", str(args.threads)],
                               capture_output=True, text=True)
            lines = r.stderr.strip().splitlines()
            print(f"sweep {b} batch {bsz} prompt {plen}: " +
                  (lines[-1] if r.returncode == 0 and lines else
                   "FAILED: " + r.stderr.strip()[-300:]), flush=True)
        if args.keep_weights:
            continue
        # A later build may still copy segments from this pack (reuse): drop
        # it only once no later build can.
        later_packs = [b2 for b2 in builds[i + 1:] if b2 not in linked]
        if later_packs and any(p == pack for p, _ in reuse.values()):
            kept.append(pack)
            continue
        os.remove(pack)
    for p in kept:
        if os.path.exists(p):
            os.remove(p)
    if args.no_torch:
        return
    try:
        print(f"device read bandwidth: {read_bandwidth() / 1e12:.2f} TB/s (torch.sum over "
              "4 GiB of fp16, best of 5)", flush=True)
        model = hf_model(cfg, args.density)
        print(f"pytorch attention: {model.config._attn_implementation}", flush=True)
        for mode in sdpa_modes(args.torch_sdpa):
            with sdpa_backend(mode):
                tps, ttft, toks = torch_decode(model, prompt.tolist(), args.new)
                same = sum(a == b for a, b in zip(toks, ref_tokens or []))
                print(f"pytorch eager (transformers OPTForCausalLM, fp16, SDPA {mode}): "
                      f"decode {tps:.1f} tokens/s, time to first token {ttft * 1e3:.1f} ms; "
                      f"greedy tokens equal to sparsec dense: {same}/{len(toks)}", flush=True)
                # The batch / prompt sweep with the same random prompts as
                # sparsec's.
                for bsz, plen, ids in sweep_prompts(args):
                    tps, ttft, _ = torch_decode(model, ids.tolist(), args.sweep_new)
                    print(f"sweep pytorch eager (SDPA {mode}) batch {bsz} prompt {plen}: "
                          f"decode {tps * bsz:.1f} tokens/s ({tps:.1f} steps/s), time to "
                          f"first token {ttft * 1e3:.1f} ms", flush=True)
        if not args.no_compile:
            tps, toks = torch_generate_static(model, prompt.tolist(), args.new)
            same = sum(a == b for a, b in zip(toks, ref_tokens or []))
            print(f"torch.compile (generate, static cache, reduce-overhead): decode "
                  f"{tps:.1f} tokens/s; greedy tokens equal to sparsec dense: "
                  f"{same}/{len(toks)}", flush=True)
            # The same sweep compiled (one compilation per batch shape).
            for bsz, plen, ids in sweep_prompts(args):
                tps, _ = torch_generate_static(model, ids.tolist(), args.sweep_new)
                print(f"sweep torch.compile batch {bsz} prompt {plen}: decode "
                      f"{tps * bsz:.1f} tokens/s ({tps:.1f} steps/s)", flush=True)
    except Exception as e:  # report, keep the sparsec rows
        print(f"pytorch peer failed: {e!r}", flush=True)


def cmd_lookahead(args):
    """How well each FFN's neurons are predicted from the attention block's
    input against the FFN's own input, on these synthetic weights (the
    question scripts/lookahead_predictability.py answers for a trained
    export): rank-r reduced-rank least squares from each source, fitted on
    random prompts and evaluated on others, in float64 on the GPU."""
    import torch
    cfg = shape_cfg(args)
    layers = cfg["layers"] if not args.layers else min(args.layers, cfg["layers"])
    try:
        ranks = [int(r) for r in args.ranks.split(",")]
        recalls = [float(r) for r in args.recall.split(",")]
    except ValueError:
        sys.exit("error: --ranks takes integers and --recall numbers, comma-separated")
    if not ranks or min(ranks) < 1 or not all(0.0 < r <= 1.0 for r in recalls):
        sys.exit("error: --ranks must be positive and --recall in (0, 1]")
    if args.tokens < 2 * cfg["d"]:
        sys.exit(f"error: --tokens {args.tokens}: fit on at least 2 d = {2 * cfg['d']} "
                 "tokens, or the least squares fit the noise")
    cfg = dict(cfg, layers=layers)  # the first layers' weights are the whole model's
    model = hf_model(cfg, args.density).float()
    dec = model.model.decoder
    seen = {}

    def keep(name):
        def hook(_m, _i, out):
            seen.setdefault(name, []).append(out.reshape(-1, out.shape[-1]).clone())
        return hook

    for i, layer in enumerate(dec.layers):
        layer.self_attn_layer_norm.register_forward_hook(keep(("attn", i)))
        layer.final_layer_norm.register_forward_hook(keep(("ffn", i)))
        layer.fc1.register_forward_hook(keep(("pre", i)))
    gen = torch.Generator(device="cuda").manual_seed(1)

    def run(tokens):
        seen.clear()
        with torch.no_grad():
            for _ in range(max(1, tokens // args.seq_len)):
                ids = torch.randint(0, cfg["vocab"], (1, args.seq_len), device="cuda",
                                    generator=gen)
                model(ids, attention_mask=torch.ones_like(ids))
        return {k: torch.cat(v) for k, v in seen.items()}

    train, test = run(args.tokens), run(args.tokens // 2)

    def fit(src, tgt, rank):
        src, tgt = src.double(), tgt.double()
        ones = torch.ones(len(src), 1, dtype=src.dtype, device=src.device)
        b = torch.linalg.lstsq(torch.cat([src, ones], 1), tgt).solution
        fitted = torch.cat([src, ones], 1) @ b
        mean = fitted.mean(0)
        c = fitted - mean
        _, vecs = torch.linalg.eigh(c.T @ c)
        v = vecs[:, -rank:]
        return lambda x: ((torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype,
                                                     device=x.device)], 1) @ b - mean)
                          @ v @ v.T + mean)

    def density_at(pred, fires, recall):
        # The threshold that keeps `recall` of the firing pairs; torch.quantile
        # takes at most 2^24 values, so larger sets are sampled at random.
        scores = pred[fires]
        t = torch.quantile(scores[torch.randperm(len(scores), device=scores.device)
                                  [:1 << 24]].float(), 1.0 - recall).double()
        return float((pred >= t).double().mean())

    print(f"synthetic OPT-{args.shape} (--predictable {args.predictable or 'none'}), "
          f"first {layers} layers, {len(train[('pre', 0)])} tokens to fit, "
          f"{len(test[('pre', 0)])} held out; predicted density at each recall from "
          "the FFN's input (ffn) and the attention block's input (attn)")
    cols = [f"{src} r{r} @{rc:g}" for r in ranks for rc in recalls for src in ("ffn", "attn")]
    print("| layer | fires | " + " | ".join(cols) + " |")
    print("|---:|---:|" + "---:|" * len(cols))
    for i in range(layers):
        fires = test[("pre", i)] > 0
        cells = []
        for r in ranks:
            preds = {src: fit(train[(src, i)], train[("pre", i)], r)(test[(src, i)].double())
                     for src in ("ffn", "attn")}
            for rc in recalls:
                for src in ("ffn", "attn"):
                    cells.append(f"{density_at(preds[src], fires, rc):.3f}")
        print(f"| {i} | {float(fires.double().mean()):.3f} | " + " | ".join(cells) + " |",
              flush=True)
    return 0


def cmd_selftest(args):
    """The exported module and transformers' OPT agree on the same weights."""
    import torch
    cfg = shape_cfg(args)
    ours = torch_module(cfg)
    with torch.no_grad():
        for n, p in ours.named_parameters():
            p.copy_(torch.from_numpy(make(rename(n), cfg, args.density)))
    ours = ours.cuda().eval()
    hf = hf_model(cfg, args.density).float()
    ids = torch.randint(0, min(256, cfg["vocab"]), (1, 9), device="cuda")
    mask = torch.ones(1, 9, dtype=torch.long, device="cuda")
    H, D = cfg["heads"], cfg["d"] // cfg["heads"]
    past = [torch.zeros(1, H, 0, D, device="cuda") for _ in range(2 * cfg["layers"])]
    with torch.no_grad():
        a = ours(ids, mask, *past)[0]
        b = hf(ids, attention_mask=mask).logits
        h = ours.layers[0]
        x = torch.nn.functional.layer_norm(
            torch.nn.functional.embedding(ids, ours.emb), (cfg["d"],), h.ln2_w, h.ln2_b)
        density = float((x @ h.w1 + h.b1 > 0).float().mean())
    err = float((a - b).abs().max())
    print(f"selftest {args.shape}: max |ours - transformers| = {err:.3g} "
          f"(logits up to {float(b.abs().max()):.3g}); layer-0 FFN density on "
          f"embeddings {density:.3f}")
    return 0 if err < 1e-3 * max(1.0, float(b.abs().max())) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--shape", default="1.3b", choices=SHAPES)
    e.add_argument("--out", required=True)
    m = sub.add_parser("materialize")
    m.add_argument("--graph", required=True)
    m.add_argument("--shape", default="1.3b", choices=SHAPES)
    m.add_argument("--out", required=True)
    m.add_argument("--density", type=float, default=0.1)
    p = sub.add_parser("pack")
    p.add_argument("--manifest", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--shape", default="1.3b", choices=SHAPES)
    p.add_argument("--onnx", help="take the sources from this ONNX file's initializers")
    p.add_argument("--density", type=float, default=0.1)
    p.add_argument("--reuse", help="a written pack (model.weights, its manifest beside it) "
                   "whose segments are copied where the sources and transforms match")
    x = sub.add_parser("extract-inline")
    x.add_argument("--manifest", required=True)
    x.add_argument("--weights", required=True, help="the compiler's model.weights")
    b = sub.add_parser("bench")
    b.add_argument("--dir", required=True)
    b.add_argument("--shape", default="1.3b", choices=SHAPES)
    b.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    b.add_argument("--lib", required=True, help="dir with libsparsec_runtime{,_cuda}.a")
    b.add_argument("--build-lib", action="append", metavar="NAME=DIR",
                   help="link build NAME against the runtime libraries in DIR "
                        "instead of --lib's")
    b.add_argument("--nvcc", default="/usr/local/cuda/bin/nvcc")
    b.add_argument("--prompt", type=int, default=128)
    b.add_argument("--new", type=int, default=128)
    b.add_argument("--threads", type=int, default=16)
    b.add_argument("--density", type=float, default=0.1)
    b.add_argument("--no-compile", action="store_true")
    b.add_argument("--no-torch", action="store_true", help="skip the PyTorch peer")
    b.add_argument("--torch-sdpa", default="both", choices=SDPA_MODES + ("both",),
                   help="PyTorch eager's attention backends: its default choice, cuDNN's "
                   "SDPA off, or both (default), each a run")
    b.add_argument("--onnx", help="take the weights from this ONNX file's initializers "
                   "(a model other than the OPT shapes; use with --no-torch)")
    b.add_argument("--only", help="build names, comma-separated")
    b.add_argument("--variant", action="append",
                   help="also run each build with LABEL:VAR=VALUE[,VAR=VALUE] (a "
                        "value may hold commas: LABEL:SPARSEC_CUDA_SPLIT=64,8)")
    b.add_argument("--batches", help="also decode batches of these sizes, e.g. 1,4,16")
    b.add_argument("--prompts", default="128",
                   help="prompt lengths of the batch sweep, e.g. 128,1024")
    b.add_argument("--sweep-new", type=int, default=32,
                   help="new tokens per batch-sweep run")
    b.add_argument("--keep-weights", action="store_true",
                   help="leave each build's weight pack (for a profiler run)")
    la = sub.add_parser("lookahead")
    la.add_argument("--shape", default="1.3b", choices=SHAPES)
    la.add_argument("--density", type=float, default=0.1)
    la.add_argument("--layers", type=int, default=0, help="only the first N layers")
    la.add_argument("--tokens", type=int, default=16384, help="tokens to fit on")
    la.add_argument("--seq-len", type=int, default=128)
    la.add_argument("--ranks", default="32")
    la.add_argument("--recall", default="0.99,0.999")
    t = sub.add_parser("selftest")
    t.add_argument("--shape", default="tiny", choices=SHAPES)
    t.add_argument("--density", type=float, default=0.1)
    for parser in (m, p, b, t, la):
        parser.add_argument("--predictable", metavar="R:A",
                            help="up projections of rank R plus an i.i.d. part "
                                 "with the share A of the variance")
    a = ap.parse_args()
    return {"selftest": cmd_selftest, "export": cmd_export, "materialize": cmd_materialize, "pack": cmd_pack,
            "extract-inline": cmd_extract_inline, "lookahead": cmd_lookahead,
            "bench": cmd_bench}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
