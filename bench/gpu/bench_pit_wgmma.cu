//===- bench_pit_wgmma.cu - PIT's matmul on warpgroup MMAs ---------------===//
//
// Part of the sparsec project.
//
// y [M, N] = x [M, K] . W [K, N], fp16, x sparse in random 32 x 1
// micro-tiles, as in sparsec-bench-pit. PIT's matmul (runtime/src/cuda/
// Pit.cu) copies each token block's rows of W and its gathered x into
// shared memory with cp.async and multiplies them with mma.sync, whose
// operands ldmatrix loads from shared memory into registers. At 90 %
// micro-tile sparsity that kernel is bound by L1's data pipe, and the
// ldmatrix loads are 7.0 M of its 16.0 M shared-memory wavefronts
// (docs/GPU.md, "W's rows in registers; what L1's throughput is made of").
//
// This benchmark measures the same dataflow with Hopper's warpgroup MMAs
// (wgmma.mma_async), which read both operands from shared memory through
// matrix descriptors, so no ldmatrix is left:
//
//   - a block of one warpgroup (4 warps) computes one token block (32
//     tokens) x 128 output columns, as the runtime's 4-warp kernel;
//   - the MMA's M side is the output columns (two m64 halves), its N side
//     the 32 tokens, its K side the gathered set, 16 entries an MMA:
//     m64n32k16, both operands MN-major (transposed);
//   - W's gathered rows land in the 128-byte-swizzled layout (each half's
//     row is 128 bytes, its 16-byte pieces XORed with the row's index mod
//     8), the gathered x in the 64-byte-swizzled one (rows of 64 bytes,
//     pieces XORed with (row / 2) mod 4), both placed by cp.async piece by
//     piece, which the swizzle keeps free of bank conflicts;
//   - a pipeline of S stages of 32 set entries; a proxy fence makes the
//     copies visible to the MMAs, which are waited for before their stage
//     is copied over: either at once, or ("overlap") only once the next
//     chunk's MMAs are issued, so that a chunk's MMAs run while the copies
//     for the chunk S - 1 ahead are issued;
//   - optionally a sweep: a block computes `tiles` output blocks of its
//     token block in turn, keeping a set of at most S chunks' gathered x in
//     shared memory for all of them.
//
// A layout probe runs first: a 64 x 64 x 256 product through the kernel,
// checked against cuBLAS before the long runs. Then each variant is checked
// against cuBLAS (relative error below 5e-3, as sparsec-bench-pit).
// Columns: cuBLAS dense, PIT's total and matmul (the runtime's defaults),
// the sorted SRead, and for each variant the matmul alone and after the
// sorted SRead.
//
//   sparsec-bench-pit-wgmma [--m 4096] [--k 4096] [--n 4096]
//                           [--sparsity 0,50,90,95,99]
//
// Built for sm_90a (warpgroup MMAs are a Hopper-only feature).
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

constexpr int kT = 32;          // tokens a micro-tile (the MMA's N)
constexpr int kBN = 128;        // output columns a block (two m64 halves)
constexpr int kBK = kPitChunk;  // set entries a stage
constexpr int kThreads = 128;   // one warpgroup
constexpr int kHalfBytes = kBK * 64 * 2;   // one m64 half of a W stage: 4 KB
constexpr int kWStage = 2 * kHalfBytes;    // 8 KB
constexpr int kXStage = kBK * kT * 2;      // 2 KB
constexpr int kYS = kBN + 4;               // epilogue row stride (floats)
constexpr int kEpi = kT * kYS * 4;         // 16.5 KB

__host__ __device__ constexpr int roundUp(int v, int to) { return (v + to - 1) / to * to; }
template <int Stages> __host__ __device__ constexpr int wRegion() {
  return roundUp(Stages * kWStage > kEpi ? Stages * kWStage : kEpi, 1024);
}
template <int Stages> constexpr size_t smemBytes() {
  // + 1024: the dynamic shared memory's start is aligned up to 1024 bytes
  // (the 128-byte swizzle repeats every 1024).
  return size_t(wRegion<Stages>() + Stages * kXStage + 1024);
}

