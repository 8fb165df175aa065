//===- DenseDecode.cu - dense decode kernels ------------------------------===//
//
// Part of the sparsec project.
//
// See sparsec/rt/cuda/DenseDecode.h.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/DenseDecode.h"

#include "DeviceMath.cuh"

#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <type_traits>

namespace sparsec::rt::cuda {
namespace {

//===----------------------------------------------------------------------===//
// gemvRows
//===----------------------------------------------------------------------===//

constexpr int kRowsThreads = 256; // 8 warps per block
/// Rows a block owns for M tokens: 2 for one token (twice the blocks, so the
/// last wave of a 4096-row weight leaves fewer SMs idle: 3-4 % faster on
/// the H200 at OPT-6.7B shapes), 4 above (each chunk of x a thread loads
/// serves 4 rows; at 2 tokens 2 rows were as often slower as faster), with
/// a folded norm (each block also sums all of x: 5 % slower with 2) and for
/// early launches (a layer's GEMVs took 111.3 us with 2 rows and two steps
/// of weights requested before the wait, 110.4 with 4 and one step;
/// docs/GPU.md). SPARSEC_GEMV_ROWS_PER_BLOCK (compile-time, for
/// experiments) sets it for every M.
__host__ __device__ constexpr int gemvRowsPerBlock(int M, bool norm,
                                                   bool early) {
#ifdef SPARSEC_GEMV_ROWS_PER_BLOCK
  return (void)M, (void)norm, (void)early, SPARSEC_GEMV_ROWS_PER_BLOCK;
#else
  return M == 1 && !norm && !early ? 2 : 4;
#endif
}
static_assert(gemvRowsPerBlock(kGemvRowsTokens, true, true) *
                      kGemvRowsTokens <= 256,
              "the epilogue gives each of a block's threads one output");

/// V consecutive weights of a row as floats: one 16-byte load (Vec<W>,
/// DeviceMath.cuh) or, for rows that are not 16-byte aligned, one element.
template <typename W, bool Vector> struct Chunk {
  static constexpr int V = Vector ? Vec<W>::N : 1;
  __device__ static void load(const W *p, float (&o)[V]) {
    if constexpr (Vector)
      Vec<W>::load(p, o);
    else
      o[0] = Vec<W>::scalar(p);
  }
};

/// x comes from the kernel before. After an early launch it is read with
/// ordinary loads (ld.global.ca), which stay behind pdlWait (it makes the
/// earlier kernels' writes visible) and hit in the L1 that an SM's blocks
/// share; read-only-path loads (__ldg), which a normal launch uses, may be
/// scheduled ahead of the wait. (L2 loads, ld.global.cg, as before
/// 2026-12-01: every block fetched all of x from the L2, and a layer's
/// GEMVs with the norm kernels took 127.7 us early against 103.7 normally
/// on the H200; 104.4 with ld.global.ca. docs/GPU.md.)
template <int V, bool Vec, bool Ordered>
__device__ __forceinline__ void loadX(const float *p, float *o) {
  if constexpr (Vec && V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V; i += 4) {
      const float4 *q = reinterpret_cast<const float4 *>(p + i);
      float4 f = Ordered ? __ldca(q) : __ldg(q);
      o[i] = f.x;
      o[i + 1] = f.y;
      o[i + 2] = f.z;
      o[i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i)
      o[i] = Ordered ? __ldca(p + i) : __ldg(p + i);
  }
}

/// The weights a launch computes: up to kGemvGroupMax of them over one x
/// (blocks [firstBlock[g], firstBlock[g + 1]) take weight g).
template <typename W> struct RowsTargets {
  const W *wt[kGemvGroupMax];
  const float *bias[kGemvGroupMax];
  const float *residual[kGemvGroupMax];
  float *y[kGemvGroupMax];
  int N[kGemvGroupMax];
  int firstBlock[kGemvGroupMax];
  int count;
  GemvNorm norm; // read by the Norm kernels
};

/// One member of RowsTargets: the one block blockIdx.x works for.
template <typename W> struct RowsTarget {
  const W *wt;
  const float *bias, *residual, *wScale, *wBias;
  float *y;
  int N, first; // first: the member's first block
};

/// The member of `t` that block blockIdx.x works for (compile-time
/// indices: the targets stay in the parameter space).
template <typename W>
__device__ __forceinline__ RowsTarget<W> rowsTarget(const RowsTargets<W> &t) {
  RowsTarget<W> r{t.wt[0], t.bias[0], t.residual[0], t.norm.wScale[0],
                  t.norm.wBias[0], t.y[0], t.N[0], 0};
#pragma unroll
  for (int g = 1; g < kGemvGroupMax; ++g)
    if (g < t.count && int(blockIdx.x) >= t.firstBlock[g])
      r = RowsTarget<W>{t.wt[g], t.bias[g], t.residual[g], t.norm.wScale[g],
                        t.norm.wBias[g], t.y[g], t.N[g], t.firstBlock[g]};
  return r;
}

/// Block b computes neurons [Rb, Rb + R) for all M tokens (R =
/// gemvRowsPerBlock(M, Norm, Early)): thread t takes chunks t, t + 256, ...
/// of the R rows (R loads in flight per chunk step, two steps unrolled),
/// then warp shuffles and one shared-memory pass reduce the M x R sums.
/// `Early` (a programmatic dependent launch): the weights depend on no
/// earlier kernel, so the first step's loads are issued before pdlWait and
/// overlap the kernel before (at K <= 2048 fp16 that is all of them); x is
/// read after it.
/// `Norm` (GemvNorm): each thread also sums x - x[0] and its square over
/// its chunks, and multiplies x - x[0] by the norm's scale before the dot
/// products; the block reduction adds the row sums, and the epilogue turns
/// the dot products into those of the normalised x with the weight's
/// folding terms.
// Experiments: SPARSEC_GEMV_MIN_BLOCKS / SPARSEC_GEMV_NORM_MIN_BLOCKS ask
// for that many resident blocks an SM (a register cap) for the plain and the
// norm kernels; by default the compiler chooses.
#if defined(SPARSEC_GEMV_MIN_BLOCKS) && defined(SPARSEC_GEMV_NORM_MIN_BLOCKS)
#define SPARSEC_GEMV_BOUNDS(Norm)                                              \
  __launch_bounds__(kRowsThreads, (Norm) ? SPARSEC_GEMV_NORM_MIN_BLOCKS        \
                                         : SPARSEC_GEMV_MIN_BLOCKS)
#else
#define SPARSEC_GEMV_BOUNDS(Norm) __launch_bounds__(kRowsThreads)
#endif
template <typename W, int M, bool Vec, bool Early, bool Norm>
__device__ __forceinline__ void gemvRowsBody(const float *x, int K,
                                             Activation act,
                                             const RowsTargets<W> &t) {
  pdlTrigger();
  using C = Chunk<W, Vec>;
  constexpr int V = C::V, R = gemvRowsPerBlock(M, Norm, Early);
  const RowsTarget<W> tg = rowsTarget(t);
  const W *wt = tg.wt;
  const float *bias = tg.bias, *residual = tg.residual;
  const float *wScale = tg.wScale, *wBias = tg.wBias;
  float *y = tg.y;
  const int N = tg.N, first = tg.first;
  const int n0 = (int(blockIdx.x) - first) * R;
  const int chunks = K / V;
  const W *rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    rows[r] = wt + int64_t(min(n0 + r, N - 1)) * K; // past N: a duplicate, dropped
  float acc[M][R];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r)
      acc[m][r] = 0.0f;
  // The epilogue's operands are loaded before the weights stream, so that
  // their latency hides behind it instead of following the reduction:
  // thread m * R + r finishes row n0 + r of token m with the bias (plus,
  // with a norm, W bias), W scale and the residual.
  const int em = int(threadIdx.x) / R, en = n0 + int(threadIdx.x) % R;
  const bool finishes = int(threadIdx.x) < M * R && en < N;
  float eAdd = 0.0f, eScale = 0.0f, eRes = 0.0f;
  if (finishes) {
    if (bias)
      eAdd = __ldg(bias + en);
    if constexpr (Norm) {
      if (!t.norm.rms) {
        eScale = __ldg(wScale + en);
        if (wBias)
          eAdd += __ldg(wBias + en);
      }
    }
  }
  // Norm: per token, the shift x[0] (layer norm; 0 for RMS), and the sums
  // of x - shift and of its square over this thread's chunks. Both this
  // and the residual come from earlier kernels (after pdlWait).
  float shift[M], s1[M], s2[M];
  auto startNorm = [&] {
    if (finishes && residual)
      eRes = Early ? __ldcg(residual + int64_t(em) * N + en)
                   : __ldg(residual + int64_t(em) * N + en);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      shift[m] = 0.0f;
      if (Norm && !t.norm.rms)
        shift[m] = Early ? __ldcg(x + int64_t(m) * K) : __ldg(x + int64_t(m) * K);
      s1[m] = s2[m] = 0.0f;
    }
  };
  auto step = [&](int c, const float (&w)[R][V]) {
    float sv[V];
    if constexpr (Norm)
      loadX<V, Vec, false>(t.norm.scale + c * V, sv);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv[V];
      loadX<V, Vec, Early>(x + int64_t(m) * K + c * V, xv);
      if constexpr (Norm) {
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const float d = xv[v] - shift[m];
          s1[m] += d;
          s2[m] += d * d;
          xv[v] = d * sv[v];
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int v = 0; v < V; ++v)
          acc[m][r] += xv[v] * w[r][v];
    }
  };
  int c = threadIdx.x;
  if constexpr (Early) {
    // The first step's weights are requested before x is waited for.
    float w0[R][V];
    if (c < chunks)
#pragma unroll
      for (int r = 0; r < R; ++r)
        C::load(rows[r] + c * V, w0[r]);
    pdlWait();
    startNorm();
    if (c < chunks)
      step(c, w0);
    c += kRowsThreads;
  } else {
    startNorm();
  }
