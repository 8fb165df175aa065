//===- CudaTest.h - helpers of the CUDA kernel tests ------------*- C++ -*-===//
//
// Part of the sparsec project.
//
// Device memory in and out (exiting with status 2 on a CUDA error),
// fp16/fp32 conversions and the slow producer of the early-launch cases,
// shared by the kernel tests in test/gpu.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_TEST_GPU_CUDATEST_H
#define SPARSEC_TEST_GPU_CUDATEST_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#define CHECK_CUDA(x)                                                          \
  do {                                                                         \
    cudaError_t e = (x);                                                       \
    if (e != cudaSuccess) {                                                    \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, \
                  __LINE__);                                                   \
      std::exit(2);                                                            \
    }                                                                          \
  } while (0)

namespace sparsec::test {

/// A device copy of `v`, placed `pad` elements into its allocation (so
/// that a nonzero pad misaligns it).
template <typename T> T *upload(const std::vector<T> &v, size_t pad = 0) {
  T *p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(1, (v.size() + pad) * sizeof(T))));
  CHECK_CUDA(cudaMemcpy(p + pad, v.data(), v.size() * sizeof(T),
                        cudaMemcpyHostToDevice));
  return p;
}
template <typename T> std::vector<T> download(const T *p, size_t n) {
  std::vector<T> v(n);
  CHECK_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

template <typename W> W fromFloat(float f);
template <> inline __half fromFloat<__half>(float f) { return __float2half(f); }
template <> inline float fromFloat<float>(float f) { return f; }
template <> inline __nv_bfloat16 fromFloat<__nv_bfloat16>(float f) {
  return __float2bfloat16(f);
}
inline float toFloat(__half h) { return __half2float(h); }
inline float toFloat(__nv_bfloat16 h) { return __bfloat162float(h); }
/// The weights' type as the tests print it.
template <typename W> const char *typeName() {
  return std::is_same_v<W, __half>          ? "fp16"
         : std::is_same_v<W, __nv_bfloat16> ? "bf16"
                                            : "fp32";
}
inline float toFloat(float f) { return f; }

/// The larger of an error so far and a new one, where a non-finite new
/// one (a NaN or an infinity from the kernel) is infinite: std::max alone
/// would drop a NaN.
inline double worse(double err, double e) {
  return std::isfinite(e) ? std::max(err, e) : INFINITY;
}

/// The producer of an early-launch case: lets the next kernel launch at
/// once; every block reads the NaNs x holds through L1 (ld.global.ca), so
/// each SM's L1 may keep them while the kernel under test sits beside it;
/// then block 0 writes x, after about 50 us. A kernel that reads x before
/// its wait, or from a stale L1 line after it, sees NaNs.
static __global__ void slowProducer(const float *src, float *x, int64_t n) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  float sink = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    sink += __ldca(x + i);
  const long long t0 = clock64();
  while (clock64() - t0 < 100000)
    __nanosleep(1000);
  __syncthreads();
  if (blockIdx.x != 0)
    return;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    x[i] = src[i] + (sink == 1.0f ? 1.0f : 0.0f); // x holds NaNs: sink too
}

/// The early-launch set-up: x (at dx) is first filled with NaNs, then
/// written by slowProducer on `stream`, which the kernel under test is
/// launched on right behind it (programmatically dependent), so it must
/// wait for x. Nothing happens for a normal launch (stream stays null).
struct SlowX {
  cudaStream_t stream = nullptr;
  float *src = nullptr;
  SlowX(bool early, const std::vector<float> &x, float *dx) {
    if (!early)
      return;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    src = upload(x);
    CHECK_CUDA(cudaMemset(dx, 0xff, sizeof(float) * x.size()));
    CHECK_CUDA(cudaDeviceSynchronize());
    int sms = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    slowProducer<<<2 * sms, 256, 0, stream>>>(src, dx, int64_t(x.size()));
  }
  ~SlowX() {
    if (!stream)
      return;
    cudaStreamSynchronize(stream);
    cudaFree(src);
    cudaStreamDestroy(stream);
  }
};

} // namespace sparsec::test

#endif // SPARSEC_TEST_GPU_CUDATEST_H
