//===- Ops.cu - device ops of `--target cuda` models ----------------------===//
//
// Part of the sparsec project.
//
// See sparsec/rt/cuda/Ops.h. Every op checks its inputs and computes its
// result shape on the host (with the same messages as the x86 ops),
// allocates its device slot, and launches its kernels on the model's stream
// unless the step is a graph replay.
//
//===----------------------------------------------------------------------===//

#include "Device.h"
#include "DeviceMath.cuh"
#include "StridedCopy.h"
#include "sparsec/rt/cuda/Attention.h"
#include "sparsec/rt/cuda/DenseDecode.h"
#include "sparsec/rt/cuda/Ops.h"
#include "sparsec/rt/cuda/Pit.h"
#include "sparsec/rt/cuda/SparseDecode.h"

#include "../cpu/Common.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace sparsec::rt::cuda {
namespace {

using ops::Activation;
using ops::detail::AttentionDims;
using ops::detail::attentionDims;
using ops::detail::broadcastShapes;
using ops::detail::checkEmbeddingPair;
using ops::detail::checkReshapeTo;
using ops::detail::reshapeTarget;
using ops::detail::checkTensor;
using ops::detail::contiguousStrides;
using ops::detail::product;
using ops::detail::readIndexTensor;
using ops::detail::shapeString;
using ops::detail::transposeIsView;
using ops::detail::validShape;

bool weightType(Context &ctx, const char *op, const Tensor &w) {
  if (w.dtype != DType::f32 && w.dtype != DType::f16 && w.dtype != DType::bf16)
    return ctx.fail(std::string(op) +
                    ": weight must be float32, float16 or bfloat16, got " +
                    w.describe());
  return true;
}

//===----------------------------------------------------------------------===//
// Device math
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// Strides of up to kMaxRank broadcast operands over an output shape.
struct Broadcast {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[3][kMaxRank] = {};
};

__device__ __forceinline__ void offsets(const Broadcast &b, int64_t i, int n,
                                        int64_t *off) {
  for (int k = 0; k < n; ++k)
    off[k] = 0;
  for (int d = b.rank - 1; d >= 0; --d) {
    int64_t c = i % b.shape[d];
    i /= b.shape[d];
    for (int k = 0; k < n; ++k)
      off[k] += c * b.stride[k][d];
  }
}

__global__ void unaryKernel(ops::Unary op, const float *x, float *y, int64_t n) {
  pdlTrigger();
  pdlWait(); // launched early (small kernels): inputs and output after it
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = x[i], r = v;
    switch (op) {
    case ops::Unary::relu: r = v > 0.0f ? v : 0.0f; break;
    case ops::Unary::gelu: r = activate(Activation::gelu, v); break;
    case ops::Unary::gelu_tanh: r = activate(Activation::gelu_tanh, v); break;
    case ops::Unary::silu: r = activate(Activation::silu, v); break;
    case ops::Unary::sigmoid: r = activate(Activation::sigmoid, v); break;
    case ops::Unary::tanh: r = tanhf(v); break;
    case ops::Unary::exp: r = expf(v); break;
    case ops::Unary::log: r = logf(v); break;
    case ops::Unary::erf: r = erff(v); break;
    case ops::Unary::sqrt: r = sqrtf(v); break;
    case ops::Unary::reciprocal: r = 1.0f / v; break;
    case ops::Unary::abs: r = fabsf(v); break;
    case ops::Unary::neg: r = -v; break;
    case ops::Unary::sin: r = sinf(v); break;
    case ops::Unary::cos: r = cosf(v); break;
    case ops::Unary::logical_not: break;
    }
    y[i] = r;
  }
}

__device__ __forceinline__ float binaryOp(ops::Binary op, float a, float b) {
  switch (op) {
  case ops::Binary::add: return a + b;
  case ops::Binary::sub: return a - b;
  case ops::Binary::mul: return a * b;
  case ops::Binary::div: return a / b;
  case ops::Binary::pow: return powf(a, b);
  case ops::Binary::max: return fmaxf(a, b);
  case ops::Binary::min: return fminf(a, b);
  default: return 0.0f;
  }
}

/// The elementwise functions of two operands: binary arithmetic (float
/// results) and comparisons (bool results, one byte each).
struct BinaryFn {
  ops::Binary op;
  __device__ float operator()(float a, float b) const {
    return binaryOp(op, a, b);
  }
};
struct CompareFn {
  ops::Compare op;
  __device__ uint8_t operator()(float a, float b) const {
    switch (op) {
    case ops::Compare::eq: return a == b;
    case ops::Compare::lt: return a < b;
    case ops::Compare::le: return a <= b;
    case ops::Compare::gt: return a > b;
    case ops::Compare::ge: return a >= b;
    }
    return 0;
  }
};

/// out[i] = fn(x, y) at element i's broadcast offsets.
template <typename Fn, typename Out>
__global__ void broadcastKernel(Fn fn, Broadcast b, const float *x,
                                const float *y, Out *out, int64_t n) {
  pdlTrigger();
  pdlWait(); // launched early (small kernels): inputs and output after it
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    offsets(b, i, 2, off);
    out[i] = fn(x[off[0]], y[off[1]]);
  }
}

/// out[i] = fn(x[i], y[i]): operands of the result's shape.
template <typename Fn, typename Out>
__global__ void sameShapeKernel(Fn fn, const float *x, const float *y,
                                Out *out, int64_t n) {
  pdlTrigger();
  pdlWait(); // launched early (small kernels): inputs and output after it
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = fn(x[i], y[i]);
}

__global__ void whereKernel(Broadcast b, const uint8_t *c, const float *x,
                            const float *y, float *out, int64_t n) {
  pdlTrigger();
  pdlWait(); // launched early (small kernels): inputs and output after it
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    offsets(b, i, 3, off);
    out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
  }
}

/// Fills `b` with the broadcast strides of `ts` over `rank`/`shape`.
void broadcastStrides(Broadcast &b, int rank, const int64_t *shape,
                      const Tensor *const *ts, int n) {
  b.rank = rank;
  for (int d = 0; d < rank; ++d)
    b.shape[d] = shape[d];
  for (int k = 0; k < n; ++k)
    ops::detail::broadcastStridesOf(*ts[k], rank, b.stride[k]);
}

//===----------------------------------------------------------------------===//
// Linear layers
//===----------------------------------------------------------------------===//

constexpr int kGemvRows = 8;     // largest row count of the GEMV path
constexpr int kGemvCols = 64;    // columns per block (2 per lane)
constexpr int kGemvWarps = 8;

/// y[m, n] (+)= sum over the block's k range of x[m, k] * w[k, n], w [K, N]
/// row-major: each warp streams whole 64-column row segments (coalesced),
/// the 8 warps split the k range and reduce in shared memory. With one k
/// split the epilogue (bias, activation) is fused; otherwise partial sums
/// go to `partial` [splits, M, N] and the last block of each column tile to
/// finish (counted in `counters`, which it resets for the next launch) sums
/// them and applies the epilogue: one kernel either way.
template <typename W, int M>
__global__ void __launch_bounds__(kGemvWarps * 32)
gemvKernel(const float *x, const W *w, int K, int N, const float *bias,
           Activation act, float *y, float *partial, int *counters,
           int kChunk) {
  pdlTrigger();
  __shared__ float red[kGemvWarps][M][kGemvCols];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n0 = blockIdx.x * kGemvCols + lane;
  const int k0 = blockIdx.y * kChunk;
  const int k1 = min(K, k0 + kChunk);
  float acc[M][2] = {};
  for (int k = k0 + warp; k < k1; k += kGemvWarps) {
    const W *row = w + int64_t(k) * N;
    float w0 = n0 < N ? toFloat(row[n0]) : 0.0f;
    float w1 = n0 + 32 < N ? toFloat(row[n0 + 32]) : 0.0f;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv = __ldg(x + int64_t(m) * K + k);
      acc[m][0] += xv * w0;
      acc[m][1] += xv * w1;
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    red[warp][m][lane] = acc[m][0];
    red[warp][m][lane + 32] = acc[m][1];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < M * kGemvCols; e += blockDim.x) {
    int m = e / kGemvCols, c = e % kGemvCols;
    int n = blockIdx.x * kGemvCols + c;
    if (n >= N)
      continue;
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < kGemvWarps; ++q)
      s += red[q][m][c];
    if (partial) {
      partial[(int64_t(blockIdx.y) * M + m) * N + n] = s;
    } else {
      if (bias)
        s += bias[n];
      y[int64_t(m) * N + n] = activate(act, s);
    }
  }
  if (!partial)
    return;
  // The last block of this column adds the partial sums.
  if (!lastBlockToArrive(counters + blockIdx.x, int(gridDim.y)))
    return;
  for (int e = threadIdx.x; e < M * kGemvCols; e += blockDim.x) {
    int m = e / kGemvCols, n = blockIdx.x * kGemvCols + e % kGemvCols;
    if (n >= N)
      continue;
    float s = 0.0f;
    for (int q = 0; q < int(gridDim.y); ++q)
      s += __ldcg(partial + (int64_t(q) * M + m) * N + n);
    if (bias)
      s += bias[n];
    y[int64_t(m) * N + n] = activate(act, s);
  }
}

/// y = act(y + bias) over [M, N].
__global__ void epilogueKernel(float *y, int64_t MN, int N, const float *bias,
                               Activation act) {
  pdlTrigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < MN;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = y[i];
    if (bias)
      v += bias[i % N];
    y[i] = activate(act, v);
  }
}

/// y[0:n] = T(x[0:n]), round to nearest even (T __half or __nv_bfloat16):
/// four values a step (one 16-byte load, one 8-byte store) where both
/// pointers allow it.
template <typename T>
__global__ void toHalfKernel(const float *x, T *y, int64_t n) {
  pdlTrigger();
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(y) % 8 == 0) {
    const int64_t quads = n / 4;
    for (int64_t i = first; i < quads; i += step) {
      const float4 v = reinterpret_cast<const float4 *>(x)[i];
      reinterpret_cast<uint2 *>(y)[i] =
          make_uint2(pack2<T>(v.x, v.y), pack2<T>(v.z, v.w));
    }
    done = quads * 4;
  }
  for (int64_t i = done + first; i < n; i += step)
    y[i] = T(x[i]);
}

template <typename T>
bool launchToHalf(Context &ctx, Device &d, const float *x, T *y, int64_t n) {
  if (n <= 0)
    return true;
  toHalfKernel<T><<<blocksFor((n + 3) / 4), kBlock, 0, d.stream>>>(x, y, n);
  return launched(ctx, std::is_same_v<T, __half> ? "fp16 conversion"
                                                 : "bf16 conversion");
}

} // namespace

bool toHalf(Context &ctx, Device &d, const float *x, __half *y, int64_t n) {
  return launchToHalf(ctx, d, x, y, n);
}
bool toHalf(Context &ctx, Device &d, const float *x, __nv_bfloat16 *y,
            int64_t n) {
  return launchToHalf(ctx, d, x, y, n);
}

