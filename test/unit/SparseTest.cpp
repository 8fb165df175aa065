//===- SparseTest.cpp - neuron-sparse kernels vs the dense kernel ---------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace sparsec::rt;

namespace {
const int64_t kSlots[] = {-1, -1};
const ModelDesc kDesc{"sparse-test", 0, nullptr, 0, nullptr, "", 0, 0,
                      2, kSlots, nullptr};

struct Case {
  int64_t m, k, n;
  double sparsity;
  int threads;
};

class SparseLinearTest : public ::testing::TestWithParam<Case> {};
} // namespace

TEST_P(SparseLinearTest, MatchesDenseLinear) {
  const Case c = GetParam();
  std::mt19937 rng(uint32_t(c.m * 131 + c.k * 7 + c.n));
  std::uniform_real_distribution<float> val(-1, 1), coin(0, 1);
  std::vector<float> x(c.m * c.k), w(c.k * c.n), b(c.n);
  for (float &v : x)
    v = coin(rng) < c.sparsity ? 0.0f : std::fabs(val(rng)); // ReLU output
  for (float &v : w)
    v = val(rng);
  for (float &v : b)
    v = val(rng);
  Tensor tx{x.data(), DType::f32, 2, {c.m, c.k}};
  Tensor tw{w.data(), DType::f32, 2, {c.k, c.n}};
  Tensor tb{b.data(), DType::f32, 1, {c.n}};
  Context ctx(kDesc, nullptr, c.threads);
  Tensor sparse, dense;
  ASSERT_TRUE(ops::sparseLinearInput(ctx, tx, tw, &tb, 0, sparse)) << ctx.error;
  ASSERT_TRUE(ops::linear(ctx, tx, tw, &tb, ops::Activation::none, 1, dense))
      << ctx.error;
  ASSERT_EQ(sparse.rank, 2);
  EXPECT_EQ(sparse.shape[0], c.m);
  EXPECT_EQ(sparse.shape[1], c.n);
  for (int64_t i = 0; i < c.m * c.n; ++i)
    ASSERT_NEAR(sparse.as<float>()[i], dense.as<float>()[i],
                1e-4f * (1.0f + std::fabs(dense.as<float>()[i])))
        << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SparseLinearTest,
    ::testing::Values(Case{1, 1024, 256, 0.9, 1}, Case{1, 1024, 256, 0.0, 2},
                      Case{1, 1024, 256, 1.0, 2}, Case{3, 37, 19, 0.5, 2},
                      Case{7, 300, 1000, 0.97, 2}, Case{64, 128, 33, 0.8, 1},
                      Case{1, 16384, 4096, 0.9, 2}));

TEST(SparseLinear, RejectsMismatchedShapes) {
  std::vector<float> x(8), w(9 * 4);
  Tensor tx{x.data(), DType::f32, 2, {1, 8}};
  Tensor tw{w.data(), DType::f32, 2, {9, 4}};
  Context ctx(kDesc, nullptr, 1);
  Tensor out;
  EXPECT_FALSE(ops::sparseLinearInput(ctx, tx, tw, nullptr, 0, out));
  EXPECT_NE(ctx.error.find("sparse_linear"), std::string::npos);
}
