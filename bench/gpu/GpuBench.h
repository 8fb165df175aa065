//===- GpuBench.h - timing and device memory for the GPU benchmarks -*- C++ -*-===//
//
// Part of the sparsec project.
//
// What the kernel benchmarks in bench/gpu share: CUDA error checks (exit
// status 2), the command line, the stream and library handles, graph-based
// timing on that stream, device memory in and out (and a PIT workspace and
// problem), table cells, the relative error of a result against a
// reference, and the device helpers their own kernels use.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_BENCH_GPU_GPUBENCH_H
#define SPARSEC_BENCH_GPU_GPUBENCH_H

#include "sparsec/rt/cuda/Pit.h"
#ifdef __CUDACC__
#include "TileStaging.cuh" // the runtime's (runtime/src/cuda)
#endif

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cusparse.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
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
/// A benchmark's command line: `--name value` pairs, each bound to a
/// variable by add(). parse() sets them and, on an unknown option, a
/// missing value or a value that is not a number of the variable's type
/// (a list: numbers separated by commas), prints what is wrong and the
/// usage on stderr and returns false; --help (or -h) prints the usage on
/// stdout and exits with status 0. The checks of the values' ranges
/// stay with each benchmark.
class Options {
public:
  explicit Options(const char *program) : program(program) {}
  Options &add(const char *name, int &v) {
    return bind(name, [&v](const char *t) {
      long long x;
      return toInt(t, x) && x >= INT32_MIN && x <= INT32_MAX && (v = int(x), true);
    });
  }
  Options &add(const char *name, int64_t &v) {
    return bind(name, [&v](const char *t) {
      long long x;
      return toInt(t, x) && (v = int64_t(x), true);
    });
  }
  Options &add(const char *name, double &v) {
    return bind(name, [&v](const char *t) { return toDouble(t, v); });
  }
  Options &add(const char *name, std::string &v) {
    return bind(name, [&v](const char *t) { return v = t, true; });
  }
  Options &add(const char *name, std::vector<double> &v) {
    return bind(name, [&v](const char *t) {
      std::vector<double> out;
      std::string all(t);
      for (size_t at = 0; at <= all.size();) {
        size_t end = all.find(',', at);
        if (end == std::string::npos)
          end = all.size();
        double x;
        if (!toDouble(all.substr(at, end - at).c_str(), x))
          return false;
        out.push_back(x);
        at = end + 1;
      }
      return v = out, true;
    });
  }
  bool parse(int argc, char **argv) const {
    for (int i = 1; i < argc; i += 2) {
      if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
        std::printf("%s\n", usage().c_str());
        std::exit(0);
      }
      const Option *o = nullptr;
      for (const Option &c : options)
        if (c.name == argv[i])
          o = &c;
      if (!o)
        return fail(std::string("unknown option '") + argv[i] + "'");
      if (i + 1 >= argc)
        return fail(std::string(argv[i]) + " wants a value");
      if (!o->set(argv[i + 1]))
        return fail(std::string(argv[i]) + ": bad value '" + argv[i + 1] + "'");
    }
    return true;
  }

private:
  struct Option {
    std::string name;
    std::function<bool(const char *)> set;
  };
  const char *program;
  std::vector<Option> options;
  Options &bind(const char *name, std::function<bool(const char *)> set) {
    options.push_back({name, std::move(set)});
    return *this;
  }
  static bool toInt(const char *t, long long &x) {
    char *end = nullptr;
    errno = 0;
    x = std::strtoll(t, &end, 10);
    return *t && end && !*end && errno == 0;
  }
  static bool toDouble(const char *t, double &x) {
    char *end = nullptr;
    errno = 0;
    x = std::strtod(t, &end);
    return *t && end && !*end && errno == 0 && std::isfinite(x);
  }
  std::string usage() const {
    std::string u = std::string("usage: ") + program;
    for (const Option &o : options)
      u += " [" + o.name + " V]";
    return u;
  }
  bool fail(const std::string &what) const {
    std::fprintf(stderr, "error: %s\n%s\n", what.c_str(), usage().c_str());
    return false;
  }
};

