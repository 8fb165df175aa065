//===- SparseDecode.cu - neuron-granular sparse decode kernels ------------===//
//
// Part of the sparsec project.
//
// See sparsec/rt/cuda/SparseDecode.h. Both weight kernels read one weight
// row per selected neuron with 16-byte loads, coalesced across the warp
// (512 contiguous bytes per warp and row for fp16), several rows in flight
// per warp; the down projection splits the selected rows over a second grid
// dimension so that enough warps stream at once even when few neurons fire.
// Index sets are segmented: every kernel that reads one first scans its
// segment counts into shared memory (a few hundred ints), which costs less
// than a compaction pass and its launch.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/SparseDecode.h"

#include "DeviceMath.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>
#include <utility>

namespace sparsec::rt::cuda {

namespace {
constexpr int kWarps = 8; // warps per block
constexpr int kThreads = 32 * kWarps;

/// Loads VEC elements of a row starting at column c (bounds-checked at the
/// end of the row when the rows are not 16-byte multiples).
template <typename W, bool Aligned>
__device__ inline void loadRow(const W *row, int c, int d,
                               float (&out)[Vec<W>::N]) {
  constexpr int V = Vec<W>::N;
  if (Aligned && c + V <= d) {
    Vec<W>::load(row + c, out);
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v)
      out[v] = c + v < d ? Vec<W>::scalar(row + c + v) : 0.0f;
  }
}

/// acc[t][c] += a[u][t] * w[u][c] for every u, t, c (unrolled): U rows'
/// weights w, each scaled by its per-token value a.
template <int U, int T, int C>
__device__ __forceinline__ void addScaledRows(float (&acc)[T][C],
                                              const float (&a)[U][T],
                                              const float (&w)[U][C]) {
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int c = 0; c < C; ++c)
        acc[t][c] = fmaf(a[u][t], w[u][c], acc[t][c]);
}

/// Sums the kWarps warps' partial rows (acc[t][0..V) of each lane covers
/// columns lane * V + v of the block's tile) and adds them to out[t * ld +
/// base + c] for columns below `limit`: one atomic per column and token, or
/// on sm_90 and later one 16-byte atomic per four columns where `out`, `ld`
/// and `base` keep them aligned (a quarter of the atomic traffic).
/// Where column c (< 32 * V) of a warp's tile sits in its partial-sum row:
/// lane c / V's quad (c % V) / 4 goes to quad (c % V) / 4 * 32 + c / V, so
/// that the warp stores (and the block reads) whole 16-byte quads with
/// consecutive lanes at consecutive addresses (no bank conflicts; for V = 8
/// the plain layout put the lanes 32 bytes apart).
template <int V> __device__ __forceinline__ int partialSlot(int c) {
  return ((c % V) / 4 * 32 + c / V) * 4 + c % 4;
}

template <int T, int V>
__device__ void addWarpPartials(float (&partial)[kWarps][32 * V],
                                const float (&acc)[T][V], float *out,
                                int64_t ld, int base, int limit) {
  static_assert(V % 4 == 0, "partial sums are stored by quads");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const bool quads = reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                     ld % 4 == 0 && base % 4 == 0;
#else
  const bool quads = false;
#endif
#pragma unroll
  for (int t = 0; t < T; ++t) {
#pragma unroll
    for (int h = 0; h < V / 4; ++h)
      reinterpret_cast<float4 *>(partial[warp])[h * 32 + lane] =
          make_float4(acc[t][4 * h], acc[t][4 * h + 1], acc[t][4 * h + 2],
                      acc[t][4 * h + 3]);
    __syncthreads();
    float *row = out + int64_t(t) * ld + base;
    if (quads) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      for (int q = threadIdx.x; q < 8 * V; q += kThreads) {
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        // Thread q adds columns 4 q .. 4 q + 3 (a warp's atomics cover 512
        // contiguous bytes), stored at quad partialSlot<V>(4 q) / 4.
        const int c = 4 * q, slot = partialSlot<V>(c) / 4;
#pragma unroll
        for (int k = 0; k < kWarps; ++k) {
          const float4 p = reinterpret_cast<const float4 *>(partial[k])[slot];
          sum.x += p.x;
          sum.y += p.y;
          sum.z += p.z;
          sum.w += p.w;
        }
        if (base + c + 3 < limit) {
          atomicAdd(reinterpret_cast<float4 *>(row + c), sum);
        } else {
          const float part[4] = {sum.x, sum.y, sum.z, sum.w};
          for (int e = 0; e < 4 && base + c + e < limit; ++e)
            atomicAdd(row + c + e, part[e]);
        }
      }
#endif
    } else {
      for (int c = threadIdx.x; c < 32 * V; c += kThreads) {
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < kWarps; ++k)
          sum += partial[k][partialSlot<V>(c)];
        if (base + c < limit)
          atomicAdd(row + c, sum);
      }
    }
    __syncthreads();
  }
}

//===----------------------------------------------------------------------===//
// Segmented index sets
//===----------------------------------------------------------------------===//

static_assert(kSegment == 64, "a segment is the two warps' ballots");

/// Exclusive scan of one int per thread over the block (kThreads threads);
/// `total` gets the block's sum. `warpTotals` is kWarps ints of shared
/// memory, free again when this returns.
__device__ int blockExclusiveScan(int v, int *warpTotals, int &total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    int u = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o)
      inc += u;
  }
  if (lane == 31)
    warpTotals[warp] = inc;
  __syncthreads();
  int base = 0, sum = 0;
#pragma unroll
  for (int k = 0; k < kWarps; ++k) {
    int t = warpTotals[k];
    base += k < warp ? t : 0;
    sum += t;
  }
  __syncthreads();
  total = sum;
  return base + inc - v;
}

/// prefix[s] = cnt[0] + ... + cnt[s - 1] for s in [0, S] in shared memory
/// (S + 1 ints); returns prefix[S], the set's size. The whole block calls it.
__device__ int scanSegments(const int32_t *cnt, int S, int *prefix,
                            int *warpTotals) {
  const int per = (S + kThreads - 1) / kThreads;
  const int b = min(S, int(threadIdx.x) * per), e = min(S, b + per);
  int local = 0;
  for (int s = b; s < e; ++s)
    local += cnt[s];
  int total;
  int run = blockExclusiveScan(local, warpTotals, total);
  for (int s = b; s < e; ++s) {
    prefix[s] = run;
    run += cnt[s];
  }
  if (threadIdx.x == 0)
    prefix[S] = total;
  __syncthreads();
  return total;
}

/// The neuron at position i (< prefix[S]) of a segmented set: the last
/// segment whose prefix is <= i holds it (it is not empty).
__device__ int neuronAt(const int *prefix, int S, const int32_t *idx, int i) {
  int lo = 0, hi = S - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return idx[lo * kSegment + (i - prefix[lo])];
}

__device__ inline int segmentsOf(int neurons) {
  return (neurons + kSegment - 1) / kSegment;
}

/// Writes `in` with every thread of the grid, in two halves: begin()
/// requests the thread's first element's operands, end() stores it (and any
/// further elements), so a kernel can start those loads with its own and
/// store last without waiting for them in between.
struct InitWriter {
  int64_t k = -1;
  float value = 0.0f;
  __device__ static int64_t firstIndex() {
    return (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x +
           threadIdx.x;
  }
  __device__ static float valueAt(const RowsInit &in, int64_t k) {
    return (in.bias ? in.bias[k % in.n] : 0.0f) +
           (in.residual ? in.residual[k] : 0.0f);
  }
  __device__ void begin(const RowsInit &in) {
    k = firstIndex();
    if (in.y && k < int64_t(in.tokens) * in.n)
      value = valueAt(in, k);
  }
  __device__ void end(const RowsInit &in) const {
    if (!in.y)
      return;
    const int64_t total = int64_t(in.tokens) * in.n;
    const int64_t threads = int64_t(gridDim.x) * gridDim.y * blockDim.x;
    if (k < total)
      in.y[k] = value;
    for (int64_t i = k + threads; i < total; i += threads)
      in.y[i] = valueAt(in, i);
  }
};

__device__ void writeInit(const RowsInit &in) {
  InitWriter w;
  w.begin(in);
  w.end(in);
}

/// One ballot per half segment: warps 2k and 2k + 1 of a block make
/// segment blockIdx.x * kWarps / 2 + k from `on` of neuron j (their lane's).
__device__ void writeSegment(IndexView ix, int s, int j, bool on,
                             int *firstHalf) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned ballot = __ballot_sync(0xffffffffu, on);
  if (warp % 2 == 0 && lane == 0)
    firstHalf[warp / 2] = __popc(ballot);
  __syncthreads();
  if (s >= segmentsOf(ix.neurons))
    return;
  const int base = warp % 2 ? firstHalf[warp / 2] : 0;
  if (on)
    ix.idx[s * kSegment + base + __popc(ballot & ((1u << lane) - 1))] = j;
  if (warp % 2 == 1 && lane == 0)
    ix.cnt[s] = base + __popc(ballot);
}

