//===- bench_decode_kernels.cu - sparse decode kernels vs cuBLAS/cuSPARSE --===//
//
// Part of the sparsec project.
//
// y = relu(h) . W with W [F = 16384, d = 4096] fp16 (an OPT-6.7B FFN down
// projection, rows neuron-major), batch 1, at several activation sparsities
// (power-law neuron frequencies). Peers measured in the same run:
//   cuBLAS dense        cublasGemmEx, fp16 W and h, fp32 accumulation
//   cuSPARSE CSR        h as a 1 x F CSR matrix (its non-zeros) times W
//   cuBLAS pre-gathered the active rows copied out beforehand (a lower
//                       bound for any gather: it reads only those rows)
// and sparsec's kernels (runtime/src/cuda/SparseDecode.cu):
//   down     sparseDown given the index set (as the list the up kernel
//            writes for it)
//   up       sparseUp over the same set as a predicted set (x . Wt[j]),
//            read as the list the predictor writes
//   index    indexFromFlags over F flags (one kernel, segmented set)
//   exact    indexFromActivations (which also zeroes y) + sparseDown (the
//            exact-mode step)
// Each time is the median over 5 replays of a CUDA graph of 100 launches,
// divided by 100 (the graph removes the CPU launch cost, as a decode step
// captured in a graph would). "bound" is the active rows' bytes at the
// device-to-device copy bandwidth measured in the same run.
// Results are checked against cuBLAS, up against a double-precision product
// (relative error printed; exit 1 when a sparse result is off). Also printed:
// an empty kernel's time in the same graphs (what a node costs however little
// it does), and down and up over "fresh" sets, each call of the graph taking
// the next of 64 sets drawn from the same frequencies, so that rows not hot
// enough to stay in the L2 come from DRAM (the other columns reuse one set,
// whose rows the L2 keeps from call to call). "early": down and up launched
// as a decode step launches them, each a programmatic dependent launch
// whose blocks start while the call before finishes and wait for it
// before they read the set, h or x (cuBLAS and cuSPARSE launch normally);
// "up, warp a row": the up kernel that takes a whole row a warp, which the
// split kernel (a row across a block's warps) replaces at 1-2 tokens. The
// last table puts a layer norm in front of the predicted FFN: the norm
// kernel and predictUp against predictUp with the norm in its hidden-vector
// kernel, each followed by the down projection, every kernel early.
//
//   sparsec-bench-decode-kernels [--d 4096] [--ffn 16384] [--tokens 1]
//                                [--sparsity S]   (S alone, no FFN step)
//
//===----------------------------------------------------------------------===//

#include "GpuBench.h"
#include "sparsec/rt/cuda/DenseDecode.h"
#include "sparsec/rt/cuda/SparseDecode.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cusparse.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace sparsec::rt::cuda;
using namespace sparsec::bench;

namespace {
/// The predictor threshold that leaves `sparsity` of the neurons out: the
/// quantile of the neurons' scores, each its largest logit (x . p1) . p2
/// over the tokens (double precision on the host).
float quantileThreshold(const std::vector<float> &x, int tokens, int d,
                        const std::vector<__half> &p1, const std::vector<__half> &p2,
                        int rank, int f, double sparsity) {
  std::vector<double> hid(size_t(tokens) * rank, 0.0), score(f, -1e30);
  for (int t = 0; t < tokens; ++t)
    for (int i = 0; i < d; ++i)
      for (int e = 0; e < rank; ++e)
        hid[size_t(t) * rank + e] += double(x[size_t(t) * d + i]) *
                                     __half2float(p1[size_t(i) * rank + e]);
  for (int t = 0; t < tokens; ++t) {
    std::vector<double> l(f, 0.0);
    for (int e = 0; e < rank; ++e) {
      const double hv = hid[size_t(t) * rank + e];
      for (int j = 0; j < f; ++j)
        l[j] += hv * __half2float(p2[size_t(e) * f + j]);
    }
    for (int j = 0; j < f; ++j)
      score[j] = std::max(score[j], l[j]);
  }
  std::sort(score.begin(), score.end());
  return float(score[size_t(sparsity * (f - 1))]);
}

/// The runtime's layer norm kernel, launched early (DenseDecode.h).
void normRowsForBench(const float *x, int rows, int width, const float *scale,
                      const float *bias, float eps, float *y, cudaStream_t s) {
  CHECK_CUDA(normRows(x, rows, width, scale, bias, eps, false, y, s, /*early=*/true));
}
} // namespace

