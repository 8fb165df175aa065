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

/// Block b computes neurons [4b, 4b + 4) for all M tokens: thread t takes
/// chunks t, t + 256, ... of the four rows (4 loads in flight per chunk
/// step, two steps unrolled), then warp shuffles and one shared-memory pass
/// reduce the M x 4 sums. `Early` (a programmatic dependent launch): the
/// weights depend on no earlier kernel, so the first step's loads are
/// issued before pdlWait and overlap the kernel before (at K <= 2048 fp16
/// that is all of them); x is read after it.
template <typename W, int M, bool Vec, bool Early>
__global__ void __launch_bounds__(kRowsThreads)
gemvRowsKernel(const float *x, const W *wt, int K, int N, const float *bias,
               Activation act, const float *residual, float *y) {
  pdlTrigger();
  using C = Chunk<W, Vec>;
  constexpr int V = C::V, R = kRowsPerBlock;
  const int n0 = blockIdx.x * R;
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
  auto step = [&](int c, const float (&w)[R][V]) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv[V];
      loadX<V, Vec, Early>(x + int64_t(m) * K + c * V, xv);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int v = 0; v < V; ++v)
          acc[m][r] += xv[v] * w[r][v];
    }
  };
  int c = threadIdx.x;
  if constexpr (Early) {
    float w0[R][V];
    if (c < chunks)
#pragma unroll
      for (int r = 0; r < R; ++r)
        C::load(rows[r] + c * V, w0[r]);
    pdlWait();
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
cudaError_t launchRowsM(dim3 grid, const float *x, const W *wt, int K, int N,
                        const float *bias, Activation act, const float *res,
                        float *y, cudaStream_t s, bool early) {
  return early ? launchKernel(gemvRowsKernel<W, M, Vec, true>, grid,
                              dim3{kRowsThreads}, 0, s, true, x, wt, K, N, bias,
                              act, res, y)
               : launchKernel(gemvRowsKernel<W, M, Vec, false>, grid,
                              dim3{kRowsThreads}, 0, s, false, x, wt, K, N,
                              bias, act, res, y);
}

template <typename W, bool Vec>
cudaError_t launchRows(int M, const float *x, const W *wt, int K, int N,
                       const float *bias, Activation act, const float *res,
                       float *y, cudaStream_t s, bool early) {
  const dim3 grid{static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock)};
#define SPARSEC_ROWS_CASE(m)                                                   \
  case m:                                                                      \
    return launchRowsM<W, m, Vec>(grid, x, wt, K, N, bias, act, res, y, s,     \
                                  early);
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
constexpr int kAttnKeys = 32; // keys per block (one chunk)
constexpr int kAttnMaxHead = 128;

__device__ __forceinline__ const float *keyRow(const float *past,
                                               const float *cur, int64_t bh,
                                               int64_t P, int64_t Sk,
                                               int64_t j, int64_t width) {
  return j < P ? past + (bh * P + j) * width
               : cur + (bh * Sk + (j - P)) * width;
}

/// Stages `n` rows (j0..) of width `width` into shared memory with row
/// stride `stride`, every load of the block issued before any is used.
template <bool Vec>
__device__ __forceinline__ void stageRows(float *dst, int stride,
                                          const float *past, const float *cur,
                                          int64_t bh, int64_t P, int64_t Sk,
                                          int64_t j0, int n, int width) {
  if constexpr (Vec) {
    const int per = width / 4;
    for (int e = threadIdx.x; e < n * per; e += kAttnThreads) {
      const int jj = e / per, c = (e % per) * 4;
      float4 f = *reinterpret_cast<const float4 *>(
          keyRow(past, cur, bh, P, Sk, j0 + jj, width) + c);
      float *o = dst + jj * stride + c;
      o[0] = f.x;
      o[1] = f.y;
      o[2] = f.z;
      o[3] = f.w;
    }
  } else {
    for (int e = threadIdx.x; e < n * width; e += kAttnThreads) {
      const int jj = e / width, c = e % width;
      dst[jj * stride + c] = keyRow(past, cur, bh, P, Sk, j0 + jj, width)[c];
    }
  }
}

/// Grid (rows, chunks): block (row, c) handles keys [32c, 32c + 32) of
/// query row `row`; partial results (max, sum, sum of p * v) go to
/// scratch[row, c]; the last block of the row to finish merges them.
template <bool Vec>
__global__ void __launch_bounds__(kAttnThreads)
decodeAttentionKernel(DecodeAttention a, float *scratch, int *counters) {
  pdlTrigger();
  extern __shared__ float sm[];
  const int D = int(a.D), Dv = int(a.Dv);
  float *qs = sm;                          // D
  float *ks = qs + D;                      // kAttnKeys x (D + 1)
  float *vs = ks + kAttnKeys * (D + 1);    // kAttnKeys x Dv
  float *ps = vs + kAttnKeys * Dv;         // kAttnKeys
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
  const int64_t j0 = chunk * kAttnKeys;
  const int n = int(max(int64_t(0), min(int64_t(kAttnKeys), jEnd - j0)));
  for (int d = threadIdx.x; d < D; d += kAttnThreads)
    qs[d] = a.q[row * D + d];
  stageRows<Vec>(ks, D + 1, a.pastK, a.k, bh, a.P, a.Sk, j0, n, D);
  stageRows<Vec>(vs, Dv, a.pastV, a.v, bh, a.P, a.Sk, j0, n, Dv);
  __syncthreads();
  float s = -INFINITY;
  if (threadIdx.x < n) {
    const float *kr = ks + threadIdx.x * (D + 1);
    float dot = 0.0f;
    for (int d = 0; d < D; ++d)
      dot += qs[d] * kr[d];
    s = dot * a.scale;
    const int64_t j = j0 + threadIdx.x;
    const int64_t mRow = b * a.mStr[0] + h * a.mStr[1] + i * a.mStr[2];
    if (a.maskF)
      s += a.maskF[mRow + j * a.mStr[3]];
    else if (a.maskB && !a.maskB[mRow + j * a.mStr[3]])
      s = -INFINITY;
  }
  const float m = blockReduce<true>(s);
  const float p = (threadIdx.x < n && m != -INFINITY) ? expf(s - m) : 0.0f;
  if (threadIdx.x < kAttnKeys)
    ps[threadIdx.x] = p;
  const float l = blockReduce<false>(p); // synchronises: ps is complete
  float *part = scratch + (row * chunks + chunk) * (Dv + 2);
  const bool single = chunks == 1;
  for (int d = threadIdx.x; d < Dv; d += kAttnThreads) {
    float acc = 0.0f;
    for (int t = 0; t < n; ++t)
      acc += ps[t] * vs[t * Dv + d];
    if (single)
      a.out[row * Dv + d] = m != m ? m : (m == -INFINITY ? 0.0f : acc / l);
    else
      part[2 + d] = acc;
  }
  if (single)
    return;
  if (threadIdx.x == 0) {
    part[0] = m;
    part[1] = l;
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
  float M = -INFINITY;
  bool nan = false;
  for (int64_t c = 0; c < chunks; ++c) {
    const float mc = __ldcg(parts + c * (Dv + 2));
    nan |= mc != mc;
    M = fmaxf(M, mc);
  }
  for (int d = threadIdx.x; d < Dv; d += kAttnThreads) {
    float num = 0.0f, den = 0.0f;
    if (!nan && M != -INFINITY)
      for (int64_t c = 0; c < chunks; ++c) {
        const float *pc = parts + c * (Dv + 2);
        const float mc = __ldcg(pc);
        if (mc == -INFINITY)
          continue;
        const float w = expf(mc - M);
        den += w * __ldcg(pc + 1);
        num += w * __ldcg(pc + 2 + d);
      }
    a.out[row * Dv + d] = nan ? NAN : (M == -INFINITY ? 0.0f : num / den);
  }
}

int64_t attentionChunks(const DecodeAttention &a) {
  return std::max<int64_t>(1, (a.P + a.Sk + kAttnKeys - 1) / kAttnKeys);
}

} // namespace

template <typename W>
cudaError_t gemvRows(const float *x, int tokens, const W *wt, int K, int N,
                     const float *bias, ops::Activation act,
                     const float *residual, float *y, cudaStream_t stream,
                     bool early) {
  if (tokens <= 0 || N <= 0)
    return cudaSuccess;
  if (tokens > kGemvRowsTokens)
    return cudaErrorInvalidValue;
  constexpr int V = 16 / int(sizeof(W));
  const bool vec = aligned16(wt) && aligned16(x) &&
                   (int64_t(K) * int64_t(sizeof(W))) % 16 == 0 && K % V == 0;
  cudaError_t e =
      vec ? launchRows<W, true>(tokens, x, wt, K, N, bias, act, residual, y,
                                stream, early)
          : launchRows<W, false>(tokens, x, wt, K, N, bias, act, residual, y,
                                 stream, early);
  return e != cudaSuccess ? e : cudaGetLastError();
}

template cudaError_t gemvRows<__half>(const float *, int, const __half *, int,
                                      int, const float *, ops::Activation,
                                      const float *, float *, cudaStream_t,
                                      bool);
template cudaError_t gemvRows<float>(const float *, int, const float *, int,
                                     int, const float *, ops::Activation,
                                     const float *, float *, cudaStream_t, bool);

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
  if (chunks > 65535)
    return cudaErrorInvalidValue;
  const size_t smem =
      sizeof(float) * size_t(a.D + kAttnKeys * (a.D + 1) + kAttnKeys * a.Dv +
                             kAttnKeys);
  const bool vec = a.D % 4 == 0 && a.Dv % 4 == 0 && aligned16(a.k) &&
                   aligned16(a.v) && (a.P == 0 || (aligned16(a.pastK) &&
                                                   aligned16(a.pastV)));
  const dim3 grid{static_cast<unsigned>(rows), static_cast<unsigned>(chunks)};
  cudaError_t e =
      vec ? launchKernel(decodeAttentionKernel<true>, grid, dim3{kAttnThreads},
                         smem, stream, early, a, scratch, counters)
          : launchKernel(decodeAttentionKernel<false>, grid, dim3{kAttnThreads},
                         smem, stream, early, a, scratch, counters);
  return e != cudaSuccess ? e : cudaGetLastError();
}

} // namespace sparsec::rt::cuda
