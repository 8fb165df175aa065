//===- DeviceMath.cuh - device helpers shared by the CUDA kernels -*- CUDA -*-===//
//
// Part of the sparsec project.
//
// fp16/fp32 conversion, 16-byte weight loads, the fused activations,
// warp/block reductions and the tensor-core products of 16 rows with a few
// tokens (mmaRows16), shared by the CUDA kernels (internal).
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RUNTIME_CUDA_DEVICEMATH_CUH
#define SPARSEC_RUNTIME_CUDA_DEVICEMATH_CUH

#include "sparsec/rt/Ops.h"

#include "TileStaging.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace sparsec::rt::cuda {
namespace {

using ops::Activation;

/// Threads a block of the elementwise (grid-stride) kernels.
constexpr int kBlock = 256;

/// Blocks of `threads` for a grid-stride loop over n elements: one per
/// `threads` elements, at least one, at most 8 x 65535.
inline int blocksFor(int64_t n, int threads = kBlock) {
  int64_t b = (n + threads - 1) / threads;
  return int(std::min<int64_t>(std::max<int64_t>(b, 1), 65535 * 8));
}

/// The index of row i of head h, batch b, in a [B, H, S, .] tensor, or in
/// a [B, S, H, .] one (`tokenMajor`): times the row's width, its first
/// element.
__host__ __device__ __forceinline__ int64_t headRow(bool tokenMajor, int64_t b,
                                                    int64_t h, int64_t i,
                                                    int64_t H, int64_t S) {
  return tokenMajor ? (b * S + i) * H + h : (b * H + h) * S + i;
}

__device__ __forceinline__ float toFloat(float v) { return v; }
__device__ __forceinline__ float toFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float toFloat(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

__device__ __forceinline__ float activate(Activation act, float v) {
  switch (act) {
  case Activation::none: return v;
  case Activation::relu: return v > 0.0f ? v : 0.0f;
  case Activation::gelu: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  case Activation::gelu_tanh:
    return 0.5f * v *
           (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  case Activation::silu: return v / (1.0f + expf(-v));
  case Activation::sigmoid: return 1.0f / (1.0f + expf(-v));
  case Activation::relu6: return v < 0.0f ? 0.0f : v > 6.0f ? 6.0f : v;
  }
  return v;
}

/// 2^x in one instruction (MUFU.EX2): results below 2^-126 are 0, where
/// exp2f would spend four more instructions on them; for softmax weights
/// relative to a row's maximum (at most 1), that is below any rounding.
__device__ __forceinline__ float fastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warpMax(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Two floats rounded to nearest even into one 32-bit pair of E (__half or
/// __nv_bfloat16), a in the low half.
template <typename E>
__device__ __forceinline__ unsigned pack2(float a, float b) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const unsigned *>(&h);
  } else {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const unsigned *>(&h);
  }
}

/// The two values of a 32-bit pair of E (__half or __nv_bfloat16) as
/// floats, the low half first: exact (bfloat16 is the top half of a
/// float32, a shift or a mask a value).
template <typename E> __device__ __forceinline__ float2 unpack2(unsigned u) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>)
    return make_float2(__uint_as_float(u << 16),
                       __uint_as_float(u & 0xffff0000u));
  else
    return __half22float2(*reinterpret_cast<const __half2 *>(&u));
}

/// The eight values of E in one 16-byte word as floats, in memory order.
/// Any E but __nv_bfloat16 reads as __half: kernels whose vector path runs
/// only for 16-bit weights compile it for float too and never take it.
template <typename E>
__device__ __forceinline__ void convertPairs(uint4 raw, float (&out)[8]) {
  const unsigned u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = unpack2<E>(u[k]);
    out[2 * k] = f.x;
    out[2 * k + 1] = f.y;
  }
}

