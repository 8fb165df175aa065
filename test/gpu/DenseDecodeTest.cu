//===- DenseDecodeTest.cu - dense decode kernels vs a CPU reference -------===//
//
// Part of the sparsec project.
//
// Runs on a CUDA device (test/gpu/dense-decode.test, REQUIRES: cuda-device).
// gemvRows: fp16 and fp32 neuron-major weights, 1..8 tokens, 16-byte and
// element loads (odd K, offset pointers), bias, activation and residual,
// against a double-precision product over the same (rounded) weights;
// gemvRowsGroup (several weights over one x in one launch) likewise;
// gemvRowsNormOut (the output row normalised by the last block).
// embeddingRows: one table or the sum of two, fp16 and fp32, bit for bit.
// decodeAttention: past + new keys, GQA, additive / boolean / no mask,
// causal, several chunk counts (one chunk and merged chunks), vector and
// scalar staging, the present's new rows, against a CPU softmax attention.
// Prints one line per case and "N passed, M failed"; exit 1 on a failure.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/Attention.h"
#include "sparsec/rt/cuda/DenseDecode.h"
#include "sparsec/rt/cuda/LtGemm.h"

#include "CudaTest.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <random>
#include <type_traits>
#include <vector>

using namespace sparsec::rt;
using namespace sparsec::rt::cuda;
using namespace sparsec::test;

namespace {
int failures = 0, passes = 0;

void report(bool ok, const char *line, double err) {
  std::printf("%s %s max err %.2e\n", ok ? "PASS" : "FAIL", line, err);
  (ok ? passes : failures)++;
}


/// Compares y [M, N] with the double-precision reference act(bias[n] +
/// sum_k xAt(m, k) * wAt(k, n)) + residual[m * N + n] (bias and residual
/// null for none, act ReLU or none), accumulating into `err` the largest
/// difference (worse) and into `scale` the largest |reference|.
template <typename XAt, typename WAt>
void compareLinear(int M, int K, int N, XAt xAt, WAt wAt, const float *bias,
                   bool relu, const float *residual,
                   const std::vector<float> &y, double &err, double &scale) {
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = bias ? bias[size_t(n)] : 0.0;
      for (int k = 0; k < K; ++k)
        s += xAt(m, k) * wAt(k, n);
      if (relu)
        s = std::max(s, 0.0);
      if (residual)
        s += residual[size_t(m) * N + n];
      err = worse(err, std::fabs(s - y[size_t(m) * N + n]));
      scale = std::max(scale, std::fabs(s));
    }
}

/// The linear kernels' tolerance: fp32 accumulation over K terms.
bool linearWithin(double err, double scale, int K) {
  return err <= 1e-5 * scale * std::sqrt(double(K)) / 8 + 1e-5;
}

/// LtGemm against a double product: y [M, N] = act(x [M, K] . op(W) +
/// bias) + residual, W [K, N] or (`transposed`) [N, K] of W's type, x
/// rounded to it beforehand (as the runtime does), so the products are
/// exact and only fp32 accumulation separates the two. `residual`: 0
/// none (y starts as NaN: every entry must be written), 1 in a buffer of
/// its own, 2 in y itself (read in place).
template <typename W>
void ltCase(int M, int K, int N, bool transposed, bool withBias, bool relu,
            int residual, std::mt19937 &rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<W> x(size_t(M) * K), w(size_t(N) * K);
  for (W &v : x)
    v = fromFloat<W>(g(rng));
  for (W &v : w)
    v = fromFloat<W>(g(rng) / std::sqrt(float(K)));
  std::vector<float> bias(N), res(size_t(M) * N);
  for (float &v : bias)
    v = g(rng);
  for (float &v : res)
    v = g(rng);
  // W's element (k, n) in either layout.
  auto wAt = [&](int k, int n) {
    return double(toFloat(transposed ? w[size_t(n) * K + k] : w[size_t(k) * N + n]));
  };
  W *dx = upload(x), *dw = upload(w);
  float *db = upload(bias), *dres = upload(res);
  std::vector<float> y0 = residual == 2 ? res
                                        : std::vector<float>(res.size(), NAN);
  float *dy = upload(y0);
  const size_t wsBytes = size_t(32) << 20;
  void *ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, wsBytes));
  const cudaDataType_t type = std::is_same_v<W, float>    ? CUDA_R_32F
                              : std::is_same_v<W, __half> ? CUDA_R_16F
                                                          : CUDA_R_16BF;
  LtGemm lt;
  const cublasStatus_t status = lt.matmul(
      nullptr, dx, dw, type, transposed, M, K, N, withBias ? db : nullptr,
      relu ? ops::Activation::relu : ops::Activation::none,
      residual == 1 ? dres : residual == 2 ? dy : nullptr, dy, ws, wsBytes);
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<float> y = download(dy, size_t(M) * N);
  double err = 0, scale = 1;
  compareLinear(
      M, K, N,
      [&](int m, int k) { return double(toFloat(x[size_t(m) * K + k])); },
      wAt, withBias ? bias.data() : nullptr, relu,
      residual ? res.data() : nullptr, y, err, scale);
  char line[200];
  std::snprintf(line, sizeof line,
                "LtGemm %s M=%d K=%d N=%d transposed=%d bias=%d relu=%d "
                "residual=%s status=%d",
                typeName<W>(), M, K, N, transposed, withBias, relu,
                residual == 0 ? "none" : residual == 1 ? "own" : "in place",
                int(status));
  report(status == CUBLAS_STATUS_SUCCESS && linearWithin(err, scale, K), line,
         err);
  for (void *p : {(void *)dx, (void *)dw, (void *)db, (void *)dres, (void *)dy,
                  ws})
    cudaFree(p);
}

/// LtGemm refuses (NOT_SUPPORTED, nothing launched, y untouched) what its
/// epilogues do not compute: GELU, an activation before a residual, and a
/// GEMM with no epilogue at all (the plain cuBLAS call serves those).
void ltRefusals() {
  std::vector<float> y0(64, 3.0f), ones(64, 1.0f);
  float *dy = upload(y0), *d1 = upload(ones);
  LtGemm lt;
  auto call = [&](const float *bias, ops::Activation act, const float *res) {
    return lt.matmul(nullptr, d1, d1, CUDA_R_32F, false, 8, 8, 8, bias, act,
                     res, dy, nullptr, 0);
  };
  const bool ok = call(d1, ops::Activation::gelu, nullptr) ==
                      CUBLAS_STATUS_NOT_SUPPORTED &&
                  call(nullptr, ops::Activation::relu, d1) ==
                      CUBLAS_STATUS_NOT_SUPPORTED &&
                  call(nullptr, ops::Activation::none, nullptr) ==
                      CUBLAS_STATUS_NOT_SUPPORTED &&
                  lt.plans() == 0 && download(dy, 64) == y0;
  report(ok, "LtGemm refuses GELU, ReLU before a residual, no epilogue", 0.0);
  cudaFree(dy);
  cudaFree(d1);
}

/// LtGemm keeps at most kMaxPlans plans, evicting the least recently used:
/// after kMaxPlans + 4 prompt lengths it holds kMaxPlans, the first length
/// is planned again (and computes the right product) while the latest is
/// reused, and every product along the way is right.
void ltEviction() {
  const int K = 32, N = 16, extra = 4;
  const int lengths = int(LtGemm::kMaxPlans) + extra;
  std::vector<float> x(size_t(lengths) * K), w(size_t(K) * N), bias(N);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(int(i % 7) - 3);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = float(int(i % 5) - 2);
  for (int n = 0; n < N; ++n)
    bias[size_t(n)] = float(n % 3);
  float *dx = upload(x), *dw = upload(w), *db = upload(bias);
  float *dy = upload(std::vector<float>(size_t(lengths) * N, NAN));
  LtGemm lt;
  // Integers small enough to be exact in fp32 whatever the order.
  auto run = [&](int M) {
    CHECK_CUDA(cudaMemset(dy, 0xff, sizeof(float) * size_t(M) * N));
    if (lt.matmul(nullptr, dx, dw, CUDA_R_32F, false, M, K, N, db,
                  ops::Activation::relu, nullptr, dy, nullptr,
                  0) != CUBLAS_STATUS_SUCCESS)
      return false;
    const std::vector<float> y = download(dy, size_t(M) * N);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        float s = bias[size_t(n)];
        for (int k = 0; k < K; ++k)
          s += x[size_t(m) * K + k] * w[size_t(k) * N + n];
        if (y[size_t(m) * N + n] != std::max(s, 0.0f))
          return false;
      }
    return true;
  };
  bool ok = true;
  for (int M = 1; M <= lengths; ++M)
    ok = run(M) && ok;
  const bool held = lt.plans() == LtGemm::kMaxPlans &&
                    lt.plansMade() == size_t(lengths);
  const bool again = run(1) && lt.plansMade() == size_t(lengths) + 1;
  const bool reused = run(lengths) && lt.plansMade() == size_t(lengths) + 1 &&
                      lt.plans() == LtGemm::kMaxPlans;
  char line[160];
  std::snprintf(line, sizeof line,
                "LtGemm keeps %zu plans over %d lengths (made %zu; products "
                "%d, bound %d, replanned %d, reused %d)",
                lt.plans(), lengths, lt.plansMade(), ok, held, again, reused);
  report(ok && held && again && reused, line, 0.0);
  for (float *p : {dx, dw, db, dy})
    cudaFree(p);
}