/// The index set from flags (FromFlags) or from h [tokens, n]: the neurons
/// not 0 (or, `positive`, above 0) in any row, with each row's own
/// selection as bytes in `mask` [tokens, n] where given (a gated MLP's
/// gate); kWarps / 2 segments per block.
template <bool FromFlags>
__global__ void __launch_bounds__(kThreads)
    indexKernel(const float *h, const uint8_t *__restrict__ flags,
                int tokens, bool positive, uint8_t *mask, IndexView ix,
                RowsInit init) {
  pdlTrigger();
  pdlWait(); // early launches: h comes from the kernel before
  __shared__ int firstHalf[kWarps / 2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = ix.neurons;
  const int s = blockIdx.x * (kWarps / 2) + warp / 2;
  const int j = s * kSegment + (warp % 2) * 32 + lane;
  bool on = false;
  if (j < n) {
    if (FromFlags) {
      on = flags[j] != 0;
    } else {
      for (int t = 0; t < tokens; ++t) {
        const float v = h[int64_t(t) * n + j];
        const bool a = positive ? v > 0.0f : v != 0.0f;
        if (mask)
          mask[int64_t(t) * n + j] = a;
        on |= a;
      }
    }
  }
  // After h's loads are issued: the base's stores wait for its own loads.
  writeInit(init);
  writeSegment(ix, s, j, on, firstHalf);
}

//===----------------------------------------------------------------------===//
// Down projection: y[t, :] += sum_i h[t, idx[i]] * w[idx[i], :]
//===----------------------------------------------------------------------===//

/// The down projections' density counters (or null): += rows x tokens
/// computed and neurons x tokens a dense kernel would, once per launch (by
/// the first thread of block (0, 0)).
__device__ __forceinline__ void countDensity(unsigned long long *density,
                                             int rows, int neurons,
                                             int tokens) {
  if (density && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    atomicAdd(density, (unsigned long long)(int64_t(rows) * tokens));
    atomicAdd(density + 1, (unsigned long long)(int64_t(neurons) * tokens));
  }
}

/// Compact: the set is ix.list / ix.count, read straight from global
/// memory (the list has room for ix.neurons entries); otherwise the
/// segments, whose scan and the block's rows go to shared memory first.
/// Ready (Compact only; the set was complete at launch, IndexView::ready):
/// the list, the count and each warp's first rows are requested before the
/// wait, h after it.
template <typename W, int T, bool Aligned, bool Compact, bool Ready = false>
__global__ void __launch_bounds__(kThreads)
    sparseDownKernel(const float *h, int ldh,
                     const W *__restrict__ w, int d, IndexView ix, float *y,
                     unsigned long long *density) {
  static_assert(Compact || !Ready, "a ready set is read as a list");
  pdlTrigger();
  if constexpr (!Ready)
    pdlWait(); // early launches: the set and h come from the kernels before
  constexpr int V = Vec<W>::N;
  constexpr int Tile = 32 * V; // columns per block
  constexpr int Unroll = 4; // rows in flight per warp
  __shared__ __align__(16) float partial[kWarps][Tile];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = blockIdx.x * Tile + lane * V;
  float acc[T][V];
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int v = 0; v < V; ++v)
      acc[t][v] = 0.0f;
  // Adds Unroll rows j[u] (those with ok[u]) to acc: every row's weights
  // and h values requested before the first FMA.
  auto addRows = [&](const int (&j)[Unroll], const bool (&ok)[Unroll]) {
    float wv[Unroll][V], a[Unroll][T];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      if (ok[u]) {
        loadRow<W, Aligned>(w + int64_t(j[u]) * d, col, d, wv[u]);
#pragma unroll
        for (int t = 0; t < T; ++t)
          a[u][t] = h[int64_t(t) * ldh + j[u]];
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v)
          wv[u][v] = 0.0f;
#pragma unroll
        for (int t = 0; t < T; ++t)
          a[u][t] = 0.0f;
      }
    }
    addScaledRows(acc, a, wv);
  };
  int n;
  if (Compact) {
    // Warp g of the G warps sharing this column tile takes the list's
    // entries g, g + G, ...; its first Unroll entries are read together
    // with the count (the list has room for ix.neurons entries, the ones
    // past the count are never used), so the weight rows are one memory
    // round trip after the kernel starts instead of two.
    const int G = gridDim.y * kWarps, g = blockIdx.y * kWarps + warp;
    int j[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u)
      j[u] = g + u * G < ix.neurons ? ix.list[g + u * G] : 0;
    n = *ix.count;
    if constexpr (Ready) {
      // The first group's weights before the wait, h after it.
      bool ok[Unroll];
#pragma unroll
      for (int u = 0; u < Unroll; ++u)
        ok[u] = g + u * G < n;
      float wv[Unroll][V], a[Unroll][T];
#pragma unroll
      for (int u = 0; u < Unroll; ++u) {
        if (ok[u]) {
          loadRow<W, Aligned>(w + int64_t(j[u]) * d, col, d, wv[u]);
        } else {
#pragma unroll
          for (int v = 0; v < V; ++v)
            wv[u][v] = 0.0f;
        }
      }
      pdlWait(); // h comes from the kernel before
      if (g < n) {
        int next[Unroll];
#pragma unroll
        for (int u = 0; u < Unroll; ++u) {
          const int k = g + (Unroll + u) * G;
          next[u] = k < n ? ix.list[k] : 0;
#pragma unroll
          for (int t = 0; t < T; ++t)
            a[u][t] = ok[u] ? h[int64_t(t) * ldh + j[u]] : 0.0f;
        }
        addScaledRows(acc, a, wv);
#pragma unroll
        for (int u = 0; u < Unroll; ++u)
          j[u] = next[u];
      }
    }
    for (int i = Ready ? g + Unroll * G : g; i < n; i += Unroll * G) {
      bool ok[Unroll];
      int next[Unroll];
#pragma unroll
      for (int u = 0; u < Unroll; ++u) {
        ok[u] = i + u * G < n;
        const int k = i + (Unroll + u) * G;
        next[u] = k < n ? ix.list[k] : 0;
      }
      addRows(j, ok);
#pragma unroll
      for (int u = 0; u < Unroll; ++u)
        j[u] = next[u];
    }
  } else {
    __shared__ int warpTotals[kWarps];
    extern __shared__ int downShared[]; // prefix [S + 1], the block's rows
    const int S = segmentsOf(ix.neurons);
    int *prefix = downShared;
    n = scanSegments(ix.cnt, S, prefix, warpTotals);
    const int r0 = int(int64_t(n) * blockIdx.y / gridDim.y);
    const int r1 = int(int64_t(n) * (blockIdx.y + 1) / gridDim.y);
    // rows[i - r0] is the block's i-th selected neuron.
    int *rows = downShared + S + 1;
    for (int k = r0 + threadIdx.x; k < r1; k += kThreads)
      rows[k - r0] = neuronAt(prefix, S, ix.idx, k);
    __syncthreads();
    for (int i = r0 + warp; i < r1; i += Unroll * kWarps) {
      int j[Unroll];
      bool ok[Unroll];
#pragma unroll
      for (int u = 0; u < Unroll; ++u) {
        ok[u] = i + u * kWarps < r1;
        j[u] = ok[u] ? rows[i + u * kWarps - r0] : 0;
      }
      addRows(j, ok);
    }
  }
  countDensity(density, n, ix.neurons, T);
  // A block with no rows has nothing to add (every warp of it knows: the
  // block's first warp has the lowest row).
  const bool empty = Compact ? blockIdx.y * kWarps >= n
                             : int64_t(n) * (blockIdx.y + 1) / gridDim.y ==
                                   int64_t(n) * blockIdx.y / gridDim.y;
  if (empty)
    return;
  addWarpPartials<T, V>(partial, acc, y, d, blockIdx.x * Tile, d);
}

/// The listed down projection of 3-8 tokens with 16-bit rows (E: fp16 or
/// bf16) on tensor cores:
/// y[t, c] += sum over the list's rows j of h[t, j] w[j, c]. A block of
/// kDownMmaWarps warps owns kDownMmaCols output columns and a contiguous
/// share of the list (blockIdx.y of gridDim.y); it stages kDownBK rows of w
/// (those columns) and their h values [row][token] into shared memory with
/// cp.async, kDownStages chunks in flight, and multiplies with the output
/// columns as the MMA's M (ldmatrix.trans of the staged rows) and the
/// tokens as its N; h goes in as parts of E (splitParts), so the sum keeps
/// about 22 bits of h with fp16 (as the CUDA-core kernel's fp32), 24 with
/// bf16. Rows past the share and tokens past M are zero-filled. The block's [M,
/// columns] partial sums go to y with one float4 atomic per quad, as
/// sparseDownKernel's do. A chunk's row numbers are read one chunk ahead.
constexpr int kDownMmaWarps = 4;
constexpr int kDownMmaCols = 32 * kDownMmaWarps; // each warp 32 columns
constexpr int kDownBK = 32;                      // rows a chunk
constexpr int kDownStages = 3;
constexpr int kDownWS = kDownMmaCols + 8; // halfs a staged row (ldmatrix rows apart)
constexpr int kDownHS = 12;               // floats a staged h row (conflict-free reads)

template <typename E>
__global__ void __launch_bounds__(kDownMmaWarps * 32)
    sparseDownMmaKernel(const float *__restrict__ h, int M, int ldh,
                        const E *__restrict__ w, int d, IndexView ix, float *y,
                        unsigned long long *density) {
  pdlTrigger();
  pdlWait(); // early launches: the list and h come from the kernels before
  constexpr int kThreadsD = kDownMmaWarps * 32;
  constexpr int SEGS = kDownMmaCols / 8;            // 16-byte pieces a row
  constexpr int WROWS = kDownBK * SEGS / kThreadsD; // w rows a thread copies
  constexpr int WSTEP = kThreadsD / SEGS;
  constexpr int HROWS = kDownBK * 8 / kThreadsD;    // h rows a thread copies
  constexpr int HSTEP = kThreadsD / 8;
  static_assert(kDownBK * SEGS % kThreadsD == 0 && kDownBK * 8 % kThreadsD == 0,
                "whole rows per thread");
  __shared__ __align__(16) E ws[kDownStages][kDownBK][kDownWS];
  __shared__ __align__(16) float hs[kDownStages][kDownBK][kDownHS];
  static_assert(kMaxTokens == 8, "the tokens are the MMA's n8");
  __shared__ __align__(16) float ys[kMaxTokens][kDownMmaCols + 4];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int c0 = blockIdx.x * kDownMmaCols;
  const int n = *ix.count;
  countDensity(density, n, ix.neurons, M);
  const int r0 = int(int64_t(n) * blockIdx.y / gridDim.y);
  const int r1 = int(int64_t(n) * (blockIdx.y + 1) / gridDim.y);
  if (r0 == r1)
    return; // no rows: nothing to add
  const int chunks = (r1 - r0 + kDownBK - 1) / kDownBK;

  // Row numbers of chunk c for this thread's w copies and h copies.
  const int wq = tid % SEGS, wr = tid / SEGS;   // w: piece wq of rows wr + i WSTEP
  const int ht = tid % 8, hr = tid / 8;         // h: token ht of rows hr + i HSTEP
  auto fetch = [&](int c, int (&jw)[WROWS], int (&jh)[HROWS]) {
#pragma unroll
    for (int i = 0; i < WROWS; ++i) {
      const int k = r0 + c * kDownBK + wr + i * WSTEP;
      jw[i] = k < r1 ? ix.list[k] : -1;
    }
#pragma unroll
    for (int i = 0; i < HROWS; ++i) {
      const int k = r0 + c * kDownBK + hr + i * HSTEP;
      jh[i] = k < r1 ? ix.list[k] : -1;
    }
  };
  auto load = [&](int stage, const int (&jw)[WROWS], const int (&jh)[HROWS]) {
    const int col = c0 + wq * 8;
#pragma unroll
    for (int i = 0; i < WROWS; ++i) {
      const bool ok = jw[i] >= 0 && col < d;
      cpAsync16L1(&ws[stage][wr + i * WSTEP][wq * 8],
                  ok ? w + int64_t(jw[i]) * d + col : w, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < HROWS; ++i) {
      const bool ok = jh[i] >= 0 && ht < M;
      cpAsync4(&hs[stage][hr + i * HSTEP][ht],
               ok ? h + int64_t(ht) * ldh + jh[i] : h, ok ? 4 : 0);
    }
  };

  float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  int jw[WROWS], jh[HROWS];
  fetch(0, jw, jh);
#pragma unroll
  for (int s = 0; s < kDownStages - 1; ++s) {
    if (s < chunks) {
      load(s, jw, jh);
      if (s + 1 < chunks)
        fetch(s + 1, jw, jh);
    }
    cpAsyncCommit();
  }
  for (int c = 0; c < chunks; ++c) {
    cpAsyncWait<kDownStages - 2>();
    __syncthreads();
    const int next = c + kDownStages - 1;
    if (next < chunks) {
      load(next % kDownStages, jw, jh);
      if (next + 1 < chunks)
        fetch(next + 1, jw, jh);
    }
    cpAsyncCommit();
    const int st = c % kDownStages;
#pragma unroll
    for (int kk = 0; kk < kDownBK; kk += 16) {
      unsigned a[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        ldmatrixX4T(a[mi], &ws[st][kk + (lane & 7) + ((lane >> 4) << 3)]
                              [warp * 32 + mi * 16 + ((lane >> 3) & 1) * 8]);
      // B [k][token]: token g, rows kk + 2q, + 1 (b0) and + 8, + 9 (b1).
      constexpr int P = kSplitParts<E>;
      unsigned b0[P], b1[P];
      splitParts<E>(hs[st][kk + 2 * q][g], hs[st][kk + 2 * q + 1][g], b0);
      splitParts<E>(hs[st][kk + 2 * q + 8][g], hs[st][kk + 2 * q + 9][g], b1);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int i = 0; i < P; ++i)
          mma16816<E>(acc[mi], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b0[i],
                      b1[i]);
    }
  }
  cpAsyncWait<0>();

  // acc[mi][r]: column warp * 32 + mi * 16 + g (+ 8 for r >= 2), token
  // 2q + (r & 1). Through ys [token][column] to float4 atomics.
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      ys[2 * q + (r & 1)][warp * 32 + mi * 16 + g + (r >= 2 ? 8 : 0)] = acc[mi][r];
  __syncthreads();
  for (int p = tid; p < M * (kDownMmaCols / 4); p += kThreadsD) {
    const int t = p / (kDownMmaCols / 4), c = (p % (kDownMmaCols / 4)) * 4;
    if (c0 + c >= d)
      continue;
    const float4 v = *reinterpret_cast<const float4 *>(&ys[t][c]);
    float *dst = y + int64_t(t) * d + c0 + c;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4 *>(dst), v);
#else
    atomicAdd(dst, v.x);
    atomicAdd(dst + 1, v.y);
    atomicAdd(dst + 2, v.z);
    atomicAdd(dst + 3, v.w);
#endif
  }
}