/// Elements of W in one 16-byte load, converted to float.
template <typename W> struct Vec;
template <> struct Vec<__half> {
  static constexpr int N = 8;
  __device__ static void load(const __half *p, float (&out)[8]) {
    convert(__ldg(reinterpret_cast<const uint4 *>(p)), out);
  }
  __device__ static void convert(uint4 raw, float (&out)[8]) {
    convertPairs<__half>(raw, out);
  }
  __device__ static float scalar(const __half *p) { return __half2float(*p); }
};
template <> struct Vec<__nv_bfloat16> {
  static constexpr int N = 8;
  __device__ static void load(const __nv_bfloat16 *p, float (&out)[8]) {
    convert(__ldg(reinterpret_cast<const uint4 *>(p)), out);
  }
  __device__ static void convert(uint4 raw, float (&out)[8]) {
    convertPairs<__nv_bfloat16>(raw, out);
  }
  __device__ static float scalar(const __nv_bfloat16 *p) {
    return __bfloat162float(*p);
  }
};
template <> struct Vec<float> {
  static constexpr int N = 4;
  __device__ static void load(const float *p, float (&out)[4]) {
    convert(__ldg(reinterpret_cast<const uint4 *>(p)), out);
  }
  __device__ static void convert(uint4 raw, float (&out)[4]) {
    float4 f = *reinterpret_cast<const float4 *>(&raw);
    out[0] = f.x;
    out[1] = f.y;
    out[2] = f.z;
    out[3] = f.w;
  }
  __device__ static float scalar(const float *p) { return __ldg(p); }
};

/// Programmatic dependent launch (Hopper). A kernel launched early
/// (launchKernel with `early`) may start while the kernel before it on the
/// stream still runs, once every block of that kernel has called
/// pdlTrigger(): it may read only what no earlier kernel writes (weights)
/// until pdlWait() returns, which is when the earlier kernels have
/// completed and their writes are visible. Both are no-ops for a kernel
/// launched normally.
///
/// Visible to ordinary loads (ld.global, .ca, .cg, .cs, cp.async), not to
/// the read-only path: ld.global.nc, which __ldg and plain reads through
/// `const T *__restrict__` parameters compile to, is only for data that no
/// grid writes while the kernel lives, and the kernel before an early
/// launch still does. So what an earlier kernel writes (activations, index
/// sets and counts, masks, scratch) is read with __ldca / __ldcg or through
/// a pointer without __restrict__; weights, biases and norm parameters
/// (nothing in the step writes them) may take the read-only path, before
/// the wait too. (On the H200 a PIT matmul that read its set through the
/// read-only path read stale sets: docs/GPU.md, "Early launches and the
/// read-only path".)
__device__ __forceinline__ void pdlTrigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Launches `kernel` on `stream`, as a programmatic dependent launch when
/// `early` (see pdlTrigger / pdlWait).
template <typename... Params, typename... Args>
cudaError_t launchKernel(void (*kernel)(Params...), dim3 grid, dim3 block,
                         size_t smem, cudaStream_t stream, bool early,
                         Args &&...args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = early ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

/// stmatrix (sm_90): four (or two) 8 x 8 fp16 tiles, each held as an
/// mma accumulator fragment (lane l: row l / 4, columns 2 (l % 4) and
/// 2 (l % 4) + 1, packed), stored transposed: lane 8 i + j gives the address
/// of row j of stored tile i, which receives column j of fragment i.
__device__ __forceinline__ void stmatrixX4T(void *p, unsigned r0, unsigned r1,
                                            unsigned r2, unsigned r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n"
      ::"r"(smemAddr(p)), "r"(r0), "r"(r1), "r"(r2), "r"(r3)
      : "memory");
#else
  __trap(); // sparsec builds sm_90
#endif
}
__device__ __forceinline__ void stmatrixX2T(void *p, unsigned r0, unsigned r1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1,%2};\n"
               ::"r"(smemAddr(p)), "r"(r0), "r"(r1)
               : "memory");
#else
  __trap();
#endif
}

/// One m16n8k16 tensor-core product, fp32 accumulate; E (__half or
/// __nv_bfloat16) is the type of both 16-bit operands.
template <typename E = __half>
__device__ __forceinline__ void mma16816(float (&c)[4], unsigned a0,
                                         unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<E, __nv_bfloat16>)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap(); // sparsec builds sm_90; no silent zeros elsewhere
#endif
}

/// Parts of E that splitParts cuts a float into: fp16 2 (11 + 11 bits),
/// bf16 3 (8 + 8 + 8).
template <typename E>
constexpr int kSplitParts = std::is_same_v<E, __nv_bfloat16> ? 3 : 2;

