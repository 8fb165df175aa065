//===- Sparse.cpp - neuron-sparse linear kernels --------------------------===//
//
// Part of the sparsec project.
//
// Input side (exact, the down projection after a ReLU):
//   y[m, :] = b + sum over k with x[m, k] != 0 of x[m, k] * W[k, :]
// reads only the rows of W whose input neuron fired. Each thread owns a
// block of output columns and walks the active rows of every token, so no
// reduction across threads is needed.
// Output side (predicted, the up projection): y[m, j] = x[m, :] . W^T[j, :]
// for the predicted neurons j only, one contiguous weight row per neuron.
// Predictor: mask = (x . w1) . w2 + b > t, two small GEMVs.
// Weights are float32 or float16 (converted with F16C), halving the bytes
// streamed: these kernels are memory bound at decode.
//
//===----------------------------------------------------------------------===//

#include "Common.h"
#include "sparsec/rt/Ops.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace sparsec::rt::ops {

namespace {
using detail::toFloat;
#if defined(__x86_64__)
using detail::load8;
#endif

//===----------------------------------------------------------------------===//
// Vector primitives: portable and AVX2/FMA(/F16C) versions, picked once.
//===----------------------------------------------------------------------===//

/// y[0, n) += a * w[0, n)
template <typename W>
void axpyScalar(float *y, const W *w, float a, int64_t n, const W *) {
  for (int64_t i = 0; i < n; ++i)
    y[i] += a * toFloat(w[i]);
}
/// x[0, n) . w[0, n)
template <typename W>
float dotScalar(const float *x, const W *w, int64_t n, const W *) {
  float acc = 0;
  for (int64_t i = 0; i < n; ++i)
    acc += x[i] * toFloat(w[i]);
  return acc;
}

#if defined(__x86_64__)
/// Prefetches (into the L2) the cache lines of the next row a kernel will
/// read, [next + i, next + i + 32) elements, while this one streams: a
/// gathered row starts with its lines requested rather than with the
/// hardware prefetcher still learning its address.
template <typename W>
SPARSEC_RT_AVX2 inline void prefetchNext(const W *next, int64_t i) {
  if (!next)
    return;
  _mm_prefetch(reinterpret_cast<const char *>(next + i), _MM_HINT_T1);
  if constexpr (sizeof(W) == 4)
    _mm_prefetch(reinterpret_cast<const char *>(next + i + 16), _MM_HINT_T1);
}

template <typename W>
SPARSEC_RT_AVX2 void axpyAvx2(float *y, const W *w, float a, int64_t n,
                              const W *next) {
  __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetchNext(next, i);
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load8(w + i), _mm256_loadu_ps(y + i)));
    _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(va, load8(w + i + 8),
                                                _mm256_loadu_ps(y + i + 8)));
    _mm256_storeu_ps(y + i + 16, _mm256_fmadd_ps(va, load8(w + i + 16),
                                                 _mm256_loadu_ps(y + i + 16)));
    _mm256_storeu_ps(y + i + 24, _mm256_fmadd_ps(va, load8(w + i + 24),
                                                 _mm256_loadu_ps(y + i + 24)));
  }
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load8(w + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i)
    y[i] += a * toFloat(w[i]);
}

template <typename W>
SPARSEC_RT_AVX2 float dotAvx2(const float *x, const W *w, int64_t n,
                              const W *next) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetchNext(next, i);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), load8(w + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), load8(w + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), load8(w + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), load8(w + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8)
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), load8(w + i), a0);
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  float acc = _mm_cvtss_f32(h);
  for (; i < n; ++i)
    acc += x[i] * toFloat(w[i]);
  return acc;
}
#endif

template <typename W> struct Kernels {
  /// The last argument: the row the caller reads next (prefetched), or null.
  using Axpy = void (*)(float *, const W *, float, int64_t, const W *);
  using Dot = float (*)(const float *, const W *, int64_t, const W *);
  Axpy axpy = axpyScalar<W>;
  Dot dot = dotScalar<W>;
  Kernels() {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c")) {
      axpy = axpyAvx2<W>;
      dot = dotAvx2<W>;
    }
#endif
  }
};
template <typename W> const Kernels<W> &kernels() {
  static const Kernels<W> k;
  return k;
}

