//===- Pit.cu - PIT micro-tiled sparse matmul kernels --------------------===//
//
// Part of the sparsec project.
//
// See sparsec/rt/cuda/Pit.h for the contract. Tensor-core code uses the
// sm_80+ warp-level instructions (ldmatrix, mma.sync m16n8k16, cp.async),
// which run on the H200 next to cuBLAS's wgmma kernels.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/Pit.h"
#include "sparsec/rt/cuda/SparseDecode.h"

#include "DeviceMath.cuh"
#include "Switches.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

namespace sparsec::rt::cuda {
namespace {

constexpr int kSReadThreads = 512;
constexpr int kBK = kPitChunk; // gathered rows per pipeline stage
constexpr int kStages = 4; // the deepest cp.async pipeline (see launchMatmulS)
constexpr int kSweepColumns = 128; // a sweep's output block (4 x 32, 2 x 64)

//===----------------------------------------------------------------------===//
// SRead: index construction and gather
//===----------------------------------------------------------------------===//

// x is read once, here (the matmul reads the gathered copy): streaming
// loads (evict-first) leave the L2 to W's rows and the outputs.
__device__ __forceinline__ float loadF(const float *p) { return __ldcs(p); }
__device__ __forceinline__ float loadF(const __half *p) {
  return __half2float(__ldcs(p));
}

/// Column k of the token block's rows [row0, row0 + rows) as pairs of E
/// (__half or __nv_bfloat16, W's type; v[i] holds tokens 2i and 2i + 1;
/// rows past the block and columns past K are zero); whether any value is
/// non-zero.
template <typename E, typename X, int T>
__device__ __forceinline__ bool loadColumn(const X *__restrict__ x, int K,
                                           int row0, int rows, int k,
                                           unsigned (&v)[T / 2]) {
  bool any = false;
#pragma unroll
  for (int t = 0; t < T; t += 2) {
    float f0 = (k < K && t < rows) ? loadF(x + size_t(row0 + t) * K + k) : 0.0f;
    float f1 =
        (k < K && t + 1 < rows) ? loadF(x + size_t(row0 + t + 1) * K + k) : 0.0f;
    v[t / 2] = pack2<E>(f0, f1);
    any |= (f0 != 0.0f) | (f1 != 0.0f);
  }
  return any;
}

/// Entry `pos` of a token block's set: its column and gathered values.
template <int T, typename E>
__device__ __forceinline__ void storeColumn(int32_t *bidx, E *bxg, int pos,
                                            int k, const unsigned (&v)[T / 2]) {
  bidx[pos] = k;
  uint4 *dst = reinterpret_cast<uint4 *>(bxg + size_t(pos) * T);
#pragma unroll
  for (int q = 0; q < T / 8; ++q)
    dst[q] = make_uint4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
}

/// 8 bytes of x as floats: 2 fp32 or 4 fp16 values.
template <typename X> constexpr int kPerLoad = 8 / int(sizeof(X));
__device__ __forceinline__ void unpack8(uint2 u, const float *, float (&f)[2]) {
  f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y);
}
__device__ __forceinline__ void unpack8(uint2 u, const __half *, float (&f)[4]) {
  __half2 lo = *reinterpret_cast<__half2 *>(&u.x),
          hi = *reinterpret_cast<__half2 *>(&u.y);
  f[0] = __low2float(lo), f[1] = __high2float(lo);
  f[2] = __low2float(hi), f[3] = __high2float(hi);
}

/// V = kPerLoad<X> adjacent columns [k0, k0 + V) of the token block's rows
/// as pairs of E (as loadColumn), one 8-byte load a row; K is a multiple
/// of V and x 8-byte aligned (launchSRead checks). 8 bytes keep a thread's
/// T loads in flight within 64 registers at T = 32. Streaming loads, as
/// loadF.
template <typename E, typename X, int T, int V>
__device__ __forceinline__ void
loadColumnsV(const X *__restrict__ x, int K, int row0, int rows, int k0,
             unsigned (&v)[V][T / 2], bool (&any)[V]) {
  static_assert(V == kPerLoad<X>, "one 8-byte load a row");
  uint2 raw[T];
  const bool in = k0 < K;
#pragma unroll
  for (int t = 0; t < T; ++t)
    raw[t] = in && t < rows
                 ? __ldcs(reinterpret_cast<const uint2 *>(x + size_t(row0 + t) * K + k0))
                 : make_uint2(0u, 0u);
#pragma unroll
  for (int j = 0; j < V; ++j)
    any[j] = false;
#pragma unroll
  for (int t = 0; t < T; t += 2) {
    float f0[V], f1[V];
    unpack8(raw[t], x, f0);
    unpack8(raw[t + 1], x, f1);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      v[j][t / 2] = pack2<E>(f0[j], f1[j]);
      any[j] |= (f0[j] != 0.0f) | (f1[j] != 0.0f);
    }
  }
}

/// V adjacent columns from k0 (V = kPerLoad<X>: one 8-byte load a row, as
/// loadColumnsV; V = 1: one column, as loadColumn).
template <typename E, typename X, int T, int V>
__device__ __forceinline__ void
loadColumns(const X *__restrict__ x, int K, int row0, int rows, int k0,
            unsigned (&v)[V][T / 2], bool (&any)[V]) {
  if constexpr (V == 1)
    any[0] = loadColumn<E, X, T>(x, K, row0, rows, k0, v[0]);
  else
    loadColumnsV<E, X, T, V>(x, K, row0, rows, k0, v, any);
}

/// The sorted SRead: one block per token block, each pass kSReadThreads
/// threads x V adjacent columns (V as pitSReadWideKernel), the columns'
/// positions an exclusive prefix over the block's flags in column order.
/// The set comes out sorted and the same on every run, and count is
/// written rather than added to, so nothing has to clear it first.
template <typename E, typename X, int T, int V>
__global__ void __launch_bounds__(kSReadThreads)
    pitSReadScanKernel(const X *__restrict__ x, int M, int K, int cap,
                       int32_t *__restrict__ idx, int32_t *__restrict__ count,
                       E *__restrict__ xg) {
  constexpr int kWarps = kSReadThreads / 32;
  // Two sets of warp totals: a pass writes one while a slow warp may still
  // read the other pass's (a barrier lies between a set's reads and its
  // next writes).
  __shared__ int warpCounts[2][kWarps];
  const int b = blockIdx.x, row0 = b * T;
  const int rows = min(T, M - row0);
  int32_t *bidx = idx + size_t(b) * cap;
  E *bxg = xg + size_t(b) * cap * T;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  pdlTrigger();
  pdlWait(); // x comes from before
  int base = 0, parity = 0;
  for (int g = 0; g < K; g += kSReadThreads * V, parity ^= 1) {
    const int k0 = g + threadIdx.x * V;
    unsigned v[V][T / 2];
    bool any[V];
    loadColumns<E, X, T, V>(x, K, row0, rows, k0, v, any);
    int mine = 0;
#pragma unroll
    for (int j = 0; j < V; ++j)
      mine += any[j];
    int upTo = mine; // inclusive prefix over the warp's lanes
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      int t = __shfl_up_sync(0xffffffffu, upTo, d);
      upTo += lane >= d ? t : 0;
    }
    if (lane == 31)
      warpCounts[parity][warp] = upTo;
    __syncthreads();
    int before = 0, all = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      int c = warpCounts[parity][w];
      before += w < warp ? c : 0;
      all += c;
    }
    int pos = base + before + upTo - mine;
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (any[j])
        storeColumn<T>(bidx, bxg, pos++, k0 + j, v[j]);
    base += all;
  }
  if (threadIdx.x == 0)
    count[b] = base;
}

