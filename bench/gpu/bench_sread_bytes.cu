//===- bench_sread_bytes.cu - what bounds PIT's SRead: its reads or the rest -===//
//
// Part of the sparsec project.
//
// pitSRead reads x [M, K] once (32 MB at 4096 x 4096 fp16) and, at high
// micro-tile sparsity, writes almost nothing; on the H200 it runs at about
// 2.7 TB/s. This benchmark separates the reads from the rest. Each call
// reads one of 8 copies of x in turn (256 MB, four times the L2), so
// every call reads from DRAM:
//   contiguous   the copy as one stream, 16 bytes a thread, grid-stride
//                (the yardstick: the most a read of these bytes can reach)
//   rows 8B      SRead's loads alone: a block a (token block, 1024
//                columns), each thread 8 bytes of each of the block's 32
//                rows, all in flight, then a sum (no flags, no stores)
//   rows 16B     the same with 16 bytes (2048 columns a block)
//   runs 4KB     each warp reading 4 KB runs along a row, two rows in
//                flight, a block a (token block, 2048 columns)
//   reset        the memset of the counts that the unsorted SRead
//                starts with (a graph node of its own)
//   reset + 8B   that memset, then rows 8B
//   sread        pitSRead unsorted (count reset + flag + gather), fp16 x
//   sread sorted pitSRead sorted (a block a token block, no reset)
// Times are medians of graph replays (GpuBench.h); GB/s count x's bytes.
//
//   sparsec-bench-sread-bytes [--m 4096] [--k 4096] [--tile 32]
//                             [--sparsity 99]
//
//===----------------------------------------------------------------------===//

#include "GpuBench.h"
#include "sparsec/rt/cuda/Pit.h"

#include <cuda_fp16.h>

#include <cstring>
#include <random>
#include <string>
#include <type_traits>

using namespace sparsec::rt::cuda;
using namespace sparsec::bench;

namespace {

__global__ void contiguousKernel(const uint4 *__restrict__ p, size_t n,
                                 unsigned *sink) {
  unsigned s = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    s ^= fold(__ldcs(p + i));
  }
  if (s == 0x9e3779b9u) // keeps the loads; the sink is never read
    sink[0] = s;
}

/// Bytes `B` (8 or 16) of each of 32 rows a thread, as SRead's wide kernel.
template <int B>
__global__ void __launch_bounds__(256)
    rowsKernel(const __half *__restrict__ x, int K, unsigned *sink) {
  using Load = std::conditional_t<B == 8, uint2, uint4>;
  constexpr int T = 32, V = B / 2;
  const int row0 = blockIdx.y * T;
  const int k0 = (blockIdx.x * 256 + threadIdx.x) * V;
  Load raw[T];
#pragma unroll
  for (int t = 0; t < T; ++t)
    raw[t] = __ldcs(reinterpret_cast<const Load *>(x + size_t(row0 + t) * K + k0));
  unsigned s = 0;
#pragma unroll
  for (int t = 0; t < T; ++t)
    s ^= fold(raw[t]);
  if (s == 0x9e3779b9u)
    sink[0] = s;
}

/// Each warp reads 4 KB runs along a row (32 lanes x 8 x 16 bytes), two
/// rows in flight, 4 rows a warp; a block of 8 warps takes its token
/// block's 32 rows over 2048 columns.
__global__ void __launch_bounds__(256)
    runsKernel(const __half *__restrict__ x, int K, unsigned *sink) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = blockIdx.y * 32 + warp * 4, kb = blockIdx.x * 2048;
  unsigned s = 0;
#pragma unroll
  for (int r0 = 0; r0 < 4; r0 += 2) {
    uint4 raw[2][8];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        raw[r][j] = __ldcs(reinterpret_cast<const uint4 *>(
            x + size_t(row0 + r0 + r) * K + kb + (j * 32 + lane) * 8));
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        s ^= fold(raw[r][j]);
  }
  if (s == 0x9e3779b9u)
    sink[0] = s;
}

} // namespace