namespace {

/// d.halfInput = x[n] rounded to `type` (f16 or bf16); the caller has
/// ensured its size.
bool roundInput(Context &ctx, Device &d, const float *x, int64_t n,
                DType type) {
  void *xh = d.halfInput.ptr;
  return type == DType::bf16
             ? toHalf(ctx, d, x, static_cast<__nv_bfloat16 *>(xh), n)
             : toHalf(ctx, d, x, static_cast<__half *>(xh), n);
}

template <typename W, int M>
void launchGemv(const float *x, const W *w, int K, int N, const float *bias,
                Activation act, float *y, float *partial, int *counters,
                int splits, int kChunk, cudaStream_t s) {
  dim3 grid((N + kGemvCols - 1) / kGemvCols, splits);
  gemvKernel<W, M><<<grid, kGemvWarps * 32, 0, s>>>(x, w, K, N, bias, act, y,
                                                    partial, counters, kChunk);
}

template <typename W>
void dispatchGemv(int M, const float *x, const W *w, int K, int N,
                  const float *bias, Activation act, float *y, float *partial,
                  int *counters, int splits, int kChunk, cudaStream_t s) {
  switch (M) {
  case 1: launchGemv<W, 1>(x, w, K, N, bias, act, y, partial, counters, splits, kChunk, s); break;
  case 2: launchGemv<W, 2>(x, w, K, N, bias, act, y, partial, counters, splits, kChunk, s); break;
  case 3: launchGemv<W, 3>(x, w, K, N, bias, act, y, partial, counters, splits, kChunk, s); break;
  case 4: launchGemv<W, 4>(x, w, K, N, bias, act, y, partial, counters, splits, kChunk, s); break;
  case 5: launchGemv<W, 5>(x, w, K, N, bias, act, y, partial, counters, splits, kChunk, s); break;
  case 6: launchGemv<W, 6>(x, w, K, N, bias, act, y, partial, counters, splits, kChunk, s); break;
  case 7: launchGemv<W, 7>(x, w, K, N, bias, act, y, partial, counters, splits, kChunk, s); break;
  default: launchGemv<W, 8>(x, w, K, N, bias, act, y, partial, counters, splits, kChunk, s); break;
  }
}

/// y[M, N] = act(x[M, K] . op(w) + bias): w is [K, N] (transposed false) or
/// neuron-major [N, K] (transposed true), float32 or float16. With 16-bit
/// weights, `xRounded` says that d.halfInput already holds x rounded to
/// their type (a group's linears read one input: it is rounded once).
bool gemm(Context &ctx, Device &d, const float *x, int64_t M, int64_t K,
          const Tensor &w, bool transposed, int64_t N, const float *bias,
          Activation act, float *y, const float *residual = nullptr,
          bool xRounded = false) {
  if (M == 0 || N == 0)
    return true;
  const bool half = w.dtype == DType::f16 || w.dtype == DType::bf16;
  if (transposed && M <= kGemvRowsTokens) {
    // Decode over a neuron-major weight: whole rows per block.
    if (!d.launching())
      return true;
    cudaError_t e = withWeightType(w.dtype, [&](auto z) {
      using W = decltype(z);
      return gemvRows(x, int(M), w.as<W>(), int(K), int(N), bias, act, residual,
                      y, d.stream, d.earlyGemv);
    });
    return check(ctx, e, "gemv");
  }
  if (residual && act != Activation::none)
    return ctx.fail("internal error: a fused residual after an activation "
                    "needs the decode GEMV");
  if (!transposed && M <= kGemvRows) {
    // Decode: a bandwidth-bound GEMV; split K so that every SM streams.
    int tiles = int((N + kGemvCols - 1) / kGemvCols);
    int splits = std::max(1, std::min<int>(int((K + 63) / 64),
                                           (2 * multiprocessorCount() + tiles - 1) / tiles));
    if (tiles > kGemvCounters)
      splits = 1;
    int kChunk = int((K + splits - 1) / splits);
    splits = int((K + kChunk - 1) / kChunk);
    float *partial = nullptr;
    if (splits > 1) {
      if (!d.ensure(ctx, d.gemvPartials, sizeof(float) * size_t(splits) * M * N,
                    "GEMV partial sums"))
        return false;
      partial = static_cast<float *>(d.gemvPartials.ptr);
    }
    if (!d.launching())
      return true;
    withWeightType(w.dtype, [&](auto z) {
      using W = decltype(z);
      dispatchGemv<W>(int(M), x, w.as<W>(), int(K), int(N), bias, act, y,
                      partial, d.gemvCounters, splits, kChunk, d.stream);
    });
    return launched(ctx, "gemv");
  }
  // cuBLAS is column-major: y^T [N, M] = op(w)^T [N, K] . x^T [K, M].
  const float one = 1.0f, zero = 0.0f;
  const float *beta = residual ? &one : &zero;
  cublasOperation_t opW = transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  int lda = int(transposed ? K : N);
  // The bias, ReLU and residual inside the GEMM (cuBLASLt's epilogue, the
  // residual read as its C): 1 where LtGemm ran it; 0, nothing launched
  // (LtGemm does not take the epilogue, cuBLASLt has no plan for it or
  // refuses its arguments), sends the call down the unfused path: the
  // residual copied to y and accumulated onto (beta = 1), the GEMM, then
  // epilogueKernel; -1 a failure, reported.
  auto fused = [&](const void *in, cudaDataType_t type) -> int {
    if (!d.fuseEpilogue || !ltFuses(bias, act, residual))
      return 0;
    ProfileTimer timer(d.profile, d.blasUs, d.blasCalls);
    const cublasStatus_t s =
        d.lt.matmul(d.stream, in, w.data, type, transposed, M, K, N, bias, act,
                    residual, y, d.blasWorkspace.ptr, d.blasWorkspace.bytes);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE) {
      timer.uncount(); // the unfused GEMM after it counts the call
      return 0;
    }
    if (!checkBlas(ctx, s, "cublasLtMatmul"))
      return -1;
    ++d.fusedEpilogues;
    return 1;
  };
  auto copyResidual = [&] {
    return !residual || residual == y ||
           check(ctx,
                 cudaMemcpyAsync(y, residual, sizeof(float) * size_t(M * N),
                                 cudaMemcpyDeviceToDevice, d.stream),
                 "residual");
  };
  if (half) {
    // x rounded to the weights' 16-bit type, fp32 accumulation.
    if (!d.ensure(ctx, d.halfInput, sizeof(__half) * size_t(M * K),
                  "16-bit GEMM input"))
      return false;
    if (!d.launching())
      return true;
    auto *xh = d.halfInput.ptr;
    if (!xRounded && !roundInput(ctx, d, x, M * K, w.dtype))
      return false;
    const cudaDataType_t type = halfDataType(w.dtype);
    if (const int f = fused(xh, type))
      return f > 0;
    if (!copyResidual())
      return false;
    ProfileTimer timer(d.profile, d.blasUs, d.blasCalls);
    if (!checkBlas(ctx,
                   cublasGemmEx(d.blas, opW, CUBLAS_OP_N, int(N), int(M),
                                int(K), &one, w.data, type, lda, xh, type,
                                int(K), beta, y, CUDA_R_32F, int(N),
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx"))
      return false;
  } else {
    if (!d.launching())
      return true;
    if (const int f = fused(x, CUDA_R_32F))
      return f > 0;
    if (!copyResidual())
      return false;
    ProfileTimer timer(d.profile, d.blasUs, d.blasCalls);
    if (!checkBlas(ctx,
                   cublasSgemm(d.blas, opW, CUBLAS_OP_N, int(N), int(M), int(K),
                               &one, w.as<float>(), lda, x, int(K), beta, y,
                               int(N)),
                   "cublasSgemm"))
      return false;
  }
  d.separateEpilogues += bias || act != Activation::none || residual;
  if (bias || act != Activation::none) {
    epilogueKernel<<<blocksFor(M * N), kBlock, 0, d.stream>>>(y, M * N, int(N),
                                                              bias, act);
    return launched(ctx, "epilogue");
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Softmax, attention
//===----------------------------------------------------------------------===//

__global__ void softmaxKernel(const float *x, int64_t width, float *y) {
  pdlTrigger();
  const float *row = x + blockIdx.x * width;
  float *out = y + blockIdx.x * width;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    m = fmaxf(m, row[i]);
  m = blockReduce<true>(m);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    s += expf(row[i] - m);
  float inv = 1.0f / blockReduce<false>(s);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    out[i] = expf(row[i] - m) * inv;
}

/// y[0:n] = float(x[0:n]).
__global__ void widenKernel(const __half *x, float *y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __half2float(x[i]);
}

/// present[bh, 0:P] = past[bh], present[bh, P:T] = cur[bh] (rows of width;
/// cur [B, H, S, width], or [B, S, H, width] where `tokenMajor`).
__global__ void presentKernel(const float *past, const float *cur, int64_t BH,
                              int64_t H, int64_t P, int64_t S, int64_t width,
                              bool tokenMajor, float *present) {
  pdlTrigger();
  const int64_t T = P + S, n = BH * T * width;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t e = i % width, t = (i / width) % T, bh = i / (width * T);
    present[i] =
        t < P ? past[(bh * P + t) * width + e]
              : cur[headRow(tokenMajor, bh / H, bh % H, t - P, H, S) * width +
                    e];
  }
}

/// One block per query row: scores in shared memory, softmax, P.V (the
/// prompt attention for heads prefillAttention does not take).
__global__ void attentionKernel(PrefillAttention a) {
  pdlTrigger();
  extern __shared__ float smem[];
  float *qs = smem, *sc = smem + a.D;
  const int64_t row = blockIdx.x;
  const int64_t i = row % a.Sq, h = (row / a.Sq) % a.Hq, b = row / (a.Sq * a.Hq);
  const int64_t hk = h / (a.Hq / a.Hk);
  const int64_t qRow = headRow(a.tokenMajor, b, h, i, a.Hq, a.Sq);
  const float *key = a.k + headRow(a.kvTokenMajor, b, hk, 0, a.Hk, a.T) * a.D;
  const float *val = a.v + headRow(a.kvTokenMajor, b, hk, 0, a.Hk, a.T) * a.Dv;
  const int64_t kStep = a.kvTokenMajor ? a.Hk * a.D : a.D,
                vStep = a.kvTokenMajor ? a.Hk * a.Dv : a.Dv;
  for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x)
    qs[d] = a.q[qRow * a.D + d];
  __syncthreads();
  int64_t jEnd = a.T;
  if (a.causal)
    {
    int64_t lim = i + (a.T - a.Sq) + 1;
    jEnd = lim < 0 ? 0 : lim < a.T ? lim : a.T;
  }
  const int64_t mRow = b * a.mStr[0] + h * a.mStr[1] + i * a.mStr[2];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5,
            warps = blockDim.x >> 5;
  float m = -INFINITY;
  for (int64_t j = warp; j < jEnd; j += warps) {
    const float *kr = key + j * kStep;
    float s = 0.0f;
    for (int64_t d = lane; d < a.D; d += 32)
      s += qs[d] * kr[d];
    s = warpSum(s) * a.scale;
    if (a.maskF)
      s += a.maskF[mRow + j * a.mStr[3]];
    else if (a.maskB && !a.maskB[mRow + j * a.mStr[3]])
      s = -INFINITY;
    if (lane == 0)
      sc[j] = s;
    m = fmaxf(m, s);
  }
  m = blockReduce<true>(m); // synchronises: sc is complete
  float *o = a.out + qRow * a.Dv;
  if (m == -INFINITY || m != m) {
    for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x)
      o[d] = m != m ? m : 0.0f;
    return;
  }
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < jEnd; j += blockDim.x) {
    float p = expf(sc[j] - m);
    sc[j] = p;
    s += p;
  }
  const float inv = 1.0f / blockReduce<false>(s);
  for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < jEnd; ++j)
      acc += sc[j] * val[j * vStep + d];
    o[d] = acc * inv;
  }
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

/// out[i] = in[base + sum_d coord_d(i) * stride_d] over an output shape:
/// a Strided plan with 64-bit indices I, or a Strided32 with 32-bit ones.
template <typename T, typename Plan, typename I>
__global__ void stridedKernel(Plan s, const T *in, T *out, I n) {
  pdlTrigger();
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n;
       i += I(gridDim.x) * blockDim.x)
    out[i] = in[stridedOffset(s, i)];
}

/// A strided copy of n elements of T, in 32-bit index arithmetic where the
/// plan allows it (narrowIndices), else in 64-bit.
template <typename T>
void launchStrided(Device &d, const Strided &s, const void *in, void *out,
                   int64_t n) {
  const auto *src = static_cast<const T *>(in);
  auto *dst = static_cast<T *>(out);
  if (Strided32 s32; narrowIndices(s, n, s32))
    stridedKernel<<<blocksFor(n), kBlock, 0, d.stream>>>(s32, src, dst,
                                                         uint32_t(n));
  else
    stridedKernel<<<blocksFor(n), kBlock, 0, d.stream>>>(s, src, dst, n);
}

bool stridedCopy(Context &ctx, Device &d, const Strided &s, const Tensor &in,
                 Tensor &out) {
  int64_t n = out.numel();
  if (n == 0 || !d.launching())
    return true;
  const size_t bytes = dtypeSize(in.dtype);
  if (Strided w = s; widenToPieces(w, bytes, in.data, out.data)) {
    launchStrided<uint4>(d, w, in.data, out.data, n / int64_t(16 / bytes));
    return launched(ctx, "copy");
  }
  switch (bytes) {
  case 1: launchStrided<uint8_t>(d, s, in.data, out.data, n); break;
  case 2: launchStrided<uint16_t>(d, s, in.data, out.data, n); break;
  case 4: launchStrided<uint32_t>(d, s, in.data, out.data, n); break;
  default: launchStrided<uint64_t>(d, s, in.data, out.data, n); break;
  }
  return launched(ctx, "copy");
}

//===----------------------------------------------------------------------===//
// Sparsity helpers
//===----------------------------------------------------------------------===//

/// mask[m, n] = logits[m, n] + bias[n] > threshold.
__global__ void thresholdKernel(const float *logits, int64_t MN, int N,
                                const float *bias, float threshold,
                                uint8_t *mask) {
  pdlTrigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < MN;
       i += int64_t(gridDim.x) * blockDim.x)
    mask[i] = logits[i] + (bias ? bias[i % N] : 0.0f) > threshold;
}

/// y[m, n] = 0 where the mask (rows of N, or one shared row) is off.
__global__ void applyMaskKernel(float *y, int64_t MN, int N,
                                const uint8_t *mask, bool perRow) {
  pdlTrigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < MN;
       i += int64_t(gridDim.x) * blockDim.x)
    if (!mask[perRow ? i : i % N])
      y[i] = 0.0f;
}

/// mask[i] = x[i] > 0 (`positive`) or x[i] != 0.
__global__ void gateMaskKernel(const float *x, int64_t n, bool positive,
                               uint8_t *mask) {
  pdlTrigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    mask[i] = positive ? x[i] > 0.0f : x[i] != 0.0f;
}

/// y[m, :] = bias (or 0) + residual[m, :] (or 0), the base the sparse down
/// projection adds to when no earlier kernel of the step writes it.
__global__ void fillRowsKernel(float *y, int64_t MN, int N, const float *bias,
                               const float *residual) {
  pdlTrigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < MN;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = (bias ? bias[i % N] : 0.0f) + (residual ? residual[i] : 0.0f);
}

/// y += r (elementwise), the residual of a sparse linear computed densely.
__global__ void addInPlaceKernel(float *y, const float *r, int64_t n) {
  pdlTrigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] += r[i];
}

IndexBuffers &indexBuffers(Device &d, int site) {
  if (size_t(site) >= d.indexSets.size())
    d.indexSets.resize(size_t(site) + 1);
  return d.indexSets[size_t(site)];
}