/// The unsorted SRead: a wide grid (token block, 256 threads x V columns)
/// whose warps append to the block's set with one atomic each; count must
/// be zero. V = kPerLoad<X> (2 fp32 or 4 fp16 columns, one 8-byte load a
/// row) when K is a multiple of it; V = 1 otherwise.
template <typename E, typename X, int T, int V>
__global__ void __launch_bounds__(256)
    pitSReadWideKernel(const X *__restrict__ x, int M, int K, int cap,
                       int32_t *__restrict__ idx, int32_t *__restrict__ count,
                       E *__restrict__ xg) {
  const int b = blockIdx.y, row0 = b * T;
  const int rows = min(T, M - row0);
  const int k0 = (blockIdx.x * 256 + threadIdx.x) * V;
  const int lane = threadIdx.x & 31;
  pdlTrigger(); // (launched normally, after the memset of count)
  unsigned v[V][T / 2];
  bool any[V];
  loadColumns<E, X, T, V>(x, K, row0, rows, k0, v, any);
  // Positions column-major over the warp (all lanes' column j before any
  // lane's column j + 1): the lanes storing column j write consecutive
  // entries, so each store instruction covers one contiguous run of xg.
  unsigned ballots[V];
  int total = 0;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    ballots[j] = __ballot_sync(0xffffffffu, any[j]);
    total += __popc(ballots[j]);
  }
  int first = 0;
  if (lane == 0 && total)
    first = atomicAdd(count + b, total);
  first = __shfl_sync(0xffffffffu, first, 0);
  int32_t *bidx = idx + size_t(b) * cap;
  E *bxg = xg + size_t(b) * cap * T;
  const unsigned below = (1u << lane) - 1u;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if (any[j])
      storeColumn<T>(bidx, bxg, first + __popc(ballots[j] & below), k0 + j, v[j]);
    first += __popc(ballots[j]);
  }
}

//===----------------------------------------------------------------------===//
// Epilogue stores (the tensor-core primitives are in DeviceMath.cuh)
//===----------------------------------------------------------------------===//

/// 8 adjacent outputs (32-byte aligned for fp32, 16 for fp16).
__device__ __forceinline__ void store8(float *p, const float (&v)[8]) {
  reinterpret_cast<float4 *>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4 *>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void store8(__half *p, const float (&v)[8]) {
  uint4 u;
  unsigned *w = reinterpret_cast<unsigned *>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
    w[i] = *reinterpret_cast<unsigned *>(&h);
  }
  *reinterpret_cast<uint4 *>(p) = u;
}

//===----------------------------------------------------------------------===//
// The micro-tiled matmul
//===----------------------------------------------------------------------===//

// Shared-memory row strides (halfs): 16-byte aligned rows whose ldmatrix
// row addresses fall into distinct bank groups.
template <int BN> __host__ __device__ constexpr int wStride() {
  return BN + 8;
}
template <int T> __host__ __device__ constexpr int xStride() {
  return T == 8 ? 24 : T + 8;
}
// The warpgroup-MMA kernel's shared memory (bytes): the stages of W (or the
// epilogue's tile over them, whichever is larger) rounded to the 1024 bytes
// the 128-byte swizzle repeats over, then the stages of x.
__host__ __device__ constexpr int wgRoundUp(int v, int to) {
  return (v + to - 1) / to * to;
}
template <int T, int BN, int Stages>
__host__ __device__ constexpr int wgWRegion() {
  return wgRoundUp(Stages * kBK * BN * 2 > T * (BN + 4) * 4
                       ? Stages * kBK * BN * 2
                       : T * (BN + 4) * 4,
                   1024);
}
template <int T, int WM, int Stages, bool Sweep = false, int Warps = 4,
          bool Wg = false>
constexpr size_t pitSmemBytes() {
  if (Wg) // (no sweep) + 1024: the kernel aligns its start up to 1024 bytes.
    return size_t(wgWRegion<T, Warps * WM, Stages>()) +
           size_t(Stages) * kBK * T * sizeof(__half) + 1024;
  size_t pipe = size_t(Stages) * kBK *
                (wStride<Warps * WM>() + xStride<T>()) * sizeof(__half);
  size_t epi = size_t(T) * (Warps * WM + 4) * sizeof(float);
  // A sweep keeps its first chunks' row numbers after the stages.
  if (Sweep)
    pipe += size_t(Stages) * kBK * sizeof(int32_t);
  return pipe > epi ? pipe : epi;
}

/// One block: T tokens (one micro-tile row) x BN = Warps * WM output
/// columns; warp w owns columns [w * WM, (w + 1) * WM) for all T tokens. At
/// 128 columns in 4 warps (WM = 32) it is held to 64 registers a thread,
/// without spills, so that 8 blocks fit on an SM (72 registers allowed 7):
/// with one or two chunks a block at high sparsity, blocks in flight set the
/// pace. 2 warps of 64 columns (Warps = 2, 128 registers, 8 blocks an SM)
/// load each chunk's fragments of the gathered x half as often.
///
/// Sweep (128 columns, 2 stages): a block computes `tiles` output blocks of
/// its token block in turn. The set's count and row numbers are read once;
/// a set of at most 2 chunks keeps its gathered x and its row numbers in
/// shared memory for all of them (the same shared memory and registers as
/// one output block's, so 8 blocks still fit an SM); longer sets run the
/// pipeline once per output block.
///
/// Wg (32-token tiles, 4 warps of 32 columns, sm_90a): the products run on
/// Hopper's warpgroup MMAs (wgmma.mma_async m64n32k16: the block's 128
/// columns as two m64 halves, the tokens as N; with 8 warps two warpgroups
/// of 128 columns each share the block's gathered x), which read W's rows and the
/// gathered x straight from shared memory through matrix descriptors, so
/// no ldmatrix loads them into registers. Both operands are MN-major: each
/// half of a W row is 128 bytes in the 128-byte-swizzled layout (16-byte
/// pieces XORed with the row mod 8), each gathered x row 64 bytes in the
/// 64-byte-swizzled one (pieces XORed with (row / 2) mod 4), both placed
/// by cp.async without bank conflicts. W's rows come through the L2 only
/// (cp.async.cg: faster here than through L1). On the H200 at 4096^3 this
/// kernel took 87.9-88.6 / 52.5 / 24.2-24.3 us at 90 / 95 / 99 % micro-tile
/// sparsity against 90.8-91.1 / 54.8-54.9 / 25.3-25.5 for the 2-warp
/// sweep (sparsec-bench-pit, docs/GPU.md; sparsec-bench-pit-wgmma's own
/// kernel, without bias, activation or residual, 81.7 us at 90 %). Its
/// copies on shared-space offsets, 8 threads to a W row, made it 12 / 12 /
/// 5 % faster on an H100 (77.8-78.3 / 47.5-47.7 / 24.9-25.0 us against
/// 90.2-90.6 / 54.4-54.6 / 26.2; docs/GPU.md, "The warpgroup kernel's
/// copies").
template <int T, int WM, typename Y, int Stages, bool Sweep = false,
          int Warps = 4, bool Wg = false, typename E = __half>
