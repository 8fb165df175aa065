//===- bench_pit_stream.cu - PIT with W streamed through clusters ---------===//
//
// Part of the sparsec project.
//
// y [M, N] = x [M, K] . W [K, N], fp16, x sparse in random 32 x 1
// micro-tiles, as in sparsec-bench-pit. PIT's matmul (runtime/src/cuda/
// Pit.cu) gives each block one token block and gathers that block's rows of
// W from the L2: at 90 % sparsity 128 token blocks x 10 % of W = 420 MB,
// which alone take 3.17x less time than cuBLAS's dense product
// (sparsec-bench-pit-bound). This benchmark measures the other dataflow, in
// which W is what every block streams and the gathered rows come from
// shared memory:
//
//   - a block owns 64 output columns and 16 token blocks (one a warp), and
//     holds their accumulators (32 tokens x 64 columns a warp) for the whole
//     reduction;
//   - W's 64-column slice streams through a ring of S windows of KW rows,
//     each window one contiguous bulk copy (W is packed for it: [slice]
//     [window][row][64], each row's 16-byte pieces XOR-swizzled by the row);
//     a cluster of C blocks (C groups of token blocks, one slice) reads each
//     window once and multicasts it into all C blocks, each block copying
//     1 / C of it; a window's stage is refilled once every warp of the
//     cluster has released it (an mbarrier a stage, arrived on from every
//     block);
//   - each warp walks its token block's sorted set (pitSRead's sorted mode)
//     in chunks of 16 entries, staging the chunk's gathered x and row
//     numbers with cp.async 2 or 4 chunks ahead, and takes its chunk's rows of
//     W straight from the ring by ldmatrix (a row address a lane): rows in
//     windows not resident yet read a zero row, and the chunk is multiplied
//     again once they are (only at high sparsity, where a chunk spans more
//     than the ring);
//   - the first lane of warp 0 issues the copies as it polls; or (the
//     cp.async variants, no clusters) every thread copies its share of each
//     window, 16 bytes at a time, its completion arriving on the window's
//     barrier (cp.async.mbarrier.arrive.noinc).
//
// "W ring alone" runs the same kernel with every window waited for and
// released and nothing computed: what the ring delivers into each SM.
//
// At M = 4096, 16 warps a block and C = 8, W then leaves the L2 once in
// all and the gathered x once a column slice (64 slices: 215 MB at 90 %);
// what each SM takes in is not reduced by the multicast (512 KB of W and
// about 420 KB of gathered x a block at 90 %). Every variant is checked
// against cuBLAS. Columns: cuBLAS dense, PIT's total (the runtime's
// defaults), the sorted SRead, and for each variant and cluster size the
// streamed matmul alone and after the sorted SRead (its total).
//
//   sparsec-bench-pit-stream [--m 4096] [--k 4096] [--n 4096]
//                            [--sparsity 90,95,99] [--clusters 1,2,4,8]
//
//===----------------------------------------------------------------------===//

#include "GpuBench.h"
#include "sparsec/rt/cuda/Pit.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <climits>

using namespace sparsec::rt;
using namespace sparsec::rt::cuda;
using namespace sparsec::bench;