bool floatWeights(Context &ctx, const char *op, const Tensor &w) {
  if ((w.dtype != DType::f32 && w.dtype != DType::f16 &&
       w.dtype != DType::bf16) ||
      w.rank != 2)
    return ctx.fail(std::string(op) +
                    ": expected a 2-D float32, float16 or bfloat16 weight, "
                    "got " +
                    w.describe());
  return true;
}

/// Calls f(p) with p the data of weight `w` as const float *, const Half *
/// or const BFloat * (floatWeights checked its dtype).
template <typename F> void withWeights(const Tensor &w, F &&f) {
  if (w.dtype == DType::f16)
    f(w.as<detail::Half>());
  else if (w.dtype == DType::bf16)
    f(w.as<detail::BFloat>());
  else
    f(w.as<float>());
}

/// Rows from which an output side that selects every neuron runs as a
/// blocked GEMM rather than per (row, neuron) pair. 2 cores, [2048, 8192]
/// fp16 weight, packing it each call: per pair 0.77 ms a row; the GEMM
/// 9.9 ms at 8 rows, 11.8 at 16, 13.4 at 32, 27.5 at 128 (105 per pair).
constexpr int64_t kExactGemmRows = 16;

/// Column block per thread: each active weight row is then read as one long
/// contiguous run (prefetch-friendly) while the block of y stays in L1/L2.
int64_t columnBlock(Context &ctx, int64_t n) {
  int64_t block = (n + ctx.pool.size() - 1) / ctx.pool.size();
  return std::min<int64_t>(4096, std::max<int64_t>(256, (block + 63) / 64 * 64));
}

template <typename W>
void inputSide(Context &ctx, const float *xp, const W *wp, const float *bp,
               float *yp, int64_t rows, int64_t k, int64_t n) {
  // The active neurons of every row, found once.
  std::vector<int32_t> active;
  std::vector<int64_t> start(size_t(rows) + 1, 0);
  active.reserve(size_t(rows * k / 4 + 1));
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = xp + r * k;
    for (int64_t i = 0; i < k; ++i)
      if (row[i] != 0.0f)
        active.push_back(int32_t(i));
    start[size_t(r) + 1] = int64_t(active.size());
  }
  ctx.sparseActive += int64_t(active.size());
  ctx.sparseTotal += rows * k;
  const auto axpy = kernels<W>().axpy;
  const int64_t block = columnBlock(ctx, n);
  const int64_t blocks = (n + block - 1) / block;
  ctx.pool.parallelFor(blocks * rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t r = t / blocks, c0 = (t % blocks) * block;
      int64_t len = std::min(block, n - c0);
      float *y = yp + r * n + c0;
      if (bp)
        std::copy(bp + c0, bp + c0 + len, y);
      else
        std::fill(y, y + len, 0.0f);
      const float *row = xp + r * k;
      const int64_t a1 = start[size_t(r) + 1];
      for (int64_t a = start[size_t(r)]; a < a1; ++a) {
        int32_t i = active[size_t(a)];
        const W *next =
            a + 1 < a1 ? wp + int64_t(active[size_t(a) + 1]) * n + c0 : nullptr;
        axpy(y, wp + int64_t(i) * n + c0, row[i], len, next);
      }
    }
  });
}

/// act(v) with the scalar functions every x86 epilogue uses (Common.h), so
/// that a sparse output matches the dense linear's.
float activate(Activation act, float v) {
  float r = v;
  detail::withActivation(act, [&](auto fn) { r = fn(v); });
  return r;
}


