//===- PredictorTraining.cpp - low-rank activation predictors ------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Training/PredictorTraining.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

namespace sparsec {

namespace {
using Matrix = std::vector<double>; // row-major

/// Eigen-decomposition of the symmetric n x n matrix `a`: Householder
/// reduction to tridiagonal form (accumulating the reflections), then QL
/// iterations with implicit Wilkinson shifts on the tridiagonal matrix,
/// rotating the accumulated basis along. On return the columns of `v` are
/// orthonormal eigenvectors and `values` the eigenvalues, sorted by
/// decreasing eigenvalue. O(n^3) with a small constant (about 9 n^3 flops,
/// against 10-20 sweeps of n^3 for cyclic Jacobi).
void symmetricEigen(Matrix a, int64_t n, Matrix &v, std::vector<double> &values) {
  auto A = [&](int64_t i, int64_t j) -> double & { return a[size_t(i * n + j)]; };
  v.assign(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i * n + i)] = 1.0;
  auto V = [&](int64_t i, int64_t j) -> double & { return v[size_t(i * n + j)]; };
  std::vector<double> h(static_cast<size_t>(n)), p(static_cast<size_t>(n));
  // Householder: for column k, reflect rows/columns k+1.. so that A[k+2:, k]
  // becomes 0; A <- H A H, V <- V H with H = I - 2 h h^T on k+1..n-1.
  for (int64_t k = 0; k + 2 < n; ++k) {
    double norm2 = 0;
    for (int64_t i = k + 1; i < n; ++i)
      norm2 += A(i, k) * A(i, k);
    if (norm2 <= 0)
      continue;
    const double x0 = A(k + 1, k);
    const double alpha = x0 >= 0 ? -std::sqrt(norm2) : std::sqrt(norm2);
    // h = (x - alpha e0) / |x - alpha e0|
    double hnorm2 = norm2 - x0 * x0 + (x0 - alpha) * (x0 - alpha);
    if (hnorm2 <= 0)
      continue;
    const double inv = 1.0 / std::sqrt(hnorm2);
    for (int64_t i = k + 1; i < n; ++i)
      h[size_t(i)] = A(i, k) * inv;
    h[size_t(k + 1)] = (x0 - alpha) * inv;
    // Trailing block B = A[k+1:, k+1:]: p = B h, K = h^T p, q = p - K h,
    // B <- B - 2 (h q^T + q h^T).
    double K = 0;
    for (int64_t i = k + 1; i < n; ++i) {
      double s = 0;
      for (int64_t j = k + 1; j < n; ++j)
        s += A(i, j) * h[size_t(j)];
      p[size_t(i)] = s;
      K += h[size_t(i)] * s;
    }
    for (int64_t i = k + 1; i < n; ++i)
      p[size_t(i)] -= K * h[size_t(i)];
    for (int64_t i = k + 1; i < n; ++i)
      for (int64_t j = k + 1; j < n; ++j)
        A(i, j) -= 2.0 * (h[size_t(i)] * p[size_t(j)] + p[size_t(i)] * h[size_t(j)]);
    A(k + 1, k) = A(k, k + 1) = alpha;
    for (int64_t i = k + 2; i < n; ++i)
      A(i, k) = A(k, i) = 0.0;
    // V <- V H: each row r: V[r, k+1:] -= 2 (V[r, k+1:] . h) h^T.
    for (int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t j = k + 1; j < n; ++j)
        s += V(r, j) * h[size_t(j)];
      s *= 2.0;
      for (int64_t j = k + 1; j < n; ++j)
        V(r, j) -= s * h[size_t(j)];
    }
  }
  // Tridiagonal: diagonal d, e[i] couples i and i + 1 (e[n - 1] = 0).
  std::vector<double> d(static_cast<size_t>(n)), e(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    d[size_t(i)] = A(i, i);
  for (int64_t i = 0; i + 1 < n; ++i)
    e[size_t(i)] = A(i + 1, i);
  const double eps = std::numeric_limits<double>::epsilon();
  // The QL rotations combine columns of V: work on its transpose, whose
  // rows are then contiguous.
  Matrix vt(size_t(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      vt[size_t(j * n + i)] = V(i, j);
  for (int64_t l = 0; l < n; ++l) {
    for (int iter = 0; iter < 100; ++iter) {
      // The first negligible off-diagonal at or after l.
      int64_t m = l;
      for (; m + 1 < n; ++m) {
        double dd = std::abs(d[size_t(m)]) + std::abs(d[size_t(m + 1)]);
        if (std::abs(e[size_t(m)]) <= eps * dd)
          break;
      }
      if (m == l)
        break;
      // Wilkinson-style shift from the leading 2 x 2 block.
      double g = (d[size_t(l + 1)] - d[size_t(l)]) / (2.0 * e[size_t(l)]);
      double r = std::hypot(g, 1.0);
      g = d[size_t(m)] - d[size_t(l)] + e[size_t(l)] / (g + (g >= 0 ? r : -r));
      double s = 1.0, c = 1.0, shift = 0.0;
      int64_t i = m - 1;
      bool deflated = false;
      for (; i >= l; --i) {
        double f = s * e[size_t(i)], b = c * e[size_t(i)];
        r = std::hypot(f, g);
        e[size_t(i + 1)] = r;
        if (r == 0.0) {
          d[size_t(i + 1)] -= shift;
          e[size_t(m)] = 0.0;
          deflated = true;
          break;
        }
        s = f / r;
        c = g / r;
        g = d[size_t(i + 1)] - shift;
        r = (d[size_t(i)] - g) * s + 2.0 * c * b;
        shift = s * r;
        d[size_t(i + 1)] = g + shift;
        g = c * r - b;
        double *row = &vt[size_t(i * n)], *next = &vt[size_t((i + 1) * n)];
        for (int64_t k = 0; k < n; ++k) {
          double vk1 = next[k], vk = row[k];
          next[k] = s * vk + c * vk1;
          row[k] = c * vk - s * vk1;
        }
      }
      if (deflated)
        continue;
      d[size_t(l)] -= shift;
      e[size_t(l)] = g;
      e[size_t(m)] = 0.0;
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    return d[size_t(x)] > d[size_t(y)];
  });
  Matrix sorted(size_t(n * n));
  values.resize(size_t(n));
  for (int64_t j = 0; j < n; ++j) {
    values[size_t(j)] = d[size_t(order[size_t(j)])];
    const double *src = &vt[size_t(order[size_t(j)] * n)];
    for (int64_t i = 0; i < n; ++i)
      sorted[size_t(i * n + j)] = src[i];
  }
  v = std::move(sorted);
}

/// Runs fn(begin, end) over [0, n) split into contiguous ranges, one per
/// hardware thread. Every output element belongs to one range and is
/// computed in a fixed order, so results do not depend on the thread count.
template <typename F> void parallelRows(int64_t n, F &&fn) {
  int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  threads = std::min(threads, std::max<int64_t>(1, n / 16));
  if (threads <= 1) {
    fn(int64_t(0), n);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t chunk = (n + threads - 1) / threads;
  for (int64_t t = 1; t < threads; ++t) {
    int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b < e)
      pool.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(int64_t(0), std::min(n, chunk));
  for (std::thread &t : pool)
    t.join();
}

/// The hot loops below come in AVX-512, AVX2 and baseline x86-64 versions,
/// chosen at run time (target_clones). This file is compiled with
/// -ffp-contract=off, so no version fuses a multiply and an add: each
/// computes every element with the same operations in the same order, and
/// the predictors do not depend on the CPU.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPARSEC_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SPARSEC_CPU_CLONES
#endif

/// Rows [begin, end) of c[m, n] = a[m, k] . b[k, n] (matmul). Each element
/// sums its k products in increasing k, as the plain i-k-j loop would, but
/// tiles of kRowTile rows x kColTile columns of c stay in cache while k
/// runs, so b streams from memory once per kRowTile rows instead of once
/// per row.
SPARSEC_CPU_CLONES
void matmulRows(const float *__restrict a, const float *__restrict b,
                float *__restrict c, int64_t begin, int64_t end, int64_t k,
                int64_t n) {
  constexpr int64_t kRowTile = 16, kColTile = 1024;
  std::fill(c + begin * n, c + end * n, 0.0f);
  for (int64_t i0 = begin; i0 < end; i0 += kRowTile) {
    const int64_t i1 = std::min(end, i0 + kRowTile);
    for (int64_t j0 = 0; j0 < n; j0 += kColTile) {
      const int64_t j1 = std::min(n, j0 + kColTile);
      for (int64_t p = 0; p < k; ++p) {
        const float *bp = b + p * n;
        for (int64_t i = i0; i < i1; ++i) {
          const float x = a[i * k + p];
          if (x == 0.0f)
            continue;
          float *ci = c + i * n;
          for (int64_t j = j0; j < j1; ++j)
            ci[j] += x * bp[j];
        }
      }
    }
  }
}

/// c[m, n] = a[m, k] . b[k, n], all row-major float; rows of c in parallel
/// (matmulRows).
void matmul(const float *a, const float *b, float *c, int64_t m, int64_t k,
            int64_t n) {
  parallelRows(m, [&](int64_t begin, int64_t end) {
    matmulRows(a, b, c, begin, end, k, n);
  });
}

/// Row p of S += x_i^T x_i over samples [i0, i1) (x [., d]), columns p..d-1
/// only (in double, samples in increasing order).
SPARSEC_CPU_CLONES
void accumulateGramRow(double *__restrict sp, const float *__restrict x,
                       int64_t p, int64_t d, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) {
    const float *xi = x + i * d;
    const double xp = xi[p];
    if (xp == 0.0)
      continue;
    for (int64_t q = p; q < d; ++q)
      sp[q] += xp * double(xi[q]);
  }
}

/// The Gram matrix a a^T [rows, rows] of a [rows, n], in double.
Matrix gram(const float *a, int64_t rows, int64_t n) {
  Matrix out(size_t(rows * rows), 0.0);
  parallelRows(rows, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      for (int64_t j = 0; j < rows; ++j) {
        double acc = 0;
        const float *ai = a + i * n, *aj = a + j * n;
        for (int64_t t = 0; t < n; ++t)
          acc += double(ai[t]) * double(aj[t]);
        out[size_t(i * rows + j)] = acc;
      }
  });
  return out;
}

/// out [count, n], row e = (sum over k < rows of c[k, e] a[k, :]) /
/// sqrt(sigma2[e]) (zero where sigma2[e] <= 0): the basis rows M^T u_e /
/// sigma_e from eigenvector columns c [rows, cols] and rows a [rows, n].
void scaledCombinations(const Matrix &c, int64_t cols, const float *a,
                        int64_t rows, int64_t n,
                        const std::vector<double> &sigma2, int64_t count,
                        std::vector<float> &out) {
  out.assign(size_t(count * n), 0.0f);
  parallelRows(count, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(static_cast<size_t>(n));
    for (int64_t e = begin; e < end; ++e) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t k = 0; k < rows; ++k) {
        const double ck = c[size_t(k * cols + e)];
        const float *ak = a + k * n;
        for (int64_t j = 0; j < n; ++j)
          acc[size_t(j)] += ck * double(ak[j]);
      }
      const double inv =
          sigma2[size_t(e)] > 0 ? 1.0 / std::sqrt(sigma2[size_t(e)]) : 0.0;
      for (int64_t j = 0; j < n; ++j)
        out[size_t(e * n + j)] = float(acc[size_t(j)] * inv);
    }
  });
}

