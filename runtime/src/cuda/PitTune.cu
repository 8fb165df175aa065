//===- PitTune.cu - latency table for the PIT cost model -----------------===//
//
// Part of the sparsec project.
//
// pitTune (sparsec/rt/cuda/Pit.h): the measurements behind the compiler's
// choice between dense and PIT micro-tiles. Activations are fp32 as in a
// model step; weights fp16. Each time is the median of 7 timed launches
// after a warm-up (the operands stay in L2 as far as they fit, as in a
// model whose layers run back to back).
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/Pit.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

namespace sparsec::rt::cuda {
namespace {

/// x[r, c] of an m x k activation with micro-tile sparsity: the tile
/// (r / tile, c) is active with probability `density` (a hash decides),
/// and its values are positive (as ReLU outputs).
__global__ void fillTiles(float *x, int64_t m, int64_t k, int tile,
                          float density, unsigned seed) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * k)
    return;
  int64_t r = i / k, c = i % k;
  unsigned h = unsigned(r / tile) * 2654435761u ^ unsigned(c) * 2246822519u ^ seed;
  h ^= h >> 15;
  h *= 2654435761u;
  h ^= h >> 13;
  float u = float(h & 0xffffff) / float(0x1000000);
  x[i] = u < density ? 0.25f + float((i * 7919) % 97) / 97.0f : 0.0f;
}

__global__ void toHalf(const float *x, __half *y, int64_t n) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = __float2half(x[i]);
}

float medianUs(cudaStream_t s, const std::function<void()> &fn) {
  fn();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> t;
  for (int r = 0; r < 7; ++r) {
    cudaEventRecord(a, s);
    fn();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms * 1000.0f);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Buffers {
  std::vector<void *> all;
  template <typename T> T *get(size_t n, cudaError_t &e) {
    void *p = nullptr;
    if (e == cudaSuccess)
      e = cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T));
    all.push_back(p);
    return static_cast<T *>(p);
  }
  ~Buffers() {
    for (void *p : all)
      cudaFree(p);
  }
};

} // namespace