__global__ void __launch_bounds__(32 * Warps, Wg &&Warps == 8          ? 4
                                              : WM == 32 || Warps == 2 ? 8
                                                                       : 1)
    pitMatmulKernel(const E *__restrict__ xg, const int32_t *__restrict__ idx,
                    const int32_t *__restrict__ count, int M, int cap,
                    const E *__restrict__ w, int N,
                    const float *__restrict__ bias, Activation act,
                    const float *residual, Y *y, int tiles) {
  static_assert(!Sweep || Stages == 2, "a sweep runs 2 stages");
  static_assert(!Wg || (T == 32 && WM == 32 && (Warps == 4 || Warps == 8) &&
                        !Sweep),
                "warpgroup MMAs: 32 tokens x 128 columns a warpgroup, one "
                "or two warpgroups, no sweep");
  constexpr int kThreads = 32 * Warps;
  constexpr int BN = Warps * WM;
  constexpr int WS = wStride<BN>();
  constexpr int XS = xStride<T>();
  constexpr int MT = WM / 16; // m16 tiles (output columns) per warp
  constexpr int NT = T / 8;   // n8 tiles (tokens) per warp
  // Wg: a W stage is two 64-column halves of kBK rows of 128 bytes, an x
  // stage kBK rows of 64 bytes, both unpadded (the swizzles spread them).
  constexpr int WStage = Wg ? kBK * BN : kBK * WS; // halfs
  constexpr int XStage = Wg ? kBK * T : kBK * XS;  // halfs
  constexpr int WRegion = Wg ? wgWRegion<T, BN, Stages>() / 2 : Stages * WStage;
  extern __shared__ __align__(16) unsigned char smemRaw[];
  // Wg: aligned up to 1024 bytes by an offset (not through an integer), so
  // the pointers stay known as shared ones.
  unsigned char *smem =
      Wg ? smemRaw + ((1024u - (smemAddr(smemRaw) & 1023u)) & 1023u) : smemRaw;
  E *ws = reinterpret_cast<E *>(smem);
  E *xs = ws + WRegion;
  // Wg: the stages' shared-space addresses; its copies and descriptors
  // work on these 32-bit offsets rather than on generic pointers.
  const unsigned wBase = smemAddr(ws), xBase = smemAddr(xs);
  // Wg: the first stage's matrix descriptors (W: 64-column halves kBK * 128
  // bytes apart, 8-row groups of 1024 bytes; x: 8-row groups of 512 bytes),
  // which each chunk's advance by its offsets.
  const uint64_t wDesc = Wg ? wgmmaDesc(wBase, kBK * 128, 1024, kSwizzle128) : 0,
                 xDesc = Wg ? wgmmaDesc(xBase, 2048, 512, kSwizzle64) : 0;
  // Accumulators (row = output column, col = token) go to ys [T][BN + 4]
  // for the epilogue, over the stages of W (not over those of x).
  constexpr int YS = BN + 4;
  static_assert(T * YS * sizeof(float) <= WRegion * sizeof(E),
                "the epilogue fits over the stages of W");
  float *ys = reinterpret_cast<float *>(smem);

  // Wg: token blocks along x, output blocks along y (see launchMatmul).
  const int b = Wg ? blockIdx.x : blockIdx.y;
  if (!Sweep)
    tiles = 1;
  const int tile0 = blockIdx.x * tiles;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  pdlTrigger();
  pdlWait(); // the set, the gathered x and the residual come from before
  const int32_t *bidx = idx + size_t(b) * cap;
  const E *bxg = xg + size_t(b) * cap * T;

  // Each thread copies row segments of a fixed column q and rows
  // r0 + i * RSTEP of every chunk; their W row numbers are fetched one
  // chunk ahead (into registers) so no copy waits on an index load.
  constexpr int SEGS = BN / 8; // 16-byte segments per W row
  // Wg: 8 threads to a row, each copying the same piece q of both 64-column
  // halves (one 128-byte line a half: a warp's copy covers 4 whole lines),
  // so a thread has 2 rows a chunk, r0 and r0 + 16, instead of 4: half the
  // row numbers to load and addresses to form, its 4 copies 2 apiece.
  // Two warpgroups (256 columns): 8 threads to a row still, one row a
  // thread a chunk, each copying piece q of all four 64-column quarters.
  constexpr int WQ = BN / 64; // Wg: 64-column pieces of a W row
  constexpr int RPT = Wg ? kBK * 8 / kThreads : kBK * SEGS / kThreads; // W rows a thread, chunk
  constexpr int RSTEP = Wg ? kThreads / 8 : kThreads / SEGS;
  static_assert(kBK * SEGS % kThreads == 0, "whole rows per thread");
  const int q = Wg ? tid % 8 : tid % SEGS, r0 = Wg ? tid / 8 : tid / SEGS;
  // Wg: a thread's rows r0 + i * RSTEP share their swizzle (RSTEP is a
  // multiple of 8), so its W piece's offset within a row is fixed; it
  // copies one piece of the gathered x, piece xq of entry xr.
  static_assert(!Wg || (SEGS == 8 * WQ && 8 * RSTEP == kThreads &&
                        RPT * RSTEP == kBK && RSTEP % 8 == 0 &&
                        kBK * NT <= kThreads),
                "warpgroup MMAs: 8 threads a row, fixed swizzles, one x "
                "piece a thread");
  const unsigned wOff = r0 * 128 + ((q ^ (r0 & 7)) << 4);
  const int xr = tid / NT, xq = tid % NT;
  const unsigned xOff = xr * 64 + ((xq ^ ((xr >> 1) & 3)) << 4);

  // The prologue's row numbers are requested together with the count
  // (every j < cap lies in the block's slice of idx), so the two share one
  // round trip instead of following each other; those past the count are
  // dropped once it arrives.
  // With 2 stages the rows of both first chunks come with the count (a set
  // of up to 2 chunks then needs no other round trip); deeper pipelines
  // keep their Stages - 1 chunks in flight from the start anyway.
  constexpr int Pre = Stages == 2 ? 2 : Stages - 1;
  // The count and the set come from the SRead before, which an early
  // launch overlaps: they are read with ordinary loads cached in L1
  // (ld.global.ca), which the wait makes see the SRead's writes. Loads
  // through the `const __restrict__` pointers would take the read-only
  // path (ld.global.nc), which is only for data no grid writes while this
  // one lives; on the H200 the 2-warp block read stale sets that way
  // (calls in turn, launched early: half the outputs wrong). Through L1
  // rather than only the L2 (ld.global.cg): level at 32-token tiles,
  // 1-5 % faster at 8 and 16 (docs/GPU.md, "The set through L1").
  const int total = __ldca(count + b);
  int first[Pre][RPT];
#pragma unroll
  for (int s = 0; s < Pre; ++s)
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      int j = s * kBK + r0 + i * RSTEP;
      first[s][i] = j < cap ? __ldca(bidx + j) : -1;
    }
  // Row numbers of first chunk s past the set dropped (idempotent).
  auto mask = [&](int s) {
#pragma unroll
    for (int i = 0; i < RPT; ++i)
      if (s * kBK + r0 + i * RSTEP >= total)
        first[s][i] = -1;
  };
  const int chunks = (total + kBK - 1) / kBK;
  auto fetch = [&](int c, int (&rowsOf)[RPT]) {
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      // (j >= 0: unsigned offsets need no sign extension.)
      const unsigned j = c * kBK + r0 + i * RSTEP;
      rowsOf[i] = int(j) < total ? __ldca(bidx + j) : -1;
    }
  };
  // Rows past the set (and columns past N) are zero-filled by cp.async.
  // The pipeline copies W's rows through L1 (cp.async.ca: with
  // cp.async.cg its long sets moved about 1.5x their bytes from the L2)
  // and the gathered x straight to shared memory (cp.async.cg: with the
  // gathered x through L1 too, the kernel was bound by L1's throughput, 89 %
  // at 90 % sparsity, and 4 % slower). The short sets' copies, issued at
  // once, are all cp.async.cg (.ca was 2 % slower at 99 %).
  auto copy16 = [&](bool viaL1, void *dst, const void *src, int bytes) {
    if (viaL1)
      cpAsync16L1(dst, src, bytes);
    else
      cpAsync16(dst, src, bytes);
  };
  // Wg places W's pieces at wOff in each half's rows of 128 bytes (piece q
  // XORed with the row mod 8: the 128-byte swizzle), x's at xOff in rows
  // of 64 bytes (piece xq XORed with (row / 2) mod 4: the 64-byte
  // swizzle); the other forms in padded rows.
  auto loadW = [&](int stage, int n0, const int(&rowsOf)[RPT],
                   bool viaL1 = true) {
    E *wst = ws + stage * WStage;
    const int n = n0 + q * 8;
    // Wg: this thread's columns in each half, and where its copies start.
    bool in[WQ];
#pragma unroll
    for (int h = 0; h < WQ; ++h)
      in[h] = n + h * 64 < N;
    const E *wq = w + (in[0] ? n : 0);
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      if constexpr (Wg) {
        // Copies past the set or past N are of 0 bytes (zero-filled, no
        // read): rows past the set name row 0, columns past N in the first
        // piece column 0. Each further 64-column piece's source is the one
        // before's + 128 bytes (an immediate offset), even where it is past
        // N.
        const bool row = rowsOf[i] >= 0;
        const E *src = wq + uint64_t(unsigned(max(rowsOf[i], 0))) * unsigned(N);
        const unsigned dst = wBase + stage * (WStage * 2) + i * RSTEP * 128 + wOff;
#pragma unroll
        for (int h = 0; h < WQ; ++h)
          cpAsync16(dst + h * (kBK * 128), src + h * 64,
                    row && in[h] ? 16 : 0);
      } else {
        bool ok = rowsOf[i] >= 0 && n < N;
        const E *src = ok ? w + size_t(rowsOf[i]) * N + n : w;
        copy16(viaL1, wst + (r0 + i * RSTEP) * WS + q * 8, src, ok ? 16 : 0);
      }
    }
  };
  auto loadX = [&](int stage, int c) {
    if constexpr (Wg) {
      if (kBK * NT < kThreads && tid >= kBK * NT)
        return; // (two warpgroups: the first copies x)
      const unsigned j = c * kBK + xr;
      const bool ok = int(j) < total;
      cpAsync16(xBase + stage * (XStage * 2) + xOff,
                bxg + (ok ? j * T + xq * 8 : 0u), ok ? 16 : 0);
      return;
    }
    E *xst = xs + stage * XStage;
#pragma unroll
    for (int p = tid; p < kBK * NT; p += kThreads) {
      int r = p / NT, qq = p % NT;
      int j = c * kBK + r;
      bool ok = j < total;
      cpAsync16(xst + r * XS + qq * 8, ok ? bxg + size_t(j) * T + qq * 8 : bxg,
                ok ? 16 : 0);
    }
  };

  // The block's copies waited for are complete for every thread; with Wg
  // also visible to the async proxy, which the warpgroup MMAs read
  // shared memory through.
  auto ready = [&] {
    if constexpr (Wg)
      fenceProxyAsyncShared();
    __syncthreads();
  };
  float acc[MT][NT][4];
  // One chunk's product from its stage of shared memory.
  auto compute = [&](int stage) {
    if constexpr (Wg) {
      // acc[h] (16 floats, h the m64 half) in wgmma's accumulator order:
      // register 4 ni + r is acc[h][ni][r] (the mma.sync C layout, each
      // warp rows 16 warp .. 16 warp + 15 of the half).
      // The stage's descriptors from the first stage's (their start
      // address field counts 16-byte units).
      // Warpgroup g's halves are W's 64-column pieces 2 g and 2 g + 1.
      const uint64_t wStage = wDesc + stage * (WStage * 2 / 16) +
                              (Warps == 8 ? (warp / 4) * (2 * kBK * 128 / 16) : 0),
                     xStage = xDesc + stage * (XStage * 2 / 16);
      wgmmaFenceOperands(reinterpret_cast<float(&)[32]>(acc));
      wgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        // 16 rows: two 8-row groups of 1024 bytes (W) / 512 bytes (x).
        const uint64_t b = xStage + kk * (1024 / 16);
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wgmmaM64N32K16<E>(reinterpret_cast<float(&)[16]>(acc[h]),
                            wStage + (h * kBK * 128 + kk * 2048) / 16, b);
      }
      wgmmaCommit();
      wgmmaWait<0>();
      wgmmaFenceOperands(reinterpret_cast<float(&)[32]>(acc));
      return;
    }
    const E *wst = ws + stage * WStage;
    const E *xst = xs + stage * XStage;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      unsigned a[MT][4];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
        ldmatrixX4T(a[mi], wst + (kk + (lane & 7) + ((lane >> 4) << 3)) * WS +
                               warp * WM + mi * 16 + ((lane >> 3) & 1) * 8);
      unsigned bf[NT][2];
      if constexpr (NT == 1) {
        ldmatrixX2T(bf[0], xst + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * XS);
      } else {
#pragma unroll
        for (int ni = 0; ni < NT / 2; ++ni) {
          unsigned r[4];
          ldmatrixX4T(r, xst + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * XS +
                             ni * 16 + (lane >> 4) * 8);
          bf[2 * ni][0] = r[0];
          bf[2 * ni][1] = r[1];
          bf[2 * ni + 1][0] = r[2];
          bf[2 * ni + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < NT; ++ni)
          mma16816<E>(acc[mi][ni], a[mi][0], a[mi][1], a[mi][2], a[mi][3],
                      bf[ni][0], bf[ni][1]);
    }
  };
  auto zero = [&] {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          acc[i][j][r] = 0.0f;
  };
  // The chunks of output block n0 through the pipeline, from the copies of
  // its first chunks on (long sets, or any set outside a sweep).
  auto pipeline = [&](int n0) {
#pragma unroll
    for (int s = 0; s < Stages - 1; ++s) {
      if (s < chunks) {
        mask(s);
        loadW(s, n0, first[s]);
        loadX(s, s);
      }
      cpAsyncCommit();
    }
    int pending[RPT];
    if constexpr (Pre == Stages) { // chunk Stages - 1 (whole: chunks > 2)
#pragma unroll
      for (int i = 0; i < RPT; ++i)
        pending[i] = first[Stages - 1][i];
    } else if (Stages - 1 < chunks) {
      fetch(Stages - 1, pending);
    }
    for (int c = 0; c < chunks; ++c) {
      cpAsyncWait<Stages - 2>();
      ready();
      const int next = c + Stages - 1;
      if (next < chunks) {
        loadW(next % Stages, n0, pending);
        loadX(next % Stages, next);
        if (next + 1 < chunks)
          fetch(next + 1, pending);
      }
      cpAsyncCommit();
      compute(c % Stages);
    }
  };
  // Accumulators to ys, then bias, activation, residual and 16-byte
  // stores of output block n0. Each thread finishes 8 adjacent columns
  // (fixed: their bias is read once) of every TSTEP-th token; N is a
  // multiple of 8, so those 8 are all in or all out.
  constexpr int CPT = BN / 8;           // threads per token row
  constexpr int TSTEP = kThreads / CPT; // token rows per pass
  static_assert(kThreads % CPT == 0 && T % TSTEP == 0, "whole passes");
  auto epilogue = [&](int n0) {
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int ni = 0; ni < NT; ++ni)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          // Wg: mi is the m64 half, the warp's 16 rows within it.
          int m = (Wg ? (Warps == 8 ? (warp / 4) * 128 : 0) + mi * 64 +
                            (warp % 4) * 16
                      : warp * WM + mi * 16) +
                  (lane >> 2) + (r >= 2 ? 8 : 0);
          int t = ni * 8 + (lane & 3) * 2 + (r & 1);
          ys[t * YS + m] = acc[mi][ni][r];
        }
    if constexpr (!Wg)
      __syncthreads();
    const int c = (tid % CPT) * 8, n = n0 + c;
    const int swap = tid & 4; // 4 for threads 4-7 of each quarter-warp
    // Wg: the bias and the first residual row this thread adds are
    // requested before the barrier, and each next residual row before the
    // row in hand is finished, so their latency passes behind other work
    // instead of once a row. (A residual aliasing y is still read before
    // it is written: each (row, column) is this thread's.) On an H100 at
    // 4096^3 with an fp32 residual and output the matmul took 115.4-115.6
    // / 87.7-88.0 / 58.9 us at 90 / 95 / 99 % against 117.7-118.0 /
    // 88.5-89.0 / 59.4-59.5, without an epilogue 0-1 % less. The same
    // requests made the mma.sync sweeps of 4 warps 6-10 % slower, and so
    // did merely restructuring this code for all forms (9 % at 90 %): the
    // other forms keep theirs as it was (docs/GPU.md, "The warpgroup
    // kernel's epilogue").
    float bv[8];
    float4 next0, next1; // Wg: the next row's residual
    auto request = [&](int t) {
      const int row = b * T + t;
      if (residual && t < T && row < M) {
        const float4 *rp =
            reinterpret_cast<const float4 *>(residual + size_t(row) * N + n);
        next0 = rp[0];
        next1 = rp[1];
      }
    };
    if constexpr (Wg) {
      if (n < N) {
#pragma unroll
        for (int i = 0; i < 8; ++i)
          bv[i] = bias ? bias[n + i] : 0.0f;
        request(tid / CPT);
      }
      __syncthreads();
    }
    if (n >= N)
      return;
    if constexpr (!Wg) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        bv[i] = bias ? bias[n + i] : 0.0f;
    }