//===----------------------------------------------------------------------===//
// Up projection: h[t, j] = act(x[t, :] . wt[j, :] + b[j]) for j in idx
//===----------------------------------------------------------------------===//

/// The layout of the up kernel's x stage for fp16 rows (d a multiple of
/// 256): lane l of a warp reads columns 8 l .. 8 l + 7 of each group of
/// 256, as two 16-byte quads, so the stage keeps every lane's first quad of
/// a group together, then the second ones (partialSlot's order): the
/// warp's reads are consecutive. Staged quad s holds x's quad stageSource(s)
/// (the block loads x in that order and stores it contiguously).
__device__ __forceinline__ int stageSource(int s) {
  const int w = s % 64;
  return s - w + (w < 32 ? 2 * w : 2 * (w - 32) + 1);
}

/// Floats of the up kernel's x stage (a multiple of 4, so that the prefix
/// after it stays aligned).
__host__ __device__ inline int stagedFloats(int tokens, int d) {
  return (tokens * d + 3) / 4 * 4;
}

/// 16-byte loads in flight a lane when a warp reads a row of the up
/// projection (4 KB a warp at fp16).
constexpr int kUpUnroll = 16;

/// The lane's quads of x within a group of 32 V staged columns: 2 lane,
/// 2 lane + 1 in the plain layout (fp16), lane, 32 + lane in the permuted
/// one (stageSource); lane for fp32.
template <typename W> struct XLanes {
  static constexpr int V = Vec<W>::N;
  int offset[V / 4];
  __device__ XLanes(bool permuted, int lane) {
#pragma unroll
    for (int k = 0; k < V / 4; ++k)
      offset[k] = permuted ? k * 32 + lane : lane * (V / 4) + k;
  }
};

/// Whether x is staged in the lanes' order (fp16 rows, d a multiple of 256).
template <typename W, bool Aligned> __device__ inline bool stagePermuted(int d) {
  return Vec<W>::N == 8 && Aligned && d % (32 * Vec<W>::N) == 0;
}

/// The block stages x [T][d] into xs (16-byte loads, all in flight before
/// the first store; in the lanes' order where `permuted`). No barrier.
/// x comes from the kernel before, which an early launch overlaps: ordinary
/// loads (__ldca), never the read-only path (see pdlWait).
template <bool Aligned, int T>
__device__ void stageX(const float *__restrict__ x, int d, float *xs,
                       bool permuted) {
  if (Aligned && (T * d) % 4 == 0) {
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float4 *xs4 = reinterpret_cast<float4 *>(xs);
    const int n4 = T * d / 4;
    for (int k0 = threadIdx.x; k0 < n4; k0 += 4 * blockDim.x) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int q = k0 + u * blockDim.x;
        if (q < n4)
          v[u] = __ldca(x4 + (permuted ? stageSource(q) : q));
      }
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (k0 + u * blockDim.x < n4)
          xs4[k0 + u * blockDim.x] = v[u];
    }
  } else {
    for (int k = threadIdx.x; k < T * d; k += blockDim.x)
      xs[k] = __ldca(x + k);
  }
}

/// Raw 16-byte words of the chunk of a row at column c0 (the lane's first
/// column; the aligned part).
template <typename W, bool Aligned>
__device__ __forceinline__ void loadRowChunk(const W *row, int c0, int d,
                                             uint4 (&raw)[kUpUnroll]) {
  constexpr int V = Vec<W>::N;
#pragma unroll
  for (int u = 0; u < kUpUnroll; ++u) {
    int c = c0 + u * 32 * V;
    if (Aligned && c + V <= d)
      raw[u] = __ldg(reinterpret_cast<const uint4 *>(row + c));
  }
}

/// sum[t] = x[t] . row over the warp (every lane gets it); `raw` holds the
/// row's first chunk (loadRowChunk at lane * V), the rest is loaded here.
template <typename W, int T, bool Aligned>
__device__ void rowDotX(const W *row, int d, const float *xs,
                        const XLanes<W> &lanes, uint4 (&raw)[kUpUnroll],
                        float (&sum)[T]) {
  constexpr int V = Vec<W>::N;
  constexpr int Chunk = kUpUnroll * 32 * V; // columns per warp step
  const int lane = threadIdx.x % 32;
  // A accumulators a token: for one or two tokens the row's 128 products
  // a lane would otherwise add in one dependent chain.
  constexpr int A = T <= 2 ? 4 : 1;
  float acc[T][A];
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int a = 0; a < A; ++a)
      acc[t][a] = 0.0f;
  for (int c0 = lane * V; c0 < d; c0 += Chunk) {
    if (c0 != lane * V)
      loadRowChunk<W, Aligned>(row, c0, d, raw);
    // x's quads of the chunk's first group of 32 V columns (d % 4 == 0
    // on the aligned path, so a token's row starts on a quad).
    const float4 *xGroup = reinterpret_cast<const float4 *>(xs) + (c0 - lane * V) / 4;
#pragma unroll
    for (int u = 0; u < kUpUnroll; ++u) {
      int c = c0 + u * 32 * V;
      float wv[V];
      if (Aligned && c + V <= d) {
        Vec<W>::convert(raw[u], wv);
#pragma unroll
        for (int t = 0; t < T; ++t)
#pragma unroll
          for (int v = 0; v < V; v += 4) {
            // Quad v / 4 of the lane's columns in this 32 V group.
            const float4 xv = xGroup[t * (d / 4) + u * 8 * V + lanes.offset[v / 4]];
            acc[t][0] = fmaf(xv.x, wv[v], acc[t][0]);
            acc[t][1 % A] = fmaf(xv.y, wv[v + 1], acc[t][1 % A]);
            acc[t][2 % A] = fmaf(xv.z, wv[v + 2], acc[t][2 % A]);
            acc[t][3 % A] = fmaf(xv.w, wv[v + 3], acc[t][3 % A]);
          }
      } else if (c < d) {
        loadRow<W, false>(row, c, d, wv);
#pragma unroll
        for (int t = 0; t < T; ++t)
#pragma unroll
          for (int v = 0; v < V; ++v)
            if (c + v < d)
              acc[t][0] = fmaf(xs[t * d + c + v], wv[v], acc[t][0]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < T; ++t) {
    float own = acc[t][0];
#pragma unroll
    for (int a = 1; a < A; ++a)
      own += acc[t][a];
    sum[t] = warpSum(own);
  }
}

/// Listed: the set is ix.list / ix.count (no scan; the list has room for
/// ix.neurons entries); otherwise the segments. Each warp requests its
/// first row's weights (and with Listed, reads its list entry together with
/// the count) before the block stages x, so the weights and x arrive in the
/// same memory round trip; the base for the down projection (`init`) is
/// requested first and stored last.
template <typename W, int T, bool Aligned, bool Listed>
__global__ void __launch_bounds__(kThreads)
    sparseUpKernel(const float *__restrict__ x, const W *__restrict__ wt,
                   int d, const float *__restrict__ bias, IndexView ix,
                   bool relu, float *h, int ldh, RowsInit init, int32_t *list,
                   int32_t *count, const uint8_t *tokenMask) {
  pdlTrigger();
  pdlWait(); // early launches: x, the set and the residual come from before
  constexpr int V = Vec<W>::N;
  extern __shared__ float4 upShared[]; // x [T][d], then the prefix [S + 1]
  __shared__ int warpTotals[kWarps];
  float *xs = reinterpret_cast<float *>(upShared);
  const int S = segmentsOf(ix.neurons);
  int *prefix = reinterpret_cast<int *>(xs + stagedFloats(T, d));
  const int lane = threadIdx.x % 32;
  // Rows go round the blocks first (row i: block i % grid, warp i / grid),
  // so that every SM streams about the same number of rows.
  int i = blockIdx.x + gridDim.x * (threadIdx.x / 32); // the warp's first row
  InitWriter base;
  base.begin(init);
  int n, j = 0;
  // fp16 rows: x sits in shared memory in the order the lanes read it
  // (stageSource), so that a warp's 16-byte reads are consecutive.
  const bool permuted = stagePermuted<W, Aligned>(d);
  const XLanes<W> lanes(permuted, lane);
  if (Listed) {
    const int first = i < ix.neurons ? ix.list[i] : 0;
    n = *ix.count;
    j = first;
  } else {
    n = scanSegments(ix.cnt, S, prefix, warpTotals);
    if (i < n)
      j = neuronAt(prefix, S, ix.idx, i);
  }
  if (count && blockIdx.x == 0 && threadIdx.x == 0)
    *count = n;
  if (n <= int(blockIdx.x)) {
    base.end(init);
    return; // no selected neuron for this block
  }
  uint4 raw[kUpUnroll];
  float b = 0.0f;
  if (i < n) {
    loadRowChunk<W, Aligned>(wt + int64_t(j) * d, lane * V, d, raw);
    b = bias ? bias[j] : 0.0f;
  }
  stageX<Aligned, T>(x, d, xs, permuted);
  __syncthreads();
  for (bool firstRow = true; i < n; i += gridDim.x * kWarps, firstRow = false) {
    if (!firstRow) {
      j = Listed ? ix.list[i] : neuronAt(prefix, S, ix.idx, i);
      loadRowChunk<W, Aligned>(wt + int64_t(j) * d, lane * V, d, raw);
      b = bias ? bias[j] : 0.0f;
    }
    if (list && lane == 0)
      list[i] = j;
    float sum[T];
    rowDotX<W, T, Aligned>(wt + int64_t(j) * d, d, xs, lanes, raw, sum);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (lane == 0) {
        const float v = sum[t] + b;
        const bool kept = !tokenMask || tokenMask[int64_t(t) * ix.neurons + j];
        h[int64_t(t) * ldh + j] = !kept ? 0.0f : relu ? fmaxf(v, 0.0f) : v;
      }
    }
  }
  base.end(init);
}

/// Rows a block of sparseUpSplitKernel has in flight at once.
constexpr int kUpSplitRows = 4;
/// Rows a block of selectUpSplitKernel has in flight at once (a segment
/// selects 6-7 of its 64 neurons at 90 % sparsity).
constexpr int kSelectSplitRows = 8;

/// The split layout of a row of d = 2048 U fp16 columns over a block: warp
/// w, lane l takes the 16-byte words at columns (w U + u) 256 + 8 l, u < U,
/// so each warp's loads are whole 512-byte runs. splitX loads x's matching
/// slice (8 U floats a token) into the lane's registers (__ldca: x comes
/// from the kernel before, see stageX).
template <int T, int U>
__device__ __forceinline__ void splitX(const float *__restrict__ x,
                                       float4 (&xv)[T][U][2]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float4 *q = reinterpret_cast<const float4 *>(
          x + int64_t(t) * 2048 * U + (warp * U + u) * 256 + 8 * lane);
      xv[t][u][0] = __ldca(q);
      xv[t][u][1] = __ldca(q + 1);
    }
}