/// Two floats as kSplitParts<E> pairs of E, each the rest of the ones
/// before rounded to nearest: p[0] = E(x), p[1] = E(x - p[0]), ... The
/// products with each part are exact in the fp32 accumulators, so the
/// tensor-core products of all parts keep x about 22 bits with fp16 (as
/// close to the fp32 x of gemvRowsKernel as its own summation order; x
/// rounded to fp16 alone put errors near 1e-3 on the kernel test's sums)
/// and all of float32's 24 with bf16 (two bf16 parts, 16 bits, left the
/// kernel tests' sums 30-80 times further from the reference than fp16's).
/// With fp16, |x| past 65504 overflows to inf, as in the prefill's fp16
/// GEMMs (Ops.cu rounds x to fp16); bf16 has float32's range.
template <typename E>
__device__ __forceinline__ void splitParts(float a, float b,
                                           unsigned (&p)[kSplitParts<E>]) {
#pragma unroll
  for (int i = 0; i < kSplitParts<E>; ++i) {
    p[i] = pack2<E>(a, b);
    if (i + 1 == kSplitParts<E>)
      break;
    const float2 f = unpack2<E>(p[i]);
    a -= f.x, b -= f.y;
  }
}

/// Tokens from which the decode GEMVs run on tensor cores (gemvRows with
/// fp16 or bf16 weights, 16-byte aligned rows, K a multiple of 32, no folded
/// norm; the listed sparse up projection likewise).
constexpr int kMmaMinTokens = 3;
constexpr int kMmaRows = 16;  // rows of one mmaRows16
constexpr int kMmaWarps = 8;  // warps of its block; they split K
constexpr int kMmaUnroll = 4; // 32-wide k steps a warp has in flight