#pragma unroll
    for (int t = tid / CPT; t < T; t += TSTEP) {
      const int row = b * T + t;
      if (row >= M)
        break;
      float4 r0, r1;
      if constexpr (Wg) {
        r0 = next0, r1 = next1;
        request(t + TSTEP);
      }
      // 16-byte reads reach the banks a quarter-warp at a time: its
      // threads 4-7 read their upper halves first, so each of the two reads
      // covers the 32 banks once (in column order, threads 8 columns apart
      // would share every bank: 2 wavefronts a read). On the H200 1-2 %
      // faster from 90 to 99 % (docs/GPU.md).
      const float4 p0 = *reinterpret_cast<const float4 *>(ys + t * YS + c + swap),
                   p1 = *reinterpret_cast<const float4 *>(ys + t * YS + c + 4 - swap);
      const float4 lo = swap ? p1 : p0, hi = swap ? p0 : p1;
      float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      // The activation tested once a row, not once a value: without one
      // (a down projection) no activation's code runs at all.
      if (act == Activation::none) {
#pragma unroll
        for (int i = 0; i < 8; ++i)
          v[i] += bv[i];
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i)
          v[i] = activate(act, v[i] + bv[i]);
      }
      if (residual) {
        if constexpr (!Wg) {
          const float4 *rp =
              reinterpret_cast<const float4 *>(residual + size_t(row) * N + n);
          r0 = rp[0], r1 = rp[1];
        }
        v[0] += r0.x, v[1] += r0.y, v[2] += r0.z, v[3] += r0.w;
        v[4] += r1.x, v[5] += r1.y, v[6] += r1.z, v[7] += r1.w;
      }
      store8(y + size_t(row) * N + n, v);
    }
  };

  // fp16 outputs without a residual, 8- and 16-token tiles: each warp
  // finishes its own WM columns from its accumulators. Bias and activation
  // are applied in registers (the same operations in the same order as
  // `epilogue`, so the same bits), the results rounded to fp16 pairs and
  // stored transposed (tokens as rows) by stmatrix into the warp's own
  // columns of W's first stage, which no other warp reads: no block
  // barrier before or inside it, and a quarter of `epilogue`'s
  // shared-memory traffic. Read back as 16-byte row segments (64 bytes of
  // a token's row a warp at 128 columns) and stored. On the H200 at 99 %
  // micro-tile sparsity it made the 16- and 8-token sweeps 6-12 % faster
  // and the 32-token ones 3 % slower (docs/GPU.md, "T calls"), so
  // 32-token tiles keep `epilogue`. (Warp pairs reading back whole
  // 128-byte rows behind a named barrier were slower at every tile.)
  constexpr bool Direct = std::is_same_v<Y, __half> && T <= 16;
  const bool direct = Direct && !residual;
  auto epilogueDirect = [&](int n0) {
    if constexpr (Direct) {
      constexpr int SEG = WM / 8; // 16-byte segments of a warp's token row
      // (fp16 outputs over W's first stage, whatever W's 16-bit type.)
      __half *st = reinterpret_cast<__half *>(ws) +
                   warp * WM; // token t's row at st + t * WS
      const int nw = n0 + warp * WM;
      float bv[MT][2];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int n = nw + mi * 16 + (lane >> 2) + 8 * h;
          bv[mi][h] = bias && n < N ? bias[n] : 0.0f;
        }
      auto pack = [&](int mi, int ni, int h) {
        float v0 = acc[mi][ni][2 * h] + bv[mi][h],
              v1 = acc[mi][ni][2 * h + 1] + bv[mi][h];
        if (act != Activation::none) {
          v0 = activate(act, v0);
          v1 = activate(act, v1);
        }
        __half2 p2 = __floats2half2_rn(v0, v1);
        return *reinterpret_cast<unsigned *>(&p2);
      };
      const int i8 = lane & 7, j = lane >> 3; // row i8 of stored tile j
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        if constexpr (NT == 1) {
          stmatrixX2T(st + i8 * WS + mi * 16 + (j & 1) * 8, pack(mi, 0, 0),
                      pack(mi, 0, 1));
        } else {
#pragma unroll
          for (int ni = 0; ni < NT; ni += 2)
            stmatrixX4T(st + ((ni + (j >> 1)) * 8 + i8) * WS + mi * 16 +
                            (j & 1) * 8,
                        pack(mi, ni, 0), pack(mi, ni, 1), pack(mi, ni + 1, 0),
                        pack(mi, ni + 1, 1));
        }
      }
      __syncwarp();
      // A quarter-warp's 16-byte reads fall on distinct banks: at WM = 32
      // (rows of 64 bytes, 4 words of bank offset between rows) it reads
      // rows t and t + 4, at WM = 64 one whole row.
      constexpr int RPP = 32 / SEG; // rows a pass
      const int seg = lane % SEG;
      const int rowOf = SEG == 4 ? (lane >> 3) + 4 * ((lane >> 2) & 1) : lane / SEG;
      const int n = nw + seg * 8;
      if (n < N) {
#pragma unroll
        for (int t0 = 0; t0 < T; t0 += RPP) {
          const int t = t0 + rowOf, row = b * T + t;
          if (row < M)
            *reinterpret_cast<uint4 *>(y + size_t(row) * N + n) =
                *reinterpret_cast<const uint4 *>(st + t * WS + seg * 8);
        }
      }
    }
  };

  // Output block n0's epilogue once its chunks are computed. (The direct
  // one needs no wait: every chunk's copies were waited for before its
  // product.) `pending`: copies may still be in flight (the pipeline's),
  // so the block epilogue waits for them before writing over the stages.
  auto finish = [&](int n0, bool pending) {
    if (direct) {
      epilogueDirect(n0);
    } else {
      if (pending)
        cpAsyncWait<0>();
      __syncthreads();
      epilogue(n0);
    }
  };

  if constexpr (Sweep) {
    const int last = min(tiles, (N + BN - 1) / BN - tile0); // blocks to do
    // Each thread keeps the first chunks' row numbers it copies in shared
    // memory (it reads back only its own: no barrier), not in registers.
    int32_t *rows = reinterpret_cast<int32_t *>(xs + Stages * XStage);
    auto saved = [&](int s, int (&rowsOf)[RPT]) {
#pragma unroll
      for (int i = 0; i < RPT; ++i)
        rowsOf[i] = rows[s * kBK + r0 + i * RSTEP];
    };
#pragma unroll
    for (int s = 0; s < Pre; ++s) {
      mask(s);
#pragma unroll
      for (int i = 0; i < RPT; ++i)
        rows[s * kBK + r0 + i * RSTEP] = first[s][i];
    }
    if (chunks <= 2) {
      // The set fits the 2 stages: its x once, then each output block's
      // rows of W.
#pragma unroll
      for (int s = 0; s < 2; ++s)
        if (s < chunks) {
          loadW(s, tile0 * BN, first[s], false);
          loadX(s, s);
        }
      cpAsyncCommit();
      for (int g = 0; g < last; ++g) {
        const int n0 = (tile0 + g) * BN;
        cpAsyncWait<0>();
        ready();
        zero();
#pragma unroll
        for (int s = 0; s < 2; ++s)
          if (s < chunks)
            compute(s);
        finish(n0, false); // (the epilogue writes over the stages of W)
        if (g + 1 < last) {
          __syncthreads(); // ... and has read them
#pragma unroll
          for (int s = 0; s < 2; ++s)
            if (s < chunks) {
              int rowsOf[RPT];
              saved(s, rowsOf);
              loadW(s, n0 + BN, rowsOf, false);
            }
          cpAsyncCommit();
        }
      }
    } else {
      for (int g = 0; g < last; ++g) {
        const int n0 = (tile0 + g) * BN;
        zero();
#pragma unroll
        for (int s = 0; s < Pre; ++s)
          saved(s, first[s]);
        pipeline(n0);
        finish(n0, true);
        if (g + 1 < last)
          __syncthreads(); // the next prologue copies over ys
      }
    }
  } else {
    const int n0 = (Wg ? blockIdx.y : blockIdx.x) * BN;
    zero();
    if (Stages == 2 && chunks <= 2) {
      // The whole set fits the 2 stages (short sets: high micro-tile
      // sparsity): both chunks' copies at once and one wait, where the
      // pipeline would request the second only once the first had landed.
#pragma unroll
      for (int s = 0; s < Pre; ++s)
        if (s < chunks) {
          mask(s);
          loadW(s, n0, first[s], false);
          loadX(s, s);
        }
      cpAsyncCommit();
      cpAsyncWait<0>();
      ready();
#pragma unroll
      for (int s = 0; s < Pre; ++s)
        if (s < chunks)
          compute(s);
    } else {
      pipeline(n0);
    }
    finish(n0, true);
  }
}

