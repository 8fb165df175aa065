//===- PredictorTrainingTest.cpp - low-rank predictor training ------------===//
//
// Part of the sparsec project.
//
// The randomised basis (wide layers) against the exact eigendecomposition
// on the same problem: the same ranks, test-split recall at the target, a
// predicted density no worse than the exact basis' by more than a little,
// and bit-identical results from two runs (fixed seed), and on every CPU.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Training/PredictorTraining.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

using namespace sparsec;

namespace {
struct Problem {
  int64_t m = 1600, d = 80, n = 160;
  std::vector<float> x, z;
  PredictorProblem pb;
  Problem() {
    std::mt19937 rng(3);
    std::normal_distribution<float> g(0.0f, 1.0f);
    // Inputs with a decaying spectrum (scale 1 / (1 + k / 4) on a random
    // basis), like LayerNorm outputs of a trained model.
    std::vector<float> mix(size_t(d * d));
    for (float &v : mix)
      v = g(rng) / std::sqrt(float(d));
    x.assign(size_t(m * d), 0.0f);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t k = 0; k < d; ++k) {
        float c = g(rng) / (1.0f + float(k) / 4.0f);
        for (int64_t j = 0; j < d; ++j)
          x[size_t(i * d + j)] += c * mix[size_t(k * d + j)];
      }
    pb.weight.resize(size_t(d * n));
    for (float &v : pb.weight)
      v = g(rng);
    pb.bias.assign(size_t(n), -0.8f);
    z.assign(size_t(m * n), 0.0f);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t k = 0; k < d; ++k)
        for (int64_t j = 0; j < n; ++j)
          z[size_t(i * n + j)] += x[size_t(i * d + k)] * pb.weight[size_t(k * n + j)];
    pb.samples = m;
    pb.d = d;
    pb.n = n;
    pb.inputs = x.data();
    pb.active = [this](int64_t i, int64_t j) {
      return z[size_t(i * pb.n + j)] + pb.bias[size_t(j)] > 0.0f;
    };
  }
};

std::vector<Predictor> train(const Problem &p, int64_t exactLimit) {
  PredictorOptions opts;
  opts.targetRecall = 0.99;
  opts.ranks = {10, 20};
  opts.exactBasisLimit = exactLimit;
  std::vector<Predictor> out;
  std::string error;
  EXPECT_TRUE(trainPredictors(p.pb, opts, out, error)) << error;
  return out;
}
} // namespace

TEST(PredictorTraining, RandomizedBasisMatchesExact) {
  Problem p;
  std::vector<Predictor> exact = train(p, 1 << 20), fast = train(p, 0);
  ASSERT_EQ(exact.size(), 2u);
  ASSERT_EQ(fast.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(exact[i].rank, fast[i].rank);
    EXPECT_GT(exact[i].actualDensity, 0.05);
    EXPECT_GE(fast[i].recall, 0.97) << "rank " << fast[i].rank;
    EXPECT_LE(fast[i].density, exact[i].density * 1.05 + 0.005)
        << "rank " << fast[i].rank << ": exact " << exact[i].density;
    // A useful predictor: it skips neurons.
    EXPECT_LT(fast[i].density, 0.9);
  }
  std::vector<Predictor> again = train(p, 0);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[1].w2, fast[1].w2);
  EXPECT_EQ(again[1].w1, fast[1].w1);
}

namespace {
/// FNV-1a over the bits of every predictor's weights and biases.
uint64_t weightsHash(const std::vector<Predictor> &ps) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::vector<float> &v) {
    for (float f : v) {
      uint32_t u;
      std::memcpy(&u, &f, sizeof u);
      h = (h ^ u) * 1099511628211ull;
    }
  };
  for (const Predictor &p : ps) {
    mix(p.w1);
    mix(p.w2);
    mix(p.bias);
  }
  return h;
}
} // namespace

// The trainer's hot loops run an AVX-512, AVX2 or baseline version chosen
// at run time, built without fused multiply-adds so that all give the same
// bits: the predictors of this problem are pinned, whichever CPU runs the
// test (the values were taken on an AVX-512 machine).
TEST(PredictorTraining, SameBitsOnEveryCpu) {
  Problem p;
  EXPECT_EQ(weightsHash(train(p, 1 << 20)), 0xf480c8c8a8b69cf4ull) << "exact basis";
  EXPECT_EQ(weightsHash(train(p, 0)), 0x72ee71298c851ea4ull) << "randomised basis";
}
