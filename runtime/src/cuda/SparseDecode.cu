//===- SparseDecode.cu - neuron-granular sparse decode kernels ------------===//
//
// Part of the sparsec project.
//
// See sparsec/rt/cuda/SparseDecode.h. Both weight kernels read one weight
// row per selected neuron with 16-byte loads, coalesced across the warp
// (512 contiguous bytes per warp and row for fp16), several rows in flight
// per warp; the down projection splits the selected rows over a second grid
// dimension so that enough warps stream at once even when few neurons fire.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/SparseDecode.h"

#include "DeviceMath.cuh"

#include <cub/device/device_select.cuh>
#include <cuda_fp16.h>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>

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

/// Sums the kWarps warps' partial rows (acc[t][0..V) of each lane covers
/// columns lane * V + v of the block's tile) and adds them to out[t * ld +
/// base + c] for columns below `limit`, one atomic per column and token.
template <int T, int V>
__device__ void addWarpPartials(float (&partial)[kWarps][32 * V],
                                const float (&acc)[T][V], float *out,
                                int64_t ld, int base, int limit) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < T; ++t) {
#pragma unroll
    for (int v = 0; v < V; ++v)
      partial[warp][lane * V + v] = acc[t][v];
    __syncthreads();
    for (int c = threadIdx.x; c < 32 * V; c += kThreads) {
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < kWarps; ++k)
        sum += partial[k][c];
      if (base + c < limit)
        atomicAdd(out + int64_t(t) * ld + base + c, sum);
    }
    __syncthreads();
  }
}

//===----------------------------------------------------------------------===//
// Down projection: y[t, :] += sum_i h[t, idx[i]] * w[idx[i], :]
//===----------------------------------------------------------------------===//

template <typename W, int T, bool Aligned>
__global__ void __launch_bounds__(kThreads)
    sparseDownKernel(const float *__restrict__ h, int ldh,
                     const W *__restrict__ w, int d,
                     const int32_t *__restrict__ idx,
                     const int32_t *__restrict__ count, float *y,
                     int capacity, unsigned long long *density) {
  pdlTrigger();
  constexpr int V = Vec<W>::N;
  constexpr int Tile = 32 * V; // columns per block
  constexpr int Unroll = 4; // rows in flight per warp
  __shared__ float partial[kWarps][Tile];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = blockIdx.x * Tile + lane * V;
  const int64_t n = *count;
  if (density && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    atomicAdd(density, (unsigned long long)(n * T));
    atomicAdd(density + 1, (unsigned long long)(int64_t(capacity) * T));
  }
  const int r0 = int(n * blockIdx.y / gridDim.y);
  const int r1 = int(n * (blockIdx.y + 1) / gridDim.y);
  float acc[T][V];
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int v = 0; v < V; ++v)
      acc[t][v] = 0.0f;
  int i = r0 + warp;
  for (; i + (Unroll - 1) * kWarps < r1; i += Unroll * kWarps) {
    float wv[Unroll][V];
    int j[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u)
      j[u] = idx[i + u * kWarps];
#pragma unroll
    for (int u = 0; u < Unroll; ++u)
      loadRow<W, Aligned>(w + int64_t(j[u]) * d, col, d, wv[u]);
#pragma unroll
    for (int u = 0; u < Unroll; ++u)
#pragma unroll
      for (int t = 0; t < T; ++t) {
        float a = __ldg(h + int64_t(t) * ldh + j[u]);
#pragma unroll
        for (int v = 0; v < V; ++v)
          acc[t][v] = fmaf(a, wv[u][v], acc[t][v]);
      }
  }
  for (; i < r1; i += kWarps) {
    int j = idx[i];
    float wv[V];
    loadRow<W, Aligned>(w + int64_t(j) * d, col, d, wv);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float a = __ldg(h + int64_t(t) * ldh + j);
#pragma unroll
      for (int v = 0; v < V; ++v)
        acc[t][v] = fmaf(a, wv[v], acc[t][v]);
    }
  }
  if (r0 == r1)
    return; // the whole block: nothing to add
  addWarpPartials<T, V>(partial, acc, y, d, blockIdx.x * Tile, d);
}

//===----------------------------------------------------------------------===//
// Up projection: h[t, j] = act(x[t, :] . wt[j, :] + b[j]) for j in idx
//===----------------------------------------------------------------------===//