// The copies and warpgroup-MMA helpers are the runtime's
// (runtime/src/cuda/TileStaging.cuh, through GpuBench.h).
__device__ __forceinline__ void copy16(unsigned dst, const void *src, int bytes,
                                       bool viaL1) {
  if (viaL1)
    cpAsync16L1(dst, src, bytes);
  else
    cpAsync16(dst, src, bytes);
}

/// One block: token block blockIdx.y x `tiles` output blocks of 128
/// columns from blockIdx.x * tiles. xg / idx / count as pitSRead builds them.
template <int Stages, int MinBlocks, bool Overlap = false>
__global__ void __launch_bounds__(kThreads, MinBlocks)
    wgmmaKernel(const __half *__restrict__ xg, const int32_t *idx, const int32_t *count,
                int M, int cap, const __half *__restrict__ w, int N, __half *y, int tiles,
                int flags) {
  const bool viaL1 = flags & 1; // W's rows through L1 (cp.async.ca)
  extern __shared__ unsigned char smemRaw[];
  unsigned char *smem = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(smemRaw) + 1023) & ~uintptr_t(1023));
  const unsigned wBase = smemAddr(smem), xBase = wBase + wRegion<Stages>();
  float *ys = reinterpret_cast<float *>(smem);

  const int b = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t *bidx = idx + size_t(b) * cap;
  const __half *bxg = xg + size_t(b) * cap * kT;
  const int total = __ldca(count + b);
  const int chunks = (total + kBK - 1) / kBK;

  // W: each thread copies piece q (16 bytes, 8 columns) of rows r0 + 8 i.
  constexpr int RPT = kBK * 16 / kThreads; // 4
  const int q = tid & 15, r0 = tid >> 4;
  const unsigned wOff = (q >> 3) * kHalfBytes + (((q & 7) ^ (r0 & 7)) << 4);
  auto fetch = [&](int c, int (&rows)[RPT]) {
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const int j = c * kBK + r0 + 8 * i;
      rows[i] = j < total ? __ldca(bidx + j) : -1;
    }
  };
  auto loadW = [&](int stage, int n0, const int (&rows)[RPT]) {
    const int n = n0 + q * 8;
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const bool ok = rows[i] >= 0 && n < N;
      copy16(wBase + stage * kWStage + (r0 + 8 * i) * 128 + wOff,
             ok ? w + size_t(rows[i]) * N + n : w, ok ? 16 : 0, viaL1);
    }
  };
  // x: thread tid copies piece tid & 3 (8 tokens) of entry tid >> 2.
  const int xr = tid >> 2, xq = tid & 3;
  const unsigned xOff = xr * 64 + ((xq ^ ((xr >> 1) & 3)) << 4);
  auto loadX = [&](int stage, int c) {
    const int j = c * kBK + xr;
    const bool ok = j < total;
    cpAsync16(xBase + stage * kXStage + xOff, ok ? bxg + size_t(j) * kT + xq * 8 : bxg,
              ok ? 16 : 0);
  };

  float acc[2][16];
  auto zero = [&] {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 16; ++i)
        acc[h][i] = 0.0f;
  };
  // One chunk's product (W's stage wsIdx, x's stage xsIdx); waited for
  // unless `wait` is false.
  auto compute = [&](int wsIdx, int xsIdx, bool wait = true) {
    wgmmaFenceOperands(acc[0]);
    wgmmaFenceOperands(acc[1]);
    wgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const uint64_t db =
          wgmmaDesc(xBase + xsIdx * kXStage + kk * 1024, 2048, 512, kSwizzle64);
#pragma unroll
      for (int h = 0; h < 2; ++h)
        wgmmaM64N32K16(acc[h],
                       wgmmaDesc(wBase + wsIdx * kWStage + h * kHalfBytes + kk * 2048,
                                 kHalfBytes, 1024, kSwizzle128),
                       db);
    }
    wgmmaCommit();
    if (wait) {
      wgmmaWait<0>();
      wgmmaFenceOperands(acc[0]);
      wgmmaFenceOperands(acc[1]);
    }
  };
  auto ready = [&] {
    fenceProxyAsyncShared();
    __syncthreads();
  };
  // acc (row m = output column, column t = token; the mma.sync C layout a
  // warp's 16 rows at a time) to ys [t][m], then 8 adjacent columns of
  // every 16th token a thread as fp16.
  auto epilogue = [&](int n0) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int m = h * 64 + warp * 16 + (lane >> 2) + ((i & 2) ? 8 : 0);
        const int t = (i >> 2) * 8 + (lane & 3) * 2 + (i & 1);
        ys[t * kYS + m] = acc[h][i];
      }
    __syncthreads();
    const int c = (tid & 15) * 8, n = n0 + c;
    if (n < N)
      for (int t = tid >> 4; t < kT; t += kThreads / 16) {
        const int row = b * kT + t;
        if (row >= M)
          break;
        const float4 p0 = *reinterpret_cast<const float4 *>(ys + t * kYS + c),
                     p1 = *reinterpret_cast<const float4 *>(ys + t * kYS + c + 4);
        __half2 h[4] = {__floats2half2_rn(p0.x, p0.y), __floats2half2_rn(p0.z, p0.w),
                        __floats2half2_rn(p1.x, p1.y), __floats2half2_rn(p1.z, p1.w)};
        *reinterpret_cast<uint4 *>(y + size_t(row) * N + n) = *reinterpret_cast<uint4 *>(h);
      }
    __syncthreads(); // ys is read before the next copies land over it
  };

  const int outBlocks = (N + kBN - 1) / kBN;
  const int first = blockIdx.x * tiles, last = min(first + tiles, outBlocks);
  if (chunks <= Stages && last - first > 1) {
    // The whole set's gathered x stays for every output block.
    for (int s = 0; s < chunks; ++s)
      loadX(s, s);
    for (int g = first; g < last; ++g) {
      for (int s = 0; s < chunks; ++s) {
        int rows[RPT];
        fetch(s, rows);
        loadW(s, g * kBN, rows);
      }
      cpAsyncCommit();
      cpAsyncWait<0>();
      ready();
      zero();
      for (int s = 0; s < chunks; ++s)
        compute(s, s);
      __syncthreads(); // every warpgroup MMA done before ys is written
      epilogue(g * kBN);
    }
    return;
  }
  for (int g = first; g < last; ++g) {
    const int n0 = g * kBN;
    zero();
#pragma unroll
    for (int s = 0; s < Stages - 1; ++s) {
      if (s < chunks) {
        int rows[RPT];
        fetch(s, rows);
        loadW(s, n0, rows);
        loadX(s, s);
      }
      cpAsyncCommit();
    }
    int pending[RPT];
    fetch(Stages - 1, pending);
    for (int c = 0; c < chunks; ++c) {
      cpAsyncWait<Stages - 2>();
      ready();
      if (Overlap) {
        // Chunk c's MMAs run while chunk c - 1's (done once the wait
        // returns) stage is copied over.
        compute(c % Stages, c % Stages, false);
        wgmmaWait<1>();
      }
      const int next = c + Stages - 1;
      if (next < chunks) {
        loadW(next % Stages, n0, pending);
        loadX(next % Stages, next);
        if (next + 1 < chunks)
          fetch(next + 1, pending);
      }
      cpAsyncCommit();
      if (!Overlap)
        compute(c % Stages, c % Stages);
    }
    if (Overlap) {
      wgmmaWait<0>();
      wgmmaFenceOperands(acc[0]);
      wgmmaFenceOperands(acc[1]);
    }
    cpAsyncWait<0>();
    __syncthreads();
    epilogue(n0);
  }
}

