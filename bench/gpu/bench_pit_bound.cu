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
//   cluster multicast  the same rows delivered to clusters of G blocks
//                   (G consecutive token blocks, one column block): each
//                   row of the union of their sets is read once from the
//                   L2 and written by one bulk copy with .multicast::cluster
//                   into the shared memory of every block whose set has it
//                   (three stages of 32 rows a block; the rows' slots and
//                   masks are planned on the host, as a kernel would have
//                   to plan them), then every block sums the rows it
//                   received (checked against the host's sum); G = 1 is the
//                   plain bulk copy with the same consumer. The L2 reads
//                   fall from G x 10 % to 1 - 0.9^G of W a cluster at 90 %
//   L2 stream       W (32 MB) read whole 8 times a kernel, 16 bytes a
//                   thread (it stays in the L2): the L2's read bandwidth
//   DRAM stream     4 GiB read once (GpuBench.h's readBandwidth)
// "cuBLAS / W rows" is the most any kernel with this dataflow could gain
// over cuBLAS if everything but those reads were free.
//
//   sparsec-bench-pit-bound [--m 4096] [--k 4096] [--n 4096] [--tile 32]
//                           [--sparsity 90,95,99] [--clusters 1,2,4,8,16]
//
//===----------------------------------------------------------------------===//

#include "GpuBench.h"
#include "sparsec/rt/cuda/Pit.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <cstring>

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