#pragma unroll 2
  for (; c < chunks; c += kRowsThreads) {
    float w[R][V];
#pragma unroll
    for (int r = 0; r < R; ++r)
      C::load(rows[r] + c * V, w[r]);
    step(c, w);
  }
  // Per warp: the M x R dot products, then (Norm) the M pairs of sums.
  constexpr int Sums = M * R + (Norm ? 2 * M : 0);
  __shared__ float red[kRowsThreads / 32][Sums];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = warpSum(acc[m][r]);
      if (lane == 0)
        red[warp][m * R + r] = s;
    }
    if constexpr (Norm) {
      const float a = warpSum(s1[m]), q = warpSum(s2[m]);
      if (lane == 0) {
        red[warp][M * R + 2 * m] = a;
        red[warp][M * R + 2 * m + 1] = q;
      }
    }
  }
  __syncthreads();
  if (finishes) {
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < kRowsThreads / 32; ++q)
      s += red[q][threadIdx.x];
    if constexpr (Norm) {
      float a = 0.0f, q2 = 0.0f;
#pragma unroll
      for (int q = 0; q < kRowsThreads / 32; ++q) {
        a += red[q][M * R + 2 * em];
        q2 += red[q][M * R + 2 * em + 1];
      }
      const float inv = 1.0f / float(K);
      if (t.norm.rms) {
        s *= rsqrtf(q2 * inv + t.norm.epsilon);
      } else {
        const float d = a * inv; // mean - shift
        const float var = fmaxf(q2 * inv - d * d, 0.0f);
        s = rsqrtf(var + t.norm.epsilon) * (s - d * eScale);
      }
    }
    s = activate(act, s + eAdd) + eRes;
    y[int64_t(em) * N + en] = s;
  }
}

template <typename W, int M, bool Vec, bool Early, bool Norm = false>
__global__ void SPARSEC_GEMV_BOUNDS(Norm)
gemvRowsKernel(const float *x, int K, Activation act, RowsTargets<W> t) {
  gemvRowsBody<W, M, Vec, Early, Norm>(x, K, act, t);
}

template <typename W, int M, bool Vec>
cudaError_t launchRowsM(dim3 grid, const float *x, int K, Activation act,
                        const RowsTargets<W> &t, cudaStream_t s, bool early,
                        bool norm) {
  if (norm)
    return early ? launchKernel(gemvRowsKernel<W, M, Vec, true, true>, grid,
                                dim3{kRowsThreads}, 0, s, true, x, K, act, t)
                 : launchKernel(gemvRowsKernel<W, M, Vec, false, true>, grid,
                                dim3{kRowsThreads}, 0, s, false, x, K, act, t);
  return early ? launchKernel(gemvRowsKernel<W, M, Vec, true>, grid,
                              dim3{kRowsThreads}, 0, s, true, x, K, act, t)
               : launchKernel(gemvRowsKernel<W, M, Vec, false>, grid,
                              dim3{kRowsThreads}, 0, s, false, x, K, act, t);
}

//===----------------------------------------------------------------------===//
// gemvRows on tensor cores (3-8 tokens, fp16 or bf16 weights)
//===----------------------------------------------------------------------===//

/// y[t, n] for up to 8 tokens on tensor cores: block b owns rows [16b,
/// 16b + 16) of its weight (RowsTargets, as gemvRowsKernel), mmaRows16
/// (DeviceMath.cuh) computes their products with x, and the first warp
/// applies the epilogue (bias, activation, residual) as gemvRowsKernel.
/// Each weight byte is read once and each x chunk serves 16 rows
/// (gemvRowsKernel's threads reload x for every 4 rows: at 8 tokens its x
/// traffic is 8 times its weight traffic).
template <bool Early, typename E>
__global__ void __launch_bounds__(kMmaWarps * 32)
    gemvMmaKernel(const float *x, int M, int K, Activation act,
                  RowsTargets<E> t) {
  pdlTrigger();
  const RowsTarget<E> tg = rowsTarget(t);
  const E *wt = tg.wt;
  const float *bias = tg.bias, *residual = tg.residual;
  float *y = tg.y;
  const int N = tg.N, first = tg.first;
  const int n0 = (int(blockIdx.x) - first) * kMmaRows;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const E *rowA = wt + int64_t(min(n0 + g, N - 1)) * K;
  const E *rowB = wt + int64_t(min(n0 + g + 8, N - 1)) * K;
  if constexpr (Early)
    pdlWait(); // x comes from the kernel before
  __shared__ float red[kMmaWarps][4][32];
  mmaRows16<Early>(rowA, rowB, x, M, K, red);
  if (threadIdx.x >= 32)
    return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w)
      v += red[w][i][lane];
    const int n = n0 + g + (i >= 2 ? 8 : 0), m = 2 * q + (i & 1);
    if (n < N && m < M) {
      float s = v + (bias ? __ldg(bias + n) : 0.0f);
      s = activate(act, s);
      if (residual)
        s += Early ? __ldcg(residual + int64_t(m) * N + n)
                   : __ldg(residual + int64_t(m) * N + n);
      y[int64_t(m) * N + n] = s;
    }
  }
}

