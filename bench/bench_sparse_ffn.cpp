//===- bench_sparse_ffn.cpp - exact-sparse FFN decode vs dense ------------===//
//
// Part of the sparsec project.
//
// One FFN decode step (batch 1) at OPT-6.7B shapes: d = 4096, FFN = 16384,
// fp32. Synthetic pre-activations make neuron i active with a power-law
// frequency, scaled to the requested overall sparsity. Compares:
//   dense : linear(up) + relu + linear(down)            (sparsec kernels)
//   exact : linear(up) + relu + sparse_linear(down)     (skips zero neurons)
// and reports the bytes of weights each reads and the bandwidth bound.
//
//   sparsec-bench-sparse-ffn [--threads N] [--runs N] [--sparsity 0.9]
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Ops.h"
#include "sparsec/rt/Runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace sparsec::rt;

int main(int argc, char **argv) {
  int threads = 1, runs = 20;
  double sparsity = 0.9;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc)
      runs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--sparsity") && i + 1 < argc)
      sparsity = std::atof(argv[++i]);
  }
  const int64_t d = 4096, f = 16384;
  static const int64_t slots[] = {-1, -1, -1};
  ModelDesc desc{"bench", 0, nullptr, 0, nullptr, "", 0, 0, 3, slots, nullptr};
  Context ctx(desc, nullptr, threads);
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(d), w1(d * f), b1(f), w2(f * d), b2(d);
  for (float &v : x) v = u(rng);
  for (float &v : w1) v = u(rng) * 0.02f;
  for (float &v : w2) v = u(rng) * 0.02f;
  for (float &v : b2) v = u(rng);
  // Power-law activation probability p_i ~ (i+1)^-0.8, scaled so that the
  // expected active fraction is 1 - sparsity; the bias decides the sign of
  // each pre-activation for this token.
  std::vector<double> p(f);
  double sum = 0;
  for (int64_t i = 0; i < f; ++i)
    sum += p[i] = std::pow(double(i + 1), -0.8);
  double scale = (1.0 - sparsity) * f / sum;
  std::uniform_real_distribution<double> coin(0, 1);
  int64_t active = 0;
  for (int64_t i = 0; i < f; ++i) {
    bool on = coin(rng) < std::min(1.0, p[i] * scale);
    b1[i] = on ? 50.0f : -50.0f; // dominates x . W1 (|x . W1| < 2)
    active += on;
  }
  Tensor tx{x.data(), DType::f32, 2, {1, d}};
  Tensor tw1{w1.data(), DType::f32, 2, {d, f}}, tb1{b1.data(), DType::f32, 1, {f}};
  Tensor tw2{w2.data(), DType::f32, 2, {f, d}}, tb2{b2.data(), DType::f32, 1, {d}};

  auto time = [&](auto &&fn) {
    fn();
    std::vector<double> t;
    for (int i = 0; i < runs; ++i) {
      auto s = std::chrono::steady_clock::now();
      fn();
      t.push_back(std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - s).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  Tensor h, yd, ys;
  auto check = [&](bool ok) {
    if (!ok) {
      std::fprintf(stderr, "error: %s\n", ctx.error.c_str());
      std::exit(1);
    }
  };
  double up = time([&] {
    check(ops::linear(ctx, tx, tw1, &tb1, ops::Activation::relu, 0, h));
  });
  double down = time([&] {
    check(ops::linear(ctx, h, tw2, &tb2, ops::Activation::none, 1, yd));
  });
  double downSparse = time([&] {
    check(ops::sparseLinearInput(ctx, h, tw2, &tb2, 2, ys));
  });
  double maxErr = 0;
  for (int64_t i = 0; i < d; ++i)
    maxErr = std::max(maxErr, double(std::fabs(yd.as<float>()[i] - ys.as<float>()[i])));
  double mb = 1e6;
  std::printf("FFN decode d=%lld ffn=%lld fp32, threads %d, median of %d runs, "
              "measured sparsity %.3f (%lld active)\n",
              (long long)d, (long long)f, threads, runs,
              1.0 - double(active) / f, (long long)active);
  std::printf("%-34s %10s %14s %10s\n", "", "ms", "weight MB read", "GB/s");
  std::printf("%-34s %10.3f %14.1f %10.1f\n", "up projection (dense, both)", up,
              d * f * 4 / mb, d * f * 4 / (up * 1e6));
  std::printf("%-34s %10.3f %14.1f %10.1f\n", "down projection dense", down,
              f * d * 4 / mb, f * d * 4 / (down * 1e6));
  std::printf("%-34s %10.3f %14.1f %10.1f\n", "down projection exact-sparse",
              downSparse, active * d * 4 / mb,
              active * d * 4 / (downSparse * 1e6));
  std::printf("%-34s %10.3f\n%-34s %10.3f   speedup %.2fx (max abs diff %.2g)\n",
              "FFN dense", up + down, "FFN exact", up + downSparse,
              (up + down) / (up + downSparse), maxErr);
  return 0;
}
