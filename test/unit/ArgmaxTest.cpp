//===- ArgmaxTest.cpp - the greedy pick against std::max_element ----------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "core/Argmax.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using sparsec::rt::cli::argmaxFirst;

namespace {
int64_t reference(const std::vector<float> &x) {
  return std::max_element(x.begin(), x.end()) - x.begin();
}
} // namespace

TEST(Argmax, MatchesMaxElementOnRandomRows) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  // Lengths around the 16-lane blocks, and a vocabulary-wide row.
  for (int n : {1, 2, 15, 16, 17, 31, 33, 256, 1000, 50272}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int rep = 0; rep < 20; ++rep) {
      for (float &v : x)
        v = g(rng);
      ASSERT_EQ(argmaxFirst(x.data(), n), reference(x)) << "n = " << n;
    }
  }
}

TEST(Argmax, FirstOfEqualMaxima) {
  std::vector<float> x(100, 1.0f);
  x[37] = x[70] = x[99] = 5.0f;
  EXPECT_EQ(argmaxFirst(x.data(), 100), 37);
  // The maximum only in the tail past the last full block of lanes.
  std::vector<float> y(40, -2.0f);
  y[38] = 3.0f;
  EXPECT_EQ(argmaxFirst(y.data(), 40), 38);
  // Signed zeros compare equal: the first one.
  std::vector<float> z = {-1.0f, -0.0f, 0.0f, -3.0f};
  EXPECT_EQ(argmaxFirst(z.data(), 4), reference(z));
  EXPECT_EQ(argmaxFirst(z.data(), 4), 1);
  // All -inf: index 0.
  std::vector<float> ninf(20, -INFINITY);
  EXPECT_EQ(argmaxFirst(ninf.data(), 20), 0);
  EXPECT_EQ(argmaxFirst(nullptr, 0), 0);
}

TEST(Argmax, NaNsAsMaxElement) {
  // A NaN later in the row is never the largest.
  std::vector<float> x = {0.5f, NAN, 2.0f, NAN, 1.0f};
  EXPECT_EQ(argmaxFirst(x.data(), 5), reference(x));
  EXPECT_EQ(argmaxFirst(x.data(), 5), 2);
  std::vector<float> wide(50, 0.0f);
  wide[20] = NAN;
  wide[45] = 4.0f;
  EXPECT_EQ(argmaxFirst(wide.data(), 50), reference(wide));
  // A NaN first element: std::max_element keeps it.
  std::vector<float> first = {NAN, 3.0f, 7.0f};
  EXPECT_EQ(argmaxFirst(first.data(), 3), reference(first));
  EXPECT_EQ(argmaxFirst(first.data(), 3), 0);
}
