#!/usr/bin/env python3
"""A ReLU-fied LLaMA-shaped decoder with random weights, for benchmarks of
the rotary and attention paths at realistic sizes.

The graph is test/Frontend/ONNX/gen_onnx_models.py's llama_decoder (RMS
norms spelled out, rotary embeddings from position_ids by rotate-half, a
ReLU-gated MLP, a KV cache in the Optimum naming), scaled up; its weights
come from that module's fixed-seed generator, so the compiler machine and
the GPU machine write the same bytes (`opt_synth.py bench --onnx` rebuilds
the weight packs from the file's initializers).

  llama_synth.py --out model.onnx [--d 2048 --heads 16 --ffn 5632
                                   --layers 6 --vocab 8192]
"""
import argparse
import os
import sys

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "test", "Frontend", "ONNX"))
import gen_onnx_models as gen  # noqa: E402


def add_shape_args(ap):
    """The decoder's shape options (llama_torch.py takes the same)."""
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=8192)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    add_shape_args(ap)
    args = ap.parse_args()
    if args.d % args.heads or (args.d // args.heads) % 2:
        sys.exit("error: --d must be --heads times an even head size")
    # Projections scaled by 1/sqrt(d) keep the activations of the random
    # layers in range (the generator's default, 0.5, suits its d of 8).
    m = gen.llama_decoder(True, d=args.d, ffn=args.ffn, vocab=args.vocab,
                          heads=args.heads, layers=args.layers,
                          scale=1.0 / np.sqrt(args.d))
    onnx.save(m, args.out)
    print(f"wrote {args.out}: d {args.d}, {args.heads} heads, FFN {args.ffn}, "
          f"{args.layers} layers, vocabulary {args.vocab}")


if __name__ == "__main__":
    main()