struct Variant {
  const char *name;
  void (*kernel)(const __half *, const int32_t *, const int32_t *, int, int, const __half *,
                 int, __half *, int, int);
  size_t smem;
  int tiles;
  int flags;
};

} // namespace

int main(int argc, char **argv) {
  int64_t M = 4096, K = 4096, N = 4096;
  std::vector<double> sparsities = {0, 50, 90, 95, 99};
  if (!Options("sparsec-bench-pit-wgmma")
           .add("--m", M)
           .add("--k", K)
           .add("--n", N)
           .add("--sparsity", sparsities)
           .parse(argc, argv))
    return 1;
  if (!percentages(sparsities))
    return 1;
  if (M < 1 || K < 1 || N < kBN || N % 8) {
    std::fprintf(stderr, "error: need positive sizes and N a multiple of 8, at least %d\n",
                 kBN);
    return 1;
  }
  const Variant variants[] = {
      {"2 stages", wgmmaKernel<2, 8>, smemBytes<2>(), 1, 1},
      {"2 stages, W via cp.async.cg", wgmmaKernel<2, 8>, smemBytes<2>(), 1, 0},
      {"3 stages, W via cp.async.cg", wgmmaKernel<3, 6>, smemBytes<3>(), 1, 0},
      {"2 stages, cg, sweep 2", wgmmaKernel<2, 8>, smemBytes<2>(), 2, 0},
      {"2 stages, cg, sweep 4", wgmmaKernel<2, 8>, smemBytes<2>(), 4, 0},
      {"3 stages, cg, overlap", wgmmaKernel<3, 6, true>, smemBytes<3>(), 1, 0},
      {"3 stages, cg, 8 blocks an SM", wgmmaKernel<3, 8>, smemBytes<3>(), 1, 0},
  };
  cudaDeviceProp prop;
  cublasHandle_t blas;
  cusparseHandle_t sp;
  setUp(prop, blas, sp);
  for (const Variant &v : variants)
    CHECK_CUDA(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(v.smem)));

  PitProblem problem;
  {
    // The layout probe: a small problem (64 x 64 x 256, dense and half the
    // micro-tiles empty) through the 2-stage kernel. (Run with the
    // descriptors' leading and stride offsets exchanged, it faulted: the
    // layout as designed is the one the hardware reads.)
    const int64_t pm = 64, pk = 64, pn = 256;
    __half *pW = upload(problem.weights(pk, pn));
    __half *pY = alloc<__half>(size_t(pm * pn)), *pRef = alloc<__half>(size_t(pm * pn));
    const PitWorkspace pws = allocPitWorkspace(pm, pk, kT);
    for (double sp : {0.0, 50.0}) {
      std::vector<uint8_t> act;
      __half *pX = upload(problem.input(pm, pk, kT, sp, act));
      denseGemm(blas, pm, pn, pk, pW, pX, pRef);
      const std::vector<float> ref = toFloats(download(pRef, size_t(pm * pn)));
      CHECK_CUDA(cudaMemset(pY, 0, size_t(pm * pn) * 2));
      pitSRead(pX, pm, pk, kT, true, pws, stream);
      wgmmaKernel<2, 8><<<dim3(unsigned(pn / kBN), unsigned(pitBlocks(pm, kT))),
                          kThreads, smemBytes<2>(), stream>>>(
          static_cast<const __half *>(pws.xg), pws.idx, pws.count, int(pm),
          int(pitCapacity(pk)), pW, int(pn), pY, 1, 1);
      cudaError_t e = cudaStreamSynchronize(stream);
      if (e != cudaSuccess) {
        std::printf("layout probe: %s\n", cudaGetErrorString(e));
        return 1;
      }
      std::printf("layout probe, %.0f %% sparse: relative error %.1e\n", sp,
                  relErr(toFloats(download(pY, size_t(pm * pn))), ref));
      cudaFree(pX);
    }
    std::printf("\n");
  }
  __half *dW = upload(problem.weights(K, N));
  __half *dY = alloc<__half>(size_t(M * N)), *dYRef = alloc<__half>(size_t(M * N));
  const int64_t blocks = pitBlocks(M, kT);
  const int cap = int(pitCapacity(K));
  const PitWorkspace ws = allocPitWorkspace(M, K, kT);
  bool g;

  std::printf("GPU: %s, %d SMs, %.0f MB L2\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize / 1e6);
  std::printf("y = x . W, M=%lld K=%lld N=%lld, fp16, x sparse in random 32 x 1 "
              "micro-tiles; microseconds per call; warpgroup MMAs (m64n32k16), a block of "
              "32 tokens x 128 columns\n\n",
              (long long)M, (long long)K, (long long)N);
  std::printf("| sparsity | cuBLAS dense | PIT total (runtime) | vs cuBLAS | PIT matmul "
              "(runtime) | sread sorted | variant | wgmma matmul | wgmma total | vs cuBLAS | "
              "err |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n");
  bool ok = true;
  for (double sparsity : sparsities) {
    std::vector<uint8_t> active;
    __half *dX = upload(problem.input(M, K, kT, sparsity, active));
    auto dense = [&] { denseGemm(blas, M, N, K, dW, dX, dYRef); };
    const double denseUs = timeUs(dense, g, 10);
    dense();
    const std::vector<float> ref = toFloats(download(dYRef, size_t(M * N)));
    auto check = [&] {
      const double e = relErr(toFloats(download(dY, size_t(M * N))), ref);
      CHECK_CUDA(cudaMemset(dY, 0, size_t(M * N) * 2));
      return e;
    };
    const double pitUs = timeUs([&] {
      pitSRead(dX, M, K, kT, false, ws, stream);
      pitMatmul(ws, M, K, dW, N, kT, nullptr, ops::Activation::none, nullptr, dY, stream);
    }, g, 20);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const double pitErr = check();
    ok &= pitErr < 5e-3;
    const double sreadUs = timeUs([&] { pitSRead(dX, M, K, kT, true, ws, stream); }, g, 20);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const double pitMmUs = timeUs([&] {
      pitMatmul(ws, M, K, dW, N, kT, nullptr, ops::Activation::none, nullptr, dY, stream);
    }, g, 20);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    if (check() >= 5e-3)
      ok = false;
    for (const Variant &v : variants) {
      const int outBlocks = int((N + kBN - 1) / kBN);
      const dim3 grid{unsigned((outBlocks + v.tiles - 1) / v.tiles), unsigned(blocks)};
      auto launch = [&] {
        v.kernel<<<grid, kThreads, v.smem, stream>>>(
            static_cast<const __half *>(ws.xg), ws.idx, ws.count, int(M), cap,
            dW, int(N), dY, v.tiles, v.flags);
        return cudaGetLastError();
      };
      pitSRead(dX, M, K, kT, true, ws, stream);
      cudaError_t e = launch();
      if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream);
      if (e != cudaSuccess) {
        std::printf("| %.0f %% | | | | | | %s | n/a: %s |\n", sparsity, v.name,
                    cudaGetErrorString(e));
        std::fflush(stdout);
        return 1; // a fault leaves the context unusable
      }
      const double err = check();
      ok &= err < 5e-3;
      const double mmUs = timeUs([&] { CHECK_CUDA(launch()); }, g, 20);
      const double totalUs = timeUs([&] {
        pitSRead(dX, M, K, kT, true, ws, stream);
        CHECK_CUDA(launch());
      }, g, 20);
      std::printf("| %.0f %% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1e |\n", sparsity,
                  cell(denseUs).c_str(), cell(pitUs).c_str(),
                  cell(denseUs / pitUs, "%.2fx").c_str(), cell(pitMmUs).c_str(),
                  cell(sreadUs).c_str(), v.name, cell(mmUs).c_str(), cell(totalUs).c_str(),
                  cell(denseUs / totalUs, "%.2fx").c_str(), err);
      std::fflush(stdout);
    }
    cudaFree(dX);
  }
  if (!ok)
    std::printf("MISMATCH: an output differs from cuBLAS's by more than 5e-3 relative\n");
  return ok ? 0 : 1;
}