/// `offset` elements in front of x and w make them (and, with odd K, their
/// rows) miss 16-byte alignment: the element-load kernel. `early`: x is
/// written by a slow kernel just before a programmatic dependent launch of
/// the GEMV, which must wait for it.
template <typename W>
void gemvCase(int M, int K, int N, bool relu, bool withResidual, int offset,
              std::mt19937 &rng, bool early = false) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(size_t(M) * K), bias(N), res(size_t(M) * N);
  std::vector<W> w(size_t(N) * K);
  for (float &v : x)
    v = g(rng);
  for (W &v : w)
    v = fromFloat<W>(g(rng) / std::sqrt(float(K)));
  for (float &v : bias)
    v = g(rng);
  for (float &v : res)
    v = g(rng);
  float *dx = upload(x, size_t(offset));
  W *dw = upload(w, size_t(offset));
  float *db = upload(bias), *dres = upload(res);
  float *dy = nullptr;
  CHECK_CUDA(cudaMalloc(&dy, sizeof(float) * size_t(M) * N));
  {
    SlowX slow(early, x, dx + offset);
    CHECK_CUDA(gemvRows(dx + offset, M, dw + offset, K, N, db,
                        relu ? ops::Activation::relu : ops::Activation::none,
                        withResidual ? dres : nullptr, dy, slow.stream, early));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> y = download(dy, size_t(M) * N);
  double err = 0, scale = 1;
  compareLinear(
      M, K, N, [&](int m, int k) { return double(x[size_t(m) * K + k]); },
      [&](int k, int n) { return double(toFloat(w[size_t(n) * K + k])); },
      bias.data(), relu, withResidual ? res.data() : nullptr, y, err, scale);
  char line[200];
  std::snprintf(line, sizeof line,
                "gemvRows %s M=%d K=%d N=%d relu=%d residual=%d offset=%d%s",
                typeName<W>(), M, K, N, relu, withResidual, offset,
                early ? " early launch" : "");
  report(linearWithin(err, scale, K), line, err);
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(db);
  cudaFree(dres);
  cudaFree(dy);
}

/// gemvRowsNormOut: y = W x + bias + residual at one token, and the row
/// normalised (layer or RMS norm, with or without a bias) by the block that
/// finishes last, both against double precision; run three times on the
/// same counter (it must be left zero for the next launch), the residual
/// being y itself (in place, as a decode step's residual stream). N above
/// kGemvNormOutWidth is refused.
template <typename W>
void normOutCase(int K, int N, bool rms, bool normBias, std::mt19937 &rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(K), bias(N), res(N), scale(N), nb(N);
  std::vector<W> w(size_t(N) * K);
  for (float &v : x)
    v = g(rng);
  for (W &v : w)
    v = fromFloat<W>(g(rng) / std::sqrt(float(K)));
  for (float &v : bias)
    v = g(rng);
  for (float &v : res)
    v = 2.0f + g(rng); // a mean far from zero
  for (float &v : scale)
    v = 1.0f + 0.5f * g(rng);
  for (float &v : nb)
    v = g(rng);
  float *dx = upload(x), *db = upload(bias), *dy = upload(res),
        *ds = upload(scale), *dnb = upload(nb), *dout = nullptr;
  W *dw = upload(w);
  unsigned *counter = nullptr;
  CHECK_CUDA(cudaMalloc(&dout, sizeof(float) * N));
  CHECK_CUDA(cudaMalloc(&counter, sizeof(unsigned)));
  CHECK_CUDA(cudaMemset(counter, 0, sizeof(unsigned)));
  GemvNormOut o;
  o.scale = ds;
  o.bias = normBias ? dnb : nullptr;
  o.rms = rms;
  o.out = dout;
  o.counter = counter;
  // The reference after `calls` in-place calls: y_c = W x + b + y_{c-1}.
  const int calls = 3;
  std::vector<double> y(res.begin(), res.end());
  std::vector<double> wx(N);
  for (int n = 0; n < N; ++n) {
    double s = bias[size_t(n)];
    for (int k = 0; k < K; ++k)
      s += double(x[size_t(k)]) * toFloat(w[size_t(n) * K + k]);
    wx[size_t(n)] = s;
  }
  bool ok = true;
  double errY = 0, errN = 0;
  for (int c = 0; c < calls; ++c) {
    CHECK_CUDA(gemvRowsNormOut(dx, dw, K, N, db, ops::Activation::none, dy, dy,
                               o, nullptr));
    CHECK_CUDA(cudaDeviceSynchronize());
    for (int n = 0; n < N; ++n)
      y[size_t(n)] += wx[size_t(n)];
    double mean = 0, var = 0;
    if (!rms) {
      for (double v : y)
        mean += v;
      mean /= N;
    }
    for (double v : y)
      var += (v - mean) * (v - mean);
    const double inv = 1.0 / std::sqrt(var / N + o.epsilon);
    std::vector<float> gy = download(dy, size_t(N)), gn = download(dout, size_t(N));
    double scaleY = 1;
    for (int n = 0; n < N; ++n) {
      const double ref = (y[size_t(n)] - mean) * inv * scale[size_t(n)] +
                         (normBias ? nb[size_t(n)] : 0.0);
      errY = worse(errY, std::fabs(y[size_t(n)] - gy[size_t(n)]));
      errN = worse(errN, std::fabs(ref - gn[size_t(n)]));
      scaleY = std::max(scaleY, std::fabs(y[size_t(n)]));
    }
    ok = ok && errY <= 1e-5 * scaleY * std::sqrt(double(K)) / 8 + 1e-5 &&
         errN <= 1e-4;
  }
  unsigned left = 1;
  CHECK_CUDA(cudaMemcpy(&left, counter, sizeof left, cudaMemcpyDeviceToHost));
  char line[200];
  std::snprintf(line, sizeof line,
                "gemvRowsNormOut %s K=%d N=%d %s%s, %d calls in place "
                "(y err %.2e), counter left %u",
                typeName<W>(), K, N, rms ? "rms" : "layer",
                normBias ? " with bias" : "", calls, errY, left);
  report(ok && left == 0, line, errN);
  cudaFree(dx);
  cudaFree(db);
  cudaFree(dy);
  cudaFree(ds);
  cudaFree(dnb);
  cudaFree(dout);
  cudaFree(dw);
  cudaFree(counter);
}

/// normRows against a double-precision reference: rows in registers (up to
/// 8192 wide) and wider rows (three passes), layer and RMS, a mean far
/// from zero (`xMean`), an outlier channel in the first element
/// (`outlier`, 0 for none: a variance from sums shifted by x[0] cancels
/// there, 5e-3 off at 60 in a simulation), early launches.
void normRowsCase(int rows, int width, bool rms, bool bias, float xMean,
                  bool early, std::mt19937 &rng, float outlier = 0.0f) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(size_t(rows) * width), scale(width), nb(width);
  for (float &v : x)
    v = xMean + g(rng);
  if (outlier != 0.0f)
    for (int r = 0; r < rows; ++r)
      x[size_t(r) * width] = outlier;
  for (float &v : scale)
    v = 1.0f + 0.5f * g(rng);
  for (float &v : nb)
    v = g(rng);
  float *dx = upload(x), *ds = upload(scale), *dnb = upload(nb), *dy = nullptr;
  CHECK_CUDA(cudaMalloc(&dy, sizeof(float) * x.size()));
  const float eps = 1e-5f;
  CHECK_CUDA(normRows(dx, rows, width, ds, bias ? dnb : nullptr, eps, rms, dy,
                      nullptr, early));
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> got = download(dy, x.size());
  double err = 0;
  for (int r = 0; r < rows; ++r) {
    const float *row = x.data() + size_t(r) * width;
    double mean = 0, var = 0;
    if (!rms) {
      for (int i = 0; i < width; ++i)
        mean += row[i];
      mean /= width;
    }
    for (int i = 0; i < width; ++i)
      var += (row[i] - mean) * (row[i] - mean);
    const double inv = 1.0 / std::sqrt(var / width + eps);
    for (int i = 0; i < width; ++i) {
      const double ref = (row[i] - mean) * inv * scale[size_t(i)] +
                         (bias ? nb[size_t(i)] : 0.0);
      err = worse(err, std::fabs(ref - got[size_t(r) * width + i]));
    }
  }
  char line[160];
  std::snprintf(line, sizeof line,
                "normRows %d rows of %d, %s%s, mean %g%s%s", rows, width,
                rms ? "rms" : "layer", bias ? " with bias" : "",
                double(xMean), outlier != 0.0f ? ", x[0] an outlier" : "",
                early ? ", early" : "");
  // RMS of a far-off mean scales x down to about +-1 too.
  report(err <= 1e-4, line, err);
  cudaFree(dx);
  cudaFree(ds);
  cudaFree(dnb);
  cudaFree(dy);
}

