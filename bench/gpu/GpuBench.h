//===- GpuBench.h - timing and device memory for the GPU benchmarks -*- C++ -*-===//
//
// Part of the sparsec project.
//
// What the kernel benchmarks in bench/gpu share: CUDA error checks (exit
// status 2), the stream and library handles, graph-based timing on that
// stream, device memory in and out, and the relative error of a result
// against a reference.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_BENCH_GPU_GPUBENCH_H
#define SPARSEC_BENCH_GPU_GPUBENCH_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusparse.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define CHECK_CUDA(x)                                                          \
  do {                                                                         \
    cudaError_t e = (x);                                                       \
    if (e != cudaSuccess) {                                                    \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e),  \
                   __FILE__, __LINE__);                                        \
      std::exit(2);                                                            \
    }                                                                          \
  } while (0)

namespace sparsec::bench {
/// The stream every benchmarked call enqueues its work on.
inline cudaStream_t stream = nullptr;

/// Creates `stream` (non-blocking) and the cuBLAS and cuSPARSE handles of
/// the peers, both on it; `prop` describes device 0.
inline void setUp(cudaDeviceProp &prop, cublasHandle_t &blas,
                  cusparseHandle_t &sparse) {
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasCreate(&blas);
  cublasSetStream(blas, stream);
  cusparseCreate(&sparse);
  cusparseSetStream(sparse, stream);
}

/// Median microseconds per call of `fn` (which enqueues work on `stream`),
/// from a graph of `inner` calls replayed 5 times; falls back to plain
/// stream timing (marked by a negative `graphed`) if capture fails.
inline double timeUs(const std::function<void()> &fn, bool &graphed, int inner = 100) {
  fn();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  graphed = false;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) ==
      cudaSuccess) {
    for (int i = 0; i < inner; ++i)
      fn();
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph &&
        cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess)
      graphed = true;
  }
  cudaGetLastError(); // clear a failed capture
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> t;
  for (int r = 0; r < 6; ++r) {
    cudaEventRecord(a, stream);
    if (graphed)
      cudaGraphLaunch(exec, stream);
    else
      for (int i = 0; i < inner; ++i)
        fn();
    cudaEventRecord(b, stream);
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (r > 0)
      t.push_back(ms * 1000.0 / inner);
  }
  if (exec)
    cudaGraphExecDestroy(exec);
  if (graph)
    cudaGraphDestroy(graph);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <typename T> T *alloc(size_t n) {
  T *p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T)));
  return p;
}
template <typename T> T *upload(const std::vector<T> &v) {
  T *p = alloc<T>(v.size());
  CHECK_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}
template <typename T> std::vector<T> download(const T *p, size_t n) {
  CHECK_CUDA(cudaDeviceSynchronize()); // the work runs on a non-blocking stream
  std::vector<T> v(n);
  CHECK_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

inline double relErr(const std::vector<float> &got, const std::vector<float> &ref) {
  double maxRef = 0, maxDiff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    maxRef = std::max(maxRef, double(std::fabs(ref[i])));
    maxDiff = std::max(maxDiff, double(std::fabs(got[i] - ref[i])));
  }
  return maxDiff / std::max(maxRef, 1e-30);
}
} // namespace sparsec::bench

#endif // SPARSEC_BENCH_GPU_GPUBENCH_H