template <typename W>
void outputSide(Context &ctx, const float *xp, const W *wp, const float *bp,
                const uint8_t *mask, bool maskPerRow, Activation act, float *yp,
                int64_t rows, int64_t k, int64_t n) {
  // (row, neuron) pairs to compute, a neuron's rows together: its weight
  // row is read from memory once for all of them (a prompt's or a batch's),
  // then from the cache.
  std::vector<int64_t> pairs;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < rows; ++r)
      if (mask[(maskPerRow ? r * n : 0) + j])
        pairs.push_back(r * n + j);
  ctx.sparseActive += int64_t(pairs.size());
  ctx.sparseTotal += rows * n;
  std::fill(yp, yp + rows * n, 0.0f);
  const auto dot = kernels<W>().dot;
  ctx.pool.parallelFor(int64_t(pairs.size()), 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t p = pairs[size_t(t)], r = p / n, j = p % n;
      const W *next = t + 1 < end ? wp + (pairs[size_t(t) + 1] % n) * k : nullptr;
      yp[p] = activate(act, dot(xp + r * k, wp + j * k, k, next) + (bp ? bp[j] : 0.0f));
    }
  });
}

template <typename W1, typename W2>
void predictor(Context &ctx, const float *xp, const W1 *w1, const W2 *w2,
               const float *bp, float threshold, uint8_t *mp, int64_t rows,
               int64_t d, int64_t r, int64_t n) {
  std::vector<float> h(size_t(rows * r), 0.0f);
  const auto axpy1 = kernels<W1>().axpy;
  ctx.pool.parallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      float *hr = h.data() + row * r;
      const float *x = xp + row * d;
      for (int64_t i = 0; i < d; ++i)
        if (x[i] != 0.0f)
          axpy1(hr, w1 + i * r, x[i], r, nullptr);
    }
  });
  const auto axpy2 = kernels<W2>().axpy;
  const int64_t block = columnBlock(ctx, n);
  const int64_t blocks = (n + block - 1) / block;
  ctx.pool.parallelFor(blocks * rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> logits(static_cast<size_t>(block));
    for (int64_t t = begin; t < end; ++t) {
      int64_t row = t / blocks, c0 = (t % blocks) * block;
      int64_t len = std::min(block, n - c0);
      if (bp)
        std::copy(bp + c0, bp + c0 + len, logits.begin());
      else
        std::fill(logits.begin(), logits.begin() + len, 0.0f);
      const float *hr = h.data() + row * r;
      for (int64_t e = 0; e < r; ++e)
        axpy2(logits.data(), w2 + e * n + c0, hr[e], len,
              e + 1 < r ? w2 + (e + 1) * n + c0 : nullptr);
      uint8_t *m = mp + row * n + c0;
      for (int64_t j = 0; j < len; ++j)
        m[j] = logits[size_t(j)] > threshold;
    }
  });
}

/// Output shape: x's shape with the last dimension replaced by n.
bool allocateLike(Context &ctx, const Tensor &x, int64_t n, DType dtype,
                  int outSlot, Tensor &out) {
  int64_t shape[kMaxRank];
  std::copy(x.shape, x.shape + x.rank, shape);
  shape[x.rank - 1] = n;
  return ctx.allocate(outSlot, out, dtype, x.rank, shape);
}

/// A float32 input [..., k] and a 2-D float32/float16 weight whose
/// dimension `kDim` is k.
bool checkInputAndWeight(Context &ctx, const char *op, const Tensor &x,
                         const Tensor &w, int kDim) {
  if (x.dtype != DType::f32 || x.rank < 1)
    return ctx.fail(std::string(op) + ": expected a float32 input, got " +
                    x.describe());
  if (!floatWeights(ctx, op, w))
    return false;
  if (x.shape[x.rank - 1] != w.shape[kDim])
    return ctx.fail(std::string(op) + ": input " + x.describe() +
                    " does not match " + (kDim ? "the neuron-major " : "") +
                    "weight " + w.describe());
  return true;
}

bool checkBias(Context &ctx, const char *op, const Tensor *bias, int64_t n) {
  if (bias && (bias->dtype != DType::f32 || bias->numel() != n))
    return ctx.fail(std::string(op) + ": bias " + bias->describe() +
                    " does not have " + std::to_string(n) +
                    " float32 elements");
  return true;
}
} // namespace