void normOutRefusedCase() {
  GemvNormOut o;
  float *buf = nullptr;
  unsigned *counter = nullptr;
  CHECK_CUDA(cudaMalloc(&buf, sizeof(float) * 16));
  CHECK_CUDA(cudaMalloc(&counter, sizeof(unsigned)));
  o.scale = o.out = buf;
  o.counter = counter;
  const cudaError_t wide = gemvRowsNormOut<float>(
      buf, buf, 4, kGemvNormOutWidth + 4, nullptr, ops::Activation::none,
      nullptr, buf, o, nullptr);
  o.counter = nullptr;
  const cudaError_t noCounter = gemvRowsNormOut<float>(
      buf, buf, 4, 4, nullptr, ops::Activation::none, nullptr, buf, o, nullptr);
  char line[160];
  std::snprintf(line, sizeof line,
                "gemvRowsNormOut refuses N above %d (%s) and a missing counter (%s)",
                kGemvNormOutWidth, cudaGetErrorName(wide), cudaGetErrorName(noCounter));
  report(wide == cudaErrorNotSupported && noCounter == cudaErrorInvalidValue,
         line, 0.0);
  cudaFree(buf);
  cudaFree(counter);
}

/// A NaN score makes the row's output NaN, wherever the key falls: one
/// head of 64 over P past keys and a new one, key `nanKey` holding a NaN
/// (the keys after it in its warp's group of 4 are past the end, or not).
void attentionNaNCase(int P, int nanKey, std::mt19937 &rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int D = 64, T = P + 1;
  std::vector<float> q(D), pk(size_t(P) * D), pv(size_t(P) * D), k(D), v(D);
  for (auto *vec : {&q, &pk, &pv, &k, &v})
    for (float &e : *vec)
      e = g(rng);
  (nanKey < P ? pk[size_t(nanKey) * D + 3] : k[3]) = NAN;
  DecodeAttention a;
  a.B = a.Hq = a.Hk = a.Sq = a.Sk = 1;
  a.P = P;
  a.D = a.Dv = D;
  a.scale = 0.125f;
  a.q = upload(q);
  a.pastK = P ? upload(pk) : nullptr;
  a.pastV = P ? upload(pv) : nullptr;
  a.k = upload(k);
  a.v = upload(v);
  float *out = nullptr, *scratch = nullptr;
  int *counters = nullptr;
  CHECK_CUDA(cudaMalloc(&out, sizeof(float) * D));
  CHECK_CUDA(cudaMalloc(&scratch, std::max<size_t>(4, decodeAttentionScratchBytes(a))));
  CHECK_CUDA(cudaMalloc(&counters, sizeof(int)));
  CHECK_CUDA(cudaMemset(counters, 0, sizeof(int)));
  a.out = out;
  CHECK_CUDA(decodeAttention(a, scratch, counters, nullptr));
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> got = download(out, size_t(D));
  int nans = 0;
  for (float x : got)
    nans += x != x;
  char line[160];
  std::snprintf(line, sizeof line,
                "decodeAttention NaN score at key %d of %d: %d/%d outputs NaN",
                nanKey, T, nans, D);
  report(nans == D, line, 0.0);
  for (const void *ptr : {static_cast<const void *>(a.q),
                          static_cast<const void *>(a.pastK),
                          static_cast<const void *>(a.pastV),
                          static_cast<const void *>(a.k),
                          static_cast<const void *>(a.v)})
    cudaFree(const_cast<void *>(ptr));
  cudaFree(out);
  cudaFree(scratch);
  cudaFree(counters);
}

/// gemvRowsGroup: `Ns.size()` weights [N_g, K] over one x in one launch,
/// each member against the double-precision product; `bias`: every member
/// has one (else none); `offset` as in gemvCase (element loads).
enum class NormKind { none, layer, rms };

template <typename W>
void groupCase(int M, int K, std::vector<int> Ns, bool bias, bool relu,
               int offset, std::mt19937 &rng, NormKind normKind = NormKind::none,
               bool early = false, float xMean = 3.0f) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int count = int(Ns.size());
  std::vector<float> x(size_t(M) * K);
  for (float &v : x)
    v = xMean + 2.0f * g(rng); // a mean the layer norm removes
  float *dx = upload(x, size_t(offset));
  // The folded norm: scale, bias, and the rows the reference reads.
  std::vector<float> nScale(static_cast<size_t>(K)),
      nBias(static_cast<size_t>(K)), xn = x;
  for (float &v : nScale)
    v = 1.0f + 0.3f * g(rng);
  for (float &v : nBias)
    v = 0.5f * g(rng);
  const float eps = 1e-5f;
  if (normKind != NormKind::none)
    for (int m = 0; m < M; ++m) {
      double mean = 0, var = 0;
      if (normKind == NormKind::layer) {
        for (int k = 0; k < K; ++k)
          mean += x[size_t(m) * K + k];
        mean /= K;
      }
      for (int k = 0; k < K; ++k) {
        const double c = x[size_t(m) * K + k] - mean;
        var += c * c;
      }
      const double inv = 1.0 / std::sqrt(var / K + eps);
      for (int k = 0; k < K; ++k)
        xn[size_t(m) * K + k] = float(
            (x[size_t(m) * K + k] - mean) * inv * nScale[size_t(k)] +
            (normKind == NormKind::layer ? nBias[size_t(k)] : 0.0f));
    }
  float *dScale = upload(nScale), *dBias = upload(nBias);
  GemvNorm norm;
  norm.scale = dScale;
  norm.bias = normKind == NormKind::layer ? dBias : nullptr;
  norm.epsilon = eps;
  norm.rms = normKind == NormKind::rms;
  std::vector<std::vector<W>> w(count);
  std::vector<std::vector<float>> b(count);
  std::vector<W *> dw(count);
  std::vector<const W *> cdw(count);
  std::vector<float *> db(count), dy(count);
  std::vector<const float *> cdb(count);
  for (int q = 0; q < count; ++q) {
    w[q].resize(size_t(Ns[q]) * K);
    for (W &v : w[q])
      v = fromFloat<W>(g(rng) / std::sqrt(float(K)));
    b[q].resize(size_t(Ns[q]));
    for (float &v : b[q])
      v = g(rng);
    dw[q] = upload(w[q], size_t(offset));
    cdw[q] = dw[q] + offset;
    db[q] = upload(b[q]);
    cdb[q] = db[q];
    CHECK_CUDA(cudaMalloc(&dy[q], sizeof(float) * size_t(M) * Ns[q] + 4));
  }
  // The folding terms of each weight (W scale, W bias).
  std::vector<float *> terms(count, nullptr);
  if (normKind != NormKind::none) {
    for (int q = 0; q < count; ++q) {
      CHECK_CUDA(cudaMalloc(&terms[q], sizeof(float) * 2 * size_t(Ns[q]) + 4));
      CHECK_CUDA(gemvNormTerms<W>(cdw[q], K, Ns[q], dScale, norm.bias,
                                  terms[q], nullptr));
      norm.wScale[q] = terms[q];
      norm.wBias[q] = norm.bias ? terms[q] + Ns[q] : nullptr;
    }
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  cudaError_t status;
  {
    SlowX slow(early, x, dx + offset);
    status = gemvRowsGroup<W>(
        dx + offset, M, K, count, cdw.data(), Ns.data(),
        bias ? cdb.data() : nullptr,
        relu ? ops::Activation::relu : ops::Activation::none, nullptr,
        dy.data(), slow.stream, early,
        normKind == NormKind::none ? nullptr : &norm);
  }
  const char *kindName[] = {"", " norm=layer", " norm=rms"};
  std::string ns;
  for (int n : Ns)
    ns += (ns.empty() ? "" : ",") + std::to_string(n);
  char line[200];
  std::snprintf(line, sizeof line,
                "gemvRowsGroup %s M=%d K=%d N=%s bias=%d relu=%d offset=%d%s%s",
                typeName<W>(), M, K, ns.c_str(), bias, relu, offset,
                kindName[int(normKind)], early ? " early launch" : "");
  if (xMean != 3.0f)
    std::snprintf(line + std::strlen(line), sizeof line - std::strlen(line),
                  " x mean %g", double(xMean));
  double err = 0, scale = 1;
  CHECK_CUDA(status);
  CHECK_CUDA(cudaDeviceSynchronize());
  for (int q = 0; q < count; ++q) {
    const std::vector<float> y = download(dy[q], size_t(M) * Ns[q]);
    compareLinear(
        M, K, Ns[q], [&](int m, int k) { return double(xn[size_t(m) * K + k]); },
        [&](int k, int n) { return double(toFloat(w[q][size_t(n) * K + k])); },
        bias ? b[q].data() : nullptr, relu, nullptr, y, err, scale);
  }
  const bool ok = linearWithin(err, scale, K);
  for (int q = 0; q < count; ++q) {
    cudaFree(dw[q]);
    cudaFree(db[q]);
    cudaFree(dy[q]);
    cudaFree(terms[q]);
  }
  cudaFree(dx);
  cudaFree(dScale);
  cudaFree(dBias);
  report(ok, line, err);
}