/// Sizes the index buffers of `site` for n neurons (segmented: see
/// IndexView).
bool ensureIndex(Context &ctx, Device &d, int site, int64_t n) {
  IndexBuffers &b = indexBuffers(d, site);
  const size_t segments = size_t(indexSegments(int(n)));
  return d.ensure(ctx, b.idx, sizeof(int32_t) * segments * kSegment,
                  "an index set") &&
         d.ensure(ctx, b.count, sizeof(int32_t) * std::max<size_t>(segments, 1),
                  "an index set");
}

/// The device view of `site`'s index set over n neurons (with its list
/// when `listed`).
IndexView indexView(Device &d, int site, int64_t n, bool listed = false) {
  IndexBuffers &b = indexBuffers(d, site);
  IndexView v;
  v.idx = static_cast<int32_t *>(b.idx.ptr);
  v.cnt = static_cast<int32_t *>(b.count.ptr);
  v.neurons = int(n);
  if (listed) {
    v.list = static_cast<int32_t *>(b.list.ptr);
    v.count = static_cast<int32_t *>(b.listCount.ptr);
  }
  return v;
}

/// Sizes `site`'s list buffers for n neurons.
bool ensureList(Context &ctx, Device &d, int site, int64_t n) {
  IndexBuffers &b = indexBuffers(d, site);
  return d.ensure(ctx, b.list, sizeof(int32_t) * size_t(std::max<int64_t>(n, 1)),
                  "an index list") &&
         d.ensure(ctx, b.listCount, sizeof(int32_t), "an index list");
}

const float *biasOf(Context &ctx, const char *op, const Tensor *bias,
                    int64_t n, bool &ok) {
  ok = true;
  if (!bias)
    return nullptr;
  if (bias->dtype != DType::f32 || bias->numel() != n) {
    ok = ctx.fail(std::string(op) + ": bias " + bias->describe() +
                  " must be float32 with " + std::to_string(n) + " elements");
    return nullptr;
  }
  return bias->as<float>();
}

/// The operands of a linear-like op: x [..., K] float32, w [K, N] (or
/// neuron-major [N, K] when `neuronMajor`) float32/float16, bias [N].
struct LinearShape {
  int64_t M = 0, K = 0, N = 0;
  const float *bias = nullptr;
};
bool linearOperands(Context &ctx, const char *op, const Tensor &x,
                    const Tensor &w, const Tensor *bias, bool neuronMajor,
                    LinearShape &s) {
  if (!requireF32(ctx, op, "input", x) || !weightType(ctx, op, w))
    return false;
  if (w.rank != 2 || x.rank < 1 ||
      x.shape[x.rank - 1] != w.shape[neuronMajor ? 1 : 0])
    return ctx.fail(std::string(op) + ": input " + x.describe() +
                    " does not match the " +
                    (neuronMajor ? "neuron-major " : "") + "weight " +
                    w.describe());
  s.K = w.shape[neuronMajor ? 1 : 0];
  s.N = w.shape[neuronMajor ? 0 : 1];
  s.M = s.K ? x.numel() / s.K : 0;
  bool ok;
  s.bias = biasOf(ctx, op, bias, s.N, ok);
  return ok;
}

/// Allocates x's shape with the last dim replaced by n.
bool allocateLastDim(Context &ctx, Device &d, int slot, const Tensor &x,
                     int64_t n, DType dtype, Tensor &out) {
  int64_t shape[kMaxRank];
  for (int i = 0; i < x.rank; ++i)
    shape[i] = x.shape[i];
  shape[x.rank - 1] = n;
  return allocate(ctx, d, slot, out, dtype, x.rank, shape);
}
} // namespace

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

bool unary(Context &ctx, ops::Unary op, const Tensor &x, int outSlot,
           Tensor &out) {
  Device &d = dev(ctx);
  if (!requireF32(ctx, "unary", "input", x))
    return false;
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, DType::f32, x.rank, x.shape))
    return false;
  out = r;
  if (r.numel() == 0 || !d.launching())
    return true;
  return check(ctx,
               launchKernel(unaryKernel, blocksFor(r.numel()), kBlock, 0,
                            d.stream, d.earlySmall, op, x.as<float>(),
                            r.as<float>(), r.numel()),
               "unary");
}

namespace {
/// fn over float32 operands a and b (checked by the caller), broadcast, into
/// a new `dtype` tensor of element type Out; `what` names the op.
template <typename Out, typename Fn>
bool elementwise2(Context &ctx, const char *what, Fn fn, DType dtype,
                  const Tensor &a, const Tensor &b, int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  int rank = 0;
  int64_t shape[kMaxRank];
  if (!broadcastShapes(a.rank, a.shape, b.rank, b.shape, rank, shape))
    return ctx.fail(std::string(what) + ": shapes " + a.describe() + " and " +
                    b.describe() + " do not broadcast");
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, dtype, rank, shape))
    return false;
  out = r;
  int64_t n = r.numel();
  if (n == 0 || !d.launching())
    return true;
  if (a.numel() == n && b.numel() == n)
    return check(ctx,
                 launchKernel(sameShapeKernel<Fn, Out>, blocksFor(n), kBlock, 0,
                              d.stream, d.earlySmall, fn, a.as<float>(),
                              b.as<float>(), r.as<Out>(), n),
                 what);
  Broadcast bc;
  const Tensor *ts[] = {&a, &b};
  broadcastStrides(bc, rank, shape, ts, 2);
  return check(ctx,
               launchKernel(broadcastKernel<Fn, Out>, blocksFor(n), kBlock, 0,
                            d.stream, d.earlySmall, fn, bc, a.as<float>(),
                            b.as<float>(), r.as<Out>(), n),
               what);
}
} // namespace

bool binary(Context &ctx, ops::Binary op, const Tensor &a, const Tensor &b,
            int outSlot, Tensor &out) {
  if (!requireF32(ctx, "binary", "lhs", a) ||
      !requireF32(ctx, "binary", "rhs", b))
    return false;
  if (op == ops::Binary::logical_and || op == ops::Binary::logical_or)
    return ctx.fail("binary: logical ops run on the host");
  return elementwise2<float>(ctx, "binary", BinaryFn{op}, DType::f32, a, b,
                             outSlot, out);
}

bool compare(Context &ctx, ops::Compare op, const Tensor &a, const Tensor &b,
             int outSlot, Tensor &out) {
  if (!requireF32(ctx, "compare", "lhs", a) ||
      !requireF32(ctx, "compare", "rhs", b))
    return false;
  return elementwise2<uint8_t>(ctx, "compare", CompareFn{op}, DType::b1, a, b,
                               outSlot, out);
}

bool where(Context &ctx, const Tensor &cond, const Tensor &x, const Tensor &y,
           int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  if (!checkTensor(ctx, "where", "condition", cond) ||
      !requireF32(ctx, "where", "x", x) || !requireF32(ctx, "where", "y", y))
    return false;
  if (cond.dtype != DType::b1)
    return ctx.fail("where: condition must be bool, got " + cond.describe());
  int r1 = 0, rank = 0;
  int64_t s1[kMaxRank], shape[kMaxRank];
  if (!broadcastShapes(cond.rank, cond.shape, x.rank, x.shape, r1, s1) ||
      !broadcastShapes(r1, s1, y.rank, y.shape, rank, shape))
    return ctx.fail("where: shapes " + cond.describe() + ", " + x.describe() +
                    " and " + y.describe() + " do not broadcast");
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, DType::f32, rank, shape))
    return false;
  out = r;
  int64_t n = r.numel();
  if (n == 0 || !d.launching())
    return true;
  Broadcast bc;
  const Tensor *ts[] = {&cond, &x, &y};
  broadcastStrides(bc, rank, shape, ts, 3);
  return check(ctx,
               launchKernel(whereKernel, blocksFor(n), kBlock, 0, d.stream,
                            d.earlySmall, bc, cond.as<uint8_t>(),
                            x.as<float>(), y.as<float>(), r.as<float>(), n),
               "where");
}

bool linear(Context &ctx, const Tensor &x, const Tensor &w, const Tensor *bias,
            Activation act, int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  LinearShape s;
  Tensor r;
  if (!linearOperands(ctx, "linear", x, w, bias, false, s) ||
      !allocateLastDim(ctx, d, outSlot, x, s.N, DType::f32, r))
    return false;
  out = r;
  return gemm(ctx, d, x.as<float>(), s.M, s.K, w, false, s.N, s.bias, act,
              r.as<float>());
}

bool linearNK(Context &ctx, const Tensor &x, const Tensor &w,
              const Tensor *bias, Activation act, const Tensor *residual,
              int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  LinearShape s;
  Tensor r;
  if (!linearOperands(ctx, "linear", x, w, bias, true, s) ||
      !allocateLastDim(ctx, d, outSlot, x, s.N, DType::f32, r))
    return false;
  if (residual) {
    if (!requireF32(ctx, "linear", "residual", *residual))
      return false;
    bool same = residual->rank == r.rank;
    for (int i = 0; same && i < r.rank; ++i)
      same = residual->shape[i] == r.shape[i];
    if (!same)
      return ctx.fail("linear: residual " + residual->describe() +
                      " does not match the output " + r.describe());
  }
  out = r;
  return gemm(ctx, d, x.as<float>(), s.M, s.K, w, true, s.N, s.bias, act,
              r.as<float>(), residual ? residual->as<float>() : nullptr);
}

bool matmul(Context &ctx, const Tensor &a, const Tensor &b, int outSlot,
            Tensor &out) {
  Device &d = dev(ctx);
  if (!requireF32(ctx, "matmul", "lhs", a) || !requireF32(ctx, "matmul", "rhs", b))
    return false;
  if (a.rank < 2 || b.rank < 2 || a.shape[a.rank - 1] != b.shape[b.rank - 2])
    return ctx.fail("matmul: shapes " + a.describe() + " and " + b.describe() +
                    " are not supported on the CUDA backend (both must be at "
                    "least 2-D with matching inner dims)");
  const int64_t M = a.shape[a.rank - 2], K = a.shape[a.rank - 1],
                N = b.shape[b.rank - 1];
  int64_t batchA = product(a.shape, 0, a.rank - 2),
          batchB = product(b.shape, 0, b.rank - 2);
  int rank = 0;
  int64_t shape[kMaxRank];
  if (!broadcastShapes(a.rank - 2, a.shape, b.rank - 2, b.shape, rank, shape) ||
      (batchA != batchB && batchA != 1 && batchB != 1))
    return ctx.fail("matmul: batch dims of " + a.describe() + " and " +
                    b.describe() + " do not broadcast");
  int64_t batch = product(shape, 0, rank);
  if (batchA != batch && batchA != 1)
    return ctx.fail("matmul: partially broadcast batch dims are not supported "
                    "on the CUDA backend");
  shape[rank] = M;
  shape[rank + 1] = N;
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, DType::f32, rank + 2, shape))
    return false;
  out = r;
  if (r.numel() == 0 || !d.launching())
    return true;
  const float one = 1.0f, zero = 0.0f;
  ProfileTimer timer(d.profile, d.blasUs, d.blasCalls);
  return checkBlas(
      ctx,
      cublasSgemmStridedBatched(
          d.blas, CUBLAS_OP_N, CUBLAS_OP_N, int(N), int(M), int(K), &one,
          b.as<float>(), int(N), batchB == 1 ? 0 : K * N, a.as<float>(), int(K),
          batchA == 1 ? 0 : M * K, &zero, r.as<float>(), int(N), M * N,
          int(batch)),
      "cublasSgemmStridedBatched");
}

namespace {
bool normCommon(Context &ctx, const char *op, const Tensor &x,
                const Tensor &scale, const Tensor *bias, int64_t axis,
                int64_t &rows, int64_t &width) {
  if (!requireF32(ctx, op, "input", x) || !requireF32(ctx, op, "scale", scale) ||
      (bias && !requireF32(ctx, op, "bias", *bias)))
    return false;
  int64_t a = axis < 0 ? axis + x.rank : axis;
  if (a < 0 || a >= std::max(x.rank, 1))
    return ctx.fail(std::string(op) + ": axis " + std::to_string(axis) +
                    " out of range for " + x.describe());
  rows = product(x.shape, 0, int(a));
  width = product(x.shape, int(a), x.rank);
  if (scale.numel() != width || (bias && bias->numel() != width))
    return ctx.fail(std::string(op) + ": scale/bias do not have " +
                    std::to_string(width) + " elements");
  return true;
}
} // namespace

namespace {
/// Layer norm (Rms false) or RMS norm over dims [axis, rank): one block per
/// row.
/// Launches the norm kernel over `rows` rows of `width` (xs -> ys).
template <bool Rms>
bool launchNorm(Context &ctx, Device &d, const char *op, const float *xs,
                const float *sc, const float *b, int64_t rows, int64_t width,
                float epsilon, float *ys) {
  if (rows == 0 || width == 0 || !d.launching())
    return true;
  if (!check(ctx, normRows(xs, rows, width, sc, b, epsilon, Rms, ys, d.stream,
                           d.earlySmall),
             op))
    return false;
  return launched(ctx, op);
}

template <bool Rms>
bool norm(Context &ctx, const char *op, const Tensor &x, const Tensor &scale,
          const Tensor *bias, int64_t axis, float epsilon, int outSlot,
          Tensor &out) {
  Device &d = dev(ctx);
  int64_t rows, width;
  if (!normCommon(ctx, op, x, scale, bias, axis, rows, width))
    return false;
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, DType::f32, x.rank, x.shape))
    return false;
  out = r;
  return launchNorm<Rms>(ctx, d, op, x.as<float>(), scale.as<float>(),
                         bias ? bias->as<float>() : nullptr, rows, width,
                         epsilon, r.as<float>());
}
} // namespace

