#!/usr/bin/env python3
"""Where a replayed decode step's GPU time goes, gaps included (CUPTI).

  step_trace.py MODEL_BINARY --prompt-ids P.npy [--new 16] [--threads 16]
  step_trace.py --csv kernel_trace.csv          # analyse a trace again
  step_trace.py --build-tracer DIR              # just the preload library

Builds bench/gpu/kernel_trace.cpp (a preload library over CUPTI's activity
API) with g++, runs `MODEL generate` under it (CUDA graphs on, as in
normal use, but one graph a step: SPARSEC_CUDA_SPLIT=0 unless set) and
splits the records of each replayed graph into its
launches (a launch starts at the graph's first node). For the replays
after the first it prints, averaged per step: the span (first node's start
to last node's end), the time some node ran (the union of the nodes'
intervals), the idle time between them, and by kernel: nodes, summed
duration, and the idle time just before those nodes (the previous node had
finished, this one had not started). step_profile.py measures each kernel
alone with cold caches; this measures them where they run.
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))


def short_name(full):
    """'void a::(anonymous namespace)::k<T, 4>(...)' -> 'k<T, 4>' (args cut)."""
    name = full.replace("(anonymous namespace)::", "")
    if name.startswith("void "):
        name = name[5:]
    depth, cut = 0, len(name)
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    base = name.split("<")[0].split("::")[-1]
    args = name[len(name.split("<")[0]):]
    args = args.replace("sparsec::rt::", "").replace("ops::", "")
    return (base + args)[:70]


def build_tracer(out_dir, cuda):
    lib = os.path.join(out_dir, "libsparsec_kernel_trace.so")
    dirs = [d for d in (f"{cuda}/lib64", f"{cuda}/lib", f"{cuda}/extras/CUPTI/lib64")
            if os.path.isdir(d)]
    cmd = (["g++", "-O2", "-shared", "-fPIC", f"-I{cuda}/include",
            f"-I{cuda}/extras/CUPTI/include", os.path.join(HERE, "kernel_trace.cpp")]
           + [f"-L{d}" for d in dirs] + [f"-Wl,-rpath,{d}" for d in dirs]
           + ["-lcupti", "-ldl", "-o", lib])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("step_trace: building the tracer failed:\n" + r.stderr)
    return lib


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        out.append(dict(kind=r["kind"], start=int(r["start"]), end=int(r["end"]),
                        graph=int(r["graph"]), node=int(r["node"]),
                        blocks=int(r["blocks"]), name=r["name"]))
    return out


def launches(records):
    """{graph id: [[records of one launch], ...]} in time order."""
    by_graph = defaultdict(list)
    for r in records:
        if r["graph"]:
            by_graph[r["graph"]].append(r)
    out = {}
    for g, rs in by_graph.items():
        rs.sort(key=lambda r: r["start"])
        first = rs[0]["node"]
        runs = []
        for r in rs:
            if r["node"] == first or not runs:
                runs.append([])
            runs[-1].append(r)
        out[g] = runs
    return out


def analyse(runs):
    """Per-step averages over `runs` (lists of records of one graph)."""
    span = busy = 0.0
    per = defaultdict(lambda: [0, 0.0, 0.0])  # nodes, duration, idle before
    for run in runs:
        run = sorted(run, key=lambda r: r["start"])
        span += (max(r["end"] for r in run) - run[0]["start"]) / 1e3
        frontier = run[0]["start"]
        for r in run:
            key = (short_name(r["name"]) + f" x{r['blocks']}" if r["kind"] == "k"
                   else f"{r['name']} {r['blocks']} B")
            idle = max(0, r["start"] - frontier) / 1e3
            busy += (max(r["end"], frontier) - max(r["start"], frontier)) / 1e3
            frontier = max(frontier, r["end"])
            p = per[key]
            p[0] += 1
            p[1] += (r["end"] - r["start"]) / 1e3
            p[2] += idle
    n = len(runs)
    return span / n, busy / n, {k: (v[0] / n, v[1] / n, v[2] / n) for k, v in per.items()}


def report(records, top):
    graphs = launches(records)
    if not graphs:
        sys.exit("step_trace: no graph launches in the trace (CUDA graphs off, or "
                 "the run failed before its replays)")
    timeline(records, graphs)
    for g, runs in sorted(graphs.items(), key=lambda kv: -len(kv[1])):
        if len(runs) < 2:
            continue
        steady = runs[1:]  # the first launch uploads the graph
        span, busy, per = analyse(steady)
        nodes = sum(v[0] for v in per.values())
        print(f"graph {g}: {len(steady)} replays after the first, {nodes:.0f} nodes a step")
        print(f"  span {span:.1f} us a step: nodes running {busy:.1f} us, "
              f"idle between nodes {span - busy:.1f} us ({100 * (span - busy) / span:.1f} %)")
        print(f"  | node (kernel x blocks, or copy bytes) | nodes a step | us a step | us a node | idle before, us a step |")
        print(f"  |---|---:|---:|---:|---:|")
        for k, (c, d, idle) in sorted(per.items(), key=lambda kv: -kv[1][1])[:top]:
            print(f"  | {k} | {c:.0f} | {d:.1f} | {d / c:.2f} | {idle:.1f} |")
        print()


def timeline(records, graphs):
    """The whole GPU timeline of the replayed steps, graphs or not: the
    cycle (from one launch of the most launched graph to the next), the
    time some record ran, and the idle time by what ended it (a graph's
    first node: the GPU waited for that launch; a node inside a graph; a
    kernel or copy outside the graphs, launched directly)."""
    g0 = max(graphs, key=lambda g: len(graphs[g]))
    starts = sorted(min(r["start"] for r in run) for run in graphs[g0])
    if len(starts) < 3:
        return
    lo, hi, steps = starts[1], starts[-1], len(starts) - 2
    firsts = {id(min(run, key=lambda r: r["start"]))
              for runs in graphs.values() for run in runs}
    recs = sorted((r for r in records if lo <= r["start"] < hi), key=lambda r: r["start"])
    idle = defaultdict(float)
    outside = defaultdict(lambda: [0, 0.0])
    frontier, busy = lo, 0.0
    for r in recs:
        if r["graph"] and id(r) in firsts:
            key = f"before graph {r['graph']} starts (its launch)"
        elif r["graph"]:
            key = "between nodes of a graph"
        else:
            name = (short_name(r["name"]) if r["kind"] == "k"
                    else f"{r['name']} {r['blocks']} B")
            key = f"before {name} (outside graphs)"
            outside[name][0] += 1
            outside[name][1] += (r["end"] - r["start"]) / 1e3
        idle[key] += max(0, r["start"] - frontier) / 1e3
        busy += (max(r["end"], frontier) - max(r["start"], frontier)) / 1e3
        frontier = max(frontier, r["end"])
    # The window ends where graph g0 is launched again.
    idle[f"before graph {g0} starts (its launch)"] += max(0, hi - frontier) / 1e3
    cycle = (hi - lo) / 1e3 / steps
    print(f"timeline of {steps} replayed steps (graph {g0}'s launches apart): "
          f"{cycle:.1f} us a step, something running {busy / steps:.1f} us, "
          f"idle {cycle - busy / steps:.1f} us")
    print("  | idle, ended by | us a step |")
    print("  |---|---:|")
    for k, v in sorted(idle.items(), key=lambda kv: -kv[1]):
        if v / steps >= 0.05:
            print(f"  | {k} | {v / steps:.1f} |")
    for name, (c, d) in sorted(outside.items(), key=lambda kv: -kv[1][1]):
        print(f"  outside graphs: {name}: {c / steps:.1f} a step, {d / steps:.1f} us a step")
    print()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", nargs="?", help="a model binary compiled with --target cuda")
    p.add_argument("--prompt-ids", help=".npy of token ids [P] or [B, P]")
    p.add_argument("--new", type=int, default=16, help="tokens to generate")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--cuda", default="/usr/local/cuda")
    p.add_argument("--csv", help="analyse this trace instead of running a model")
    p.add_argument("--keep", help="also write the raw trace here")
    p.add_argument("--top", type=int, default=30, help="kernels listed per graph")
    p.add_argument("--build-tracer", metavar="DIR",
                   help="only build the preload library into DIR (to trace any program: "
                        "LD_PRELOAD=DIR/libsparsec_kernel_trace.so SPARSEC_TRACE_OUT=t.csv ...)")
    a = p.parse_args()
    if a.build_tracer:
        os.makedirs(a.build_tracer, exist_ok=True)
        print(build_tracer(a.build_tracer, a.cuda))
        return
    if a.csv:
        report(read(a.csv), a.top)
        return
    if not a.model or not a.prompt_ids:
        p.error("MODEL and --prompt-ids are required (or --csv)")
    with tempfile.TemporaryDirectory() as tmp:
        lib = build_tracer(tmp, a.cuda)
        trace = a.keep or os.path.join(tmp, "trace.csv")
        # One graph a step (the runtime cuts long steps into three graphs),
        # so that each launch found in the trace is a whole step.
        env = dict(os.environ, LD_PRELOAD=lib, SPARSEC_TRACE_OUT=trace)
        env.setdefault("SPARSEC_CUDA_SPLIT", "0")
        r = subprocess.run([a.model, "generate", "--prompt-ids", a.prompt_ids,
                            "--max-new-tokens", str(a.new), "--threads", str(a.threads)],
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"step_trace: the model failed ({r.returncode}):\n{r.stderr[-2000:]}")
        if not os.path.exists(trace):
            sys.exit("step_trace: the tracer wrote nothing:\n" + r.stderr[-2000:])
        print(r.stderr.strip().splitlines()[-1])
        report(read(trace), a.top)


if __name__ == "__main__":
    main()