template <typename W, bool Vec>
cudaError_t launchRows(int M, const float *x, int K, Activation act,
                       const RowsTargets<W> &t, int blocks, cudaStream_t s,
                       bool early, bool norm) {
  const dim3 grid{static_cast<unsigned>(blocks)};
#define SPARSEC_ROWS_CASE(m)                                                   \
  case m:                                                                      \
    return launchRowsM<W, m, Vec>(grid, x, K, act, t, s, early, norm);
  switch (M) {
    SPARSEC_ROWS_CASE(1)
    SPARSEC_ROWS_CASE(2)
    SPARSEC_ROWS_CASE(3)
    SPARSEC_ROWS_CASE(4)
    SPARSEC_ROWS_CASE(5)
    SPARSEC_ROWS_CASE(6)
    SPARSEC_ROWS_CASE(7)
  default:
    SPARSEC_ROWS_CASE(8)
  }
#undef SPARSEC_ROWS_CASE
}

//===----------------------------------------------------------------------===//
// Norms
//===----------------------------------------------------------------------===//

constexpr int kNormBlock = 256;

/// One block a row of any width (three passes over the row in memory).
template <bool Rms>
__global__ void normKernel(const float *x, const float *scale,
                           const float *bias, int64_t width, float eps,
                           float *y) {
  pdlTrigger();
  pdlWait(); // early launches: x comes from the kernel before
  const float *row = x + blockIdx.x * width;
  float *out = y + blockIdx.x * width;
  float mean = 0.0f;
  if (!Rms) {
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
      s += row[i];
    mean = blockReduce<false>(s) / float(width);
  }
  float q = 0.0f;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    float c = row[i] - mean;
    q += c * c;
  }
  float inv = rsqrtf(blockReduce<false>(q) / float(width) + eps);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    float v = (row[i] - mean) * inv * scale[i];
    out[i] = bias ? v + bias[i] : v;
  }
}

/// A row of up to Threads * PER elements normalised by one block of
/// Threads threads: the row is read once into registers (all loads in
/// flight), then reduced twice and written. `Coherent`: the row was written
/// by other blocks of the same kernel (read from L2, ld.global.cg), and the
/// scale and bias are read only at the end (fewer registers).
template <bool Rms, int PER, int Threads, bool Coherent>
__device__ __forceinline__ void normRowInRegs(const float *row,
                                              const float *scale,
                                              const float *bias, int width,
                                              float eps, float *out) {
  // Otherwise the scale and bias are requested with x, so that their loads
  // do not wait for the two reductions.
  constexpr int P = Coherent ? 1 : PER;
  float v[PER], sc[P], bi[P];
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int i = threadIdx.x + k * Threads;
    v[k] = i < width ? (Coherent ? __ldcg(row + i) : row[i]) : 0.0f;
    if constexpr (!Coherent) {
      sc[k] = i < width ? __ldg(scale + i) : 0.0f;
      bi[k] = bias && i < width ? __ldg(bias + i) : 0.0f;
    }
  }
  float mean, inv;
  normStats<Rms, PER, Threads>(v, width, eps, mean, inv);
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int i = threadIdx.x + k * Threads;
    if (i >= width)
      continue;
    if constexpr (Coherent)
      out[i] = normApply(v[k], mean, inv, __ldg(scale + i),
                         bias ? __ldg(bias + i) : 0.0f);
    else
      out[i] = normApply(v[k], mean, inv, sc[k], bi[k]);
  }
}

/// normKernel for rows of up to kNormThreads * PER elements (normRowInRegs).
template <bool Rms, int PER>
__global__ void __launch_bounds__(kNormThreads)
normRegKernel(const float *x, const float *scale, const float *bias, int width,
              float eps, float *y) {
  pdlTrigger();
  pdlWait(); // early launches: x comes from the kernel before
  normRowInRegs<Rms, PER, kNormThreads, false>(
      x + int64_t(blockIdx.x) * width, scale, bias, width, eps,
      y + int64_t(blockIdx.x) * width);
}

/// Resident blocks an SM asked of gemvRowsNormOutKernel: as many as the
/// plain one-token GEMV gets (32 registers a thread), so that streaming the
/// weights is not slowed by the rarely run norm's registers.
constexpr int kNormOutMinBlocks = 8;

/// gemvRows at one token whose block that finishes last normalises y
/// (GemvNormOut): every block writes its rows and counts itself in
/// o.counter (lastBlockToArrive); the last reads the whole row from L2 and
/// normalises it into o.out.
template <typename W, bool Rms>
__global__ void __launch_bounds__(kRowsThreads, kNormOutMinBlocks)
gemvRowsNormOutKernel(const float *x, int K, Activation act, RowsTargets<W> t,
                      GemvNormOut o) {
  gemvRowsBody<W, 1, true, false, false>(x, K, act, t);
  if (lastBlockToArrive(o.counter, gridDim.x))
    normRowInRegs<Rms, kGemvNormOutWidth / kRowsThreads, kRowsThreads, true>(
        t.y[0], o.scale, o.bias, t.N[0], o.epsilon, o.out);
}

bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

//===----------------------------------------------------------------------===//
// decodeAttention
//===----------------------------------------------------------------------===//

constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / 32;
/// Keys per warp and pass: 4 over a float32 past, 8 over a float16 one
/// (the same bytes and registers: a warp has as much in flight).
__host__ __device__ constexpr int attnGroup(bool halfPast) {
  return halfPast ? 8 : 4;
}
constexpr int kAttnMaxChunks = 32;             // blocks per query row
constexpr int kAttnMaxHead = 128;

/// Key (or value) row j of batch b, kv head hk (bh = b * Hk + hk): from
/// the past ([B, Hk, P, .]) or the new rows ([B, Hk, Sk, .], or [B, Sk, Hk,
/// .] where `tokenMajor`).
__device__ __forceinline__ const float *
keyRow(const float *past, const float *cur, int64_t b, int64_t hk, int64_t Hk,
       int64_t P, int64_t Sk, int64_t j, int64_t width, bool tokenMajor) {
  return j < P ? past + ((b * Hk + hk) * P + j) * width
               : cur + headRow(tokenMajor, b, hk, j - P, Hk, Sk) * width;
}

__device__ __forceinline__ bool alignedTo(const void *p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % unsigned(bytes) == 0;
}

/// Elements lane * NI .. lane * NI + NI - 1 of a float16 row in one load
/// (NI 1, 2 or 4; the row aligned to NI elements), kept as loaded: pairs
/// of elements (the last pair's second half 0 where NI is odd).
template <int NI>
__device__ __forceinline__ void laneLoadPairs(const __half *row, int lane,
                                              __half2 (&out)[(NI + 1) / 2]) {
  if constexpr (NI == 2 || NI == 4) {
    using Vec = std::conditional_t<NI == 4, uint2, unsigned>;
    const Vec w = reinterpret_cast<const Vec *>(row)[lane];
    const __half2 *h = reinterpret_cast<const __half2 *>(&w);
#pragma unroll
    for (int e = 0; e < NI / 2; ++e)
      out[e] = h[e];
  } else {
    const __half zero = __float2half(0.0f);
#pragma unroll
    for (int e = 0; e < NI; e += 2)
      out[e / 2] = __halves2half2(row[lane * NI + e],
                                  e + 1 < NI ? row[lane * NI + e + 1] : zero);
  }
}

/// Warp 0 of a row's merging block: lane c holds chunk c's (max, sum)
/// (`has` false past the chunks); writes each chunk's weight exp(max_c -
/// max) to cw[c] and the merged denominator, max and NaN flag.
__device__ __forceinline__ void chunkWeights(float mc, float lc, bool has,
                                             int lane, float *cw, float &den,
                                             float &max, bool &nan) {
  const bool n = __any_sync(0xffffffffu, mc != mc);
  const float mm = warpMax(mc != mc ? -INFINITY : mc);
  const float w =
      mc == -INFINITY || mm == -INFINITY || n ? 0.0f : expf(mc - mm);
  const float d = warpSum(w * lc);
  if (has)
    cw[lane] = w;
  if (lane == 0) {
    den = d;
    max = mm;
    nan = n;
  }
}