bool linearGroupNK(Context &ctx, const Tensor &x, const Tensor *normScale,
                   const Tensor *normBias, float normEpsilon, bool normRms,
                   int count, const Tensor *const *w,
                   const Tensor *const *bias, Activation act,
                   const int *outSlots, Tensor *out) {
  Device &d = dev(ctx);
  const char *op = "linear group";
  if (count < 1 || count > kGemvGroupMax)
    return ctx.fail("linear group: " + std::to_string(count) +
                    " weights (1 to " + std::to_string(kGemvGroupMax) +
                    " supported)");
  if (!normScale && normBias)
    return ctx.fail("linear group: a norm bias without a norm scale");
  if (normRms && normBias)
    return ctx.fail("linear group: an RMS norm takes no bias");
  LinearShape s[kGemvGroupMax];
  bool oneLaunch = true;
  for (int g = 0; g < count; ++g) {
    if (!linearOperands(ctx, op, x, *w[g], bias ? bias[g] : nullptr, true,
                        s[g]) ||
        !allocateLastDim(ctx, d, outSlots[g], x, s[g].N, DType::f32, out[g]))
      return false;
    oneLaunch = oneLaunch && w[g]->dtype == w[0]->dtype &&
                s[g].N <= std::numeric_limits<int>::max();
  }
  const int64_t M = s[0].M, K = s[0].K;
  GemvNorm norm;
  if (normScale) {
    int64_t rows, width;
    if (!normCommon(ctx, op, x, *normScale, normBias, -1, rows, width))
      return false;
    norm.scale = normScale->as<float>();
    norm.bias = normBias ? normBias->as<float>() : nullptr;
    norm.epsilon = normEpsilon;
    norm.rms = normRms;
  }
  if (M == 0)
    return true;
  // The input the linears read: x, or x normalised by the norm kernel
  // where the GEMV cannot normalise it itself.
  const float *input = x.as<float>();
  // The scratch buffer of a norm applied apart, sized in every mode (eager,
  // capture, replay) alike, whether or not this call ends up using it: a
  // graph replay checks that its allocations match the captured ones.
  if (normScale &&
      !d.ensure(ctx, d.normalisedInput, sizeof(float) * size_t(M * K),
                "normalised linear input"))
    return false;
  auto normaliseApart = [&] {
    float *n = static_cast<float *>(d.normalisedInput.ptr);
    input = n;
    return normRms ? launchNorm<true>(ctx, d, "rms_norm", x.as<float>(),
                                      norm.scale, nullptr, M, K, normEpsilon, n)
                   : launchNorm<false>(ctx, d, "layer_norm", x.as<float>(),
                                       norm.scale, norm.bias, M, K,
                                       normEpsilon, n);
  };
  if (!oneLaunch || M > kGemvRowsTokens) {
    // Prefill (cuBLAS) or mixed storage: one linear after the other.
    if (normScale && !normaliseApart())
      return false;
    // 16-bit weights of one type: the input rounded once for all of them.
    const DType type = w[0]->dtype;
    const bool shared = oneLaunch && count > 1 &&
                        (type == DType::f16 || type == DType::bf16);
    if (shared) {
      if (!d.ensure(ctx, d.halfInput, sizeof(__half) * size_t(M * K),
                    "16-bit GEMM input"))
        return false;
      if (d.launching() && !roundInput(ctx, d, input, M * K, type))
        return false;
    }
    for (int g = 0; g < count; ++g)
      if (!gemm(ctx, d, input, M, K, *w[g], true, s[g].N, s[g].bias, act,
                out[g].as<float>(), nullptr, shared))
        return false;
    return true;
  }
  // A folded norm needs each weight's folding terms (W scale, W bias),
  // computed once, eagerly, and kept with the device; a capture or replay
  // that finds them missing normalises apart instead.
  bool fold = normScale != nullptr, termsJustMade = false;
  for (int g = 0; fold && g < count; ++g) {
    const std::array<const void *, 3> key{w[g]->data, norm.scale, norm.bias};
    auto it = d.normTerms.find(key);
    if (it == d.normTerms.end()) {
      termsJustMade = true;
      if (d.mode != Mode::eager) {
        fold = false;
        break;
      }
      const size_t floats = 2 * size_t(s[g].N);
      DeviceBuffer buf;
      if (!check(ctx, cudaMalloc(&buf.ptr, sizeof(float) * floats),
                 "allocating norm folding terms"))
        return false;
      buf.bytes = sizeof(float) * floats;
      it = d.normTerms.emplace(key, buf).first;
      float *terms = static_cast<float *>(buf.ptr);
      const int n = int(s[g].N), k = int(K);
      cudaError_t e = withWeightType(w[g]->dtype, [&](auto z) {
        using W = decltype(z);
        return gemvNormTerms(w[g]->as<W>(), k, n, norm.scale, norm.bias, terms,
                             d.stream);
      });
      if (!check(ctx, e, "norm folding terms"))
        return false;
    }
    float *terms = static_cast<float *>(it->second.ptr);
    norm.wScale[g] = terms;
    norm.wBias[g] = norm.bias ? terms + s[g].N : nullptr;
  }
  if (normScale && !fold && !normaliseApart())
    return false;
  // The GEMVs read the folding terms before their wait (they are weights
  // once made): on the call that has just made them, a normal launch.
  const bool early = d.earlyGemv && !(fold && termsJustMade);
  if (!d.launching())
    return true;
  int N[kGemvGroupMax];
  const float *b[kGemvGroupMax];
  float *y[kGemvGroupMax];
  for (int g = 0; g < count; ++g) {
    N[g] = int(s[g].N);
    b[g] = s[g].bias;
    y[g] = out[g].as<float>();
  }
  const GemvNorm *n = fold ? &norm : nullptr;
  cudaError_t e;
  e = withWeightType(w[0]->dtype, [&](auto z) {
    using W = decltype(z);
    const W *wt[kGemvGroupMax];
    for (int g = 0; g < count; ++g)
      wt[g] = w[g]->as<W>();
    return gemvRowsGroup(input, int(M), int(K), count, wt, N, b, act, nullptr,
                         y, d.stream, early, n);
  });
  return check(ctx, e, "grouped gemv");
}

bool layerNorm(Context &ctx, const Tensor &x, const Tensor &scale,
               const Tensor *bias, int64_t axis, float epsilon, int outSlot,
               Tensor &out) {
  return norm<false>(ctx, "layer_norm", x, scale, bias, axis, epsilon, outSlot,
                     out);
}

bool rmsNorm(Context &ctx, const Tensor &x, const Tensor &scale, float epsilon,
             int outSlot, Tensor &out) {
  return norm<true>(ctx, "rms_norm", x, scale, nullptr, -1, epsilon, outSlot,
                    out);
}

bool softmax(Context &ctx, const Tensor &x, int64_t axis, int outSlot,
             Tensor &out) {
  Device &d = dev(ctx);
  if (!requireF32(ctx, "softmax", "input", x))
    return false;
  int64_t a = axis < 0 ? axis + x.rank : axis;
  if (a != x.rank - 1)
    return ctx.fail("softmax: only the last axis is supported on the CUDA "
                    "backend (axis " + std::to_string(axis) + " of " +
                    x.describe() + ")");
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, DType::f32, x.rank, x.shape))
    return false;
  out = r;
  int64_t width = x.shape[x.rank - 1], rows = width ? x.numel() / width : 0;
  if (rows == 0 || !d.launching())
    return true;
  softmaxKernel<<<unsigned(rows), kBlock, 0, d.stream>>>(x.as<float>(), width,
                                                         r.as<float>());
  return launched(ctx, "softmax");
}