enum class Mask { none, additive, boolean };

/// softmax(q k^T * scale + mask) v [B, Hq, Sq, Dv] in double: key(bh, j, d)
/// and val(bh, j, d) over T positions, the mask [B, 1, Sq, T], query i at
/// position i + T - Sq (the causal limit); a row that sees no key is 0.
template <class Key, class Val>
std::vector<double>
attentionReference(int B, int Hq, int Hk, int Sq, int T, int D, int Dv,
                   const std::vector<float> &q, Key key, Val val, Mask maskKind,
                   const std::vector<float> &maskF,
                   const std::vector<uint8_t> &maskB, float scale,
                   bool causal) {
  std::vector<double> ref(size_t(B) * Hq * Sq * Dv);
  std::vector<double> scoreRow(static_cast<size_t>(T)), num(static_cast<size_t>(Dv));
  double *sc = scoreRow.data();
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h)
      for (int i = 0; i < Sq; ++i) {
        const int bh = b * Hk + h / (Hq / Hk);
        const int jEnd = causal ? std::max(0, std::min(T, i + (T - Sq) + 1)) : T;
        double m = -INFINITY;
        for (int j = 0; j < jEnd; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += double(q[((size_t(b) * Hq + h) * Sq + i) * D + d]) * key(bh, j, d);
          dot *= scale;
          const size_t e = (size_t(b) * Sq + i) * T + j;
          if (maskKind == Mask::additive)
            dot += maskF[e];
          if (maskKind == Mask::boolean && !maskB[e])
            dot = -INFINITY;
          sc[j] = dot;
          m = std::max(m, dot);
        }
        double den = 0;
        std::fill(num.begin(), num.end(), 0.0);
        if (m != -INFINITY)
          for (int j = 0; j < jEnd; ++j) {
            const double p = std::exp(sc[j] - m);
            den += p;
            for (int d = 0; d < Dv; ++d)
              num[size_t(d)] += p * val(bh, j, d);
          }
        double *out = &ref[((size_t(b) * Hq + h) * Sq + i) * Dv];
        for (int d = 0; d < Dv; ++d)
          out[d] = m == -INFINITY ? 0.0 : num[size_t(d)] / den;
      }
  return ref;
}

/// The largest difference between `got` and `ref` (a NaN is the worst).
double maxError(const std::vector<double> &ref, const std::vector<float> &got) {
  double err = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    err = worse(err, std::fabs(ref[i] - got[i]));
  return err;
}

/// The largest difference between `got` and attentionReference's.
template <class Key, class Val>
double attentionError(int B, int Hq, int Hk, int Sq, int T, int D, int Dv,
                      const std::vector<float> &q, Key key, Val val,
                      Mask maskKind, const std::vector<float> &maskF,
                      const std::vector<uint8_t> &maskB, float scale,
                      bool causal, const std::vector<float> &got) {
  return maxError(attentionReference(B, Hq, Hk, Sq, T, D, Dv, q, key, val,
                                     maskKind, maskF, maskB, scale, causal),
                  got);
}

/// The same random mask over [B, 1, Sq, T] (broadcast over heads) in both
/// forms: additive (-inf or a small value) and boolean. It masks about a
/// fifth of the keys out, and the whole first row of batch 1 (an
/// all-masked row gives 0).
void randomMasks(int B, int Sq, int T, std::mt19937 &rng,
                 std::vector<float> &maskF, std::vector<uint8_t> &maskB) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> coin(0, 4);
  maskF.assign(size_t(B) * Sq * T, 0.0f);
  maskB.assign(size_t(B) * Sq * T, 1);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < Sq; ++i)
      for (int j = 0; j < T; ++j) {
        const bool off = coin(rng) == 0 || (b == 1 && i == 0);
        const size_t e = (size_t(b) * Sq + i) * T + j;
        maskF[e] = off ? -INFINITY : 0.25f * g(rng);
        maskB[e] = !off;
      }
}

/// x [B, A, C, W] with its middle dims swapped: [B, C, A, W] (a head-major
/// attention operand made token-major, or back).
std::vector<float> swapMiddle(const std::vector<float> &x, int B, int A, int C,
                              int W) {
  std::vector<float> y(x.size());
  for (int b = 0; b < B; ++b)
    for (int a = 0; a < A; ++a)
      for (int c = 0; c < C; ++c)
        for (int w = 0; w < W; ++w)
          y[((size_t(b) * C + c) * A + a) * W + w] =
              x[((size_t(b) * A + a) * C + c) * W + w];
  return y;
}

/// decodeAttention against the host. `tokenMajor`: q, the new keys and
/// values and the output are [B, S, H, .] (the present stays [B, H, T, .]).
/// `halfPast`: the past keys and values are float16 (a 16-bit KV cache);
/// the host reference takes the same rounded values.
void attentionCase(int B, int Hq, int Hk, int Sq, int P, int D, int Dv,
                   Mask maskKind, bool causal, std::mt19937 &rng,
                   bool early = false, bool pastReady = false,
                   bool tokenMajor = false, bool halfPast = false) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int Sk = Sq, T = P + Sk;
  std::vector<float> q(size_t(B) * Hq * Sq * D), pk(size_t(B) * Hk * P * D),
      pv(size_t(B) * Hk * P * Dv), k(size_t(B) * Hk * Sk * D),
      v(size_t(B) * Hk * Sk * Dv);
  for (auto *vec : {&q, &pk, &pv, &k, &v})
    for (float &e : *vec)
      e = g(rng);
  std::vector<__half> pkh, pvh;
  if (halfPast)
    for (auto [from, to] : {std::pair{&pk, &pkh}, std::pair{&pv, &pvh}})
      for (float &e : *from) {
        to->push_back(__float2half_rn(e));
        e = __half2float(to->back());
      }
  std::vector<float> maskF;
  std::vector<uint8_t> maskB;
  randomMasks(B, Sq, T, rng, maskF, maskB);
  DecodeAttention a;
  a.B = B;
  a.Hq = Hq;
  a.Hk = Hk;
  a.Sq = Sq;
  a.P = P;
  a.Sk = Sk;
  a.D = D;
  a.Dv = Dv;
  a.scale = 1.0f / std::sqrt(float(D));
  a.causal = causal;
  a.mStr[0] = int64_t(Sq) * T;
  a.mStr[1] = 0;
  a.mStr[2] = T;
  a.mStr[3] = 1;
  // q and the new keys in one buffer, which an early case's slow producer
  // writes: both must be read after the wait, the past (uploaded before)
  // may be read before it with pastReady.
  a.tokenMajor = tokenMajor;
  std::vector<float> qk = tokenMajor ? swapMiddle(q, B, Hq, Sq, D) : q;
  if (tokenMajor) {
    const std::vector<float> kt = swapMiddle(k, B, Hk, Sk, D);
    qk.insert(qk.end(), kt.begin(), kt.end());
  } else {
    qk.insert(qk.end(), k.begin(), k.end());
  }
  float *dqk = upload(qk);
  a.q = dqk;
  a.k = dqk + q.size();
  if (halfPast && P) {
    a.pastKHalf = reinterpret_cast<const uint16_t *>(upload(pkh));
    a.pastVHalf = reinterpret_cast<const uint16_t *>(upload(pvh));
  } else {
    a.pastK = P ? upload(pk) : nullptr;
    a.pastV = P ? upload(pv) : nullptr;
  }
  a.v = upload(tokenMajor ? swapMiddle(v, B, Hk, Sk, Dv) : v);
  a.pastReady = pastReady;
  if (maskKind == Mask::additive)
    a.maskF = upload(maskF);
  if (maskKind == Mask::boolean)
    a.maskB = upload(maskB);
  float *out = nullptr, *presK = nullptr, *presV = nullptr, *scratch = nullptr;
  int *counters = nullptr;
  const size_t rows = size_t(B) * Hq * Sq;
  CHECK_CUDA(cudaMalloc(&out, sizeof(float) * rows * Dv));
  CHECK_CUDA(cudaMalloc(&presK, sizeof(float) * size_t(B) * Hk * T * D));
  CHECK_CUDA(cudaMalloc(&presV, sizeof(float) * size_t(B) * Hk * T * Dv));
  CHECK_CUDA(cudaMalloc(&scratch, std::max<size_t>(4, decodeAttentionScratchBytes(a))));
  CHECK_CUDA(cudaMalloc(&counters, sizeof(int) * rows));
  CHECK_CUDA(cudaMemset(counters, 0, sizeof(int) * rows));
  CHECK_CUDA(cudaMemset(presK, 0, sizeof(float) * size_t(B) * Hk * T * D));
  CHECK_CUDA(cudaMemset(presV, 0, sizeof(float) * size_t(B) * Hk * T * Dv));
  a.out = out;
  a.presentK = presK;
  a.presentV = presV;
  {
    // Early: q and k are written over NaNs by a slow kernel the attention
    // is launched right behind.
    SlowX slow(early, qk, dqk);
    // Twice: the counters must be back at zero after the first launch.
    for (int rep = 0; rep < 2; ++rep)
      CHECK_CUDA(decodeAttention(a, scratch, counters, slow.stream, early));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> got = download(out, rows * size_t(Dv));
  if (tokenMajor)
    got = swapMiddle(got, B, Sq, Hq, Dv);
  std::vector<float> gotK = download(presK, size_t(B) * Hk * T * D);
  std::vector<float> gotV = download(presV, size_t(B) * Hk * T * Dv);
  std::vector<int> cnt = download(counters, rows);
  auto key = [&](int bh, int j, int d) {
    return j < P ? pk[(size_t(bh) * P + j) * D + d]
                 : k[(size_t(bh) * Sk + j - P) * D + d];
  };
  auto val = [&](int bh, int j, int d) {
    return j < P ? pv[(size_t(bh) * P + j) * Dv + d]
                 : v[(size_t(bh) * Sk + j - P) * Dv + d];
  };
  const double err = attentionError(B, Hq, Hk, Sq, T, D, Dv, q, key, val,
                                    maskKind, maskF, maskB, a.scale, causal,
                                    got);
  double presentErr = 0;
  for (int bh = 0; bh < B * Hk; ++bh)
    for (int j = P; j < T; ++j) {
      for (int d = 0; d < D; ++d)
        presentErr = worse(presentErr,
            std::fabs(gotK[(size_t(bh) * T + j) * D + d] - k[(size_t(bh) * Sk + j - P) * D + d]));
      for (int d = 0; d < Dv; ++d)
        presentErr = worse(presentErr,
            std::fabs(gotV[(size_t(bh) * T + j) * Dv + d] - v[(size_t(bh) * Sk + j - P) * Dv + d]));
    }
  bool countersZero = std::all_of(cnt.begin(), cnt.end(), [](int c) { return c == 0; });
  char line[200];
  std::snprintf(line, sizeof line,
                "decodeAttention B=%d Hq=%d Hk=%d Sq=%d P=%d D=%d Dv=%d mask=%s causal=%d%s%s%s%s",
                B, Hq, Hk, Sq, P, D, Dv,
                maskKind == Mask::none ? "none" : maskKind == Mask::additive ? "additive" : "bool",
                causal, early ? " early launch" : "",
                pastReady ? ", past prefetched" : "",
                tokenMajor ? ", token-major" : "",
                halfPast ? ", fp16 past" : "");
  report(err < 2e-5 && presentErr == 0 && countersZero, line, std::max(err, presentErr));
  for (const void *p : {static_cast<const void *>(dqk), static_cast<const void *>(a.pastK),
                        static_cast<const void *>(a.pastV),
                        static_cast<const void *>(a.pastKHalf),
                        static_cast<const void *>(a.pastVHalf),
                        static_cast<const void *>(a.v), static_cast<const void *>(a.maskF),
                        static_cast<const void *>(a.maskB)})
    if (p)
      cudaFree(const_cast<void *>(p));
  cudaFree(out);
  cudaFree(presK);
  cudaFree(presV);
  cudaFree(scratch);
  cudaFree(counters);
}