/// Orthonormalises the rows of q [p, d] in place (modified Gram-Schmidt,
/// twice for stability); a row that vanishes is left zero.
void orthonormalRows(std::vector<double> &q, int64_t p, int64_t d) {
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t i = 0; i < p; ++i) {
      double *qi = &q[size_t(i * d)];
      for (int64_t j = 0; j < i; ++j) {
        const double *qj = &q[size_t(j * d)];
        double dot = 0;
        for (int64_t k = 0; k < d; ++k)
          dot += qi[k] * qj[k];
        for (int64_t k = 0; k < d; ++k)
          qi[k] -= dot * qj[k];
      }
      double norm = 0;
      for (int64_t k = 0; k < d; ++k)
        norm += qi[k] * qi[k];
      norm = std::sqrt(norm);
      for (int64_t k = 0; k < d; ++k)
        qi[k] = norm > 1e-300 ? qi[k] / norm : 0.0;
    }
}

/// The top `rMax` right singular directions of M = L^T W [d, n], as rows:
/// `w2Rows` [p, n] holds (M^T u_e)^T / sigma_e and sigma2 the squared
/// singular values, decreasing, p = rMax + oversampling. Randomised
/// subspace iteration on M M^T = L^T W W^T L with a fixed seed (so the
/// result is deterministic), M applied through L and W (never formed), then
/// Rayleigh-Ritz on the subspace: O(d n p) per iteration instead of the
/// O(d^3 + d^2 n) of the full eigendecomposition.
void randomizedBasis(const Matrix &l, const float *w, int64_t d, int64_t n,
                     int64_t rMax, std::vector<float> &w2Rows,
                     std::vector<double> &sigma2, int64_t &p) {
  p = std::min(d, rMax + std::max<int64_t>(16, rMax / 8));
  std::vector<float> lf(size_t(d * d)), ltf(size_t(d * d)), wt(size_t(n * d));
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j) {
      lf[size_t(i * d + j)] = float(l[size_t(i * d + j)]);
      ltf[size_t(j * d + i)] = float(l[size_t(i * d + j)]);
    }
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < n; ++j)
      wt[size_t(j * d + i)] = w[i * n + j];
  std::vector<double> q(size_t(p * d));
  std::mt19937_64 rng(0x5eed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (double &v : q)
    v = normal(rng);
  orthonormalRows(q, p, d);
  std::vector<float> qf(size_t(p * d)), lq(size_t(p * d)), g(size_t(p * n)),
      h(size_t(p * d)), y(size_t(p * d));
  const int iterations = 3;
  for (int it = 0;; ++it) {
    for (size_t i = 0; i < q.size(); ++i)
      qf[i] = float(q[i]);
    matmul(qf.data(), ltf.data(), lq.data(), p, d, d); // (L Q)^T
    matmul(lq.data(), w, g.data(), p, d, n);           // G = (M^T Q)^T
    if (it == iterations)
      break;
    matmul(g.data(), wt.data(), h.data(), p, n, d); // G W^T
    matmul(h.data(), lf.data(), y.data(), p, d, d); // (M M^T Q)^T
    for (size_t i = 0; i < q.size(); ++i)
      q[i] = y[i];
    orthonormalRows(q, p, d);
  }
  // B = Q^T M M^T Q = G G^T, and its eigenvectors V: M^T (Q V) = G^T V.
  Matrix v;
  symmetricEigen(gram(g.data(), p, n), p, v, sigma2);
  scaledCombinations(v, p, g.data(), p, n, sigma2, p, w2Rows);
}
} // namespace