bool attention(Context &ctx, const Tensor &q, const Tensor &k, const Tensor &v,
               const Tensor *mask, const Tensor *pastK, const Tensor *pastV,
               float scale, bool causal, ops::HeadLayout layout, int outSlot,
               Tensor &out, int presentKSlot, Tensor *presentK,
               int presentVSlot, Tensor *presentV) {
  Device &d = dev(ctx);
  const char *op = "attention";
  // The past may be float16 too (IODesc::attentionPast: a device KV cache
  // kept in 16 bits), both or neither.
  auto requirePast = [&](const char *what, const Tensor &t) {
    if (t.dtype == DType::f16)
      return checkTensor(ctx, op, what, t);
    return requireF32(ctx, op, what, t);
  };
  if (!requireF32(ctx, op, "q", q) || !requireF32(ctx, op, "k", k) ||
      !requireF32(ctx, op, "v", v) ||
      (pastK && !requirePast("past_k", *pastK)) ||
      (pastV && !requirePast("past_v", *pastV)) ||
      (mask && !checkTensor(ctx, op, "mask", *mask)))
    return false;
  const bool halfPast = pastK && pastK->dtype == DType::f16;
  if (pastK && pastV && pastV->dtype != pastK->dtype)
    return ctx.fail("attention: past_k is " + pastK->describe() +
                    " and past_v " + pastV->describe() +
                    ": one type for both");
  AttentionDims dims;
  if (!attentionDims(ctx, q, k, v, mask, pastK, pastV, layout, dims))
    return false;
  const int64_t B = dims.B, Hq = dims.Hq, Sq = dims.Sq, D = dims.D,
                Hk = dims.Hk, Sk = dims.Sk, Dv = dims.Dv, P = dims.P,
                T = dims.T;
  const bool tokenMajor = dims.tokenMajor;
  const int64_t oshape[4] = {B, tokenMajor ? Sq : Hq, tokenMajor ? Hq : Sq,
                             Dv};
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, DType::f32, 4, oshape))
    return false;
  out = r;
  const float *keys = k.as<float>(), *vals = v.as<float>();
  // Decode (a few query rows): the split-key kernel, which reads the past
  // and the new keys where they are and writes the present's new rows.
  DecodeAttention da;
  da.q = q.as<float>();
  da.k = k.as<float>();
  da.v = v.as<float>();
  da.maskF = mask && mask->dtype == DType::f32 ? mask->as<float>() : nullptr;
  da.maskB = mask && mask->dtype == DType::b1 ? mask->as<uint8_t>() : nullptr;
  for (int i = 0; i < 4; ++i)
    da.mStr[i] = dims.mStr[i];
  da.B = B;
  da.Hq = Hq;
  da.Hk = Hk;
  da.Sq = Sq;
  da.P = P;
  da.Sk = Sk;
  da.D = D;
  da.Dv = Dv;
  da.scale = scale;
  da.causal = causal;
  da.tokenMajor = tokenMajor;
  const bool decode = Sq <= kGemvRowsTokens && decodeAttentionSupported(D, Dv) &&
                      decodeAttentionRows(da) <= kGemvCounters;
  // A past that is the runtime's device cache already holds rows 0..P-1
  // of the present, and the decode loop reads only the new rows back: the
  // copy of the past into the present is skipped.
  auto isCache = [&](const Tensor *past) {
    if (!decode || !past)
      return false;
    for (const Device::Cache &c : d.caches)
      if (c.ptr && c.ptr == past->data)
        return true;
    return false;
  };
  const bool pastIsCache = isCache(pastK) && isCache(pastV);
  // A float16 past: the decode kernel reads a device cache as it is; any
  // other is widened first (the prompt's kernels and the present's copies
  // read float32).
  Tensor wideK, wideV;
  if (halfPast && !pastIsCache) {
    const size_t nk = size_t(pastK->numel()), nv = size_t(pastV->numel());
    if (!d.ensure(ctx, d.widePast, sizeof(float) * (nk + nv),
                  "a float16 past widened"))
      return false;
    float *wk = static_cast<float *>(d.widePast.ptr);
    wideK = *pastK;
    wideK.dtype = DType::f32;
    wideK.data = wk;
    wideV = *pastV;
    wideV.dtype = DType::f32;
    wideV.data = wk + nk;
    if (d.launching())
      for (auto [from, to] : {std::pair{pastK, &wideK}, std::pair{pastV, &wideV}})
        if (to->numel() > 0) {
          widenKernel<<<blocksFor(to->numel()), kBlock, 0, d.stream>>>(
              from->as<__half>(), to->as<float>(), to->numel());
          if (!launched(ctx, "attention (widening the past)"))
            return false;
        }
    pastK = &wideK;
    pastV = &wideV;
  }
  if (P > 0 && halfPast && pastIsCache) {
    da.pastKHalf = pastK->as<uint16_t>();
    da.pastVHalf = pastV->as<uint16_t>();
  } else if (P > 0) {
    da.pastK = pastK->as<float>();
    da.pastV = pastV->as<float>();
  }
  // The cache is written between steps only (flushAppends, initCache),
  // by normal launches before any kernel of this step: an early launch
  // may read it before waiting for the kernel before.
  da.pastReady = pastIsCache && d.prefetchPast;
  // A prompt's attention: tiles of 64 query rows, keys streamed (flash),
  // on the tensor cores in the 16-bit type of the model's weights, whose
  // prompt GEMMs round their inputs to it too; fp32 otherwise.
  using PA = Device::PromptAttention;
  const bool flash =
      d.promptAttention != PA::rows && prefillAttentionSupported(D, Dv);
  const PromptMath math = d.promptAttention == PA::fp32 ? PromptMath::f32
                          : ctx.bf16Weights             ? PromptMath::bf16
                          : ctx.f16Weights              ? PromptMath::f16
                                                        : PromptMath::f32;
  // A token-major prompt without a past on the tensor cores: the kernel
  // that rounds the new keys and values writes the presents too, on the
  // one read of them.
  // (prefillAttention computes nothing for empty values.)
  const bool presentByRounding = !decode && tokenMajor && P == 0 && flash &&
                                 math != PromptMath::f32 && Dv > 0;
  // `str`: cur's {batch, head, position} strides (AttentionDims).
  auto writePresent = [&](const Tensor *past, const Tensor &cur, int slot,
                          Tensor *present, int64_t width, const int64_t *str,
                          const float *&src) {
    const int64_t shape[4] = {B, Hk, T, width};
    Tensor p;
    if (!allocate(ctx, d, slot, p, DType::f32, 4, shape))
      return false;
    *present = p;
    src = p.as<float>();
    if (p.numel() == 0 || !d.launching() || pastIsCache)
      return true;
    if (presentByRounding)
      return true;
    if (!decode && tokenMajor && P == 0) {
      // A prompt's token-major keys: the present is [B, Hk, Sk, width]
      // read at the keys' own strides (str), one strided copy.
      Strided s;
      s.rank = 4;
      const int64_t shape[4] = {B, Hk, Sk, width};
      for (int i = 0; i < 4; ++i) {
        s.shape[i] = shape[i];
        s.stride[i] = i < 3 ? str[i] : 1;
      }
      return stridedCopy(ctx, d, s, cur, p);
    }
    if (!decode && !tokenMajor) {
      // A prompt's present: two pitched copies (the past's rows, then the
      // new ones, into every head's [T, width] block), which run near the
      // copy bandwidth where the kernel's per-element indexing did not
      // (ncu, OPT-1.3B's 1024-token prompt: 21 us a copy). Decode keeps
      // the kernel: a step launched early must follow a kernel.
      const size_t row = sizeof(float) * size_t(width);
      const size_t pitch = row * size_t(T);
      if (P > 0 &&
          !check(ctx,
                 cudaMemcpy2DAsync(p.as<float>(), pitch, past->as<float>(),
                                   row * size_t(P), row * size_t(P),
                                   size_t(B * Hk), cudaMemcpyDeviceToDevice,
                                   d.stream),
                 "attention (present)"))
        return false;
      return Sk == 0 ||
             check(ctx,
                   cudaMemcpy2DAsync(p.as<float>() + P * width, pitch,
                                     cur.as<float>(), row * size_t(Sk),
                                     row * size_t(Sk), size_t(B * Hk),
                                     cudaMemcpyDeviceToDevice, d.stream),
                   "attention (present)");
    }
    // Decode, or a token-major prompt after a past.
    presentKernel<<<blocksFor(p.numel()), kBlock, 0, d.stream>>>(
        past ? past->as<float>() : nullptr, cur.as<float>(), B * Hk, Hk, P, Sk,
        width, tokenMajor, p.as<float>());
    return launched(ctx, "attention (present)");
  };
  if (presentK &&
      !writePresent(pastK, k, presentKSlot, presentK, D, dims.kStr, keys))
    return false;
  if (presentV &&
      !writePresent(pastV, v, presentVSlot, presentV, Dv, dims.vStr, vals))
    return false;
  if (P > 0 && (!presentK || !presentV))
    return ctx.fail("attention: a past needs present outputs");
  if (decode) {
    da.out = r.as<float>();
    // With a copied past the present is complete already.
    da.presentK = pastIsCache && presentK ? presentK->as<float>() : nullptr;
    da.presentV = pastIsCache && presentV ? presentV->as<float>() : nullptr;
    if (!d.ensure(ctx, d.attentionScratch, decodeAttentionScratchBytes(da),
                  "attention partial results"))
      return false;
    if (r.numel() == 0 || !d.launching())
      return true;
    return check(ctx,
                 decodeAttention(da, static_cast<float *>(d.attentionScratch.ptr),
                                 d.gemvCounters, d.stream,
                                 d.earlySmall),
                 "attention");
  }
  // A prompt's rows, over the present's keys and values.
  PrefillAttention pa;
  pa.q = q.as<float>();
  pa.k = keys;
  pa.v = vals;
  pa.maskF = da.maskF;
  pa.maskB = da.maskB;
  for (int i = 0; i < 4; ++i)
    pa.mStr[i] = dims.mStr[i];
  pa.B = B;
  pa.Hq = Hq;
  pa.Hk = Hk;
  pa.Sq = Sq;
  pa.T = T;
  pa.D = D;
  pa.Dv = Dv;
  pa.scale = scale;
  pa.causal = causal;
  pa.out = r.as<float>();
  pa.tokenMajor = tokenMajor;
  if (presentByRounding) {
    pa.k = k.as<float>();
    pa.v = v.as<float>();
    pa.kCopy = presentK ? presentK->as<float>() : nullptr;
    pa.vCopy = presentV ? presentV->as<float>() : nullptr;
  }
  // The keys and values are the token-major new ones, or the present's.
  pa.kvTokenMajor = tokenMajor && pa.k == k.as<float>();
  if (flash) {
    if (!d.ensure(ctx, d.attentionScratch, prefillAttentionScratchBytes(pa, math),
                  "attention key spans"))
      return false;
    if (r.numel() == 0 || !d.launching())
      return true;
    return check(ctx,
                 prefillAttention(pa, math, d.attentionScratch.ptr, d.stream),
                 "attention");
  }
  if (r.numel() == 0 || !d.launching())
    return true;
  // Larger heads (or SPARSEC_CUDA_PROMPT_ATTN=0): one block a query row,
  // its scores in shared memory.
  size_t smem = sizeof(float) * size_t(D + T);
  if (smem > 200 * 1024)
    return ctx.fail("attention: " + std::to_string(T) +
                    " keys do not fit in shared memory on the CUDA backend");
  if (smem > 48 * 1024 &&
      !check(ctx,
             cudaFuncSetAttribute(attentionKernel,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(smem)),
             "attention shared memory"))
    return false;
  attentionKernel<<<unsigned(B * Hq * Sq), 128, smem, d.stream>>>(pa);
  return launched(ctx, "attention");
}

namespace {
/// An embedding lookup's ids on the device: checked against the table's
/// rows on the host and uploaded at `site`, or the device's own greedy
/// picks (Backend::deviceArgmax), read in place.
bool embeddingIds(Context &ctx, Device &d, const Tensor &table,
                  const Tensor &ids, int site, Tensor &dids) {
  if (!checkTensor(ctx, "embedding", "ids", ids) ||
      !weightType(ctx, "embedding", table))
    return false;
  if (table.rank != 2)
    return ctx.fail("embedding: table must be [V, D], got " + table.describe());
  if (ids.dtype != DType::i64)
    return ctx.fail("embedding: ids must be int64 on the CUDA backend, got " +
                    ids.describe());
  if (ids.rank + 1 > kMaxRank)
    return ctx.fail("embedding: ids " + ids.describe() + " have too many dims");
  const int64_t V = table.shape[0], n = ids.numel();
  if (ids.data && ids.data == d.argmaxIds.ptr) {
    // Each pick is below the width of the rows it was picked from.
    if (d.argmaxWidth > V)
      return ctx.fail("embedding: the device's greedy picks range over " +
                      std::to_string(d.argmaxWidth) + " ids, more than the "
                      "table's " + std::to_string(V) +
                      " rows (SPARSEC_CUDA_AHEAD=0 checks each pick on the "
                      "host instead)");
  } else {
    // ids live on the host: checked there, then uploaded. Negative ids
    // count from the table's end (ONNX Gather), which the kernel resolves.
    const int64_t *hp = ids.as<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      if (hp[i] < -V || hp[i] >= V)
        return ctx.fail("embedding: id " + std::to_string(hp[i]) +
                        " is outside the table's " + std::to_string(V) +
                        " rows (ids lie in [-" + std::to_string(V) + ", " +
                        std::to_string(V) + "))");
  }
  return upload(ctx, ids, site, dids);
}

/// The [ids.shape, D] float32 result of a lookup.
bool embeddingResult(Context &ctx, Device &d, const Tensor &ids, int64_t D,
                     int outSlot, Tensor &out) {
  int64_t shape[kMaxRank];
  for (int i = 0; i < ids.rank; ++i)
    shape[i] = ids.shape[i];
  shape[ids.rank] = D;
  return allocate(ctx, d, outSlot, out, DType::f32, ids.rank + 1, shape);
}

/// The lookup (or, with table2, the pair's sum) into r, ids on the device.
bool lookup(Context &ctx, Device &d, const Tensor &table, const Tensor &dids,
            const Tensor *table2, const Tensor *dids2, const Tensor &r) {
  if (r.numel() == 0 || !d.launching())
    return true;
  return check(ctx,
               embeddingRows(table.data, table.shape[0], dids.as<int64_t>(),
                             table2 ? table2->data : nullptr,
                             table2 ? table2->shape[0] : 0,
                             dids2 ? dids2->as<int64_t>() : nullptr,
                             table.dtype == DType::f16, dids.numel(),
                             table.shape[1], r.as<float>(), d.stream,
                             d.earlySmall),
               "embedding");
}
} // namespace

bool embedding(Context &ctx, const Tensor &table, const Tensor &ids, int site,
               int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  Tensor dids, r;
  if (!embeddingIds(ctx, d, table, ids, site, dids) ||
      !embeddingResult(ctx, d, ids, table.shape[1], outSlot, r))
    return false;
  out = r;
  return lookup(ctx, d, table, dids, nullptr, nullptr, r);
}

bool embedding(Context &ctx, const Tensor &table, const Tensor &ids, int site,
               const Tensor &table2, const Tensor &ids2, int site2,
               int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  Tensor dids, dids2, r;
  if (!embeddingIds(ctx, d, table, ids, site, dids) ||
      !checkEmbeddingPair(ctx, table, ids, table2, ids2) ||
      !embeddingIds(ctx, d, table2, ids2, site2, dids2) ||
      !embeddingResult(ctx, d, ids, table.shape[1], outSlot, r))
    return false;
  out = r;
  return lookup(ctx, d, table, dids, &table2, &dids2, r);
}

bool reshapeTo(Context &ctx, const Tensor &x, int rank, const int64_t *shape,
               int /*outSlot*/, Tensor &out) {
  if (!checkReshapeTo(ctx, x, rank, shape))
    return false;
  // A view of the input, wherever that lies: the planner keeps a reshape's
  // input live while the result (or a view of it) is, and gives the result
  // the input's slot. The input can lie outside that slot when it is itself
  // a view (a transpose that only moves unit dims, decided here at run
  // time: the attention output of a decode step); copying it into the slot
  // cost a device-to-device copy a layer (1 us each on an H200).
  out = x;
  out.rank = rank;
  for (int i = 0; i < rank; ++i)
    out.shape[i] = shape[i];
  return true;
}

bool reshape(Context &ctx, const Tensor &x, const Tensor &shapeT,
             bool allowzero, int outSlot, Tensor &out) {
  int rank = 0;
  int64_t shape[kMaxRank];
  return reshapeTarget(ctx, x, shapeT, allowzero, rank, shape) &&
         reshapeTo(ctx, x, rank, shape, outSlot, out);
}

bool transpose(Context &ctx, const Tensor &x, const int64_t *perm, int outSlot,
               Tensor &out) {
  Device &d = dev(ctx);
  if (!checkTensor(ctx, "transpose", "input", x))
    return false;
  Strided s;
  s.rank = x.rank;
  int64_t own[kMaxRank], shape[kMaxRank];
  contiguousStrides(x.rank, x.shape, own);
  bool seen[kMaxRank] = {};
  for (int i = 0; i < x.rank; ++i) {
    int64_t p = perm[i];
    if (p < 0 || p >= x.rank || seen[p])
      return ctx.fail("transpose: invalid permutation for " + x.describe());
    seen[p] = true;
    shape[i] = s.shape[i] = x.shape[p];
    s.stride[i] = own[p];
  }
  // Only unit dims move (the head transposes of a decode step): a view.
  if (transposeIsView(x.rank, x.shape, perm)) {
    out = x;
    for (int i = 0; i < x.rank; ++i)
      out.shape[i] = shape[i];
    return true;
  }
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, x.dtype, x.rank, shape))
    return false;
  out = r;
  return stridedCopy(ctx, d, s, x, r);
}

