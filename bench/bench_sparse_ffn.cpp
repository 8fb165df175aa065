//===- bench_sparse_ffn.cpp - sparse FFN decode modes vs dense ------------===//
//
// Part of the sparsec project.
//
// One FFN decode step (batch 1) at OPT-6.7B shapes by default: d = 4096,
// FFN = 16384, fp32. Synthetic pre-activations make neuron i active with a
// power-law frequency, scaled to the requested overall sparsity. Modes, all
// with sparsec's own kernels:
//   dense     : linear(up) + relu + linear(down)
//   exact     : linear(up) + relu + sparse_linear(down, input side)
//   predicted : predict (rank r) + sparse_linear(up, output side, over the
//               predicted set) + relu + sparse_linear(down, input side)
//   predicted fp16 : the same with fp16-stored weights (F16C)
// The predictor's compute is real (rank --rank, random weights, so its cost
// is exact); the predicted set it drives is the actual active set plus
// false positives up to --precision (a trained predictor's precision), so the
// sparse kernels read what a real predictor would make them read.
// For each mode: weight bytes read, achieved GB/s, and the bound those bytes
// give at this machine's read bandwidth (measured in the same run).
//
//   sparsec-bench-sparse-ffn [--threads N] [--runs N] [--sparsity 0.9]
//        [--d 4096] [--ffn 16384] [--rank 256] [--precision 0.7] [--json]
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Half.h"
#include "sparsec/rt/Ops.h"
#include "sparsec/rt/Runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace sparsec::rt;

namespace {
struct Row {
  std::string name;
  double ms, bytes;
};
} // namespace

