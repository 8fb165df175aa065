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
//   sparsec-bench-linear [--threads N] [--runs N] [--shape MxKxN ...]
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
  struct Shape { int64_t m, k, n; };
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) {
      long long m, k, n;
      char tail;
      if (std::sscanf(argv[++i], "%lldx%lldx%lld%c", &m, &k, &n, &tail) != 3 ||
          m < 1 || k < 1 || n < 1) {
        std::fprintf(stderr, "error: --shape wants MxKxN (positive), got '%s'\n",
                     argv[i]);
        return 1;
      }
      shapes.push_back({m, k, n});
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--runs N] [--shape MxKxN ...]\n",
                   argv[0]);
      return 1;
    }
  }
  if (threads < 1 || runs < 1) {
    std::fprintf(stderr, "error: --threads and --runs must be at least 1\n");
    return 1;
  }
  if (shapes.empty())
    shapes = {{1, 4096, 4096}, {1, 4096, 16384}, {1, 16384, 4096},
              {128, 4096, 4096}, {128, 4096, 16384}, {128, 16384, 4096}};
  openblas_set_num_threads(threads);
  static const int64_t slotBytes[] = {-1, -1};
  ModelDesc desc{"bench", 0, nullptr, 0, nullptr, "", 0, 0, 2, slotBytes, nullptr};
  Context ctx(desc, nullptr, threads);

  std::printf("threads %d, median of %d runs\n", threads, runs);
  std::printf("%-18s %12s %12s %12s %10s %12s %14s\n", "M x K x N", "sparsec ms",
              "sparsec f16 W", "OpenBLAS ms", "ratio", "GB/s|GFLOP/s",
              "f16 GB/s|GFLOP/s");
  // Two passes: sparsec on every shape, then OpenBLAS on every shape.
  // OpenBLAS's threads keep spinning after a call and would take the second
  // core from the sparsec calls that follow; each shape's data comes from
  // its own seed, so the second pass rebuilds the same x and W.
  struct Data {
    std::vector<float> x, w;
    std::vector<uint16_t> wh;
  };
  auto makeData = [](const Shape &s, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1, 1);
    Data d;
    d.x.resize(size_t(s.m * s.k));
    d.w.resize(size_t(s.k * s.n));
    d.wh.resize(d.w.size());
    for (float &v : d.x)
      v = dist(rng);
    for (size_t i = 0; i < d.w.size(); ++i) {
      d.wh[i] = floatToHalf(dist(rng));
      d.w[i] = halfToFloat(d.wh[i]);
    }
    return d;
  };
  auto runLinear = [&](Data &d, const Shape &s, bool half, Tensor &out) {
    Tensor tx{d.x.data(), DType::f32, 2, {s.m, s.k}};
    Tensor tw{half ? static_cast<void *>(d.wh.data()) : d.w.data(),
              half ? DType::f16 : DType::f32, 2, {s.k, s.n}};
    if (!ops::linear(ctx, tx, tw, nullptr, ops::Activation::none, half ? 1 : 0,
                     out)) {
      std::fprintf(stderr, "error: %s\n", ctx.error.c_str());
      std::exit(1);
    }
  };
  std::vector<std::pair<double, double>> ours(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    Data d = makeData(shapes[i], unsigned(i));
    Tensor out, outh;
    ours[i].first = timeMs(runs, [&] { runLinear(d, shapes[i], false, out); });
    ours[i].second = timeMs(runs, [&] { runLinear(d, shapes[i], true, outh); });
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape &s = shapes[i];
    Data d = makeData(s, unsigned(i));
    std::vector<float> y2(size_t(s.m * s.n));
    double blas = timeMs(runs, [&] {
      if (s.m == 1)
        cblas_sgemv(CblasRowMajor, CblasTrans, s.k, s.n, 1.0f, d.w.data(), s.n,
                    d.x.data(), 1, 0.0f, y2.data(), 1);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k,
                    1.0f, d.x.data(), s.k, d.w.data(), s.n, 0.0f, y2.data(),
                    s.n);
    });
    // Same result (relative to the output scale).
    Tensor out, outh;
    runLinear(d, s, false, out);
    runLinear(d, s, true, outh);
    double maxErr = 0, scale = 0;
    const float *o = out.as<float>(), *oh = outh.as<float>();
    for (int64_t j = 0; j < s.m * s.n; ++j) {
      maxErr = std::max({maxErr, (double)std::fabs(o[j] - y2[j]),
                         (double)std::fabs(oh[j] - y2[j])});
      scale = std::max(scale, (double)std::fabs(y2[j]));
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
    std::printf("%-18s %12.3f %12.3f %12.3f %10.2f %12.1f %14.1f\n", name,
                ours[i].first, ours[i].second, blas, ours[i].first / blas,
                metric(ours[i].first, 4.0), metric(ours[i].second, 2.0));
  }
  return 0;
}