template <typename W, int T, bool Aligned>
__global__ void __launch_bounds__(kThreads)
    sparseUpKernel(const float *__restrict__ x, const W *__restrict__ wt,
                   int d, const float *__restrict__ bias,
                   const int32_t *__restrict__ idx,
                   const int32_t *__restrict__ count, bool relu, float *h,
                   int ldh) {
  pdlTrigger();
  constexpr int V = Vec<W>::N;
  constexpr int Unroll = 16; // 16-byte loads in flight per lane (4 KB/warp)
  extern __shared__ float xs[]; // [T][d]
  if (*count <= blockIdx.x * kWarps)
    return; // no selected neuron for this block
  // Stage x with 16-byte loads, all in flight before the first store.
  if (Aligned && (T * d) % 4 == 0) {
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float4 *xs4 = reinterpret_cast<float4 *>(xs);
    const int n4 = T * d / 4;
    for (int k0 = threadIdx.x; k0 < n4; k0 += 4 * kThreads) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (k0 + u * kThreads < n4)
          v[u] = __ldg(x4 + k0 + u * kThreads);
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (k0 + u * kThreads < n4)
          xs4[k0 + u * kThreads] = v[u];
    }
  } else {
    for (int k = threadIdx.x; k < T * d; k += kThreads)
      xs[k] = __ldg(x + k);
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int n = *count;
  for (int i = blockIdx.x * kWarps + threadIdx.x / 32; i < n;
       i += gridDim.x * kWarps) {
    const int j = idx[i];
    const W *row = wt + int64_t(j) * d;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; ++t)
      acc[t] = 0.0f;
    for (int c0 = lane * V; c0 < d; c0 += Unroll * 32 * V) {
      // Raw 16-byte words, all requested before the first is converted.
      uint4 raw[Unroll];
#pragma unroll
      for (int u = 0; u < Unroll; ++u) {
        int c = c0 + u * 32 * V;
        if (Aligned && c + V <= d)
          raw[u] = __ldg(reinterpret_cast<const uint4 *>(row + c));
      }
#pragma unroll
      for (int u = 0; u < Unroll; ++u) {
        int c = c0 + u * 32 * V;
        float wv[V];
        if (Aligned && c + V <= d) {
          Vec<W>::convert(raw[u], wv);
          // 16-byte shared-memory reads (d % 4 == 0 keeps them aligned).
#pragma unroll
          for (int t = 0; t < T; ++t)
#pragma unroll
            for (int v = 0; v < V; v += 4) {
              float4 xv = *reinterpret_cast<const float4 *>(xs + t * d + c + v);
              acc[t] = fmaf(xv.x, wv[v], acc[t]);
              acc[t] = fmaf(xv.y, wv[v + 1], acc[t]);
              acc[t] = fmaf(xv.z, wv[v + 2], acc[t]);
              acc[t] = fmaf(xv.w, wv[v + 3], acc[t]);
            }
        } else if (c < d) {
          loadRow<W, false>(row, c, d, wv);
#pragma unroll
          for (int t = 0; t < T; ++t)
#pragma unroll
            for (int v = 0; v < V; ++v)
              if (c + v < d)
                acc[t] = fmaf(xs[t * d + c + v], wv[v], acc[t]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float s = acc[t];
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0) {
        s += bias ? bias[j] : 0.0f;
        h[int64_t(t) * ldh + j] = relu ? fmaxf(s, 0.0f) : s;
      }
    }
  }
}

__global__ void nonzeroFlagsKernel(const float *h, int tokens, int n,
                                   uint8_t *flags) {
  pdlTrigger();
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n;
       j += gridDim.x * blockDim.x) {
    bool any = false;
    for (int t = 0; t < tokens; ++t)
      any |= h[int64_t(t) * n + j] != 0.0f;
    flags[j] = any;
  }
}

/// hidden[t, e] += sum over the block's 64 rows i of x[t, i] * w1[i, e]:
/// each warp covers 32 x V columns with 16-byte loads, 8 rows in flight,
/// the 8 warps' partial sums reduced in shared memory.
template <typename W, int T>
__global__ void __launch_bounds__(kThreads)
    predictHiddenKernel(const float *__restrict__ x, const W *__restrict__ w1,
                        int d, int r, float *hidden) {
  pdlTrigger();
  constexpr int V = Vec<W>::N;
  constexpr int Tile = 32 * V;
  __shared__ float partial[kWarps][Tile];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = blockIdx.y * Tile + lane * V;
  const int i0 = blockIdx.x * 64;
  float acc[T][V];
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int v = 0; v < V; ++v)
      acc[t][v] = 0.0f;
  float wv[8][V];
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    int i = i0 + warp + u * kWarps;
    if (i < d && col < r)
      loadRow<W, false>(w1 + int64_t(i) * r, col, r, wv[u]);
    else