/// Requests the warp's words of rows rows[0, valid) (at most R) in the
/// split layout, all at once.
template <typename W, int U, int R>
__device__ __forceinline__ void splitLoad(const W *__restrict__ wt,
                                          const int (&rows)[R], int valid,
                                          uint4 (&raw)[R][U]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r < valid) {
      const W *row =
          wt + int64_t(rows[r]) * (2048 * U) + warp * U * 256 + 8 * lane;
#pragma unroll
      for (int u = 0; u < U; ++u)
        raw[r][u] = __ldg(reinterpret_cast<const uint4 *>(row + u * 256));
    }
}

/// The warp's partial sums of the rows splitLoad requested against x's
/// slice: partial[r T + t][warp] = the warp's share of row r's product with
/// token t (two accumulators a lane, then the warp's sum). No barrier.
template <typename W, int T, int U, int R>
__device__ __forceinline__ void splitDot(const uint4 (&raw)[R][U], int valid,
                                         const float4 (&xv)[T][U][2],
                                         float (*partial)[kWarps]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float acc[T][2];
#pragma unroll
    for (int t = 0; t < T; ++t)
      acc[t][0] = acc[t][1] = 0.0f;
    if (r < valid) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float wv[8];
        Vec<W>::convert(raw[r][u], wv);
#pragma unroll
        for (int t = 0; t < T; ++t) {
          const float4 a = xv[t][u][0], b = xv[t][u][1];
          acc[t][0] = fmaf(a.x, wv[0], acc[t][0]);
          acc[t][1] = fmaf(a.y, wv[1], acc[t][1]);
          acc[t][0] = fmaf(a.z, wv[2], acc[t][0]);
          acc[t][1] = fmaf(a.w, wv[3], acc[t][1]);
          acc[t][0] = fmaf(b.x, wv[4], acc[t][0]);
          acc[t][1] = fmaf(b.y, wv[5], acc[t][1]);
          acc[t][0] = fmaf(b.z, wv[6], acc[t][0]);
          acc[t][1] = fmaf(b.w, wv[7], acc[t][1]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float sum = warpSum(acc[t][0] + acc[t][1]);
      if (lane == 0)
        partial[r * T + t][warp] = sum;
    }
  }
}

/// splitLoad then splitDot.
template <typename W, int T, int U, int R>
__device__ __forceinline__ void
splitRows(const W *__restrict__ wt, const int (&rows)[R], int valid,
          const float4 (&xv)[T][U][2], float (*partial)[kWarps]) {
  uint4 raw[R][U];
  splitLoad<W, U, R>(wt, rows, valid, raw);
  splitDot<W, T, U, R>(raw, valid, xv, partial);
}

/// Row r's product with token t from the warps' partial sums (in warp
/// order), its bias added.
__device__ __forceinline__ float splitSum(const float *partial, float bias) {
  float v = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w)
    v += partial[w];
  return v + bias;
}

/// The listed up projection of T = 1-2 tokens over fp16 rows of d = 2048 U
/// columns, each row shared by the block's warps (splitRows), x's slice in
/// registers for every row the block takes. A block takes rows blockIdx.x
/// + k grid, kUpSplitRows at a time: their list entries, then all their
/// words in one round trip (with the next rows' entries); the warps'
/// partial sums meet in shared memory (double buffered: one barrier a
/// group) and thread (r, t) writes h as sparseUpKernel does (bias, ReLU,
/// token mask, `list`, `count`, the down projection's base). Against
/// sparseUpKernel at one token: no block stages all of x in shared memory
/// before its rows, and a few rows spread over all SMs' warps. Ready (the
/// set was complete at launch, IndexView::ready): the list, the count and
/// the first group's words are requested before the wait, so an early
/// launch has its rows in flight while the kernel before it runs.
template <typename W, int T, int U, bool Ready>
__global__ void __launch_bounds__(kThreads)
    sparseUpSplitKernel(const float *__restrict__ x, const W *__restrict__ wt,
                        const float *__restrict__ bias, IndexView ix, bool relu,
                        float *h, int ldh, RowsInit init, int32_t *list,
                        int32_t *count, const uint8_t *tokenMask) {
  pdlTrigger();
  if constexpr (!Ready)
    pdlWait(); // early launches: x, the list and the residual come from before
  constexpr int R = kUpSplitRows;
  __shared__ float partial[2][R * T][kWarps];
  const int grid = gridDim.x;
  InitWriter base;
  if constexpr (!Ready)
    base.begin(init);
  // The first group's entries, read with the count (the list has room for
  // ix.neurons entries).
  int j[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = blockIdx.x + r * grid;
    j[r] = i < ix.neurons ? ix.list[i] : 0;
  }
  const int n = *ix.count;
  uint4 first[R][U]; // Ready: the first group's words
  if constexpr (Ready) {
    if (n > int(blockIdx.x))
      splitLoad<W, U, R>(wt, j, min(R, (n - int(blockIdx.x) + grid - 1) / grid),
                         first);
    pdlWait(); // x and the residual come from before
    base.begin(init);
  }
  if (count && blockIdx.x == 0 && threadIdx.x == 0)
    *count = n;
  if (n <= int(blockIdx.x)) {
    base.end(init);
    return; // no selected neuron for this block
  }
  float4 xv[T][U][2];
  splitX<T, U>(x, xv);
  int buf = 0;
  for (int i0 = blockIdx.x; i0 < n; i0 += R * grid, buf ^= 1) {
    // Rows i0 + r grid, r < valid.
    const int valid = min(R, (n - i0 + grid - 1) / grid);
    int next[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = i0 + (R + r) * grid;
      next[r] = i < n ? ix.list[i] : 0;
    }
    if (Ready && i0 == int(blockIdx.x))
      splitDot<W, T, U, R>(first, valid, xv, partial[buf]);
    else
      splitRows<W, T, U, R>(wt, j, valid, xv, partial[buf]);
    __syncthreads();
    if (threadIdx.x < valid * T) {
      const int r = threadIdx.x / T, t = threadIdx.x % T;
      int jr = 0;
#pragma unroll
      for (int k = 0; k < R; ++k)
        if (k == r)
          jr = j[k];
      const float v = splitSum(partial[buf][threadIdx.x], bias ? bias[jr] : 0.0f);
      const bool kept = !tokenMask || tokenMask[int64_t(t) * ix.neurons + jr];
      h[int64_t(t) * ldh + jr] = !kept ? 0.0f : relu ? fmaxf(v, 0.0f) : v;
      if (list && t == 0)
        list[i0 + r * grid] = jr;
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
      j[r] = next[r];
  }
  base.end(init);
}

/// Listed up projection of 3-8 tokens with 16-bit weights (E: fp16 or
/// bf16) on tensor cores:
/// the listed rows go 16 at a time to the blocks (group r of the list: block
/// r % grid), mmaRows16 computes their products with every token's x (each
/// x chunk read once for 16 rows; sparseUpKernel reads x from shared memory
/// once per row and token, which bounds it by shared-memory bandwidth at 8
/// tokens), and the first warp writes h[t, j] as sparseUpKernel does (bias,
/// ReLU, the token's own mask row, `list` where asked). The base for the
/// down projection as in sparseUpKernel.
template <typename E>
__global__ void __launch_bounds__(kMmaWarps * 32)
    sparseUpMmaKernel(const float *__restrict__ x, int M,
                      const E *__restrict__ wt, int d,
                      const float *__restrict__ bias, IndexView ix, bool relu,
                      float *h, int ldh, RowsInit init, int32_t *list,
                      int32_t *count, const uint8_t *tokenMask) {
  pdlTrigger();
  pdlWait(); // early launches: x, the list and the residual come from before
  __shared__ float red[kMmaWarps][4][32];
  InitWriter base;
  base.begin(init);
  const int n = *ix.count;
  if (count && blockIdx.x == 0 && threadIdx.x == 0)
    *count = n;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  for (int r0 = blockIdx.x * kMmaRows; r0 < n; r0 += gridDim.x * kMmaRows) {
    const int iA = r0 + g, iB = r0 + g + 8;
    const int jA = ix.list[min(iA, n - 1)], jB = ix.list[min(iB, n - 1)];
    mmaRows16<true>(wt + int64_t(jA) * d, wt + int64_t(jB) * d, x, M, d, red);
    if (threadIdx.x < 32) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < kMmaWarps; ++w)
          v += red[w][k][lane];
        const int i = k >= 2 ? iB : iA, j = k >= 2 ? jB : jA;
        const int t = 2 * q + (k & 1);
        if (i < n && t < M) {
          const float s = v + (bias ? bias[j] : 0.0f);
          const bool kept = !tokenMask || tokenMask[int64_t(t) * ix.neurons + j];
          h[int64_t(t) * ldh + j] = !kept ? 0.0f : relu ? fmaxf(s, 0.0f) : s;
        }
        if (list && q == 0 && (k == 0 || k == 2) && i < n)
          list[i] = j;
      }
    }
    __syncthreads(); // red is reused by the next group
  }
  base.end(init);
}

//===----------------------------------------------------------------------===//
// Predictor: hidden = x . w1 (partial sums per block of rows), then the
// logits hidden . w2 + bias, the threshold and the segments.
//===----------------------------------------------------------------------===//

/// The hidden-vector kernel's grid: `tiles` column tiles of w1 (one when
/// the rank fits a warp's 16-byte loads, then a block reads whole rows as
/// one contiguous chunk) by `blocks` blocks of rows.
struct PredictGrid {
  int tiles = 1, tileCols = 0, blocks = 1, rows = 0;
  bool linear = true; // whole rows per load (r divides 32 * V)
};

template <typename W> PredictGrid predictGrid(int d, int r) {
  constexpr int V = Vec<W>::N;
  PredictGrid g;
  g.linear = r % V == 0 && r <= 32 * V && (32 * V) % r == 0;
  g.tileCols = g.linear ? r : 32 * V;
  g.tiles = (r + g.tileCols - 1) / g.tileCols;
  // About two blocks per SM in all, at most 32 partial sums per column,
  // at least 64 rows per block.
  int want = std::max(1, 2 * multiprocessorCount() / g.tiles);
  g.blocks = std::max(1, std::min({32, want, (d + 63) / 64}));
  g.rows = (d + g.blocks - 1) / g.blocks;
  return g;
}

/// Partial sums of the hidden vector over block (blockIdx.x: a chunk of
/// w1's rows, blockIdx.y: a column tile), written to part[blockIdx.x][t][e];
/// the last block of a tile to finish (a counter per tile) adds the tile's
/// partial sums in block order (deterministic) into hidden[t][e] and resets
/// the counter.
template <typename W, int T>
__global__ void __launch_bounds__(kThreads)
    predictHiddenKernel(const float *__restrict__ x, const W *__restrict__ w1,
                        int d, int r, PredictGrid g, float *part,
                        float *hidden, unsigned *done, int32_t *listCount) {
  pdlTrigger();
  pdlWait(); // early launches: x comes from the kernel before
  constexpr int V = Vec<W>::N;
  constexpr int Tile = 32 * V;
  __shared__ float partial[kWarps][Tile];
  __shared__ bool last;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i0 = blockIdx.x * g.rows, i1 = min(d, i0 + g.rows);
  const int c0 = blockIdx.y * g.tileCols;
  const int cols = min(g.tileCols, r - c0);
  float acc[T][V];
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int v = 0; v < V; ++v)
      acc[t][v] = 0.0f;
  // Lane columns: in the linear layout a warp's 16-byte loads cover 32 * V
  // / r consecutive rows of r columns, so each lane keeps its columns.
  const int rowsPerLoad = g.linear ? Tile / r : 1;
  const int col = g.linear ? (lane * V) % r : lane * V;
  const int rowInLoad = g.linear ? (lane * V) / r : 0;
  const bool vec = r % V == 0 && reinterpret_cast<uintptr_t>(w1) % 16 == 0;
