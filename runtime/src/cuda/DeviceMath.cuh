//===- DeviceMath.cuh - device helpers shared by the CUDA kernels -*- CUDA -*-===//
//
// Part of the sparsec project.
//
// fp16/fp32 conversion, 16-byte weight loads, the fused activations, and
// warp/block reductions, shared by the CUDA kernels (internal).
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RUNTIME_CUDA_DEVICEMATH_CUH
#define SPARSEC_RUNTIME_CUDA_DEVICEMATH_CUH

#include "sparsec/rt/Ops.h"

#include <cuda_fp16.h>

#include <cmath>
#include <utility>

namespace sparsec::rt::cuda {
namespace {

using ops::Activation;

__device__ __forceinline__ float toFloat(float v) { return v; }
__device__ __forceinline__ float toFloat(__half v) { return __half2float(v); }

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
  }
  return v;
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

/// Elements of W in one 16-byte load, converted to float.
template <typename W> struct Vec;
template <> struct Vec<__half> {
  static constexpr int N = 8;
  __device__ static void load(const __half *p, float (&out)[8]) {
    convert(__ldg(reinterpret_cast<const uint4 *>(p)), out);
  }
  __device__ static void convert(uint4 raw, float (&out)[8]) {
    const __half2 *h = reinterpret_cast<const __half2 *>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float2 f = __half22float2(h[k]);
      out[2 * k] = f.x;
      out[2 * k + 1] = f.y;
    }
  }
  __device__ static float scalar(const __half *p) { return __half2float(*p); }
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

} // namespace
} // namespace sparsec::rt::cuda

#endif // SPARSEC_RUNTIME_CUDA_DEVICEMATH_CUH