/// prefillAttention against the host, in each of its arithmetics: present
/// keys and values of P past and Sq new positions, a mask over [B, 1, Sq,
/// T] as attentionCase's (the whole first row of batch 1 masked out), or
/// with `window` > 0 a band: row i sees keys i + P - window + 1 .. i + P,
/// hidden ones at `hidden` (additive: float32's lowest or -10000, as exports
/// write a causal mask) or false, so that query tiles see spans of the keys. `timed`: also
/// prints the kernel's time (the median of 5 runs).
/// `tokenMajor`: q, k, v and the output are [B, S, H, .].
void prefillAttentionCase(int B, int Hq, int Hk, int Sq, int P, int D, int Dv,
                          Mask maskKind, bool causal, std::mt19937 &rng,
                          bool timed = false, int window = 0,
                          float hidden = std::numeric_limits<float>::lowest(),
                          bool tokenMajor = false) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int T = P + Sq;
  std::vector<float> q(size_t(B) * Hq * Sq * D), k(size_t(B) * Hk * T * D),
      v(size_t(B) * Hk * T * Dv);
  for (auto *vec : {&q, &k, &v})
    for (float &e : *vec)
      e = g(rng);
  std::vector<float> maskF;
  std::vector<uint8_t> maskB;
  randomMasks(B, Sq, T, rng, maskF, maskB);
  if (window > 0)
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < Sq; ++i)
        for (int j = 0; j < T; ++j) {
          const bool seen = j <= i + P && j > i + P - window;
          const size_t e = (size_t(b) * Sq + i) * T + j;
          maskF[e] = seen ? 0.0f : hidden;
          maskB[e] = seen;
        }
  PrefillAttention a;
  a.tokenMajor = a.kvTokenMajor = tokenMajor;
  a.q = upload(tokenMajor ? swapMiddle(q, B, Hq, Sq, D) : q);
  a.k = upload(tokenMajor ? swapMiddle(k, B, Hk, T, D) : k);
  a.v = upload(tokenMajor ? swapMiddle(v, B, Hk, T, Dv) : v);
  if (maskKind == Mask::additive)
    a.maskF = upload(maskF);
  if (maskKind == Mask::boolean)
    a.maskB = upload(maskB);
  a.mStr[0] = int64_t(Sq) * T;
  a.mStr[2] = T;
  a.mStr[3] = 1;
  a.B = B;
  a.Hq = Hq;
  a.Hk = Hk;
  a.Sq = Sq;
  a.T = T;
  a.D = D;
  a.Dv = Dv;
  a.scale = 1.0f / std::sqrt(float(D));
  a.causal = causal;
  const size_t outs = size_t(B) * Hq * Sq * Dv;
  float *out = nullptr;
  void *scratch = nullptr;
  CHECK_CUDA(cudaMalloc(&out, sizeof(float) * outs));
  // The most any arithmetic needs (the tensor cores' rounded keys and
  // values).
  const size_t scratchBytes = std::max<size_t>(
      16, prefillAttentionScratchBytes(a, PromptMath::f16));
  CHECK_CUDA(cudaMalloc(&scratch, scratchBytes));
  a.out = out;
  auto key = [&](int bh, int j, int d) { return k[(size_t(bh) * T + j) * D + d]; };
  auto val = [&](int bh, int j, int d) { return v[(size_t(bh) * T + j) * Dv + d]; };
  const std::vector<double> ref =
      attentionReference(B, Hq, Hk, Sq, T, D, Dv, q, key, val, maskKind, maskF,
                         maskB, a.scale, causal);
  // Tolerances: fp32 as the decode kernel's; 16-bit operands about 8 units
  // of their rounding (2^-11, 2^-8) on values of about 1.
  const struct {
    PromptMath math;
    const char *name;
    double tolerance;
  } maths[] = {{PromptMath::f32, "fp32", 2e-5},
               {PromptMath::f16, "fp16 mma", 4e-3},
               {PromptMath::bf16, "bf16 mma", 3.2e-2}};
  // Token-major keys without a past: on the tensor cores the rounding
  // also writes them head-major in fp32 (a prompt's present), which must
  // equal k and v; fp32 arithmetic refuses the copies.
  float *copies = nullptr;
  if (tokenMajor && P == 0) {
    CHECK_CUDA(cudaMalloc(&copies, sizeof(float) * (k.size() + v.size())));
    a.kCopy = copies;
    a.vCopy = copies + k.size();
    const cudaError_t refused =
        prefillAttention(a, PromptMath::f32, scratch, nullptr);
    report(refused == cudaErrorInvalidValue,
           "prefillAttention refuses present copies in fp32", 0.0);
  }
  for (const auto &m : maths) {
    CHECK_CUDA(cudaMemset(out, 0xff, sizeof(float) * outs)); // NaNs
    CHECK_CUDA(cudaMemset(scratch, 0xff, scratchBytes)); // NaNs
    PrefillAttention run = a;
    if (m.math == PromptMath::f32)
      run.kCopy = run.vCopy = nullptr;
    if (run.kCopy)
      CHECK_CUDA(cudaMemset(copies, 0xff, sizeof(float) * (k.size() + v.size())));
    CHECK_CUDA(prefillAttention(run, m.math, scratch, nullptr));
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> got = download(out, outs);
    if (tokenMajor)
      got = swapMiddle(got, B, Sq, Hq, Dv);
    if (run.kCopy) {
      const std::vector<float> kc = download(copies, k.size()),
                               vc = download(copies + k.size(), v.size());
      char line[200];
      std::snprintf(line, sizeof line,
                    "prefillAttention %s B=%d Hq=%d Hk=%d Sq=%d D=%d Dv=%d: "
                    "the presents written with the rounding equal k and v",
                    m.name, B, Hq, Hk, Sq, D, Dv);
      report(kc == k && vc == v, line, 0.0);
    }
    double us = 0;
    if (timed) {
      cudaEvent_t e0, e1;
      CHECK_CUDA(cudaEventCreate(&e0));
      CHECK_CUDA(cudaEventCreate(&e1));
      std::vector<double> runs;
      for (int rep = 0; rep < 5; ++rep) {
        CHECK_CUDA(cudaEventRecord(e0));
        CHECK_CUDA(prefillAttention(run, m.math, scratch, nullptr));
        CHECK_CUDA(cudaEventRecord(e1));
        CHECK_CUDA(cudaEventSynchronize(e1));
        float ms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        runs.push_back(ms * 1e3);
      }
      std::sort(runs.begin(), runs.end());
      us = runs[2];
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
    }
    const double err = maxError(ref, got);
    char line[240];
    std::snprintf(line, sizeof line,
                  "prefillAttention %s B=%d Hq=%d Hk=%d Sq=%d P=%d D=%d Dv=%d mask=%s%s causal=%d%s%s",
                  m.name, B, Hq, Hk, Sq, P, D, Dv,
                  maskKind == Mask::none ? "none" : maskKind == Mask::additive ? "additive" : "bool",
                  window ? (" window " + std::to_string(window)).c_str() : "", causal,
                  tokenMajor ? " token-major" : "",
                  timed ? (" " + std::to_string(us) + " us").c_str() : "");
    report(err < m.tolerance, line, err);
  }
  for (const void *p : {static_cast<const void *>(a.q), static_cast<const void *>(a.k),
                        static_cast<const void *>(a.v), static_cast<const void *>(a.maskF),
                        static_cast<const void *>(a.maskB), static_cast<const void *>(out),
                        static_cast<const void *>(scratch), static_cast<const void *>(copies)})
    if (p)
      cudaFree(const_cast<void *>(p));
}