int main(int argc, char **argv) {
  int64_t M = 4096, K = 4096;
  int tile = 32;
  double sparsity = 99;
  if (!Options("sparsec-bench-sread-bytes")
           .add("--m", M)
           .add("--k", K)
           .add("--tile", tile)
           .add("--sparsity", sparsity)
           .parse(argc, argv))
    return 1;
  if (M < 32 || M % 32 || K < 4096 || K % 4096 || !pitTileSupported(tile) ||
      sparsity < 0 || sparsity > 100) {
    std::fprintf(stderr, "error: needs M a positive multiple of 32, K of 4096, "
                         "--tile 8, 16 or 32, --sparsity in [0, 100]\n");
    return 1;
  }
  cudaDeviceProp prop;
  cublasHandle_t blas;
  cusparseHandle_t sp;
  setUp(prop, blas, sp);
  std::printf("%s, %d SMs; x %lld x %lld fp16 (%.1f MB), %d copies read in "
              "turn; %d x 1 micro-tiles, %.0f %% zero\n\n",
              prop.name, prop.multiProcessorCount, (long long)M, (long long)K,
              M * K * 2 / 1e6, 8, tile, sparsity);

  // x with random micro-tile sparsity, the same in every copy.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), p(0.0f, 100.0f);
  std::vector<__half> x(size_t(M * K), __float2half(0.0f));
  for (int64_t b = 0; b < M / tile; ++b)
    for (int64_t k = 0; k < K; ++k)
      if (p(rng) >= sparsity)
        for (int t = 0; t < tile; ++t)
          x[size_t((b * tile + t) * K + k)] = __float2half(u(rng));
  constexpr int kCopies = 8;
  __half *copies[kCopies];
  for (auto &c : copies)
    c = upload(x);
  unsigned *sink = alloc<unsigned>(1);
  const PitWorkspace ws = allocPitWorkspace(M, K, tile);

  int next = 0;
  auto copy = [&] { return copies[next++ % kCopies]; };
  const double bytes = double(M) * K * 2;
  bool g;
  auto row = [&](const char *name, const std::function<void()> &fn) {
    next = 0;
    const double us = timeUs(fn, g, 4 * kCopies);
    CHECK_CUDA(cudaGetLastError());
    std::printf("| %-12s | %8.2f | %7.0f |\n", name, us, bytes / (us * 1e3));
  };
  std::printf("| reads | us | GB/s |\n|---|---:|---:|\n");
  row("contiguous", [&] {
    contiguousKernel<<<prop.multiProcessorCount * 8, 512, 0, stream>>>(
        reinterpret_cast<const uint4 *>(copy()), size_t(M * K / 8), sink);
  });
  auto rows8 = [&] {
    rowsKernel<8><<<dim3(unsigned(K / 1024), unsigned(M / 32)), 256, 0, stream>>>(
        copy(), int(K), sink);
  };
  auto reset = [&] {
    CHECK_CUDA(cudaMemsetAsync(ws.count, 0, pitCountBytes(M, tile), stream));
  };
  row("rows 8B", rows8);
  row("rows 16B", [&] {
    rowsKernel<16><<<dim3(unsigned(K / 2048), unsigned(M / 32)), 256, 0, stream>>>(
        copy(), int(K), sink);
  });
  row("runs 4KB", [&] {
    runsKernel<<<dim3(unsigned(K / 2048), unsigned(M / 32)), 256, 0, stream>>>(
        copy(), int(K), sink);
  });
  row("reset", reset);
  row("reset + 8B", [&] {
    reset();
    rows8();
  });
  row("sread", [&] { CHECK_CUDA(pitSRead(copy(), M, K, tile, false, ws, stream)); });
  row("sread sorted",
      [&] { CHECK_CUDA(pitSRead(copy(), M, K, tile, true, ws, stream)); });
  std::printf("\nGB/s: x's bytes over the time a call.\n");
  return 0;
}
