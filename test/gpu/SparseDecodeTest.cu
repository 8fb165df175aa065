//===- SparseDecodeTest.cu - sparse decode kernels vs a CPU reference -----===//
//
// Part of the sparsec project.
//
// Runs on a CUDA device (the lit test test/gpu/sparse-decode.test is marked
// REQUIRES: cuda-device). For fp16 and fp32 weights, aligned and unaligned
// row lengths, 1..8 tokens and several sparsities: buildIndex against the
// host's list of non-zero neurons, sparseUp and sparseDown against a double
// precision reference over the same (rounded) weights, and the exact-mode
// chain nonzeroFlags -> buildIndex -> sparseDown against the dense product.
// Prints one line per case and "N passed, M failed"; exit status 1 on any
// failure.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/SparseDecode.h"

#include "CudaTest.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace sparsec::rt::cuda;
using namespace sparsec::test;

namespace {
int failures = 0, passes = 0;

void report(bool ok, const char *what, int f, int d, int tokens,
            double sparsity, const char *wtype, double err) {
  std::printf("%s %-22s F=%-5d d=%-5d tokens=%d sparsity=%.2f %s max err %.2e\n",
              ok ? "PASS" : "FAIL", what, f, d, tokens, sparsity, wtype, err);
  (ok ? passes : failures)++;
}


template <typename W>
void runCase(int f, int d, int tokens, double sparsity, uint32_t seed) {
  const char *wtype = sizeof(W) == 2 ? "fp16" : "fp32";
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> val(-1, 1), coin(0, 1);
  std::vector<W> w(size_t(f) * d), wt(size_t(f) * d);
  for (auto &v : w) v = fromFloat<W>(val(rng));
  for (auto &v : wt) v = fromFloat<W>(val(rng));
  std::vector<float> x(size_t(tokens) * d), bias(f), h(size_t(tokens) * f, 0.0f);
  for (float &v : x) v = val(rng);
  for (float &v : bias) v = val(rng);
  // Neuron j is active (for some token) with probability 1 - sparsity.
  std::vector<uint8_t> flags(f);
  std::vector<int32_t> expectIdx;
  for (int j = 0; j < f; ++j) {
    flags[j] = coin(rng) >= sparsity;
    if (flags[j]) {
      expectIdx.push_back(j);
      for (int t = 0; t < tokens; ++t)
        h[size_t(t) * f + j] = t == 0 || coin(rng) < 0.7 ? std::fabs(val(rng)) + 0.01f : 0.0f;
    }
  }
  // buildIndex.
  uint8_t *dFlags = upload(flags);
  int32_t *dIdx = nullptr, *dCount = nullptr;
  CHECK_CUDA(cudaMalloc(&dIdx, sizeof(int32_t) * f));
  CHECK_CUDA(cudaMalloc(&dCount, sizeof(int32_t)));
  size_t tempBytes = buildIndexTempBytes(f);
  void *dTemp = nullptr;
  CHECK_CUDA(cudaMalloc(&dTemp, std::max<size_t>(1, tempBytes)));
  CHECK_CUDA(buildIndex(dFlags, f, dIdx, dCount, dTemp, tempBytes, 0));
  int count = download(dCount, 1)[0];
  std::vector<int32_t> idx = download(dIdx, size_t(count));
  report(idx == expectIdx, "buildIndex", f, d, tokens, sparsity, wtype,
         double(std::abs(count - int(expectIdx.size()))));

  // sparseUp over the index set.
  W *dWt = upload(wt), *dW = upload(w);
  float *dX = upload(x), *dBias = upload(bias);
  std::vector<float> sentinel(size_t(tokens) * f, -7.0f);
  float *dH = upload(sentinel);
  CHECK_CUDA(sparseUp<W>(dX, tokens, dWt, d, dBias, dIdx, dCount, f, true, dH, f, 0));
  std::vector<float> hUp = download(dH, sentinel.size());
  double errUp = 0;
  bool untouched = true;
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < f; ++j) {
      float got = hUp[size_t(t) * f + j];
      if (!flags[j]) {
        untouched &= got == -7.0f;
        continue;
      }
      double ref = bias[j];
      for (int k = 0; k < d; ++k)
        ref += double(x[size_t(t) * d + k]) * toFloat(wt[size_t(j) * d + k]);
      ref = std::max(ref, 0.0);
      errUp = worse(errUp, std::fabs(ref - got) / (1.0 + std::fabs(ref)));
    }
  report(errUp < 1e-4 && untouched, "sparseUp (+relu)", f, d, tokens, sparsity,
         wtype, errUp);