/// embeddingRows against the host: n lookups of rows of D from a table of
/// V rows (fp16 or fp32), or the sum of two lookups (token and position
/// tables with their own ids), ids including the first and last rows.
/// Equal bit for bit: one float conversion (and one float add) each.
template <typename T>
void embeddingCase(int64_t n, int64_t D, bool pair, bool early,
                   std::mt19937 &rng) {
  const int64_t V = 50, V2 = 300;
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<T> table(size_t(V * D)), table2(size_t(V2 * D));
  for (T &v : table)
    v = fromFloat<T>(g(rng));
  for (T &v : table2)
    v = fromFloat<T>(g(rng));
  std::vector<int64_t> ids(static_cast<size_t>(n)), ids2(ids);
  std::uniform_int_distribution<int64_t> row(0, V - 1), row2(0, V2 - 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = row(rng);
    ids2[i] = row2(rng);
  }
  ids[0] = 0; // the tables' first and last rows
  ids2[0] = V2 - 1;
  if (n > 1)
    ids[1] = V - 1;
  if (n > 3) { // negative ids count from the end, as ONNX Gather's do
    ids[2] = -1;
    ids2[2] = -V2;
    ids[3] = -V;
    ids2[3] = -7;
  }
  T *dt = upload(table), *dt2 = upload(table2);
  int64_t *di = upload(ids), *di2 = upload(ids2);
  float *dout = nullptr;
  CHECK_CUDA(cudaMalloc(&dout, sizeof(float) * size_t(std::max<int64_t>(1, n * D))));
  CHECK_CUDA(cudaMemset(dout, 0xff, sizeof(float) * size_t(n * D))); // NaNs
  CHECK_CUDA(embeddingRows(dt, V, di, pair ? dt2 : nullptr, V2,
                           pair ? di2 : nullptr, std::is_same_v<T, __half>, n,
                           D, dout, nullptr, early));
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> got = download(dout, size_t(n * D));
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < D; ++c) {
      const int64_t r = ids[size_t(i)], r2 = ids2[size_t(i)];
      float want = toFloat(table[size_t((r < 0 ? r + V : r) * D + c)]);
      if (pair)
        want += toFloat(table2[size_t((r2 < 0 ? r2 + V2 : r2) * D + c)]);
      const float v = got[size_t(i * D + c)];
      if (std::memcmp(&v, &want, sizeof v) != 0)
        ++wrong;
    }
  char line[160];
  std::snprintf(line, sizeof line, "embeddingRows %lld ids, rows of %lld, %s%s%s: %lld wrong",
                (long long)n, (long long)D,
                std::is_same_v<T, __half> ? "fp16" : "fp32",
                pair ? ", sum of two tables" : "", early ? ", early" : "",
                (long long)wrong);
  report(wrong == 0, line, 0.0);
  cudaFree(dt);
  cudaFree(dt2);
  cudaFree(di);
  cudaFree(di2);
  cudaFree(dout);
}

/// argmaxRows against std::max_element on every row: random rows, ties
/// (the first of equal maxima, in one block's span and across spans), NaNs
/// (skipped, but a NaN first element gives 0), all -inf, and the maximum in
/// the last element. Two calls on one scratch with new rows between (its
/// counters reset themselves), the ids checked on the device and in the
/// pinned host buffer the kernel writes. `early`: launched early behind a
/// slow producer of the rows (as the last node of a decode step's graph).
void argmaxCase(int rows, int width, std::mt19937 &rng, bool early = false) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(size_t(rows) * width);
  auto at = [&](int r, int j) -> float & { return x[size_t(r) * width + j]; };
  auto fill = [&] {
    if (x.size() > (size_t(1) << 24)) { // many rows: a cheaper generator
      uint32_t h = rng();
      for (float &v : x) {
        h = h * 1664525u + 1013904223u;
        v = float(h >> 8) / float(1 << 24);
      }
    } else {
      for (float &v : x)
        v = g(rng);
    }
    if (rows >= 7 && width >= 8) {
      at(1, width / 3) = at(1, width - 2) = 100.0f; // a tie: the first
      at(2, 0) = NAN;                               // NaN first: 0
      at(3, width / 2) = NAN;                       // NaN later: skipped
      at(3, width / 2 + 1) = 50.0f;
      for (int j = 0; j < width; ++j)
        at(4, j) = -INFINITY;                       // all -inf: 0
      at(5, width - 1) = 1e30f;                     // the last element
      at(6, 1) = at(6, 2) = 7e20f;                  // a tie in one span
    }
  };
  const size_t scratchBytes = argmaxScratchBytes(rows, width);
  void *scratch = nullptr;
  if (scratchBytes) {
    CHECK_CUDA(cudaMalloc(&scratch, scratchBytes));
    CHECK_CUDA(cudaMemset(scratch, 0, scratchBytes));
  }
  int64_t *dOut = nullptr, *hOut = nullptr;
  CHECK_CUDA(cudaMalloc(&dOut, sizeof(int64_t) * rows));
  CHECK_CUDA(cudaMallocHost(&hOut, sizeof(int64_t) * rows));
  int wrong = 0, wrongHost = 0;
  for (int call = 0; call < 2; ++call) {
    fill();
    float *dx = upload(x);
    std::fill(hOut, hOut + rows, int64_t(-1));
    {
      SlowX slow(early, x, dx);
      CHECK_CUDA(argmaxRows(dx, rows, width, dOut, scratch,
                            call == 0 ? hOut : nullptr, slow.stream, early));
      CHECK_CUDA(cudaDeviceSynchronize());
    }
    std::vector<int64_t> got = download(dOut, size_t(rows));
    for (int r = 0; r < rows; ++r) {
      const float *row = x.data() + size_t(r) * width;
      const int64_t want = std::max_element(row, row + width) - row;
      wrong += got[size_t(r)] != want;
      wrongHost += call == 0 ? hOut[r] != want : hOut[r] != -1;
    }
    cudaFree(dx);
  }
  char line[160];
  std::snprintf(line, sizeof line,
                "argmaxRows %d rows of %d%s, two calls: %d rows differ, %d "
                "in the host's copy",
                rows, width, early ? " (early, slow producer)" : "", wrong,
                wrongHost);
  report(wrong == 0 && wrongHost == 0, line, double(wrong + wrongHost));
  cudaFree(scratch);
  cudaFree(dOut);
  cudaFreeHost(hOut);
}

