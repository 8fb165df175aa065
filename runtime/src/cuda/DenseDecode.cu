//===- DenseDecode.cu - dense decode kernels ------------------------------===//
//
// Part of the sparsec project.
//
// See sparsec/rt/cuda/DenseDecode.h.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/DenseDecode.h"

#include "DeviceMath.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

namespace sparsec::rt::cuda {
namespace {

//===----------------------------------------------------------------------===//
// gemvRows
//===----------------------------------------------------------------------===//

constexpr int kRowsThreads = 256; // 8 warps per block
constexpr int kRowsPerBlock = 4;

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
/// coherent loads (ld.global.cg), which stay behind pdlWait; read-only-path
/// loads (__ldg), which a normal launch uses, may be scheduled ahead of it.
template <int V, bool Vec, bool Coherent>
__device__ __forceinline__ void loadX(const float *p, float *o) {
  if constexpr (Vec && V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V; i += 4) {
      const float4 *q = reinterpret_cast<const float4 *>(p + i);
      float4 f = Coherent ? __ldcg(q) : __ldg(q);
      o[i] = f.x;
      o[i + 1] = f.y;
      o[i + 2] = f.z;
      o[i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i)
      o[i] = Coherent ? __ldcg(p + i) : __ldg(p + i);
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
  GemvNorm norm; // used by the Norm kernels
};

/// Sums of M values over the block; every thread gets them.
template <int M> __device__ __forceinline__ void blockSums(float (&v)[M]) {
  __shared__ float part[kRowsThreads / 32][M];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float w = warpSum(v[m]);
    if (lane == 0)
      part[warp][m] = w;
  }
  __syncthreads();
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float t = 0.0f;
#pragma unroll
    for (int q = 0; q < kRowsThreads / 32; ++q)
      t += part[q][m];
    v[m] = t;
  }
  __syncthreads(); // part is reused by the next call
}

/// Norm kernels: x [M, K] is staged in shared memory (dynamic, M * K
/// floats, 16-byte loads), each block computes the M rows' mean and
/// variance (two passes over shared memory; RMS: the mean square) and
/// normalises the rows in place with the norm's scale and bias, which the
/// GEMV then reads instead of x.
template <int M>
__device__ __forceinline__ void normaliseX(const float *x, int K,
                                           const GemvNorm &n, float *xs) {
  const int n4 = M * K / 4;
  for (int i = threadIdx.x; i < n4; i += kRowsThreads)
    reinterpret_cast<float4 *>(xs)[i] =
        __ldcg(reinterpret_cast<const float4 *>(x) + i);
  __syncthreads();
  float mean[M], q[M];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    mean[m] = 0.0f;
    if (!n.rms)
      for (int k = threadIdx.x; k < K; k += kRowsThreads)
        mean[m] += xs[m * K + k];
  }
  if (!n.rms) {
    blockSums<M>(mean);
#pragma unroll
    for (int m = 0; m < M; ++m)
      mean[m] /= float(K);
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    q[m] = 0.0f;
    for (int k = threadIdx.x; k < K; k += kRowsThreads) {
      const float c = xs[m * K + k] - mean[m];
      q[m] += c * c;
    }
  }
  blockSums<M>(q);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float inv = rsqrtf(q[m] / float(K) + n.epsilon);
    for (int k = threadIdx.x; k < K; k += kRowsThreads) {
      const float v = (xs[m * K + k] - mean[m]) * inv * n.scale[k];
      xs[m * K + k] = n.bias ? v + n.bias[k] : v;
    }
  }
  __syncthreads();
}