/// Cluster multicast delivery of the W rows (see the header). A cluster is
/// G consecutive token blocks of one column block; its union rows are cut
/// into chunks in which each block receives at most kMcSlots rows. Per
/// (chunk, block rank) the plan lists the rows the block issues (row of W,
/// slot | mask << 8) and the slots it receives. Three stages; each block
/// arrives on the cluster barrier after reading a chunk and waits on it one
/// chunk later, before copying into the stage that chunk used.
constexpr int kMcSlots = 32, kMcStages = 3;
struct McPlanView {
  const int32_t *chunkFirst; // per cluster: its chunks [chunkFirst[c], chunkFirst[c + 1])
  const int32_t *issueFirst; // per (chunk, rank)
  const int32_t *issueRow, *issueMeta;
  const int32_t *recvFirst; // per (chunk, rank)
  const int32_t *recvSlot;
};
template <int Cols>
__global__ void __launch_bounds__(kRowThreads)
    rowsMulticastKernel(const __half *__restrict__ w, int64_t n, McPlanView plan, int G,
                        unsigned long long *partial) {
  constexpr int kStride = Cols * 2 + 16, kWords = Cols / 8; // 16-byte words a row
  constexpr int kLanesPerRow = kWords < 32 ? kWords : 32;
  constexpr int kRowsPerPass = kRowThreads / kLanesPerRow;
  extern __shared__ __align__(128) unsigned char mcStage[];
  __shared__ uint64_t full[kMcStages];
  __shared__ unsigned long long warpSum[kRowThreads / 32];
  const int rank = int(clusterRank());
  const int cluster = blockIdx.x / G;
  const int c0 = plan.chunkFirst[cluster], chunks = plan.chunkFirst[cluster + 1] - c0;
  const int64_t col = int64_t(blockIdx.y) * Cols;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kMcStages; ++i)
      mbarInit(&full[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  clusterSync(); // every block's barriers exist before any copy lands
  auto issue = [&](int c) {
    const int at = (c0 + c) * G + rank;
    uint64_t *bar = &full[c % kMcStages];
    unsigned char *st = mcStage + (c % kMcStages) * kMcSlots * kStride;
    if (threadIdx.x == 0)
      mbarExpectTx(bar, unsigned((plan.recvFirst[at + 1] - plan.recvFirst[at]) * Cols * 2));
    for (int i = plan.issueFirst[at] + threadIdx.x; i < plan.issueFirst[at + 1];
         i += kRowThreads) {
      const int meta = plan.issueMeta[i];
      bulkCopyMulticast(st + (meta & 255) * kStride,
                        w + int64_t(plan.issueRow[i]) * n + col, unsigned(Cols * 2), bar,
                        uint16_t(meta >> 8));
    }
  };
  unsigned long long sum = 0;
  for (int c = 0; c < kMcStages - 1 && c < chunks; ++c)
    issue(c);
  const int lane = threadIdx.x % kLanesPerRow, row0 = threadIdx.x / kLanesPerRow;
  for (int c = 0; c < chunks; ++c) {
    // Chunk c + S - 1 goes to the stage chunk c - 1 used: every block has
    // read that chunk once the barrier phase it arrived on completes.
    if (c > 0)
      asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (c + kMcStages - 1 < chunks)
      issue(c + kMcStages - 1);
    mbarWait(&full[c % kMcStages], (c / kMcStages) & 1);
    const int at = (c0 + c) * G + rank;
    const unsigned char *st = mcStage + (c % kMcStages) * kMcSlots * kStride;
    const int r0 = plan.recvFirst[at], cnt = plan.recvFirst[at + 1] - r0;
    for (int r = row0; r < cnt; r += kRowsPerPass) {
      const unsigned char *row = st + plan.recvSlot[r0 + r] * kStride;
#pragma unroll
      for (int wd = lane; wd < kWords; wd += kLanesPerRow) {
        const uint4 v = *reinterpret_cast<const uint4 *>(row + wd * 16);
        sum += 0ull + v.x + v.y + v.z + v.w;
      }
    }
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  }
  if (chunks > 0)
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
  for (int o = 16; o > 0; o /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0)
    warpSum[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long t = 0;
    for (int i = 0; i < kRowThreads / 32; ++i)
      t += warpSum[i];
    partial[size_t(blockIdx.y) * gridDim.x + blockIdx.x] = t;
  }
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

/// The host's plan for rowsMulticastKernel (see McPlanView), built from
/// each token block's active columns: rows in increasing order, each given
/// the lowest slot free in every block that receives it; a chunk closes
/// when a row finds no slot under kMcSlots. The block of lowest rank that
/// receives a row issues its copy.
struct McPlan {
  std::vector<int32_t> chunkFirst{0}, issueFirst{0}, issueRow, issueMeta, recvFirst{0},
      recvSlot;
  int64_t unionRows = 0;
};
McPlan planMulticast(const std::vector<uint8_t> &active, int64_t blocks, int64_t K, int G) {
  McPlan plan;
  std::vector<std::vector<int32_t>> issRow(G), issMeta(G), recv(G);
  std::vector<int> next(G, 0);
  auto close = [&] {
    for (int r = 0; r < G; ++r) {
      plan.issueRow.insert(plan.issueRow.end(), issRow[r].begin(), issRow[r].end());
      plan.issueMeta.insert(plan.issueMeta.end(), issMeta[r].begin(), issMeta[r].end());
      plan.issueFirst.push_back(int32_t(plan.issueRow.size()));
      plan.recvSlot.insert(plan.recvSlot.end(), recv[r].begin(), recv[r].end());
      plan.recvFirst.push_back(int32_t(plan.recvSlot.size()));
      issRow[r].clear();
      issMeta[r].clear();
      recv[r].clear();
      next[r] = 0;
    }
  };
  int chunks = 0;
  for (int64_t cl = 0; cl < blocks / G; ++cl) {
    bool open = false;
    for (int64_t k = 0; k < K; ++k) {
      unsigned mask = 0;
      for (int r = 0; r < G; ++r)
        if (active[size_t((cl * G + r) * K + k)])
          mask |= 1u << r;
      if (!mask)
        continue;
      ++plan.unionRows;
      int slot = 0;
      for (int r = 0; r < G; ++r)
        if (mask >> r & 1)
          slot = std::max(slot, next[r]);
      if (slot >= kMcSlots) {
        close();
        ++chunks;
        slot = 0;
      }
      open = true;
      for (int r = 0; r < G; ++r)
        if (mask >> r & 1) {
          next[r] = slot + 1;
          recv[r].push_back(slot);
        }
      const int issuer = __builtin_ctz(mask);
      issRow[issuer].push_back(int32_t(k));
      issMeta[issuer].push_back(int32_t(slot | mask << 8));
    }
    if (open) {
      close();
      ++chunks;
    }
    plan.chunkFirst.push_back(chunks);
  }
  return plan;
}

} // namespace

int main(int argc, char **argv) {
  int64_t M = 4096, K = 4096, N = 4096;
  int tile = 32;
  std::vector<double> sparsities = {90, 95, 99}, clusters = {1, 2, 4, 8, 16};
  if (!Options("sparsec-bench-pit-bound")
           .add("--m", M)
           .add("--k", K)
           .add("--n", N)
           .add("--tile", tile)
           .add("--sparsity", sparsities)
           .add("--clusters", clusters)
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
  const std::vector<__half> hW = problem.weights(K, N);
  __half *dW = upload(hW);
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
    const std::vector<float> ref = toFloats(download(dYRef, size_t(M * N)));

    const double pitUs = timeUs([&] {
      pitSRead(dX, M, K, tile, false, ws, stream);
      pitMatmul(ws, M, K, dW, N, tile, nullptr, ops::Activation::none, nullptr, dY,
                stream);
    }, g, 20);
    CHECK_CUDA(cudaGetLastError());
    const double err = relErr(toFloats(download(dY, size_t(M * N))), ref);
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

  // Cluster multicast: each row's 32-bit words summed, for the check.
  std::vector<unsigned long long> rowSum(size_t(K), 0);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j + 1 < N; j += 2) {
      uint16_t lo, hi;
      std::memcpy(&lo, &hW[size_t(k * N + j)], 2);
      std::memcpy(&hi, &hW[size_t(k * N + j + 1)], 2);
      rowSum[size_t(k)] += uint32_t(lo) | uint32_t(hi) << 16;
    }
  CHECK_CUDA(cudaFuncSetAttribute(rowsMulticastKernel<128>,
                                  cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CHECK_CUDA(cudaFuncSetAttribute(rowsMulticastKernel<256>,
                                  cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (int cols : {128, 256})
    CHECK_CUDA(cudaFuncSetAttribute(
        cols == 128 ? rowsMulticastKernel<128> : rowsMulticastKernel<256>,
        cudaFuncAttributeMaxDynamicSharedMemorySize, kMcStages * kMcSlots * (cols * 2 + 16)));
  std::printf("\nW rows delivered to shared memory by clusters of G blocks, each "
              "union row read once and multicast (one bulk copy a row, %d stages "
              "of %d rows a block, every received row summed by its block):\n\n",
              kMcStages, kMcSlots);
  std::printf("| sparsity | G | union rows a cluster / K | L2 reads, MB | delivered, MB "
              "| 128 columns, us | delivered GB/s | 256 columns, us | delivered GB/s "
              "| cuBLAS / best | check |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (double sparsity : sparsities) {
    std::vector<uint8_t> active;
    const std::vector<__half> hX = problem.input(M, K, tile, sparsity, active);
    unsigned long long expect = 0;
    int64_t setRows = 0;
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t k = 0; k < K; ++k)
        if (active[size_t(b * K + k)]) {
          expect += rowSum[size_t(k)];
          ++setRows;
        }
    __half *dX = upload(hX);
    const double denseUs = timeUs([&] { denseGemm(blas, M, N, K, dW, dX, dYRef); }, g, 10);
    cudaFree(dX);
    for (double gd : clusters) {
      const int G = int(gd);
      if (G < 1 || G > 16 || blocks % G) {
        std::printf("| %.0f %% | %d | n/a: needs 1 <= G <= 16 dividing %lld token "
                    "blocks |\n", sparsity, G, (long long)blocks);
        continue;
      }
      const McPlan plan = planMulticast(active, blocks, K, G);
      McPlanView view{upload(plan.chunkFirst), upload(plan.issueFirst),
                      upload(plan.issueRow),   upload(plan.issueMeta),
                      upload(plan.recvFirst),  upload(plan.recvSlot)};
      unsigned long long *dPartial = alloc<unsigned long long>(size_t(blocks * N / 128));
      double us[2] = {-1, -1};
      bool match = true;
      std::string why;
      for (int v = 0; v < 2; ++v) {
        const int cols = v ? 256 : 128;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(unsigned(blocks), unsigned(N / cols));
        cfg.blockDim = dim3(kRowThreads);
        cfg.dynamicSmemBytes = size_t(kMcStages * kMcSlots * (cols * 2 + 16));
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = unsigned(G);
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        auto launch = [&] {
          return v ? cudaLaunchKernelEx(&cfg, rowsMulticastKernel<256>, dW, N, view, G,
                                        dPartial)
                   : cudaLaunchKernelEx(&cfg, rowsMulticastKernel<128>, dW, N, view, G,
                                        dPartial);
        };
        CHECK_CUDA(cudaMemsetAsync(dPartial, 0, size_t(blocks * N / 128) * 8, stream));
        cudaError_t e = launch();
        if (e == cudaSuccess)
          e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess) {
          why += std::string(v ? " 256: " : " 128: ") + cudaGetErrorString(e);
          cudaGetLastError();
          continue;
        }
        const std::vector<unsigned long long> part =
            download(dPartial, size_t(blocks * N / cols));
        unsigned long long got = 0;
        for (unsigned long long p : part)
          got += p;
        match &= got == expect;
        us[v] = timeUs([&] { CHECK_CUDA(launch()); }, g, 20);
      }
      const double unionMB = double(plan.unionRows) * N * 2 / 1e6;
      const double delivMB = double(setRows) * N * 2 / 1e6;
      const double best = us[0] > 0 && (us[1] < 0 || us[0] < us[1]) ? us[0] : us[1];
      std::printf("| %.0f %% | %d | %.3f | %.0f | %.0f | %s | %s | %s | %s | %s | %s%s |\n",
                  sparsity, G, double(plan.unionRows) / double(blocks / G) / double(K),
                  unionMB, delivMB, cell(us[0]).c_str(),
                  cell(us[0] > 0 ? delivMB * 1e3 / us[0] : -1, "%.0f").c_str(),
                  cell(us[1]).c_str(),
                  cell(us[1] > 0 ? delivMB * 1e3 / us[1] : -1, "%.0f").c_str(),
                  cell(best > 0 ? denseUs / best : -1, "%.2fx").c_str(),
                  match ? "sums match" : "MISMATCH", why.c_str());
      std::fflush(stdout);
      ok &= match;
      for (const int32_t *p : {view.chunkFirst, view.issueFirst, view.issueRow,
                               view.issueMeta, view.recvFirst, view.recvSlot})
        cudaFree(const_cast<int32_t *>(p));
      cudaFree(dPartial);
    }
  }
  if (!ok)
    std::printf("MISMATCH: PIT's output differs from cuBLAS's, or a multicast "
                "block's sum from the host's\n");
  return ok ? 0 : 1;
}
