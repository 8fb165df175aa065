//===- bench_gated_ffn.cu - a gated MLP's decode step, sparse vs dense ----===//
//
// Part of the sparsec project.
//
// One decode step of a gated MLP, y = x + down(relu(gate(x)) * up(x)), at
// a ReLU-fied LLaMA-7B shape (d = 4096, F = 11008, fp16 weights, fp32
// activations and accumulation), batch 1 by default, with a share of the
// gates at or below 0 (power-law neuron frequencies; the gate biases put
// each chosen neuron at least 0.25 above 0 and every other one 0.25 below).
// Measured in the same run:
//   cuBLAS dense     x to fp16, three cublasGemmEx (gate and up into fp32,
//                    down from the fp16 product), the product kernel
//   sparsec dense    what a dense CUDA build of sparsec launches per FFN:
//                    gemvRows for the gate (ReLU) and the up projection,
//                    the product kernel, gemvRows for the down projection
//                    with the residual (DenseDecode.h)
//   sparsec exact    what an exact-sparsity build launches (cuda::gateMask,
//                    sparseLinearOutput, binary, sparseLinearInput): the gate
//                    GEMV, indexFromGate (the mask and the set of the gate's
//                    non-zeros), a zero fill and sparseUp over the set for
//                    the up projection, the product kernel, the base (the
//                    residual) and sparseDown over the same set
//   exact, list      the same, sparseUp also writing the set as one list
//                    for sparseDown (its compact path)
//   exact, kernels   the list, and no zero fill or base kernel: sparseUp
//                    writes the base of the down projection (RowsInit)
// Every sparse kernel and GEMV is launched early (programmatic dependent
// launches), as the runtime launches them. Each time is the median over 5
// replays of a CUDA graph of 100 steps, divided by 100. "bound" is the
// bytes the step must read (dense: the three weights; sparse: the gate
// weight and the active rows of the other two) at the device-to-device copy
// bandwidth measured in the same run. The sparse results are checked
// against sparsec dense (max error relative to the largest |y|; exit 1 when
// above 1e-3), sparsec dense against cuBLAS.
//
//   sparsec-bench-gated-ffn [--d 4096] [--ffn 11008] [--tokens 1]
//                           [--sparsity 0.5,0.8,0.9,0.95]
//
//===----------------------------------------------------------------------===//

#include "GpuBench.h"
#include "sparsec/rt/cuda/DenseDecode.h"
#include "sparsec/rt/cuda/SparseDecode.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace sparsec::rt::cuda;
using namespace sparsec::bench;
namespace ops = sparsec::rt::ops;

namespace {
/// r = a * b (the runtime's binary kernel for operands of one shape).
__global__ void mulKernel(const float *a, const float *b, float *r, int64_t n) {
  pdlLaunchDependents();
  pdlWaitPrior();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    r[i] = a[i] * b[i];
}
/// y = src (the base of the down projection: the residual).
__global__ void copyKernel(const float *src, float *y, int64_t n) {
  pdlLaunchDependents();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = src[i];
}
/// r = relu(a) * b to fp16 (cuBLAS's path: its down GEMM reads fp16).
__global__ void gluHalfKernel(const float *a, const float *b, __half *r, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    r[i] = __float2half(fmaxf(a[i], 0.0f) * b[i]);
}
__global__ void toHalf(const float *x, __half *y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2half(x[i]);
}
__global__ void addKernel(float *y, const float *r, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] += r[i];
}
int blocksFor(int64_t n) { return int(std::min<int64_t>((n + 255) / 256, 4096)); }

/// `kernel` over n elements as a programmatic dependent launch.
template <typename... P, typename... A> void early(void (*kernel)(P...), int64_t n, A... args) {
  launchEarly(kernel, dim3(blocksFor(n)), dim3(256), stream, args...);
}
} // namespace