/// The stream every benchmarked call enqueues its work on.
inline cudaStream_t stream = nullptr;

/// Median microseconds per call of `launch`, which enqueues `calls` calls
/// on `stream`: timed `replays` times, the first left out (warm-up).
inline double medianUs(const std::function<void()> &launch, int calls,
                       int replays = 6) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<double> t;
  for (int r = 0; r < replays; ++r) {
    CHECK_CUDA(cudaEventRecord(a, stream));
    launch();
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    if (r > 0)
      t.push_back(ms * 1000.0 / calls);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

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
  const double us = medianUs(
      [&] {
        if (graphed)
          CHECK_CUDA(cudaGraphLaunch(exec, stream));
        else
          for (int i = 0; i < inner; ++i)
            fn();
      },
      inner);
  if (exec)
    cudaGraphExecDestroy(exec);
  if (graph)
    cudaGraphDestroy(graph);
  return us;
}

/// medianUs of an instantiated graph of `calls` calls.
inline double replayUs(cudaGraphExec_t exec, int calls) {
  return medianUs([&] { CHECK_CUDA(cudaGraphLaunch(exec, stream)); }, calls);
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

/// Device-to-device copy bandwidth (bytes read + written) over 1 GiB, in
/// GB/s: the "bound" the decode benchmarks put beside their kernels.
inline double copyBandwidthGBs() {
  const size_t bytes = size_t(1) << 30;
  char *a = alloc<char>(bytes), *b = alloc<char>(bytes);
  bool graphed;
  const double us = timeUs(
      [&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream); },
      graphed, 5);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (us * 1e3);
}

/// Programmatic dependent launches (Hopper), as the runtime makes them: a
/// kernel launched by launchEarly may start while the kernel before it on
/// the stream runs, once that kernel's blocks have all called
/// pdlLaunchDependents(); it reads what earlier kernels wrote only after
/// pdlWaitPrior().
__device__ __forceinline__ void pdlLaunchDependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void pdlWaitPrior() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
template <typename... P, typename... A>
void launchEarly(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t s,
                 A... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  CHECK_CUDA(cudaLaunchKernelEx(&config, kernel, args...));
}

/// Device buffers for PIT on an M x K input with `tile`-token micro-tiles
/// (never freed: a benchmark keeps them to its end).
inline rt::cuda::PitWorkspace allocPitWorkspace(int64_t M, int64_t K, int tile) {
  rt::cuda::PitWorkspace ws;
  ws.idx = alloc<int32_t>(rt::cuda::pitIdxBytes(M, K, tile) / sizeof(int32_t));
  ws.count = alloc<int32_t>(rt::cuda::pitCountBytes(M, tile) / sizeof(int32_t));
  ws.xg = alloc<__half>(rt::cuda::pitGatherBytes(M, K, tile) / sizeof(__half));
  return ws;
}

/// The PIT benchmarks' problem, y [M, N] = x [M, K] . W [K, N] in fp16:
/// W uniform in [-0.05, 0.05), and x sparse in random `tile` x 1
/// micro-tiles, each (token block, column) active with probability 1 -
/// sparsity / 100 (active[block * K + k]), its entries in [0.01, 1.01).
struct PitProblem {
  std::mt19937 rng{0};
  std::uniform_real_distribution<float> val{-1, 1}, coin{0, 1};
  std::vector<__half> weights(int64_t K, int64_t N) {
    std::vector<__half> w(size_t(K * N));
    for (auto &v : w)
      v = __float2half(val(rng) * 0.05f);
    return w;
  }
  std::vector<__half> input(int64_t M, int64_t K, int tile, double sparsity,
                            std::vector<uint8_t> &active) {
    const int64_t blocks = rt::cuda::pitBlocks(M, tile);
    active.assign(size_t(blocks * K), 0);
    for (auto &a : active)
      a = coin(rng) >= sparsity / 100.0;
    std::vector<__half> x(size_t(M * K), __float2half(0.0f));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k)
        if (active[size_t((m / tile) * K + k)])
          x[size_t(m * K + k)] = __float2half(std::fabs(val(rng)) + 0.01f);
    return x;
  }
  /// A down projection's epilogue operands: a bias [N] in [-1, 1) and an
  /// fp32 residual [M, N] in [-2, 2), from a generator of their own (the
  /// inputs drawn after them stay those of a run without them).
  void epilogue(int64_t M, int64_t N, std::vector<float> &bias,
                std::vector<float> &residual) {
    std::mt19937 own{1};
    bias.resize(size_t(N));
    for (float &b : bias)
      b = val(own);
    residual.resize(size_t(M * N));
    for (float &r : residual)
      r = 2.0f * val(own);
  }
};