  // sparseDown over the index set, y starting from the bias.
  std::vector<float> y0(size_t(tokens) * d);
  for (int t = 0; t < tokens; ++t)
    for (int k = 0; k < d; ++k)
      y0[size_t(t) * d + k] = bias[k % f];
  float *dHin = upload(h), *dY = upload(y0);
  CHECK_CUDA(sparseDown<W>(dHin, tokens, f, dW, d, dIdx, dCount, f, dY, 0));
  std::vector<float> y = download(dY, y0.size());
  auto denseRef = [&](int t, int k) {
    double ref = y0[size_t(t) * d + k];
    for (int j = 0; j < f; ++j)
      ref += double(h[size_t(t) * f + j]) * toFloat(w[size_t(j) * d + k]);
    return ref;
  };
  double errDown = 0;
  for (int t = 0; t < tokens; ++t)
    for (int k = 0; k < d; ++k)
      errDown = worse(errDown, std::fabs(denseRef(t, k) - y[size_t(t) * d + k]) /
                                      (1.0 + std::fabs(denseRef(t, k))));
  report(errDown < 1e-4, "sparseDown", f, d, tokens, sparsity, wtype, errDown);

  // Exact mode from the activations alone.
  CHECK_CUDA(cudaMemcpy(dY, y0.data(), y0.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(dFlags, 0xff, f));
  CHECK_CUDA(nonzeroFlags(dHin, tokens, f, dFlags, 0));
  CHECK_CUDA(buildIndex(dFlags, f, dIdx, dCount, dTemp, tempBytes, 0));
  CHECK_CUDA(sparseDown<W>(dHin, tokens, f, dW, d, dIdx, dCount, f, dY, 0));
  y = download(dY, y0.size());
  double errExact = 0;
  for (int t = 0; t < tokens; ++t)
    for (int k = 0; k < d; ++k)
      errExact = worse(errExact, std::fabs(denseRef(t, k) - y[size_t(t) * d + k]) /
                                        (1.0 + std::fabs(denseRef(t, k))));
  report(errExact < 1e-4, "exact chain", f, d, tokens, sparsity, wtype, errExact);

  for (void *p : {(void *)dFlags, (void *)dIdx, (void *)dCount, dTemp, (void *)dWt,
                  (void *)dW, (void *)dX, (void *)dBias, (void *)dH, (void *)dHin,
                  (void *)dY})
    cudaFree(p);
}
/// predictIndex against a double-precision reference: the flags (away from
/// the threshold) and the index set, sorted and appended.
template <typename W>
void runPredict(int f, int d, int r, int tokens, uint32_t seed) {
  const char *wtype = sizeof(W) == 2 ? "fp16" : "fp32";
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> val(-1, 1);
  std::vector<W> w1(size_t(d) * r), w2(size_t(r) * f);
  for (auto &v : w1) v = fromFloat<W>(val(rng));
  for (auto &v : w2) v = fromFloat<W>(val(rng));
  std::vector<float> x(size_t(tokens) * d), bias(f);
  for (float &v : x) v = val(rng);
  for (float &v : bias) v = val(rng) * 4.0f;
  const float threshold = 2.0f;
  std::vector<int> expect(f, 0); // 1 on, 0 off, -1 too close to call
  for (int j = 0; j < f; ++j) {
    bool on = false, close = false;
    for (int t = 0; t < tokens; ++t) {
      double logit = bias[j];
      for (int e = 0; e < r; ++e) {
        double h = 0;
        for (int i = 0; i < d; ++i)
          h += double(x[size_t(t) * d + i]) * toFloat(w1[size_t(i) * r + e]);
        logit += h * toFloat(w2[size_t(e) * f + j]);
      }
      on |= logit > threshold;
      close |= std::fabs(logit - threshold) < 1e-3;
    }
    expect[j] = close ? -1 : on;
  }
  W *dW1 = upload(w1), *dW2 = upload(w2);
  float *dX = upload(x), *dBias = upload(bias), *dHidden = nullptr;
  CHECK_CUDA(cudaMalloc(&dHidden, sizeof(float) * tokens * (r + f)));
  uint8_t *dFlags = nullptr;
  int32_t *dIdx = nullptr, *dCount = nullptr;
  CHECK_CUDA(cudaMalloc(&dFlags, f));
  CHECK_CUDA(cudaMalloc(&dIdx, sizeof(int32_t) * f));
  CHECK_CUDA(cudaMalloc(&dCount, sizeof(int32_t)));
  size_t tempBytes = buildIndexTempBytes(f);
  void *dTemp = nullptr;
  CHECK_CUDA(cudaMalloc(&dTemp, std::max<size_t>(1, tempBytes)));
  for (bool sorted : {true, false}) {
    CHECK_CUDA(predictIndex<W>(dX, tokens, dW1, d, r, dW2, f, dBias, threshold,
                               dHidden, dFlags, dIdx, dCount, sorted, dTemp,
                               tempBytes, 0));
    std::vector<uint8_t> flags = download(dFlags, size_t(f));
    int count = download(dCount, 1)[0];
    std::vector<int32_t> idx = download(dIdx, size_t(std::max(count, 0)));
    bool ok = count >= 0 && count <= f;
    int decided = 0, on = 0;
    for (int j = 0; j < f; ++j)
      if (expect[j] >= 0) {
        ++decided;
        on += expect[j];
        ok &= flags[j] == expect[j];
      }
    std::vector<int32_t> fromFlags;
    for (int j = 0; j < f; ++j)
      if (flags[j])
        fromFlags.push_back(j);
    std::vector<int32_t> got = idx;
    if (sorted)
      ok &= std::is_sorted(got.begin(), got.end());
    std::sort(got.begin(), got.end());
    ok &= got == fromFlags && decided > f * 9 / 10 && on > 0 && on < decided;
    char what[48];
    std::snprintf(what, sizeof(what), "predictIndex (%s)", sorted ? "sorted" : "append");
    report(ok, what, f, d, tokens, 1.0 - double(on) / std::max(decided, 1), wtype,
           double(count - int(fromFlags.size())));
  }
  for (void *p : {(void *)dW1, (void *)dW2, (void *)dX, (void *)dBias, (void *)dHidden,
                  (void *)dFlags, (void *)dIdx, (void *)dCount, dTemp})
    cudaFree(p);
}
} // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device\n");
    return 2;
  }
  uint32_t seed = 1;
  for (double s : {0.0, 0.5, 0.9, 0.99, 1.0}) {
    runCase<__half>(1024, 512, 1, s, seed++);
    runCase<float>(1024, 512, 1, s, seed++);
  }
  for (int tokens : {2, 3, 8}) {
    runCase<__half>(2048, 256, tokens, 0.9, seed++);
    runCase<float>(2048, 256, tokens, 0.9, seed++);
  }
  // Row lengths that are not 16-byte multiples (scalar tail path), odd F.
  runCase<__half>(1001, 77, 1, 0.8, seed++);
  runCase<float>(999, 13, 2, 0.7, seed++);
  runCase<__half>(3000, 1030, 4, 0.95, seed++);
  runPredict<__half>(1000, 64, 16, 1, seed++);
  runPredict<float>(1000, 64, 16, 3, seed++);
  runPredict<__half>(4099, 130, 40, 8, seed++);
  // A decode-sized case.
  runCase<__half>(16384, 4096, 1, 0.9, seed++);
  std::printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
