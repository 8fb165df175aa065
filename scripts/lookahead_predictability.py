#!/usr/bin/env python3
"""How well a decoder's FFN neurons can be predicted from the attention
block's input instead of the FFN's own input (DejaVu's look-ahead), measured
with ONNX Runtime on text.

  lookahead_predictability.py MODEL.onnx --train FILE --test FILE
      [--ranks 16,32,64] [--recall 0.99] [--seq-len 128] [--max-chunks 8]

For every ReLU FFN of an OPT-style export without a KV cache, two sources
predict which neurons fire:
  ffn   the FFN's input (the up projection's input: the second norm's
        output), what sparsec's predictors read today;
  attn  the attention block's input in the same layer (the first norm's
        output, the q/k/v projections' input), available a whole attention
        block earlier, so a predictor reading it could run beside the
        attention instead of in front of the up projection.
Each source gets a rank-r linear predictor of the up projection's
pre-activations (reduced-rank least squares on the --train text: the
least-squares map, projected onto the top r directions of its fitted
values, plus a bias). On the --test text the threshold is set so that the
predictor keeps the given recall of the neurons that fire, and the density
it then selects is printed (lower is better; the first column is the
density that actually fires). Bytes of the text are the ids (a byte-level
model).
"""
import argparse
import sys

import numpy as np


def find_sites(model):
    """[(attention input, FFN input, pre-activation)] tensor names per layer."""
    inits = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}

    def weight_dims(n):
        if n.op_type != "MatMul" or n.input[1] not in inits:
            return None
        return tuple(inits[n.input[1]].dims)

    # The q/k/v projections' input: read by three or more MatMuls of square
    # weights (not the out projection's, whose input is the heads' context,
    # nor a square LM head's).
    square_readers = {}
    for n in model.graph.node:
        dims = weight_dims(n)
        if dims is not None and len(dims) == 2 and dims[0] == dims[1]:
            square_readers.setdefault(n.input[0], []).append(n)
    attn_inputs = []
    for n in model.graph.node:
        x = n.input[0] if n.input else None
        if len(square_readers.get(x, [])) >= 3 and x not in attn_inputs:
            attn_inputs.append(x)
    # The ReLU FFNs: Relu(Add(MatMul(u, W1), b1)) or Relu(MatMul(u, W1)).
    ffns = []
    for n in model.graph.node:
        if n.op_type != "Relu":
            continue
        pre = n.input[0]
        p = producer.get(pre)
        mm = p
        if p is not None and p.op_type == "Add":
            mm = next((producer.get(i) for i in p.input
                       if producer.get(i) is not None and producer[i].op_type == "MatMul"),
                      None)
        if mm is None or weight_dims(mm) is None:
            continue
        ffns.append((mm.input[0], pre))
    if not ffns or len(attn_inputs) != len(ffns):
        sys.exit(f"error: found {len(ffns)} ReLU FFNs and {len(attn_inputs)} attention "
                 "inputs; this script wants one of each per layer")
    return [(a, u, pre) for a, (u, pre) in zip(attn_inputs, ffns)]


def run_model(path, sites, ids, seq_len, max_chunks):
    """{tensor name: [N, width]} over the text's chunks."""
    import onnx
    import onnxruntime as ort
    model = onnx.load(path)
    names = sorted({t for s in sites for t in s})
    have = {o.name for o in model.graph.output}
    for t in names:
        if t not in have:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(t))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = [i.name for i in sess.get_inputs()]
    out = {t: [] for t in names}
    chunks = min(max_chunks, len(ids) // seq_len)
    if chunks < 1:
        sys.exit(f"error: the text has {len(ids)} bytes, fewer than --seq-len {seq_len}")
    for c in range(chunks):
        x = ids[c * seq_len:(c + 1) * seq_len][None].astype(np.int64)
        feed = {}
        for f in feeds:
            if "mask" in f:
                feed[f] = np.ones_like(x)
            elif "position" in f:
                feed[f] = np.arange(seq_len, dtype=np.int64)[None]
            else:
                feed[f] = x
        res = sess.run(names, feed)
        for t, v in zip(names, res):
            out[t].append(v.reshape(-1, v.shape[-1]))
    return {t: np.concatenate(v).astype(np.float64) for t, v in out.items()}


def fit(source, target, rank):
    """Rank-r least squares: target ~ [source, 1] . B, B of rank <= r (+ bias)."""
    s = np.hstack([source, np.ones((len(source), 1))])
    b, *_ = np.linalg.lstsq(s, target, rcond=None)
    fitted = s @ b
    _, _, vt = np.linalg.svd(fitted - fitted.mean(0), full_matrices=False)
    v = vt[:rank].T
    mean = fitted.mean(0)
    return lambda x: (np.hstack([x, np.ones((len(x), 1))]) @ b - mean) @ v @ v.T + mean


def density_at_recall(pred, fires, recall):
    """The share of (token, neuron) pairs selected when the threshold keeps
    `recall` of the pairs that fire."""
    scores = pred[fires]
    if scores.size == 0:
        return 0.0
    t = np.quantile(scores, 1.0 - recall)
    return float((pred >= t).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--train", required=True, help="text the predictors are fitted on")
    ap.add_argument("--test", required=True, help="text they are evaluated on")
    ap.add_argument("--ranks", default="16,32,64")
    ap.add_argument("--recall", type=float, default=0.99)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--max-chunks", type=int, default=8)
    args = ap.parse_args()
    import onnx
    try:
        ranks = [int(r) for r in args.ranks.split(",")]
    except ValueError:
        sys.exit(f"error: --ranks takes integers, got '{args.ranks}'")
    if not ranks or min(ranks) < 1:
        sys.exit("error: --ranks must be positive")
    if not 0.0 < args.recall <= 1.0:
        sys.exit("error: --recall must be in (0, 1]")
    sites = find_sites(onnx.load(args.model, load_external_data=False))
    texts = {}
    for key in ("train", "test"):
        try:
            texts[key] = np.frombuffer(open(getattr(args, key), "rb").read(), np.uint8)
        except OSError as e:
            sys.exit(f"error: cannot read --{key}: {e}")
    train = run_model(args.model, sites, texts["train"], args.seq_len, args.max_chunks)
    test = run_model(args.model, sites, texts["test"], args.seq_len, args.max_chunks)
    print(f"{len(sites)} ReLU FFNs; predicted density at {args.recall:.1%} recall "
          f"(held-out text), rank-r predictors from the FFN's input (ffn) or the "
          f"attention block's input (attn)")
    head = " | ".join(f"ffn r{r} | attn r{r}" for r in ranks)
    print(f"| layer | fires | {head} |")
    print("|---:|---:|" + "---:|" * (2 * len(ranks)))
    for layer, (a, u, pre) in enumerate(sites):
        fires = test[pre] > 0
        cells = []
        for r in ranks:
            for src in (u, a):
                p = fit(train[src], train[pre], r)(test[src])
                cells.append(f"{density_at_recall(p, fires, args.recall):.3f}")
        print(f"| {layer} | {fires.mean():.3f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
