//===- CudaTest.h - helpers of the CUDA kernel tests ------------*- C++ -*-===//
//
// Part of the sparsec project.
//
// Device memory in and out (exiting with status 2 on a CUDA error) and
// fp16/fp32 conversions, shared by the kernel tests in test/gpu.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_TEST_GPU_CUDATEST_H
#define SPARSEC_TEST_GPU_CUDATEST_H

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
inline float toFloat(__half h) { return __half2float(h); }
inline float toFloat(float f) { return f; }

/// The larger of an error so far and a new one, where a non-finite new
/// one (a NaN or an infinity from the kernel) is infinite: std::max alone
/// would drop a NaN.
inline double worse(double err, double e) {
  return std::isfinite(e) ? std::max(err, e) : INFINITY;
}

} // namespace sparsec::test

#endif // SPARSEC_TEST_GPU_CUDATEST_H