#pragma unroll 8
  for (int i = i0 + warp * rowsPerLoad + rowInLoad; i < i1;
       i += kWarps * rowsPerLoad) {
    float wv[V];
    const W *p = w1 + int64_t(i) * r + c0 + col;
    if (vec && col + V <= cols) {
      Vec<W>::load(p, wv);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v)
        wv[v] = col + v < cols ? toFloat(p[v]) : 0.0f;
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float xv = __ldca(x + int64_t(t) * d + i);
#pragma unroll
      for (int v = 0; v < V; ++v)
        acc[t][v] = fmaf(xv, wv[v], acc[t][v]);
    }
  }
  // Linear layout: lanes r / V apart hold the same columns: sum them.
  if (g.linear && rowsPerLoad > 1)
    for (int off = r / V; off < 32; off *= 2)
#pragma unroll
      for (int t = 0; t < T; ++t)
#pragma unroll
        for (int v = 0; v < V; ++v)
          acc[t][v] += __shfl_xor_sync(0xffffffffu, acc[t][v], off);
  const int owners = g.linear ? r / V : 32; // lanes holding distinct columns
  float *mine = part + int64_t(blockIdx.x) * T * r;
#pragma unroll
  for (int t = 0; t < T; ++t) {
#pragma unroll
    for (int v = 0; v < V; ++v)
      partial[warp][lane * V + v] = lane < owners ? acc[t][v] : 0.0f;
    __syncthreads();
    for (int c = threadIdx.x; c < cols; c += kThreads) {
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < kWarps; ++k)
        sum += partial[k][c];
      mine[t * r + c0 + c] = sum;
    }
    __syncthreads();
  }
  // The last block of this tile adds the tile's partial sums.
  __threadfence();
  if (threadIdx.x == 0)
    last = atomicAdd(done + blockIdx.y, 1u) == unsigned(gridDim.x) - 1;
  __syncthreads();
  if (!last)
    return;
  __threadfence();
  const int outputs = T * cols;
  const int nb = gridDim.x;
  constexpr int Batch = 8;
  auto sumOver = [&](int o, int first, int step) {
    const int t = o / cols, c = c0 + o % cols;
    float sum = 0.0f;
    for (int b0 = first; b0 < nb; b0 += Batch * step) {
      float v[Batch];
#pragma unroll
      for (int u = 0; u < Batch; ++u) {
        const int b = b0 + u * step;
        v[u] = b < nb ? __ldcg(part + (int64_t(b) * T + t) * r + c) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < Batch; ++u)
        sum += v[u];
    }
    return sum;
  };
  if (outputs >= kThreads) {
    for (int o = threadIdx.x; o < outputs; o += kThreads)
      hidden[(o / cols) * r + c0 + o % cols] = sumOver(o, 0, 1);
  } else {
    // Fewer outputs than threads: `groups` threads per output split the
    // blocks, then their sums are added in group order.
    const int groups = max(1, min(kThreads / outputs, nb));
    const int group = threadIdx.x / outputs, o = threadIdx.x % outputs;
    float *sums = &partial[0][0]; // kWarps * Tile >= kThreads floats
    sums[threadIdx.x] = group < groups ? sumOver(o, group, groups) : 0.0f;
    __syncthreads();
    if (threadIdx.x < outputs) {
      float total = 0.0f;
      for (int k = 0; k < groups; ++k)
        total += sums[k * outputs + threadIdx.x];
      hidden[(threadIdx.x / cols) * r + c0 + threadIdx.x % cols] = total;
    }
  }
  if (threadIdx.x == 0) {
    done[blockIdx.y] = 0;
    // The select kernel, next, reserves its list places from zero.
    if (listCount && blockIdx.y == 0)
      *listCount = 0;
  }
}

/// Ranks up to kColsMaxRank: one pass, no partial sums. Block b computes
/// hidden columns [8b, 8b + 8) over all d rows of w1 (each thread a
/// stride of rows, 16 bytes of each row for fp16), reduced in registers,
/// shuffles and one shared-memory pass in a fixed order (deterministic).
/// Block 0 zeroes the list count the select kernel reserves places from.
constexpr int kColsThreads = 512;
constexpr int kColsPerBlock = 8;
constexpr int kColsMaxRank = 128;
/// Tokens predictHiddenColsNormKernel takes (x in registers).
constexpr int kNormMaxTokens = 2;
static_assert(kColsThreads == kNormThreads,
              "the norm in the hidden kernel holds x as normRows does");
/// The end of the hidden-vector kernels of one pass: each thread's column
/// sums acc[t][c] summed over its warp, then the warps' sums in warp order
/// (red: shared memory), written to hidden[t][c0 + c] for c < cols; block
/// 0 zeroes the list count. The whole block calls it.
template <int T, int C, int Warps>
__device__ __forceinline__ void finishHiddenCols(const float (&acc)[T][C],
                                                 float (&red)[Warps][T * C],
                                                 float *hidden, int r, int c0,
                                                 int cols, int32_t *listCount) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const float v = warpSum(acc[t][c]);
      if (lane == 0)
        red[warp][t * C + c] = v;
    }
  __syncthreads();
  if (threadIdx.x < T * C) {
    const int t = threadIdx.x / C, c = threadIdx.x % C;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < Warps; ++k)
      sum += red[k][threadIdx.x];
    if (c < cols)
      hidden[t * r + c0 + c] = sum;
  }
  if (listCount && blockIdx.x == 0 && threadIdx.x == 0)
    *listCount = 0;
}

template <typename W, int T>
__global__ void __launch_bounds__(kColsThreads)
    predictHiddenColsKernel(const float *x,
                            const W *__restrict__ w1, int d, int r,
                            float *hidden, int32_t *listCount) {
  pdlTrigger();
  constexpr int C = kColsPerBlock;
  constexpr int Warps = kColsThreads / 32;
  constexpr int Unroll = T <= 4 ? 4 : 2; // rows in flight (registers)
  // w1 does not depend on earlier kernels: the first Ahead rows of this
  // thread are requested before the wait, so that an early launch has them
  // when x is ready (at d = 4096, all of them).
  constexpr int Ahead = 2 * Unroll;
  constexpr int Stride = kColsThreads;
  __shared__ float red[Warps][T * C];
  const int c0 = blockIdx.x * C;
  const int cols = min(C, r - c0);
  const bool vec = sizeof(W) == 2 && cols == C && r % C == 0 &&
                   reinterpret_cast<uintptr_t>(w1) % 16 == 0;
  uint4 ahead[Ahead];
#pragma unroll
  for (int a = 0; a < Ahead; ++a) {
    const int i = threadIdx.x + a * Stride;
    if (vec && i < d)
      ahead[a] = __ldg(reinterpret_cast<const uint4 *>(w1 + int64_t(i) * r + c0));
  }
  pdlWait(); // early launches: x comes from the kernel before
  float acc[T][C];
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int c = 0; c < C; ++c)
      acc[t][c] = 0.0f;
  // Rows i0 + u * Stride, u < Unroll; `pre`: their words requested above.
  auto rows = [&](int i0, const uint4 *pre) {
    float wv[Unroll][C], xv[Unroll][T];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const int i = i0 + u * Stride;
      const W *p = w1 + int64_t(i) * r + c0;
      if (i < d && vec) {
        convertPairs<W>(pre ? pre[u] : __ldg(reinterpret_cast<const uint4 *>(p)),
                    wv[u]);
      } else {
#pragma unroll
        for (int c = 0; c < C; ++c)
          wv[u][c] = i < d && c < cols ? toFloat(p[c]) : 0.0f;
      }
#pragma unroll
      for (int t = 0; t < T; ++t)
        xv[u][t] = i < d ? x[int64_t(t) * d + i] : 0.0f;
    }
    addScaledRows(acc, xv, wv);
  };
  // The same rows in the same order as a loop from the first: the sums
  // do not depend on what was requested ahead.
#pragma unroll
  for (int h = 0; h < Ahead / Unroll; ++h)
    rows(threadIdx.x + h * Unroll * Stride, ahead + h * Unroll);
  for (int i0 = threadIdx.x + Ahead * Stride; i0 < d; i0 += Unroll * Stride)
    rows(i0, nullptr);
  finishHiddenCols(acc, red, hidden, r, c0, cols, listCount);
}

/// predictHiddenColsKernel whose input is the norm of norm.x (T rows of d
/// <= 512 PER, PER = 4 or 8), which every block computes itself: the
/// block's threads hold rows tid + 512 k of x as normRows' register kernel
/// does, so the same two block reductions and formula give normRows' bits.
/// Block b writes the normalised rows tid + 512 k with k % grid == b to
/// xNorm (the select kernel's x) and adds its hidden columns from the
/// registers in predictHiddenColsKernel's order. The w1 rows and the
/// norm's scale and bias are requested before the wait; x (written by the
/// kernel before) after it, through L2.
template <typename W, int T, int PER, bool Rms>
__global__ void __launch_bounds__(kColsThreads)
    predictHiddenColsNormKernel(FfnNorm norm, float *xNorm,
                                const W *__restrict__ w1, int d, int r,
                                float *hidden, int32_t *listCount) {
  pdlTrigger();
  constexpr int C = kColsPerBlock;
  constexpr int Warps = kColsThreads / 32;
  constexpr int Stride = kColsThreads;
  __shared__ float red[Warps][T * C];
  const int tid = threadIdx.x;
  const int c0 = blockIdx.x * C;
  const int cols = min(C, r - c0);
  const bool vec = sizeof(W) == 2 && cols == C && r % C == 0 &&
                   reinterpret_cast<uintptr_t>(w1) % 16 == 0;
  uint4 ahead[PER];
  float sc[PER], bi[PER];
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int i = tid + k * Stride;
    if (vec && i < d)
      ahead[k] = __ldg(reinterpret_cast<const uint4 *>(w1 + int64_t(i) * r + c0));
    sc[k] = i < d ? __ldg(norm.scale + i) : 0.0f;
    bi[k] = norm.bias && i < d ? __ldg(norm.bias + i) : 0.0f;
  }
  pdlWait(); // early launches: x comes from the kernel before
  float xv[T][PER];
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      const int i = tid + k * Stride;
      xv[t][k] = i < d ? __ldcg(norm.x + int64_t(t) * d + i) : 0.0f;
    }
  // normRowInRegs' arithmetic, token by token.
#pragma unroll
  for (int t = 0; t < T; ++t) {
    float mean, inv;
    normStats<Rms, PER, Stride>(xv[t], d, norm.epsilon, mean, inv);
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      const int i = tid + k * Stride;
      xv[t][k] = i < d ? normApply(xv[t][k], mean, inv, sc[k], bi[k]) : 0.0f;
      if (i < d && k % gridDim.x == blockIdx.x)
        xNorm[int64_t(t) * d + i] = xv[t][k];
    }
  }
  // predictHiddenColsKernel's sums: rows tid + 512 k in increasing k.
  float acc[T][C];
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int c = 0; c < C; ++c)
      acc[t][c] = 0.0f;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int i = tid + k * Stride;
    float wv[1][C], xk[1][T];
    const W *p = w1 + int64_t(i) * r + c0;
    if (i < d && vec) {
      convertPairs<W>(ahead[k], wv[0]);
    } else {
#pragma unroll
      for (int c = 0; c < C; ++c)
        wv[0][c] = i < d && c < cols ? toFloat(p[c]) : 0.0f;
    }
