//===- bench_pit_bound.cu - how fast can a 32 x 1 micro-tiled matmul be -===//
//
// Part of the sparsec project.
//
// y [M, N] = x [M, K] . W [K, N] with x sparse in random `tile` x 1
// micro-tiles (PIT, runtime/src/cuda/Pit.cu). A block of PIT's matmul owns
// one token block and 128 output columns and reads, for every column of x
// active in its token block, 256 bytes of that row of W (and the token
// block's 32 gathered values of it). Token blocks are independent, so W's
// rows are read once per token block that needs them: at 90 % sparsity
// 128 blocks x 10 % of W's 32 MB = 420 MB, nearly all from the L2. This
// benchmark measures those reads alone, with no arithmetic, no index
// construction and no output, as the matmul's grid makes them, against
// cuBLAS dense and PIT's own total, in the same run:
//   cuBLAS dense    cublasGemmEx (fp16, fp32 compute): the peer
//   PIT total       pitSRead (unsorted) + pitMatmul, the runtime's defaults
//                   (checked against cuBLAS)
//   W rows          a block a (token block, 128 columns), each reading the
//                   256-byte slices of its set's rows of W: 16-byte L2
//                   loads, 16 rows a warp in flight, summed (kept alive)
//   W rows + xg     the same, also reading the gathered x (64 bytes a row)
//   to shared memory  the W rows copied into shared memory as the matmul
//                   copies them (two stages of 32 rows): 16-byte
//                   cp.async.cg (the matmul's before it took .ca: on the
//                   H200 it moved about 1.5x the bytes), cp.async.ca (the
//                   matmul's now), or one bulk copy (cp.async.bulk) of 256
//                   bytes a row
//   L2 stream       W (32 MB) read whole 8 times a kernel, 16 bytes a
//                   thread (it stays in the L2): the L2's read bandwidth
//   DRAM stream     4 GiB read once (GpuBench.h's readBandwidth)
// "cuBLAS / W rows" is the most any kernel with this dataflow could gain
// over cuBLAS if everything but those reads were free.
//
//   sparsec-bench-pit-bound [--m 4096] [--k 4096] [--n 4096] [--tile 32]
//                           [--sparsity 90,95,99]
//
//===----------------------------------------------------------------------===//

#include "GpuBench.h"
#include "sparsec/rt/cuda/Pit.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>

using namespace sparsec::rt;
using namespace sparsec::rt::cuda;
using namespace sparsec::bench;