bool concat(Context &ctx, int n, const Tensor *const *inputs, int64_t axis,
            int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  if (n < 1)
    return ctx.fail("concat: no inputs");
  const Tensor &f = *inputs[0];
  int64_t a = axis < 0 ? axis + f.rank : axis;
  if (a < 0 || a >= f.rank)
    return ctx.fail("concat: axis " + std::to_string(axis) + " out of range");
  int64_t shape[kMaxRank];
  for (int i = 0; i < f.rank; ++i)
    shape[i] = f.shape[i];
  shape[a] = 0;
  for (int k = 0; k < n; ++k) {
    const Tensor &t = *inputs[k];
    if (!checkTensor(ctx, "concat", "input", t))
      return false;
    bool match = t.rank == f.rank && t.dtype == f.dtype;
    for (int i = 0; match && i < f.rank; ++i)
      match = i == a || t.shape[i] == f.shape[i];
    if (!match)
      return ctx.fail("concat: input " + t.describe() + " does not match " +
                      f.describe());
    shape[a] += t.shape[a];
  }
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, f.dtype, f.rank, shape))
    return false;
  out = r;
  if (r.bytes() == 0 || !d.launching())
    return true;
  const size_t es = dtypeSize(f.dtype);
  const int64_t outer = product(shape, 0, int(a)),
                inner = product(shape, int(a) + 1, f.rank);
  int64_t offset = 0;
  for (int k = 0; k < n; ++k) {
    const Tensor &t = *inputs[k];
    size_t width = size_t(t.shape[a] * inner) * es;
    if (width && outer &&
        !check(ctx,
               cudaMemcpy2DAsync(static_cast<char *>(r.data) + offset, size_t(shape[a] * inner) * es,
                                 t.data, width, width, size_t(outer),
                                 cudaMemcpyDeviceToDevice, d.stream),
               "concat"))
      return false;
    offset += int64_t(width);
  }
  return true;
}

bool slice(Context &ctx, const Tensor &data, const Tensor &starts,
           const Tensor &ends, const Tensor &axesT, const Tensor &stepsT,
           int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  if (!checkTensor(ctx, "slice", "data", data))
    return false;
  std::vector<int64_t> st, en, ax, sp;
  if (!readIndexTensor(ctx, "slice", "starts", starts, st) ||
      !readIndexTensor(ctx, "slice", "ends", ends, en) ||
      !readIndexTensor(ctx, "slice", "axes", axesT, ax) ||
      !readIndexTensor(ctx, "slice", "steps", stepsT, sp))
    return false;
  if (st.size() != en.size() || ax.size() != st.size() || sp.size() != st.size())
    return ctx.fail("slice: starts, ends, axes and steps differ in length");
  Strided s;
  s.rank = data.rank;
  int64_t own[kMaxRank], shape[kMaxRank];
  contiguousStrides(data.rank, data.shape, own);
  for (int i = 0; i < data.rank; ++i) {
    shape[i] = s.shape[i] = data.shape[i];
    s.stride[i] = own[i];
  }
  for (size_t i = 0; i < st.size(); ++i) {
    int64_t a = ax[i] < 0 ? ax[i] + data.rank : ax[i];
    if (a < 0 || a >= data.rank)
      return ctx.fail("slice: axis " + std::to_string(ax[i]) + " out of range");
    int64_t dim = data.shape[a], step = sp[i];
    if (step == 0)
      return ctx.fail("slice: step 0");
    int64_t b = st[i] < 0 ? st[i] + dim : st[i];
    int64_t e = en[i] < 0 ? en[i] + dim : en[i];
    int64_t len;
    if (step > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > b ? (e - b + step - 1) / step : 0;
    } else {
      b = std::clamp<int64_t>(b, -1, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = b > e ? (b - e + (-step) - 1) / (-step) : 0;
    }
    shape[a] = s.shape[a] = len;
    s.base += b * own[a];
    s.stride[a] = own[a] * step;
  }
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, data.dtype, data.rank, shape))
    return false;
  out = r;
  return stridedCopy(ctx, d, s, data, r);
}

bool expand(Context &ctx, const Tensor &x, const Tensor &shapeT, int outSlot,
            Tensor &out) {
  Device &d = dev(ctx);
  std::vector<int64_t> req;
  if (!checkTensor(ctx, "expand", "input", x) ||
      !ops::detail::readShape(ctx, "expand", shapeT, req))
    return false;
  for (int64_t v : req)
    if (v < 0)
      return ctx.fail("expand: invalid shape " + shapeString(int(req.size()), req.data()));
  int rank = 0;
  int64_t shape[kMaxRank];
  if (!broadcastShapes(x.rank, x.shape, int(req.size()), req.data(), rank,
                       shape))
    return ctx.fail("expand: cannot broadcast " + x.describe() + " to " +
                    shapeString(int(req.size()), req.data()));
  // A strided copy whose broadcast dims have stride 0.
  Strided s;
  s.rank = rank;
  for (int i = 0; i < rank; ++i)
    s.shape[i] = shape[i];
  ops::detail::broadcastStridesOf(x, rank, s.stride);
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, x.dtype, rank, shape))
    return false;
  out = r;
  return stridedCopy(ctx, d, s, x, r);
}

//===----------------------------------------------------------------------===//
// Sparse ops
//===----------------------------------------------------------------------===//

namespace {
/// A decode step's predictIndex call, held back so that the FFN after it
/// can launch it as predictUp (the selection and the up projection in one
/// kernel).
struct DeferredPredict {
  bool pending = false;
  const float *x = nullptr;
  int tokens = 0, d = 0, r = 0, f = 0;
  const void *w1 = nullptr, *w2 = nullptr;
  DType wtype = DType::f32;
  const float *bias = nullptr;
  float threshold = 0.0f;
  float *scratch = nullptr;
  IndexView ix;
  uint8_t *mask = nullptr;
  int maskRows = 0;
};

/// Launches a held-back predictor as predictIndex.
cudaError_t launchPredictIndex(const DeferredPredict &p, Device &d) {
  return withWeightType(p.wtype, [&](auto z) {
    using W = decltype(z);
    return predictIndex<W>(p.x, p.tokens, static_cast<const W *>(p.w1), p.d,
                           p.r, static_cast<const W *>(p.w2), p.f, p.bias,
                           p.threshold, p.scratch, p.ix, p.mask, p.maskRows,
                           d.stream, d.earlySparse);
  });
}

/// predict; with `defer`, a decode step's kernels are not launched but
/// described there (the caller launches them).
bool predictImpl(Context &ctx, const Tensor &x, const Tensor &w1,
                 const Tensor &w2, const Tensor *bias, float threshold,
                 int indexSite, int outSlot, Tensor &out, IndexSet &index,
                 DeferredPredict *defer) {
  Device &d = dev(ctx);
  const char *op = "predict";
  if (!requireF32(ctx, op, "input", x) || !weightType(ctx, op, w1) ||
      !weightType(ctx, op, w2))
    return false;
  if (w1.rank != 2 || w2.rank != 2 || w1.dtype != w2.dtype ||
      x.shape[x.rank - 1] != w1.shape[0] || w1.shape[1] != w2.shape[0])
    return ctx.fail("predict: input " + x.describe() + " does not match " +
                    w1.describe() + " and " + w2.describe());
  const int64_t D = w1.shape[0], R = w1.shape[1], N = w2.shape[1];
  const int64_t M = D ? x.numel() / D : 0;
  bool ok;
  const float *b = biasOf(ctx, op, bias, N, ok);
  if (!ok)
    return false;
  Tensor r;
  if (!allocateLastDim(ctx, d, outSlot, x, N, DType::b1, r) ||
      !ensureIndex(ctx, d, indexSite, N))
    return false;
  out = r;
  IndexBuffers &ib = indexBuffers(d, indexSite);
  index = IndexSet{};
  index.neurons = int(N);
  index.tokens = int(M);
  const bool decode = M > 0 && M <= kMaxTokens;
  if (decode && !ensureList(ctx, d, indexSite, N))
    return false;
  if (decode) {
    // The decode kernels' scratch ends with counters they keep at zero:
    // zero it whenever it is (re)allocated.
    const void *before = ib.scratch.ptr;
    const size_t bytes = sizeof(float) * predictScratchFloats(int(M), int(D), int(R));
    if (!d.ensure(ctx, ib.scratch, bytes, "predictor scratch"))
      return false;
    if (ib.scratch.ptr != before &&
        !check(ctx, cudaMemsetAsync(ib.scratch.ptr, 0, ib.scratch.bytes, d.stream),
               "predictor scratch"))
      return false;
  } else if (!d.ensure(ctx, ib.prefill,
                       sizeof(float) * size_t(std::max<int64_t>(M, 1)) * (R + N),
                       "predictor scratch")) {
    return false;
  }
  // A replay of a decode step launches nothing here; the batched path
  // still calls its GEMMs, which record the allocations they make in
  // every step (a replay compares them with the capture's).
  if (M == 0 || (decode && !d.launching())) {
    index.site = decode ? indexSite : -1;
    index.listed = decode;
    return true;
  }
  if (decode) {
    float *scratch = static_cast<float *>(ib.scratch.ptr);
    // The set as segments and as one list (which the up and down kernels
    // read without scanning): the union over the tokens, which the step
    // computes; mask row t is token t's own selection, which the up
    // projection keeps (a token's result does not depend on its batch).
    DeferredPredict p;
    p.pending = true;
    p.x = x.as<float>();
    p.tokens = int(M);
    p.d = int(D);
    p.r = int(R);
    p.f = int(N);
    p.w1 = w1.data;
    p.w2 = w2.data;
    p.wtype = w1.dtype;
    p.bias = b;
    p.threshold = threshold;
    p.scratch = scratch;
    p.ix = indexView(d, indexSite, N, /*listed=*/true);
    p.mask = r.as<uint8_t>();
    p.maskRows = int(M);
    index.site = indexSite;
    index.listed = true;
    if (defer) {
      *defer = p;
      return true;
    }
    return check(ctx, launchPredictIndex(p, d), "predictor");
  }
  // Prefill: two GEMMs and a threshold, per token.
  float *hidden = static_cast<float *>(ib.prefill.ptr);
  float *logits = hidden + M * R;
  if (!gemm(ctx, d, x.as<float>(), M, D, w1, false, R, nullptr,
            Activation::none, hidden) ||
      !gemm(ctx, d, hidden, M, R, w2, false, N, nullptr, Activation::none,
            logits))
    return false;
  if (!d.launching())
    return true;
  thresholdKernel<<<blocksFor(M * N), kBlock, 0, d.stream>>>(
      logits, M * N, int(N), b, threshold, r.as<uint8_t>());
  return launched(ctx, "predictor threshold");
}
} // namespace

bool predict(Context &ctx, const Tensor &x, const Tensor &w1, const Tensor &w2,
             const Tensor *bias, float threshold, int indexSite, int outSlot,
             Tensor &out, IndexSet &index) {
  return predictImpl(ctx, x, w1, w2, bias, threshold, indexSite, outSlot, out,
                     index, nullptr);
}

namespace {
/// Whether the up projection can run over `index` (a decode-sized set of
/// x's rows and w's neurons).
bool decodeIndex(const IndexSet &index, int64_t M, int64_t N, Activation act) {
  return index.site >= 0 && !index.fromInput && index.tokens == M &&
         M <= kMaxTokens && index.neurons == N &&
         (act == Activation::none || act == Activation::relu);
}

/// The per-token rows of an active mask [M, N] for a decode batch of
/// several tokens (null for one token or a mask of one row).
const uint8_t *tokenMask(const Tensor &active, int64_t M, int64_t N) {
  return M > 1 && active.numel() == M * N ? active.as<uint8_t>() : nullptr;
}

template <typename... A>
cudaError_t upFor(DType t, const float *x, int M, const void *w, A... rest) {
  return withWeightType(t, [&](auto z) {
    using W = decltype(z);
    return sparseUp<W>(x, M, static_cast<const W *>(w), rest...);
  });
}
template <typename... A>
cudaError_t downFor(DType t, const float *h, int M, int ldh, const void *w,
                    A... rest) {
  return withWeightType(t, [&](auto z) {
    using W = decltype(z);
    return sparseDown<W>(h, M, ldh, static_cast<const W *>(w), rest...);
  });
}

/// The residual operand of a sparse linear: float32, y's shape (or null).
bool residualOf(Context &ctx, const Tensor *residual, const Tensor &y,
                const float *&out) {
  out = nullptr;
  if (!residual)
    return true;
  if (!checkTensor(ctx, "sparse_linear", "residual", *residual))
    return false;
  if (residual->dtype != DType::f32 || residual->numel() != y.numel())
    return ctx.fail("sparse_linear: residual " + residual->describe() +
                    " does not match the result " + y.describe());
  out = residual->as<float>();
  return true;
}
} // namespace

bool sparseLinearOutput(Context &ctx, const Tensor &x, const Tensor &w,
                        const Tensor *bias, const Tensor &active,
                        const IndexSet &index, Activation act, int outSlot,
                        Tensor &out, IndexSet &outIndex) {
  Device &d = dev(ctx);
  LinearShape s;
  if (!linearOperands(ctx, "sparse_linear", x, w, bias, true, s))
    return false;
  const int64_t N = s.N, K = s.K, M = s.M;
  const float *b = s.bias;
  if (active.dtype != DType::b1 || (active.numel() != M * N && active.numel() != N))
    return ctx.fail("sparse_linear: active mask " + active.describe() +
                    " does not match " + std::to_string(M) + " rows of " +
                    std::to_string(N) + " neurons");
  Tensor r;
  if (!allocateLastDim(ctx, d, outSlot, x, N, DType::f32, r))
    return false;
  out = r;
  outIndex = IndexSet{};
  if (decodeIndex(index, M, N, act)) {
    outIndex = index;
    if (M == 0 || !d.launching())
      return true;
    // The neurons outside the set are 0 (sparseFfn, which owns its h,
    // skips this).
    if (!check(ctx, cudaMemsetAsync(r.data, 0, r.bytes(), d.stream),
               "sparse_linear (zero fill)"))
      return false;
    return check(ctx,
                 upFor(w.dtype, x.as<float>(), int(M), w.data, int(K), b,
                       indexView(d, index.site, N, index.listed),
                       act == Activation::relu, r.as<float>(), int(N),
                       RowsInit{}, d.stream, nullptr, nullptr, d.earlySparse,
                       tokenMask(active, M, N)),
                 "sparse_linear (up projection)");
  }
  // Dense computation with the per-token mask applied.
  if (!gemm(ctx, d, x.as<float>(), M, K, w, true, N, b, act, r.as<float>()))
    return false;
  if (M == 0 || N == 0 || !d.launching())
    return true;
  applyMaskKernel<<<blocksFor(M * N), kBlock, 0, d.stream>>>(
      r.as<float>(), M * N, int(N), active.as<uint8_t>(),
      active.numel() == M * N);
  return launched(ctx, "sparse_linear (mask)");
}