/// cuBLAS's dense y [M, N] = x [M, K] . W [K, N] (row-major, fp16, fp32
/// compute), as the column-major y^T = W^T . x^T.
inline cublasStatus_t denseGemm(cublasHandle_t blas, int64_t M, int64_t N, int64_t K,
                                const __half *w, const __half *x, __half *y) {
  const float one = 1.0f, zero = 0.0f;
  return cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, int(N), int(M), int(K), &one, w,
                      CUDA_R_16F, int(N), x, CUDA_R_16F, int(K), &zero, y, CUDA_R_16F,
                      int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/// Whether every value of a --sparsity list is a percentage (0 to 100);
/// says what is wrong otherwise.
inline bool percentages(const std::vector<double> &v) {
  for (double s : v)
    if (s < 0 || s > 100) {
      std::fprintf(stderr, "error: --sparsity takes percentages from 0 to 100\n");
      return false;
    }
  return true;
}

/// A table cell: v by `fmt`, or "n/a" for a negative v (a measurement that
/// could not be made).
inline std::string cell(double v, const char *fmt = "%.1f") {
  if (v < 0)
    return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

#ifdef __CUDACC__
// Shared-memory addresses, 16-byte asynchronous copies (cp.async.cg,
// zero-filled past `bytes`) and their groups, and ldmatrix are the
// runtime's.
using sparsec::rt::cuda::cpAsync16;
using sparsec::rt::cuda::cpAsyncCommit;
using sparsec::rt::cuda::cpAsyncWait;
using sparsec::rt::cuda::ldmatrixX4T;
using sparsec::rt::cuda::smemAddr;

/// A load's words folded into one (the read benchmarks keep their loads
/// alive with it).
__device__ __forceinline__ unsigned fold(uint2 v) { return v.x ^ v.y; }
__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

/// Mbarriers and bulk copies (cp.async.bulk, the TMA unit) for the
/// benchmarks' own kernels.
__device__ __forceinline__ void mbarInit(uint64_t *bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smemAddr(bar)),
               "r"(count));
}
__device__ __forceinline__ void mbarExpectTx(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   smemAddr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarArrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smemAddr(bar))
               : "memory");
}
__device__ __forceinline__ void mbarWait(uint64_t *bar, uint32_t parity) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "WAIT_%=:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
               "@!p bra WAIT_%=;\n"
               "}\n" ::"r"(smemAddr(bar)),
               "r"(parity)
               : "memory");
}
/// Whether the phase of `parity` has completed (does not wait).
__device__ __forceinline__ bool mbarTest(uint64_t *bar, uint32_t parity) {
  uint32_t done;
  asm volatile("{\n"
               ".reg .pred p;\n"
               "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
               "selp.u32 %0, 1, 0, p;\n"
               "}\n"
               : "=r"(done)
               : "r"(smemAddr(bar)), "r"(parity)
               : "memory");
  return done != 0;
}
__device__ __forceinline__ void bulkCopy(void *dst, const void *src, uint32_t bytes,
                                         uint64_t *bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
               "bytes [%0], [%1], %2, [%3];" ::"r"(smemAddr(dst)),
               "l"(src), "r"(bytes), "r"(smemAddr(bar))
               : "memory");
}