#pragma unroll
    for (int t = 0; t < T; ++t)
      xk[0][t] = xv[t][k];
    addScaledRows(acc, xk, wv);
  }
  finishHiddenCols(acc, red, hidden, r, c0, cols, listCount);
}

/// The first rows of w2 a select block's warp reads, and the segment's
/// biases: requested before the block waits for the hidden vector (they do
/// not depend on earlier kernels), so both arrive in one round trip.
struct SelectAhead {
  static constexpr int Rows = 8;
  float pa[Rows], pb[Rows];
  float bj = 0.0f;
  template <typename W>
  __device__ void load(const W *__restrict__ w2, int r, int f,
                       const float *__restrict__ bias) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int j0 = blockIdx.x * kSegment + 2 * lane;
#pragma unroll
    for (int k = 0; k < Rows; ++k) {
      const int e = warp + k * kWarps;
      const W *row = w2 + int64_t(e) * f;
      pa[k] = e < r && j0 < f ? toFloat(row[j0]) : 0.0f;
      pb[k] = e < r && j0 + 1 < f ? toFloat(row[j0 + 1]) : 0.0f;
    }
    const int q = threadIdx.x, j = blockIdx.x * kSegment + q;
    bj = q < kSegment && j < f && bias ? bias[j] : 0.0f;
  }
};

/// Shared memory of selectSegment.
template <int T> struct SelectShared {
  float logits[kWarps][T][kSegment];
  int firstHalf[4];
};

/// Segment blockIdx.x of the predictor's selection, by the whole block,
/// with the hidden vector [T][r] in shared memory: each warp's share of the
/// rank (rows e = warp, warp + kWarps, ...) of the logits of the segment's
/// neurons (two per lane), reduced in shared memory, then the threshold,
/// the segment, the mask rows and the segment's neurons at a place in the
/// list reserved with one atomic (segments land in the order their blocks
/// get there; the hidden kernel zeroed ix.count). With `chosen`, position
/// k of the segment's set also goes to chosen[k] and the tokens that
/// selected it (bit t) to chosenBy[k]. Returns the segment's count (after
/// a barrier: chosen is complete).
template <typename W, int T>
__device__ int selectSegment(const float *hidden, int r,
                             const W *__restrict__ w2, int f, float threshold,
                             const SelectAhead &ahead, SelectShared<T> &sh,
                             IndexView ix, uint8_t *mask, int maskRows,
                             int *chosen, uint8_t *chosenBy) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int s = blockIdx.x;
  const int j0 = s * kSegment + 2 * lane;
  float acc[T][2];
#pragma unroll
  for (int t = 0; t < T; ++t)
    acc[t][0] = acc[t][1] = 0.0f;
#pragma unroll
  for (int k = 0; k < SelectAhead::Rows; ++k) {
    const int e = warp + k * kWarps;
    if (e < r)
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const float hv = hidden[t * r + e];
        acc[t][0] = fmaf(hv, ahead.pa[k], acc[t][0]);
        acc[t][1] = fmaf(hv, ahead.pb[k], acc[t][1]);
      }
  }
#pragma unroll 16
  for (int e = warp + SelectAhead::Rows * kWarps; e < r; e += kWarps) {
    const W *row = w2 + int64_t(e) * f;
    const float a = j0 < f ? toFloat(row[j0]) : 0.0f;
    const float b = j0 + 1 < f ? toFloat(row[j0 + 1]) : 0.0f;
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float hv = hidden[t * r + e];
      acc[t][0] = fmaf(hv, a, acc[t][0]);
      acc[t][1] = fmaf(hv, b, acc[t][1]);
    }
  }
#pragma unroll
  for (int t = 0; t < T; ++t) {
    sh.logits[warp][t][2 * lane] = acc[t][0];
    sh.logits[warp][t][2 * lane + 1] = acc[t][1];
  }
  __syncthreads();
  // Threads 0..63 decide the segment's neurons (the other warps take part
  // in the ballots and barriers with nothing selected). Mask row t < T
  // gets token t's own selection (as the prefill's per-token masks and the
  // CPU backend); rows past T the union.
  const int q = threadIdx.x, j = s * kSegment + q;
  unsigned by = 0;
  if (q < kSegment && j < f) {
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float l = ahead.bj;
#pragma unroll
      for (int k = 0; k < kWarps; ++k)
        l += sh.logits[k][t][q];
      if (l > threshold)
        by |= 1u << t;
    }
    if (mask) {
#pragma unroll
      for (int t = 0; t < T; ++t)
        if (t < maskRows)
          mask[int64_t(t) * f + j] = (by >> t) & 1;
      for (int m = T; m < maskRows; ++m)
        mask[int64_t(m) * f + j] = by != 0;
    }
  }
  const bool on = by != 0;
  const unsigned ballot = __ballot_sync(0xffffffffu, on);
  if (lane == 0 && warp < 2)
    sh.firstHalf[warp] = __popc(ballot);
  __syncthreads();
  const int total = sh.firstHalf[0] + sh.firstHalf[1];
  if (threadIdx.x == 0) {
    ix.cnt[s] = total;
    sh.firstHalf[2] = ix.list && total ? atomicAdd(ix.count, total) : 0;
  }
  __syncthreads();
  if (warp < 2 && on) {
    const int pos =
        (warp ? sh.firstHalf[0] : 0) + __popc(ballot & ((1u << lane) - 1));
    ix.idx[s * kSegment + pos] = j;
    if (ix.list)
      ix.list[sh.firstHalf[2] + pos] = j;
    if (chosen) {
      chosen[pos] = j;
      chosenBy[pos] = uint8_t(by);
    }
  }
  if (chosen)
    __syncthreads();
  return total;
}

/// One block per segment of kSegment neurons: the hidden vector into
/// shared memory, then selectSegment.
template <typename W, int T>
__global__ void __launch_bounds__(kThreads)
    predictSelectKernel(const float *__restrict__ hiddenIn, int r,
                        const W *__restrict__ w2, int f,
                        const float *__restrict__ bias, float threshold,
                        IndexView ix, uint8_t *mask, int maskRows) {
  pdlTrigger();
  extern __shared__ float hidden[]; // [T][r]
  __shared__ SelectShared<T> sh;
  SelectAhead ahead;
  ahead.load(w2, r, f, bias);
  pdlWait(); // early launches: the hidden vector comes from the kernel before
  for (int k = threadIdx.x; k < T * r; k += kThreads)
    hidden[k] = __ldcg(hiddenIn + k);
  __syncthreads();
  selectSegment<W, T>(hidden, r, w2, f, threshold, ahead, sh, ix, mask,
                      maskRows, nullptr, nullptr);
}

/// predictSelectKernel and sparseUpKernel in one: one block per segment
/// selects the segment's neurons (the same segments, list and mask rows)
/// and then computes their up projection, a warp a selected row, from x
/// staged in shared memory next to the hidden vector (token t gets 0 where
/// it did not select the neuron itself); every thread of the grid writes
/// its share of `init`. No list is read back: the round trip and the
/// launch between selecting and streaming the rows are gone.
template <typename W, int T, bool Aligned>
__global__ void __launch_bounds__(kThreads)
    selectUpKernel(const float *__restrict__ hiddenIn, int r,
                   const W *__restrict__ w2, int f,
                   const float *__restrict__ predBias, float threshold,
                   IndexView ix, uint8_t *mask, int maskRows,
                   const float *__restrict__ x, const W *__restrict__ wt, int d,
                   const float *__restrict__ upBias, bool relu, float *h,
                   int ldh, RowsInit init) {
  pdlTrigger();
  constexpr int V = Vec<W>::N;
  extern __shared__ float4 selectUpShared[]; // x [T][d], hidden [T][r]
  float *xs = reinterpret_cast<float *>(selectUpShared);
  float *hidden = xs + stagedFloats(T, d);
  __shared__ SelectShared<T> sh;
  __shared__ int chosen[kSegment];       // the segment's selected neurons
  __shared__ uint8_t chosenBy[kSegment]; // bit t: token t selected it
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  SelectAhead ahead;
  ahead.load(w2, r, f, predBias);
  pdlWait(); // early launches: x, the hidden vector, the residual
  InitWriter base;
  base.begin(init);
  const bool permuted = stagePermuted<W, Aligned>(d);
  const XLanes<W> lanes(permuted, lane);
  for (int k = threadIdx.x; k < T * r; k += kThreads)
    hidden[k] = __ldcg(hiddenIn + k);
  stageX<Aligned, T>(x, d, xs, permuted);
  __syncthreads();
  const int total = selectSegment<W, T>(hidden, r, w2, f, threshold, ahead, sh,
                                        ix, mask, maskRows, chosen, chosenBy);
  // The selected rows, a warp each (rows k = warp, warp + kWarps, ...).
  for (int k = warp; k < total; k += kWarps) {
    const int n = chosen[k];
    const W *row = wt + int64_t(n) * d;
    uint4 raw[kUpUnroll];
    loadRowChunk<W, Aligned>(row, lane * V, d, raw);
    const float b = upBias ? upBias[n] : 0.0f;
    float sum[T];
    rowDotX<W, T, Aligned>(row, d, xs, lanes, raw, sum);
    if (lane == 0) {
      const unsigned mine = chosenBy[k];
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const float v = sum[t] + b;
        h[int64_t(t) * ldh + n] =
            !((mine >> t) & 1) ? 0.0f : relu ? fmaxf(v, 0.0f) : v;
      }
    }
  }
  base.end(init);
}

/// selectUpKernel with the split layout (fp16 rows of d = 2048 U columns,
/// 1-2 tokens): x's slice goes to the lanes' registers while the block
/// selects (no x in shared memory), then the segment's selected rows,
/// kSelectSplitRows at a time, each shared by all warps (splitRows); thread
/// (r, t) writes h[t, n] as selectUpKernel does.
template <typename W, int T, int U>
__global__ void __launch_bounds__(kThreads)
    selectUpSplitKernel(const float *__restrict__ hiddenIn, int r,
                        const W *__restrict__ w2, int f,
                        const float *__restrict__ predBias, float threshold,
                        IndexView ix, uint8_t *mask, int maskRows,
                        const float *__restrict__ x, const W *__restrict__ wt,
                        const float *__restrict__ upBias, bool relu, float *h,
                        int ldh, RowsInit init) {
  pdlTrigger();
  constexpr int R = kSelectSplitRows;
  extern __shared__ float4 selectSplitShared[]; // hidden [T][r]
  float *hidden = reinterpret_cast<float *>(selectSplitShared);
  __shared__ SelectShared<T> sh;
  __shared__ int chosen[kSegment];       // the segment's selected neurons
  __shared__ uint8_t chosenBy[kSegment]; // bit t: token t selected it
  __shared__ float partial[2][R * T][kWarps];
  SelectAhead ahead;
  ahead.load(w2, r, f, predBias);
  pdlWait(); // early launches: x, the hidden vector, the residual
  InitWriter base;
  base.begin(init);
  for (int k = threadIdx.x; k < T * r; k += kThreads)
    hidden[k] = __ldcg(hiddenIn + k);
  float4 xv[T][U][2];
  splitX<T, U>(x, xv);
  __syncthreads();
  const int total = selectSegment<W, T>(hidden, r, w2, f, threshold, ahead, sh,
                                        ix, mask, maskRows, chosen, chosenBy);
  int buf = 0;
  for (int k0 = 0; k0 < total; k0 += R, buf ^= 1) {
    const int valid = min(R, total - k0);
    int rows[R];
#pragma unroll
    for (int q = 0; q < R; ++q)
      rows[q] = q < valid ? chosen[k0 + q] : 0;
    splitRows<W, T, U, R>(wt, rows, valid, xv, partial[buf]);
    __syncthreads();
    if (threadIdx.x < valid * T) {
      const int q = threadIdx.x / T, t = threadIdx.x % T;
      const int n = chosen[k0 + q];
      const float v = splitSum(partial[buf][threadIdx.x], upBias ? upBias[n] : 0.0f);
      h[int64_t(t) * ldh + n] = !((chosenBy[k0 + q] >> t) & 1) ? 0.0f
                                : relu                         ? fmaxf(v, 0.0f)
                                                               : v;
    }
  }
  base.end(init);
}

