//===- SparseDecodeTest.cu - sparse decode kernels vs a CPU reference -----===//
//
// Part of the sparsec project.
//
// Runs on a CUDA device (the lit test test/gpu/sparse-decode.test is marked
// REQUIRES: cuda-device). For fp16 and fp32 weights, aligned and unaligned
// row lengths, 1..8 tokens and several sparsities: indexFromFlags against
// the host's list of non-zero neurons (segments in increasing order),
// sparseUp (and the base it writes for the down projection) and sparseDown
// against a double precision reference over the same (rounded) weights, the
// exact-mode chain indexFromActivations (with the bias and a residual as
// the base) -> sparseDown against the dense product, and predictIndex.
// Prints one line per case and "N passed, M failed"; exit status 1 on any
// failure.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/DenseDecode.h"
#include "sparsec/rt/cuda/SparseDecode.h"

#include "CudaTest.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
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

/// sparseUp over a list runs on tensor cores for 3-8 tokens of fp16 or bf16
/// rows (16-byte aligned, d a multiple of 32), and for 1-2 tokens of 16-bit
/// rows of 2048, 4096, 6144 or 8192 columns the split kernel shares each row
/// among a block's warps: both add in another order than the kernels that take
/// a row a warp, so h from there is compared within 1e-6 sqrt(d) relative (fp32
/// sums of d products in two orders; 1e-5 at least: 9e-5 at d = 8192, where a
/// simulation of the two orders differs by up to 8e-6 over 512 rows), anything
/// else bit for bit. An entry left at the sentinel or written where it should
/// not be still differs by far more.
template <typename W> bool splitUp(int d, int tokens) {
  return sizeof(W) == 2 && tokens <= 2 && d % 2048 == 0 && d <= 8192;
}
template <typename W> bool reorderedUp(int d, int tokens) {
  return (sizeof(W) == 2 && tokens >= 3 && d % 32 == 0) ||
         splitUp<W>(d, tokens);
}
bool sameH(const std::vector<float> &a, const std::vector<float> &b, bool exact,
           int d) {
  if (exact || a.size() != b.size())
    return a == b;
  const double tol = std::max(1e-5, 1e-6 * std::sqrt(double(d)));
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(double(a[i]) - b[i]) / (1.0 + std::fabs(double(b[i])));
    worst = e > worst || e != e ? e : worst;
  }
  if (!(worst <= tol))
    std::printf("  (h differs by %.2e relative, above %.2e)\n", worst, tol);
  return worst <= tol;
}

IndexView makeIndex(int n) {
  IndexView ix;
  ix.neurons = n;
  const int segments = indexSegments(n);
  CHECK_CUDA(cudaMalloc(&ix.idx, sizeof(int32_t) * std::max(segments, 1) * kSegment));
  CHECK_CUDA(cudaMalloc(&ix.cnt, sizeof(int32_t) * std::max(segments, 1)));
  // Garbage, so that a segment the kernels forget to write shows.
  CHECK_CUDA(cudaMemset(ix.cnt, 0x7f, sizeof(int32_t) * std::max(segments, 1)));
  return ix;
}

void freeIndex(IndexView ix) {
  cudaFree(ix.idx);
  cudaFree(ix.cnt);
}

/// The set's neurons in segment order; `ok` false when a segment is out of
/// range, not increasing or holds a neuron of another segment.
std::vector<int32_t> listOf(IndexView ix, bool &ok) {
  const int segments = indexSegments(ix.neurons);
  std::vector<int32_t> cnt = download(ix.cnt, size_t(segments));
  std::vector<int32_t> idx = download(ix.idx, size_t(segments) * kSegment);
  std::vector<int32_t> out;
  ok = true;
  for (int s = 0; s < segments; ++s) {
    if (cnt[s] < 0 || cnt[s] > kSegment) {
      ok = false;
      continue;
    }
    for (int k = 0; k < cnt[s]; ++k) {
      int j = idx[size_t(s) * kSegment + k];
      ok &= j / kSegment == s && j < ix.neurons && (out.empty() || j > out.back());
      out.push_back(j);
    }
  }
  return out;
}


