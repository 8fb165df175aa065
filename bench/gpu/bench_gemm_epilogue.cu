//===- bench_gemm_epilogue.cu - prompt GEMMs with fused epilogues ---------===//
//
// Part of the sparsec project.
//
// A prompt's linears at OPT-6.7B's shapes (d 4096, F 16384; 512 tokens by
// default): y [M, N] = act(x [M, K] . W^T + bias) (+ residual), W
// neuron-major [N, K] as the runtime stores it, fp32 outputs:
//   qkv / out   K 4096 -> N 4096, bias (out: + the residual)
//   up          K 4096 -> N 16384, bias and ReLU
//   down        K 16384 -> N 4096, bias + the residual
// for fp32, fp16 and bf16 weights (x in the weights' type, converted
// beforehand and not timed; fp32 accumulation). Columns:
//   GEMM alone   cublasGemmEx / cublasSgemm without bias or activation
//                (what any epilogue adds to)
//   separate     the GEMM, then a kernel adding the bias and applying the
//                activation over y (the runtime's path before LtGemm, and
//                still its path for other activations)
//   fused        LtGemm (runtime/src/cuda/LtGemm.cu): cuBLASLt with the
//                bias / ReLU epilogue inside the GEMM, what the runtime
//                runs now
// A residual is copied into y first and accumulated onto (beta = 1) by the
// separate form; the fused one reads it as cuBLASLt's C (no copy). Times are
// medians over replays of a CUDA graph of 20 calls. The fused result is checked
// against the separate one (max relative difference, relative to 1 + |y|: the
// two add in other orders; above 1e-4 fails the run, exit 1).
//
//   sparsec-bench-gemm-epilogue [--m 512] [--d 4096] [--ffn 16384]
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/LtGemm.h"

#include "GpuBench.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace sparsec;
using namespace sparsec::bench;

namespace {

__global__ void epilogueKernel(float *y, int64_t MN, int N, const float *bias,
                               bool relu) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < MN;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = y[i] + (bias ? bias[i % N] : 0.0f);
    y[i] = relu && v < 0.0f ? 0.0f : v;
  }
}

__global__ void convertKernel(const float *x, int64_t n, cudaDataType_t type,
                              void *out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (type == CUDA_R_16F)
      static_cast<__half *>(out)[i] = __float2half_rn(x[i]);
    else if (type == CUDA_R_16BF)
      static_cast<__nv_bfloat16 *>(out)[i] = __float2bfloat16_rn(x[i]);
    else
      static_cast<float *>(out)[i] = x[i];
  }
}

struct Shape {
  const char *name;
  int64_t K, N;
  bool relu, residual;
};

} // namespace