/// Grid (rows, chunks): block (row, c) handles keys [c * keys, (c + 1) *
/// keys) of query row `row`, `keys` = 4 * G * passes. In each pass each
/// warp takes G keys (attnGroup): each lane holds NI elements of q and of
/// the G key and value rows (every load of the pass in flight at once;
/// 128-byte coalesced a warp, or one request a row, below), the dots
/// reduce by shuffles, and the warp keeps a running (max, sum, sum of p *
/// v) over its passes (online softmax). The
/// warps combine in shared memory; the block's partial result goes to
/// scratch[row, c], and the last block of the row to finish merges them.
/// NI = ceil(max(D, Dv) / 32) elements per lane. Cluster: the row's
/// blocks are one thread-block cluster (Hopper), and they merge through
/// distributed shared memory instead: each leaves its partial result in
/// its own shared memory, and after a cluster barrier block 0 reads them
/// all (no scratch, no counter, no memory round trips for the merge).
/// HalfPast: the past rows are float16 (a.pastKHalf / pastVHalf, a
/// runtime's 16-bit KV cache): a warp takes twice the keys a pass, kept in
/// registers as loaded and widened as used, so that it has the bytes in
/// flight of a float32 pass. (With the float32 pass's 4 keys, a step over
/// a float16 cache took as many memory round trips as over a float32 one,
/// and was no faster.) The passes cover the past only; the new rows
/// (float32, j >= P) follow them, a key a warp at a time.
template <int NI, bool Cluster, bool HalfPast>
__global__ void __launch_bounds__(kAttnThreads)
decodeAttentionKernel(DecodeAttention a, int passes, float *scratch,
                      int *counters) {
  constexpr int G = attnGroup(HalfPast), Keys = kAttnWarps * G;
  pdlTrigger();
  __shared__ float wm[kAttnWarps], wl[kAttnWarps];
  __shared__ float wacc[kAttnWarps][kAttnMaxHead];
  const int D = int(a.D), Dv = int(a.Dv);
  const int64_t row = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t i = row % a.Sq, h = (row / a.Sq) % a.Hq, b = row / (a.Sq * a.Hq);
  const int64_t group = a.Hq / a.Hk, hk = h / group, bh = b * a.Hk + hk;
  // Row i of head h in q and out.
  const int64_t qRow = headRow(a.tokenMajor, b, h, i, a.Hq, a.Sq);
  const int64_t T = a.P + a.Sk;
  int64_t jEnd = T;
  if (a.causal) {
    const int64_t lim = i + (T - a.Sq) + 1;
    jEnd = lim < 0 ? 0 : lim < T ? lim : T;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Element e of the lane's share of a row: elements l, l + 32, ... of
  // lane l (each of the NI loads of a row 128-byte coalesced); over a
  // float16 past whose rows are 32 * NI elements (32, 64 or 128 wide
  // heads), elements l * NI .. l * NI + NI - 1 instead, so that a lane
  // loads its part of a past row in one 2-, 4- or 8-byte load (`vecPast`:
  // a warp reads a row in one request, not NI of 64 bytes). (The same
  // layout with 16-byte loads of a float32 past measured no faster: 1-2 %
  // slower, H100.)
  const bool vecPast = HalfPast && (NI == 1 || NI == 2 || NI == 4) &&
                       D == 32 * NI && Dv == 32 * NI &&
                       alignedTo(a.pastKHalf, 2 * NI) &&
                       alignedTo(a.pastVHalf, 2 * NI);
  auto el = [&](int e) { return vecPast ? lane * NI + e : lane + 32 * e; };
  // The keys the passes cover: all, or over a float16 past only the past
  // (the new rows, float32, follow the passes one at a time).
  const int64_t jLim = HalfPast ? min(jEnd, a.P) : jEnd;
  // A pass's key and value rows: warp keys j0 .. j0 + G - 1 (clamped to
  // jLim - 1; those past it are masked below), the past rows (j < P) or
  // the new; a float16 past's kept as loaded (pairs of elements), widened
  // as they are used.
  using Row = std::conditional_t<HalfPast, __half2[(NI + 1) / 2], float[NI]>;
  Row kv[G], vv[G];
  auto at = [](const Row &r, int e) -> float {
    if constexpr (HalfPast)
      return e % 2 ? __high2float(r[e / 2]) : __low2float(r[e / 2]);
    else
      return r[e];
  };
  auto loadRows = [&](int pass, bool past) {
    const int64_t j0 = (chunk * passes + pass) * Keys + warp * G;
#pragma unroll
    for (int t = 0; t < G; ++t) {
      const int64_t j = min(j0 + t, jLim - 1);
      if ((j < a.P) != past)
        continue;
      if constexpr (HalfPast) {
        const int64_t r = (b * a.Hk + hk) * a.P + j;
        const __half *kh =
            reinterpret_cast<const __half *>(a.pastKHalf) + r * D;
        const __half *vh =
            reinterpret_cast<const __half *>(a.pastVHalf) + r * Dv;
        if (vecPast) {
          laneLoadPairs<NI>(kh, lane, kv[t]);
          laneLoadPairs<NI>(vh, lane, vv[t]);
          continue;
        }
        const __half zero = __float2half(0.0f);
#pragma unroll
        for (int e = 0; e < NI; e += 2) {
          const int d0 = el(e), d1 = el(e + 1);
          const bool second = e + 1 < NI;
          kv[t][e / 2] = __halves2half2(d0 < D ? kh[d0] : zero,
                                        second && d1 < D ? kh[d1] : zero);
          vv[t][e / 2] = __halves2half2(d0 < Dv ? vh[d0] : zero,
                                        second && d1 < Dv ? vh[d1] : zero);
        }
      } else {
        const float *kr =
            keyRow(a.pastK, a.k, b, hk, a.Hk, a.P, a.Sk, j, D, a.tokenMajor);
        const float *vr = keyRow(a.pastV, a.v, b, hk, a.Hk, a.P, a.Sk, j, Dv,
                                 a.tokenMajor);
#pragma unroll
        for (int e = 0; e < NI; ++e) {
          const int d = el(e);
          kv[t][e] = d < D ? kr[d] : 0.0f;
          vv[t][e] = d < Dv ? vr[d] : 0.0f;
        }
      }
    }
  };
  // pastReady: the first pass's past rows are requested before the wait.
  const bool prefetched = a.pastReady && jLim > 0;
  if (prefetched)
    loadRows(0, true);
  pdlWait(); // early launches: q, k, v come from the kernels before
  // The new rows of the present outputs: once per (b, kv head).
  if (chunk == 0 && i == 0 && h % group == 0) {
    if (a.presentK)
      for (int64_t e = threadIdx.x; e < a.Sk * D; e += kAttnThreads)
        a.presentK[(bh * T + a.P) * D + e] =
            a.k[headRow(a.tokenMajor, b, hk, e / D, a.Hk, a.Sk) * D + e % D];
    if (a.presentV)
      for (int64_t e = threadIdx.x; e < a.Sk * Dv; e += kAttnThreads)
        a.presentV[(bh * T + a.P) * Dv + e] =
            a.v[headRow(a.tokenMajor, b, hk, e / Dv, a.Hk, a.Sk) * Dv +
                e % Dv];
  }
  const int64_t mRow = b * a.mStr[0] + h * a.mStr[1] + i * a.mStr[2];
  float q[NI];
#pragma unroll
  for (int e = 0; e < NI; ++e) {
    const int d = el(e);
    q[e] = d < D ? a.q[qRow * D + d] : 0.0f;
  }
  // The warp's running softmax state.
  float m = -INFINITY, l = 0.0f, acc[NI];
#pragma unroll
  for (int e = 0; e < NI; ++e)
    acc[e] = 0.0f;
  for (int pass = 0; pass < passes; ++pass) {
    const int64_t j0 = (chunk * passes + pass) * Keys + warp * G;
    if (j0 >= jLim)
      break;
    // The mask entries are requested with the keys and values (one memory
    // round trip for all): off = past jEnd or masked out by a boolean mask.
    if (!(prefetched && pass == 0))
      loadRows(pass, true);
    if constexpr (!HalfPast)
      loadRows(pass, false);
    float mk[G];
    bool off[G];
#pragma unroll
    for (int t = 0; t < G; ++t) {
      const int64_t j = min(j0 + t, jLim - 1); // past jLim: masked below
      off[t] = j0 + t >= jLim;
      mk[t] = 0.0f;
      if (!off[t]) {
        if (a.maskF)
          mk[t] = a.maskF[mRow + j * a.mStr[3]];
        else if (a.maskB)
          off[t] = !a.maskB[mRow + j * a.mStr[3]];
      }
    }
    float s[G];
    float mNew = m;
#pragma unroll
    for (int t = 0; t < G; ++t) {
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < NI; ++e)
        dot += q[e] * at(kv[t], e);
      const float sum = warpSum(dot); // every lane takes part
      s[t] = off[t] ? -INFINITY : sum * a.scale + mk[t];
      // A NaN stays (fmaxf would drop it, also on a later key).
      mNew = (mNew != mNew || s[t] != s[t]) ? NAN : fmaxf(mNew, s[t]);
    }
    if (mNew == -INFINITY)
      continue; // every key so far masked out
    const float r = m == -INFINITY ? 0.0f : expf(m - mNew);
    l *= r;
#pragma unroll
    for (int e = 0; e < NI; ++e)
      acc[e] *= r;
#pragma unroll
    for (int t = 0; t < G; ++t) {
      const float p = s[t] == -INFINITY ? 0.0f : expf(s[t] - mNew);
      l += p;
#pragma unroll
      for (int e = 0; e < NI; ++e)
        acc[e] += p * at(vv[t], e);
    }
    m = mNew;
  }
  // Over a float16 past, the new rows the block's keys take in (j >= P,
  // a few), a key a warp at a time.
  if constexpr (HalfPast) {
    const int64_t span = int64_t(passes) * Keys;
    const int64_t lo = max(a.P, chunk * span), hi = min(jEnd, (chunk + 1) * span);
    for (int64_t j = lo + warp; j < hi; j += kAttnWarps) {
      const float *kr =
          a.k + headRow(a.tokenMajor, b, hk, j - a.P, a.Hk, a.Sk) * D;
      const float *vr =
          a.v + headRow(a.tokenMajor, b, hk, j - a.P, a.Hk, a.Sk) * Dv;
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < NI; ++e) {
        const int d = el(e);
        dot += q[e] * (d < D ? kr[d] : 0.0f);
      }
      const float sum = warpSum(dot);
      float mk = 0.0f;
      bool off = false;
      if (a.maskF)
        mk = a.maskF[mRow + j * a.mStr[3]];
      else if (a.maskB)
        off = !a.maskB[mRow + j * a.mStr[3]];
      const float sj = off ? -INFINITY : sum * a.scale + mk;
      const float mNew = (m != m || sj != sj) ? NAN : fmaxf(m, sj);
      if (mNew == -INFINITY)
        continue;
      const float r = m == -INFINITY ? 0.0f : expf(m - mNew);
      const float p = sj == -INFINITY ? 0.0f : expf(sj - mNew);
      l = l * r + p;
#pragma unroll
      for (int e = 0; e < NI; ++e) {
        const int d = el(e);
        acc[e] = acc[e] * r + p * (d < Dv ? vr[d] : 0.0f);
      }
      m = mNew;
    }
  }
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < NI; ++e) {
    const int d = el(e);
    if (d < Dv)
      wacc[warp][d] = acc[e];
  }
  __syncthreads();
  // The block's (max, sum, sum of p * v): thread d takes element d.
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < kAttnWarps; ++w)
    M = fmaxf(M, wm[w]);
  bool nanM = false;