/// Block b computes neurons [4b, 4b + 4) for all M tokens: thread t takes
/// chunks t, t + 256, ... of the four rows (4 loads in flight per chunk
/// step, two steps unrolled), then warp shuffles and one shared-memory pass
/// reduce the M x 4 sums. `Early` (a programmatic dependent launch): the
/// weights depend on no earlier kernel, so the first step's loads are
/// issued before pdlWait and overlap the kernel before (at K <= 2048 fp16
/// that is all of them); x is read after it.
/// `Norm`: x is normalised first (normaliseX), and read from shared
/// memory.
template <typename W, int M, bool Vec, bool Early, bool Norm = false>
__global__ void __launch_bounds__(kRowsThreads)
gemvRowsKernel(const float *x, int K, Activation act, RowsTargets<W> t) {
  pdlTrigger();
  using C = Chunk<W, Vec>;
  constexpr int V = C::V, R = kRowsPerBlock;
  static_assert(!Norm || (Vec && V % 4 == 0), "norm kernels read float4s");
  // This block's weight (compile-time indices: the targets stay in the
  // parameter space).
  const W *wt = t.wt[0];
  const float *bias = t.bias[0], *residual = t.residual[0];
  float *y = t.y[0];
  int N = t.N[0], first = 0;
#pragma unroll
  for (int g = 1; g < kGemvGroupMax; ++g)
    if (g < t.count && int(blockIdx.x) >= t.firstBlock[g]) {
      wt = t.wt[g];
      bias = t.bias[g];
      residual = t.residual[g];
      y = t.y[g];
      N = t.N[g];
      first = t.firstBlock[g];
    }
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
  extern __shared__ float4 normalised[]; // Norm: M x K floats
  float *xs = reinterpret_cast<float *>(normalised);
  auto step = [&](int c, const float (&w)[R][V]) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv[V];
      if constexpr (Norm) {
        // 16-byte shared-memory reads (V is 4 or 8 in the Vec kernels):
        // 2-way bank conflicts instead of 8-way for scalar reads.
#pragma unroll
        for (int v = 0; v < V; v += 4) {
          const float4 f =
              *reinterpret_cast<const float4 *>(xs + m * K + c * V + v);
          xv[v] = f.x;
          xv[v + 1] = f.y;
          xv[v + 2] = f.z;
          xv[v + 3] = f.w;
        }
      } else {
        loadX<V, Vec, Early>(x + int64_t(m) * K + c * V, xv);
      }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int v = 0; v < V; ++v)
          acc[m][r] += xv[v] * w[r][v];
    }
  };
  int c = threadIdx.x;
  if constexpr (Early || Norm) {
    // The first step's weights are requested before x is waited for (and
    // normalised).
    float w0[R][V];
    if (c < chunks)
#pragma unroll
      for (int r = 0; r < R; ++r)
        C::load(rows[r] + c * V, w0[r]);
    pdlWait();
    if constexpr (Norm)
      normaliseX<M>(x, K, t.norm, xs);
    if (c < chunks)
      step(c, w0);
    c += kRowsThreads;
  }
#pragma unroll 2
  for (; c < chunks; c += kRowsThreads) {
    float w[R][V];
#pragma unroll
    for (int r = 0; r < R; ++r)
      C::load(rows[r] + c * V, w[r]);
    step(c, w);
  }
  __shared__ float red[kRowsThreads / 32][M * R];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = warpSum(acc[m][r]);
      if (lane == 0)
        red[warp][m * R + r] = s;
    }
  __syncthreads();
  if (threadIdx.x < M * R) {
    const int m = threadIdx.x / R, r = threadIdx.x % R, n = n0 + r;
    if (n < N) {
      float s = 0.0f;
#pragma unroll
      for (int q = 0; q < kRowsThreads / 32; ++q)
        s += red[q][threadIdx.x];
      if (bias)
        s += bias[n];
      s = activate(act, s);
      if (residual)
        s += residual[int64_t(m) * N + n];
      y[int64_t(m) * N + n] = s;
    }
  }
}