int main(int argc, char **argv) {
  int d = 4096, f = 11008, tokens = 1;
  std::vector<double> sparsities = {0.5, 0.8, 0.9, 0.95};
  if (!Options("sparsec-bench-gated-ffn")
           .add("--d", d)
           .add("--ffn", f)
           .add("--tokens", tokens)
           .add("--sparsity", sparsities)
           .parse(argc, argv))
    return 1;
  if (tokens < 1 || tokens > kMaxTokens || d < 1 || f < 1 ||
      std::any_of(sparsities.begin(), sparsities.end(),
                  [](double s) { return !(s >= 0 && s < 1); })) {
    std::fprintf(stderr, "error: bad arguments: --tokens 1 to %d, positive --d and "
                         "--ffn, --sparsity fractions in [0, 1)\n", kMaxTokens);
    return 1;
  }
  cudaDeviceProp prop;
  cublasHandle_t blas;
  cusparseHandle_t sparse;
  setUp(prop, blas, sparse);
  const double bandwidth = copyBandwidthGBs();
  bool g;

  std::mt19937 rng(0);
  std::uniform_real_distribution<float> val(-1, 1), coin(0, 1);
  const float ws = 1.0f / std::sqrt(float(d));
  std::vector<__half> wg(size_t(f) * d), wu(size_t(f) * d), wd(size_t(f) * d),
      wdt(size_t(d) * f);
  for (auto &v : wg) v = __float2half(val(rng) * ws);
  for (auto &v : wu) v = __float2half(val(rng) * ws);
  for (size_t j = 0; j < size_t(f); ++j)
    for (size_t c = 0; c < size_t(d); ++c)
      wdt[c * f + j] = wd[j * d + c] = __float2half(val(rng) * ws);
  std::vector<float> x(size_t(tokens) * d), res(size_t(tokens) * d);
  for (float &v : x) v = val(rng);
  for (float &v : res) v = val(rng);
  // Weights as the runtime stores them: gate and up neuron-major [F, d] for
  // gemvRows and sparseUp, down [F, d] for sparseDown and [d, F] for
  // gemvRows.
  __half *dWg = upload(wg), *dWu = upload(wu), *dWd = upload(wd), *dWdt = upload(wdt);
  float *dX = upload(x), *dRes = upload(res);
  const int64_t tf = int64_t(tokens) * f, td = int64_t(tokens) * d;
  float *dG = alloc<float>(tf), *dU = alloc<float>(tf), *dH = alloc<float>(tf),
        *dY = alloc<float>(td), *dYDense = alloc<float>(td), *dBias = alloc<float>(f);
  uint8_t *dMask = alloc<uint8_t>(tf);
  __half *dXh = alloc<__half>(td), *dHh = alloc<__half>(tf);
  float *dGb = alloc<float>(tf), *dUb = alloc<float>(tf), *dYb = alloc<float>(td);
  IndexView ix;
  ix.neurons = f;
  ix.idx = alloc<int32_t>(size_t(indexSegments(f)) * kSegment);
  ix.cnt = alloc<int32_t>(size_t(indexSegments(f)));
  int32_t *dList = alloc<int32_t>(size_t(f)), *dListCount = alloc<int32_t>(1);

  // The gate projection without its bias, to place the biases.
  CHECK_CUDA(gemvRows<__half>(dX, tokens, dWg, d, f, nullptr, ops::Activation::none,
                              nullptr, dG, stream));
  const std::vector<float> g0 = download(dG, size_t(tf));

  std::printf("GPU: %s, %d SMs, %.0f MB L2; device-to-device copy %.0f GB/s\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6, bandwidth);
  std::printf("gated MLP decode step y = x + down(relu(gate(x)) * up(x)), d %d, F %d, "
              "fp16 weights, %d token(s); microseconds per step (graph of 100, "
              "median of 5)\n\n", d, f, tokens);
  std::printf("| gates at 0 | active | cuBLAS dense | sparsec dense | sparsec exact | "
              "exact, list | exact, kernels | best exact vs sparsec dense | dense bound | "
              "sparse bound | err exact | err list | err kernels | err dense vs cuBLAS |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  bool ok = true;
  for (double sparsity : sparsities) {
    std::vector<double> p(f);
    double sum = 0;
    for (int j = 0; j < f; ++j)
      sum += p[j] = std::pow(double(j + 1), -0.8);
    const double scale = (1.0 - sparsity) * f / sum;
    std::vector<int> perm(f);
    for (int j = 0; j < f; ++j) perm[j] = j;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<float> bias(f);
    int active = 0;
    for (int j = 0; j < f; ++j) {
      const bool on = coin(rng) < std::min(1.0, p[perm[j]] * scale);
      active += on;
      float lo = 1e30f, hi = -1e30f;
      for (int t = 0; t < tokens; ++t) {
        lo = std::min(lo, g0[size_t(t) * f + j]);
        hi = std::max(hi, g0[size_t(t) * f + j]);
      }
      bias[j] = on ? 0.25f - lo : -0.25f - hi;
    }
    CHECK_CUDA(cudaMemcpy(dBias, bias.data(), sizeof(float) * f, cudaMemcpyHostToDevice));

    const float one = 1.0f, zero = 0.0f;
    auto cublasStep = [&] {
      toHalf<<<blocksFor(td), 256, 0, stream>>>(dX, dXh, td);
      cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, f, tokens, d, &one, dWg, CUDA_R_16F, d,
                   dXh, CUDA_R_16F, d, &zero, dGb, CUDA_R_32F, f, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
      cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, f, tokens, d, &one, dWu, CUDA_R_16F, d,
                   dXh, CUDA_R_16F, d, &zero, dUb, CUDA_R_32F, f, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
      // The gate's bias, then relu(gate) * up to fp16.
      for (int t = 0; t < tokens; ++t)
        addKernel<<<blocksFor(f), 256, 0, stream>>>(dGb + int64_t(t) * f, dBias, f);
      gluHalfKernel<<<blocksFor(tf), 256, 0, stream>>>(dGb, dUb, dHh, tf);
      cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, d, tokens, f, &one, dWdt, CUDA_R_16F, f,
                   dHh, CUDA_R_16F, f, &zero, dYb, CUDA_R_32F, d, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
      addKernel<<<blocksFor(td), 256, 0, stream>>>(dYb, dRes, td);
    };
    auto denseStep = [&] {
      CHECK_CUDA(gemvRows<__half>(dX, tokens, dWg, d, f, dBias, ops::Activation::relu,
                                  nullptr, dG, stream, true));
      CHECK_CUDA(gemvRows<__half>(dX, tokens, dWu, d, f, nullptr, ops::Activation::none,
                                  nullptr, dU, stream, true));
      early(mulKernel, tf, (const float *)dG, (const float *)dU, dH, tf);
      CHECK_CUDA(gemvRows<__half>(dH, tokens, dWdt, f, d, nullptr, ops::Activation::none,
                                  dRes, dYDense, stream, true));
    };
    // listed: sparseUp also writes the set as one list, which sparseDown
    // reads (its compact path); fusedBase: no zero fill of u, and sparseUp
    // writes the down projection's base.
    auto exactStep = [&](bool listed, bool fusedBase) {
      CHECK_CUDA(gemvRows<__half>(dX, tokens, dWg, d, f, dBias, ops::Activation::relu,
                                  nullptr, dG, stream, true));
      CHECK_CUDA(indexFromGate(dG, tokens, true, dMask, ix, stream, true));
      if (!fusedBase)
        CHECK_CUDA(cudaMemsetAsync(dU, 0, sizeof(float) * tf, stream));
      const RowsInit init = fusedBase ? RowsInit{dY, nullptr, dRes, tokens, d} : RowsInit{};
      CHECK_CUDA(sparseUp<__half>(dX, tokens, dWu, d, nullptr, ix, false, dU, f, init,
                                  stream, listed ? dList : nullptr,
                                  listed ? dListCount : nullptr, true,
                                  tokens > 1 ? dMask : nullptr));
      early(mulKernel, tf, (const float *)dG, (const float *)dU, dH, tf);
      if (!fusedBase)
        copyKernel<<<blocksFor(td), 256, 0, stream>>>(dRes, dY, td);
      IndexView down = ix;
      if (listed) {
        down.list = dList;
        down.count = dListCount;
      }
      CHECK_CUDA(sparseDown<__half>(dH, tokens, f, dWd, d, down, dY, stream, 0, nullptr,
                                    true));
    };
    const double cublasUs = timeUs(cublasStep, g);
    cublasStep();
    const double denseUs = timeUs(denseStep, g);
    denseStep();
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const std::vector<float> yCublas = download(dYb, size_t(td));
    const std::vector<float> yDense = download(dYDense, size_t(td));
    // Each variant timed, then run once more and checked.
    auto variant = [&](bool listed, bool fusedBase, double &err) {
      const double us = timeUs([&] { exactStep(listed, fusedBase); }, g);
      exactStep(listed, fusedBase);
      CHECK_CUDA(cudaStreamSynchronize(stream));
      err = relErr(download(dY, size_t(td)), yDense);
      return us;
    };
    double errExact, errList, errKernels;
    const double exactUs = variant(false, false, errExact);
    const double listUs = variant(true, false, errList);
    // Without the zero fill, u outside the set keeps older values; the
    // down projection reads only the set's rows of the product.
    const double kernelsUs = variant(true, true, errKernels);
    const double errBlas = relErr(yDense, yCublas);
    ok &= errExact < 1e-3 && errList < 1e-3 && errKernels < 1e-3 && errBlas < 1e-2;
    const double denseBytes = 3.0 * f * d * 2, sparseBytes = (double(f) + 2.0 * active) * d * 2;
    std::printf("| %.2f | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.2fx | %.1f | %.1f | "
                "%.1e | %.1e | %.1e | %.1e |\n",
                sparsity, active, cublasUs, denseUs, exactUs, listUs, kernelsUs,
                denseUs / std::min(exactUs, std::min(listUs, kernelsUs)),
                denseBytes / (bandwidth * 1e3), sparseBytes / (bandwidth * 1e3), errExact,
                errList, errKernels, errBlas);
  }
  if (!ok)
    std::printf("FAIL: a result is off (see the err columns)\n");
  return ok ? 0 : 1;
}