namespace {

constexpr int kT = 32;                // tokens a micro-tile: a warp's token block
constexpr int kCols = 64;             // output columns a block
constexpr int kRowBytes = kCols * 2;  // a W row of the slice: 8 pieces of 16 bytes
constexpr int kChunk = 16;            // set entries a chunk (one k16 step)
constexpr int kXS = kT + 8;           // staged gathered-x row stride, halfs (80 bytes)
constexpr int kSlotBytes = kChunk * kXS * 2 + kChunk * 4; // x rows, then row numbers

template <int Warps, int KW, int S, int Slots> struct Config {
  static constexpr size_t ring = size_t(S) * KW * kRowBytes;
  static constexpr size_t slots = size_t(Warps) * Slots * kSlotBytes;
  static constexpr size_t smem = ring + slots + kRowBytes + 2 * S * sizeof(uint64_t);
};

/// Block (g, slice) of a cluster of C along g: token blocks g * Warps ..,
/// output columns slice * 64 ... See the header.
template <int Warps, int KW, int S, int Slots, int Ahead, bool Async>
__global__ void __launch_bounds__(32 * Warps, 1)
    streamKernel(const __half *__restrict__ wp, const int32_t *__restrict__ idx,
                 const int32_t *__restrict__ count, const __half *__restrict__ xg, int cap,
                 int K, int N, __half *__restrict__ y, int ringOnly) {
  static_assert(Ahead < Slots, "a slot is refilled after its chunk is read");
  using Cfg = Config<Warps, KW, S, Slots>;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char *ring = smem;
  unsigned char *slots = smem + Cfg::ring;
  unsigned char *zeroRow = slots + Cfg::slots;
  uint64_t *full = reinterpret_cast<uint64_t *>(zeroRow + kRowBytes);
  uint64_t *empty = full + S;
  const unsigned C = clusterSize(), rank = clusterRank();
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int windows = K / KW, slice = int(blockIdx.y);
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      // Async: every thread's copies arrive on `full`; each warp arrives
      // on `empty` of its own block.
      mbarInit(&full[s], Async ? 32 * Warps : 1);
      mbarInit(&empty[s], Async ? Warps : int(C) * Warps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (threadIdx.x < kRowBytes / 16)
    reinterpret_cast<uint4 *>(zeroRow)[threadIdx.x] = make_uint4(0, 0, 0, 0);
  __syncthreads();
  clusterSync(); // every block's barriers exist before any copy or arrive

  // Warp 0's first lane also issues the copies, whenever it polls: window w
  // goes into stage w % S once every warp of the cluster is done with
  // window w - S. (A warp of its own for them would put 5 warps on one of
  // the SM's four register files and hold every thread to 96 registers.)
  const uint32_t part = uint32_t(KW / int(C)) * kRowBytes;
  const unsigned char *src = reinterpret_cast<const unsigned char *>(wp) +
                             size_t(slice) * windows * KW * kRowBytes + rank * part;
  int issued = 0;
  auto poll = [&] {
    if (warp != 0 || lane != 0)
      return;
    for (; !Async && issued < windows; ++issued) {
      const int s = issued % S;
      if (issued >= S && !mbarTest(&empty[s], uint32_t((issued / S - 1) & 1)))
        return;
      mbarExpectTx(&full[s], uint32_t(KW * kRowBytes));
      unsigned char *dst = ring + size_t(s) * KW * kRowBytes + rank * part;
      const unsigned char *from = src + size_t(issued) * KW * kRowBytes;
      if (C == 1)
        bulkCopy(dst, from, part, &full[s]);
      else
        bulkCopyMulticast(dst, from, part, &full[s], uint16_t((1u << C) - 1));
    }
  };
  poll();
  {
    const int b = int(blockIdx.x) * Warps + warp;
    const int cnt = count[b];
    const int32_t *bidx = idx + size_t(b) * cap;
    const __half *bxg = xg + size_t(b) * cap * kT;
    unsigned char *mine = slots + size_t(warp) * Slots * kSlotBytes;
    // ringOnly: the windows are waited for and released and nothing else
    // (what the ring delivers on its own).
    const int chunks = ringOnly ? 0 : (cnt + kChunk - 1) / kChunk;
    auto stage = [&](int c) {
      if (c < chunks) {
        unsigned char *slot = mine + (c % Slots) * kSlotBytes;
        const int j0 = c * kChunk;
#pragma unroll
        for (int p = lane; p < kChunk * 4; p += 32) { // 16 rows of 64 bytes
          const int r = p / 4, q = p % 4;
          const bool ok = j0 + r < cnt;
          cpAsync16(slot + r * kXS * 2 + q * 16, ok ? bxg + size_t(j0 + r) * kT + q * 8 : bxg,
                    ok ? 16 : 0);
        }
        if (lane < kChunk / 4) // row numbers (within the capacity; past the count unused)
          cpAsync16(slot + kChunk * kXS * 2 + lane * 16, bidx + j0 + lane * 4, 16);
      }
      cpAsyncCommit();
    };
    int released = 0, waited = 0; // windows below these: released / waited for
    // Async: each warp copies its share of every window (512 bytes a lane
    // a window of 256 rows at 16 warps, 16 bytes at a time) with cp.async,
    // whose completion arrives on the window's `full` barrier; it copies
    // its share of window w once the whole block is done with w - S (and
    // before it waits for w itself).
    int mine0 = 0; // windows below this: this warp's share copied
    // Copies this thread's share of the windows up to `need` (waiting until
    // the block is done with the window S before each) and of those after
    // it, up to need + S - 1, as long as their stages are free already.
    auto copyShare = [&](int need) {
      constexpr int kPieces = KW * kRowBytes / 16 / (32 * Warps);
      static_assert(!Async || KW * kRowBytes % (16 * 32 * Warps) == 0, "whole pieces");
      for (; mine0 < windows && mine0 < need + S; ++mine0) {
        const int s = mine0 % S;
        const uint32_t parity = uint32_t((mine0 / S - 1) & 1);
        if (mine0 >= S) {
          if (mine0 <= need)
            mbarWait(&empty[s], parity);
          else if (!mbarTest(&empty[s], parity))
            break;
        }
        unsigned char *dst = ring + size_t(s) * KW * kRowBytes;
        const unsigned char *from = src + size_t(mine0) * KW * kRowBytes;
#pragma unroll
        for (int i = 0; i < kPieces; ++i) {
          const int off = (i * 32 * Warps + int(threadIdx.x)) * 16;
          cpAsync16(dst + off, from + off, 16);
        }
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(
                         smemAddr(&full[s]))
                     : "memory");
      }
    };
    auto waitTo = [&](int last) {
      for (; waited <= last; ++waited) {
        if (Async)
          copyShare(waited);
        // The issuing lane polls; the others wait with try_wait, which
        // suspends the thread for a while instead of spinning.
        if (!Async && warp == 0 && lane == 0)
          while (!mbarTest(&full[waited % S], uint32_t((waited / S) & 1)))
            poll();
        else
          mbarWait(&full[waited % S], uint32_t((waited / S) & 1));
      }
    };
    // A window is released only in the phase it was filled in (so after it
    // is waited for), and one at a time: waiting for a window S or more past
    // the first unreleased one would wait for this warp itself.
    auto releaseBelow = [&](int h) {
      for (h = min(h, windows); released < h; ++released) {
        waitTo(released);
        __syncwarp();
        if (Async) {
          if (lane == 0)
            mbarArrive(&empty[released % S]);
        } else if (lane < int(C)) {
          mbarArriveCluster(&empty[released % S], unsigned(lane));
        }
      }
    };
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          acc[i][j][r] = 0.0f;
    const int t = (lane & 7) + ((lane >> 4) << 3); // this lane's row of a chunk (A)
    const int piece = (lane >> 3) & 1;             // + 2 mi: its 16-byte piece
#pragma unroll
    for (int c = 0; c < Ahead; ++c)
      stage(c);
    for (int c = 0; c < chunks; ++c) {
      poll();
      if (Async) // windows already waited for: nothing to wait for here
        copyShare(waited - 1);
      stage(c + Ahead);
      cpAsyncWait<Ahead>();
      __syncwarp();
      const unsigned char *slot = mine + (c % Slots) * kSlotBytes;
      const int32_t *rows = reinterpret_cast<const int32_t *>(slot + kChunk * kXS * 2);
      const int e = min(kChunk, cnt - c * kChunk);
      const int row = t < e ? rows[t] : -1;
      const int rowWin = row >= 0 ? row / KW : -1;
      const int first = rows[0] / KW, last = rows[e - 1] / KW;
      unsigned bf[4][2];
      const __half *xs = reinterpret_cast<const __half *>(slot);
#pragma unroll
      for (int ni = 0; ni < 2; ++ni) {
        unsigned r[4];
        ldmatrixX4T(r, xs + ((lane & 7) + ((lane >> 3) & 1) * 8) * kXS + ni * 16 +
                           (lane >> 4) * 8);
        bf[2 * ni][0] = r[0];
        bf[2 * ni][1] = r[1];
        bf[2 * ni + 1][0] = r[2];
        bf[2 * ni + 1][1] = r[3];
      }
      releaseBelow(first);
      for (;;) {
        const int hi = min(last, released + S - 1);
        waitTo(hi);
        const unsigned char *base = zeroRow;
        int swz = 0;
        if (row >= 0 && rowWin >= released && rowWin <= hi) {
          const int r = row % KW;
          base = ring + size_t(rowWin % S) * KW * kRowBytes + size_t(r) * kRowBytes;
          swz = r & 7;
        }
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          unsigned a[4];
          ldmatrixX4T(a, base + (((2 * mi + piece) ^ swz) * 16));
#pragma unroll
          for (int ni = 0; ni < 4; ++ni)
            mma16816(acc[mi][ni], a, bf[ni][0], bf[ni][1]);
        }
        if (hi >= last)
          break;
        int next = row >= 0 && rowWin > hi ? rowWin : INT_MAX;
#pragma unroll
        for (int o = 16; o > 0; o /= 2)
          next = min(next, __shfl_xor_sync(0xffffffffu, next, o));
        releaseBelow(next);
      }
    }
    releaseBelow(windows);
    // Accumulator (mi, ni, r): column mi * 16 + lane / 4 (+ 8 for r >= 2),
    // token ni * 8 + 2 (lane % 4) (+ 1 for odd r).
    __half *yb = y + size_t(b) * kT * N + size_t(slice) * kCols;
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int col = mi * 16 + lane / 4, tok = ni * 8 + 2 * (lane % 4);
        yb[size_t(tok) * N + col] = __float2half(acc[mi][ni][0]);
        yb[size_t(tok + 1) * N + col] = __float2half(acc[mi][ni][1]);
        yb[size_t(tok) * N + col + 8] = __float2half(acc[mi][ni][2]);
        yb[size_t(tok + 1) * N + col + 8] = __float2half(acc[mi][ni][3]);
      }
  }
  clusterSync(); // no block leaves while another may still arrive on its barriers
}