template <typename W, int M, bool Vec>
cudaError_t launchRowsM(dim3 grid, const float *x, int K, Activation act,
                        const RowsTargets<W> &t, cudaStream_t s, bool early,
                        bool norm) {
  if constexpr (Vec) {
    if (norm) {
      const size_t smem = sizeof(float) * size_t(M) * size_t(K);
      return early ? launchKernel(gemvRowsKernel<W, M, true, true, true>, grid,
                                  dim3{kRowsThreads}, smem, s, true, x, K, act,
                                  t)
                   : launchKernel(gemvRowsKernel<W, M, true, false, true>,
                                  grid, dim3{kRowsThreads}, smem, s, false, x,
                                  K, act, t);
    }
  }
  return early ? launchKernel(gemvRowsKernel<W, M, Vec, true>, grid,
                              dim3{kRowsThreads}, 0, s, true, x, K, act, t)
               : launchKernel(gemvRowsKernel<W, M, Vec, false>, grid,
                              dim3{kRowsThreads}, 0, s, false, x, K, act, t);
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

bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

//===----------------------------------------------------------------------===//
// decodeAttention
//===----------------------------------------------------------------------===//

constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kAttnGroup = 4;                  // keys per warp and pass
constexpr int kAttnKeys = kAttnWarps * kAttnGroup; // keys per block and pass
constexpr int kAttnMaxChunks = 32;             // blocks per query row
constexpr int kAttnMaxHead = 128;

__device__ __forceinline__ const float *keyRow(const float *past,
                                               const float *cur, int64_t bh,
                                               int64_t P, int64_t Sk,
                                               int64_t j, int64_t width) {
  return j < P ? past + (bh * P + j) * width
               : cur + (bh * Sk + (j - P)) * width;
}

/// Grid (rows, chunks): block (row, c) handles keys [c * keys, (c + 1) *
/// keys) of query row `row`, `keys` = 16 * passes. In each pass each warp
/// takes 4 keys: lane l holds elements l, l + 32, ... of q and of the 4
/// key and value rows (every load of the pass in flight at once, 128-byte
/// coalesced per warp), the dots reduce by shuffles, and the warp keeps a
/// running (max, sum, sum of p * v) over its passes (online softmax). The
/// warps combine in shared memory; the block's partial result goes to
/// scratch[row, c], and the last block of the row to finish merges them.
/// NI = ceil(max(D, Dv) / 32) elements per lane.
template <int NI>
__global__ void __launch_bounds__(kAttnThreads)
decodeAttentionKernel(DecodeAttention a, int passes, float *scratch,
                      int *counters) {
  pdlTrigger();
  __shared__ float wm[kAttnWarps], wl[kAttnWarps];
  __shared__ float wacc[kAttnWarps][kAttnMaxHead];
  const int D = int(a.D), Dv = int(a.Dv);
  const int64_t row = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t i = row % a.Sq, h = (row / a.Sq) % a.Hq, b = row / (a.Sq * a.Hq);
  const int64_t group = a.Hq / a.Hk, bh = b * a.Hk + h / group;
  const int64_t T = a.P + a.Sk;
  pdlWait(); // early launches: q, k, v come from the kernels before
  // The new rows of the present outputs: once per (b, kv head).
  if (chunk == 0 && i == 0 && h % group == 0) {
    if (a.presentK)
      for (int64_t e = threadIdx.x; e < a.Sk * D; e += kAttnThreads)
        a.presentK[(bh * T + a.P) * D + e] = a.k[bh * a.Sk * D + e];
    if (a.presentV)
      for (int64_t e = threadIdx.x; e < a.Sk * Dv; e += kAttnThreads)
        a.presentV[(bh * T + a.P) * Dv + e] = a.v[bh * a.Sk * Dv + e];
  }
  int64_t jEnd = T;
  if (a.causal) {
    const int64_t lim = i + (T - a.Sq) + 1;
    jEnd = lim < 0 ? 0 : lim < T ? lim : T;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t mRow = b * a.mStr[0] + h * a.mStr[1] + i * a.mStr[2];
  float q[NI];
#pragma unroll
  for (int e = 0; e < NI; ++e) {
    const int d = lane + 32 * e;
    q[e] = d < D ? a.q[row * D + d] : 0.0f;
  }
  // The warp's running softmax state.
  float m = -INFINITY, l = 0.0f, acc[NI];
#pragma unroll
  for (int e = 0; e < NI; ++e)
    acc[e] = 0.0f;
  for (int pass = 0; pass < passes; ++pass) {
    const int64_t j0 = (chunk * passes + pass) * kAttnKeys + warp * kAttnGroup;
    if (j0 >= jEnd)
      break;
    float kv[kAttnGroup][NI], vv[kAttnGroup][NI];
#pragma unroll
    for (int t = 0; t < kAttnGroup; ++t) {
      const int64_t j = min(j0 + t, jEnd - 1); // past jEnd: masked below
      const float *kr = keyRow(a.pastK, a.k, bh, a.P, a.Sk, j, D);
      const float *vr = keyRow(a.pastV, a.v, bh, a.P, a.Sk, j, Dv);
#pragma unroll
      for (int e = 0; e < NI; ++e) {
        const int d = lane + 32 * e;
        kv[t][e] = d < D ? kr[d] : 0.0f;
        vv[t][e] = d < Dv ? vr[d] : 0.0f;
      }
    }
    float s[kAttnGroup];
    float mNew = m;
#pragma unroll
    for (int t = 0; t < kAttnGroup; ++t) {
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < NI; ++e)
        dot += q[e] * kv[t][e];
      s[t] = warpSum(dot) * a.scale;
      const int64_t j = j0 + t;
      if (j >= jEnd)
        s[t] = -INFINITY;
      else if (a.maskF)
        s[t] += a.maskF[mRow + j * a.mStr[3]];
      else if (a.maskB && !a.maskB[mRow + j * a.mStr[3]])
        s[t] = -INFINITY;
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
    for (int t = 0; t < kAttnGroup; ++t) {
      const float p = s[t] == -INFINITY ? 0.0f : expf(s[t] - mNew);
      l += p;
#pragma unroll
      for (int e = 0; e < NI; ++e)
        acc[e] += p * vv[t][e];
    }
    m = mNew;
  }
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < NI; ++e) {
    const int d = lane + 32 * e;
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
  float *part = scratch + (row * chunks + chunk) * (Dv + 2);
  const bool single = chunks == 1;
  for (int d = threadIdx.x; d < Dv; d += kAttnThreads) {
    float num = 0.0f;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w)
      if (wm[w] != -INFINITY)
        num += expf(wm[w] - M) * wacc[w][d];
    if (single)
      a.out[row * Dv + d] = M != M ? M : (M == -INFINITY ? 0.0f : num / L);
    else
      part[2 + d] = num;
  }
  if (single)
    return;
  if (threadIdx.x == 0) {
    part[0] = M;
    part[1] = L;
  }
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int done = atomicAdd(&counters[row], 1);
    last = done == int(chunks) - 1;
    if (last)
      counters[row] = 0; // ready for the next launch (graph replays)
  }
  __syncthreads();
  if (!last)
    return;
  __threadfence();
  const float *parts = scratch + row * chunks * (Dv + 2);
  float MM = -INFINITY;
  bool nan = false;
  for (int64_t c = 0; c < chunks; ++c) {
    const float mc = __ldcg(parts + c * (Dv + 2));
    nan |= mc != mc;
    MM = fmaxf(MM, mc);
  }
  for (int d = threadIdx.x; d < Dv; d += kAttnThreads) {
    float num = 0.0f, den = 0.0f;
    if (!nan && MM != -INFINITY)
      for (int64_t c = 0; c < chunks; ++c) {
        const float *pc = parts + c * (Dv + 2);
        const float mc = __ldcg(pc);
        if (mc == -INFINITY)
          continue;
        const float w = expf(mc - MM);
        den += w * __ldcg(pc + 1);
        num += w * __ldcg(pc + 2 + d);
      }
    a.out[row * Dv + d] = nan ? NAN : (MM == -INFINITY ? 0.0f : num / den);
  }
}

