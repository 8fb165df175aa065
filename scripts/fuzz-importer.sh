#!/usr/bin/env bash
# Builds the importer fuzzer with clang-22 (ASan + UBSan + libFuzzer) in
# build-fuzz/ and runs it for a fixed time on a seed corpus of small valid
# models. Usage: scripts/fuzz-importer.sh [seconds=120] [jobs=1]
# Crashes are written to build-fuzz/crashes/; the exit status is non-zero
# if the fuzzer found one.
set -euo pipefail
SECONDS_TO_RUN=${1:-120}
JOBS=${2:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD="$ROOT/build-fuzz"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

# clang-22 (make deps) links ASan, UBSan and libFuzzer from compiler-rt,
# which Debian packages separately.
"$ROOT/scripts/install-deps.sh" clang-22 libclang-rt-22-dev

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
  -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN -fsanitize=fuzzer-no-link" \
  -DCMAKE_EXE_LINKER_FLAGS="$SAN" \
  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
  -DSPARSEC_ENABLE_FUZZER=ON >/dev/null
ninja -C "$BUILD" sparsec-import-fuzzer

CORPUS="$BUILD/corpus"
mkdir -p "$CORPUS" "$BUILD/crashes"
GEN="$ROOT/test/Frontend/ONNX/gen_onnx_models.py"
for c in elementwise gemm_mlp matmul_ffn layernorm_decomposed layernorm gelu_erf \
         shapes mask_arith attention cnn reduce18 large_constant gemm_general \
         variadic_max layernorm_stats unsupported control_flow inconsistent \
         gather_weight split18_uneven int_relu int_matmul two_dims hostile_names \
         positions rope_decoder_kv mixed_dtypes gated_lm_kv falcon_decoder_kv \
         falcon40_decoder_kv falcon40_decoder_view; do
  [ -f "$CORPUS/$c.onnx" ] || python3 "$GEN" "$c" "$CORPUS/$c.onnx"
done
MODELS=${MODELS:-$ROOT/../shared/models}
[ -d "$MODELS/mlp" ] && cp -n "$MODELS"/mlp/*.onnx "$CORPUS"/ 2>/dev/null || true

# allow_user_poisoning=0: LLVM's BumpPtrAllocator poisons its slabs from the
# instrumented headers, while the uninstrumented libMLIR.so carves allocations
# out of them without unpoisoning, which ASan would report as use-after-poison.
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:allow_user_poisoning=0
export UBSAN_OPTIONS=print_stacktrace=1
PARALLEL=()
[ "$JOBS" -gt 1 ] && PARALLEL=(-jobs="$JOBS" -workers="$JOBS")
cd "$BUILD"
"$BUILD/bin/sparsec-import-fuzzer" "$CORPUS" -max_total_time="$SECONDS_TO_RUN" \
  -max_len=1048576 -rss_limit_mb=4096 "${PARALLEL[@]}" \
  -artifact_prefix="$BUILD/crashes/" -print_final_stats=1