template <typename W>
void runCase(int f, int d, int tokens, double sparsity, uint32_t seed) {
  const char *wtype = typeName<W>();
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
  // indexFromFlags.
  uint8_t *dFlags = upload(flags);
  IndexView ix = makeIndex(f);
  CHECK_CUDA(indexFromFlags(dFlags, ix, 0));
  bool wellFormed;
  std::vector<int32_t> idx = listOf(ix, wellFormed);
  report(wellFormed && idx == expectIdx, "indexFromFlags", f, d, tokens, sparsity,
         wtype, double(std::abs(int(idx.size()) - int(expectIdx.size()))));

  // sparseUp over the index set; it also writes the down projection's base
  // (bias + residual) into y.
  W *dWt = upload(wt), *dW = upload(w);
  float *dX = upload(x), *dBias = upload(bias);
  std::vector<float> sentinel(size_t(tokens) * f, -7.0f);
  float *dH = upload(sentinel);
  std::vector<float> residual(size_t(tokens) * d), y0(size_t(tokens) * d);
  for (float &v : residual) v = val(rng);
  for (int t = 0; t < tokens; ++t)
    for (int k = 0; k < d; ++k)
      y0[size_t(t) * d + k] = bias[k % f] + residual[size_t(t) * d + k];
  float *dRes = upload(residual);
  float *dBase = upload(std::vector<float>(size_t(tokens) * d, -3.0f));
  // The base's bias: the first d entries of `bias` (k % f).
  std::vector<float> biasD(d);
  for (int k = 0; k < d; ++k) biasD[k] = bias[k % f];
  float *dBiasD = upload(biasD);
  int32_t *dList = nullptr, *dListCount = nullptr;
  CHECK_CUDA(cudaMalloc(&dList, sizeof(int32_t) * f));
  // Past the count the list keeps what was there: poison no kernel may use.
  CHECK_CUDA(cudaMemset(dList, 0x7f, sizeof(int32_t) * f));
  CHECK_CUDA(cudaMalloc(&dListCount, sizeof(int32_t)));
  CHECK_CUDA(cudaMemset(dListCount, 0xff, sizeof(int32_t)));
  CHECK_CUDA(sparseUp<W>(dX, tokens, dWt, d, dBias, ix, true, dH, f,
                         RowsInit{dBase, dBiasD, dRes, tokens, d}, 0, dList,
                         dListCount));
  const int listCount = download(dListCount, 1)[0];
  const bool listOk =
      listCount == int(expectIdx.size()) &&
      download(dList, size_t(std::max(listCount, 0))) == expectIdx;
  std::vector<float> hUp = download(dH, sentinel.size());
  std::vector<float> base = download(dBase, y0.size());
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
  double errBase = 0;
  for (size_t i = 0; i < y0.size(); ++i)
    errBase = worse(errBase, std::fabs(double(base[i]) - y0[i]));
  report(errUp < 1e-4 && untouched && errBase < 1e-6 && listOk,
         "sparseUp (+relu, base, list)", f, d, tokens, sparsity, wtype,
         std::max(errUp, errBase));

  // sparseUp reading the set as a list (as the predictor writes it; here in
  // reverse order, which must not matter). The list has room for f entries;
  // those past the count hold values no kernel may use as a neuron.
  {
    std::vector<int32_t> reversed(expectIdx.rbegin(), expectIdx.rend());
    const int32_t listCountUp = int32_t(reversed.size());
    reversed.resize(size_t(std::max(f, 1)), std::numeric_limits<int32_t>::max());
    IndexView listedUp = ix;
    listedUp.list = upload(reversed);
    listedUp.count = upload(std::vector<int32_t>{listCountUp});
    float *dH2 = upload(sentinel);
    // With the down projection's base and the list copied out as well.
    float *dBase2 = upload(std::vector<float>(size_t(tokens) * d, -3.0f));
    int32_t *dCopy = upload(std::vector<int32_t>(size_t(f), -1));
    int32_t *dCopyCount = upload(std::vector<int32_t>{-1});
    CHECK_CUDA(sparseUp<W>(dX, tokens, dWt, d, dBias, listedUp, true, dH2, f,
                           RowsInit{dBase2, dBiasD, dRes, tokens, d}, 0, dCopy,
                           dCopyCount));
    std::vector<float> hUp2 = download(dH2, sentinel.size());
    const bool exactUp = !reorderedUp<W>(d, tokens);
    // Whether a base written on the device is y0 (within 1e-6).
    auto baseIsY0 = [&](const float *dBase) {
      const std::vector<float> got = download(dBase, y0.size());
      bool same = true;
      for (size_t i = 0; i < y0.size(); ++i)
        same &= std::fabs(double(got[i]) - y0[i]) < 1e-6;
      return same;
    };
    const bool baseOk = baseIsY0(dBase2);
    const bool copyOk =
        download(dCopyCount, 1)[0] == listCountUp &&
        download(dCopy, size_t(listCountUp)) ==
            std::vector<int32_t>(reversed.begin(), reversed.begin() + listCountUp);
    report(sameH(hUp2, hUp, exactUp, d) && baseOk && copyOk,
           "sparseUp (listed)", f, d, tokens, sparsity, wtype, 0.0);
    for (void *p : {(void *)dBase2, (void *)dCopy, (void *)dCopyCount})
      cudaFree(p);
    if (splitUp<W>(d, tokens)) {
      // The kernel that takes a row a warp, forced: the segments' sums bit
      // for bit.
      CHECK_CUDA(cudaMemcpy(dH2, sentinel.data(), sentinel.size() * sizeof(float),
                            cudaMemcpyHostToDevice));
      setUpKernel(UpKernel::kWarpPerRow);
      CHECK_CUDA(sparseUp<W>(dX, tokens, dWt, d, dBias, listedUp, true, dH2, f,
                             RowsInit{}, 0));
      setUpKernel(UpKernel::kAuto);
      report(download(dH2, sentinel.size()) == hUp, "sparseUp (listed, warp a row)", f,
             d, tokens, sparsity, wtype, 0.0);
    }
    // Launched early, right behind a slow kernel that writes x over NaNs.
    CHECK_CUDA(cudaMemcpy(dH2, sentinel.data(), sentinel.size() * sizeof(float),
                          cudaMemcpyHostToDevice));
    {
      SlowX slow(true, x, dX);
      CHECK_CUDA(sparseUp<W>(dX, tokens, dWt, d, dBias, listedUp, true, dH2, f,
                             RowsInit{}, slow.stream, nullptr, nullptr, true));
    }
    report(sameH(download(dH2, sentinel.size()), hUp, exactUp, d),
           "sparseUp (listed, early launch)", f, d, tokens, sparsity, wtype,
           0.0);
    // The same with the set marked ready (complete before the launch): the
    // kernels that take it request their rows before their wait, and must
    // still read x, and the residual of the base, only after it.
    CHECK_CUDA(cudaMemcpy(dH2, sentinel.data(), sentinel.size() * sizeof(float),
                          cudaMemcpyHostToDevice));
    {
      IndexView ready = listedUp;
      ready.ready = true;
      float *dBase3 = upload(std::vector<float>(size_t(tokens) * d, -3.0f));
      {
        SlowX slow(true, x, dX);
        CHECK_CUDA(sparseUp<W>(dX, tokens, dWt, d, dBias, ready, true, dH2, f,
                               RowsInit{dBase3, dBiasD, dRes, tokens, d}, slow.stream,
                               nullptr, nullptr, true));
      }
      const bool baseReadyOk = baseIsY0(dBase3);
      cudaFree(dBase3);
      report(sameH(download(dH2, sentinel.size()), hUp, exactUp, d) &&
                 baseReadyOk,
             "sparseUp (listed, ready, early launch)", f, d, tokens, sparsity,
             wtype, 0.0);
    }
    // With a per-token mask: h[t, j] is 0 where token t did not select j.
    std::vector<uint8_t> tokenMask(size_t(tokens) * f);
    for (auto &m : tokenMask)
      m = rng() % 2;
    uint8_t *dTokenMask = upload(tokenMask);
    CHECK_CUDA(cudaMemcpy(dH2, sentinel.data(), sentinel.size() * sizeof(float),
                          cudaMemcpyHostToDevice));
    CHECK_CUDA(sparseUp<W>(dX, tokens, dWt, d, dBias, listedUp, true, dH2, f,
                           RowsInit{}, 0, nullptr, nullptr, false, dTokenMask));
    std::vector<float> masked = hUp;
    for (int t = 0; t < tokens; ++t)
      for (int j = 0; j < f; ++j)
        if (flags[j] && !tokenMask[size_t(t) * f + j])
          masked[size_t(t) * f + j] = 0.0f;
    report(sameH(download(dH2, sentinel.size()), masked, exactUp, d),
           "sparseUp (listed, token mask)", f, d, tokens, sparsity, wtype, 0.0);
    cudaFree(dTokenMask);
    for (void *p : {(void *)listedUp.list, (void *)listedUp.count, (void *)dH2})
      cudaFree(p);
  }

  // sparseDown over the index set, y starting from the base.
  float *dHin = upload(h), *dY = upload(y0);
  CHECK_CUDA(sparseDown<W>(dHin, tokens, f, dW, d, ix, dY, 0));
  std::vector<float> y = download(dY, y0.size());
  auto denseRef = [&](int t, int k) {
    double ref = y0[size_t(t) * d + k];
    for (int j = 0; j < f; ++j)
      ref += double(h[size_t(t) * f + j]) * toFloat(w[size_t(j) * d + k]);
    return ref;
  };
  // Largest relative error of a result against the dense product.
  auto errAgainstDense = [&](const std::vector<float> &got) {
    double err = 0;
    for (int t = 0; t < tokens; ++t)
      for (int k = 0; k < d; ++k)
        err = worse(err, std::fabs(denseRef(t, k) - got[size_t(t) * d + k]) /
                             (1.0 + std::fabs(denseRef(t, k))));
    return err;
  };
  const double errDown = errAgainstDense(y);
  report(errDown < 1e-4, "sparseDown", f, d, tokens, sparsity, wtype, errDown);

  // The same from the list sparseUp wrote.
  CHECK_CUDA(cudaMemcpy(dY, y0.data(), y0.size() * sizeof(float), cudaMemcpyHostToDevice));
  IndexView listed = ix;
  listed.list = dList;
  listed.count = dListCount;
  CHECK_CUDA(sparseDown<W>(dHin, tokens, f, dW, d, listed, dY, 0));
  const double errList = errAgainstDense(download(dY, y0.size()));
  report(errList < 1e-4, "sparseDown (list)", f, d, tokens, sparsity, wtype, errList);
  // Launched early, right behind a slow kernel that writes h over NaNs.
  CHECK_CUDA(cudaMemcpy(dY, y0.data(), y0.size() * sizeof(float), cudaMemcpyHostToDevice));
  {
    SlowX slow(true, h, dHin);
    CHECK_CUDA(sparseDown<W>(dHin, tokens, f, dW, d, listed, dY, slow.stream, 0,
                             nullptr, true));
  }
  const double errEarly = errAgainstDense(download(dY, y0.size()));
  report(errEarly < 1e-4, "sparseDown (list, early launch)", f, d, tokens, sparsity,
         wtype, errEarly);
  // The same with the set marked ready: rows before the wait, h after it.
  CHECK_CUDA(cudaMemcpy(dY, y0.data(), y0.size() * sizeof(float), cudaMemcpyHostToDevice));
  {
    IndexView ready = listed;
    ready.ready = true;
    SlowX slow(true, h, dHin);
    CHECK_CUDA(sparseDown<W>(dHin, tokens, f, dW, d, ready, dY, slow.stream, 0,
                             nullptr, true));
  }
  const double errReady = errAgainstDense(download(dY, y0.size()));
  report(errReady < 1e-4, "sparseDown (list, ready, early launch)", f, d, tokens,
         sparsity, wtype, errReady);

  // Exact mode from the activations alone: the index kernel writes the base.
  CHECK_CUDA(cudaMemset(dY, 0xff, y0.size() * sizeof(float)));
  IndexView ix2 = makeIndex(f);
  CHECK_CUDA(indexFromActivations(dHin, tokens, ix2,
                                  RowsInit{dY, dBiasD, dRes, tokens, d}, 0));
  std::vector<int32_t> idx2 = listOf(ix2, wellFormed);
  bool sameSet = wellFormed && idx2 == expectIdx;
  CHECK_CUDA(sparseDown<W>(dHin, tokens, f, dW, d, ix2, dY, 0));
  const double errExact = errAgainstDense(download(dY, y0.size()));
  report(sameSet && errExact < 1e-4, "exact chain", f, d, tokens, sparsity, wtype,
         errExact);

  freeIndex(ix);
  freeIndex(ix2);
  for (void *p : {(void *)dFlags, (void *)dWt, (void *)dW, (void *)dX, (void *)dBias,
                  (void *)dH, (void *)dHin, (void *)dY, (void *)dRes, (void *)dBase,
                  (void *)dBiasD, (void *)dList, (void *)dListCount})
    cudaFree(p);
}
/// indexFromGate (a gated MLP's gate): each token's mask row and the union
/// set of the neurons above 0 (`positive`) or not 0, against the host's,
/// over gate values that are negative, zero and positive; launched early
/// behind a slow kernel that writes the gate, too.
void runGateIndex(int f, int tokens, bool positive, double zeros, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> val(-1, 1), coin(0, 1);
  std::vector<float> g(size_t(tokens) * f);
  for (float &v : g)
    v = coin(rng) < zeros ? 0.0f : val(rng);
  std::vector<uint8_t> wantMask(g.size());
  std::vector<int32_t> wantSet;
  for (int j = 0; j < f; ++j) {
    bool any = false;
    for (int t = 0; t < tokens; ++t) {
      const float v = g[size_t(t) * f + j];
      wantMask[size_t(t) * f + j] = positive ? v > 0.0f : v != 0.0f;
      any |= wantMask[size_t(t) * f + j] != 0;
    }
    if (any)
      wantSet.push_back(j);
  }
  float *dG = upload(g);
  for (bool early : {false, true}) {
    IndexView ix = makeIndex(f);
    uint8_t *dMask = nullptr;
    CHECK_CUDA(cudaMalloc(&dMask, g.size()));
    CHECK_CUDA(cudaMemset(dMask, 0x55, g.size()));
    {
      SlowX slow(early, g, dG);
      CHECK_CUDA(indexFromGate(dG, tokens, positive, dMask, ix, slow.stream, early));
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    bool wellFormed = false;
    const bool sameSet = listOf(ix, wellFormed) == wantSet && wellFormed;
    const bool sameMask = download(dMask, g.size()) == wantMask;
    std::printf("%s indexFromGate%s F=%-5d tokens=%d %s zeros=%.2f: set %s (%zu neurons), "
                "mask %s\n",
                sameSet && sameMask ? "PASS" : "FAIL", early ? " (early)" : "", f,
                tokens, positive ? "x > 0 " : "x != 0", zeros,
                sameSet ? "equal" : "differs", wantSet.size(),
                sameMask ? "equal" : "differs");
    (sameSet && sameMask ? passes : failures)++;
    freeIndex(ix);
    cudaFree(dMask);
  }
  cudaFree(dG);
}

/// predictUp against predictIndex followed by sparseUp over its list with
/// the per-token mask rows (what the runtime runs): the same segments, list
/// (as a set), mask rows and base, and h bit for bit on the union (the same
/// sums in the same order; within 1e-5 where sparseUp runs on tensor cores,
/// 3-8 fp16 tokens, which the runtime never pairs with predictUp: it fuses
/// 1-2 tokens); h outside the union untouched. Called twice,
/// the second time launched early behind a slow kernel that writes x.
template <typename W>
void runPredictUp(int f, int d, int r, int tokens, uint32_t seed) {
  const char *wtype = typeName<W>();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> val(-1, 1);
  std::vector<W> w1(size_t(d) * r), w2(size_t(r) * f), wt(size_t(f) * d);
  for (auto &v : w1) v = fromFloat<W>(val(rng));
  for (auto &v : w2) v = fromFloat<W>(val(rng));
  for (auto &v : wt) v = fromFloat<W>(val(rng));
  std::vector<float> x(size_t(tokens) * d), pbias(f), ubias(f), residual(size_t(tokens) * d),
      dbias(d);
  for (float &v : x) v = val(rng);
  for (float &v : pbias) v = val(rng) * 4.0f;
  for (float &v : ubias) v = val(rng);
  for (float &v : residual) v = val(rng);
  for (float &v : dbias) v = val(rng);
  const float threshold = 2.0f;
  W *dW1 = upload(w1), *dW2 = upload(w2), *dWt = upload(wt);
  float *dX = upload(x), *dPB = upload(pbias), *dUB = upload(ubias), *dRes = upload(residual),
        *dDB = upload(dbias);
  const size_t scratchFloats = predictScratchFloats(tokens, d, r);
  float *dScratch = nullptr;
  CHECK_CUDA(cudaMalloc(&dScratch, sizeof(float) * scratchFloats));
  CHECK_CUDA(cudaMemset(dScratch, 0, sizeof(float) * scratchFloats));
  struct Result {
    std::vector<int32_t> set, list;
    std::vector<uint8_t> mask;
    std::vector<float> h, base;
    bool wellFormed = false;
  };
  const std::vector<float> sentinel(size_t(tokens) * f, -7.0f);
  auto run = [&](bool fused, bool early) {
    IndexView ix = makeIndex(f);
    CHECK_CUDA(cudaMalloc(&ix.list, sizeof(int32_t) * f));
    CHECK_CUDA(cudaMalloc(&ix.count, sizeof(int32_t)));
    uint8_t *dMask = nullptr;
    CHECK_CUDA(cudaMalloc(&dMask, size_t(tokens) * f));
    CHECK_CUDA(cudaMemset(dMask, 0x55, size_t(tokens) * f));
    float *dH = upload(sentinel);
    float *dBase = upload(std::vector<float>(size_t(tokens) * d, -3.0f));
    const RowsInit init{dBase, dDB, dRes, tokens, d};
    if (fused) {
      SlowX slow(early, x, dX);
      CHECK_CUDA(predictUp<W>(dX, tokens, dW1, d, r, dW2, f, dPB, threshold, dScratch, ix,
                              dMask, tokens, dWt, dUB, true, dH, f, init, slow.stream,
                              early));
    } else {
      CHECK_CUDA(predictIndex<W>(dX, tokens, dW1, d, r, dW2, f, dPB, threshold, dScratch,
                                 ix, dMask, tokens, 0));
      CHECK_CUDA(sparseUp<W>(dX, tokens, dWt, d, dUB, ix, true, dH, f, init, 0, nullptr,
                             nullptr, false, tokens > 1 ? dMask : nullptr));
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    Result res;
    res.set = listOf(ix, res.wellFormed);
    const int count = download(ix.count, 1)[0];
    res.list = download(ix.list, size_t(std::max(0, std::min(count, f))));
    std::sort(res.list.begin(), res.list.end());
    res.mask = download(dMask, size_t(tokens) * f);
    res.h = download(dH, sentinel.size());
    res.base = download(dBase, size_t(tokens) * d);
    cudaFree(ix.list);
    cudaFree(ix.count);
    freeIndex(ix);
    for (void *p : {(void *)dMask, (void *)dH, (void *)dBase})
      cudaFree(p);
    return res;
  };
  const Result ref = run(false, false);
  bool ok = ref.wellFormed && !ref.set.empty() && int(ref.set.size()) < f;
  for (bool early : {false, true}) {
    const Result got = run(true, early);
    ok &= got.wellFormed && got.set == ref.set && got.list == ref.list &&
          got.mask == ref.mask &&
          sameH(got.h, ref.h, !reorderedUp<W>(d, tokens), d) &&
          got.base == ref.base;
  }
  report(ok, "predictUp", f, d, tokens, 1.0 - double(ref.set.size()) / f, wtype, 0.0);
  for (void *p : {(void *)dW1, (void *)dW2, (void *)dWt, (void *)dX, (void *)dPB,
                  (void *)dUB, (void *)dRes, (void *)dDB, (void *)dScratch})
    cudaFree(p);
}

/// predictUp with a norm against what it replaces, normRows followed by
/// predictUp over the normalised x: the normalised x it writes, the same
/// segments, list (as a set), base and h, all bit for bit (the hidden
/// kernel normalises with normRows' arithmetic and order, then adds the
/// hidden vector as before), h outside the set untouched. The fused call
/// runs three times on one index (the list count it starts from is the
/// hidden kernel's), the last launched early behind a slow kernel that
/// writes the norm's input.
template <typename W>
void runNormPredictUp(int f, int d, int r, int tokens, bool rms, double sparsity,
                      uint32_t seed) {
  const char *wtype = typeName<W>();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> val(-1, 1);
  std::vector<W> w1(size_t(d) * r), w2(size_t(r) * f), wt(size_t(f) * d);
  for (auto &v : w1) v = fromFloat<W>(val(rng));
  for (auto &v : w2) v = fromFloat<W>(val(rng));
  for (auto &v : wt) v = fromFloat<W>(val(rng));
  // x with an offset and a scale of its own, as a residual stream has.
  std::vector<float> x(size_t(tokens) * d), scale(d), nbias(d), pbias(f), ubias(f), dbias(d);
  for (float &v : x) v = 3.0f * val(rng) + 0.5f;
  for (float &v : scale) v = val(rng);
  for (float &v : nbias) v = val(rng);
  for (float &v : pbias) v = val(rng);
  for (float &v : ubias) v = val(rng);
  for (float &v : dbias) v = val(rng);
  // The logits' spread: normalised x (about unit variance) times scale
  // (variance 1/3) through w1 and w2 (1/3 each); the threshold that leaves
  // about `sparsity` of a token's neurons out.
  const double spread = std::sqrt(double(d) * r / 27.0);
  const float threshold =
      float(spread * (sparsity >= 0.99 ? 2.33 : sparsity >= 0.9 ? 1.28 : 0.0));
  W *dW1 = upload(w1), *dW2 = upload(w2), *dWt = upload(wt);
  float *dX = upload(x), *dScale = upload(scale), *dNB = upload(nbias), *dPB = upload(pbias),
        *dUB = upload(ubias), *dDB = upload(dbias);
  const size_t scratchFloats = predictScratchFloats(tokens, d, r);
  float *dScratch = nullptr;
  CHECK_CUDA(cudaMalloc(&dScratch, sizeof(float) * scratchFloats));
  CHECK_CUDA(cudaMemset(dScratch, 0, sizeof(float) * scratchFloats));
  const float eps = 1e-5f;
  struct Result {
    std::vector<int32_t> set, list;
    std::vector<float> xn, h, base;
    bool wellFormed = false;
  };
  const std::vector<float> sentinel(size_t(tokens) * f, -7.0f);
  const std::vector<float> unwritten(x.size(), -5.0f);
  IndexView ix = makeIndex(f);
  CHECK_CUDA(cudaMalloc(&ix.list, sizeof(int32_t) * f));
  CHECK_CUDA(cudaMalloc(&ix.count, sizeof(int32_t)));
  auto run = [&](bool fused, bool early) {
    CHECK_CUDA(cudaMemset(ix.cnt, 0x7f, sizeof(int32_t) * indexSegments(f)));
    CHECK_CUDA(cudaMemset(ix.count, 0x7f, sizeof(int32_t)));
    float *dH = upload(sentinel), *dXn = upload(unwritten);
    float *dY = upload(std::vector<float>(size_t(tokens) * d, -3.0f));
    // The base: the norm's input (the residual) plus the down bias.
    const RowsInit init{dY, dDB, dX, tokens, d};
    if (fused) {
      SlowX slow(early, x, dX);
      FfnNorm norm;
      norm.x = dX;
      norm.scale = dScale;
      norm.bias = rms ? nullptr : dNB;
      norm.epsilon = eps;
      norm.rms = rms;
      CHECK_CUDA(predictUp<W>(dXn, tokens, dW1, d, r, dW2, f, dPB, threshold, dScratch, ix,
                              nullptr, 0, dWt, dUB, true, dH, f, init, slow.stream, early,
                              &norm));
    } else {
      CHECK_CUDA(normRows(dX, tokens, d, dScale, rms ? nullptr : dNB, eps, rms, dXn, 0));
      CHECK_CUDA(predictUp<W>(dXn, tokens, dW1, d, r, dW2, f, dPB, threshold, dScratch, ix,
                              nullptr, 0, dWt, dUB, true, dH, f, init, 0));
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    Result res;
    res.set = listOf(ix, res.wellFormed);
    const int count = download(ix.count, 1)[0];
    res.list = download(ix.list, size_t(std::max(0, std::min(count, f))));
    std::sort(res.list.begin(), res.list.end());
    res.xn = download(dXn, x.size());
    res.h = download(dH, sentinel.size());
    res.base = download(dY, size_t(tokens) * d);
    for (void *p : {(void *)dH, (void *)dXn, (void *)dY})
      cudaFree(p);
    return res;
  };
  const Result ref = run(false, false);
  bool ok = ref.wellFormed && !ref.set.empty() && int(ref.set.size()) < f;
  for (bool early : {false, false, true}) {
    const Result got = run(true, early);
    const bool same = got.wellFormed && got.xn == ref.xn && got.set == ref.set &&
                      got.list == ref.list && got.h == ref.h && got.base == ref.base;
    if (!same)
      std::printf("  (%s: x normalised %d, set %d, list %d, h %d, base %d)\n",
                  early ? "early" : "normal", int(got.xn == ref.xn),
                  int(got.set == ref.set), int(got.list == ref.list), int(got.h == ref.h),
                  int(got.base == ref.base));
    ok &= same;
  }
  report(ok, rms ? "predictUp + rms norm" : "predictUp + layer norm", f, d, tokens,
         1.0 - double(ref.set.size()) / f, wtype, 0.0);
  cudaFree(ix.list);
  cudaFree(ix.count);
  freeIndex(ix);
  for (void *p : {(void *)dW1, (void *)dW2, (void *)dWt, (void *)dX, (void *)dScale,
                  (void *)dNB, (void *)dPB, (void *)dUB, (void *)dDB, (void *)dScratch})
    cudaFree(p);
}

/// predictUp refuses a norm for shapes predictUpNormFits does not take,
/// with cudaErrorInvalidValue and nothing launched.
void runNormPredictUpRefusals() {
  IndexView ix;
  ix.neurons = 64;
  FfnNorm norm;
  const __half *w = reinterpret_cast<const __half *>(uintptr_t(256));
  norm.x = reinterpret_cast<const float *>(uintptr_t(256));
  norm.scale = norm.x;
  bool ok = !predictUpNormFits(3, 4096, 32) && !predictUpNormFits(1, 4097, 32) &&
            !predictUpNormFits(1, 4096, 136) && predictUpNormFits(2, 4096, 128) &&
            predictUpNormFits(1, 77, 8);
  ok &= predictUp<__half>(reinterpret_cast<const float *>(w), 3, w, 4096, 32, w, 64, nullptr,
                          0.0f, nullptr, ix, nullptr, 0, w, nullptr, true, nullptr, 64,
                          RowsInit{}, 0, false, &norm) == cudaErrorInvalidValue;
  ok &= cudaGetLastError() == cudaSuccess;
  report(ok, "predictUp norm refusals", 64, 4096, 3, 0.0, "fp16", 0.0);
}

/// predictIndex against a double-precision reference: the flags (away from
/// the threshold) and the index set, sorted and appended.
template <typename W>
void runPredict(int f, int d, int r, int tokens, uint32_t seed) {
  const char *wtype = typeName<W>();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> val(-1, 1);
  std::vector<W> w1(size_t(d) * r), w2(size_t(r) * f);
  for (auto &v : w1) v = fromFloat<W>(val(rng));
  for (auto &v : w2) v = fromFloat<W>(val(rng));
  std::vector<float> x(size_t(tokens) * d), bias(f);
  for (float &v : x) v = val(rng);
  for (float &v : bias) v = val(rng) * 4.0f;
  const float threshold = 2.0f;
  // Per token and neuron: 1 on, 0 off, -1 too close to call.
  std::vector<int> expect(size_t(tokens) * f, 0);
  std::vector<double> hidden(size_t(tokens) * r, 0.0), hiddenAbs(size_t(tokens) * r, 0.0);
  for (int t = 0; t < tokens; ++t)
    for (int i = 0; i < d; ++i)
      for (int e = 0; e < r; ++e) {
        double p = double(x[size_t(t) * d + i]) * toFloat(w1[size_t(i) * r + e]);
        hidden[size_t(t) * r + e] += p;
        hiddenAbs[size_t(t) * r + e] += std::fabs(p);
      }
  for (int j = 0; j < f; ++j)
    for (int t = 0; t < tokens; ++t) {
      double logit = bias[j], magnitude = std::fabs(bias[j]);
      for (int e = 0; e < r; ++e) {
        double w = toFloat(w2[size_t(e) * f + j]);
        logit += hidden[size_t(t) * r + e] * w;
        magnitude += hiddenAbs[size_t(t) * r + e] * std::fabs(w);
      }
      // fp32 sums on the device: too close to call within 1e-5 of the sum
      // of the magnitudes.
      const bool close = std::fabs(logit - threshold) < 1e-5 * magnitude + 1e-4;
      expect[size_t(t) * f + j] = close ? -1 : logit > threshold;
    }
  W *dW1 = upload(w1), *dW2 = upload(w2);
  float *dX = upload(x), *dBias = upload(bias), *dScratch = nullptr;
  CHECK_CUDA(cudaMalloc(&dScratch, sizeof(float) * predictScratchFloats(tokens, d, r)));
  CHECK_CUDA(cudaMemset(dScratch, 0, sizeof(float) * predictScratchFloats(tokens, d, r)));
  uint8_t *dMask = nullptr;
  const int maskRows = tokens;
  CHECK_CUDA(cudaMalloc(&dMask, size_t(maskRows) * f));
  IndexView ix = makeIndex(f);
  CHECK_CUDA(cudaMalloc(&ix.list, sizeof(int32_t) * f));
  CHECK_CUDA(cudaMalloc(&ix.count, sizeof(int32_t)));
  // First a call with kMaxTokens tokens on the same scratch (a decode
  // batch before this step): its partial sums must not land on this
  // call's counters. Then three times: the second call must not depend on
  // anything the first left; the third is launched early, right behind a
  // slow kernel that writes x over NaNs.
  if (tokens < kMaxTokens) {
    std::vector<float> xBatch(size_t(kMaxTokens) * d);
    for (float &v : xBatch) v = val(rng);
    float *dXBatch = upload(xBatch);
    uint8_t *dMaskBatch = nullptr;
    CHECK_CUDA(cudaMalloc(&dMaskBatch, size_t(kMaxTokens) * f));
    CHECK_CUDA(predictIndex<W>(dXBatch, kMaxTokens, dW1, d, r, dW2, f, dBias,
                               threshold, dScratch, ix, dMaskBatch, kMaxTokens, 0));
    CHECK_CUDA(cudaDeviceSynchronize());
    cudaFree(dXBatch);
    cudaFree(dMaskBatch);
  }
  bool ok = true;
  int decided = 0, on = 0, countDiff = 0;
  for (int call = 0; call < 3; ++call) {
    CHECK_CUDA(cudaMemset(dMask, 0x55, size_t(maskRows) * f));
    {
      SlowX slow(call == 2, x, dX);
      CHECK_CUDA(predictIndex<W>(dX, tokens, dW1, d, r, dW2, f, dBias, threshold,
                                 dScratch, ix, dMask, maskRows, slow.stream,
                                 call == 2));
    }
    std::vector<uint8_t> mask = download(dMask, size_t(maskRows) * f);
    bool wellFormed;
    std::vector<int32_t> got = listOf(ix, wellFormed);
    // Row t of the mask is token t's own selection; the set is their union.
    decided = on = 0;
    int wrong = 0;
    for (size_t k = 0; k < expect.size(); ++k)
      if (expect[k] >= 0) {
        ++decided;
        on += expect[k];
        if (mask[k] != expect[k] && wrong++ < 3)
          std::printf(
              "  (call %d: token %d neuron %d selected %d, expected %d)\n",
              call, int(k / f), int(k % f), int(mask[k]), expect[k]);
      }
    ok &= wrong == 0 && wellFormed;
    if (!wellFormed)
      std::printf("  (call %d: the segments are malformed)\n", call);
    std::vector<int32_t> fromMask;
    for (int j = 0; j < f; ++j) {
      bool any = false;
      for (int m = 0; m < maskRows; ++m)
        any |= mask[size_t(m) * f + j] != 0;
      if (any)
        fromMask.push_back(j);
    }
    if (!(got == fromMask && decided > int(expect.size()) * 9 / 10 && on > 0 &&
          on < decided)) {
      std::printf("  (call %d: set %zu entries, mask %zu; decided %d of %zu, "
                  "on %d)\n",
                  call, got.size(), fromMask.size(), decided, expect.size(),
                  on);
      ok = false;
    }
    countDiff = int(got.size()) - int(fromMask.size());
    // The list: the same set (segments in any order).
    const int listCount = download(ix.count, 1)[0];
    std::vector<int32_t> list =
        download(ix.list, size_t(std::max(0, std::min(listCount, f))));
    std::sort(list.begin(), list.end());
    if (!(listCount == int(fromMask.size()) && list == fromMask)) {
      std::printf("  (call %d: list of %d entries, mask %zu)\n", call,
                  listCount, fromMask.size());
      ok = false;
    }
  }
  report(ok, "predictIndex", f, d, tokens, 1.0 - double(on) / std::max(decided, 1),
         wtype, double(countDiff));
  cudaFree(ix.list);
  cudaFree(ix.count);
  freeIndex(ix);
  for (void *p : {(void *)dW1, (void *)dW2, (void *)dX, (void *)dBias, (void *)dScratch,
                  (void *)dMask})
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
  // The listed down projection of 3-8 tokens on tensor cores: a ragged
  // last column tile (1032 = 8 x 128 + 8), every row (sparsity 0), no row
  // (sparsity 1).
  runCase<__half>(3000, 1032, 5, 0.5, seed++);
  runCase<__half>(2048, 384, 8, 0.0, seed++);
  runCase<__half>(2048, 256, 6, 1.0, seed++);
  // A gated MLP's gate: ReLU outputs (> 0) and other activations (!= 0),
  // ragged neuron counts, 1-8 tokens, no neuron and every neuron.
  runGateIndex(11008, 1, true, 0.8, seed++);
  runGateIndex(2816, 2, false, 0.9, seed++);
  runGateIndex(1000, 8, true, 0.5, seed++);
  runGateIndex(77, 3, false, 0.0, seed++);
  runGateIndex(130, 1, true, 1.0, seed++);
  runPredict<__half>(1000, 64, 16, 1, seed++);
  runPredict<float>(1000, 64, 16, 3, seed++);
  runPredict<__half>(4099, 130, 40, 8, seed++);
  // Ranks whose columns stay with a thread (r divides 256 * V) and d above
  // the hidden kernel's 32 blocks of 64 rows.
  runPredict<__half>(8192, 2048, 64, 1, seed++);
  runPredict<__half>(16384, 4096, 32, 2, seed++);
  runPredict<float>(3000, 4100, 256, 1, seed++);
  // Ranks above one warp's loads (column tiles), ranks that do not divide
  // them, several tokens.
  runPredict<__half>(2048, 1024, 1024, 1, seed++);
  runPredict<__half>(3000, 512, 300, 3, seed++);
  runPredict<float>(1000, 256, 200, 8, seed++);
  runPredict<__half>(1000, 96, 4, 2, seed++);
  // The fused predictor and up projection: decode shapes, odd row lengths
  // (scalar tails, no permuted stage), ranks of both hidden kernels.
  runPredictUp<__half>(16384, 4096, 64, 1, seed++);
  runPredictUp<__half>(8192, 2048, 64, 2, seed++);
  runPredictUp<float>(2048, 1024, 32, 1, seed++);
  runPredictUp<__half>(1000, 77, 16, 3, seed++);
  runPredictUp<float>(999, 130, 200, 8, seed++);
  runPredictUp<__half>(4096, 1024, 256, 4, seed++);
  // predictUp with the norm in its hidden-vector kernel: layer and RMS
  // norms, OPT-1.3B and -6.7B rows, 1-2 tokens, ranks 8-128, fp32 weights,
  // rows that are not 512-multiples (77, 1000, 3000: partial register
  // rows, scalar tails).
  runNormPredictUp<__half>(16384, 4096, 32, 1, false, 0.9, seed++);
  runNormPredictUp<__half>(16384, 4096, 64, 2, false, 0.9, seed++);
  runNormPredictUp<__half>(8192, 2048, 128, 1, false, 0.9, seed++);
  runNormPredictUp<__half>(8192, 2048, 16, 2, true, 0.99, seed++);
  runNormPredictUp<__half>(3000, 1000, 40, 1, true, 0.5, seed++);
  runNormPredictUp<float>(2048, 1024, 32, 1, false, 0.9, seed++);
  runNormPredictUp<float>(1000, 77, 8, 2, true, 0.5, seed++);
  runNormPredictUpRefusals();
  // A decode-sized case.
  runCase<__half>(16384, 4096, 1, 0.9, seed++);
  // The split up kernel's other row lengths and token counts: every row
  // (several groups a block), most rows, none.
  runCase<__half>(4096, 8192, 1, 0.0, seed++);
  runCase<__half>(3000, 6144, 2, 0.5, seed++);
  runCase<__half>(5000, 2048, 2, 0.0, seed++);
  runCase<__half>(2048, 4096, 1, 1.0, seed++);
  // bfloat16 weights: the split up kernel (1-2 tokens), the tensor-core
  // kernels (3-8 tokens, d a multiple of 32; the general ones otherwise),
  // scalar tails, the predictor and its fused forms.
  runCase<__nv_bfloat16>(16384, 4096, 1, 0.9, seed++);
  runCase<__nv_bfloat16>(3000, 6144, 2, 0.5, seed++);
  runCase<__nv_bfloat16>(2048, 256, 5, 0.9, seed++);
  runCase<__nv_bfloat16>(16384, 4096, 8, 0.9, seed++);
  runCase<__nv_bfloat16>(4096, 1024, 3, 0.5, seed++);
  runCase<__nv_bfloat16>(1000, 100, 4, 0.5, seed++);
  runPredictUp<__nv_bfloat16>(4096, 1024, 256, 4, seed++);
  runCase<__nv_bfloat16>(1001, 77, 1, 0.8, seed++);
  runPredict<__nv_bfloat16>(16384, 4096, 32, 2, seed++);
  runPredict<__nv_bfloat16>(3000, 512, 300, 3, seed++);
  runPredictUp<__nv_bfloat16>(16384, 4096, 64, 1, seed++);
  runPredictUp<__nv_bfloat16>(8192, 2048, 64, 2, seed++);
  runPredictUp<__nv_bfloat16>(1000, 77, 16, 3, seed++);
  runNormPredictUp<__nv_bfloat16>(16384, 4096, 32, 1, false, 0.9, seed++);
  runNormPredictUp<__nv_bfloat16>(3000, 1000, 40, 1, true, 0.5, seed++);
  std::printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