/// Thread-block clusters: the whole cluster's barrier, this block's rank and
/// the cluster's size, an arrive on the mbarrier at the same offset in block
/// `cta`'s shared memory, and a bulk copy written into the shared memory of
/// every block in `mask` (each completing its bytes on its own mbarrier at
/// `bar`'s offset).
__device__ __forceinline__ void clusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}
__device__ __forceinline__ unsigned clusterRank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned clusterSize() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void mbarArriveCluster(uint64_t *bar, unsigned cta) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote)
               : "r"(smemAddr(bar)), "r"(cta));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote)
               : "memory");
}
__device__ __forceinline__ void bulkCopyMulticast(void *dst, const void *src,
                                                  uint32_t bytes, uint64_t *bar,
                                                  uint16_t mask) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
               "bytes.multicast::cluster [%0], [%1], %2, [%3], %4;" ::"r"(smemAddr(dst)),
               "l"(src), "r"(bytes), "r"(smemAddr(bar)), "h"(mask)
               : "memory");
}

/// Tensor cores: one m16n8k16 product, fp16 in, fp32 accumulate (the A
/// fragment as ldmatrixX4T loads it: four 8 x 8 tiles, transposed, lane
/// 8 i + j giving the address of row j of tile i).
__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4],
                                         unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Deterministic values in [-scale, scale) from each element's index and
/// `seed` (T: float or __half), so a benchmark's weights need no upload.
template <typename T>
__global__ void fillKernel(T *p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ (seed * 0x9e3779b9u) ^ uint32_t(i >> 32);
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    p[i] = T((float(h & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * scale);
  }
}

/// n fp16 values from fillKernel on `stream` (never freed: a benchmark
/// keeps its weights to its end).
inline __half *filledHalf(size_t n, uint32_t seed, float scale) {
  __half *p = alloc<__half>(n);
  fillKernel<<<1024, 256, 0, stream>>>(p, n, seed, scale);
  CHECK_CUDA(cudaGetLastError());
  return p;
}

/// A rank-r predictor's logit of every neuron for input x [d], in double:
/// (x . w1) . w2 with w1 [d, r] and w2 [r, f] on the device (fp16).
inline std::vector<double> predictorLogits(const std::vector<float> &x, const __half *p1,
                                           const __half *p2, int d, int r, int f) {
  const std::vector<__half> w1 = download(p1, size_t(d) * r),
                            w2 = download(p2, size_t(r) * f);
  std::vector<double> hid(r, 0.0), out(f, 0.0);
  for (int i = 0; i < d; ++i)
    for (int e = 0; e < r; ++e)
      hid[e] += double(x[i]) * __half2float(w1[size_t(i) * r + e]);
  for (int e = 0; e < r; ++e)
    for (int j = 0; j < f; ++j)
      out[j] += hid[e] * __half2float(w2[size_t(e) * f + j]);
  return out;
}

/// The value at the (1 - density) quantile: a threshold that keeps about
/// `density` of them above it.
inline float quantileThreshold(std::vector<double> v, double density) {
  std::sort(v.begin(), v.end());
  return float(v[size_t((1.0 - density) * (v.size() - 1))]);
}

static __global__ void readKernel(const float4 *p, size_t n, float *out) {
  float s = 0.0f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float4 v = __ldcs(p + i);
    s += v.x + v.y + v.z + v.w;
  }
  if (s == 1234.5f) // keeps the loads; never true for the zero buffer
    out[0] = s;
}

/// The read bandwidth in GB/s: a reduction kernel over 4 GiB of zeros,
/// each byte read once (the yardstick of the decode benchmarks).
inline double readBandwidth(const cudaDeviceProp &prop) {
  const size_t bytes = size_t(4) << 30;
  float4 *p = alloc<float4>(bytes / 16);
  float *sink = alloc<float>(1);
  CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, stream));
  bool g;
  const double us = timeUs(
      [&] {
        readKernel<<<prop.multiProcessorCount * 8, 512, 0, stream>>>(
            p, bytes / 16, sink);
      },
      g, 5);
  cudaFree(p);
  cudaFree(sink);
  return bytes / (us * 1e3);
}
#endif

/// fp16 values as float (to compare results with relErr).
inline std::vector<float> toFloats(const std::vector<__half> &h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i)
    f[i] = __half2float(h[i]);
  return f;
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