/// One scratch through calls of changing shape, zeroed where the shape
/// changes and not otherwise, as the runtime's flushDownloads does: 8
/// rows, 1, 1 again, 8, 3 rows of 4099, 8.
void argmaxShapesCase(std::mt19937 &rng) {
  const int shapes[][2] = {{8, 50272}, {1, 50272}, {1, 50272},
                           {8, 50272}, {3, 4099},  {8, 50272}};
  size_t most = 0;
  for (const auto &sh : shapes)
    most = std::max(most, argmaxScratchBytes(sh[0], sh[1]));
  void *scratch = nullptr;
  int64_t *dOut = nullptr;
  CHECK_CUDA(cudaMalloc(&scratch, most));
  CHECK_CUDA(cudaMalloc(&dOut, sizeof(int64_t) * 8));
  std::normal_distribution<float> g(0.0f, 1.0f);
  int wrong = 0, last[2] = {0, 0};
  for (const auto &sh : shapes) {
    const int rows = sh[0], width = sh[1];
    if (rows != last[0] || width != last[1])
      CHECK_CUDA(cudaMemset(scratch, 0, argmaxScratchBytes(rows, width)));
    last[0] = rows;
    last[1] = width;
    std::vector<float> x(size_t(rows) * width);
    for (float &v : x)
      v = g(rng);
    float *dx = upload(x);
    CHECK_CUDA(argmaxRows(dx, rows, width, dOut, scratch, nullptr, nullptr));
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<int64_t> got = download(dOut, size_t(rows));
    for (int r = 0; r < rows; ++r) {
      const float *row = x.data() + size_t(r) * width;
      wrong += got[size_t(r)] != std::max_element(row, row + width) - row;
    }
    cudaFree(dx);
  }
  report(wrong == 0,
         "argmaxRows on one scratch through six calls of changing shape",
         double(wrong));
  cudaFree(scratch);
  cudaFree(dOut);
}

/// argmaxRows refuses a wide row without scratch, a negative width.
void argmaxRefusedCase() {
  float *dx = nullptr;
  int64_t *dOut = nullptr;
  CHECK_CUDA(cudaMalloc(&dx, sizeof(float) * 4096));
  CHECK_CUDA(cudaMalloc(&dOut, sizeof(int64_t)));
  const bool noScratch = argmaxRows(dx, 1, 4096, dOut, nullptr, nullptr,
                                    nullptr) == cudaErrorInvalidValue;
  const bool badWidth = argmaxRows(dx, 1, -1, dOut, nullptr, nullptr,
                                   nullptr) == cudaErrorInvalidValue;
  const bool narrow = argmaxScratchBytes(3, 2048) == 0 &&
                      argmaxScratchBytes(1, 2049) > 0;
  cudaGetLastError();
  report(noScratch && badWidth && narrow,
         "argmaxRows refuses a wide row without scratch and a negative width",
         0.0);
  cudaFree(dx);
  cudaFree(dOut);
}
} // namespace