template <int T, typename E, typename X>
cudaError_t launchSRead(const X *x, int64_t M, int64_t K, bool sorted,
                        const PitWorkspace &ws, cudaStream_t stream,
                        bool early) {
  E *xg = static_cast<E *>(ws.xg);
  const unsigned blocks = unsigned(pitBlocks(M, T));
  const int cap = int(pitCapacity(K));
  constexpr int V = kPerLoad<X>;
  // One 8-byte load a row for V columns where K and x allow it.
  const bool loads8 = K % V == 0 && (reinterpret_cast<uintptr_t>(x) & 7) == 0;
  if (sorted)
    return launchKernel(loads8 ? pitSReadScanKernel<E, X, T, V>
                               : pitSReadScanKernel<E, X, T, 1>,
                        dim3(blocks), dim3(kSReadThreads), 0, stream, early, x,
                        int(M), int(K), cap, ws.idx, ws.count, xg);
  // (After the memset the kernel launches normally: a programmatic launch
  // overlaps only a kernel before it.)
  cudaError_t e =
      cudaMemsetAsync(ws.count, 0, sizeof(int32_t) * blocks, stream);
  if (e != cudaSuccess)
    return e;
  if (loads8) {
    dim3 grid{unsigned((K + 256 * V - 1) / (256 * V)), blocks};
    pitSReadWideKernel<E, X, T, V><<<grid, 256, 0, stream>>>(
        x, int(M), int(K), cap, ws.idx, ws.count, xg);
  } else {
    dim3 grid{unsigned((K + 255) / 256), blocks};
    pitSReadWideKernel<E, X, T, 1><<<grid, 256, 0, stream>>>(
        x, int(M), int(K), cap, ws.idx, ws.count, xg);
  }
  return cudaGetLastError();
}