#pragma unroll
  for (int w = 0; w < kAttnWarps; ++w)
    nanM |= wm[w] != wm[w];
  if (nanM)
    M = NAN;
  float L = 0.0f;
#pragma unroll
  for (int w = 0; w < kAttnWarps; ++w)
    if (wm[w] != -INFINITY)
      L += expf(wm[w] - M) * wl[w];
  __shared__ float own[Cluster ? kAttnMaxHead + 2 : 1];
  float *part = Cluster ? own : scratch + (row * chunks + chunk) * (Dv + 2);
  const bool single = !Cluster && chunks == 1;
  for (int d = threadIdx.x; d < Dv; d += kAttnThreads) {
    float num = 0.0f;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w)
      if (wm[w] != -INFINITY)
        num += expf(wm[w] - M) * wacc[w][d];
    if (single)
      a.out[qRow * Dv + d] = M != M ? M : (M == -INFINITY ? 0.0f : num / L);
    else
      part[2 + d] = num;
  }
  if (single)
    return;
  // The merge's chunk weights, denominator, max and NaN flag.
  __shared__ float cw[kAttnMaxChunks];
  __shared__ float mergeDen, mergeMax;
  __shared__ bool mergeNaN;
  const int nChunks = int(chunks);
  if constexpr (Cluster) {
    if (threadIdx.x == 0) {
      own[0] = M;
      own[1] = L;
    }
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync(); // every block's partial result is in its shared memory
    if (chunk == 0) {
      if (warp == 0) {
        const bool has = lane < nChunks;
        const float *rp = has ? cluster.map_shared_rank(own, lane) : own;
        chunkWeights(has ? rp[0] : -INFINITY, has ? rp[1] : 0.0f, has, lane,
                     cw, mergeDen, mergeMax, mergeNaN);
      }
      __syncthreads();
      const float den = mergeDen, MM = mergeMax;
      const bool nan = mergeNaN;
      for (int d = threadIdx.x; d < Dv; d += kAttnThreads) {
        float num = 0.0f;
        if (!nan && MM != -INFINITY)
          for (int c = 0; c < nChunks; ++c)
            num += cw[c] * cluster.map_shared_rank(own, c)[2 + d];
        a.out[qRow * Dv + d] = nan ? NAN : (MM == -INFINITY ? 0.0f : num / den);
      }
    }
    cluster.sync(); // block 0 has read every block's shared memory
    return;
  }
  if (threadIdx.x == 0) {
    part[0] = M;
    part[1] = L;
  }
  if (!lastBlockToArrive(counters + row, int(chunks)))
    return;
  // The merge in two memory round trips: warp 0 reads every chunk's (max,
  // sum) at once (chunks <= kAttnMaxChunks = 32, a lane each) and makes the
  // chunks' weights; then each thread reads its element of every chunk,
  // those loads all in flight together.
  const float *parts = scratch + row * chunks * (Dv + 2);
  if (warp == 0) {
    const bool has = lane < nChunks;
    chunkWeights(has ? __ldcg(parts + lane * (Dv + 2)) : -INFINITY,
                 has ? __ldcg(parts + lane * (Dv + 2) + 1) : 0.0f, has, lane,
                 cw, mergeDen, mergeMax, mergeNaN);
  }
  __syncthreads();
  const float den = mergeDen, MM = mergeMax;
  const bool nan = mergeNaN;
  for (int d = threadIdx.x; d < Dv; d += kAttnThreads) {
    float num = 0.0f;
    if (!nan && MM != -INFINITY) {
      constexpr int Batch = 8;
      for (int c0 = 0; c0 < nChunks; c0 += Batch) {
        float v[Batch];
#pragma unroll
        for (int u = 0; u < Batch; ++u)
          v[u] = c0 + u < nChunks
                     ? __ldcg(parts + (c0 + u) * (Dv + 2) + 2 + d)
                     : 0.0f;
#pragma unroll
        for (int u = 0; u < Batch; ++u)
          if (c0 + u < nChunks)
            num += cw[c0 + u] * v[u];
      }
    }
    a.out[qRow * Dv + d] = nan ? NAN : (MM == -INFINITY ? 0.0f : num / den);
  }
}