int main() {
  std::mt19937 rng(7);
  for (int M : {1, 2, 3, 5, 8}) {
    gemvCase<__half>(M, 2048, 2048, false, false, 0, rng);
    gemvCase<float>(M, 512, 384, true, true, 0, rng);
  }
  gemvCase<__half>(1, 8192, 256, false, true, 0, rng);
  gemvCase<__half>(4, 2048, 1030, true, false, 0, rng); // N not a multiple of 4
  gemvCase<__half>(2, 130, 37, true, true, 0, rng);     // rows of 260 bytes
  gemvCase<__half>(3, 256, 64, false, false, 1, rng);   // offset: element loads
  gemvCase<float>(6, 99, 50, true, true, 0, rng);
  gemvCase<float>(1, 1024, 64, false, false, 3, rng);
  // Programmatic dependent launches after a slow producer of x.
  gemvCase<__half>(1, 2048, 2048, false, true, 0, rng, true);
  gemvCase<__half>(4, 8192, 2048, true, false, 0, rng, true);
  gemvCase<__half>(2, 130, 37, true, true, 0, rng, true);
  gemvCase<float>(3, 512, 384, true, true, 0, rng, true);
  // 3-8 tokens of fp16 weights run on tensor cores (x split into two
  // fp16 parts; x rounded to fp16 alone fails the tolerance above):
  // OPT-6.7B shapes, a row count past a block's 16, early launches.
  gemvCase<__half>(8, 4096, 4096, false, true, 0, rng);
  gemvCase<__half>(4, 16384, 1024, true, false, 0, rng);
  gemvCase<__half>(3, 4096, 1000, true, true, 0, rng);
  gemvCase<__half>(8, 2048, 520, false, true, 0, rng, true);

  // A norm of the output row in the GEMV's last block: OPT-6.7B and 1.3B
  // widths, a width not a multiple of the block's threads.
  normOutCase<__half>(4096, 4096, false, true, rng);
  normOutCase<__half>(16384, 4096, false, true, rng);
  normOutCase<__half>(2048, 2048, true, false, rng);
  normOutCase<float>(256, 1000, false, false, rng);
  normOutRefusedCase();
  normRowsCase(1, 4096, false, true, 0.0f, true, rng); // OPT-6.7B's width
  normRowsCase(3, 4096, false, true, 40.0f, false, rng);
  normRowsCase(2, 2048, true, false, 3.0f, true, rng);
  normRowsCase(2, 8192, false, false, -20.0f, false, rng);
  normRowsCase(5, 1000, false, true, 5.0f, false, rng); // a partial last load
  normRowsCase(1, 1, false, true, 2.0f, false, rng);
  normRowsCase(2, 10000, false, true, 40.0f, false, rng); // three passes
  normRowsCase(2, 10000, true, true, 1.0f, true, rng);
  normRowsCase(1, 4096, false, true, 0.0f, true, rng, 60.0f);
  normRowsCase(2, 2048, false, false, 1.0f, false, rng, -300.0f);
  normRowsCase(2, 10000, false, true, 0.0f, false, rng, 100.0f);
  // Embedding lookups: OPT-6.7B's one-token step (the pair of token and
  // position tables, early), a prompt, a width not a multiple of anything.
  embeddingCase<__half>(1, 4096, true, true, rng);
  embeddingCase<__half>(71, 4096, true, false, rng);
  embeddingCase<__half>(3, 1000, false, true, rng);
  embeddingCase<float>(5, 768, true, false, rng);
  embeddingCase<float>(2, 33, false, false, rng);
  argmaxCase(8, 50272, rng); // OPT's vocabulary: 25 blocks a row
  argmaxCase(1, 50272, rng);
  argmaxCase(7, 256, rng);   // a byte-level model's: one block a row
  argmaxCase(7, 2048, rng);  // one block's span exactly
  argmaxCase(7, 2049, rng);  // one element past it
  argmaxCase(3, 4099, rng);  // not a multiple of the block's loads
  argmaxCase(2, 1, rng);
  argmaxCase(65537, 2050, rng); // more rows than a grid's y
  argmaxCase(8, 50272, rng, true);
  argmaxCase(7, 256, rng, true);
  argmaxShapesCase(rng);
  argmaxRefusedCase();

  // Groups: q, k, v shapes; uneven members (a partial block of 4 rows at
  // each member's end); fp32; element loads.
  groupCase<__half>(1, 2048, {2048, 2048, 2048}, true, false, 0, rng);
  groupCase<__half>(3, 512, {70, 4, 129, 33}, true, true, 0, rng);
  groupCase<float>(8, 256, {64, 64}, false, false, 0, rng);
  groupCase<__half>(2, 130, {37, 5}, true, false, 1, rng);
  // Folded norms: layer and RMS, 1-8 rows of 130-16384, element loads,
  // early launches, and a mean far from zero (the row sums are taken
  // around x[0]).
  groupCase<__half>(1, 4096, {4096, 4096, 4096}, true, false, 0, rng, NormKind::layer);
  groupCase<__half>(3, 2048, {256, 100}, true, true, 0, rng, NormKind::layer);
  groupCase<float>(2, 512, {64}, false, false, 0, rng, NormKind::rms);
  groupCase<__half>(1, 2048, {512}, true, true, 0, rng, NormKind::layer, true);
  groupCase<__half>(4, 4096, {64}, true, false, 0, rng, NormKind::layer);
  groupCase<__half>(1, 130, {16}, true, false, 1, rng, NormKind::rms);
  groupCase<__half>(2, 130, {37, 5}, false, false, 1, rng, NormKind::layer);
  groupCase<__half>(8, 16384, {40}, true, false, 0, rng, NormKind::layer);
  groupCase<float>(1, 4096, {1024}, true, false, 0, rng, NormKind::rms, true);
  groupCase<__half>(1, 4096, {1024}, true, false, 0, rng, NormKind::layer, false, 100.0f);

  // B, Hq, Hk, Sq, P, D, Dv, mask, causal
  attentionCase(1, 4, 4, 1, 0, 64, 64, Mask::none, false, rng);     // one key
  attentionCase(1, 4, 4, 1, 31, 64, 64, Mask::none, false, rng);    // one chunk
  attentionCase(2, 8, 2, 1, 257, 64, 64, Mask::additive, false, rng); // GQA, 9 chunks
  attentionCase(2, 4, 4, 3, 100, 64, 32, Mask::boolean, true, rng);  // causal, Dv != D
  attentionCase(2, 4, 2, 2, 70, 30, 30, Mask::additive, true, rng);  // scalar staging
  attentionCase(1, 2, 2, 8, 0, 128, 128, Mask::none, true, rng);     // prefill-like
  attentionCase(1, 32, 32, 1, 200, 64, 64, Mask::none, false, rng); // a block a row, 2 passes
  attentionCase(1, 32, 32, 1, 255, 128, 128, Mask::none, false, rng); // 256 keys, a block a row
  attentionCase(2, 8, 2, 1, 256, 64, 64, Mask::additive, false, rng); // 257 keys: split
  attentionCase(1, 32, 32, 1, 1024, 64, 64, Mask::none, false, rng); // long past
  attentionCase(1, 32, 32, 1, 2046, 128, 128, Mask::none, false, rng); // 4 passes a block
  attentionCase(2, 8, 4, 1, 600, 80, 80, Mask::boolean, false, rng); // 3 elements a lane
  attentionCase(1, 32, 32, 1, 130, 64, 64, Mask::additive, false, rng, true);
  attentionCase(2, 4, 2, 2, 70, 30, 30, Mask::boolean, true, rng, true);
  // The past prefetched before the wait (pastReady): early behind the slow
  // producer of q and k, and normally launched; one and several passes,
  // memory and cluster merges, causal rows, no past.
  attentionCase(1, 32, 32, 1, 256, 128, 128, Mask::additive, false, rng, true, true);
  attentionCase(1, 32, 32, 1, 191, 128, 128, Mask::none, false, rng, true, true);
  attentionCase(2, 8, 2, 1, 600, 80, 80, Mask::boolean, false, rng, true, true);
  attentionCase(2, 4, 2, 3, 70, 30, 30, Mask::additive, true, rng, true, true);
  attentionCase(1, 4, 4, 1, 0, 64, 64, Mask::none, false, rng, true, true);
  attentionCase(1, 32, 32, 1, 256, 128, 128, Mask::none, false, rng, false, true);
  // B, Hq, Hk, Sq, P, D, Dv, mask, causal: prompts (prefillAttention).
  prefillAttentionCase(1, 2, 2, 9, 0, 64, 64, Mask::none, true, rng);        // part of a tile
  prefillAttentionCase(2, 8, 2, 130, 0, 64, 64, Mask::additive, true, rng);  // GQA, 3 row tiles
  prefillAttentionCase(2, 4, 4, 100, 37, 64, 32, Mask::boolean, true, rng);  // a past, Dv != D
  prefillAttentionCase(2, 4, 2, 70, 0, 30, 30, Mask::additive, false, rng);  // D not a multiple of 4
  prefillAttentionCase(1, 2, 2, 65, 200, 128, 128, Mask::none, true, rng);   // 128-wide heads
  prefillAttentionCase(2, 2, 1, 64, 3, 80, 96, Mask::boolean, false, rng);   // D 80, Dv 96
  prefillAttentionCase(1, 1, 1, 1, 5, 16, 16, Mask::none, true, rng);        // one row
  prefillAttentionCase(1, 3, 3, 77, 5, 20, 12, Mask::none, true, rng);      // D, Dv not multiples of 8
  prefillAttentionCase(1, 32, 32, 1024, 0, 64, 64, Mask::none, true, rng, true); // OPT-1.3B's prompt
  prefillAttentionCase(1, 32, 32, 128, 0, 64, 64, Mask::none, true, rng, true);
  // Masks that hide whole tiles of keys: a band of 50 keys (spans that
  // start past 0 and end before T), and a causal mask given as data, as
  // OPT's exports give it (-10000), timed at OPT-1.3B's prompt.
  prefillAttentionCase(2, 4, 2, 200, 30, 64, 64, Mask::additive, false, rng, false, 50);
  prefillAttentionCase(2, 4, 2, 200, 30, 64, 64, Mask::boolean, true, rng, false, 50);
  prefillAttentionCase(1, 2, 2, 150, 0, 128, 96, Mask::additive, false, rng, false, 150);
  prefillAttentionCase(1, 32, 32, 1024, 0, 64, 64, Mask::additive, false, rng, true, 1024, -10000.0f);
  // Token-major operands (sparsec-fold-head-transposes): q and the output
  // a row Hq * D apart, the keys and values Hk * D.
  const float lowest = std::numeric_limits<float>::lowest();
  prefillAttentionCase(2, 8, 2, 130, 0, 64, 64, Mask::additive, true, rng, false, 0, lowest, true);
  prefillAttentionCase(2, 4, 4, 100, 37, 64, 32, Mask::boolean, true, rng, false, 0, lowest, true);
  prefillAttentionCase(2, 4, 2, 70, 0, 30, 30, Mask::additive, false, rng, false, 0, lowest, true);
  prefillAttentionCase(1, 2, 2, 65, 200, 128, 128, Mask::none, true, rng, false, 0, lowest, true);
  prefillAttentionCase(1, 32, 32, 1024, 0, 64, 64, Mask::none, true, rng, true, 0, lowest, true);
  attentionCase(2, 8, 2, 1, 257, 64, 64, Mask::additive, false, rng, false, false, true);
  attentionCase(2, 4, 4, 3, 100, 64, 32, Mask::boolean, true, rng, false, false, true);
  attentionCase(2, 4, 2, 2, 70, 30, 30, Mask::additive, true, rng, true, true, true);
  // A float16 past (a 16-bit KV cache), kept in pairs and widened as it
  // is used: one and several passes, cluster and memory merges, GQA, 3
  // elements a lane, early with the past prefetched, token-major, batch
  // 16, no past, 64-wide heads (a 4-byte load a lane), Dv != D, and new
  // rows on both sides of a block's key range (causal, 4 new rows from
  // key 30: blocks of 32 keys).
  attentionCase(1, 32, 32, 1, 255, 128, 128, Mask::none, false, rng, false, false, false, true);
  attentionCase(1, 32, 32, 1, 2046, 128, 128, Mask::additive, false, rng, false, false, false, true);
  attentionCase(2, 8, 2, 1, 600, 80, 80, Mask::boolean, false, rng, true, true, false, true);
  attentionCase(2, 4, 2, 2, 70, 30, 30, Mask::additive, true, rng, true, true, true, true);
  attentionCase(16, 32, 32, 1, 1040, 128, 128, Mask::additive, false, rng, true, true, true, true);
  attentionCase(1, 4, 4, 1, 0, 64, 64, Mask::none, false, rng, true, true, false, true);
  attentionCase(2, 8, 2, 1, 257, 64, 64, Mask::additive, false, rng, false, false, false, true);
  attentionCase(1, 4, 4, 2, 100, 64, 32, Mask::boolean, true, rng, true, true, true, true);
  attentionCase(1, 4, 4, 4, 30, 64, 64, Mask::additive, true, rng, false, false, false, true);
  attentionCase(2, 4, 2, 5, 29, 32, 32, Mask::boolean, true, rng, true, true, true, true);
  // NaN scores: the last key of a warp's group followed by keys past the
  // end (5 of 6), inside a group (2 of 6), in a later chunk (300 of 501).
  attentionNaNCase(5, 5, rng);
  attentionNaNCase(5, 2, rng);
  attentionNaNCase(500, 300, rng);
  // bfloat16 weights: decode GEMVs of 1-8 tokens (from 3 on tensor cores,
  // x in three bf16 parts; offset 1: CUDA cores), element loads, the early
  // launch, the folded norm's terms and output, grouped GEMVs with the norm
  // (CUDA cores) and without (3 tokens: tensor cores).
  gemvCase<__nv_bfloat16>(1, 4096, 4096, false, true, 0, rng);
  gemvCase<__nv_bfloat16>(4, 2048, 1030, true, false, 0, rng);
  gemvCase<__nv_bfloat16>(8, 4096, 1000, true, true, 0, rng);
  gemvCase<__nv_bfloat16>(5, 4096, 4096, false, true, 0, rng, true);
  gemvCase<__nv_bfloat16>(3, 256, 64, false, false, 1, rng);
  gemvCase<__nv_bfloat16>(2, 8192, 2048, true, false, 0, rng, true);
  normOutCase<__nv_bfloat16>(4096, 4096, false, true, rng);
  groupCase<__nv_bfloat16>(1, 4096, {4096, 4096, 4096}, true, false, 0, rng,
                           NormKind::layer);
  groupCase<__nv_bfloat16>(3, 512, {70, 4, 129, 33}, true, true, 0, rng);
  // LtGemm, the prompt GEMMs' fused epilogues: both weight layouts, every
  // operand type, bias and ReLU alone and together, a residual in its own
  // buffer and in place, and the epilogues it refuses.
  ltCase<float>(64, 512, 384, true, true, true, 0, rng);
  ltCase<__half>(100, 1024, 520, false, true, false, 1, rng);
  ltCase<__nv_bfloat16>(33, 768, 256, true, false, true, 0, rng);
  ltCase<__half>(128, 4096, 1024, true, true, false, 2, rng);
  ltCase<__nv_bfloat16>(77, 512, 200, false, false, false, 1, rng);
  ltCase<float>(16, 300, 72, false, true, false, 2, rng);
  ltCase<__nv_bfloat16>(256, 4096, 2048, true, true, true, 0, rng);
  ltRefusals();
  ltEviction();
  std::printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
