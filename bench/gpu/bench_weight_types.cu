//===- bench_weight_types.cu - fp32, fp16 and bf16 weights side by side ---===//
//
// Part of the sparsec project.
//
// The same kernels over the same weights stored as float32, float16 and
// bfloat16 (`--weights f32|f16|bf16`), at an OPT-6.7B FFN's shapes (d =
// 4096, F = 16384), batch 1 unless said:
//   gemv        gemvRows, the dense decode GEMV over a neuron-major [F, d]
//               weight (the up projection)
//   up          sparseUp over a listed set (the predicted up projection; the
//               split kernel at 1-2 tokens for both 16-bit types)
//   down        sparseDown over the same set ([F, d] rows), after a memset
//               of y (a step has the up kernel write y's base instead)
//   gemv x4     gemvRows at 4 tokens (fp16: tensor cores; bf16 and fp32:
//               CUDA cores)
//   GEMM 512    the prompt's GEMM through cuBLAS, 512 tokens x d -> F:
//               cublasSgemm for fp32, cublasGemmEx with 16-bit operands (x
//               rounded to the weights' type) and fp32 accumulation
// Each time is the median over 5 replays of a CUDA graph of 100 calls. Each
// result is checked against a double-precision product over the same
// (rounded) weights; the largest relative error is printed and a result off
// by more than 1e-3 (1e-2 for the rounded GEMM inputs) fails the run (exit
// 1). "bytes" is what the kernel must read of the weights, "GB/s" that over
// the time.
//
// A second table: PIT (pitSRead from fp32 x + pitMatmul's default, fp32
// outputs, as the runtime's sparse_linear runs it) on fp16 and bf16
// weights against cuBLAS's dense GEMM of the same 16-bit operands (x given
// to it already rounded, fp32 outputs) at --pit-size^3 (4096) with 32 x 1
// micro-tiles, 90 and 99 % of them empty; PIT's result is checked against
// cuBLAS's (1e-3 relative).
//
//   sparsec-bench-weight-types [--density 0.1] [--d 4096] [--ffn 16384]
//                              [--pit-size 4096]
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/DenseDecode.h"
#include "sparsec/rt/cuda/Pit.h"
#include "sparsec/rt/cuda/SparseDecode.h"

#include "GpuBench.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

using namespace sparsec;
using namespace sparsec::bench;
using rt::cuda::IndexView;
using rt::cuda::RowsInit;

namespace {

template <typename W> W from(float v) {
  if constexpr (std::is_same_v<W, __half>)
    return __float2half(v);
  else if constexpr (std::is_same_v<W, __nv_bfloat16>)
    return __float2bfloat16(v);
  else
    return v;
}
template <typename W> double widen(W v) {
  if constexpr (std::is_same_v<W, __half>)
    return __half2float(v);
  else if constexpr (std::is_same_v<W, __nv_bfloat16>)
    return __bfloat162float(v);
  else
    return v;
}
template <typename W> const char *name() {
  return std::is_same_v<W, __half> ? "fp16"
         : std::is_same_v<W, __nv_bfloat16> ? "bf16"
                                              : "fp32";
}

struct Shared {
  int d = 4096, f = 16384, tokens = 4, prompt = 512;
  std::vector<float> w;        // [f, d] float32 master weights
  std::vector<float> x;        // [prompt, d]
  std::vector<int32_t> active; // the listed set
  cublasHandle_t blas = nullptr;
  bool ok = true;
};

double relErr(const std::vector<float> &got, const std::vector<double> &ref) {
  double worst = 0, scale = 0;
  for (double r : ref)
    scale = std::max(scale, std::fabs(r));
  for (size_t i = 0; i < ref.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - ref[i]) / (scale + 1e-30));
  return worst;
}

