//===- HotColdSolverTest.cpp - the exact hot/cold placement solver -------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Placement/HotColdSolver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

using namespace sparsec::placement;

namespace {
Layer uniformLayer(std::vector<double> mass, int64_t groupBytes, int64_t minGroups) {
  Layer l;
  std::sort(mass.begin(), mass.end(), std::greater<double>());
  l.groupMass = mass;
  l.bytes.resize(mass.size() + 1);
  for (size_t k = 0; k <= mass.size(); ++k)
    l.bytes[k] = int64_t(k) * groupBytes;
  l.minGroups = minGroups;
  return l;
}
} // namespace

TEST(HotColdSolver, KnownOptimum) {
  // Two layers of 4 groups at 10 bytes each, budget 50 bytes (5 groups).
  // Layer 0 masses 9 5 1 1, layer 1 masses 8 7 6 0.5: the best 5 groups
  // are 9, 8, 7, 6, 5 (k = 2, 3).
  Problem p;
  p.layers.push_back(uniformLayer({9, 5, 1, 1}, 10, 1));
  p.layers.push_back(uniformLayer({8, 7, 6, 0.5}, 10, 1));
  p.budget = 50;
  Solution s;
  std::string error;
  ASSERT_TRUE(solve(p, s, error)) << error;
  EXPECT_EQ(s.gpuGroups, (std::vector<int64_t>{2, 3}));
  EXPECT_DOUBLE_EQ(s.objective, 35.0);
  EXPECT_EQ(s.usedBytes, 50);
  EXPECT_EQ(s.unitBytes, 10);
  EXPECT_DOUBLE_EQ(s.bound, 35.0);
}

TEST(HotColdSolver, SplitConstraint) {
  // Same, but a split layer needs at least 3 GPU groups: layer 0 can only
  // be 0, 3 or 4 groups, so the optimum becomes layer 1 whole (4 groups,
  // 21.5) plus nothing of layer 0 (3 groups of layer 0 would cost 30 more);
  // with budget 70: layer 0 whole (16) + layer 1 at 3 (21) beats layer 0
  // at 3 (15) + layer 1 whole (21.5).
  Problem p;
  p.layers.push_back(uniformLayer({9, 5, 1, 1}, 10, 3));
  p.layers.push_back(uniformLayer({8, 7, 6, 0.5}, 10, 3));
  p.budget = 50;
  Solution s;
  std::string error;
  ASSERT_TRUE(solve(p, s, error)) << error;
  EXPECT_EQ(s.gpuGroups, (std::vector<int64_t>{0, 4}));
  EXPECT_DOUBLE_EQ(s.objective, 21.5);
  // The LP bound ignores the split constraint.
  EXPECT_DOUBLE_EQ(s.bound, 35.0);
  p.budget = 70;
  ASSERT_TRUE(solve(p, s, error)) << error;
  EXPECT_EQ(s.gpuGroups, (std::vector<int64_t>{4, 3}));
  EXPECT_DOUBLE_EQ(s.objective, 37.0);
}

TEST(HotColdSolver, EdgeBudgets) {
  Problem p;
  p.layers.push_back(uniformLayer({3, 2, 1}, 8, 1));
  p.budget = 0;
  Solution s;
  std::string error;
  ASSERT_TRUE(solve(p, s, error)) << error;
  EXPECT_EQ(s.gpuGroups, (std::vector<int64_t>{0}));
  EXPECT_EQ(s.objective, 0);
  p.budget = 7; // less than one group
  ASSERT_TRUE(solve(p, s, error)) << error;
  EXPECT_EQ(s.gpuGroups, (std::vector<int64_t>{0}));
  p.budget = 1000; // everything fits
  ASSERT_TRUE(solve(p, s, error)) << error;
  EXPECT_EQ(s.gpuGroups, (std::vector<int64_t>{3}));
  EXPECT_DOUBLE_EQ(s.objective, 6.0);
  EXPECT_DOUBLE_EQ(s.totalMass, 6.0);
}

TEST(HotColdSolver, PartialLastGroupAndMixedWidths) {
  // Layer 0: 3 groups of 64 neurons + one of 16 (bytes per neuron 4);
  // layer 1: different width (bytes per neuron 6). The cost unit is the
  // gcd of every option.
  Layer a;
  a.groupMass = {20, 10, 5, 1};
  a.bytes = {0, 256, 512, 768, 832};
  a.minGroups = 1;
  Layer b;
  b.groupMass = {30, 2};
  b.bytes = {0, 384, 768};
  b.minGroups = 1;
  Problem p;
  p.layers = {a, b};
  p.budget = 832;
  Solution s;
  std::string error;
  ASSERT_TRUE(solve(p, s, error)) << error;
  Solution e = solveExhaustive(p);
  EXPECT_DOUBLE_EQ(s.objective, e.objective);
  EXPECT_EQ(s.unitBytes, 64);
  EXPECT_LE(s.usedBytes, p.budget);
}

TEST(HotColdSolver, MatchesExhaustiveSearch) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> mass(0.0, 1.0);
  std::uniform_int_distribution<int> groups(1, 5), layers(1, 4), minG(1, 4),
      width(1, 3);
  for (int trial = 0; trial < 300; ++trial) {
    Problem p;
    int64_t total = 0;
    for (int l = 0, L = layers(rng); l < L; ++l) {
      std::vector<double> m(size_t(groups(rng)));
      for (double &v : m)
        v = mass(rng) * mass(rng);
      Layer layer = uniformLayer(m, 16 * width(rng), minG(rng));
      total += layer.bytes.back();
      p.layers.push_back(layer);
    }
    p.budget = std::uniform_int_distribution<int64_t>(0, total)(rng);
    Solution s;
    std::string error;
    ASSERT_TRUE(solve(p, s, error)) << error;
    Solution e = solveExhaustive(p);
    ASSERT_TRUE(e.feasible);
    EXPECT_NEAR(s.objective, e.objective, 1e-9) << "trial " << trial;
    EXPECT_LE(s.usedBytes, p.budget);
    EXPECT_GE(s.bound + 1e-9, s.objective);
    for (size_t l = 0; l < p.layers.size(); ++l) {
      int64_t k = s.gpuGroups[l], G = int64_t(p.layers[l].groupMass.size());
      EXPECT_TRUE(k == 0 || k == G || k >= p.layers[l].minGroups);
    }
  }
}

TEST(HotColdSolver, RejectsMalformedInput) {
  Problem p;
  Layer l;
  l.groupMass = {1, 2}; // not hot-first
  l.bytes = {0, 4, 8};
  p.layers = {l};
  p.budget = 8;
  Solution s;
  std::string error;
  EXPECT_FALSE(solve(p, s, error));
  EXPECT_NE(error.find("hot-first"), std::string::npos);
}