template <typename W> bool aligned(const W *p, int d) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 &&
         (int64_t(d) * sizeof(W)) % 16 == 0;
}

/// Calls f(std::integral_constant<int, T>) for the token count.
template <typename F> cudaError_t withTokens(int tokens, F &&f) {
  switch (tokens) {
  case 1: return f(std::integral_constant<int, 1>{});
  case 2: return f(std::integral_constant<int, 2>{});
  case 3: return f(std::integral_constant<int, 3>{});
  case 4: return f(std::integral_constant<int, 4>{});
  case 5: return f(std::integral_constant<int, 5>{});
  case 6: return f(std::integral_constant<int, 6>{});
  case 7: return f(std::integral_constant<int, 7>{});
  case 8: return f(std::integral_constant<int, 8>{});
  }
  return cudaErrorInvalidValue;
}

/// Calls f(integral_constant T, integral_constant U) for sparseUpSplitKernel
/// (1-2 tokens, U = 1-4).
template <typename F> cudaError_t withSplit(int tokens, int u, F &&f) {
  using std::integral_constant;
  auto forU = [&](auto t) -> cudaError_t {
    switch (u) {
    case 1: return f(t, integral_constant<int, 1>{});
    case 2: return f(t, integral_constant<int, 2>{});
    case 3: return f(t, integral_constant<int, 3>{});
    case 4: return f(t, integral_constant<int, 4>{});
    }
    return cudaErrorInvalidValue;
  };
  return tokens == 1 ? forU(integral_constant<int, 1>{})
                     : forU(integral_constant<int, 2>{});
}

UpKernel upKernel = UpKernel::kAuto;
int upSplitBlocks = 0; // sparseUpSplitKernel's blocks an SM (0: occupancy)

/// Whether the split kernels take T = tokens over rows of d columns
/// (`fast`: 16-byte aligned rows and x).
bool splitFits(int tokens, int d, bool fast) {
  return upKernel == UpKernel::kAuto && tokens >= 1 && tokens <= 2 && fast &&
         d % 2048 == 0 && d <= 4 * 2048;
}

/// Allows `smem` bytes of dynamic shared memory for `kernel` when they and
/// its `staticBytes` of static shared memory pass the default 48 KB.
template <typename K>
cudaError_t allowShared(K kernel, size_t smem, size_t staticBytes = 0) {
  if (smem + staticBytes <= 48 * 1024)
    return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              int(smem));
}
/// Blocks for one resident wave of `kernel` (`threads` a block, `smem`
/// bytes of dynamic shared memory), at most `limit` and, where `perSMCap`
/// is above 0, at most that many an SM; at least one.
template <typename K>
int residentWave(K kernel, int threads, size_t smem, int limit,
                 int perSMCap = 0) {
  int perSM = 1;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSM, kernel, threads, smem);
  if (perSMCap > 0)
    perSM = std::min(perSM, perSMCap);
  return std::max(1, std::min(limit, std::max(1, perSM) * multiprocessorCount()));
}
} // namespace

void setUpKernel(UpKernel kernel, int blocksPerSM) {
  upKernel = kernel;
  upSplitBlocks = blocksPerSM;
}

int multiprocessorCount() {
  static int count = [] {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    return sms > 0 ? sms : 1;
  }();
  return count;
}

cudaError_t indexFromFlags(const uint8_t *flags, IndexView ix,
                           cudaStream_t stream) {
  const int segments = indexSegments(ix.neurons);
  if (segments == 0)
    return cudaSuccess;
  indexKernel<true><<<(segments + kWarps / 2 - 1) / (kWarps / 2), kThreads, 0,
                      stream>>>(nullptr, flags, 0, false, nullptr, ix, RowsInit{});
  return cudaGetLastError();
}

namespace {
/// indexKernel<false> over h (see indexFromActivations, indexFromGate).
cudaError_t launchIndex(const float *h, int tokens, bool positive,
                        uint8_t *mask, IndexView ix, RowsInit init,
                        cudaStream_t stream, bool early) {
  const int segments = indexSegments(ix.neurons);
  const int blocks = std::max(1, (segments + kWarps / 2 - 1) / (kWarps / 2));
  cudaError_t e = launchKernel(indexKernel<false>, dim3(blocks), dim3(kThreads),
                               0, stream, early, h, nullptr, tokens, positive,
                               mask, ix, init);
  return e != cudaSuccess ? e : cudaGetLastError();
}
} // namespace

cudaError_t indexFromActivations(const float *h, int tokens, IndexView ix,
                                 RowsInit init, cudaStream_t stream,
                                 bool early) {
  return launchIndex(h, tokens, false, nullptr, ix, init, stream, early);
}

cudaError_t indexFromGate(const float *h, int tokens, bool positive,
                          uint8_t *mask, IndexView ix, cudaStream_t stream,
                          bool early) {
  return launchIndex(h, tokens, positive, mask, ix, RowsInit{}, stream, early);
}

template <typename W>
cudaError_t sparseUp(const float *x, int tokens, const W *wt, int d,
                     const float *bias, IndexView ix, bool relu, float *h,
                     int ldh, RowsInit init, cudaStream_t stream,
                     int32_t *list, int32_t *count, bool early,
                     const uint8_t *tokenMask) {
  // One resident wave (x is staged in shared memory once per block), at
  // most a block per selected neuron; the kernel deals the rows round the
  // blocks.
  const int capacity = ix.neurons;
  size_t smem = sizeof(float) * size_t(stagedFloats(tokens, d)) +
                sizeof(int) * size_t(indexSegments(capacity) + 1);
  if (smem > 200 * 1024)
    return cudaErrorInvalidValue; // x does not fit in shared memory
  bool fast = aligned(wt, d) && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if constexpr (sizeof(W) == 2) {
    // 1-2 tokens over a list, rows of 2048 U columns: the split kernel.
    if (ix.list && ix.count && splitFits(tokens, d, fast))
      return withSplit(tokens, d / 2048, [&](auto t, auto u) {
        constexpr int T = decltype(t)::value, U = decltype(u)::value;
        auto kernel = ix.ready ? sparseUpSplitKernel<W, T, U, true>
                               : sparseUpSplitKernel<W, T, U, false>;
        const int blocks = residentWave(kernel, kThreads, 0, capacity, upSplitBlocks);
        cudaError_t e = launchKernel(kernel, dim3(blocks), dim3(kThreads), 0,
                                     stream, early, x, wt, bias, ix, relu, h,
                                     ldh, init, list, count, tokenMask);
        return e != cudaSuccess ? e : cudaGetLastError();
      });
    // 3-8 tokens over a list: tensor cores (fp16 or bf16 rows, 16-byte
    // aligned).
    if constexpr (sizeof(W) == 2)
      if (tokens >= kMmaMinTokens && tokens <= kMaxTokens && ix.list &&
          ix.count && fast && d % 32 == 0) {
        const int groups = (capacity + kMmaRows - 1) / kMmaRows;
        const int blocks =
            residentWave(sparseUpMmaKernel<W>, kMmaWarps * 32, 0, groups);
        cudaError_t e = launchKernel(sparseUpMmaKernel<W>, dim3(blocks),
                                     dim3(kMmaWarps * 32), 0, stream, early, x,
                                     tokens, wt, d, bias, ix, relu, h, ldh,
                                     init, list, count, tokenMask);
        return e != cudaSuccess ? e : cudaGetLastError();
      }
  }
  return withTokens(tokens, [&](auto t) {
    constexpr int T = decltype(t)::value;
    const bool listed = ix.list && ix.count;
    auto kernel = listed ? (fast ? sparseUpKernel<W, T, true, true>
                                 : sparseUpKernel<W, T, false, true>)
                         : (fast ? sparseUpKernel<W, T, true, false>
                                 : sparseUpKernel<W, T, false, false>);
    cudaError_t e = allowShared(kernel, smem);
    if (e != cudaSuccess)
      return e;
    const int blocks = residentWave(kernel, kThreads, smem, capacity);
    e = launchKernel(kernel, dim3(blocks), dim3(kThreads), smem, stream,
                     early, x, wt, d, bias, ix, relu, h, ldh, init, list,
                     count, tokenMask);
    return e != cudaSuccess ? e : cudaGetLastError();
  });
}

/// Blocks sharing one column tile's selected rows. One token: about 4
/// blocks per SM (short blocks finish early, so a partial second wave is
/// cheap; measured best on the H200 for d = 4096). Batches: one resident
/// wave exactly, since their blocks run longer and a few blocks past the
/// resident count double the time (measured: 17 splits 35 us, 16 splits
/// 19 us at 4 tokens, 50 % sparsity).
int downSplits(int d, int capacity, int vec, int tokens, int residentBlocks) {
  int tiles = (d + 32 * vec - 1) / (32 * vec);
  int splits = tokens <= 2 ? (4 * multiprocessorCount() + tiles - 1) / tiles
                           : residentBlocks / tiles;
  return std::max(1, std::min(splits, (capacity + 2 * kWarps - 1) / (2 * kWarps)));
}

template <typename W>
cudaError_t sparseDown(const float *h, int tokens, int ldh, const W *w, int d,
                       IndexView ix, float *y, cudaStream_t stream, int splits,
                       unsigned long long *density, bool early) {
  constexpr int V = Vec<W>::N;
  const int capacity = ix.neurons;
  bool fast = aligned(w, d);
  if constexpr (sizeof(W) == 2) {
    // 3-8 tokens over a list: tensor cores (16-bit rows, 16-byte aligned, y
    // aligned for float4 atomics). About four blocks an SM in all, at
    // least 64 rows of the capacity a block.
    if (tokens >= kMmaMinTokens && tokens <= kMaxTokens && ix.list &&
        ix.count && fast && reinterpret_cast<uintptr_t>(y) % 16 == 0) {
      const int tiles = (d + kDownMmaCols - 1) / kDownMmaCols;
      const int s =
          splits > 0 ? splits
                     : std::max(1, std::min((capacity + 63) / 64,
                                            4 * multiprocessorCount() / tiles));
      cudaError_t e = launchKernel(sparseDownMmaKernel<W>, dim3(tiles, s),
                                   dim3(kDownMmaWarps * 32), 0, stream, early,
                                   h, tokens, ldh, w, d, ix, y, density);
      return e != cudaSuccess ? e : cudaGetLastError();
    }
  }
  return withTokens(tokens, [&](auto t) {
    constexpr int T = decltype(t)::value;
    const bool compact = ix.list && ix.count;
    const bool ready = compact && ix.ready;
    auto kernel = ready ? (fast ? sparseDownKernel<W, T, true, true, true>
                                : sparseDownKernel<W, T, false, true, true>)
                  : compact ? (fast ? sparseDownKernel<W, T, true, true>
                                    : sparseDownKernel<W, T, false, true>)
                            : (fast ? sparseDownKernel<W, T, true, false>
                                    : sparseDownKernel<W, T, false, false>);
    int perSM = 1;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSM, kernel, kThreads, 0);
    int s = splits > 0 ? splits
                       : downSplits(d, capacity, V, tokens,
                                    std::max(1, perSM) * multiprocessorCount());
    // Each block lists its rows in shared memory: keep that under 64 KB.
    auto smemFor = [&](int sp) {
      return compact ? size_t(0)
                     : sizeof(int) * (size_t(indexSegments(capacity)) + 1 +
                                      size_t((capacity + sp - 1) / sp));
    };
    while (smemFor(s) > 64 * 1024)
      s *= 2;
    const size_t smem = smemFor(s);
    cudaError_t e = allowShared(kernel, smem);
    if (e != cudaSuccess)
      return e;
    dim3 grid((d + 32 * V - 1) / (32 * V), s);
    e = launchKernel(kernel, grid, dim3(kThreads), smem, stream, early, h, ldh,
                     w, d, ix, y, density);
    return e != cudaSuccess ? e : cudaGetLastError();
  });
}

