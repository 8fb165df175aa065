#!/usr/bin/env python3
"""How many attention heads a decoder's tokens need (oracle contextual head
sparsity), measured with ONNX Runtime on text.

  head_sparsity.py MODEL.onnx --text FILE [--seq-len 128] [--max-chunks 8]

For every attention block of an OPT-style export without a KV cache (the
out projection a MatMul of a [D, D] initializer whose input is the heads'
context, Reshape(Transpose(MatMul(probabilities, V)))), each token's output
of that block is the sum over heads h of c_h = context_h . W_o[h rows].
Per layer it prints:
  - the share of heads a token needs for 90 % and 95 % of the sum of its
    heads' norms |c_h| (heads taken largest first), averaged over tokens;
  - the relative error |sum of the kept c_h - sum of all| / |sum of all|
    when each token keeps only its largest 25 %, 50 % or 75 % of heads.
This is the oracle (the heads picked knowing their outputs), the bound a
head predictor works toward: DejaVu-style attention sparsity skips the
q/k/v and out projection rows of a token's unneeded heads. Bytes of the
text are the ids (a byte-level model); other vocabularies take --ids.
"""
import argparse
import sys

import numpy as np


def attention_outputs(model):
    """[(layer, context tensor name, W_o initializer name)] in graph order."""
    import onnx
    producer = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name: i for i in model.graph.initializer}
    found = []
    for n in model.graph.node:
        if n.op_type != "MatMul" or n.input[1] not in inits:
            continue
        w = inits[n.input[1]]
        if len(w.dims) != 2 or w.dims[0] != w.dims[1]:
            continue
        r = producer.get(n.input[0])
        t = producer.get(r.input[0]) if r is not None and r.op_type == "Reshape" else None
        pv = producer.get(t.input[0]) if t is not None and t.op_type == "Transpose" else None
        if pv is None or pv.op_type != "MatMul":
            continue
        found.append((len(found), t.input[0], n.input[1]))
    if not found:
        sys.exit("error: no attention out projection found (MatMul of a [D, D] weight on "
                 "Reshape(Transpose(MatMul(P, V))))")
    return found, {name: onnx.numpy_helper.to_array(inits[name]) for _, _, name in found}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--text", help="text whose bytes are the ids")
    ap.add_argument("--ids", help=".npy of token ids [N] instead of --text")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--max-chunks", type=int, default=8)
    args = ap.parse_args()
    if bool(args.text) == bool(args.ids):
        sys.exit("error: give --text or --ids")
    if args.seq_len < 1 or args.max_chunks < 1:
        sys.exit("error: --seq-len and --max-chunks must be positive")
    import onnx
    import onnxruntime as ort
    try:
        model = onnx.load(args.model)
    except Exception as e:  # noqa: BLE001 (any load failure is the user's file)
        sys.exit(f"error: cannot load {args.model}: {e}")
    blocks, weights = attention_outputs(model)
    graph_outputs = {o.name for o in model.graph.output}
    for _, ctx, _ in blocks:
        if ctx not in graph_outputs:
            model.graph.output.append(onnx.ValueInfoProto(name=ctx))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    inputs = {i.name for i in sess.get_inputs()}
    if "input_ids" not in inputs:
        sys.exit("error: the model has no input_ids input (a decoder export is expected)")
    if args.text:
        ids = np.frombuffer(open(args.text, "rb").read(), dtype=np.uint8).astype(np.int64)
    else:
        ids = np.load(args.ids).astype(np.int64).reshape(-1)
    chunks = min(args.max_chunks, len(ids) // args.seq_len)
    if chunks < 1:
        sys.exit(f"error: fewer than --seq-len {args.seq_len} ids")
    L = len(blocks)
    need = {q: [[] for _ in range(L)] for q in (0.9, 0.95)}
    err = {k: [[] for _ in range(L)] for k in (0.25, 0.5, 0.75)}
    heads = None
    for c in range(chunks):
        x = ids[c * args.seq_len:(c + 1) * args.seq_len][None]
        feed = {"input_ids": x}
        if "attention_mask" in inputs:
            feed["attention_mask"] = np.ones_like(x)
        outs = sess.run([ctx for _, ctx, _ in blocks], feed)
        for (layer, _, wname), ctxv in zip(blocks, outs):
            # ctxv [B, H, S, Dh]; W_o [H * Dh, D], rows by head.
            B, H, S, Dh = ctxv.shape
            heads = H
            w = weights[wname].reshape(H, Dh, -1)
            contrib = np.einsum("bhsd,hde->bshe", ctxv, w).reshape(B * S, H, -1)
            norms = np.linalg.norm(contrib, axis=2)                 # [T, H]
            order = np.argsort(-norms, axis=1)
            sorted_norms = np.take_along_axis(norms, order, axis=1)
            share = np.cumsum(sorted_norms, axis=1) / np.maximum(
                sorted_norms.sum(axis=1, keepdims=True), 1e-30)
            for q in need:
                need[q][layer].extend((np.argmax(share >= q - 1e-9, axis=1) + 1) / H)
            full = contrib.sum(axis=1)
            denom = np.maximum(np.linalg.norm(full, axis=1), 1e-30)
            for k in err:
                keep = max(1, int(round(k * H)))
                mask = np.zeros_like(norms, dtype=bool)
                np.put_along_axis(mask, order[:, :keep], True, axis=1)
                kept = (contrib * mask[:, :, None]).sum(axis=1)
                err[k][layer].extend(np.linalg.norm(kept - full, axis=1) / denom)
    print(f"{args.model}: {L} attention blocks, {heads} heads, {chunks} chunks of "
          f"{args.seq_len} tokens ({chunks * args.seq_len} tokens)")
    print("| layer | heads for 90 % | heads for 95 % | error, largest 25 % kept | 50 % | 75 % |")
    print("|---:|---:|---:|---:|---:|---:|")
    rows = []
    for layer in range(L):
        row = [np.mean(need[0.9][layer]), np.mean(need[0.95][layer])] + \
              [np.mean(err[k][layer]) for k in (0.25, 0.5, 0.75)]
        rows.append(row)
        print(f"| {layer} | {row[0]:.3f} | {row[1]:.3f} | {row[2]:.4f} | {row[3]:.4f} | "
              f"{row[4]:.4f} |")
    mean = np.mean(rows, axis=0)
    print(f"| mean | {mean[0]:.3f} | {mean[1]:.3f} | {mean[2]:.4f} | {mean[3]:.4f} | "
          f"{mean[4]:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