bool gateMask(Context &ctx, const Tensor &x, bool positive, int indexSite,
              int outSlot, Tensor &out, IndexSet &index) {
  Device &d = dev(ctx);
  if (!requireF32(ctx, "gate mask", "input", x))
    return false;
  const int64_t N = x.rank ? x.shape[x.rank - 1] : 1;
  const int64_t M = N ? x.numel() / N : 0;
  Tensor r;
  if (!allocateLastDim(ctx, d, outSlot, x, N, DType::b1, r))
    return false;
  out = r;
  index = IndexSet{};
  index.neurons = int(N);
  index.tokens = int(M);
  if (M > 0 && M <= kMaxTokens) {
    // Decode: the mask and the union set of its neurons in one kernel.
    if (!ensureIndex(ctx, d, indexSite, N))
      return false;
    index.site = indexSite;
    if (!d.launching())
      return true;
    return check(ctx,
                 indexFromGate(x.as<float>(), int(M), positive,
                               r.as<uint8_t>(), indexView(d, indexSite, N),
                               d.stream, d.earlySparse),
                 "gate mask");
  }
  if (M * N == 0 || !d.launching())
    return true;
  gateMaskKernel<<<blocksFor(M * N), kBlock, 0, d.stream>>>(
      x.as<float>(), M * N, positive, r.as<uint8_t>());
  return launched(ctx, "gate mask");
}

bool nonzeroIndex(Context &ctx, const Tensor &x, int indexSite,
                  IndexSet &index) {
  Device &d = dev(ctx);
  if (!requireF32(ctx, "sparse_linear", "input", x))
    return false;
  const int64_t N = x.rank ? x.shape[x.rank - 1] : 1;
  const int64_t M = N ? x.numel() / N : 0;
  index = IndexSet{};
  index.neurons = int(N);
  index.tokens = int(M);
  if (M == 0 || M > kMaxTokens)
    return true;
  if (!ensureIndex(ctx, d, indexSite, N))
    return false;
  // Built by the sparseLinearInput that reads it, in the kernel that also
  // writes the base of its result.
  index.site = indexSite;
  index.fromInput = true;
  return true;
}

namespace {
/// Whether a down projection of M rows and N outputs takes its PIT plan.
/// The compiler plans for a prompt of `--pit-tokens` rows; a short prompt
/// or a decode batch above kMaxTokens gives a grid of a few blocks, where
/// cuBLAS is faster (pitFillsGpu).
bool pitWorthwhile(const Device &d, int64_t M, int64_t N, PitPlan pit) {
  if (d.pitUse != PitUse::fill)
    return d.pitUse == PitUse::always;
  return pitFillsGpu(M, N, pit.tile, pit.columns, multiprocessorCount());
}
} // namespace

bool sparseLinearInput(Context &ctx, const Tensor &x, const Tensor &w,
                       const Tensor *bias, const IndexSet &index, PitPlan pit,
                       const Tensor *residual, int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  LinearShape s;
  Tensor r;
  if (!linearOperands(ctx, "sparse_linear", x, w, bias, false, s) ||
      !allocateLastDim(ctx, d, outSlot, x, s.N, DType::f32, r))
    return false;
  const int64_t K = s.K, N = s.N, M = s.M;
  const float *b = s.bias;
  const float *res;
  if (!residualOf(ctx, residual, r, res))
    return false;
  out = r;
  // The dense GEMM's result (and a PIT result whose residual is not
  // 16-byte aligned) gets the residual added afterwards.
  auto addResidual = [&]() {
    if (!res || M * N == 0 || !d.launching())
      return true;
    addInPlaceKernel<<<blocksFor(M * N), kBlock, 0, d.stream>>>(r.as<float>(),
                                                                 res, M * N);
    return launched(ctx, "sparse_linear (residual)");
  };
  const int tile = pit.tile;
  if (M > kMaxTokens && (w.dtype == DType::f16 || w.dtype == DType::bf16) &&
      pitSupported(M, K, N, tile, w.data) && pitWorthwhile(d, M, N, pit) &&
      (reinterpret_cast<uintptr_t>(r.data) & 15) == 0) {
    // PIT: gather each block of `tile` tokens' active neurons (rounded to
    // W's 16-bit type), then dense tensor-core tiles over those rows. The
    // matmul's epilogue adds the residual where it is 16-byte aligned (it
    // may be the result itself: each element is read before it is
    // written, by the same thread).
    if (!d.ensure(ctx, d.pitIdx, pitIdxBytes(M, K, tile), "PIT index") ||
        !d.ensure(ctx, d.pitCount, pitCountBytes(M, tile), "PIT counts") ||
        !d.ensure(ctx, d.pitGather, pitGatherBytes(M, K, tile),
                  "PIT gathered activations"))
      return false;
    if (!d.launching())
      return true;
    PitWorkspace ws;
    ws.idx = static_cast<int32_t *>(d.pitIdx.ptr);
    ws.count = static_cast<int32_t *>(d.pitCount.ptr);
    ws.xg = d.pitGather.ptr;
    const bool fold = (reinterpret_cast<uintptr_t>(res) & 15) == 0;
    auto pit16 = [&](auto type) {
      using E = decltype(type);
      return check(ctx,
                   pitSRead<E>(x.as<float>(), M, K, tile, d.pitSorted, ws,
                               d.stream, d.earlySparse),
                   "sparse_linear (PIT gather)") &&
             check(ctx,
                   pitMatmul(ws, M, K, w.as<E>(), N, tile, b, Activation::none,
                             fold ? res : nullptr, r.as<float>(), d.stream,
                             pit.columns, 0, d.earlySparse),
                   "sparse_linear (PIT matmul)");
    };
    return (w.dtype == DType::bf16 ? pit16(__nv_bfloat16())
                                   : pit16(__half())) &&
           (fold || addResidual());
  }
  // Above a decode batch cuBLAS(Lt) adds the residual as the GEMM's C
  // (gemm's GEMV paths, which take no residual, stop at kGemvRows).
  static_assert(kGemvRows <= kMaxTokens, "a GEMV would drop the residual");
  if (M > kMaxTokens)
    return gemm(ctx, d, x.as<float>(), M, K, w, false, N, b, Activation::none,
                r.as<float>(), res);
  if (index.site < 0 || index.tokens != M || index.neurons != K)
    return gemm(ctx, d, x.as<float>(), M, K, w, false, N, b, Activation::none,
                r.as<float>()) &&
           addResidual();
  if (M == 0 || N == 0 || !d.launching())
    return true;
  d.countsDensity = true;
  const IndexView ix = indexView(d, index.site, K, index.listed);
  const RowsInit init{r.as<float>(), b, res, int(M), int(N)};
  if (index.fromInput) {
    // Exact mode: the set of x's non-zeros and y's base in one kernel.
    if (!check(ctx, indexFromActivations(x.as<float>(), int(M), ix, init, d.stream,
                                    d.earlySparse),
               "sparse_linear (index)"))
      return false;
  } else {
    fillRowsKernel<<<blocksFor(M * N), kBlock, 0, d.stream>>>(r.as<float>(), M * N,
                                                              int(N), b, res);
    if (!launched(ctx, "sparse_linear (bias)"))
      return false;
  }
  return check(ctx,
               downFor(w.dtype, x.as<float>(), int(M), int(K), w.data, int(N), ix,
                       r.as<float>(), d.stream, 0, d.densityCounts,
                       d.earlySparse),
               "sparse_linear (down projection)");
}

namespace {
/// Whether the bytes of tensors a and b overlap.
bool overlaps(const Tensor &a, const Tensor &b) {
  const auto *pa = static_cast<const char *>(a.data);
  const auto *pb = static_cast<const char *>(b.data);
  return a.bytes() && b.bytes() && pa < pb + b.bytes() && pb < pa + a.bytes();
}
} // namespace

bool gatedFfn(Context &ctx, const Tensor &x, const Tensor &gate,
              const Tensor &mask, const IndexSet &index, const Tensor &wUp,
              const Tensor *bUp, int upSlot, Tensor &up, int prodSlot,
              Tensor &prod, const Tensor &wDown, const Tensor *bDown,
              PitPlan pit, const Tensor *residual, int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  // The three ops one after the other (what the emitter would otherwise
  // have emitted).
  auto separate = [&]() {
    IndexSet upIndex;
    return sparseLinearOutput(ctx, x, wUp, bUp, mask, index, Activation::none,
                              upSlot, up, upIndex) &&
           cuda::binary(ctx, ops::Binary::mul, gate, up, prodSlot, prod) &&
           sparseLinearInput(ctx, prod, wDown, bDown, upIndex, pit, residual,
                             outSlot, out);
  };
  LinearShape us, ds;
  if (!linearOperands(ctx, "sparse_linear", x, wUp, bUp, true, us))
    return false;
  const int64_t M = us.M, N = us.N;
  // 1-2 tokens (H200, d 4096, F 11008, sparsec-bench-gated-ffn: 1.08-1.12x
  // faster than the three ops at one token; at four, where the list sends
  // the down projection to its tensor-core kernel, 0.91-0.92x; two tokens
  // take the CUDA-core kernels one does).
  if (!d.fuseGated || M > 2 || !decodeIndex(index, M, N, Activation::none) ||
      index.listed || gate.dtype != DType::f32 || gate.numel() != M * N ||
      mask.dtype != DType::b1 || (mask.numel() != M * N && mask.numel() != N))
    return separate();
  Tensor u, p, y;
  if (!allocateLastDim(ctx, d, upSlot, x, N, DType::f32, u) ||
      !allocateLastDim(ctx, d, prodSlot, x, N, DType::f32, p) ||
      !linearOperands(ctx, "sparse_linear", p, wDown, bDown, false, ds) ||
      !allocateLastDim(ctx, d, outSlot, p, ds.N, DType::f32, y))
    return false;
  // The up kernel writes y's base and u while it reads x and the mask
  // rows; the product reads the gate and u and writes p (in place is fine:
  // element by element); the down projection reads p. So y may share
  // memory with none of them (the residual may: each element is read
  // before it is written), u with neither x, the mask nor the gate.
  auto inPlace = [&](const Tensor &a) { return p.data == a.data || !overlaps(p, a); };
  if (overlaps(y, x) || overlaps(y, gate) || overlaps(y, u) ||
      overlaps(y, p) || overlaps(y, mask) || overlaps(u, x) ||
      overlaps(u, mask) || overlaps(u, gate) || !inPlace(gate) || !inPlace(u))
    return separate();
  const float *res;
  if (!residualOf(ctx, residual, y, res))
    return false;
  up = u;
  prod = p;
  out = y;
  if (!ensureList(ctx, d, index.site, N))
    return false;
  if (M == 0 || ds.N == 0 || !d.launching())
    return true;
  d.countsDensity = true;
  const IndexView segments = indexView(d, index.site, N);
  const IndexView listed = indexView(d, index.site, N, /*listed=*/true);
  const RowsInit init{y.as<float>(), ds.bias, res, int(M), int(ds.N)};
  const int64_t n = M * N;
  return check(ctx,
               upFor(wUp.dtype, x.as<float>(), int(M), wUp.data, int(us.K),
                     us.bias, segments, false, u.as<float>(), int(N), init,
                     d.stream, listed.list, listed.count, d.earlySparse,
                     tokenMask(mask, M, N)),
               "sparse_linear (up projection)") &&
         check(ctx,
               launchKernel(sameShapeKernel<BinaryFn, float>, blocksFor(n),
                            kBlock, 0, d.stream, d.earlySmall,
                            BinaryFn{ops::Binary::mul}, gate.as<float>(),
                            u.as<float>(), p.as<float>(), n),
               "binary") &&
         check(ctx,
               downFor(wDown.dtype, p.as<float>(), int(M), int(N), wDown.data,
                       int(ds.N), listed, y.as<float>(), d.stream, 0,
                       d.densityCounts, d.earlySparse),
               "sparse_linear (down projection)");
}