/// W [K, N] packed for streamKernel: [N / 64][K / KW][KW][64], the 16-byte
/// pieces of row r at piece ^ (r % 8).
std::vector<__half> packW(const std::vector<__half> &w, int64_t K, int64_t N, int KW) {
  std::vector<__half> p(w.size());
  const int64_t windows = K / KW;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t slice = n / kCols, col = n % kCols, win = k / KW, r = k % KW;
      const int64_t pc = (col / 8) ^ (r & 7);
      p[size_t(((slice * windows + win) * KW + r) * kCols + pc * 8 + col % 8)] =
          w[size_t(k * N + n)];
    }
  return p;
}

struct Variant {
  const char *name;
  int warps, kw;
  bool async; // W copied by every thread with cp.async: no clusters
  void (*kernel)(const __half *, const int32_t *, const int32_t *, const __half *, int, int,
                 int, __half *, int);
  size_t smem;
};

} // namespace

int main(int argc, char **argv) {
  int64_t M = 4096, K = 4096, N = 4096;
  std::vector<double> sparsities = {90, 95, 99}, clusters = {1, 2, 4, 8};
  if (!Options("sparsec-bench-pit-stream")
           .add("--m", M)
           .add("--k", K)
           .add("--n", N)
           .add("--sparsity", sparsities)
           .add("--clusters", clusters)
           .parse(argc, argv))
    return 1;
  if (!percentages(sparsities))
    return 1;
  const Variant variants[] = {
      {"bulk copies, 256-row windows, 4 stages, x 2 chunks ahead", 16, 256, false,
       streamKernel<16, 256, 4, 4, 2, false>, Config<16, 256, 4, 4>::smem},
      {"cp.async, 256-row windows, 4 stages, x 2 chunks ahead", 16, 256, true,
       streamKernel<16, 256, 4, 4, 2, true>, Config<16, 256, 4, 4>::smem},
      {"cp.async, 128-row windows, 4 stages, x 4 chunks ahead", 16, 128, true,
       streamKernel<16, 128, 4, 6, 4, true>, Config<16, 128, 4, 6>::smem},
      {"cp.async, 128-row windows, 8 stages, x 2 chunks ahead", 16, 128, true,
       streamKernel<16, 128, 8, 4, 2, true>, Config<16, 128, 8, 4>::smem},
  };
  if (M < 1 || K < 256 || N < kCols || N % kCols || K % 256 || M % (kT * 16)) {
    std::fprintf(stderr, "error: need N a multiple of %d, K of 256 and M of %d\n", kCols,
                 kT * 16);
    return 1;
  }
  cudaDeviceProp prop;
  cublasHandle_t blas;
  cusparseHandle_t sp;
  setUp(prop, blas, sp);
  for (const Variant &v : variants) {
    CHECK_CUDA(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(v.smem)));
    CHECK_CUDA(cudaFuncSetAttribute(v.kernel,
                                    cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }

  PitProblem problem;
  const std::vector<__half> hW = problem.weights(K, N);
  __half *dW = upload(hW);
  std::vector<__half *> dWp;
  for (const Variant &v : variants)
    dWp.push_back(upload(packW(hW, K, N, v.kw)));
  __half *dY = alloc<__half>(size_t(M * N)), *dYRef = alloc<__half>(size_t(M * N));
  const int64_t blocks = pitBlocks(M, kT);
  const int cap = int(pitCapacity(K));
  const PitWorkspace ws = allocPitWorkspace(M, K, kT);
  bool g;

  std::printf("GPU: %s, %d SMs, %.0f MB L2\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize / 1e6);
  std::printf("y = x . W, M=%lld K=%lld N=%lld, fp16, x sparse in random 32 x 1 "
              "micro-tiles; microseconds per call; streamed: a block of 16 token "
              "blocks x 64 columns, clusters of C blocks sharing W's windows\n\n",
              (long long)M, (long long)K, (long long)N);
  std::printf("| sparsity | cuBLAS dense | PIT total (runtime) | vs cuBLAS | sread sorted "
              "| variant | C | streamed matmul | streamed total | vs cuBLAS | W ring alone | its GB/s an SM | err |\n");
  std::printf("|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
  bool ok = true;
  for (double sparsity : sparsities) {
    std::vector<uint8_t> active;
    __half *dX = upload(problem.input(M, K, kT, sparsity, active));
    auto dense = [&] { denseGemm(blas, M, N, K, dW, dX, dYRef); };
    const double denseUs = timeUs(dense, g, 10);
    dense();
    const std::vector<float> ref = toFloats(download(dYRef, size_t(M * N)));
    auto check = [&] { return relErr(toFloats(download(dY, size_t(M * N))), ref); };
    const double pitUs = timeUs([&] {
      pitSRead(dX, M, K, kT, false, ws, stream);
      pitMatmul(ws, M, K, dW, N, kT, nullptr, ops::Activation::none, nullptr, dY, stream);
    }, g, 20);
    CHECK_CUDA(cudaGetLastError());
    const double pitErr = check();
    ok &= pitErr < 5e-3;
    const double sreadUs = timeUs([&] { pitSRead(dX, M, K, kT, true, ws, stream); }, g, 20);
    for (size_t vi = 0; vi < std::size(variants); ++vi) {
      const Variant &v = variants[vi];
      for (double cd : clusters) {
        const int C = int(cd);
        const int64_t groups = blocks / v.warps;
        if (v.async && C != 1)
          continue;
        if (C < 1 || C > 16 || groups % C || v.kw % C) {
          std::printf("| %.0f %% | | | | | %s | %d | n/a: C must divide %lld groups |\n",
                      sparsity, v.name, C, (long long)groups);
          continue;
        }
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(unsigned(groups), unsigned(N / kCols));
        cfg.blockDim = dim3(unsigned(32 * v.warps));
        cfg.dynamicSmemBytes = v.smem;
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = unsigned(C);
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        auto launch = [&](int ringOnly = 0) {
          return cudaLaunchKernelEx(&cfg, v.kernel, dWp[vi], ws.idx, ws.count,
                                    static_cast<const __half *>(ws.xg), cap,
                                    int(K), int(N), dY, ringOnly);
        };
        if (sparsity == sparsities.front()) {
          int most = 0;
          if (cudaOccupancyMaxActiveClusters(&most, (void *)v.kernel, &cfg) == cudaSuccess)
            std::fprintf(stderr, "%s, C = %d: at most %d clusters at once\n", v.name, C,
                         most);
          cudaGetLastError();
        }
        CHECK_CUDA(cudaMemsetAsync(dY, 0, size_t(M * N) * 2, stream));
        pitSRead(dX, M, K, kT, true, ws, stream);
        cudaError_t e = launch();
        if (e == cudaSuccess)
          e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess) {
          std::printf("| %.0f %% | | | | | %s | %d | n/a: %s |\n", sparsity, v.name, C,
                      cudaGetErrorString(e));
          cudaGetLastError();
          continue;
        }
        const double err = check();
        ok &= err < 5e-3;
        const double mmUs = timeUs([&] { CHECK_CUDA(launch()); }, g, 20);
        const double ringUs = timeUs([&] { CHECK_CUDA(launch(1)); }, g, 20);
        const double totalUs = timeUs([&] {
          pitSRead(dX, M, K, kT, true, ws, stream);
          CHECK_CUDA(launch());
        }, g, 20);
        // Each block takes in its slice of W: K x 64 columns x 2 bytes.
        const double perSm = double(groups) * double(N / kCols) * double(K) * kRowBytes /
                             prop.multiProcessorCount / (ringUs * 1e3);
        std::printf("| %.0f %% | %s | %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %.1e |\n",
                    sparsity, cell(denseUs).c_str(), cell(pitUs).c_str(),
                    cell(denseUs / pitUs, "%.2fx").c_str(), cell(sreadUs).c_str(), v.name,
                    C, cell(mmUs).c_str(), cell(totalUs).c_str(),
                    cell(denseUs / totalUs, "%.2fx").c_str(), cell(ringUs).c_str(),
                    cell(perSm, "%.1f").c_str(), err);
        std::fflush(stdout);
      }
    }
    cudaFree(dX);
  }
  if (!ok)
    std::printf("MISMATCH: an output differs from cuBLAS's by more than 5e-3 relative\n");
  return ok ? 0 : 1;
}