bool pitTune(const std::string &path, int64_t m, int64_t k, int64_t n,
             std::string &error) {
  if (m <= 0 || k <= 0 || n <= 0 || n % 8 || pitBlocks(m, 8) > 65535) {
    error = "the tuning problem needs positive sizes, n a multiple of 8 and "
            "m at most 524280";
    return false;
  }
  cudaError_t e = cudaSuccess;
  Buffers buf;
  float *x = buf.get<float>(size_t(m * k), e);
  float *staging = buf.get<float>(size_t(k * n), e); // the weights, as fp32
  __half *xh = buf.get<__half>(size_t(m * k), e);
  __half *w = buf.get<__half>(size_t(k * n), e);
  float *y = buf.get<float>(size_t(m * n), e);
  PitWorkspace ws;
  ws.idx = buf.get<int32_t>(pitIdxBytes(m, k, 8) / 4, e);
  ws.count = buf.get<int32_t>(pitCountBytes(m, 8) / 4, e);
  ws.xg = buf.get<__half>(std::max({pitGatherBytes(m, k, 8), pitGatherBytes(m, k, 16),
                                    pitGatherBytes(m, k, 32)}) / 2, e);
  cudaStream_t s = nullptr;
  cublasHandle_t blas = nullptr;
  if (e == cudaSuccess)
    e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    error = std::string("CUDA: ") + cudaGetErrorString(e);
    return false;
  }
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    error = "cuBLAS could not be initialised";
    cudaStreamDestroy(s);
    return false;
  }
  cublasSetStream(blas, s);
  const unsigned threads = 256;
  auto blocksOf = [&](int64_t count) { return unsigned((count + threads - 1) / threads); };
  // Weights: any values (the times do not depend on them).
  fillTiles<<<blocksOf(k * n), threads, 0, s>>>(staging, k, n, 1, 1.0f, 7u);
  toHalf<<<blocksOf(k * n), threads, 0, s>>>(staging, w, k * n);

  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::ostringstream out;
  out << "{\"format\": \"sparsec-pit-table\", \"version\": 1, \"device\": \""
      << prop.name << "\", \"m\": " << m << ", \"k\": " << k << ", \"n\": " << n;

  fillTiles<<<blocksOf(m * k), threads, 0, s>>>(x, m, k, 1, 1.0f, 1u);
  const float one = 1.0f, zero = 0.0f;
  float convertUs = medianUs(s, [&] {
    toHalf<<<blocksOf(m * k), threads, 0, s>>>(x, xh, m * k);
  });
  float gemmUs = medianUs(s, [&] {
    cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k), &one, w,
                 CUDA_R_16F, int(n), xh, CUDA_R_16F, int(k), &zero, y,
                 CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  out << ",\n \"dense\": {\"convert_us\": " << convertUs
      << ", \"gemm_us\": " << gemmUs << "},\n \"pit\": [";
  std::fprintf(stderr, "[tune] %s, %lld x %lld x %lld: dense %.1f + %.1f us\n",
               prop.name, (long long)m, (long long)k, (long long)n, convertUs,
               gemmUs);
  // The 32-token matmul as the models run it (pitWarpgroupMma reads
  // SPARSEC_CUDA_PIT_MMA for both).
  std::fprintf(stderr, "[tune] 32-token matmul on %s\n",
               pitWarpgroupMma() ? "warpgroup MMAs (SPARSEC_CUDA_PIT_MMA=sync: mma.sync)"
                                 : "mma.sync");
  const float densities[] = {0.01f, 0.02f, 0.05f, 0.1f, 0.2f,
                             0.35f, 0.5f,  0.75f, 1.0f};
  bool first = true;
  if (!pitSupported(m, k, n, 8, w)) {
    error = "the PIT kernels do not support a " + std::to_string(m) + " x " +
            std::to_string(k) + " x " + std::to_string(n) + " problem";
    cublasDestroy(blas);
    cudaStreamDestroy(s);
    return false;
  }
  for (int tile : {8, 16, 32}) {
    for (float d : densities) {
      fillTiles<<<blocksOf(m * k), threads, 0, s>>>(x, m, k, tile, d, 3u);
      cudaError_t launch = cudaSuccess;
      auto keep = [&](cudaError_t r) {
        if (launch == cudaSuccess)
          launch = r;
      };
      float sreadUs =
          medianUs(s, [&] { keep(pitSRead(x, m, k, tile, false, ws, s)); });
      // Both widths: 128 columns (the default) and 256 (two warpgroups a
      // block at 32-token tiles on Hopper), each its own series.
      float matmulUs[2];
      for (int c = 0; c < 2; ++c)
        matmulUs[c] = medianUs(s, [&] {
          keep(pitMatmul(ws, m, k, w, n, tile, nullptr, ops::Activation::none,
                         nullptr, y, s, c ? 256 : 128));
        });
      e = launch != cudaSuccess ? launch : cudaGetLastError();
      if (e != cudaSuccess)
        break;
      for (int c = 0; c < 2; ++c) {
        out << (first ? "\n  " : ",\n  ") << "{\"tile\": " << tile
            << ", \"columns\": " << (c ? 256 : 128) << ", \"density\": " << d
            << ", \"sread_us\": " << sreadUs
            << ", \"matmul_us\": " << matmulUs[c] << "}";
        first = false;
      }
      std::fprintf(stderr,
                   "[tune] tile %2d x 1, density %.2f: sread %.1f + "
                   "matmul %.1f us (128 columns), %.1f us (256)\n",
                   tile, d, sreadUs, matmulUs[0], matmulUs[1]);
    }
    if (e != cudaSuccess)
      break;
  }
  cublasDestroy(blas);
  cudaError_t sync = cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  if (e == cudaSuccess)
    e = sync;
  if (e != cudaSuccess) {
    error = std::string("CUDA: ") + cudaGetErrorString(e);
    return false;
  }
  out << "\n]}\n";
  std::ofstream file(path);
  file << out.str();
  file.close();
  if (!file) {
    error = "cannot write '" + path + "'";
    return false;
  }
  return true;
}

} // namespace sparsec::rt::cuda
