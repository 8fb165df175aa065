#!/usr/bin/env python3
"""PyTorch peers for bench_decode_kernels.cu, same shapes and sparsities:
y = relu(h) . W, W [16384, 4096] fp16, batch 1, on the GPU.

  python3 bench/gpu/bench_decode_torch.py [--d 4096] [--ffn 16384]

Rows: dense matmul; index_select of the active rows + matmul (what a
framework does with an index set); matmul on rows gathered beforehand.
Microseconds per call: CUDA graph of 100 calls, median of 5 replays.
"""
import argparse

import torch


def time_us(fn, inner=100):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
        torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=s):
            for _ in range(inner):
                fn()
    times = []
    for r in range(6):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        if r:
            times.append(a.elapsed_time(b) * 1000 / inner)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=16384)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    w = (torch.rand(a.ffn, a.d, device=dev, dtype=torch.float16) - 0.5) * 0.1
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| sparsity | active | torch dense | torch index_select + matmul | torch pre-gathered |")
    print("|---:|---:|---:|---:|---:|")
    for sparsity in (0.5, 0.9, 0.97, 0.99):
        p = torch.arange(1, a.ffn + 1, device=dev, dtype=torch.float64) ** -0.8
        p = (p * (1 - sparsity) * a.ffn / p.sum()).clamp(max=1.0)
        p = p[torch.randperm(a.ffn, device=dev)]
        on = torch.rand(a.ffn, device=dev, dtype=torch.float64) < p
        h = torch.where(on, torch.rand(a.ffn, device=dev) + 0.01, 0).to(torch.float16)[None]
        idx = on.nonzero().flatten().to(torch.int64)
        hs = h[:, idx].contiguous()
        ws = w.index_select(0, idx).contiguous()
        out = torch.empty(1, a.d, device=dev, dtype=torch.float16)
        dense = time_us(lambda: torch.matmul(h, w, out=out))
        gather = time_us(lambda: torch.matmul(hs, w.index_select(0, idx), out=out))
        pre = time_us(lambda: torch.matmul(hs, ws, out=out))
        print(f"| {sparsity * 100:.0f} % | {idx.numel()} | {dense:.1f} | {gather:.1f} | {pre:.1f} |")


if __name__ == "__main__":
    main()
