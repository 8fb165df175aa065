#!/usr/bin/env bash
# Machine code (SASS) of sparsec's CUDA kernels, read without a GPU.
#
#   scripts/sass.sh FILE [REGEX]          per kernel: instructions, registers,
#                                         local memory (spills), shared memory
#   scripts/sass.sh --dump FILE REGEX     the SASS of the kernels whose
#                                         mangled name matches REGEX
#
# FILE is an object file, static archive member or executable with sm_90a
# code (build/runtime/CMakeFiles/sparsec_runtime_cuda.dir/src/cuda/Pit.cu.o,
# build/bin/sparsec-bench-pit, ...). The CUDA toolkit's cuobjdump and
# nvdisasm are used where installed; otherwise NVIDIA's wheels of them
# (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm on PyPI) are fetched once
# into ${SPARSEC_TOOLS:-$HOME/.cache/sparsec-tools}.
#
# Example: the instructions of PIT's warpgroup-MMA kernel (its last
# template argument, Wg, true: "Lb1EEEv"):
#   scripts/sass.sh build/runtime/CMakeFiles/sparsec_runtime_cuda.dir/src/cuda/Pit.cu.o 'pitMatmulKernel.*Lb1EEEv'
set -euo pipefail

dump=0
if [[ ${1:-} == --dump ]]; then
  dump=1
  shift
fi
if [[ $# -lt 1 || ! -f $1 ]]; then
  echo "usage: scripts/sass.sh [--dump] FILE [REGEX]" >&2
  [[ $# -ge 1 ]] && echo "sass.sh: no such file: $1" >&2
  exit 2
fi
file=$1
regex=${2:-.}
if [[ $dump == 1 && $# -lt 2 ]]; then
  echo "sass.sh: --dump needs a REGEX naming the kernels" >&2
  exit 2
fi

tool() { # the path of cuobjdump or nvdisasm
  local name=$1 dir=${SPARSEC_TOOLS:-$HOME/.cache/sparsec-tools}
  for c in "$(command -v "$name" || true)" "/usr/local/cuda/bin/$name" "$dir/$name"; do
    if [[ -n $c && -x $c ]]; then
      echo "$c"
      return
    fi
  done
  mkdir -p "$dir"
  local wheels
  wheels=$(mktemp -d)
  echo "sass.sh: fetching $name (nvidia-cuda-$name from PyPI) into $dir" >&2
  if ! python3 -m pip download -q --no-deps --only-binary=:all: \
    "nvidia-cuda-$name" -d "$wheels" >&2; then
    echo "sass.sh: could not fetch nvidia-cuda-$name; install the CUDA toolkit's $name" >&2
    rm -rf "$wheels"
    exit 1
  fi
  python3 - "$wheels" "$name" "$dir" <<'EOF'
import glob, os, sys, zipfile
wheels, name, out = sys.argv[1:]
for whl in glob.glob(os.path.join(wheels, "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for member in z.namelist():
            if member.endswith("/bin/" + name):
                path = os.path.join(out, name)
                with open(path, "wb") as f:
                    f.write(z.read(member))
                os.chmod(path, 0o755)
                sys.exit(0)
sys.exit("sass.sh: no " + name + " in the wheel")
EOF
  rm -rf "$wheels"
  echo "$dir/$name"
}

cuobjdump=$(tool cuobjdump)
nvdisasm=$(tool nvdisasm)
# cuobjdump -sass runs nvdisasm from its own directory or the PATH.
export PATH="$(dirname "$nvdisasm"):$PATH"

sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
"$cuobjdump" -sass "$file" >"$sass"
if [[ $dump == 1 ]]; then
  awk -v re="$regex" '
    /Function : / { on = ($0 ~ re) }
    on' "$sass"
  exit 0
fi

# Instructions: the lines with an address comment, /*0a10*/, per function;
# resources from cuobjdump -res-usage.
"$cuobjdump" -res-usage "$file" 2>/dev/null | python3 -c '
import re, sys
regex = re.compile(sys.argv[1])
counts, name = {}, None
for line in open(sys.argv[2]):
    m = re.search(r"Function : (\S+)", line)
    if m:
        name = m.group(1)
        counts.setdefault(name, 0)
    elif name and re.match(r"\s+/\*[0-9a-f]{4,}\*/", line):
        counts[name] += 1
res, fn = {}, None
for line in sys.stdin:
    m = re.search(r"Function (\S+):", line)
    if m:
        fn = m.group(1)
        continue
    if fn and "REG:" in line:
        res[fn] = dict(re.findall(r"(REG|SHARED|LOCAL|STACK):(\d+)", line))
        fn = None
shown = 0
print("%8s %5s %7s %7s  %s" % ("instrs", "regs", "local", "shared", "kernel"))
for name, n in counts.items():
    if not regex.search(name):
        continue
    r = res.get(name, {})
    print("%8d %5s %7s %7s  %s" % (n, r.get("REG", "?"), r.get("LOCAL", "?"),
                                   r.get("SHARED", "?"), name))
    shown += 1
if not shown:
    sys.exit("sass.sh: no kernel matches " + sys.argv[1])
' "$regex" "$sass"
