#!/usr/bin/env python3
"""PyTorch peer of llama_synth.py's decoder: transformers' LlamaForCausalLM
(ReLU-gated MLP, the same shape) with that model's weights, in fp16 on the
GPU, eager (SDPA attention).

Prints the time to first token after the prompt (the prompt's forward pass
and the greedy pick), the decode rate with the KV cache (batch 1) eager and
with torch.compile (transformers' generate with a static cache, mode
reduce-overhead), and the greedy ids, for comparison with `model generate`
of a sparsec build of the same ONNX file (same prompt). The decode loops are
opt_synth.py's, as the OPT benchmarks run them.

  llama_torch.py --onnx model.onnx --prompt-ids prompt.npy [--new 16]
      [--no-compile] [--profile] [--torch-sdpa default|no-cudnn|both]
      [--d 2048 --heads 16 --ffn 5632 --layers 6 --vocab 8192]
"""
import argparse
import statistics
import time

import numpy as np

from llama_synth import add_shape_args
from opt_synth import (SDPA_MODES, sdpa_backend, sdpa_modes, torch_decode,
                       torch_generate_static)


def load_model(args):
    """transformers' LlamaForCausalLM of llama_synth's shape (args), with the
    weights of the ONNX file args.onnx, in fp16 on the GPU."""
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
    return model.half().cuda().eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--torch-sdpa", default="both", choices=SDPA_MODES + ("both",),
                    help="eager's attention backends: PyTorch's choice, cuDNN's SDPA off, "
                    "or both (default)")
    ap.add_argument("--profile", action="store_true",
                    help="print torch.profiler's costliest ops of one decode step")
    add_shape_args(ap)
    args = ap.parse_args()

    import torch

    model = load_model(args)
    prompt = np.load(args.prompt_ids).astype(np.int64)
    ids = torch.from_numpy(prompt).cuda()

    with torch.no_grad():
        ttft = []
        for r in range(3 + args.runs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(input_ids=ids, use_cache=True)
            tok = out.logits[:, -1].argmax(-1)
            tok.cpu()
            if r >= 3:
                ttft.append((time.perf_counter() - t0) * 1e3)
    print(f"pytorch eager fp16: time to first token {statistics.median(ttft):.2f} ms "
          f"(min {min(ttft):.2f}, {args.runs} runs)")
    # Decode as the OPT peer does (opt_synth.torch_decode: an untimed warm-up
    # decode of the same shapes first, the attention mask passed, the steps
    # timed together and synchronised once).
    rows = prompt.tolist()
    print(f"pytorch attention: {model.config._attn_implementation}")
    for mode in sdpa_modes(args.torch_sdpa):
        with sdpa_backend(mode):
            tps, _, greedy = torch_decode(model, rows, args.new)
        print(f"pytorch eager fp16 (SDPA {mode}): decode {tps:.1f} tokens/s "
              f"({1e6 / tps:.0f} us a step)")
    if args.profile:
        profile_step(model, ids)
    if not args.no_compile:
        ctps, ctoks = torch_generate_static(model, rows, args.new)
        print(f"torch.compile (generate, static cache, reduce-overhead): decode "
              f"{ctps:.1f} tokens/s ({1e6 / ctps:.0f} us a step); greedy ids "
              f"{sum(a == b for a, b in zip(ctoks, greedy))}/{len(greedy)} equal to eager's")
    print("greedy ids: " + " ".join(map(str, greedy)))


def profile_step(model, ids):
    """torch.profiler's ten costliest ops (CPU and CUDA time) of one eager
    decode step after the prompt, for a step that measures slow."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        mask = torch.ones(ids.shape[0], ids.shape[1] + 1, dtype=torch.long, device="cuda")
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            model(tok, past_key_values=past, attention_mask=mask, use_cache=True)
            torch.cuda.synchronize()
    for key in ("cpu_time_total", "cuda_time_total"):
        print(prof.key_averages().table(sort_by=key, row_limit=10))


if __name__ == "__main__":
    main()