/// One pitMatmul call's operands, passed down the template dispatch (E:
/// W's and the gathered x's 16-bit type).
template <typename Y, typename E> struct MatmulCall {
  const PitWorkspace &ws;
  int64_t M, K;
  const E *w;
  int64_t N;
  const float *bias;
  Activation act;
  const float *residual;
  Y *y;
  cudaStream_t stream;
  bool early; // a programmatic dependent launch
  int tiles;  // output blocks a block (> 1: a sweep)
};

template <int T, int WM, typename Y, int Stages, bool Sweep = false,
          int Warps = 4, bool Wg = false, typename E>
cudaError_t launchMatmul(const MatmulCall<Y, E> &c) {
  constexpr size_t bytes = pitSmemBytes<T, WM, Stages, Sweep, Warps, Wg>();
  auto *kernel = pitMatmulKernel<T, WM, Y, Stages, Sweep, Warps, Wg, E>;
  static bool configured = false; // per instantiation
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    if (e != cudaSuccess)
      return e;
    configured = true;
  }
  const int64_t outBlocks = (c.N + Warps * WM - 1) / (Warps * WM);
  const int tiles = Sweep ? c.tiles : 1;
  dim3 grid{unsigned((outBlocks + tiles - 1) / tiles),
            unsigned(pitBlocks(c.M, T))};
  // Warpgroup MMAs: token blocks along x, so that the blocks in flight at
  // once (launched in x order first) cover all token blocks of a few output
  // blocks, whose slice of W the L2 holds for all of them, instead of a
  // few token blocks of every output block, whose rows together span all
  // of W. On an H100 at 4096^3 and 90 % micro-tile sparsity the L2 then
  // served 87 % of the matmul's reads instead of 69 %, and the model's down
  // projection (fp32 residual and output) took 107.0-107.3 us instead of
  // 116.6-116.8; SRead plus the matmul 89.5 instead of 95.2 with fp16
  // outputs, though the matmul repeated alone got 5 % slower (docs/GPU.md,
  // "Token blocks along x").
  if constexpr (Wg)
    grid = dim3(unsigned(pitBlocks(c.M, T)), unsigned(outBlocks));
  return launchKernel(kernel, grid, dim3(32 * Warps), bytes, c.stream, c.early,
                      static_cast<const E *>(c.ws.xg), c.ws.idx, c.ws.count,
                      int(c.M), int(pitCapacity(c.K)), c.w, int(c.N), c.bias,
                      c.act, c.residual, c.y, tiles);
}