/// Whether `a` reads a float16 past (decodeAttentionKernel's HalfPast).
bool halfPast(const DecodeAttention &a) { return a.P > 0 && a.pastKHalf; }

/// Keys per block and pass: 16, or 32 over a float16 past.
int64_t attentionKeys(const DecodeAttention &a) {
  return int64_t(kAttnWarps) * attnGroup(halfPast(a));
}

/// Passes per block: the fewest that keep a row at no more than
/// kAttnMaxChunks blocks (short contexts: one pass, many blocks).
int attentionPasses(const DecodeAttention &a) {
  const int64_t T = a.P + a.Sk;
  const int64_t perChunk = attentionKeys(a) * int64_t(kAttnMaxChunks);
  return int(std::max<int64_t>(1, (T + perChunk - 1) / perChunk));
}

int64_t attentionChunks(const DecodeAttention &a) {
  const int64_t keys = attentionKeys(a) * attentionPasses(a);
  return std::max<int64_t>(1, (a.P + a.Sk + keys - 1) / keys);
}

} // namespace

template <typename W>
cudaError_t gemvRowsGroup(const float *x, int tokens, int K, int count,
                          const W *const *wt, const int *N,
                          const float *const *bias, ops::Activation act,
                          const float *const *residual, float *const *y,
                          cudaStream_t stream, bool early,
                          const GemvNorm *norm) {
  if (tokens <= 0)
    return cudaSuccess;
  if (tokens > kGemvRowsTokens || count < 1 || count > kGemvGroupMax)
    return cudaErrorInvalidValue;
  constexpr int V = 16 / int(sizeof(W));
  // Tensor cores from kMmaMinTokens tokens (16-bit weights, aligned rows).
  bool mma = sizeof(W) == 2 && tokens >= kMmaMinTokens && !norm &&
             K % 32 == 0 && aligned16(x);
  for (int g = 0; mma && g < count; ++g)
    mma = aligned16(wt[g]);
  const int rowsPerBlock =
      mma ? kMmaRows : gemvRowsPerBlock(tokens, norm != nullptr, early);
  RowsTargets<W> t{};
  t.count = count;
  if (norm) {
    if (!norm->scale)
      return cudaErrorInvalidValue;
    for (int g = 0; g < count; ++g)
      if (!norm->wScale[g])
        return cudaErrorInvalidValue;
    t.norm = *norm;
  }
  bool vec = aligned16(x) && (int64_t(K) * int64_t(sizeof(W))) % 16 == 0 &&
             K % V == 0 && (!norm || aligned16(norm->scale));
  int blocks = 0;
  for (int g = 0; g < count; ++g) {
    if (N[g] < 0)
      return cudaErrorInvalidValue;
    t.wt[g] = wt[g];
    t.bias[g] = bias ? bias[g] : nullptr;
    t.residual[g] = residual ? residual[g] : nullptr;
    t.y[g] = y[g];
    t.N[g] = N[g];
    t.firstBlock[g] = blocks;
    blocks += (N[g] + rowsPerBlock - 1) / rowsPerBlock;
    vec = vec && aligned16(wt[g]);
  }
  if (blocks == 0)
    return cudaSuccess;
  if constexpr (sizeof(W) == 2) {
    if (mma) {
      const dim3 grid{unsigned(blocks)}, block{kMmaWarps * 32};
      cudaError_t e =
          early ? launchKernel(gemvMmaKernel<true, W>, grid, block, 0, stream,
                               true, x, tokens, K, act, t)
                : launchKernel(gemvMmaKernel<false, W>, grid, block, 0, stream,
                               false, x, tokens, K, act, t);
      return e != cudaSuccess ? e : cudaGetLastError();
    }
  }
  cudaError_t e =
      vec ? launchRows<W, true>(tokens, x, K, act, t, blocks, stream, early,
                                norm != nullptr)
          : launchRows<W, false>(tokens, x, K, act, t, blocks, stream, early,
                                 norm != nullptr);
  return e != cudaSuccess ? e : cudaGetLastError();
}

template <typename W>
cudaError_t gemvRowsNormOut(const float *x, const W *wt, int K, int N,
                            const float *bias, ops::Activation act,
                            const float *residual, float *y,
                            const GemvNormOut &norm, cudaStream_t stream) {
  if (!norm.scale || !norm.out || !norm.counter || N <= 0 || K <= 0)
    return cudaErrorInvalidValue;
  constexpr int V = 16 / int(sizeof(W));
  if (N > kGemvNormOutWidth || !aligned16(x) || !aligned16(wt) ||
      !aligned16(norm.scale) || (int64_t(K) * int64_t(sizeof(W))) % 16 != 0 ||
      K % V != 0)
    return cudaErrorNotSupported;
  RowsTargets<W> t{};
  t.count = 1;
  t.wt[0] = wt;
  t.bias[0] = bias;
  t.residual[0] = residual;
  t.y[0] = y;
  t.N[0] = N;
  const int R = gemvRowsPerBlock(1, false, false);
  const dim3 grid{unsigned((N + R - 1) / R)}, block{kRowsThreads};
  const cudaError_t e =
      norm.rms ? launchKernel(gemvRowsNormOutKernel<W, true>, grid, block, 0,
                              stream, false, x, K, act, t, norm)
               : launchKernel(gemvRowsNormOutKernel<W, false>, grid, block, 0,
                              stream, false, x, K, act, t, norm);
  return e != cudaSuccess ? e : cudaGetLastError();
}

template <typename W>
cudaError_t gemvNormTerms(const W *wt, int K, int N, const float *scale,
                          const float *bias, float *terms, cudaStream_t stream) {
  if (!scale || !terms || K <= 0 || N < 0)
    return cudaErrorInvalidValue;
  cudaError_t e = gemvRows<W>(scale, 1, wt, K, N, nullptr,
                              ops::Activation::none, nullptr, terms, stream);
  if (e == cudaSuccess && bias)
    e = gemvRows<W>(bias, 1, wt, K, N, nullptr, ops::Activation::none,
                    nullptr, terms + N, stream);
  return e;
}

namespace {
/// out[i] = table[ids[i / D], i % D] (+ table2[ids2[i / D], i % D]), a
/// negative id counting from its table's end (V, V2 rows).
template <typename T>
__global__ void embeddingKernel(const T *table, int64_t V, const int64_t *ids,
                                const T *table2, int64_t V2,
                                const int64_t *ids2, int64_t n, int64_t D,
                                float *out) {
  pdlTrigger();
  pdlWait(); // launched early (small kernels): inputs and output after it
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * D;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / D, c = i % D;
    const int64_t row = ids[r] < 0 ? ids[r] + V : ids[r];
    float v = toFloat(table[row * D + c]);
    if (table2) {
      const int64_t row2 = ids2[r] < 0 ? ids2[r] + V2 : ids2[r];
      v += toFloat(table2[row2 * D + c]);
    }
    out[i] = v;
  }
}
} // namespace