constexpr int kFreshSets = 64;

namespace {
__global__ void emptyKernel() {}

/// A segmented index set on the device: `idx` (increasing) if given, else
/// empty buffers for a kernel to fill.
IndexView deviceIndex(int f, const std::vector<int32_t> *list = nullptr) {
  const int segments = indexSegments(f);
  std::vector<int32_t> idx(size_t(segments) * kSegment, 0), cnt(size_t(segments), 0);
  if (list)
    for (int32_t j : *list)
      idx[size_t(j / kSegment) * kSegment + cnt[j / kSegment]++] = j;
  IndexView ix;
  ix.neurons = f;
  ix.idx = upload(idx);
  ix.cnt = upload(cnt);
  if (list) {
    // The list form too (what the up kernel writes for the down kernel).
    // Room for f entries, as the runtime allocates it.
    std::vector<int32_t> padded(*list);
    padded.resize(size_t(std::max(f, 1)), 0);
    ix.list = upload(padded);
    ix.count = upload(std::vector<int32_t>{int32_t(list->size())});
  }
  return ix;
}
} // namespace

int main(int argc, char **argv) {
  int d = 4096, f = 16384, tokens = 1;
  double only = -1; // --sparsity S: that sparsity alone, no FFN step table
  if (!Options("sparsec-bench-decode-kernels")
           .add("--sparsity", only)
           .add("--d", d)
           .add("--ffn", f)
           .add("--tokens", tokens)
           .parse(argc, argv))
    return 1;
  if (tokens < 1 || tokens > kMaxTokens || d < 1 || f < 1 ||
      (only != -1 && !(only >= 0 && only < 1))) {
    std::fprintf(stderr, "error: bad arguments: --tokens 1 to %d, positive --d and "
                         "--ffn, --sparsity a fraction in [0, 1)\n", kMaxTokens);
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
  std::vector<__half> w(size_t(f) * d), wt(size_t(f) * d);
  for (auto &v : w) v = __float2half(val(rng) * 0.05f);
  for (auto &v : wt) v = __float2half(val(rng) * 0.05f);
  std::vector<float> x(size_t(tokens) * d);
  for (float &v : x) v = val(rng);
  __half *dW = upload(w), *dWt = upload(wt);
  float *dX = upload(x);

  std::printf("GPU: %s, %d SMs, %.0f MB L2; device-to-device copy %.0f GB/s\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6, bandwidth);
  std::printf("y = relu(h) . W, W %d x %d fp16, %d token(s); microseconds per call "
              "(graph of 100, median of 5)\n", f, d, tokens);
  const double floorUs = timeUs([&] { emptyKernel<<<1, 32, 0, stream>>>(); }, g);
  std::printf("an empty kernel: %.2f us (the cost of a graph node)\n\n", floorUs);
  std::printf("\"fresh\": each of the graph's 100 calls takes the next of %d sets drawn "
              "from the same neuron frequencies (hot rows stay in the L2, cold ones "
              "come from DRAM); the other sparsec columns reuse one set, whose rows "
              "stay in the L2 from call to call.\n\n", kFreshSets);
  std::printf("| sparsity | active | cuBLAS dense | cuSPARSE CSR | cuBLAS pre-gathered | "
              "sparsec down | down, fresh | down, early | sparsec up | up, fresh | "
              "up, early | up, warp a row, early | sparsec index | sparsec exact step | "
              "bound | down err |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  bool ok = true;
  std::vector<double> sparsities = {0.5, 0.9, 0.97, 0.99};
  if (only >= 0)
    sparsities = {only};
  for (double sparsity : sparsities) {
    // Power-law neuron frequencies scaled to the sparsity; every token of
    // the batch uses the union as its candidate set.
    std::vector<double> p(f);
    double sum = 0;
    for (int j = 0; j < f; ++j)
      sum += p[j] = std::pow(double(j + 1), -0.8);
    double scale = (1.0 - sparsity) * f / sum;
    // Shuffle which neuron gets which frequency (hot neurons are spread).
    std::vector<int> perm(f);
    for (int j = 0; j < f; ++j) perm[j] = j;
    std::shuffle(perm.begin(), perm.end(), rng);
    // Fresh sets: independent draws from the same frequencies.
    std::vector<IndexView> fresh;
    for (int k = 0; k < kFreshSets; ++k) {
      std::vector<int32_t> set;
      for (int j = 0; j < f; ++j)
        if (coin(rng) < std::min(1.0, p[perm[j]] * scale))
          set.push_back(j);
      fresh.push_back(deviceIndex(f, &set));
    }
    std::vector<float> h(size_t(tokens) * f, 0.0f);
    std::vector<uint8_t> flags(f, 0);
    std::vector<int32_t> idx;
    for (int j = 0; j < f; ++j) {
      bool on = coin(rng) < std::min(1.0, p[perm[j]] * scale);
      if (!on)
        continue;
      flags[j] = 1;
      idx.push_back(j);
      for (int t = 0; t < tokens; ++t)
        h[size_t(t) * f + j] = std::fabs(val(rng)) + 0.01f;
    }
    const int nnz = int(idx.size());
    std::vector<__half> hHalf(h.size());
    for (size_t i = 0; i < h.size(); ++i) hHalf[i] = __float2half(h[i]);
    // Round h through half so that every path sees the same values.
    for (size_t i = 0; i < h.size(); ++i) h[i] = __half2float(hHalf[i]);
    float *dH = upload(h);
    __half *dHHalf = upload(hHalf);
    IndexView ix = deviceIndex(f, &idx), ix2 = deviceIndex(f);
    uint8_t *dFlags = upload(flags);
    float *dY = alloc<float>(size_t(tokens) * d), *dYRef = alloc<float>(size_t(tokens) * d);
    float *dHUp = alloc<float>(size_t(tokens) * f);

    // cuBLAS dense: Y^T [d, tokens] = W^T [d, F] . H^T [F, tokens] (column-major view).
    float one = 1.0f, zero = 0.0f;
    auto dense = [&] {
      cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, d, tokens, f, &one, dW, CUDA_R_16F, d,
                   dHHalf, CUDA_R_16F, f, &zero, dYRef, CUDA_R_32F, d,
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    double denseUs = timeUs(dense, g);
    dense();
    std::vector<float> yRef = download(dYRef, size_t(tokens) * d);

    // cuSPARSE: H as CSR [tokens, F] (the union's columns per row) times W [F, d].
    std::vector<int32_t> rowPtr(tokens + 1), cols;
    std::vector<__half> vals;
    for (int t = 0; t < tokens; ++t) {
      for (int j : idx) {
        cols.push_back(j);
        vals.push_back(hHalf[size_t(t) * f + j]);
      }
      rowPtr[t + 1] = int32_t(cols.size());
    }
    int32_t *dRowPtr = upload(rowPtr), *dCols = upload(cols);
    __half *dVals = upload(vals), *dYHalf = alloc<__half>(size_t(tokens) * d);
    double sparseUs = -1;
    {
      cusparseSpMatDescr_t a;
      cusparseDnMatDescr_t bm, cm;
      bool good =
          cusparseCreateCsr(&a, tokens, f, int64_t(cols.size()), dRowPtr, dCols, dVals,
                            CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                            CUSPARSE_INDEX_BASE_ZERO, CUDA_R_16F) == CUSPARSE_STATUS_SUCCESS &&
          cusparseCreateDnMat(&bm, f, d, d, dW, CUDA_R_16F, CUSPARSE_ORDER_ROW) ==
              CUSPARSE_STATUS_SUCCESS &&
          cusparseCreateDnMat(&cm, tokens, d, d, dYHalf, CUDA_R_16F, CUSPARSE_ORDER_ROW) ==
              CUSPARSE_STATUS_SUCCESS;
      size_t bytes = 0;
      void *buffer = nullptr;
      good = good && cusparseSpMM_bufferSize(sparse, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                             CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, bm,
                                             &zero, cm, CUDA_R_32F,
                                             CUSPARSE_SPMM_ALG_DEFAULT, &bytes) ==
                         CUSPARSE_STATUS_SUCCESS;
      if (good) {
        buffer = alloc<char>(bytes);
        auto spmm = [&] {
          cusparseSpMM(sparse, CUSPARSE_OPERATION_NON_TRANSPOSE,
                       CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, bm, &zero, cm,
                       CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, buffer);
        };
        if (cusparseSpMM(sparse, CUSPARSE_OPERATION_NON_TRANSPOSE,
                         CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, bm, &zero, cm,
                         CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, buffer) ==
            CUSPARSE_STATUS_SUCCESS)
          sparseUs = timeUs(spmm, g);
        cudaFree(buffer);
      }
    }

    // cuBLAS on pre-gathered rows.
    std::vector<__half> wS(size_t(nnz) * d), hS(size_t(tokens) * nnz);
    for (int i = 0; i < nnz; ++i) {
      std::memcpy(&wS[size_t(i) * d], &w[size_t(idx[i]) * d], d * sizeof(__half));
      for (int t = 0; t < tokens; ++t)
        hS[size_t(t) * nnz + i] = hHalf[size_t(t) * f + idx[i]];
    }
    __half *dWS = upload(wS), *dHS = upload(hS);
    double gatheredUs = timeUs([&] {
      cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, d, tokens, nnz, &one, dWS, CUDA_R_16F, d,
                   dHS, CUDA_R_16F, nnz, &zero, dY, CUDA_R_32F, d, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
    }, g);

    // sparsec.
    auto down = [&] {
      sparseDown<__half>(dH, tokens, f, dW, d, ix, dY, stream);
    };
    double downUs = timeUs(down, g);
    CHECK_CUDA(cudaMemsetAsync(dY, 0, sizeof(float) * tokens * d, stream));
    down();
    std::vector<float> yDown = download(dY, size_t(tokens) * d);
    double err = relErr(yDown, yRef);
    auto downEarly = [&] {
      sparseDown<__half>(dH, tokens, f, dW, d, ix, dY, stream, 0, nullptr,
                         /*early=*/true);
    };
    double downEarlyUs = timeUs(downEarly, g);
    // The early launch's result too (after a normal kernel: the memset).
    CHECK_CUDA(cudaMemsetAsync(dY, 0, sizeof(float) * tokens * d, stream));
    downEarly();
    err = std::max(err, relErr(download(dY, size_t(tokens) * d), yRef));
    double upUs = timeUs([&] {
      sparseUp<__half>(dX, tokens, dWt, d, nullptr, ix, true, dHUp, f, RowsInit{}, stream);
    }, g);
    double upEarlyUs = timeUs([&] {
      sparseUp<__half>(dX, tokens, dWt, d, nullptr, ix, true, dHUp, f, RowsInit{}, stream,
                       nullptr, nullptr, /*early=*/true);
    }, g);
    // The kernel that takes a row a warp, where the default is the split one.
    setUpKernel(UpKernel::kWarpPerRow);
    double upRowEarlyUs = timeUs([&] {
      sparseUp<__half>(dX, tokens, dWt, d, nullptr, ix, true, dHUp, f, RowsInit{}, stream,
                       nullptr, nullptr, /*early=*/true);
    }, g);
    setUpKernel(UpKernel::kAuto);
    // The up result against a double-precision product on the set (early,
    // normal and warp-a-row launches each write it in turn; each checked).
    static const char *const kUpPass[] = {"early", "normal", "warp a row"};
    CHECK_CUDA(cudaMemsetAsync(dHUp, 0, sizeof(float) * tokens * f, stream));
    sparseUp<__half>(dX, tokens, dWt, d, nullptr, ix, true, dHUp, f, RowsInit{}, stream,
                     nullptr, nullptr, /*early=*/true);
    for (int pass = 0; pass < 3; ++pass) {
      if (pass >= 1) {
        setUpKernel(pass == 2 ? UpKernel::kWarpPerRow : UpKernel::kAuto);
        CHECK_CUDA(cudaMemsetAsync(dHUp, 0, sizeof(float) * tokens * f, stream));
        sparseUp<__half>(dX, tokens, dWt, d, nullptr, ix, true, dHUp, f, RowsInit{},
                         stream);
        setUpKernel(UpKernel::kAuto);
      }
      std::vector<float> got = download(dHUp, size_t(tokens) * f);
      double errUp = 0;
      for (int t = 0; t < tokens; ++t)
        for (int j : idx) {
          double ref = 0;
          for (int k = 0; k < d; ++k)
            ref += double(x[size_t(t) * d + k]) * __half2float(wt[size_t(j) * d + k]);
          ref = std::max(ref, 0.0);
          errUp = std::max(errUp, std::fabs(ref - got[size_t(t) * f + j]) / (1.0 + std::fabs(ref)));
        }
      if (errUp > 1e-4) {
        std::printf("up (%s launch): relative error %.1e against the reference\n",
                    kUpPass[pass], errUp);
        ok = false;
      }
    }
    // Over fresh sets (h nonzero everywhere: each set picks its rows).
    std::vector<float> hAll(size_t(tokens) * f);
    for (float &v : hAll) v = __half2float(__float2half(std::fabs(val(rng)) + 0.01f));
    float *dHAll = upload(hAll);
    int next = 0;
    auto downFresh = [&] {
      sparseDown<__half>(dHAll, tokens, f, dW, d, fresh[next++ % kFreshSets], dY, stream);
    };
    auto upFresh = [&] {
      sparseUp<__half>(dX, tokens, dWt, d, nullptr, fresh[next++ % kFreshSets], true, dHUp,
                       f, RowsInit{}, stream);
    };
    double downFreshUs = timeUs(downFresh, g);
    double upFreshUs = timeUs(upFresh, g);
    double indexUs = timeUs([&] { indexFromFlags(dFlags, ix2, stream); }, g);
    auto exact = [&] {
      indexFromActivations(dH, tokens, ix2, RowsInit{dY, nullptr, nullptr, tokens, d},
                           stream);
      sparseDown<__half>(dH, tokens, f, dW, d, ix2, dY, stream);
    };
    double exactUs = timeUs(exact, g);
    exact();
    double errExact = relErr(download(dY, size_t(tokens) * d), yRef);
    CHECK_CUDA(cudaGetLastError());
    double bound = double(nnz) * d * 2 / (bandwidth * 1e3); // us
    ok &= err < 2e-3 && errExact < 2e-3;
    auto cell = [](double us) {
      static char buf[32];
      if (us < 0) return std::string("n/a");
      std::snprintf(buf, sizeof(buf), "%.1f", us);
      return std::string(buf);
    };
    std::printf("| %.0f %% | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | "
                "%.1f | %.1e |\n",
                sparsity * 100, nnz, cell(denseUs).c_str(), cell(sparseUs).c_str(),
                cell(gatheredUs).c_str(), cell(downUs).c_str(), cell(downFreshUs).c_str(),
                cell(downEarlyUs).c_str(), cell(upUs).c_str(), cell(upFreshUs).c_str(),
                cell(upEarlyUs).c_str(), cell(upRowEarlyUs).c_str(), cell(indexUs).c_str(),
                cell(exactUs).c_str(), bound, std::max(err, errExact));

    cudaFree(dHAll);
    for (IndexView &v : fresh)
      for (void *ptr : {(void *)v.idx, (void *)v.cnt, (void *)v.list, (void *)v.count})
        cudaFree(ptr);

    // The down kernel's row split, swept (the default is chosen from the
    // multiprocessor count).
    std::printf("|  | splits:");
    for (int s : {4, 8, 16, 33, 64, 128}) {
      double us = timeUs([&] {
        sparseDown<__half>(dH, tokens, f, dW, d, ix, dY, stream, s);
      }, g);
      std::printf(" %d=%.1f", s, us);
    }
    std::printf(" | | | | | | | | |\n");
    // The split up kernel's blocks an SM, swept (early launches; the
    // default is as many as fit).
    std::printf("|  | up split, blocks an SM:");
    for (int b : {1, 2, 3, 4, 6, 8}) {
      setUpKernel(UpKernel::kAuto, b);
      double us = timeUs([&] {
        sparseUp<__half>(dX, tokens, dWt, d, nullptr, ix, true, dHUp, f, RowsInit{}, stream,
                         nullptr, nullptr, /*early=*/true);
      }, g);
      std::printf(" %d=%.1f", b, us);
    }
    setUpKernel(UpKernel::kAuto);
    std::printf(" | | | | | | | | |\n");
    for (void *ptr : {(void *)dH, (void *)dHHalf, (void *)ix.idx, (void *)ix.cnt,
                      (void *)ix.list, (void *)ix.count, (void *)ix2.idx,
                      (void *)ix2.cnt, (void *)dFlags, (void *)dY,
                      (void *)dYRef, (void *)dHUp, (void *)dRowPtr, (void *)dCols,
                      (void *)dVals, (void *)dYHalf, (void *)dWS, (void *)dHS})
      cudaFree(ptr);
  }
  if (only >= 0) {
    std::printf("\n%s\n", ok ? "results match cuBLAS" : "MISMATCH against cuBLAS");
    return ok ? 0 : 1;
  }
  // The whole FFN decode step (up + ReLU + down): cuBLAS dense against the
  // predicted mode (predictor with its fused index build, then the two
  // sparse kernels over the active set of the sparsity).
  std::printf("\nFFN decode step, up + ReLU + down, d %d, FFN %d, fp16 weights, %d "
              "token(s), microseconds\n\n", d, f, tokens);
  std::printf("| sparsity | predictor rank | cuBLAS dense FFN | sparsec predictor | "
              "sparsec predicted step | speedup |\n|---:|---:|---:|---:|---:|---:|\n");
  {
    std::vector<__half> xh(x.size());
    for (size_t i = 0; i < x.size(); ++i) xh[i] = __float2half(x[i]);
    __half *dXh = upload(xh), *dH16 = alloc<__half>(size_t(tokens) * f);
    float *dYd = alloc<float>(size_t(tokens) * d), *dHf = alloc<float>(size_t(tokens) * f);
    float one = 1.0f, zero = 0.0f;
    __half oneH = __float2half(1.0f), zeroH = __float2half(0.0f);
    (void)oneH;
    (void)zeroH;
    auto denseFfn = [&] {
      float a = 1.0f, b = 0.0f;
      cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, f, tokens, d, &a, dWt, CUDA_R_16F, d,
                   dXh, CUDA_R_16F, d, &b, dH16, CUDA_R_16F, f, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
      cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, d, tokens, f, &one, dW, CUDA_R_16F, d,
                   dH16, CUDA_R_16F, f, &zero, dYd, CUDA_R_32F, d, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
    };
    double denseFfnUs = timeUs(denseFfn, g);
    for (double sparsity : {0.9, 0.97}) {
      std::vector<int32_t> idx;
      for (int j = 0; j < f; ++j)
        if (coin(rng) >= sparsity)
          idx.push_back(j);
      IndexView ix = deviceIndex(f, &idx);
      int32_t *dL = alloc<int32_t>(f), *dLC = alloc<int32_t>(1);
      for (int rank : {64, 256, 1024}) {
        std::vector<__half> p1(size_t(d) * rank), p2(size_t(rank) * f);
        for (auto &v : p1) v = __float2half(val(rng) * 0.02f);
        for (auto &v : p2) v = __float2half(val(rng) * 0.02f);
        __half *dP1 = upload(p1), *dP2 = upload(p2);
        float *dScratch = alloc<float>(predictScratchFloats(tokens, d, rank));
        CHECK_CUDA(cudaMemset(dScratch, 0, sizeof(float) * predictScratchFloats(tokens, d, rank)));
        IndexView ixP = deviceIndex(f);
        ixP.list = dL; // the predictor's own list (its random weights)
        ixP.count = dLC;
        auto predictor = [&] {
          predictIndex<__half>(dX, tokens, dP1, d, rank, dP2, f, nullptr, 0.0f, dScratch,
                               ixP, nullptr, 0, stream);
        };
        double predUs = timeUs(predictor, g);
        // The sparse kernels run over the sparsity's active set (a trained
        // predictor would select about that set; random predictor weights
        // select half the neurons, so its own output is not used here).
        double stepUs = timeUs([&] {
          // As cuda::sparseFfn after cuda::predict: the predictor writes the
          // set as a list, the up kernel reads it and writes the base, the
          // down kernel reads the list.
          predictor();
          sparseUp<__half>(dX, tokens, dWt, d, nullptr, ix, true, dHf, f,
                           RowsInit{dYd, nullptr, nullptr, tokens, d}, stream);
          sparseDown<__half>(dHf, tokens, f, dW, d, ix, dYd, stream);
        }, g);
        std::printf("| %.0f %% | %d | %.1f | %.1f | %.1f | %.2fx |\n", sparsity * 100, rank,
                    denseFfnUs, predUs, stepUs, denseFfnUs / stepUs);
        for (void *ptr : {(void *)dP1, (void *)dP2, (void *)dScratch, (void *)ixP.idx,
                          (void *)ixP.cnt})
          cudaFree(ptr);
      }
      for (void *ptr : {(void *)ix.idx, (void *)ix.cnt, (void *)ix.list, (void *)ix.count,
                        (void *)dL, (void *)dLC})
        cudaFree(ptr);
    }
    CHECK_CUDA(cudaGetLastError());

    // The predictor's own selection at the sparsity (its threshold set to
    // the logits' quantile, computed here): three kernels for predictor +
    // up (predictIndex, sparseUp over its list with the token masks) against
    // predictUp's two, each followed by sparseDown over the list.
    std::printf("\nPredicted FFN step over the predictor's own selection (threshold at "
                "the logits' quantile), microseconds: predictor + up + down (4 kernels) "
                "against predictUp + down (3 kernels)\n\n");
    std::printf("| sparsity | predictor rank | selected | cuBLAS dense FFN | 4 kernels | "
                "3 kernels (fused) | fused vs 4 | 4, warp a row | 3, warp a row |\n"
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (double sparsity : {0.9, 0.97}) {
      for (int rank : {64, 256}) {
        std::vector<__half> p1(size_t(d) * rank), p2(size_t(rank) * f);
        for (auto &v : p1) v = __float2half(val(rng) * 0.02f);
        for (auto &v : p2) v = __float2half(val(rng) * 0.02f);
        const float threshold = quantileThreshold(x, tokens, d, p1, p2, rank, f, sparsity);
        __half *dP1 = upload(p1), *dP2 = upload(p2);
        const size_t sf = predictScratchFloats(tokens, d, rank);
        float *dScratch = alloc<float>(sf);
        CHECK_CUDA(cudaMemset(dScratch, 0, sizeof(float) * sf));
        IndexView ixP = deviceIndex(f);
        ixP.list = alloc<int32_t>(f);
        ixP.count = alloc<int32_t>(1);
        uint8_t *dMask = alloc<uint8_t>(size_t(tokens) * f);
        const uint8_t *upMask = tokens > 1 ? dMask : nullptr;
        const RowsInit init{dYd, nullptr, nullptr, tokens, d};
        auto four = [&] {
          predictIndex<__half>(dX, tokens, dP1, d, rank, dP2, f, nullptr, threshold,
                               dScratch, ixP, dMask, tokens, stream);
          sparseUp<__half>(dX, tokens, dWt, d, nullptr, ixP, true, dHf, f, init, stream,
                           nullptr, nullptr, false, upMask);
          sparseDown<__half>(dHf, tokens, f, dW, d, ixP, dYd, stream);
        };
        auto three = [&] {
          predictUp<__half>(dX, tokens, dP1, d, rank, dP2, f, nullptr, threshold, dScratch,
                            ixP, dMask, tokens, dWt, nullptr, true, dHf, f, init, stream);
          sparseDown<__half>(dHf, tokens, f, dW, d, ixP, dYd, stream);
        };
        double fourUs = timeUs(four, g);
        const int selected = download(ixP.count, 1)[0];
        std::vector<float> yFour = download(dYd, size_t(tokens) * d);
        double threeUs = timeUs(three, g);
        // The kernels that take a row a warp (as before the split ones).
        setUpKernel(UpKernel::kWarpPerRow);
        double fourRowUs = timeUs(four, g);
        double threeRowUs = timeUs(three, g);
        setUpKernel(UpKernel::kAuto);
        const double eRow = relErr(download(dYd, size_t(tokens) * d), yFour);
        if (eRow > 1e-5) {
          std::printf("fused step (warp a row): relative error %.1e against the 4 kernels\n",
                      eRow);
          ok = false;
        }
        // The split kernels again (the default), for the check below.
        three();
        // Same set and sums; only the order of the down kernel's atomics
        // differs.
        const double e = relErr(download(dYd, size_t(tokens) * d), yFour);
        if (e > 1e-5) {
          std::printf("fused step: relative error %.1e against the 4 kernels\n", e);
          ok = false;
        }
        std::printf("| %.0f %% | %d | %d | %.1f | %.1f | %.1f | %.2fx | %.1f | %.1f |\n",
                    sparsity * 100, rank, selected, denseFfnUs, fourUs, threeUs,
                    fourUs / threeUs, fourRowUs, threeRowUs);
        for (void *ptr : {(void *)dP1, (void *)dP2, (void *)dScratch, (void *)ixP.idx,
                          (void *)ixP.cnt, (void *)ixP.list, (void *)ixP.count,
                          (void *)dMask})
          cudaFree(ptr);
      }
    }
    CHECK_CUDA(cudaGetLastError());

    // The layer norm in front of the predicted FFN (OPT's): the norm kernel,
    // predictUp and the down projection against predictUp with the norm in
    // its hidden-vector kernel and the down projection, every kernel
    // launched early as a decode step launches them. The threshold is the
    // quantile of the logits of the normalised x.
    if (predictUpNormFits(tokens, d, 32)) {
      std::printf("\nPredicted FFN step with its layer norm, early launches, microseconds: "
                  "norm + predictUp + down (4 kernels) against predictUp with the norm "
                  "+ down (3 kernels)\n\n");
      std::printf("| sparsity | predictor rank | selected | 4 kernels | 3 kernels | saved |\n"
                  "|---:|---:|---:|---:|---:|---:|\n");
      std::vector<float> scale(d), nbias(d), xn(x.size());
      for (float &v : scale) v = 1.0f + 0.2f * val(rng);
      for (float &v : nbias) v = 0.1f * val(rng);
      for (int t = 0; t < tokens; ++t) {
        double mean = 0, var = 0;
        for (int i = 0; i < d; ++i)
          mean += x[size_t(t) * d + i];
        mean /= d;
        for (int i = 0; i < d; ++i)
          var += (x[size_t(t) * d + i] - mean) * (x[size_t(t) * d + i] - mean);
        const double inv = 1.0 / std::sqrt(var / d + 1e-5);
        for (int i = 0; i < d; ++i)
          xn[size_t(t) * d + i] = float((x[size_t(t) * d + i] - mean) * inv * scale[i] + nbias[i]);
      }
      float *dScale = upload(scale), *dNB = upload(nbias), *dXn = alloc<float>(x.size());
      for (double sparsity : {0.9, 0.97}) {
        for (int rank : {32, 64}) {
          std::vector<__half> p1(size_t(d) * rank), p2(size_t(rank) * f);
          for (auto &v : p1) v = __float2half(val(rng) * 0.02f);
          for (auto &v : p2) v = __float2half(val(rng) * 0.02f);
          const float threshold =
              quantileThreshold(xn, tokens, d, p1, p2, rank, f, sparsity);
          __half *dP1 = upload(p1), *dP2 = upload(p2);
          const size_t sf = predictScratchFloats(tokens, d, rank);
          float *dScratch = alloc<float>(sf);
          CHECK_CUDA(cudaMemset(dScratch, 0, sizeof(float) * sf));
          IndexView ixP = deviceIndex(f);
          ixP.list = alloc<int32_t>(f);
          ixP.count = alloc<int32_t>(1);
          const RowsInit init{dYd, nullptr, nullptr, tokens, d};
          FfnNorm norm;
          norm.x = dX;
          norm.scale = dScale;
          norm.bias = dNB;
          norm.epsilon = 1e-5f;
          auto four = [&] {
            normRowsForBench(dX, tokens, d, dScale, dNB, 1e-5f, dXn, stream);
            predictUp<__half>(dXn, tokens, dP1, d, rank, dP2, f, nullptr, threshold, dScratch,
                              ixP, nullptr, 0, dWt, nullptr, true, dHf, f, init, stream,
                              /*early=*/true);
            sparseDown<__half>(dHf, tokens, f, dW, d, ixP, dYd, stream, 0, nullptr,
                               /*early=*/true);
          };
          auto three = [&] {
            predictUp<__half>(dXn, tokens, dP1, d, rank, dP2, f, nullptr, threshold, dScratch,
                              ixP, nullptr, 0, dWt, nullptr, true, dHf, f, init, stream,
                              /*early=*/true, &norm);
            sparseDown<__half>(dHf, tokens, f, dW, d, ixP, dYd, stream, 0, nullptr,
                               /*early=*/true);
          };
          const double fourUs = timeUs(four, g);
          const int selected = download(ixP.count, 1)[0];
          std::vector<float> yFour = download(dYd, size_t(tokens) * d);
          const double threeUs = timeUs(three, g);
          const double e = relErr(download(dYd, size_t(tokens) * d), yFour);
          if (e > 1e-5) {
            std::printf("predictUp with the norm: relative error %.1e against the 4 kernels\n",
                        e);
            ok = false;
          }
          std::printf("| %.0f %% | %d | %d | %.1f | %.1f | %.1f |\n", sparsity * 100, rank,
                      selected, fourUs, threeUs, fourUs - threeUs);
          for (void *ptr : {(void *)dP1, (void *)dP2, (void *)dScratch, (void *)ixP.idx,
                            (void *)ixP.cnt, (void *)ixP.list, (void *)ixP.count})
            cudaFree(ptr);
        }
      }
      for (void *ptr : {(void *)dScale, (void *)dNB, (void *)dXn})
        cudaFree(ptr);
    }
    CHECK_CUDA(cudaGetLastError());
  }
  std::printf("\n%s\n", ok ? "results match cuBLAS" : "MISMATCH against cuBLAS");
  return ok ? 0 : 1;
}