int main(int argc, char **argv) {
  int64_t M = 512, d = 4096, ffn = 16384;
  if (!Options("sparsec-bench-gemm-epilogue")
           .add("--m", M)
           .add("--d", d)
           .add("--ffn", ffn)
           .parse(argc, argv))
    return 2;
  if (M <= 0 || d <= 0 || ffn <= 0) {
    std::fprintf(stderr, "error: --m, --d and --ffn must be positive\n");
    return 2;
  }
  cudaDeviceProp prop;
  cublasHandle_t blas;
  cusparseHandle_t sparse;
  setUp(prop, blas, sparse);
  const size_t workspaceBytes = size_t(32) << 20;
  void *workspace = alloc<char>(workspaceBytes);
  cublasSetWorkspace(blas, workspace, workspaceBytes);
  cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH);
  rt::cuda::LtGemm lt;

  const Shape shapes[] = {{"qkv (bias)", d, d, false, false},
                          {"out (bias, residual)", d, d, false, true},
                          {"up (bias, ReLU)", d, ffn, true, false},
                          {"down (bias, residual)", ffn, d, false, true}};
  std::printf("%s, %lld tokens, fp32 outputs; us (median of CUDA-graph "
              "replays)\n\n",
              prop.name, (long long)M);
  std::printf(
      "| linear | weights | GEMM alone | separate | fused | separate / "
      "fused | fused vs separate |\n|---|---|---:|---:|---:|---:|---:|\n");
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  bool ok = true;
  for (const Shape &s : shapes) {
    std::vector<float> w(size_t(s.N * s.K)), x(size_t(M * s.K)), bias(s.N),
        res(size_t(M * s.N));
    for (float &v : w)
      v = g(rng) / std::sqrt(float(s.K));
    for (float &v : x)
      v = g(rng);
    for (float &v : bias)
      v = g(rng);
    for (float &v : res)
      v = g(rng);
    float *dw32 = upload(w), *dx32 = upload(x), *db = upload(bias),
          *dres = upload(res);
    float *y = alloc<float>(size_t(M * s.N)),
          *yRef = alloc<float>(size_t(M * s.N));
    for (cudaDataType_t type : {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF}) {
      const size_t elt = type == CUDA_R_32F ? 4 : 2;
      void *dw = alloc<char>(w.size() * elt), *dx = alloc<char>(x.size() * elt);
      convertKernel<<<1024, 256>>>(dw32, int64_t(w.size()), type, dw);
      convertKernel<<<1024, 256>>>(dx32, int64_t(x.size()), type, dx);
      CHECK_CUDA(cudaDeviceSynchronize());
      const float one = 1.0f, zero = 0.0f;
      auto gemm = [&](float *out, bool accumulate) {
        const float *beta = accumulate ? &one : &zero;
        if (type == CUDA_R_32F)
          cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(s.N), int(M),
                      int(s.K), &one, static_cast<float *>(dw), int(s.K),
                      static_cast<float *>(dx), int(s.K), beta, out, int(s.N));
        else
          cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(s.N), int(M),
                       int(s.K), &one, dw, type, int(s.K), dx, type, int(s.K),
                       beta, out, CUDA_R_32F, int(s.N), CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT);
      };
      auto residualFirst = [&](float *out) {
        if (s.residual)
          CHECK_CUDA(cudaMemcpyAsync(out, dres, sizeof(float) * M * s.N,
                                     cudaMemcpyDeviceToDevice, stream));
      };
      const rt::ops::Activation act =
          s.relu ? rt::ops::Activation::relu : rt::ops::Activation::none;
      auto separate = [&](float *out) {
        residualFirst(out);
        gemm(out, s.residual);
        epilogueKernel<<<1024, 256, 0, stream>>>(out, M * s.N, int(s.N), db,
                                                 s.relu);
      };
      cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
      auto fused = [&](float *out) {
        cublasStatus_t st = lt.matmul(stream, dx, dw, type, true, M, s.K, s.N,
                                      db, act, s.residual ? dres : nullptr, out,
                                      workspace, workspaceBytes);
        if (st != CUBLAS_STATUS_SUCCESS)
          status = st;
      };
      bool graphed = false;
      const double aloneUs = timeUs([&] { gemm(y, false); }, graphed, 20);
      const double separateUs = timeUs([&] { separate(yRef); }, graphed, 20);
      const double fusedUs = timeUs([&] { fused(y); }, graphed, 20);
      CHECK_CUDA(cudaStreamSynchronize(stream));
      separate(yRef);
      fused(y);
      CHECK_CUDA(cudaStreamSynchronize(stream));
      const std::vector<float> a = download(y, size_t(M * s.N)),
                               b = download(yRef, size_t(M * s.N));
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i)
        worst = std::max(worst, std::fabs(double(a[i]) - b[i]) /
                                    (1.0 + std::fabs(double(b[i]))));
      const bool good = status == CUBLAS_STATUS_SUCCESS && worst <= 1e-4;
      ok &= good;
      const char *name = type == CUDA_R_32F   ? "fp32"
                         : type == CUDA_R_16F ? "fp16"
                                              : "bf16";
      if (status != CUBLAS_STATUS_SUCCESS)
        std::printf("| %s | %s | %.1f | %.1f | n/a (cuBLASLt status %d) | | "
                    "FAIL |\n",
                    s.name, name, aloneUs, separateUs, int(status));
      else
        std::printf("| %s | %s | %.1f | %.1f | %.1f | %.2fx | %.1e%s |\n",
                    s.name, name, aloneUs, separateUs, fusedUs,
                    separateUs / fusedUs, worst, good ? "" : " FAIL");
      std::fflush(stdout);
      cudaFree(dw);
      cudaFree(dx);
    }
    for (void *p : {(void *)dw32, (void *)dx32, (void *)db, (void *)dres,
                    (void *)y, (void *)yRef})
      cudaFree(p);
  }
  std::printf("\nPlans made: %zu\n", lt.plans());
  return ok ? 0 : 1;
}