cudaError_t embeddingRows(const void *table, int64_t V, const int64_t *ids,
                          const void *table2, int64_t V2, const int64_t *ids2,
                          bool half, int64_t n, int64_t D, float *out,
                          cudaStream_t stream, bool early) {
  if (n < 0 || D < 0 || V < 0 || (table2 && (!ids2 || V2 < 0)))
    return cudaErrorInvalidValue;
  if (n == 0 || D == 0)
    return cudaSuccess;
  constexpr int kThreads = 256;
  const dim3 grid{unsigned(blocksFor(n * D, kThreads))};
  return half ? launchKernel(embeddingKernel<__half>, grid, dim3{kThreads}, 0,
                             stream, early, static_cast<const __half *>(table),
                             V, ids, static_cast<const __half *>(table2), V2,
                             ids2, n, D, out)
              : launchKernel(embeddingKernel<float>, grid, dim3{kThreads}, 0,
                             stream, early, static_cast<const float *>(table),
                             V, ids, static_cast<const float *>(table2), V2,
                             ids2, n, D, out);
}

cudaError_t normRows(const float *x, int64_t rows, int64_t width,
                     const float *scale, const float *bias, float epsilon,
                     bool rms, float *y, cudaStream_t stream, bool early) {
  if (rows == 0 || width == 0)
    return cudaSuccess;
  if (rows < 0 || width < 0 || rows > INT32_MAX)
    return cudaErrorInvalidValue;
  const dim3 grid{unsigned(rows)};
  const int w = int(std::min<int64_t>(width, INT32_MAX));
  // A short kernel between GEMVs: launched early, it waits for x at once
  // but its launch overlaps the kernel before.
  auto reg = [&](auto kernel) {
    return launchKernel(kernel, grid, dim3{kNormThreads}, 0, stream, early, x,
                        scale, bias, w, epsilon, y);
  };
  if (width <= 4 * kNormThreads)
    return rms ? reg(normRegKernel<true, 4>) : reg(normRegKernel<false, 4>);
  if (width <= 8 * kNormThreads)
    return rms ? reg(normRegKernel<true, 8>) : reg(normRegKernel<false, 8>);
  if (width <= 16 * kNormThreads)
    return rms ? reg(normRegKernel<true, 16>) : reg(normRegKernel<false, 16>);
  return rms ? launchKernel(normKernel<true>, grid, dim3{kNormBlock}, 0, stream,
                            early, x, scale, bias, width, epsilon, y)
             : launchKernel(normKernel<false>, grid, dim3{kNormBlock}, 0, stream,
                            early, x, scale, bias, width, epsilon, y);
}