/// The products of 16 rows of E (__half or __nv_bfloat16; lane (g, q),
/// g = lane / 4, q = lane % 4, gives row g's start as rowA and row g + 8's
/// as rowB; 16-byte aligned) with the M <= 8 token rows of x [M, K] (fp32,
/// 16-byte aligned, K a multiple of 32), by a block of kMmaWarps warps that
/// take interleaved 32-wide steps of K. In a step, lane (g, q) loads 8
/// values of its two rows at k = 32 s + 8 q (16 bytes each) and 8 floats of
/// token g's x at the same k, and the warp runs two m16n8k16 products for
/// x's first parts and two for each further part (splitParts<E>): the k
/// order inside a step is permuted the same way for the weights and x, so
/// the sum is the same. x of tokens past M is zero. Leaves red[w][i][lane]
/// = warp w's sums: i = 0, 1 row g, tokens 2q, 2q + 1; i = 2, 3 row g + 8
/// (add over w). Ends with __syncthreads (red complete); every thread must
/// call it. Early: x comes from a kernel still running (L2 loads).
template <bool Early, typename E>
__device__ __forceinline__ void mmaRows16(const E *rowAh, const E *rowBh,
                                          const float *x, int M, int K,
                                          float (&red)[kMmaWarps][4][32]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q = lane & 3;
  const uint4 *rowA = reinterpret_cast<const uint4 *>(rowAh);
  const uint4 *rowB = reinterpret_cast<const uint4 *>(rowBh);
  const bool hasToken = g < M;
  const float4 *xg = reinterpret_cast<const float4 *>(x + int64_t(g) * K);
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int steps = K / 32;
  for (int s0 = warp; s0 < steps; s0 += kMmaWarps * kMmaUnroll) {
    uint4 wa[kMmaUnroll], wb[kMmaUnroll];
    float4 xa[kMmaUnroll], xb[kMmaUnroll];
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int s = s0 + u * kMmaWarps;
      const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (s < steps) {
        const int c16 = s * 4 + q; // 16-byte chunk of the row
        wa[u] = __ldg(rowA + c16);
        wb[u] = __ldg(rowB + c16);
        xa[u] = hasToken ? (Early ? __ldcg(xg + 2 * c16) : __ldg(xg + 2 * c16))
                         : zero;
        xb[u] = hasToken ? (Early ? __ldcg(xg + 2 * c16 + 1)
                                  : __ldg(xg + 2 * c16 + 1))
                         : zero;
      } else {
        wa[u] = wb[u] = make_uint4(0, 0, 0, 0);
        xa[u] = xb[u] = zero;
      }
    }
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      // Values 0-3 of the chunk: the first products, 4-7: the second; x's
      // first parts into c, its further parts into d.
      constexpr int P = kSplitParts<E>;
      unsigned p0[P], p1[P], p2[P], p3[P];
      splitParts<E>(xa[u].x, xa[u].y, p0);
      splitParts<E>(xa[u].z, xa[u].w, p1);
      splitParts<E>(xb[u].x, xb[u].y, p2);
      splitParts<E>(xb[u].z, xb[u].w, p3);
      mma16816<E>(c, wa[u].x, wb[u].x, wa[u].y, wb[u].y, p0[0], p1[0]);
#pragma unroll
      for (int i = 1; i < P; ++i)
        mma16816<E>(d, wa[u].x, wb[u].x, wa[u].y, wb[u].y, p0[i], p1[i]);
      mma16816<E>(c, wa[u].z, wb[u].z, wa[u].w, wb[u].w, p2[0], p3[0]);
#pragma unroll
      for (int i = 1; i < P; ++i)
        mma16816<E>(d, wa[u].z, wb[u].z, wa[u].w, wb[u].w, p2[i], p3[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
    red[warp][i][lane] = c[i] + d[i];
  __syncthreads();
}

/// Block-wide sum/max (blockDim a multiple of 32, at most 1024); every
/// thread gets the result.
template <bool Max> __device__ float blockReduce(float v) {
  __shared__ float part[32];
  __shared__ float result;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = Max ? warpMax(v) : warpSum(v);
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int warps = blockDim.x >> 5;
    float w = lane < warps ? part[lane] : (Max ? -INFINITY : 0.0f);
    w = Max ? warpMax(w) : warpSum(w);
    if (lane == 0)
      result = w;
  }
  __syncthreads();
  float r = result;
  __syncthreads();
  return r;
}

/// A norm's arithmetic, one definition for every kernel that normalises
/// (normRows and the predictor's hidden-vector kernel give the same bits).
/// normApply: the normalised, scaled and shifted value. normStats: the mean
/// (0 for Rms) and 1 / sqrt(var + eps) of a row of `width` whose elements
/// threadIdx.x + k Threads (k < PER) the calling thread holds in v (0 past
/// the row); the whole block of Threads threads calls it.
__device__ __forceinline__ float normApply(float v, float mean, float inv,
                                           float scale, float bias) {
  return fmaf((v - mean) * inv, scale, bias);
}
template <bool Rms, int PER, int Threads>
__device__ __forceinline__ void normStats(const float (&v)[PER], int width,
                                          float eps, float &mean, float &inv) {
  mean = 0.0f;
  if (!Rms) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < PER; ++k)
      s += v[k];
    mean = blockReduce<false>(s) / float(width);
  }
  float q = 0.0f;
#pragma unroll
  for (int k = 0; k < PER; ++k)
    if (int(threadIdx.x) + k * Threads < width) {
      const float c = v[k] - mean;
      q = fmaf(c, c, q);
    }
  inv = rsqrtf(blockReduce<false>(q) / float(width) + eps);
}
/// The threads of normRows' register kernel, whose element layout
/// (thread i: elements i + kNormThreads k) normStats' callers share.
constexpr int kNormThreads = 512;

/// Whether this block is the last of `blocks` to arrive at *counter: each
/// thread's earlier global writes are made visible first, and the last
/// block resets the counter (ready for the next launch, or a graph
/// replay). Every thread of the block gets the same answer; after true,
/// the other blocks' writes are visible to reads that skip L1 (__ldcg).
template <typename Counter>
__device__ __forceinline__ bool lastBlockToArrive(Counter *counter,
                                                  Counter blocks) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, Counter(1)) == blocks - 1;
    if (last)
      *counter = 0;
  }
  __syncthreads();
  if (!last)
    return false;
  __threadfence();
  return true;
}

} // namespace
} // namespace sparsec::rt::cuda

#endif // SPARSEC_RUNTIME_CUDA_DEVICEMATH_CUH