template <int T, int WM, typename Y, typename E>
cudaError_t launchMatmulS(const MatmulCall<Y, E> &c, int stages) {
  // 32-token tiles at 128 columns and the default stages (sweep or not): 2
  // warps of 64 columns, 2 stages. With the set read by ordinary loads
  // (see pitMatmulKernel), on the H200 at 4096^3 10 % faster than 4 warps
  // of 32 at 90 % micro-tile sparsity, 6 % at 95 %, 3-4 % slower at 99 %
  // (docs/GPU.md, "Early launches and the read-only path", "The set
  // through L1").
  if constexpr (T == 32 && WM == 32) {
    static_assert(2 * 64 == kSweepColumns, "a sweep's block width");
    if (stages == 0)
      return c.tiles > 1 ? launchMatmul<T, 64, Y, 2, true, 2>(c)
                         : launchMatmul<T, 64, Y, 2, false, 2>(c);
  }
  if constexpr (WM == 32) {
    static_assert(4 * WM == kSweepColumns, "a sweep's block width");
    if (c.tiles > 1)
      return launchMatmul<T, WM, Y, 2, true>(c);
  }
  switch (stages) {
  case 2:
    return launchMatmul<T, WM, Y, 2>(c);
  case 3:
    return launchMatmul<T, WM, Y, 3>(c);
  case 4:
    return launchMatmul<T, WM, Y, 4>(c);
  }
  // The default at 128 columns: 2 stages for 8-token tiles (held to 64
  // registers, 8 blocks an SM; on the H200 as fast as 3 stages or faster
  // from 0 to 99 % micro-tile sparsity), 3 for 16-token tiles (3-5 % faster
  // there than 2); 4 stages at 256 columns (docs/GPU.md).
  if constexpr (WM == 32)
    return launchMatmul<T, WM, Y, T == 16 ? 3 : 2>(c);
  else
    return launchMatmul<T, WM, Y, 4>(c);
}

template <int T, typename Y, typename E>
cudaError_t launchMatmulT(const MatmulCall<Y, E> &c, int columns, int stages) {
  if (columns == 256)
    return launchMatmulS<T, 64>(c, stages);
  return launchMatmulS<T, 32>(c, stages);
}

// On by default: on the H200 the warpgroup-MMA form passes the kernel
// tests and the PIT model builds, and is 2-4 % faster than the mma.sync
// sweep from 90 to 99 % micro-tile sparsity (docs/GPU.md).
// SPARSEC_CUDA_PIT_MMA, read at the first query, may turn it off;
// setPitWarpgroupMma's choice (-1: none) overrides both.
int warpgroupMmaSet = -1;

} // namespace

void setPitWarpgroupMma(bool on) { warpgroupMmaSet = on; }

bool pitWarpgroupMmaAvailable() {
  // sm_90a code runs on compute capability 9.0 only (H100, H200); the
  // runtime's PTX (compute_90) has no warpgroup MMAs.
  static const bool hopper = [] {
    int device = 0, major = 0, minor = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    return major == 9 && minor == 0;
  }();
  return hopper;
}

