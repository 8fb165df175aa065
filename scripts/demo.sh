#!/usr/bin/env bash
# The main job on the bundled default model: compile the trained OPT-style
# byte-level LM for x86, run it on a short prompt (the predicted next bytes),
# continue the prompt with `model generate` (the KV-cache export, the
# no-cache export with a compiler-derived cache, then with profiled
# activation sparsity and trained predictors), and time it.
set -euo pipefail
BUILD_DIR=${1:-build}
MODELS=${2:-../shared/models}
PROMPT=${PROMPT:-"The GNU General Public License is a free, copyleft license for"}
MODEL="$MODELS/opt-byte-s/model_nocache_opset17.onnx"
OUT=${DEMO_OUT:-demo-out}
PY=${PYTHON:-python3}
if [ ! -f "$MODEL" ]; then
  echo "demo: model not found: $MODEL (run with MODELS=/path/to/models)" >&2
  exit 1
fi

echo "== sparsec compile $MODEL --target x86 -o $OUT"
"$BUILD_DIR/bin/sparsec" compile "$MODEL" --target x86 -o "$OUT"

echo "== prompt: \"$PROMPT\""
"$PY" - "$OUT" "$PROMPT" <<'PYEOF'
import sys, numpy as np
out, prompt = sys.argv[1], sys.argv[2].encode()
ids = np.frombuffer(prompt, np.uint8).astype(np.int64)[None, :]
np.save(f"{out}/input_ids.npy", ids)
np.save(f"{out}/attention_mask.npy", np.ones_like(ids))
PYEOF
"$OUT/model" run --input input_ids="$OUT/input_ids.npy" \
  --input attention_mask="$OUT/attention_mask.npy" --output-dir "$OUT/results" >/dev/null
"$PY" - "$OUT" <<'PYEOF'
import sys, numpy as np
logits = np.load(f"{sys.argv[1]}/results/logits.npy")[0, -1]
p = np.exp(logits - logits.max()); p /= p.sum()
top = np.argsort(-p)[:5]
fmt = lambda b: repr(chr(b)) if 32 <= b < 127 else f"0x{b:02x}"
print("next byte: " + ", ".join(f"{fmt(b)} ({p[b]:.2f})" for b in top))
PYEOF

KV_MODEL="$MODELS/opt-byte-s/model_kvcache_opset17.onnx"
echo "== greedy continuation with the KV-cache export (sparsec compile + model generate)"
"$BUILD_DIR/bin/sparsec" compile "$KV_MODEL" --target x86 -o "$OUT/kv" -q
"$OUT/kv/model" generate --prompt "$PROMPT" --max-new-tokens 64
echo

echo "== the no-cache export with a KV cache the compiler derives (--kv-cache)"
"$BUILD_DIR/bin/sparsec" compile "$MODEL" --target x86 --kv-cache -o "$OUT/derived" -q
"$OUT/derived/model" generate --prompt "$PROMPT" --max-new-tokens 64
echo

echo "== activation sparsity: profile on calib.txt, DejaVu predictors, generate again"
"$BUILD_DIR/bin/sparsec" profile "$KV_MODEL" --calib "$MODELS/opt-byte-s/calib.txt" \
  -o "$OUT/kv.sprof" -q
"$BUILD_DIR/bin/sparsec" compile "$KV_MODEL" --target x86 -o "$OUT/kv-sparse" -q \
  --profile "$OUT/kv.sprof" --sparsity predicted --report 2>/dev/null
"$OUT/kv-sparse/model" generate --prompt "$PROMPT" --max-new-tokens 64
echo

echo "== latency (one forward pass over the prompt)"
"$OUT/model" bench --input input_ids="$OUT/input_ids.npy" \
  --input attention_mask="$OUT/attention_mask.npy" --runs 20