/// Passes of 16 keys per block: the fewest that keep a row at no more
/// than kAttnMaxChunks blocks (short contexts: one pass, many blocks).
int attentionPasses(const DecodeAttention &a) {
  const int64_t T = a.P + a.Sk;
  const int64_t perChunk = kAttnKeys * int64_t(kAttnMaxChunks);
  return int(std::max<int64_t>(1, (T + perChunk - 1) / perChunk));
}

int64_t attentionChunks(const DecodeAttention &a) {
  const int64_t keys = int64_t(kAttnKeys) * attentionPasses(a);
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
  RowsTargets<W> t{};
  t.count = count;
  if (norm) {
    if (!norm->scale || !gemvNormSupported(tokens, K))
      return cudaErrorNotSupported;
    t.norm = *norm;
  }
  bool vec = aligned16(x) && (int64_t(K) * int64_t(sizeof(W))) % 16 == 0 &&
             K % V == 0;
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
    blocks += (N[g] + kRowsPerBlock - 1) / kRowsPerBlock;
    vec = vec && aligned16(wt[g]);
  }
  if (norm && !vec)
    return cudaErrorNotSupported; // the norm kernels stage x with float4
  if (blocks == 0)
    return cudaSuccess;
  cudaError_t e =
      vec ? launchRows<W, true>(tokens, x, K, act, t, blocks, stream, early,
                                norm != nullptr)
          : launchRows<W, false>(tokens, x, K, act, t, blocks, stream, early,
                                 false);
  return e != cudaSuccess ? e : cudaGetLastError();
}