bool pitWarpgroupMma() {
  static const bool fromEnvironment = [] {
    bool warpgroup = true;
    pitMmaFromEnvironment(warpgroup); // untouched where unset or unknown
    return warpgroup;
  }();
  const bool on = warpgroupMmaSet < 0 ? fromEnvironment : warpgroupMmaSet != 0;
  return on && pitWarpgroupMmaAvailable();
}

size_t pitIdxBytes(int64_t M, int64_t K, int tile) {
  return sizeof(int32_t) * size_t(pitBlocks(M, tile)) * size_t(pitCapacity(K));
}
size_t pitCountBytes(int64_t M, int tile) {
  return sizeof(int32_t) * size_t(pitBlocks(M, tile));
}
size_t pitGatherBytes(int64_t M, int64_t K, int tile) {
  return sizeof(__half) * size_t(pitBlocks(M, tile)) * size_t(pitCapacity(K)) *
         size_t(tile);
}

bool pitSupported(int64_t M, int64_t K, int64_t N, int tile, const void *w) {
  return pitTileSupported(tile) && M > 0 && K > 0 && N > 0 && N % 8 == 0 &&
         K <= (int64_t(1) << 30) && N <= (int64_t(1) << 30) &&
         pitBlocks(M, tile) <= 65535 &&
         (reinterpret_cast<uintptr_t>(w) & 15) == 0;
}

int pitSweepTiles(int64_t M, int64_t N, int tile, int multiprocessors) {
  // Measured on the H200 (docs/GPU.md, "Sweeps"): at 4096^3 the best sweep
  // leaves about one resident wave of 8 blocks an SM at 16- and 32-token
  // tiles; at 8-token tiles 2 beats 4 and 8 from 90 to 99 %.
  int tiles = tile == 16 ? 8 : tile == 32 ? 4 : 2;
  const int64_t outBlocks = (N + kSweepColumns - 1) / kSweepColumns,
                tokenBlocks = pitBlocks(M, tile);
  for (; tiles > 1; tiles /= 2)
    if ((outBlocks + tiles - 1) / tiles * tokenBlocks >=
        6 * int64_t(std::max(1, multiprocessors)))
      break;
  return tiles;
}

template <typename E, typename X>
cudaError_t pitSRead(const X *x, int64_t M, int64_t K, int tile, bool sorted,
                     const PitWorkspace &ws, cudaStream_t stream, bool early) {
  if (M <= 0 || K <= 0)
    return cudaSuccess;
  switch (tile) {
  case 8:
    return launchSRead<8, E>(x, M, K, sorted, ws, stream, early);
  case 16:
    return launchSRead<16, E>(x, M, K, sorted, ws, stream, early);
  case 32:
    return launchSRead<32, E>(x, M, K, sorted, ws, stream, early);
  }
  return cudaErrorInvalidValue;
}

template <typename Y, typename E>
cudaError_t pitMatmul(const PitWorkspace &ws, int64_t M, int64_t K, const E *w,
                      int64_t N, int tile, const float *bias, Activation act,
                      const float *residual, Y *y, cudaStream_t stream,
                      int columns, int stages, bool early, int sweep) {
  if (M <= 0 || N <= 0)
    return cudaSuccess;
  auto aligned = [](const void *p) {
    return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
  };
  if (!pitSupported(M, K, N, tile, w) || !aligned(y) || !aligned(residual) ||
      (columns && columns != 128 && columns != 256) ||
      (stages && (stages < 2 || stages > kStages)) || sweep < 0 ||
      (sweep > 1 &&
       ((columns && columns != kSweepColumns) || (stages && stages != 2))))
    return cudaErrorInvalidValue;
  // 128 columns by default. 256 halve the shared-memory fragment loads per
  // mma and win by up to 5 % on nearly dense inputs, but PIT runs where
  // most micro-tiles are empty (the cost model keeps denser calls on the
  // dense GEMM), and there 128 columns are 20-45 % faster on the H200
  // (measured at 3 stages): more blocks an SM for short gathered sets
  // (docs/GPU.md).
  // With warpgroup MMAs on, the default at 32-token tiles: 4 warps of 32
  // columns, 2 stages, no sweep (on the H200 at 4096^3 2.5-4 % faster than
  // the 2-warp sweep from 90 to 99 % micro-tile sparsity, level below:
  // docs/GPU.md, "The matmul on warpgroup MMAs"). 256 columns asked for
  // (stages and sweep 0) take two warpgroups a block, which copy the
  // gathered x once for both: on an H100 at 4096^3 4 / 2 % faster at 90 /
  // 95 % micro-tile sparsity, 8-10 % below, 6 % slower at 99 % (docs/GPU.md,
  // "Two warpgroups a block, on the new grid"), so not the default.
  // (Output blocks go along the grid's y, at most 65535 of them.)
  const bool wg = tile == 32 && sweep == 0 && stages == 0 &&
                  (N + 127) / 128 <= 65535 && pitWarpgroupMma();
  if (sweep == 0)
    sweep = stages == 0 && columns != 256 && !wg
                ? pitSweepTiles(M, N, tile, multiprocessorCount())
                : 1;
  if (!columns)
    columns = 128;
  const MatmulCall<Y, E> c{ws, M,      K,     w,
                           N,  bias,   act,   residual,
                           y,  stream, early, sweep > 1 ? sweep : 1};
  if (wg)
    return columns == 256 ? launchMatmul<32, 32, Y, 2, false, 8, true>(c)
                          : launchMatmul<32, 32, Y, 2, false, 4, true>(c);
  switch (tile) {
  case 8:
    return launchMatmulT<8>(c, columns, stages);
  case 16:
    return launchMatmulT<16>(c, columns, stages);
  case 32:
    return launchMatmulT<32>(c, columns, stages);
  }
  return cudaErrorInvalidValue;
}

#define SPARSEC_PIT_INSTANTIATE(E)                                             \
  template cudaError_t pitSRead<E, float>(const float *, int64_t, int64_t,     \
                                          int, bool, const PitWorkspace &,     \
                                          cudaStream_t, bool);                 \
  template cudaError_t pitSRead<E, __half>(const __half *, int64_t, int64_t,   \
                                           int, bool, const PitWorkspace &,    \
                                           cudaStream_t, bool);                \
  template cudaError_t pitMatmul<float, E>(                                    \
      const PitWorkspace &, int64_t, int64_t, const E *, int64_t, int,         \
      const float *, Activation, const float *, float *, cudaStream_t, int,    \
      int, bool, int);                                                         \
  template cudaError_t pitMatmul<__half, E>(                                   \
      const PitWorkspace &, int64_t, int64_t, const E *, int64_t, int,         \
      const float *, Activation, const float *, __half *, cudaStream_t, int,   \
      int, bool, int);
SPARSEC_PIT_INSTANTIATE(__half)
SPARSEC_PIT_INSTANTIATE(__nv_bfloat16)
#undef SPARSEC_PIT_INSTANTIATE

} // namespace sparsec::rt::cuda