template <typename W> void row(Shared &s) {
  const int d = s.d, f = s.f, n = int(s.active.size());
  std::vector<W> wh(s.w.size());
  for (size_t i = 0; i < wh.size(); ++i)
    wh[i] = from<W>(s.w[i]);
  W *w = upload(wh);
  float *x = upload(s.x);
  float *y = alloc<float>(size_t(s.prompt) * f);
  float *h = alloc<float>(size_t(s.tokens) * f);
  float *out = alloc<float>(size_t(s.tokens) * d);
  // The set as segments and as a list (what the predictor writes).
  std::vector<uint8_t> flags(f, 0);
  for (int j : s.active)
    flags[j] = 1;
  uint8_t *dflags = upload(flags);
  IndexView ix;
  ix.neurons = f;
  ix.idx = alloc<int32_t>(size_t(rt::cuda::indexSegments(f)) * rt::cuda::kSegment);
  ix.cnt = alloc<int32_t>(rt::cuda::indexSegments(f));
  ix.list = upload(s.active);
  ix.count = upload(std::vector<int32_t>{n});
  CHECK_CUDA(rt::cuda::indexFromFlags(dflags, ix, stream));

  // Double-precision references over the rounded weights.
  auto wd = [&](int j, int k) { return widen(wh[size_t(j) * d + k]); };
  std::vector<double> refGemv(f), refUp(f, 0.0), refDown(d, 0.0);
  for (int j = 0; j < f; ++j) {
    double a = 0;
    for (int k = 0; k < d; ++k)
      a += wd(j, k) * s.x[k];
    refGemv[j] = a;
  }
  for (int j : s.active)
    refUp[j] = refGemv[j];
  std::vector<float> hx(f, 0.0f);
  for (int j : s.active)
    hx[j] = s.x[j % d] + 0.5f; // h over the set (down's input)
  float *hd = upload(hx);
  for (int j : s.active)
    for (int k = 0; k < d; ++k)
      refDown[k] += double(hx[j]) * wd(j, k);

  bool graphed = false;
  auto report = [&](const char *what, double us, double bytes, double err,
                    double tol) {
    const bool good = err <= tol;
    s.ok &= good;
    std::printf("| %s | %s | %.2f | %.1f | %.0f | %.1e%s |\n", what, name<W>(),
                us, bytes / 1e6, bytes / us / 1e3, err, good ? "" : " FAIL");
  };
  const double wBytes = double(sizeof(W)) * d;

  // Dense decode GEMV, 1 and 4 tokens.
  for (int t : {1, s.tokens}) {
    float *yy = y;
    const double us = timeUs(
        [&] {
          CHECK_CUDA(rt::cuda::gemvRows(x, t, w, d, f, nullptr,
                                        rt::ops::Activation::none, nullptr, yy,
                                        stream, false));
        },
        graphed);
    std::vector<float> got = download(yy, size_t(f));
    report(t == 1 ? "gemv" : "gemv x4", us, wBytes * f, relErr(got, refGemv),
           1e-3);
  }
  // Listed sparse up, 1 token.
  {
    CHECK_CUDA(cudaMemset(h, 0, sizeof(float) * f));
    const double us = timeUs(
        [&] {
          CHECK_CUDA(rt::cuda::sparseUp(x, 1, w, d, nullptr, ix, false, h, f,
                                        RowsInit{}, stream));
        },
        graphed);
    std::vector<float> got = download(h, size_t(f));
    report("up", us, wBytes * n, relErr(got, refUp), 1e-3);
  }
  // Sparse down over the same set, 1 token.
  {
    const double us = timeUs(
        [&] {
          CHECK_CUDA(cudaMemsetAsync(out, 0, sizeof(float) * d, stream));
          CHECK_CUDA(rt::cuda::sparseDown(hd, 1, f, w, d, ix, out, stream));
        },
        graphed);
    std::vector<float> got = download(out, size_t(d));
    report("down (+ memset)", us, wBytes * n, relErr(got, refDown), 1e-3);
  }
  // The prompt's GEMM: y [prompt, f] = x [prompt, d] . w^T.
  {
    const float one = 1.0f, zero = 0.0f;
    void *xh = nullptr;
    if constexpr (!std::is_same_v<W, float>) {
      std::vector<W> xs(s.x.size());
      for (size_t i = 0; i < xs.size(); ++i)
        xs[i] = from<W>(s.x[i]);
      xh = upload(xs);
    }
    const cudaDataType_t type =
        std::is_same_v<W, __half> ? CUDA_R_16F : CUDA_R_16BF;
    const double us = timeUs(
        [&] {
          if constexpr (std::is_same_v<W, float>)
            cublasSgemm(s.blas, CUBLAS_OP_T, CUBLAS_OP_N, f, s.prompt, d, &one,
                        w, d, x, d, &zero, y, f);
          else
            cublasGemmEx(s.blas, CUBLAS_OP_T, CUBLAS_OP_N, f, s.prompt, d,
                         &one, w, type, d, xh, type, d, &zero, y, CUDA_R_32F,
                         f, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        },
        graphed, 20);
    // Row 0 of y (token 0) against the fp32-x reference: x's rounding too.
    std::vector<float> got = download(y, size_t(f));
    report("GEMM 512", us, wBytes * f, relErr(got, refGemv),
           std::is_same_v<W, float> ? 1e-3 : 1e-2);
    cudaFree(xh);
  }
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
  cudaFree(h);
  cudaFree(out);
  cudaFree(hd);
  cudaFree(dflags);
  cudaFree(ix.idx);
  cudaFree(ix.cnt);
  cudaFree(ix.list);
  cudaFree(ix.count);
}

/// PIT on 16-bit weights W against cuBLAS's dense GEMM of the same
/// operands, y [m, m] = x [m, m] . W [m, m], 32 x 1 micro-tiles.
template <typename W> void pitRow(Shared &s, int m, double sparsity) {
  constexpr int tile = 32;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> val(-1.0f, 1.0f), coin(0.0f, 1.0f);
  std::vector<W> wh(size_t(m) * m);
  for (W &v : wh)
    v = from<W>(val(rng) * 0.05f);
  // x with the micro-tile pattern, its values exact in W's type (so that
  // SRead's rounding and the operand cuBLAS gets agree).
  std::vector<float> x(size_t(m) * m, 0.0f);
  std::vector<W> xh(x.size(), from<W>(0.0f));
  const int64_t blocks = rt::cuda::pitBlocks(m, tile);
  for (int64_t b = 0; b < blocks; ++b)
    for (int k = 0; k < m; ++k)
      if (coin(rng) >= sparsity)
        for (int t = 0; t < tile && b * tile + t < m; ++t) {
          const size_t i = size_t(b * tile + t) * m + k;
          xh[i] = from<W>(std::fabs(val(rng)) + 0.01f);
          x[i] = float(widen(xh[i]));
        }
  W *dw = upload(wh), *dxh = upload(xh);
  float *dx = upload(x);
  float *yPit = alloc<float>(size_t(m) * m),
        *yBlas = alloc<float>(size_t(m) * m);
  rt::cuda::PitWorkspace ws = allocPitWorkspace(m, m, tile);
  const cudaDataType_t type =
      std::is_same_v<W, __half> ? CUDA_R_16F : CUDA_R_16BF;
  const float one = 1.0f, zero = 0.0f;
  bool graphed = false;
  const double blasUs = timeUs(
      [&] {
        cublasGemmEx(s.blas, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, dw, type,
                     m, dxh, type, m, &zero, yBlas, CUDA_R_32F, m,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      },
      graphed, 10);
  const double pitUs = timeUs(
      [&] {
        CHECK_CUDA(rt::cuda::pitSRead<W>(dx, m, m, tile, false, ws, stream));
        CHECK_CUDA(rt::cuda::pitMatmul(ws, m, m, dw, m, tile, nullptr,
                                       rt::ops::Activation::none, nullptr, yPit,
                                       stream));
      },
      graphed, 20);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const double err = bench::relErr(download(yPit, size_t(m) * m),
                                   download(yBlas, size_t(m) * m));
  const bool good = err <= 1e-3;
  s.ok &= good;
  std::printf("| %.0f %% | %s | %.1f | %.1f | %.2fx | %.1e%s |\n",
              sparsity * 100, name<W>(), blasUs, pitUs, blasUs / pitUs, err,
              good ? "" : " FAIL");
  for (void *p : {(void *)dw, (void *)dxh, (void *)dx, (void *)yPit,
                  (void *)yBlas, (void *)ws.idx, (void *)ws.count, ws.xg})
    cudaFree(p);
}

} // namespace

int main(int argc, char **argv) {
  Shared s;
  double density = 0.1;
  int pitSize = 4096;
  if (!Options("sparsec-bench-weight-types")
           .add("--density", density)
           .add("--pit-size", pitSize)
           .add("--d", s.d)
           .add("--ffn", s.f)
           .parse(argc, argv))
    return 2;
  if (!(density > 0 && density <= 1) || s.d <= 0 || s.f <= 0 || s.d % 8 != 0 ||
      pitSize <= 0 || pitSize % 8 != 0) {
    std::fprintf(stderr, "error: --density in (0, 1], --d and --pit-size "
                         "positive multiples of 8, --ffn positive\n");
    return 2;
  }
  cudaDeviceProp prop;
  cusparseHandle_t sparse;
  setUp(prop, s.blas, sparse);
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> coin(0.0f, 1.0f);
  s.w.resize(size_t(s.f) * s.d);
  for (float &v : s.w)
    v = g(rng) / std::sqrt(float(s.d));
  s.x.resize(size_t(s.prompt) * s.d);
  for (float &v : s.x)
    v = g(rng);
  for (int j = 0; j < s.f; ++j)
    if (coin(rng) < density)
      s.active.push_back(j);
  std::printf("%s, d %d, F %d, density %.3f (%zu neurons), us\n\n", prop.name,
              s.d, s.f, density, s.active.size());
  std::printf("| kernel | weights | us | weight MB | GB/s | max rel err |\n"
              "|---|---|---:|---:|---:|---:|\n");
  row<float>(s);
  row<__half>(s);
  row<__nv_bfloat16>(s);
  std::printf(
      "\nPIT, %d^3, 32 x 1 micro-tiles (pitMatmul's default: %s), us\n\n"
      "| micro-tiles empty | weights | cuBLAS dense | PIT | vs cuBLAS "
      "| rel err |\n|---:|---|---:|---:|---:|---:|\n",
      pitSize, rt::cuda::pitWarpgroupMma() ? "warpgroup MMAs" : "mma.sync");
  for (double sparsity : {0.9, 0.99}) {
    pitRow<__half>(s, pitSize, sparsity);
    pitRow<__nv_bfloat16>(s, pitSize, sparsity);
  }
  return s.ok ? 0 : 1;
}
