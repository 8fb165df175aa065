#!/usr/bin/env bash
# The compiler-machine half of the large-model benchmark (docs/Benchmarks.md):
# synthetic OPT weights for a graph exported on the GPU machine, a profile,
# and the CUDA / hybrid / layer-offload builds (sources and manifests only:
# the GPU machine rebuilds the weight packs from the same synthetic weights
# and, for a predicted build (PRED_RANKS=r[,r]), model.inline.bin.gz, the
# predictor weights the compiler trained).
#   bench/gpu/opt_large.sh GRAPH.onnx SHAPE OUTDIR [WORKDIR]
# (PREDICTABLE=R:A: up projections of rank R plus an i.i.d. share A; the
# bench must then be given --predictable R:A too. HYBRID=0 skips the hybrid
# and layer-offload builds; DENSE_ONLY=1 makes the dense build alone, without
# a profile.) Then, on the GPU machine:
#   python3 bench/gpu/opt_synth.py bench --dir OUTDIR --shape SHAPE --lib LIB
set -euo pipefail
cd "$(dirname "$0")/../.."
graph=$1 shape=$2 out=$3 work=${4:-$(mktemp -d)}
S=${SPARSEC:-build/bin/sparsec}
calib=${CALIB:-../shared/models/opt-byte-s/calib.txt}
mkdir -p "$out" "$work"
python3 bench/gpu/opt_synth.py materialize --graph "$graph" --shape "$shape" --out "$work/m" \
    ${PREDICTABLE:+--predictable "$PREDICTABLE"}
M=$work/m/model.onnx P=$work/model.sprof
# FFN bytes at fp16: layers x neurons x (up row + down row + bias)
ffn=$(python3 -c "import sys; sys.path.insert(0, 'bench/gpu'); import opt_synth as o; c = o.SHAPES['$shape']; print(c['layers'] * c['ffn'] * (2 * 2 * c['d'] + 4))")
emit() { # name args...
  local name=$1; shift
  rm -rf "$out/$name"
  "$S" compile "$M" --compile-to=emit -o "$out/$name" "$@" 2> "$work/$name.log"
  grep -a "placement:" "$work/$name.log" | sed 's/.*remark: //' > "$out/$name/placement.txt" || true
  # Compiler-made segments (predictors) travel beside the manifest.
  python3 bench/gpu/opt_synth.py extract-inline --manifest "$out/$name/model.manifest.json" \
      --weights "$out/$name/model.weights" > /dev/null
  rm -f "$out/$name/model.weights"
  gzip -9f "$out/$name/model.manifest.json"
  echo "$name: $(cut -c1-160 "$out/$name/placement.txt")"
}
minimum() { # the budget's always-GPU part for the given flags
  "$S" compile "$M" --compile-to=emit -o "$work/dry" --target hybrid --weights f16 \
      --profile "$P" --gpu-budget 1 "$@" 2>&1 | grep -ao "give at least gpu-budget=[0-9]*" | cut -d= -f2
}
# DENSE_ONLY=1: the dense CUDA build alone (no profile).
if [ "${DENSE_ONLY:-0}" = 1 ]; then
  emit dense --target cuda --weights f16
  exit 0
fi
# Predictor samples only for a predicted build (PRED_RANKS=64,128 adds one).
# Training needs at least 2 d samples (4096 at d = 2048, 8192 at d = 4096),
# the default; SAMPLES overrides it. Chunks of 32 tokens.
# (GRAPH may also be a materialized model.onnx: new weights, same graph.)
samples=0 chunks=4
if [ -n "${PRED_RANKS:-}" ]; then
  samples=${SAMPLES:-$(python3 -c "import sys; sys.path.insert(0, 'bench/gpu'); import opt_synth as o; print(max(4096, 2 * o.SHAPES['$shape']['d']))")}
  chunks=$(( (samples + 31) / 32 ))
fi
# PROFILE_WEIGHTS=f16: an fp16 profiling build (OPT-6.7B: 13.7 GB instead
# of 27.5 GB, read from memory instead of disk on a 24 GB machine).
"$S" profile "$M" --calib "$calib" --max-chunks $chunks --seq-len 32 --samples $samples -o "$P" -q \
    ${PROFILE_WEIGHTS:+--weights "$PROFILE_WEIGHTS"} > /dev/null
emit dense --target cuda --weights f16
emit exact --target cuda --weights f16 --profile "$P" --sparsity exact
if [ -n "${PRED_RANKS:-}" ]; then
  emit pred --target cuda --weights f16 --profile "$P" --sparsity predicted \
      --predictor-ranks "$PRED_RANKS"
  grep -a "remark: no predictor" "$work/pred.log" | head -3 || true
fi
# HYBRID=0: the CUDA builds only (dense, exact, pred).
[ "${HYBRID:-1}" = 0 ] && exit 0
min=$(minimum --sparsity exact)
minoff=$(minimum --sparsity off --placement layers)
for pct in 25 50 75; do
  emit hy$pct --target hybrid --weights f16 --profile "$P" --sparsity exact \
      --gpu-budget $((min + ffn * pct / 100))
  emit off$pct --target hybrid --weights f16 --profile "$P" --sparsity off \
      --placement layers --gpu-budget $((minoff + ffn * pct / 100))
done
