//===- bench_linear.cpp - sparsec's linear kernel vs OpenBLAS ------------===//
//
// Part of the sparsec project.
//
// y[M, N] = x[M, K] . W[K, N] with sparsec::rt::ops::linear (float32 and
// float16 W) and with OpenBLAS (cblas_sgemv for M = 1, cblas_sgemm
// otherwise), same thread count, same data (W rounded to fp16-exact values
// so that all three compute the same product), median of repeated runs.
// Prints a table.
//
//   sparsec-bench-linear [--threads N] [--runs N]
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Half.h"
#include "sparsec/rt/Ops.h"
#include "sparsec/rt/Runtime.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" void openblas_set_num_threads(int);

using namespace sparsec::rt;

namespace {
double medianMs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F> double timeMs(int runs, F &&f) {
  f(); // warm up
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    auto s = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - s)
                    .count());
  }
  return medianMs(t);
}
} // namespace

int main(int argc, char **argv) {
  int threads = 1, runs = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc)
      runs = std::atoi(argv[++i]);
  }
  openblas_set_num_threads(threads);
  static const int64_t slotBytes[] = {-1, -1};
  ModelDesc desc{"bench", 0, nullptr, 0, nullptr, "", 0, 0, 2, slotBytes, nullptr};
  Context ctx(desc, nullptr, threads);

  struct Shape { int64_t m, k, n; };
  const Shape shapes[] = {{1, 4096, 4096}, {1, 4096, 16384}, {1, 16384, 4096},
                          {128, 4096, 4096}, {128, 4096, 16384}, {128, 16384, 4096}};
  std::printf("threads %d, median of %d runs\n", threads, runs);
  std::printf("%-18s %12s %12s %12s %10s %12s %14s\n", "M x K x N", "sparsec ms",
              "sparsec f16 W", "OpenBLAS ms", "ratio", "GB/s|GFLOP/s",
              "f16 GB/s|GFLOP/s");
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (const Shape &s : shapes) {
    std::vector<float> x(s.m * s.k), w(s.k * s.n), y(s.m * s.n), y2(s.m * s.n);
    for (float &v : x) v = dist(rng);
    std::vector<uint16_t> wh(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      wh[i] = floatToHalf(dist(rng));
      w[i] = halfToFloat(wh[i]);
    }
    Tensor tx{x.data(), DType::f32, 2, {s.m, s.k}};
    Tensor tw{w.data(), DType::f32, 2, {s.k, s.n}};
    Tensor twh{wh.data(), DType::f16, 2, {s.k, s.n}};
    Tensor out, outh;
    double ours = timeMs(runs, [&] {
      if (!ops::linear(ctx, tx, tw, nullptr, ops::Activation::none, 0, out)) {
        std::fprintf(stderr, "error: %s\n", ctx.error.c_str());
        std::exit(1);
      }
    });
    double half = timeMs(runs, [&] {
      if (!ops::linear(ctx, tx, twh, nullptr, ops::Activation::none, 1, outh)) {
        std::fprintf(stderr, "error: %s\n", ctx.error.c_str());
        std::exit(1);
      }
    });
    double blas = timeMs(runs, [&] {
      if (s.m == 1)
        cblas_sgemv(CblasRowMajor, CblasTrans, s.k, s.n, 1.0f, w.data(), s.n,
                    x.data(), 1, 0.0f, y2.data(), 1);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k,
                    1.0f, x.data(), s.k, w.data(), s.n, 0.0f, y2.data(), s.n);
    });
    // Same result (relative to the output scale).
    double maxErr = 0, scale = 0;
    const float *o = out.as<float>(), *oh = outh.as<float>();
    for (int64_t i = 0; i < s.m * s.n; ++i) {
      maxErr = std::max({maxErr, (double)std::fabs(o[i] - y2[i]),
                         (double)std::fabs(oh[i] - y2[i])});
      scale = std::max(scale, (double)std::fabs(y2[i]));
    }
    if (maxErr > 1e-3 * std::max(1.0, scale)) {
      std::fprintf(stderr, "error: results differ by %g\n", maxErr);
      return 1;
    }
    auto metric = [&](double ms, double bytes) {
      return s.m == 1 ? (s.k * s.n * bytes) / (ms * 1e6)      // GB/s of W
                      : (2.0 * s.m * s.k * s.n) / (ms * 1e6); // GFLOP/s
    };
    char name[64];
    std::snprintf(name, sizeof(name), "%lldx%lldx%lld", (long long)s.m,
                  (long long)s.k, (long long)s.n);
    std::printf("%-18s %12.3f %12.3f %12.3f %10.2f %12.1f %14.1f\n", name, ours,
                half, blas, ours / blas, metric(ours, 4.0), metric(half, 2.0));
  }
  return 0;
}