#pragma unroll
      for (int v = 0; v < V; ++v)
        wv[u][v] = 0.0f;
  }
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    int i = i0 + warp + u * kWarps;
    if (i >= d)
      break;
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float xv = __ldg(x + int64_t(t) * d + i);
#pragma unroll
      for (int v = 0; v < V; ++v)
        acc[t][v] = fmaf(xv, wv[u][v], acc[t][v]);
    }
  }
  addWarpPartials<T, V>(partial, acc, hidden, r, blockIdx.y * Tile, r);
}

/// logits[t, j] += sum over the block's 32 rows e of hidden[t, e] *
/// w2[e, j]: each thread covers V consecutive neurons with 16-byte loads.
template <typename W, int T>
__global__ void __launch_bounds__(kThreads)
    predictLogitsKernel(const float *__restrict__ hidden,
                        const W *__restrict__ w2, int r, int f,
                        float *logits) {
  pdlTrigger();
  constexpr int V = Vec<W>::N;
  const int j = (blockIdx.x * kThreads + threadIdx.x) * V;
  const int e0 = blockIdx.y * 32;
  if (j >= f)
    return;
  float acc[T][V];
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int v = 0; v < V; ++v)
      acc[t][v] = 0.0f;
#pragma unroll 8
  for (int e = e0; e < min(r, e0 + 32); ++e) {
    float wv[V];
    loadRow<W, false>(w2 + int64_t(e) * f, j, f, wv);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float hv = __ldg(hidden + t * r + e);
#pragma unroll
      for (int v = 0; v < V; ++v)
        acc[t][v] = fmaf(hv, wv[v], acc[t][v]);
    }
  }
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (j + v < f)
        atomicAdd(logits + int64_t(t) * f + j + v, acc[t][v]);
}

/// One thread per neuron: the flag (any token's logit + bias above the
/// threshold) and, in append mode, the warp's flagged neurons added to idx
/// with one atomic.
template <int T>
__global__ void __launch_bounds__(256)
    predictFlagsKernel(const float *__restrict__ logits, int f,
                       const float *__restrict__ bias, float threshold,
                       uint8_t *flags, int32_t *idx, int32_t *count,
                       bool append) {
  pdlTrigger();
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  bool on = false;
  if (j < f) {
    float b = bias ? bias[j] : 0.0f;
#pragma unroll
    for (int t = 0; t < T; ++t)
      on |= logits[int64_t(t) * f + j] + b > threshold;
    flags[j] = on;
  }
  if (append) {
    unsigned ballot = __ballot_sync(0xffffffffu, on);
    int lane = threadIdx.x % 32;
    int base = 0;
    if (lane == 0 && ballot)
      base = atomicAdd(count, __popc(ballot));
    base = __shfl_sync(0xffffffffu, base, 0);
    if (on)
      idx[base + __popc(ballot & ((1u << lane) - 1))] = j;
  }
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
} // namespace

int multiprocessorCount() {
  static int count = [] {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    return sms > 0 ? sms : 1;
  }();
  return count;
}

size_t buildIndexTempBytes(int n) {
  size_t bytes = 0;
  thrust::counting_iterator<int32_t> it(0);
  cub::DeviceSelect::Flagged(nullptr, bytes, it, (const uint8_t *)nullptr,
                             (int32_t *)nullptr, (int32_t *)nullptr, n);
  return bytes;
}

cudaError_t buildIndex(const uint8_t *flags, int n, int32_t *idx,
                       int32_t *count, void *temp, size_t tempBytes,
                       cudaStream_t stream) {
  thrust::counting_iterator<int32_t> it(0);
  return cub::DeviceSelect::Flagged(temp, tempBytes, it, flags, idx, count, n,
                                    stream);
}

cudaError_t nonzeroFlags(const float *h, int tokens, int n, uint8_t *flags,
                         cudaStream_t stream) {
  int blocks = std::min((n + 255) / 256, 4 * multiprocessorCount());
  nonzeroFlagsKernel<<<blocks, 256, 0, stream>>>(h, tokens, n, flags);
  return cudaGetLastError();
}