namespace {

constexpr int kRowThreads = 128; // 4 warps
constexpr int kRowCols = 128;    // output columns a block: 256 bytes a row
constexpr int kUnroll = 8;       // loads in flight a thread

/// Block (b, c): the rows list[first[b] .. first[b + 1]) of W, columns
/// [c * 128, c * 128 + 128): 16 lanes a row, two rows a warp a load, 8
/// loads in flight. With `xg`, also that token block's gathered values
/// (64 bytes a row, contiguous). Nothing is written unless the sum hits a
/// value it never does.
template <bool ReadX>
__global__ void __launch_bounds__(kRowThreads)
    rowsKernel(const __half *__restrict__ w, int64_t n, const int32_t *__restrict__ list,
               const int32_t *__restrict__ first, const uint4 *__restrict__ xg,
               unsigned *sink) {
  const int b = blockIdx.x;
  const int r0 = first[b], r1 = first[b + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t col = int64_t(blockIdx.y) * kRowCols + (lane % 16) * 8;
  unsigned s = 0;
  constexpr int kRowsPerPass = kRowThreads / 16; // 8 rows a pass of the block
  for (int r = r0 + warp * 2 + lane / 16; r < r1; r += kRowsPerPass * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int row = r + u * kRowsPerPass;
      v[u] = row < r1 ? __ldcg(reinterpret_cast<const uint4 *>(
                            w + int64_t(list[row]) * n + col))
                      : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      s ^= fold(v[u]);
  }
  if (ReadX) // 32 fp16 values a row: 4 x 16 bytes
    for (int i = r0 * 4 + threadIdx.x; i < r1 * 4; i += kRowThreads)
      s ^= fold(__ldcg(xg + i));
  if (s == 0x9e3779b9u)
    sink[0] = s;
}

/// The W rows of rowsKernel copied into shared memory as PIT's matmul
/// copies them: chunks of 32 rows, two stages, each thread 4 rows of 16
/// bytes a chunk (Mode 0: cp.async.cg; 1: cp.async.ca, the matmul's), or
/// (Mode 2) one bulk copy (cp.async.bulk, the TMA unit) of 256 bytes a row
/// completing on a stage's mbarrier. A word of each landed chunk is summed.
constexpr int kCopyRows = 32, kCopyStride = 272; // bytes a staged row (the matmul's)
__device__ __forceinline__ void cpAsync16(void *dst, const void *src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smemAddr(dst)),
               "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
template <int Mode>
__global__ void __launch_bounds__(kRowThreads)
    rowsCopyKernel(const __half *__restrict__ w, int64_t n,
                   const int32_t *__restrict__ list, const int32_t *__restrict__ first,
                   unsigned *sink) {
  __shared__ __align__(128) unsigned char stage[2][kCopyRows * kCopyStride];
  __shared__ uint64_t bar[2];
  const int b = blockIdx.x;
  const int r0 = first[b], rows = first[b + 1] - r0;
  const int chunks = (rows + kCopyRows - 1) / kCopyRows;
  const int64_t col = int64_t(blockIdx.y) * kRowCols;
  const int q = threadIdx.x % 16, rr = threadIdx.x / 16; // 16 B of 8 rows a pass
  if (Mode == 2 && threadIdx.x == 0) {
    mbarInit(&bar[0], 1);
    mbarInit(&bar[1], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](int c) {
    unsigned char *dst = stage[c & 1];
    const int cnt = min(kCopyRows, rows - c * kCopyRows);
    if constexpr (Mode == 2) {
      if (threadIdx.x == 0)
        mbarExpectTx(&bar[c & 1], unsigned(cnt * kRowCols * 2));
      if (int(threadIdx.x) < cnt)
        bulkCopy(dst + threadIdx.x * kCopyStride,
                 w + int64_t(list[r0 + c * kCopyRows + threadIdx.x]) * n + col,
                 unsigned(kRowCols * 2), &bar[c & 1]);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = rr + 8 * i;
        if (r < cnt) {
          const __half *src = w + int64_t(list[r0 + c * kCopyRows + r]) * n + col + q * 8;
          if constexpr (Mode == 0)
            cpAsync16(dst + r * kCopyStride + q * 16, src, 16);
          else
            asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(
                             smemAddr(dst + r * kCopyStride + q * 16)),
                         "l"(src));
        }
      }
      cpAsyncCommit();
    }
  };
  unsigned s = 0;
  if (chunks > 0)
    issue(0);
  for (int c = 0; c < chunks; ++c) {
    if (c + 1 < chunks)
      issue(c + 1);
    if constexpr (Mode == 2) {
      mbarWait(&bar[c & 1], (c >> 1) & 1);
    } else {
      if (c + 1 < chunks)
        cpAsyncWait<1>();
      else
        cpAsyncWait<0>();

      __syncthreads();
    }
    s ^= reinterpret_cast<const unsigned *>(stage[c & 1])[threadIdx.x];
    __syncthreads(); // the stage is read before the next chunk overwrites it
  }
  if (s == 0x9e3779b9u)
    sink[0] = s;
}

/// Reads p [n] kStreamPasses times, 16 bytes a thread, grid-stride (the
/// passes make the kernel long enough that its launch and tail do not
/// count).
constexpr int kStreamPasses = 8;
__global__ void streamKernel(const uint4 *__restrict__ p, size_t n, unsigned *sink) {
  unsigned s = 0;
  for (int pass = 0; pass < kStreamPasses; ++pass)
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
         i += size_t(gridDim.x) * blockDim.x)
      s ^= fold(__ldcg(p + i));
  if (s == 0x9e3779b9u)
    sink[0] = s;
}

} // namespace

