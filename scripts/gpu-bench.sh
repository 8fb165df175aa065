#!/usr/bin/env bash
# Builds the CUDA kernels, their device tests and the decode-kernel (sparse
# and dense), L2-prefetch, look-ahead, PIT, SRead-bytes and PIT-bound benchmarks with nvcc (sm_90a) in build-gpu/, then runs the
# tests, the benchmarks and the PyTorch peers. For a machine with an NVIDIA GPU (Hopper):
#   scripts/gpu-bench.sh [OUTDIR]
# Logs go to OUTDIR (default build-gpu/).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-gpu}
mkdir -p build-gpu "$out"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
flags=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a
       -gencode=arch=compute_90,code=compute_90 -Iruntime/include)
"$NVCC" "${flags[@]}" -c runtime/src/cuda/SparseDecode.cu -o build-gpu/SparseDecode.o
"$NVCC" "${flags[@]}" -c runtime/src/cuda/Pit.cu -o build-gpu/Pit.o
"$NVCC" "${flags[@]}" -c runtime/src/cuda/DenseDecode.cu -o build-gpu/DenseDecode.o
"$NVCC" "${flags[@]}" bench/gpu/bench_dense_decode.cu build-gpu/DenseDecode.o \
    -lcublas -lcusparse -o build-gpu/sparsec-bench-dense-decode
"$NVCC" "${flags[@]}" bench/gpu/bench_l2_prefetch.cu build-gpu/SparseDecode.o \
    build-gpu/DenseDecode.o -lcublas -lcusparse -o build-gpu/sparsec-bench-l2-prefetch
"$NVCC" "${flags[@]}" bench/gpu/bench_lookahead.cu build-gpu/SparseDecode.o \
    build-gpu/DenseDecode.o -lcublas -lcusparse -o build-gpu/sparsec-bench-lookahead
"$NVCC" "${flags[@]}" test/gpu/PitTest.cu build-gpu/Pit.o build-gpu/SparseDecode.o \
    -o build-gpu/sparsec-cuda-pit-test
"$NVCC" "${flags[@]}" bench/gpu/bench_pit.cu build-gpu/Pit.o build-gpu/SparseDecode.o \
    -lcublas -lcusparse -o build-gpu/sparsec-bench-pit
"$NVCC" "${flags[@]}" bench/gpu/bench_sread_bytes.cu build-gpu/Pit.o build-gpu/SparseDecode.o \
    -lcublas -lcusparse -o build-gpu/sparsec-bench-sread-bytes
"$NVCC" "${flags[@]}" bench/gpu/bench_pit_bound.cu build-gpu/Pit.o build-gpu/SparseDecode.o \
    -lcublas -lcusparse -o build-gpu/sparsec-bench-pit-bound
"$NVCC" "${flags[@]}" test/gpu/SparseDecodeTest.cu build-gpu/SparseDecode.o \
    -o build-gpu/sparsec-cuda-sparse-test
"$NVCC" "${flags[@]}" bench/gpu/bench_decode_kernels.cu build-gpu/SparseDecode.o \
    -lcublas -lcusparse -o build-gpu/sparsec-bench-decode-kernels
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
status=0
build-gpu/sparsec-cuda-sparse-test | tee "$out/test.log" || status=1
build-gpu/sparsec-bench-decode-kernels | tee "$out/bench.log" || status=1
build-gpu/sparsec-bench-decode-kernels --tokens 4 | tee "$out/bench_t4.log" || status=1
build-gpu/sparsec-bench-dense-decode --shape 6.7b | tee "$out/bench_dense_67.log" || status=1
build-gpu/sparsec-bench-dense-decode --shape 1.3b | tee "$out/bench_dense_13.log" || status=1
build-gpu/sparsec-bench-l2-prefetch | tee "$out/bench_l2_prefetch.log" || status=1
build-gpu/sparsec-bench-lookahead | tee "$out/bench_lookahead.log" || status=1
build-gpu/sparsec-cuda-pit-test | tee "$out/pit-test.log" || status=1
build-gpu/sparsec-bench-pit | tee "$out/bench_pit.log" || status=1
build-gpu/sparsec-bench-sread-bytes | tee "$out/bench_sread_bytes.log" || status=1
build-gpu/sparsec-bench-pit-bound | tee "$out/bench_pit_bound.log" || status=1
if [ -z "${SKIP_TORCH:-}" ]; then
  python3 bench/gpu/bench_decode_torch.py | tee "$out/torch.log" || status=1
fi
exit $status