bool sparseLinearInput(Context &ctx, const Tensor &x, const Tensor &w,
                       const Tensor *bias, int outSlot, Tensor &out) {
  const char *op = "sparse_linear";
  if (!checkInputAndWeight(ctx, op, x, w, 0))
    return false;
  const int64_t k = w.shape[0], n = w.shape[1];
  if (!checkBias(ctx, op, bias, n) ||
      !allocateLike(ctx, x, n, DType::f32, outSlot, out))
    return false;
  const int64_t rows = k ? x.numel() / k : 0;
  const float *bp = bias ? bias->as<float>() : nullptr;
  withWeights(w, [&](auto *wp) {
    inputSide(ctx, x.as<float>(), wp, bp, out.as<float>(), rows, k, n);
  });
  return true;
}

bool sparseLinearOutput(Context &ctx, const Tensor &x, const Tensor &w,
                        const Tensor *bias, const Tensor &active,
                        Activation act, int outSlot, Tensor &out) {
  const char *op = "sparse_linear";
  if (!checkInputAndWeight(ctx, op, x, w, 1))
    return false;
  const int64_t n = w.shape[0], k = w.shape[1];
  const int64_t rows = k ? x.numel() / k : 0;
  bool perRow = active.numel() == rows * n;
  if (active.dtype != DType::b1 || active.rank < 1 ||
      active.shape[active.rank - 1] != n ||
      (!perRow && active.numel() != n))
    return ctx.fail(std::string(op) + ": active mask " + active.describe() +
                    " does not cover " + std::to_string(n) +
                    " neurons per token of " + x.describe());
  if (!checkBias(ctx, op, bias, n) ||
      !allocateLike(ctx, x, n, DType::f32, outSlot, out))
    return false;
  if (act == Activation::sigmoid)
    return ctx.fail(std::string(op) + ": the activation epilogue must map 0 "
                                      "to 0");
  const float *bp = bias ? bias->as<float>() : nullptr;
  const uint8_t *mask = active.as<uint8_t>();
  // Every neuron selected for every row (a prompt marked exactFfn): the
  // dense product, blocked over the neuron-major weight, where the rows
  // pay for packing it (per pair, a 128-row prompt took 5x the GEMM).
  if (rows >= kExactGemmRows &&
      std::all_of(mask, mask + active.numel(), [](uint8_t m) { return m; })) {
    detail::gemmWeight(ctx, x.as<float>(), rows, w, /*transB=*/true, bp, act,
                       out.as<float>());
    ctx.sparseActive += rows * n;
    ctx.sparseTotal += rows * n;
    return true;
  }
  withWeights(w, [&](auto *wp) {
    outputSide(ctx, x.as<float>(), wp, bp, mask, perRow, act, out.as<float>(),
               rows, k, n);
  });
  return true;
}

bool predict(Context &ctx, const Tensor &x, const Tensor &w1, const Tensor &w2,
             const Tensor *bias, float threshold, int outSlot, Tensor &out) {
  const char *op = "predict";
  if (x.dtype != DType::f32 || x.rank < 1)
    return ctx.fail(std::string(op) + ": expected a float32 input, got " +
                    x.describe());
  if (!floatWeights(ctx, op, w1) || !floatWeights(ctx, op, w2))
    return false;
  const int64_t d = w1.shape[0], r = w1.shape[1], n = w2.shape[1];
  if (x.shape[x.rank - 1] != d || w2.shape[0] != r)
    return ctx.fail(std::string(op) + ": input " + x.describe() + ", w1 " +
                    w1.describe() + " and w2 " + w2.describe() +
                    " do not chain");
  if (!checkBias(ctx, op, bias, n) ||
      !allocateLike(ctx, x, n, DType::b1, outSlot, out))
    return false;
  const int64_t rows = d ? x.numel() / d : 0;
  const float *bp = bias ? bias->as<float>() : nullptr;
  uint8_t *mp = out.as<uint8_t>();
  // A run marked exactFfn (generate's prompt) selects every neuron: the
  // FFN is then exact, its down projection skipping the actual zeros.
  if (ctx.exactFfn) {
    std::fill(mp, mp + rows * n, uint8_t(1));
    return true;
  }
  const float *xp = x.as<float>();
  withWeights(w1, [&](auto *p1) {
    withWeights(w2, [&](auto *p2) {
      predictor(ctx, xp, p1, p2, bp, threshold, mp, rows, d, r, n);
    });
  });
  return true;
}

} // namespace sparsec::rt::ops
