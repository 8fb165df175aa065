#!/usr/bin/env python3
"""Where a decode step's GPU time goes: Nsight Compute over `model generate`.

  step_profile.py MODEL_BINARY [--prompt-len 8] [--new 3] [--top 25]

Runs the binary's `generate` (CUDA graphs off, so every kernel is a launch
of its own) under `ncu --clock-control none`, reads each kernel's duration
and DRAM traffic, splits the launches into steps (the first kernel of the
run starts every step) and prints the last decode step by kernel: launches,
total microseconds, bytes read and achieved bandwidth, plus the step's sum.
The per-kernel times are measured in isolation with cold caches (ncu's
default cache control), so the sum is the step's GPU time without launch
gaps; `SPARSEC_CUDA_PROFILE=1` on a normal run gives the time with them,
and step_trace.py each kernel's time as the replayed graph runs.
"""
import argparse
import csv
import io
import os
import subprocess
import sys
import tempfile

import numpy as np

METRICS = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"]


def to_number(text):
    text = text.replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return 0.0


def scale(unit):
    """Multiplier to microseconds / bytes for ncu's unit strings."""
    return {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6,
            "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6,
            "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9,
            "KB": 1e3, "MB": 1e6, "GB": 1e9}.get(unit.strip(), 1.0)


def kernel_name(full):
    """'void ns::(anonymous namespace)::gemvRowsKernel<...>(...)' -> 'gemvRowsKernel'."""
    name = full.replace("(anonymous namespace)::", "")
    if name.startswith("void "):
        name = name[5:]
    name = name.split("(")[0].split("<")[0]
    return name.split("::")[-1] or full


def parse(text):
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if '"Kernel Name"' in l)
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    head, units, body = rows[0], rows[1], rows[2:]
    col = {h: i for i, h in enumerate(head)}
    out = []
    for r in body:
        if len(r) != len(head):
            continue
        k = {"name": kernel_name(r[col["Kernel Name"]]),
             "grid": r[col["Grid Size"]] if "Grid Size" in col else ""}
        for m in METRICS:
            k[m] = to_number(r[col[m]]) * scale(units[col[m]]) if m in col else 0.0
        out.append(k)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--new", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--bandwidth", type=float, default=4.8e12,
                    help="bytes/s for the 'limit' column (H200: 4.8e12)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    ids = os.path.join(tmp, "prompt.npy")
    np.save(ids, (np.arange(args.prompt_len, dtype=np.int64) * 7 % 200 + 32)[None])
    env = dict(os.environ, SPARSEC_CUDA_GRAPHS="0")
    cmd = [args.ncu, "--clock-control", "none", "--csv", "--page", "raw",
           "--metrics", ",".join(METRICS), args.binary, "generate", "--prompt-ids", ids,
           "--max-new-tokens", str(args.new)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0 or '"Kernel Name"' not in r.stdout:
        sys.stderr.write(r.stdout[-2000:] + r.stderr[-2000:])
        return 1
    ks = parse(r.stdout)
    first = ks[0]["name"]
    starts = [i for i, k in enumerate(ks) if k["name"] == first]
    # generate may launch more steps than --new (on the H200: 8 for 3), so
    # the count is reported, not checked.
    print(f"{len(ks)} kernels; '{first}', the first kernel of a step, launched "
          f"{len(starts)} times; the last step is shown")
    if len(starts) < 2:
        return 1
    last = ks[starts[-1]:]
    by = {}
    for k in last:
        e = by.setdefault(f'{k["name"]} {k["grid"]}'.strip(), [0, 0.0, 0.0, 0.0])
        e[0] += 1
        e[1] += k["gpu__time_duration.sum"]
        e[2] += k["dram__bytes_read.sum"]
        e[3] += k["dram__bytes_write.sum"]
    total = sum(e[1] for e in by.values())
    read = sum(e[2] for e in by.values())
    print(f"last decode step: {len(last)} kernels, {total:.1f} us of kernel time, "
          f"{read / 1e6:.1f} MB read from DRAM ({read / total / 1e6:.0f} GB/s mean; "
          f"the read bytes alone take {read / args.bandwidth * 1e6:.1f} us at "
          f"{args.bandwidth / 1e12:.1f} TB/s)")
    print(f"| kernel grid | launches | us | share | MB read | GB/s |")
    print(f"|---|---:|---:|---:|---:|---:|")
    for name, e in sorted(by.items(), key=lambda x: -x[1][1])[:args.top]:
        print(f"| {name} | {e[0]} | {e[1]:.1f} | {100 * e[1] / total:.1f} % | "
              f"{e[2] / 1e6:.2f} | {e[2] / max(e[1], 1e-9) / 1e3:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