namespace {
constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxPer = 8; // loads in flight a thread
constexpr int64_t kArgmaxSpan = int64_t(kArgmaxThreads) * kArgmaxPer;
constexpr int kArgmaxMaxRowsGrid = 65535; // gridDim.y
/// (value, index) a is better than b: larger, or equal at a lower index
/// (NaNs compare false: never better).
__device__ __forceinline__ bool argBetter(float av, int64_t ai, float bv,
                                          int64_t bi) {
  return av > bv || (av == bv && ai < bi);
}
__device__ __forceinline__ void warpArgmax(float &v, int64_t &i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (argBetter(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}
/// The block's best (value, index), in thread 0 (the others' are partial).
__device__ __forceinline__ void blockArgmax(float &v, int64_t &i) {
  __shared__ float sv[kArgmaxThreads / 32];
  __shared__ int64_t si[kArgmaxThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warpArgmax(v, i);
  __syncthreads(); // the arrays' last readers are done
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = i;
  }
  __syncthreads();
  if (warp == 0) {
    constexpr int W = kArgmaxThreads / 32;
    float w = lane < W ? sv[lane] : -INFINITY;
    int64_t wi = lane < W ? si[lane] : INT64_MAX;
    warpArgmax(w, wi);
    v = w;
    i = wi;
  }
}
/// Grid (chunks, rows): block (c, r) takes elements [c, c + 1) *
/// kArgmaxSpan of row r (every load in flight at once), and with more than
/// one chunk leaves its best in the partials and counts itself in the
/// row's counter; the last of the row's blocks merges them (and resets
/// the counter). Row r's id goes to out[r] and, where given, hostOut[r]
/// (pinned host memory, written by the kernel: no copy after it). No
/// candidate (all NaN) or a NaN first element gives 0.
__global__ void __launch_bounds__(kArgmaxThreads)
argmaxRowsKernel(const float *x, int64_t rows, int64_t width,
                 unsigned *counters, float *pv, int64_t *pi, int64_t *out,
                 int64_t *hostOut) {
  pdlTrigger();
  pdlWait(); // launched early: x, the scratch and the ids after the wait
  const int64_t chunks = gridDim.x, c = blockIdx.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float *row = x + r * width;
    float e[kArgmaxPer];
#pragma unroll
    for (int u = 0; u < kArgmaxPer; ++u) {
      const int64_t j = c * kArgmaxSpan + threadIdx.x + u * kArgmaxThreads;
      e[u] = j < width ? row[j] : NAN; // a NaN is never better
    }
    float v = -INFINITY;
    int64_t i = width; // no candidate yet: any -inf element beats it
#pragma unroll
    for (int u = 0; u < kArgmaxPer; ++u) {
      const int64_t j = c * kArgmaxSpan + threadIdx.x + u * kArgmaxThreads;
      if (argBetter(e[u], j, v, i)) {
        v = e[u];
        i = j;
      }
    }
    blockArgmax(v, i);
    if (chunks > 1) {
      if (threadIdx.x == 0) {
        pv[r * chunks + c] = v;
        pi[r * chunks + c] = i;
      }
      if (!lastBlockToArrive(counters + r, unsigned(chunks)))
        continue;
      v = -INFINITY;
      i = width;
      for (int64_t k = threadIdx.x; k < chunks; k += kArgmaxThreads) {
        const float kv = __ldcg(pv + r * chunks + k);
        const int64_t ki = __ldcg(pi + r * chunks + k);
        if (argBetter(kv, ki, v, i)) {
          v = kv;
          i = ki;
        }
      }
      blockArgmax(v, i);
    }
    if (threadIdx.x == 0) {
      const float first = row[0];
      const int64_t id = first != first || i >= width ? 0 : i;
      out[r] = id;
      if (hostOut)
        hostOut[r] = id;
    }
  }
}

int64_t argmaxChunks(int64_t width) {
  return (width + kArgmaxSpan - 1) / kArgmaxSpan;
}
/// The scratch's counters, one a row, rounded up to 8 bytes: the partial
/// ids and then the partial values follow them.
int64_t argmaxCounterBytes(int64_t rows) { return (rows * 4 + 7) / 8 * 8; }
} // namespace

size_t argmaxScratchBytes(int64_t rows, int64_t width) {
  if (rows <= 0 || width <= 0)
    return 0;
  const int64_t chunks = argmaxChunks(width);
  if (chunks == 1)
    return 0;
  return size_t(argmaxCounterBytes(rows) + rows * chunks * 12);
}

cudaError_t argmaxRows(const float *x, int64_t rows, int64_t width,
                       int64_t *out, void *scratch, int64_t *hostOut,
                       cudaStream_t stream, bool early) {
  if (rows == 0)
    return cudaSuccess;
  const int64_t chunks = width > 0 ? argmaxChunks(width) : 0;
  if (rows < 0 || width <= 0 || chunks > INT32_MAX || !x || !out ||
      (chunks > 1 && !scratch))
    return cudaErrorInvalidValue;
  const int64_t gy = std::min<int64_t>(rows, kArgmaxMaxRowsGrid);
  unsigned *counters = static_cast<unsigned *>(scratch);
  char *base = static_cast<char *>(scratch) + argmaxCounterBytes(rows);
  int64_t *pi = reinterpret_cast<int64_t *>(base);
  float *pv = reinterpret_cast<float *>(base + rows * chunks * 8);
  return launchKernel(argmaxRowsKernel, dim3(unsigned(chunks), unsigned(gy)),
                      kArgmaxThreads, 0, stream, early, x, rows, width,
                      counters, pv, pi, out, hostOut);
}

template <typename W>
cudaError_t gemvRows(const float *x, int tokens, const W *wt, int K, int N,
                     const float *bias, ops::Activation act,
                     const float *residual, float *y, cudaStream_t stream,
                     bool early) {
  return gemvRowsGroup<W>(x, tokens, K, 1, &wt, &N, &bias, act, &residual, &y,
                          stream, early);
}

#define SPARSEC_GEMV_ROWS(W)                                                   \
  template cudaError_t gemvRows<W>(const float *, int, const W *, int, int,    \
                                   const float *, ops::Activation,             \
                                   const float *, float *, cudaStream_t,       \
                                   bool);                                      \
  template cudaError_t gemvRowsGroup<W>(                                       \
      const float *, int, int, int, const W *const *, const int *,             \
      const float *const *, ops::Activation, const float *const *,             \
      float *const *, cudaStream_t, bool, const GemvNorm *);                  \
  template cudaError_t gemvNormTerms<W>(const W *, int, int, const float *,    \
                                        const float *, float *, cudaStream_t); \
  template cudaError_t gemvRowsNormOut<W>(                                     \
      const float *, const W *, int, int, const float *, ops::Activation,      \
      const float *, float *, const GemvNormOut &, cudaStream_t);
SPARSEC_GEMV_ROWS(__half)
SPARSEC_GEMV_ROWS(__nv_bfloat16)
SPARSEC_GEMV_ROWS(float)
#undef SPARSEC_GEMV_ROWS

bool earlyLaunchSupported() {
  // The kernels' griddepcontrol instructions exist only when they were
  // compiled for sm_90 or later (PTX JIT from an older target drops them).
  cudaFuncAttributes a{};
  if (cudaFuncGetAttributes(&a, gemvRowsKernel<__half, 1, true, true>) !=
      cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.ptxVersion >= 90 && a.binaryVersion >= 90;
}

bool decodeAttentionSupported(int64_t D, int64_t Dv) {
  return D > 0 && Dv > 0 && D <= kAttnMaxHead && Dv <= kAttnMaxHead;
}

int64_t decodeAttentionRows(const DecodeAttention &a) {
  return a.B * a.Hq * a.Sq;
}

size_t decodeAttentionScratchBytes(const DecodeAttention &a) {
  return sizeof(float) * size_t(decodeAttentionRows(a)) *
         size_t(attentionChunks(a)) * size_t(a.Dv + 2);
}

namespace {
/// Launches the cluster variant of decodeAttentionKernel<NI>: each query
/// row's `chunks` blocks one cluster. Returns false (nothing launched)
/// where the GPU cannot schedule clusters of that size for the kernel.
template <int NI, bool HalfPast>
bool launchAttentionCluster(const DecodeAttention &a, dim3 grid, int passes,
                            cudaStream_t stream, bool early, cudaError_t &e) {
  auto *kernel = decodeAttentionKernel<NI, true, HalfPast>;
  // The largest cluster the kernel can have on this GPU (above 8 needs
  // the non-portable opt-in), queried once.
  static const int maxCluster = [&] {
    if (cudaFuncSetAttribute(kernel,
                             cudaFuncAttributeNonPortableClusterSizeAllowed,
                             1) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3{1, kAttnMaxChunks};
    config.blockDim = dim3{kAttnThreads};
    int size = 0;
    if (cudaOccupancyMaxPotentialClusterSize(&size, kernel, &config) !=
        cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return size;
  }();
  if (int(grid.y) < 2 || int(grid.y) > maxCluster)
    return false;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3{kAttnThreads};
  config.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = grid.y;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = early ? 2 : 1;
  e = cudaLaunchKernelEx(&config, kernel, a, passes,
                         static_cast<float *>(nullptr),
                         static_cast<int *>(nullptr));
  return true;
}

/// SPARSEC_CUDA_ATTN_CLUSTER=0 turns the cluster merge off.
bool attentionClusters() {
  static const bool on = [] {
    const char *p = std::getenv("SPARSEC_CUDA_ATTN_CLUSTER");
    return !p || std::strcmp(p, "0") != 0;
  }();
  return on;
}
/// Launches decodeAttentionKernel<NI>: where a pass a block covers the row
/// (up to 512 keys, 1024 over a float16 past) and the GPU can schedule the
/// row's blocks as one cluster (up to 16 on an H200: 256 or 512 keys),
/// they merge as a cluster; otherwise through memory.
template <int NI, bool HalfPast>
cudaError_t launchAttention(const DecodeAttention &a, dim3 grid, int passes,
                            float *scratch, int *counters, cudaStream_t stream,
                            bool early) {
  cudaError_t e = cudaSuccess;
  if (passes == 1 && attentionClusters() &&
      launchAttentionCluster<NI, HalfPast>(a, grid, passes, stream, early, e))
    return e;
  return launchKernel(decodeAttentionKernel<NI, false, HalfPast>, grid,
                      dim3{kAttnThreads}, 0, stream, early, a, passes, scratch,
                      counters);
}

/// launchAttention<NI> over a float16 past (`half`) or a float32 one.
template <int NI>
cudaError_t launchAttention(bool half, const DecodeAttention &a, dim3 grid,
                            int passes, float *scratch, int *counters,
                            cudaStream_t stream, bool early) {
  return half ? launchAttention<NI, true>(a, grid, passes, scratch, counters,
                                          stream, early)
              : launchAttention<NI, false>(a, grid, passes, scratch, counters,
                                           stream, early);
}
} // namespace

cudaError_t decodeAttention(const DecodeAttention &a, float *scratch,
                            int *counters, cudaStream_t stream, bool early) {
  const int64_t rows = decodeAttentionRows(a);
  if (rows == 0 || a.Dv == 0)
    return cudaSuccess;
  if (!decodeAttentionSupported(a.D, a.Dv) || a.Hk <= 0 || a.Hq % a.Hk != 0 ||
      (a.P > 0 && (a.pastKHalf ? !a.pastVHalf || a.pastK || a.pastV
                               : !a.pastK || !a.pastV || a.pastVHalf)))
    return cudaErrorInvalidValue;
  const bool half = halfPast(a);
  const int64_t chunks = attentionChunks(a);
  const int passes = attentionPasses(a);
  const dim3 grid{static_cast<unsigned>(rows), static_cast<unsigned>(chunks)};
  const int ni = int((std::max(a.D, a.Dv) + 31) / 32);
  cudaError_t e;
  switch (ni) {
  case 1:
    e = launchAttention<1>(half, a, grid, passes, scratch, counters, stream,
                           early);
    break;
  case 2:
    e = launchAttention<2>(half, a, grid, passes, scratch, counters, stream,
                           early);
    break;
  case 3:
    e = launchAttention<3>(half, a, grid, passes, scratch, counters, stream,
                           early);
    break;
  default:
    e = launchAttention<4>(half, a, grid, passes, scratch, counters, stream,
                           early);
    break;
  }
  return e != cudaSuccess ? e : cudaGetLastError();
}

} // namespace sparsec::rt::cuda