bool trainPredictors(const PredictorProblem &pb, const PredictorOptions &opts,
                     std::vector<Predictor> &out, std::string &error) {
  const int64_t m = pb.samples, d = pb.d, n = pb.n;
  // Splits: fit on the first 70 %, calibrate the margin on the next 15 %,
  // report on the last 15 %.
  const int64_t fitEnd = m * 70 / 100, calEnd = m * 85 / 100;
  if (fitEnd < d || calEnd - fitEnd < 16 || m - calEnd < 16) {
    error = "too few profile samples (" + std::to_string(m) +
            ") to train a predictor for a " + std::to_string(d) +
            "-wide layer input: profile with --samples >= " +
            std::to_string(std::max<int64_t>(2 * d, 256));
    return false;
  }
  const float *x = pb.inputs;
  const float *w = pb.weight.data();

  // S = X^T X / m over the fitting split, and its square root.
  // Each row of S is updated by a block of samples at a time while it is in
  // cache (every element still sums its samples in increasing order). S is
  // symmetric: row p sums columns q >= p and the lower half is mirrored;
  // rows go to the threads in pairs (p, d - 1 - p) of equal work.
  Matrix s(size_t(d * d), 0.0);
  parallelRows((d + 1) / 2, [&](int64_t pairBegin, int64_t pairEnd) {
    constexpr int64_t kSampleBlock = 64;
    for (int64_t i0 = 0; i0 < fitEnd; i0 += kSampleBlock) {
      const int64_t i1 = std::min(fitEnd, i0 + kSampleBlock);
      for (int64_t pair = pairBegin; pair < pairEnd; ++pair) {
        accumulateGramRow(&s[size_t(pair * d)], x, pair, d, i0, i1);
        const int64_t q = d - 1 - pair;
        if (q != pair)
          accumulateGramRow(&s[size_t(q * d)], x, q, d, i0, i1);
      }
    }
  });
  for (int64_t p = 0; p < d; ++p)
    for (int64_t q = p; q < d; ++q) {
      const double v = s[size_t(p * d + q)] / double(fitEnd);
      s[size_t(p * d + q)] = s[size_t(q * d + p)] = v;
    }
  // S + eps I = L L^T (Cholesky; the ridge keeps it definite when inputs
  // are rank-deficient, as LayerNorm outputs are). M = L^T W then has
  // M^T M = W^T S W = (X W)^T (X W) / m up to the ridge, so the right
  // singular vectors of M are those of X W.
  double trace = 0;
  for (int64_t i = 0; i < d; ++i)
    trace += s[size_t(i * d + i)];
  const double ridge = 1e-6 * std::max(trace / double(d), 1e-30);
  Matrix l(size_t(d * d), 0.0);
  for (int64_t j = 0; j < d; ++j) {
    double diag = s[size_t(j * d + j)] + ridge;
    for (int64_t k = 0; k < j; ++k)
      diag -= l[size_t(j * d + k)] * l[size_t(j * d + k)];
    const double ljj = std::sqrt(std::max(diag, ridge));
    l[size_t(j * d + j)] = ljj;
    // The rows below the diagonal are independent: in parallel.
    parallelRows(d - j - 1, [&](int64_t begin, int64_t end) {
      const double *lj = &l[size_t(j * d)];
      for (int64_t i = j + 1 + begin; i < j + 1 + end; ++i) {
        double v = s[size_t(i * d + j)];
        const double *li = &l[size_t(i * d)];
        for (int64_t k = 0; k < j; ++k)
          v -= li[k] * lj[k];
        l[size_t(i * d + j)] = v / ljj;
      }
    });
  }
  std::vector<int64_t> ranks = opts.ranks;
  const bool exactBasis = d <= opts.exactBasisLimit;
  if (ranks.empty())
    for (int64_t div : exactBasis ? std::vector<int64_t>{16, 8, 4, 2}
                                  : std::vector<int64_t>{16, 8})
      ranks.push_back(std::max<int64_t>(8, d / div));
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(ranks.begin(),
              std::find_if(ranks.begin(), ranks.end(),
                           [&](int64_t r) { return r > 0; }));
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  while (!ranks.empty() && ranks.back() >= d)
    ranks.pop_back();
  if (ranks.empty() && !opts.ranks.empty()) {
    // A predictor of rank d or more reads more than the layer it predicts.
    error = "every predictor rank given (";
    for (size_t i = 0; i < opts.ranks.size(); ++i)
      error += (i ? ", " : "") + std::to_string(opts.ranks[i]);
    error += ") is at least the layer's input width " + std::to_string(d) +
             "; ranks must lie below it";
    return false;
  }

  // The basis: rows e of w2Rows = (M^T u_e)^T / sigma_e for the top
  // directions u_e of M M^T, decreasing sigma2.
  std::vector<float> w2Rows;
  std::vector<double> sigma2;
  int64_t basis = 0;
  if (exactBasis) {
    // K = M M^T [d, d]; its eigenvectors U give the right singular vectors
    // of M: V = M^T U / sigma.
    std::vector<float> mw(size_t(d * n), 0.0f);
    {
      std::vector<float> lt(size_t(d * d));
      for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j)
          lt[size_t(i * d + j)] = float(l[size_t(j * d + i)]);
      matmul(lt.data(), w, mw.data(), d, d, n);
    }
    Matrix u;
    symmetricEigen(gram(mw.data(), d, n), d, u, sigma2);
    basis = ranks.empty() ? 0 : ranks.back();
    scaledCombinations(u, d, mw.data(), d, n, sigma2, basis, w2Rows);
  } else if (!ranks.empty()) {
    randomizedBasis(l, w, d, n, ranks.back(), w2Rows, sigma2, basis);
  }

  // Pre-activations of the fitting samples (the error spread below is
  // measured on them only), z = x W + b.
  std::vector<float> z(size_t(fitEnd * n));
  matmul(x, w, z.data(), fitEnd, d, n);
  if (!pb.bias.empty())
    for (int64_t i = 0; i < fitEnd; ++i)
      for (int64_t j = 0; j < n; ++j)
        z[size_t(i * n + j)] += pb.bias[size_t(j)];

  for (int64_t r : ranks) {
    if (r > basis)
      continue;
    int64_t usable = 0;
    while (usable < r && sigma2[size_t(usable)] > 1e-12 * sigma2[0])
      ++usable;
    if (usable == 0)
      continue;
    Predictor p;
    p.rank = r;
    // w2 = V_r^T [r, n] (rows past `usable` stay zero); w1 = W V_r [d, r].
    p.w2.assign(size_t(r * n), 0.0f);
    std::copy(w2Rows.begin(), w2Rows.begin() + usable * n, p.w2.begin());
    p.w1.assign(size_t(d * r), 0.0f);
    parallelRows(d, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        for (int64_t e = 0; e < r; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j)
            acc += double(w[i * n + j]) * p.w2[size_t(e * n + j)];
          p.w1[size_t(i * r + e)] = float(acc);
        }
    });
    // Approximate pre-activations of every sample, and per-neuron error
    // spread on the fitting split.
    std::vector<float> h(size_t(m * r)), za(size_t(m * n));
    matmul(x, p.w1.data(), h.data(), m, d, r);
    matmul(h.data(), p.w2.data(), za.data(), m, r, n);
    if (!pb.bias.empty())
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          za[size_t(i * n + j)] += pb.bias[size_t(j)];
    std::vector<double> sum(static_cast<size_t>(n), 0.0), sumSq(static_cast<size_t>(n), 0.0);
    for (int64_t i = 0; i < fitEnd; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double e = double(z[size_t(i * n + j)]) - za[size_t(i * n + j)];
        sum[size_t(j)] += e;
        sumSq[size_t(j)] += e * e;
      }
    std::vector<double> spread(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      double mean = sum[size_t(j)] / double(fitEnd);
      spread[size_t(j)] =
          std::sqrt(std::max(0.0, sumSq[size_t(j)] / double(fitEnd) - mean * mean)) +
          1e-6;
    }
    // Margin: the (1 - recall) quantile of the normalised scores of the
    // active pairs of the calibration split.
    std::vector<double> activeScores;
    for (int64_t i = fitEnd; i < calEnd; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (pb.active(i, j))
          activeScores.push_back(za[size_t(i * n + j)] / spread[size_t(j)]);
    if (activeScores.empty()) {
      error = "no active neuron in the calibration samples";
      return false;
    }
    size_t at = size_t(std::floor((1.0 - opts.targetRecall) *
                                  double(activeScores.size())));
    at = std::min(at, activeScores.size() - 1);
    std::nth_element(activeScores.begin(), activeScores.begin() + long(at),
                     activeScores.end());
    // Strictly below the quantile score, so that sample still counts.
    double margin = activeScores[at] - 1e-6;
    p.bias.resize(size_t(n));
    for (int64_t j = 0; j < n; ++j)
      p.bias[size_t(j)] = float((pb.bias.empty() ? 0.0 : pb.bias[size_t(j)]) -
                                margin * spread[size_t(j)]);
    auto measure = [&](int64_t begin, int64_t end, double &recall,
                       double &precision, double &density, double &actual) {
      int64_t tp = 0, predicted = 0, positives = 0;
      for (int64_t i = begin; i < end; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double logit = za[size_t(i * n + j)] -
                         (pb.bias.empty() ? 0.0 : pb.bias[size_t(j)]) +
                         p.bias[size_t(j)];
          bool pred = logit > 0.0, act = pb.active(i, j);
          tp += pred && act;
          predicted += pred;
          positives += act;
        }
      double pairs = double(end - begin) * double(n);
      recall = positives ? double(tp) / double(positives) : 1.0;
      precision = predicted ? double(tp) / double(predicted) : 1.0;
      density = double(predicted) / pairs;
      actual = double(positives) / pairs;
    };
    double r0, p0, a0;
    measure(fitEnd, calEnd, r0, p0, p.calibrationDensity, a0);
    measure(calEnd, m, p.recall, p.precision, p.density, p.actualDensity);
    p.cost = double(r) * double(d + n) +
             p.calibrationDensity * 2.0 * double(d) * double(n);
    out.push_back(std::move(p));
  }
  if (out.empty()) {
    error = "the layer input has no usable directions (all samples zero?)";
    return false;
  }
  return true;
}

} // namespace sparsec