int main(int argc, char **argv) {
  int threads = 1, runs = 20;
  double sparsity = 0.9, precision = 0.7;
  int64_t d = 4096, f = 16384, rank = 256;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "error: %s expects a value\n", argv[i]);
        std::exit(1);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(next());
    else if (!std::strcmp(argv[i], "--runs"))
      runs = std::atoi(next());
    else if (!std::strcmp(argv[i], "--sparsity"))
      sparsity = std::atof(next());
    else if (!std::strcmp(argv[i], "--precision"))
      precision = std::atof(next());
    else if (!std::strcmp(argv[i], "--d"))
      d = std::atoll(next());
    else if (!std::strcmp(argv[i], "--ffn"))
      f = std::atoll(next());
    else if (!std::strcmp(argv[i], "--rank"))
      rank = std::atoll(next());
    else if (!std::strcmp(argv[i], "--json"))
      json = true;
    else {
      std::fprintf(stderr, "error: unknown option '%s'\n", argv[i]);
      return 1;
    }
  }
  if (threads < 1 || runs < 1 || d < 1 || f < 1 || rank < 1 ||
      !(sparsity >= 0 && sparsity < 1) || !(precision > 0 && precision <= 1)) {
    std::fprintf(stderr, "error: invalid option value\n");
    return 1;
  }
  static const int64_t slots[] = {-1, -1, -1, -1, -1, -1, -1, -1, -1};
  ModelDesc desc{"bench", 0, nullptr, 0, nullptr, "", 0, 0, 9, slots, nullptr};
  Context ctx(desc, nullptr, threads);
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(d), w1(d * f), w1t(f * d), b1(f), w2(f * d), b2(d);
  std::vector<float> p1(d * rank), p2(rank * f), pb(f);
  for (float &v : x) v = u(rng);
  for (float &v : w1) v = u(rng) * 0.02f;
  for (float &v : w2) v = u(rng) * 0.02f;
  for (float &v : b2) v = u(rng);
  for (float &v : p1) v = u(rng) * 0.05f;
  for (float &v : p2) v = u(rng) * 0.05f;
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < f; ++j)
      w1t[j * d + i] = w1[i * f + j];
  // Power-law activation probability p_i ~ (i+1)^-0.8, scaled so that the
  // expected active fraction is 1 - sparsity; the bias decides the sign of
  // each pre-activation for this token.
  std::vector<double> prob(f);
  double sum = 0;
  for (int64_t i = 0; i < f; ++i)
    sum += prob[i] = std::pow(double(i + 1), -0.8);
  double scale = (1.0 - sparsity) * f / sum;
  std::uniform_real_distribution<double> coin(0, 1);
  int64_t active = 0;
  std::vector<uint8_t> mask(f, 0);
  for (int64_t i = 0; i < f; ++i) {
    bool on = coin(rng) < std::min(1.0, prob[i] * scale);
    b1[i] = on ? 50.0f : -50.0f; // dominates x . W1 (|x . W1| < 2)
    mask[i] = on;
    active += on;
  }
  // The predicted set: every active neuron (recall 1) plus false positives
  // up to the requested precision.
  int64_t predicted = std::min<int64_t>(f, int64_t(std::ceil(active / precision)));
  for (int64_t i = f - 1, extra = predicted - active; i >= 0 && extra > 0; --i)
    if (!mask[i] && coin(rng) < 0.5) {
      mask[i] = 1;
      --extra;
    }
  predicted = 0;
  for (uint8_t m : mask)
    predicted += m;

  auto halfOf = [](const std::vector<float> &v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      h[i] = floatToHalf(v[i]);
    return h;
  };
  std::vector<uint16_t> w1tH = halfOf(w1t), w2H = halfOf(w2), p1H = halfOf(p1),
                        p2H = halfOf(p2);
  Tensor tx{x.data(), DType::f32, 2, {1, d}};
  Tensor tw1{w1.data(), DType::f32, 2, {d, f}}, tb1{b1.data(), DType::f32, 1, {f}};
  Tensor tw1t{w1t.data(), DType::f32, 2, {f, d}};
  Tensor tw2{w2.data(), DType::f32, 2, {f, d}}, tb2{b2.data(), DType::f32, 1, {d}};
  Tensor tp1{p1.data(), DType::f32, 2, {d, rank}}, tp2{p2.data(), DType::f32, 2, {rank, f}};
  Tensor tpb{pb.data(), DType::f32, 1, {f}};
  Tensor tmask{mask.data(), DType::b1, 2, {1, f}};
  Tensor tw1tH{w1tH.data(), DType::f16, 2, {f, d}}, tw2H{w2H.data(), DType::f16, 2, {f, d}};
  Tensor tp1H{p1H.data(), DType::f16, 2, {d, rank}}, tp2H{p2H.data(), DType::f16, 2, {rank, f}};

  auto check = [&](bool ok) {
    if (!ok) {
      std::fprintf(stderr, "error: %s\n", ctx.error.c_str());
      std::exit(1);
    }
  };
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
  Tensor h, hs, yd, ye, yp, yh, m;
  double dense = time([&] {
    check(ops::linear(ctx, tx, tw1, &tb1, ops::Activation::relu, 0, h));
    check(ops::linear(ctx, h, tw2, &tb2, ops::Activation::none, 1, yd));
  });
  double exact = time([&] {
    check(ops::linear(ctx, tx, tw1, &tb1, ops::Activation::relu, 0, h));
    check(ops::sparseLinearInput(ctx, h, tw2, &tb2, 1, ye));
  });
  auto predictedStep = [&](const Tensor &q1, const Tensor &q2, const Tensor &up,
                           const Tensor &down, int outSlot, Tensor &y) {
    check(ops::predict(ctx, tx, q1, q2, &tpb, 0.0f, 2, m));
    check(ops::sparseLinearOutput(ctx, tx, up, &tb1, tmask,
                                  ops::Activation::relu, 3, hs));
    check(ops::sparseLinearInput(ctx, hs, down, &tb2, outSlot, y));
  };
  double pred = time([&] { predictedStep(tp1, tp2, tw1t, tw2, 4, yp); });
  double predHalf = time([&] { predictedStep(tp1H, tp2H, tw1tH, tw2H, 5, yh); });
  double predictorOnly = time([&] {
    check(ops::predict(ctx, tx, tp1, tp2, &tpb, 0.0f, 2, m));
  });
  // The predicted step's parts apart (float32 and float16 weights): the
  // predictor, the up projection over the set, the down projection over
  // the up projection's non-zeros. Each part repeated alone may be served
  // partly from the L3 (the float32 predictor's 21 MB fits a 32 MB one),
  // so the parts can add up to less than the step.
  // (Slots 6-8: the outputs above stay for the checks below.)
  Tensor mp, hp, yq;
  struct Parts {
    double predictor, up, down;
  };
  auto partsOf = [&](const Tensor &q1, const Tensor &q2, const Tensor &up,
                     const Tensor &down) {
    Parts p;
    p.predictor = time([&] { check(ops::predict(ctx, tx, q1, q2, &tpb, 0.0f, 6, mp)); });
    p.up = time([&] {
      check(ops::sparseLinearOutput(ctx, tx, up, &tb1, tmask,
                                    ops::Activation::relu, 7, hp));
    });
    p.down = time([&] { check(ops::sparseLinearInput(ctx, hp, down, &tb2, 8, yq)); });
    return p;
  };
  const Parts parts = partsOf(tp1, tp2, tw1t, tw2);
  const Parts partsHalf = partsOf(tp1H, tp2H, tw1tH, tw2H);

  // Correctness against dense (the predicted set covers every active
  // neuron, so the results agree up to summation order / fp16 rounding).
  auto maxDiff = [&](const Tensor &a) {
    double e = 0;
    for (int64_t i = 0; i < d; ++i)
      e = std::max(e, double(std::fabs(a.as<float>()[i] - yd.as<float>()[i])));
    return e;
  };
  double errExact = maxDiff(ye), errPred = maxDiff(yp), errHalf = maxDiff(yh);

  // Read bandwidth of this machine with these threads: sum of a 1 GiB array.
  std::vector<float> big(size_t(1) << 28, 1.0f);
  const int64_t chunks = int64_t(big.size() / 4096);
  std::vector<float> partial(size_t(chunks), 0.0f); // one slot per range start
  double bwMs = time([&] {
    ctx.pool.parallelFor(chunks, 1, [&](int64_t b, int64_t e) {
      // 16 independent accumulators: limited by memory, not by the adds.
      float acc[16] = {};
      for (int64_t i = b * 4096; i < e * 4096; i += 16)
        for (int k = 0; k < 16; ++k)
          acc[k] += big[size_t(i + k)];
      float total = 0;
      for (float a : acc)
        total += a;
      partial[size_t(b)] = total; // keeps the loop
    });
  });
  double bandwidth = double(big.size()) * 4 / (bwMs * 1e6); // GB/s

  double df = double(d) * double(f);
  double predictorBytes = double(rank) * double(d + f) * 4;
  std::vector<Row> rows = {
      {"dense", dense, 2 * df * 4},
      {"exact", exact, df * 4 + double(active) * d * 4},
      {"predicted", pred, predictorBytes + 2.0 * predicted * d * 4},
      {"predicted fp16", predHalf,
       predictorBytes / 2 + 2.0 * predicted * d * 2},
  };
  if (json) {
    std::printf("{\"d\": %lld, \"ffn\": %lld, \"threads\": %d, \"sparsity\": %.4f, "
                "\"predicted_density\": %.4f, \"rank\": %lld, \"bandwidth_gbs\": %.2f, "
                "\"predictor_ms\": %.4f, \"modes\": [",
                (long long)d, (long long)f, threads, 1.0 - double(active) / f,
                double(predicted) / f, (long long)rank, bandwidth, predictorOnly);
    for (size_t i = 0; i < rows.size(); ++i)
      std::printf("%s{\"name\": \"%s\", \"ms\": %.4f, \"bytes\": %.0f}",
                  i ? ", " : "", rows[i].name.c_str(), rows[i].ms, rows[i].bytes);
    std::printf("], \"parts\": {");
    const std::pair<const char *, const Parts *> named[] = {
        {"predicted", &parts}, {"predicted fp16", &partsHalf}};
    for (size_t i = 0; i < 2; ++i)
      std::printf("%s\"%s\": {\"predictor_ms\": %.4f, \"up_ms\": %.4f, "
                  "\"down_ms\": %.4f}",
                  i ? ", " : "", named[i].first, named[i].second->predictor,
                  named[i].second->up, named[i].second->down);
    std::printf("}}\n");
    return 0;
  }
  std::printf("FFN decode step d=%lld ffn=%lld fp32 activations, %d thread(s), "
              "median of %d runs\n",
              (long long)d, (long long)f, threads, runs);
  std::printf("measured sparsity %.3f (%lld active), predicted set %lld "
              "(precision %.2f), predictor rank %lld (%.3f ms alone)\n",
              1.0 - double(active) / f, (long long)active, (long long)predicted,
              double(active) / predicted, (long long)rank, predictorOnly);
  std::printf("read bandwidth of this machine: %.1f GB/s\n\n", bandwidth);
  std::printf("%-16s %9s %8s %10s %8s %12s\n", "mode", "ms", "speedup",
              "weight MB", "GB/s", "bound ms");
  for (const Row &r : rows)
    std::printf("%-16s %9.3f %7.2fx %10.1f %8.1f %12.3f\n", r.name.c_str(),
                r.ms, dense / r.ms, r.bytes / 1e6, r.bytes / (r.ms * 1e6),
                r.bytes / (bandwidth * 1e6));
  std::printf("\npredicted step's parts, ms: predictor %.3f / %.3f, up "
              "%.3f / %.3f, down %.3f / %.3f (float32 / float16 weights)\n",
              parts.predictor, partsHalf.predictor, parts.up, partsHalf.up,
              parts.down, partsHalf.down);
  std::printf("\nmax |y - y_dense|: exact %.2g, predicted %.2g, predicted "
              "fp16 %.2g\n",
              errExact, errPred, errHalf);
  return 0;
}
