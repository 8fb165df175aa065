#!/usr/bin/env bash
# The main job on the bundled default model: import and raise the trained
# OPT-style byte-level LM, and show what the compiler understood.
set -euo pipefail
BUILD_DIR=${1:-build}
MODELS=${2:-../shared/models}
MODEL="$MODELS/opt-byte-s/model_nocache_opset17.onnx"
OUT=${DEMO_OUT:-demo-out}
mkdir -p "$OUT"
if [ ! -f "$MODEL" ]; then
  echo "demo: model not found: $MODEL (set MODELS=...)" >&2
  exit 1
fi
echo "== sparsec import $MODEL"
"$BUILD_DIR/bin/sparsec" import -v "$MODEL" -o "$OUT/opt-byte-s.mlir"
echo "== raised IR written to $OUT/opt-byte-s.mlir; op counts:"
grep -oE "= sparsec\.[a-z_]+" "$OUT/opt-byte-s.mlir" | sed 's/= //' | sort | uniq -c | sort -rn
echo "== layer 0 FFN (linear -> relu -> linear):"
grep -E "layers\.0\.fc[12]|sparsec\.relu" "$OUT/opt-byte-s.mlir" | head -6
