#!/usr/bin/env python3
"""The GPU kernel tests of test/gpu/ on a machine that has a GPU but no lit.

CI builds the kernel-test binaries but cannot run them (their .test files
say REQUIRES: cuda-device), so their expectations are checked only where a
GPU is. This runs them in two stages, as gpu_models.py does:

  gpu_tests.py list
      the RUN lines it takes from test/gpu/*.test (a kernel-test binary,
      optionally behind `env VAR=VALUE ...`, piped into FileCheck) and the
      .test files it leaves to other tools
  gpu_tests.py run --bin DIR --out OUT          (on the GPU machine)
      runs each such RUN line with DIR's binaries and keeps its stdout and
      exit status in OUT (with a manifest of what ran)
  gpu_tests.py check --out OUT [--filecheck PATH]   (where FileCheck is)
      checks every kept output against its .test with the RUN line's
      FileCheck options; prints PASS/FAIL lines and "N passed, M failed"
      (exit 1 on a failure). A non-zero exit of the binary fails its RUN
      line as lit's pipefail does.

test/gpu/models.test runs through gpu_models.py (prepare / run) and
test/gpu/tune.test needs the sparsec binary and nvcc on the GPU machine;
both are listed as left to other tools.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TESTS = os.path.join(ROOT, "test", "gpu")
MANIFEST = "manifest.json"
# `[env A=1 B=2] sparsec-cuda-NAME-test [args] | FileCheck %s [options]`
RUN_LINE = re.compile(
    r"^RUN:\s*(?:env\s+((?:\w+=\S*\s+)+))?(sparsec-cuda-[\w-]+-test)((?:\s+[^|\s]+)*)"
    r"\s*\|\s*(?:\S*/)?FileCheck\s+%s((?:\s+\S+)*)\s*$")


def runs(tests_dir):
    """([(test file, index, env, binary, args, FileCheck options)], [skipped
    .test files])"""
    found, skipped = [], []
    for name in sorted(os.listdir(tests_dir)):
        if not name.endswith(".test"):
            continue
        path = os.path.join(tests_dir, name)
        mine, other = [], False
        with open(path) as f:
            for line in f:
                m = RUN_LINE.match(line.strip())
                if m:
                    env = dict(kv.split("=", 1) for kv in (m.group(1) or "").split())
                    mine.append((name, len(mine), env, m.group(2),
                                 shlex.split(m.group(3) or ""),
                                 shlex.split(m.group(4) or "")))
                elif line.startswith("RUN:"):
                    other = True  # a RUN line this script cannot run
        if mine and not other:
            found.extend(mine)
        else:
            skipped.append(name)
    return found, skipped


def describe(r):
    name, i, env, binary, args, opts = r
    envs = "".join(f"{k}={v} " for k, v in sorted(env.items()))
    return f"{name}#{i}: {envs}{' '.join([binary] + args)} | FileCheck {' '.join(opts)}".rstrip()


def cmd_list(a):
    found, skipped = runs(a.tests)
    for r in found:
        print(describe(r))
    for name in skipped:
        print(f"left to other tools: {name}")
    return 0


def cmd_run(a):
    found, _ = runs(a.tests)
    if not found:
        print(f"error: no kernel-test RUN lines in {a.tests}", file=sys.stderr)
        return 1
    missing = sorted({r[3] for r in found if not os.access(os.path.join(a.bin, r[3]), os.X_OK)})
    if missing:
        print(f"error: not in {a.bin} (or not executable): {', '.join(missing)}",
              file=sys.stderr)
        return 1
    os.makedirs(a.out, exist_ok=True)
    manifest = []
    for r in found:
        name, i, env, binary, args, opts = r
        log = f"{name}.{i}.out"
        print(f"[gpu-tests] {describe(r)}", flush=True)
        with open(os.path.join(a.out, log), "wb") as out:
            rc = subprocess.call([os.path.join(a.bin, binary)] + args, stdout=out,
                                 env=dict(os.environ, **env))
        manifest.append({"test": name, "index": i, "run": describe(r), "output": log,
                         "status": rc, "filecheck": opts})
    with open(os.path.join(a.out, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"[gpu-tests] {len(manifest)} outputs in {a.out}")
    return 0


def cmd_check(a):
    path = os.path.join(a.out, MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        print(f"error: cannot read {path}: {e}", file=sys.stderr)
        return 1
    if not manifest:
        print(f"error: {path} lists no outputs", file=sys.stderr)
        return 1
    keys = {"test", "run", "output", "status", "filecheck"}
    if not isinstance(manifest, list) or not all(
            isinstance(e, dict) and keys <= e.keys() for e in manifest):
        print(f"error: {path} is not a manifest gpu_tests.py run wrote", file=sys.stderr)
        return 1
    passed = failed = 0
    for e in manifest:
        test = os.path.join(a.tests, e["test"])
        log = os.path.join(a.out, e["output"])
        why = ""
        if e["status"] != 0:
            why = f"exit status {e['status']}"
        elif not os.path.exists(test) or not os.path.exists(log):
            why = "missing " + (test if not os.path.exists(test) else log)
        else:
            p = subprocess.run([a.filecheck, test, "--input-file", log] + e["filecheck"],
                               capture_output=True, text=True)
            if p.returncode != 0:
                first = (p.stderr.strip().splitlines() or ["FileCheck failed"])[0]
                why = "FileCheck: " + first
        if why:
            failed += 1
            print(f"FAIL {e['run']} ({why})")
        else:
            passed += 1
            print(f"PASS {e['run']}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tests", default=TESTS, help="the .test files' folder (test/gpu)")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    r = sub.add_parser("run")
    r.add_argument("--bin", required=True, help="folder of the kernel-test binaries")
    r.add_argument("--out", required=True)
    c = sub.add_parser("check")
    c.add_argument("--out", required=True)
    c.add_argument("--filecheck", default="FileCheck")
    a = p.parse_args()
    return {"list": cmd_list, "run": cmd_run, "check": cmd_check}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
