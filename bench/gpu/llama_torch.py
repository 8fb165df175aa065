#!/usr/bin/env python3
"""PyTorch peer of llama_synth.py's decoder: transformers' LlamaForCausalLM
(ReLU-gated MLP, the same shape) with that model's weights, in fp16 on the
GPU, eager (SDPA attention).

Prints the time to first token after the prompt (the prompt's forward pass
and the greedy pick), the mean decode step with the KV cache (batch 1), and
the greedy ids, for comparison with `model generate` of a sparsec build of
the same ONNX file (same prompt).

  llama_torch.py --onnx model.onnx --prompt-ids prompt.npy [--new 16]
      [--d 2048 --heads 16 --ffn 5632 --layers 6 --vocab 8192]
"""
import argparse
import statistics
import time

import numpy as np

from llama_synth import add_shape_args


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5)
    add_shape_args(ap)
    args = ap.parse_args()

    import onnx
    import torch
    from onnx import numpy_helper
    from transformers import LlamaConfig, LlamaForCausalLM

    w = {i.name: numpy_helper.to_array(i) for i in onnx.load(args.onnx).graph.initializer}
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.d, intermediate_size=args.ffn,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.heads, hidden_act="relu",
                      max_position_embeddings=4096, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    model = LlamaForCausalLM(cfg)

    def name(base, i):  # gen_onnx_models.llama_decoder's weight names
        return base if i == 0 else f"{base}_{i}"

    def t(a, transpose=False):
        a = torch.from_numpy(np.array(a.T if transpose else a))  # writable
        return a.to(torch.float32)
    with torch.no_grad():
        m = model.model
        m.embed_tokens.weight.copy_(t(w["tok"]))
        for i, layer in enumerate(m.layers):
            a, f = layer.self_attn, layer.mlp
            for mod, base in ((a.q_proj, "wq"), (a.k_proj, "wk"), (a.v_proj, "wv"),
                              (a.o_proj, "wo"), (f.gate_proj, "wg"), (f.up_proj, "wu"),
                              (f.down_proj, "wd")):
                mod.weight.copy_(t(w[name(base, i)], transpose=True))
            layer.input_layernorm.weight.copy_(t(w[name("n1", i)]))
            layer.post_attention_layernorm.weight.copy_(t(w[name("n2", i)]))
        m.norm.weight.copy_(t(w["nf"]))
        model.lm_head.weight.copy_(t(w["wlm"], transpose=True))
    model = model.half().cuda().eval()
    ids = torch.from_numpy(np.load(args.prompt_ids)).cuda()

    def first_token():
        out = model(input_ids=ids, use_cache=True)
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        return out.past_key_values, tok

    with torch.no_grad():
        ttft = []
        for r in range(3 + args.runs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            past, tok = first_token()
            tok.cpu()
            if r >= 3:
                ttft.append((time.perf_counter() - t0) * 1e3)
        greedy = [int(tok)]
        steps = []
        for _ in range(args.new - 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(input_ids=tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            greedy.append(int(tok))
            steps.append((time.perf_counter() - t0) * 1e6)
    print(f"pytorch eager fp16: time to first token {statistics.median(ttft):.2f} ms "
          f"(min {min(ttft):.2f}, {args.runs} runs); decode step "
          f"{statistics.mean(steps[1:]):.0f} us mean over {len(steps) - 1} "
          f"({1e6 / statistics.mean(steps[1:]):.0f} tokens/s)")
    print("greedy ids: " + " ".join(map(str, greedy)))


if __name__ == "__main__":
    main()