/// The predictor's scratch: the partial sums [blocks][T][r] and the hidden
/// vector [T][r] (sized for either weight type), then one counter per
/// column tile (zero between calls).
size_t predictCounterOffset(int tokens, int d, int r) {
  // Sized for kMaxTokens, so that the counters stay in one place whatever
  // the token count of a call: a call with more tokens writes its partial
  // sums where a smaller one's counters would be otherwise.
  const size_t perBlock = size_t(std::max(tokens, kMaxTokens)) * size_t(r);
  return size_t(std::max(predictGrid<__half>(d, r).blocks,
                         predictGrid<float>(d, r).blocks) + 1) * perBlock;
}

size_t predictScratchFloats(int tokens, int d, int r) {
  return predictCounterOffset(tokens, d, r) +
         size_t(std::max(predictGrid<__half>(d, r).tiles,
                         predictGrid<float>(d, r).tiles));
}

namespace {
/// selectUpKernel's shared memory: x and the hidden vector (dynamic), the
/// logits and the segment's selection (static).
size_t selectUpDynamicBytes(int tokens, int d, int r) {
  return sizeof(float) * (size_t(stagedFloats(tokens, d)) + size_t(tokens) * size_t(r));
}
size_t selectUpStaticBytes(int tokens) {
  size_t bytes = 0; // selectUpKernel's SelectShared<T>, chosen and chosenBy
  withTokens(tokens, [&](auto t) {
    bytes = sizeof(SelectShared<decltype(t)::value>) +
            kSegment * (sizeof(int) + sizeof(uint8_t));
    return cudaSuccess;
  });
  return bytes;
}
} // namespace

bool predictUpNormFits(int tokens, int d, int r) {
  return tokens >= 1 && tokens <= kNormMaxTokens && d >= 1 &&
         d <= 8 * kColsThreads && r >= 1 && r <= kColsMaxRank &&
         predictUpFits(tokens, d, r);
}

bool predictUpFits(int tokens, int d, int r) {
  return tokens >= 1 && tokens <= kMaxTokens &&
         selectUpDynamicBytes(tokens, d, r) + selectUpStaticBytes(tokens) <=
             200 * 1024;
}

namespace {
/// Where the predictor's hidden vector [tokens][r] sits in its scratch.
template <typename W> float *predictHidden(float *scratch, int tokens, int d, int r) {
  return scratch + size_t(predictGrid<W>(d, r).blocks) * tokens * r;
}

/// The predictor's hidden vector (one pass for ranks up to kColsMaxRank,
/// else partial sums and a last block); zeroes `listCount` (or not: null).
/// With `norm` (the caller has checked predictUpNormFits), x is the norm
/// of norm->x, which the hidden kernel computes and writes to x.
template <typename W, int T>
cudaError_t launchHidden(const float *x, const W *w1, int d, int r,
                         float *scratch, int32_t *listCount,
                         cudaStream_t stream, bool early,
                         const FfnNorm *norm = nullptr) {
  const PredictGrid g = predictGrid<W>(d, r);
  float *part = scratch;
  float *hidden = predictHidden<W>(scratch, T, d, r);
  unsigned *done = reinterpret_cast<unsigned *>(
      scratch + predictCounterOffset(T, d, r));
  if (norm) {
    if constexpr (T > kNormMaxTokens) {
      return cudaErrorInvalidValue;
    } else {
      auto launch = [&](auto kernel) {
        return launchKernel(kernel, dim3((r + kColsPerBlock - 1) / kColsPerBlock),
                            dim3(kColsThreads), 0, stream, early, *norm,
                            const_cast<float *>(x), w1, d, r, hidden, listCount);
      };
      if (d <= 4 * kNormThreads) // normRows' register rows for this width
        return norm->rms ? launch(predictHiddenColsNormKernel<W, T, 4, true>)
                         : launch(predictHiddenColsNormKernel<W, T, 4, false>);
      return norm->rms ? launch(predictHiddenColsNormKernel<W, T, 8, true>)
                       : launch(predictHiddenColsNormKernel<W, T, 8, false>);
    }
  }
  return r <= kColsMaxRank
             ? launchKernel(predictHiddenColsKernel<W, T>,
                            dim3((r + kColsPerBlock - 1) / kColsPerBlock),
                            dim3(kColsThreads), 0, stream, early, x, w1, d, r,
                            hidden, listCount)
             : launchKernel(predictHiddenKernel<W, T>, dim3(g.blocks, g.tiles),
                            dim3(kThreads), 0, stream, early, x, w1, d, r, g,
                            part, hidden, done, listCount);
}

/// The predictor's kernels: the hidden vector (zeroing the list's count
/// where there is a list), then `select`, one block per segment of the f
/// neurons, with `smem` bytes of dynamic and `staticBytes` of static shared
/// memory and `args`.
template <typename W, int T, typename... Params, typename... Args>
cudaError_t launchPredict(void (*select)(Params...), size_t smem,
                          size_t staticBytes, const float *x, const W *w1,
                          int d, int r, float *scratch, const IndexView &ix,
                          int f, cudaStream_t stream, bool early,
                          const FfnNorm *norm, Args &&...args) {
  cudaError_t e = allowShared(select, smem, staticBytes);
  if (e != cudaSuccess)
    return e;
  e = launchHidden<W, T>(x, w1, d, r, scratch, ix.list ? ix.count : nullptr,
                         stream, early, norm);
  if (e != cudaSuccess)
    return e;
  e = launchKernel(select, dim3(indexSegments(f)), dim3(kThreads), smem,
                   stream, early, std::forward<Args>(args)...);
  return e != cudaSuccess ? e : cudaGetLastError();
}
} // namespace

template <typename W>
cudaError_t predictUp(const float *x, int tokens, const W *w1, int d, int r,
                      const W *w2, int f, const float *predBias,
                      float threshold, float *scratch, IndexView ix,
                      uint8_t *mask, int maskRows, const W *wt,
                      const float *upBias, bool relu, float *h, int ldh,
                      RowsInit init, cudaStream_t stream, bool early,
                      const FfnNorm *norm) {
  if (tokens == 0 || f == 0)
    return cudaSuccess;
  if (norm && (!predictUpNormFits(tokens, d, r) || !norm->x || !norm->scale))
    return cudaErrorInvalidValue;
  const size_t smem = selectUpDynamicBytes(tokens, d, r);
  const bool fast = aligned(wt, d) && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if constexpr (sizeof(W) == 2) {
    if (splitFits(tokens, d, fast) && predictUpFits(tokens, d, r))
      return withSplit(tokens, d / 2048, [&](auto t, auto u) {
        constexpr int T = decltype(t)::value, U = decltype(u)::value;
        return launchPredict<W, T>(
            selectUpSplitKernel<W, T, U>, sizeof(float) * size_t(T) * size_t(r),
            selectUpStaticBytes(T) +
                sizeof(float) * 2 * kSelectSplitRows * T * kWarps,
            x, w1, d, r, scratch, ix, f, stream, early, norm,
            predictHidden<W>(scratch, T, d, r), r, w2, f, predBias, threshold,
            ix, mask, maskRows, x, wt, upBias, relu, h, ldh, init);
      });
  }
  return withTokens(tokens, [&](auto t) {
    constexpr int T = decltype(t)::value;
    auto kernel = fast ? selectUpKernel<W, T, true> : selectUpKernel<W, T, false>;
    if (!predictUpFits(T, d, r))
      return cudaErrorInvalidValue; // x and the hidden vector do not fit
    return launchPredict<W, T>(kernel, smem, selectUpStaticBytes(T), x, w1, d,
                               r, scratch, ix, f, stream, early, norm,
                               predictHidden<W>(scratch, T, d, r), r, w2, f,
                               predBias, threshold, ix, mask, maskRows, x, wt,
                               d, upBias, relu, h, ldh, init);
  });
}

template <typename W>
cudaError_t predictIndex(const float *x, int tokens, const W *w1, int d,
                         int r, const W *w2, int f, const float *bias,
                         float threshold, float *scratch, IndexView ix,
                         uint8_t *mask, int maskRows, cudaStream_t stream,
                         bool early) {
  if (tokens == 0 || f == 0)
    return cudaSuccess;
  float *hidden = predictHidden<W>(scratch, tokens, d, r);
  const size_t smem = sizeof(float) * size_t(tokens) * size_t(r);
  return withTokens(tokens, [&](auto t) {
    constexpr int T = decltype(t)::value;
    auto selectKernel = predictSelectKernel<W, T>;
    // The select kernel's static shared memory (the logits, at most 16 KB)
    // and the hidden vector must stay under the default 48 KB, or the
    // kernel must be allowed more (T = 8 at rank 1024: 16 + 32 KB).
    if (smem > 160 * 1024)
      return cudaErrorInvalidValue;
    return launchPredict<W, T>(selectKernel, smem, sizeof(SelectShared<T>), x,
                               w1, d, r, scratch, ix, f, stream, early,
                               static_cast<const FfnNorm *>(nullptr), hidden,
                               r, w2, f, bias, threshold, ix, mask, maskRows);
  });
}

#define SPARSEC_INSTANTIATE(W)                                                 \
  template cudaError_t sparseUp<W>(const float *, int, const W *, int,         \
                                   const float *, IndexView, bool, float *,    \
                                   int, RowsInit, cudaStream_t, int32_t *,     \
                                   int32_t *, bool, const uint8_t *);          \
  template cudaError_t sparseDown<W>(const float *, int, int, const W *, int,  \
                                     IndexView, float *, cudaStream_t, int,    \
                                     unsigned long long *, bool);              \
  template cudaError_t predictIndex<W>(                                        \
      const float *, int, const W *, int, int, const W *, int, const float *,  \
      float, float *, IndexView, uint8_t *, int, cudaStream_t, bool);          \
  template cudaError_t predictUp<W>(                                           \
      const float *, int, const W *, int, int, const W *, int, const float *,  \
      float, float *, IndexView, uint8_t *, int, const W *, const float *,     \
      bool, float *, int, RowsInit, cudaStream_t, bool, const FfnNorm *);
SPARSEC_INSTANTIATE(__half)
SPARSEC_INSTANTIATE(__nv_bfloat16)
SPARSEC_INSTANTIATE(float)
#undef SPARSEC_INSTANTIATE

} // namespace sparsec::rt::cuda