int main(int argc, char **argv) {
  int64_t M = 4096, K = 4096, N = 4096;
  int tile = 32;
  std::vector<double> sparsities = {90, 95, 99};
  if (!Options("sparsec-bench-pit-bound")
           .add("--m", M)
           .add("--k", K)
           .add("--n", N)
           .add("--tile", tile)
           .add("--sparsity", sparsities)
           .parse(argc, argv))
    return 1;
  if (!percentages(sparsities))
    return 1;
  if (M < 1 || K < 1 || N < kRowCols || N % kRowCols || !pitTileSupported(tile)) {
    std::fprintf(stderr, "error: need positive sizes, N a multiple of %d and "
                         "--tile 8, 16 or 32\n", kRowCols);
    return 1;
  }
  cudaDeviceProp prop;
  cublasHandle_t blas;
  cusparseHandle_t sp;
  setUp(prop, blas, sp);

  PitProblem problem;
  __half *dW = upload(problem.weights(K, N));
  __half *dY = alloc<__half>(size_t(M * N)), *dYRef = alloc<__half>(size_t(M * N));
  unsigned *sink = alloc<unsigned>(1);
  const int64_t blocks = pitBlocks(M, tile);
  const PitWorkspace ws = allocPitWorkspace(M, K, tile);
  bool g;

  // The yardsticks: W re-read from the L2, and a 4 GiB read from DRAM.
  const size_t wVecs = size_t(K * N) * sizeof(__half) / 16;
  const double l2Us = timeUs([&] {
    streamKernel<<<prop.multiProcessorCount * 16, 256, 0, stream>>>(
        reinterpret_cast<const uint4 *>(dW), wVecs, sink);
  }, g, 20);
  CHECK_CUDA(cudaGetLastError());
  const double l2GBs = kStreamPasses * wVecs * 16.0 / (l2Us * 1e3);
  const double dramGBs = readBandwidth(prop);

  std::printf("GPU: %s, %d SMs, %.0f MB L2\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize / 1e6);
  std::printf("y = x . W, M=%lld K=%lld N=%lld, fp16, x sparse in random %d x 1 "
              "micro-tiles; microseconds per call\n",
              (long long)M, (long long)K, (long long)N, tile);
  std::printf("L2 stream (W, %.1f MB, read %d times a kernel): %.1f us, %.0f GB/s; "
              "DRAM stream: %.0f GB/s\n\n", wVecs * 16 / 1e6, kStreamPasses, l2Us, l2GBs,
              dramGBs);
  std::printf("| sparsity | cuBLAS dense | PIT total | PIT vs cuBLAS | W rows read "
              "| W rows, MB | GB/s | W rows + xg | GB/s | cuBLAS / W rows | "
              "cuBLAS / (W rows at the L2 stream's rate) | W rows to shared memory: "
              "cp.async.cg | cp.async.ca | bulk copies | err |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  bool ok = true;
  for (double sparsity : sparsities) {
    std::vector<uint8_t> active;
    __half *dX = upload(problem.input(M, K, tile, sparsity, active));
    // Each token block's active columns: the rows of W its blocks read.
    std::vector<int32_t> list, first(size_t(blocks + 1), 0);
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t k = 0; k < K; ++k)
        if (active[size_t(b * K + k)])
          list.push_back(int32_t(k));
      first[size_t(b + 1)] = int32_t(list.size());
    }
    int32_t *dList = upload(list), *dFirst = upload(first);
    uint4 *dXg = alloc<uint4>(std::max<size_t>(1, list.size() * 4));
    CHECK_CUDA(cudaMemsetAsync(dXg, 0, std::max<size_t>(1, list.size()) * 64, stream));

    auto dense = [&] { denseGemm(blas, M, N, K, dW, dX, dYRef); };
    const double denseUs = timeUs(dense, g, 10);
    dense();
    const std::vector<__half> refH = download(dYRef, size_t(M * N));

    const double pitUs = timeUs([&] {
      pitSRead(dX, M, K, tile, false, ws, stream);
      pitMatmul(ws, M, K, dW, N, tile, nullptr, ops::Activation::none, nullptr, dY,
                stream);
    }, g, 20);
    CHECK_CUDA(cudaGetLastError());
    const std::vector<__half> outH = download(dY, size_t(M * N));
    std::vector<float> ref(refH.size()), out(outH.size());
    for (size_t i = 0; i < refH.size(); ++i) {
      ref[i] = __half2float(refH[i]);
      out[i] = __half2float(outH[i]);
    }
    const double err = relErr(out, ref);
    ok &= err < 5e-3;

    const dim3 grid(unsigned(blocks), unsigned(N / kRowCols));
    const double rowsUs = timeUs([&] {
      rowsKernel<false><<<grid, kRowThreads, 0, stream>>>(dW, N, dList, dFirst, dXg,
                                                           sink);
    }, g, 20);
    const double rowsXUs = timeUs([&] {
      rowsKernel<true><<<grid, kRowThreads, 0, stream>>>(dW, N, dList, dFirst, dXg,
                                                          sink);
    }, g, 20);
    double copyUs[3];
    const auto copyKernels = {rowsCopyKernel<0>, rowsCopyKernel<1>, rowsCopyKernel<2>};
    int mode = 0;
    for (auto kernel : copyKernels)
      copyUs[mode++] = timeUs([&] {
        kernel<<<grid, kRowThreads, 0, stream>>>(dW, N, dList, dFirst, sink);
      }, g, 20);
    CHECK_CUDA(cudaGetLastError());
    const double rowMB = double(list.size()) * N * sizeof(__half) / 1e6;
    const double xgMB = double(list.size()) * 64 * double(N / kRowCols) / 1e6;
    std::printf("| %.0f %% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | "
                "%.1e |\n",
                sparsity, cell(denseUs).c_str(), cell(pitUs).c_str(),
                cell(denseUs / pitUs, "%.2fx").c_str(), cell(rowsUs).c_str(),
                cell(rowMB, "%.0f").c_str(), cell(rowMB * 1e3 / rowsUs, "%.0f").c_str(),
                cell(rowsXUs).c_str(),
                cell((rowMB + xgMB) * 1e3 / rowsXUs, "%.0f").c_str(),
                cell(denseUs / rowsUs, "%.2fx").c_str(),
                cell(denseUs / (rowMB * 1e3 / l2GBs), "%.2fx").c_str(),
                cell(copyUs[0]).c_str(), cell(copyUs[1]).c_str(), cell(copyUs[2]).c_str(),
                err);
    std::fflush(stdout);
    cudaFree(dX);
    cudaFree(dList);
    cudaFree(dFirst);
    cudaFree(dXg);
  }
  std::printf("\n\"W rows\" reads only the W bytes PIT's matmul blocks need; the "
              "last ratio is the gain over cuBLAS if those bytes came at the L2 "
              "stream's rate with nothing else to do.\n");
  if (!ok)
    std::printf("MISMATCH: PIT's output differs from cuBLAS's\n");
  return ok ? 0 : 1;
}
