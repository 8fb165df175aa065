//===- Sparse.cpp - neuron-sparse linear kernels --------------------------===//
//
// Part of the sparsec project.
//
// Exact input-side sparsity: y[m, :] = b + sum over k with x[m, k] != 0 of
// x[m, k] * W[k, :]. Only the rows of W whose input neuron fired are read,
// so a down projection after a ReLU at 90 % sparsity streams a tenth of its
// weights. Each thread owns a block of output columns and walks the active
// rows of every token, so no reduction across threads is needed.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Ops.h"

#include <algorithm>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sparsec::rt::ops {

namespace {
/// y[0, n) += a * w[0, n), portable.
void axpyScalar(float *y, const float *w, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] += a * w[i];
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void axpyAvx2(float *y, const float *w,
                                                   float a, int64_t n) {
  __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(w + i),
                                            _mm256_loadu_ps(y + i)));
    _mm256_storeu_ps(y + i + 8,
                     _mm256_fmadd_ps(va, _mm256_loadu_ps(w + i + 8),
                                     _mm256_loadu_ps(y + i + 8)));
    _mm256_storeu_ps(y + i + 16,
                     _mm256_fmadd_ps(va, _mm256_loadu_ps(w + i + 16),
                                     _mm256_loadu_ps(y + i + 16)));
    _mm256_storeu_ps(y + i + 24,
                     _mm256_fmadd_ps(va, _mm256_loadu_ps(w + i + 24),
                                     _mm256_loadu_ps(y + i + 24)));
  }
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(w + i),
                                            _mm256_loadu_ps(y + i)));
  for (; i < n; ++i)
    y[i] += a * w[i];
}
#endif

using AxpyFn = void (*)(float *, const float *, float, int64_t);

AxpyFn pickAxpy() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return axpyAvx2;
#endif
  return axpyScalar;
}
} // namespace

bool sparseLinearInput(Context &ctx, const Tensor &x, const Tensor &w,
                       const Tensor *bias, int outSlot, Tensor &out) {
  const char *op = "sparse_linear";
  if (x.dtype != DType::f32 || w.dtype != DType::f32 || x.rank < 1 ||
      w.rank != 2)
    return ctx.fail(std::string(op) + ": expected float32 x[..., K] and "
                                      "W[K, N], got " +
                    x.describe() + " and " + w.describe());
  const int64_t k = w.shape[0], n = w.shape[1];
  if (x.shape[x.rank - 1] != k)
    return ctx.fail(std::string(op) + ": input " + x.describe() +
                    " does not match weight " + w.describe());
  if (bias && (bias->dtype != DType::f32 || bias->numel() != n))
    return ctx.fail(std::string(op) + ": bias " + bias->describe() +
                    " does not have " + std::to_string(n) + " elements");
  int64_t shape[kMaxRank];
  std::copy(x.shape, x.shape + x.rank, shape);
  shape[x.rank - 1] = n;
  if (!ctx.allocate(outSlot, out, DType::f32, x.rank, shape))
    return false;
  const int64_t rows = k ? x.numel() / k : 0;
  const float *xp = x.as<float>();
  const float *wp = w.as<float>();
  const float *bp = bias ? bias->as<float>() : nullptr;
  float *yp = out.as<float>();

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
  static const AxpyFn axpy = pickAxpy();
  // One column block per thread: each active row of W is then read as one
  // long contiguous run (prefetch-friendly), while the thread's block of y
  // (at most 4096 floats) stays in L1/L2.
  int64_t block = (n + ctx.pool.size() - 1) / ctx.pool.size();
  block = std::min<int64_t>(4096, std::max<int64_t>(256, (block + 63) / 64 * 64));
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
      for (int64_t a = start[size_t(r)]; a < start[size_t(r) + 1]; ++a) {
        int32_t i = active[size_t(a)];
        axpy(y, wp + int64_t(i) * n + c0, row[i], len);
      }
    }
  });
  return true;
}

} // namespace sparsec::rt::ops