namespace {
/// A norm held back by predictFfnNorm: x (the FFN's input) is its output;
/// launch() runs the norm kernel into it wherever the FFN does not take
/// the norm into its predictor's kernel.
struct DeferredNorm {
  FfnNorm f; // its input, scale, bias, epsilon and kind
  int64_t rows = 0, width = 0;
  float *out = nullptr;
  bool launch(Context &ctx, Device &d) const {
    return f.rms ? launchNorm<true>(ctx, d, "rms_norm", f.x, f.scale, nullptr,
                                    rows, width, f.epsilon, out)
                 : launchNorm<false>(ctx, d, "layer_norm", f.x, f.scale, f.bias,
                                     rows, width, f.epsilon, out);
  }
};

/// sparseFfn; `pred` (or null): the predictor of `active` and `index`,
/// held back, which this call launches, as predictUp where it can; `norm`
/// (or null, only with `pred`): the norm that writes x, held back, which
/// this call launches first, or inside the predictor's hidden-vector
/// kernel (predictUp with a norm) where it can.
bool sparseFfnImpl(Context &ctx, const Tensor &x, const Tensor &wUp,
                   const Tensor *bUp, const Tensor &active,
                   const IndexSet &index, Activation act, int hSlot,
                   const Tensor &wDown, const Tensor *bDown, PitPlan pit,
                   const Tensor *residual, int outSlot, Tensor &out, Tensor &h,
                   const DeferredPredict *pred,
                   const DeferredNorm *norm = nullptr) {
  Device &d = dev(ctx);
  LinearShape up, down;
  // The held-back predictor as its own kernels (wherever this call does
  // not fuse it).
  auto flush = [&]() {
    return !pred || !pred->pending ||
           check(ctx, launchPredictIndex(*pred, d), "predictor");
  };
  if (!linearOperands(ctx, "sparse_linear", x, wUp, bUp, true, up))
    return false;
  const int64_t M = up.M;
  const bool listedDecode = decodeIndex(index, M, up.N, act) && index.listed;
  // predictUp: the predictor of this set read the same x and has weights
  // of the up projection's type, x fits in shared memory, and at most 2
  // tokens (H200, d 4096, FFN 16384, predictor + up + down: 1.11-1.19x
  // faster fused at one token, 1.01-1.14x at two, 0.98-1.09x at four, where
  // a segment's busiest rows keep its block longest; OPT-1.3B at batch 4
  // decoded 2 % slower fused).
  const bool fuse = listedDecode && pred && pred->pending && M <= 2 &&
                    pred->x == x.as<float>() && pred->tokens == M &&
                    pred->f == up.N && pred->d == up.K &&
                    pred->wtype == wUp.dtype &&
                    predictUpFits(pred->tokens, pred->d, pred->r);
  // The norm too, in predictUp's hidden-vector kernel, where it takes the
  // shapes (H200, OPT-6.7B's FFN: 1.5-2.9 us a layer; docs/GPU.md).
  // (Its blocks write the normalised x while all of them read the input:
  // not in place.)
  const bool fuseNorm = fuse && norm && d.fuseNorms && norm->width == up.K &&
                        norm->rows == M &&
                        predictUpNormFits(int(M), int(up.K), pred->r) &&
                        (norm->out + M * up.K <= norm->f.x ||
                         norm->f.x + M * up.K <= norm->out);
  if (norm && !fuseNorm && !norm->launch(ctx, d))
    return false;
  if (!listedDecode) {
    if (!flush())
      return false;
    // Not a decode step over a predicted set (predict lists every decode
    // set): the two ops one after the other.
    IndexSet hIndex;
    return sparseLinearOutput(ctx, x, wUp, bUp, active, index, act, hSlot, h,
                              hIndex) &&
           sparseLinearInput(ctx, h, wDown, bDown, hIndex, pit, residual,
                             outSlot, out);
  }
  if (active.dtype != DType::b1 ||
      (active.numel() != up.M * up.N && active.numel() != up.N))
    return ctx.fail("sparse_linear: active mask " + active.describe() +
                    " does not match " + std::to_string(up.M) + " rows of " +
                    std::to_string(up.N) + " neurons");
  Tensor hr, y;
  if (!allocateLastDim(ctx, d, hSlot, x, up.N, DType::f32, hr) ||
      !linearOperands(ctx, "sparse_linear", hr, wDown, bDown, false, down) ||
      !allocateLastDim(ctx, d, outSlot, hr, down.N, DType::f32, y))
    return false;
  const float *res;
  if (!residualOf(ctx, residual, y, res))
    return false;
  h = hr;
  out = y;
  if (M == 0 || down.N == 0 || !d.launching())
    return flush();
  d.countsDensity = true;
  // h outside the set is never read (only the down projection reads h), so
  // it is not zeroed; the up kernel writes y's base. Both kernels read the
  // predictor's list.
  const IndexView ix = indexView(d, index.site, up.N, /*listed=*/true);
  // The up kernel writes y's base as it goes; where y's memory holds the
  // mask rows the up kernel reads (a slot the plan freed after the up
  // projection), the base is written after it instead.
  const bool maskInY = tokenMask(active, M, up.N) && overlaps(active, y);
  const RowsInit init = maskInY ? RowsInit{}
                                : RowsInit{y.as<float>(), down.bias, res, int(M),
                                           int(down.N)};
  if (fuse) {
    // The mask's only reader is the up projection computed here: predictUp
    // keeps each token's selection to itself and writes no mask rows (the
    // mask's slot may be y's).
    DeferredPredict p = *pred;
    p.mask = nullptr;
    p.maskRows = 0;
    const RowsInit fusedInit{y.as<float>(), down.bias, res, int(M), int(down.N)};
    // With the norm: x is where the hidden kernel writes the norm of its
    // input (the held-back norm's output).
    const FfnNorm *fn = fuseNorm ? &norm->f : nullptr;
    cudaError_t e = withWeightType(p.wtype, [&](auto z) {
      using W = decltype(z);
      return predictUp<W>(p.x, p.tokens, static_cast<const W *>(p.w1), p.d, p.r,
                          static_cast<const W *>(p.w2), p.f, p.bias,
                          p.threshold, p.scratch, p.ix, p.mask, p.maskRows,
                          wUp.as<W>(), up.bias, act == Activation::relu,
                          hr.as<float>(), int(up.N), fusedInit, d.stream,
                          d.earlySparse, fn);
    });
    if (!check(ctx, e, fuseNorm ? "norm, predictor and up projection"
                                : "predictor and up projection"))
      return false;
  } else if (!flush() ||
             !check(ctx,
                    upFor(wUp.dtype, x.as<float>(), int(M), wUp.data, int(up.K),
                          up.bias, ix, act == Activation::relu, hr.as<float>(),
                          int(up.N), init, d.stream, nullptr, nullptr,
                          d.earlySparse, tokenMask(active, M, up.N)),
                    "sparse_linear (up projection)")) {
    return false;
  } else if (maskInY) {
    fillRowsKernel<<<blocksFor(M * down.N), kBlock, 0, d.stream>>>(
        y.as<float>(), M * down.N, int(down.N), down.bias, res);
    if (!launched(ctx, "sparse_linear (bias)"))
      return false;
  }
  return check(ctx,
               downFor(wDown.dtype, hr.as<float>(), int(M), int(up.N),
                       wDown.data, int(down.N), ix, y.as<float>(), d.stream, 0,
                       d.densityCounts, d.earlySparse),
               "sparse_linear (down projection)");
}
} // namespace

bool sparseFfn(Context &ctx, const Tensor &x, const Tensor &wUp,
               const Tensor *bUp, const Tensor &active, const IndexSet &index,
               Activation act, int hSlot, const Tensor &wDown,
               const Tensor *bDown, PitPlan pit, const Tensor *residual,
               int outSlot, Tensor &out, Tensor &h) {
  return sparseFfnImpl(ctx, x, wUp, bUp, active, index, act, hSlot, wDown,
                       bDown, pit, residual, outSlot, out, h, nullptr);
}

namespace {
/// A predicted FFN of more than a decode batch of rows (a prompt, a decode
/// batch above kMaxTokens), or of a run marked Context::exactFfn, computed
/// exactly: the up projection with its
/// activation as one GEMM, then the down projection over the result's
/// actual zeros (PIT, or the dense GEMM). The batched path reads every up
/// row whatever the predictor selects, so its GEMMs, threshold and mask
/// would only add work (and, for a long prompt, [rows, FFN] float32
/// logits a site) and drop neurons that fired. The mask is allocated but
/// not written: the emitter fuses a predictor into the FFN only where the
/// up projection is its mask's one reader.
bool batchedFfnExact(Context &ctx, const Tensor &x, const Tensor &w2,
                     int maskSlot, Tensor &mask, IndexSet &index,
                     const Tensor &wUp, const Tensor *bUp, Activation act,
                     int hSlot, const Tensor &wDown, const Tensor *bDown,
                     PitPlan pit, const Tensor *residual, int outSlot,
                     Tensor &out, Tensor &h) {
  Device &d = dev(ctx);
  LinearShape up;
  if (!linearOperands(ctx, "sparse_linear", x, wUp, bUp, true, up))
    return false;
  if (w2.rank != 2 || w2.shape[1] != up.N)
    return ctx.fail("predict: " + w2.describe() + " does not select among " +
                    std::to_string(up.N) + " neurons");
  Tensor m, hr;
  if (!allocateLastDim(ctx, d, maskSlot, x, up.N, DType::b1, m) ||
      !allocateLastDim(ctx, d, hSlot, x, up.N, DType::f32, hr))
    return false;
  mask = m;
  h = hr;
  index = IndexSet{};
  index.neurons = int(up.N);
  index.tokens = int(up.M);
  return gemm(ctx, d, x.as<float>(), up.M, up.K, wUp, true, up.N, up.bias, act,
              hr.as<float>()) &&
         sparseLinearInput(ctx, hr, wDown, bDown, IndexSet{}, pit, residual,
                           outSlot, out);
}

/// Whether a predicted FFN over `rows` rows takes batchedFfnExact: more
/// than a decode batch, or a run marked Context::exactFfn, unless
/// SPARSEC_CUDA_BATCHED_PREDICT keeps the predictor.
bool ffnExact(Context &ctx, int64_t rows) {
  return (rows > kMaxTokens || ctx.exactFfn) && !dev(ctx).batchedPredict;
}
} // namespace

bool predictFfn(Context &ctx, const Tensor &x, const Tensor &w1,
                const Tensor &w2, const Tensor *pBias, float threshold,
                int indexSite, int maskSlot, Tensor &mask, IndexSet &index,
                const Tensor &wUp, const Tensor *bUp, Activation act, int hSlot,
                const Tensor &wDown, const Tensor *bDown, PitPlan pit,
                const Tensor *residual, int outSlot, Tensor &out, Tensor &h) {
  const int64_t K = x.rank ? x.shape[x.rank - 1] : 1;
  if (ffnExact(ctx, K ? x.numel() / K : 0))
    return requireF32(ctx, "predict", "input", x) &&
           batchedFfnExact(ctx, x, w2, maskSlot, mask, index, wUp, bUp, act,
                           hSlot, wDown, bDown, pit, residual, outSlot, out, h);
  DeferredPredict pred;
  return predictImpl(ctx, x, w1, w2, pBias, threshold, indexSite, maskSlot,
                     mask, index, &pred) &&
         sparseFfnImpl(ctx, x, wUp, bUp, mask, index, act, hSlot, wDown, bDown,
                       pit, residual, outSlot, out, h, &pred);
}

bool predictFfnNorm(Context &ctx, const Tensor &normIn, const Tensor &scale,
                    const Tensor *normBias, int64_t axis, float epsilon,
                    bool rms, int normSlot, Tensor &x, const Tensor &w1,
                    const Tensor &w2, const Tensor *pBias, float threshold,
                    int indexSite, int maskSlot, Tensor &mask, IndexSet &index,
                    const Tensor &wUp, const Tensor *bUp, Activation act,
                    int hSlot, const Tensor &wDown, const Tensor *bDown,
                    PitPlan pit, const Tensor *residual, int outSlot,
                    Tensor &out, Tensor &h) {
  Device &d = dev(ctx);
  const char *op = rms ? "rms_norm" : "layer_norm";
  DeferredNorm norm;
  if (!normCommon(ctx, op, normIn, scale, rms ? nullptr : normBias, axis,
                  norm.rows, norm.width))
    return false;
  Tensor r;
  if (!allocate(ctx, d, normSlot, r, DType::f32, normIn.rank, normIn.shape))
    return false;
  x = r;
  norm.f.x = normIn.as<float>();
  norm.f.scale = scale.as<float>();
  norm.f.bias = !rms && normBias ? normBias->as<float>() : nullptr;
  norm.f.epsilon = epsilon;
  norm.f.rms = rms;
  norm.out = r.as<float>();
  // Above a decode batch the predictor's GEMMs read x at once: the norm
  // first. A decode step holds the predictor back, and sparseFfnImpl
  // launches the norm (or takes it into predictUp).
  const int64_t M = norm.width ? normIn.numel() / norm.width : 0;
  if (M > kMaxTokens || norm.width != w1.shape[0] || ffnExact(ctx, M))
    return norm.launch(ctx, d) &&
           predictFfn(ctx, x, w1, w2, pBias, threshold, indexSite, maskSlot,
                      mask, index, wUp, bUp, act, hSlot, wDown, bDown, pit,
                      residual, outSlot, out, h);
  DeferredPredict pred;
  return predictImpl(ctx, x, w1, w2, pBias, threshold, indexSite, maskSlot,
                     mask, index, &pred) &&
         sparseFfnImpl(ctx, x, wUp, bUp, mask, index, act, hSlot, wDown, bDown,
                       pit, residual, outSlot, out, h, &pred, &norm);
}

bool requireF32(Context &ctx, const char *op, const char *what,
                const Tensor &t) {
  if (!ops::detail::checkTensor(ctx, op, what, t))
    return false;
  if (t.dtype != DType::f32)
    return ctx.fail(std::string(op) + ": " + what +
                    " must be float32 on the CUDA backend, got " +
                    t.describe());
  return true;
}

} // namespace sparsec::rt::cuda