bool gemvNormSupported(int tokens, int K) {
  return tokens >= 1 && tokens <= kGemvRowsTokens && K > 0 && K % 4 == 0 &&
         int64_t(tokens) * K <= kGemvNormFloats;
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
      float *const *, cudaStream_t, bool, const GemvNorm *);
SPARSEC_GEMV_ROWS(__half)
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

cudaError_t decodeAttention(const DecodeAttention &a, float *scratch,
                            int *counters, cudaStream_t stream, bool early) {
  const int64_t rows = decodeAttentionRows(a);
  if (rows == 0 || a.Dv == 0)
    return cudaSuccess;
  if (!decodeAttentionSupported(a.D, a.Dv) || a.Hk <= 0 || a.Hq % a.Hk != 0 ||
      (a.P > 0 && (!a.pastK || !a.pastV)))
    return cudaErrorInvalidValue;
  const int64_t chunks = attentionChunks(a);
  const int passes = attentionPasses(a);
  const dim3 grid{static_cast<unsigned>(rows), static_cast<unsigned>(chunks)};
  const int ni = int((std::max(a.D, a.Dv) + 31) / 32);
  cudaError_t e;
  switch (ni) {
  case 1:
    e = launchKernel(decodeAttentionKernel<1>, grid, dim3{kAttnThreads}, 0,
                     stream, early, a, passes, scratch, counters);
    break;
  case 2:
    e = launchKernel(decodeAttentionKernel<2>, grid, dim3{kAttnThreads}, 0,
                     stream, early, a, passes, scratch, counters);
    break;
  case 3:
    e = launchKernel(decodeAttentionKernel<3>, grid, dim3{kAttnThreads}, 0,
                     stream, early, a, passes, scratch, counters);
    break;
  default:
    e = launchKernel(decodeAttentionKernel<4>, grid, dim3{kAttnThreads}, 0,
                     stream, early, a, passes, scratch, counters);
    break;
  }
  return e != cudaSuccess ? e : cudaGetLastError();
}

} // namespace sparsec::rt::cuda