template <typename W>
cudaError_t sparseUp(const float *x, int tokens, const W *wt, int d,
                     const float *bias, const int32_t *idx,
                     const int32_t *count, int capacity, bool relu, float *h,
                     int ldh, cudaStream_t stream) {
  // Enough warps for every selected neuron at once up to the SMs' capacity
  // (x is staged in shared memory once per block).
  int blocks = std::max(1, std::min((capacity + kWarps - 1) / kWarps,
                                    4 * multiprocessorCount()));
  size_t smem = sizeof(float) * size_t(tokens) * size_t(d);
  if (smem > 200 * 1024)
    return cudaErrorInvalidValue; // x does not fit in shared memory
  bool fast = aligned(wt, d) && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  return withTokens(tokens, [&](auto t) {
    constexpr int T = decltype(t)::value;
    auto kernel = fast ? sparseUpKernel<W, T, true> : sparseUpKernel<W, T, false>;
    if (smem > 48 * 1024) {
      cudaError_t e = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (e != cudaSuccess)
        return e;
    }
    kernel<<<blocks, kThreads, smem, stream>>>(x, wt, d, bias, idx, count, relu,
                                               h, ldh);
    return cudaGetLastError();
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
                       const int32_t *idx, const int32_t *count, int capacity,
                       float *y, cudaStream_t stream, int splits,
                       unsigned long long *density) {
  constexpr int V = Vec<W>::N;
  bool fast = aligned(w, d);
  return withTokens(tokens, [&](auto t) {
    constexpr int T = decltype(t)::value;
    auto kernel = fast ? sparseDownKernel<W, T, true> : sparseDownKernel<W, T, false>;
    int perSM = 1;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSM, kernel, kThreads, 0);
    dim3 grid((d + 32 * V - 1) / (32 * V),
              splits > 0 ? splits
                         : downSplits(d, capacity, V, tokens,
                                      std::max(1, perSM) * multiprocessorCount()));
    kernel<<<grid, kThreads, 0, stream>>>(h, ldh, w, d, idx, count, y, capacity,
                                          density);
    return cudaGetLastError();
  });
}

template <typename W>
cudaError_t predictIndex(const float *x, int tokens, const W *w1, int d,
                         int r, const W *w2, int f, const float *bias,
                         float threshold, float *scratch, uint8_t *flags,
                         int32_t *idx, int32_t *count, bool sorted, void *temp,
                         size_t tempBytes, cudaStream_t stream) {
  float *hidden = scratch, *logits = scratch + size_t(tokens) * r;
  cudaError_t e = cudaMemsetAsync(
      scratch, 0, sizeof(float) * size_t(tokens) * (size_t(r) + f), stream);
  if (e == cudaSuccess && !sorted)
    e = cudaMemsetAsync(count, 0, sizeof(int32_t), stream);
  if (e != cudaSuccess)
    return e;
  constexpr int V = Vec<W>::N;
  e = withTokens(tokens, [&](auto t) {
    constexpr int T = decltype(t)::value;
    predictHiddenKernel<W, T><<<dim3((d + 63) / 64, (r + 32 * V - 1) / (32 * V)),
                                kThreads, 0, stream>>>(x, w1, d, r, hidden);
    predictLogitsKernel<W, T>
        <<<dim3((f + kThreads * V - 1) / (kThreads * V), (r + 31) / 32),
           kThreads, 0, stream>>>(hidden, w2, r, f, logits);
    predictFlagsKernel<T><<<(f + 255) / 256, 256, 0, stream>>>(
        logits, f, bias, threshold, flags, idx, count, !sorted);
    return cudaGetLastError();
  });
  if (e != cudaSuccess || !sorted)
    return e;
  return buildIndex(flags, f, idx, count, temp, tempBytes, stream);
}

#define SPARSEC_INSTANTIATE(W)                                                 \
  template cudaError_t sparseUp<W>(const float *, int, const W *, int,         \
                                   const float *, const int32_t *,             \
                                   const int32_t *, int, bool, float *, int,   \
                                   cudaStream_t);                              \
  template cudaError_t sparseDown<W>(const float *, int, int, const W *, int,  \
                                     const int32_t *, const int32_t *, int,    \
                                     float *, cudaStream_t, int,               \
                                     unsigned long long *);                    \
  template cudaError_t predictIndex<W>(                                        \
      const float *, int, const W *, int, int, const W *, int, const float *,  \
      float, float *, uint8_t *, int32_t *, int32_t *, bool, void *, size_t,   \
      cudaStream_t);
SPARSEC_INSTANTIATE(__half)
SPARSEC_INSTANTIATE(float)
#undef SPARSEC_INSTANTIATE

} // namespace sparsec::rt::cuda
