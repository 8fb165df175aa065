//===- SparseTest.cpp - neuron-sparse kernels vs the dense kernel ---------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "cpu/Common.h"
#include "sparsec/rt/Half.h"
#include "sparsec/rt/Ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

namespace {
/// float16 round trip (what fp16-stored weights hold).
uint16_t toHalfBits(float f) {
  // Round through the runtime's own cast so the test reads what the pack
  // would store.
  return sparsec::rt::floatToHalf(f);
}

class SparseOutputTest : public ::testing::TestWithParam<Case> {};
} // namespace

// Output side (predicted up projection): selected neurons equal the dense
// linear, the others are exactly 0; fp32 and fp16-stored weights.
TEST_P(SparseOutputTest, MatchesDenseOnSelectedNeurons) {
  const Case c = GetParam();
  std::mt19937 rng(uint32_t(c.m * 17 + c.k * 3 + c.n));
  std::uniform_real_distribution<float> val(-1, 1), coin(0, 1);
  std::vector<float> x(c.m * c.k), w(c.k * c.n), wt(c.n * c.k), b(c.n);
  std::vector<uint8_t> mask(c.m * c.n);
  for (float &v : x)
    v = val(rng);
  for (float &v : w)
    v = val(rng);
  for (float &v : b)
    v = val(rng);
  for (uint8_t &m : mask)
    m = coin(rng) >= c.sparsity;
  for (int64_t i = 0; i < c.k; ++i)
    for (int64_t j = 0; j < c.n; ++j)
      wt[j * c.k + i] = w[i * c.n + j];
  std::vector<uint16_t> wtHalf(wt.size());
  std::vector<float> wHalfRounded(w.size());
  for (size_t i = 0; i < wt.size(); ++i)
    wtHalf[i] = toHalfBits(wt[i]);
  for (int64_t i = 0; i < c.k; ++i)
    for (int64_t j = 0; j < c.n; ++j)
      wHalfRounded[i * c.n + j] = sparsec::rt::halfToFloat(wtHalf[j * c.k + i]);
  Tensor tx{x.data(), DType::f32, 2, {c.m, c.k}};
  Tensor tb{b.data(), DType::f32, 1, {c.n}};
  Tensor tm{mask.data(), DType::b1, 2, {c.m, c.n}};
  for (bool half : {false, true}) {
    Tensor tw{w.data(), DType::f32, 2, {c.k, c.n}};
    if (half)
      tw.data = wHalfRounded.data();
    Tensor twt = half ? Tensor{wtHalf.data(), DType::f16, 2, {c.n, c.k}}
                      : Tensor{wt.data(), DType::f32, 2, {c.n, c.k}};
    Context ctx(kDesc, nullptr, c.threads);
    Tensor sparse, dense;
    ASSERT_TRUE(ops::sparseLinearOutput(ctx, tx, twt, &tb, tm,
                                        ops::Activation::none, 0, sparse))
        << ctx.error;
    ASSERT_TRUE(ops::linear(ctx, tx, tw, &tb, ops::Activation::none, 1, dense))
        << ctx.error;
    for (int64_t i = 0; i < c.m * c.n; ++i) {
      if (!mask[i]) {
        ASSERT_EQ(sparse.as<float>()[i], 0.0f) << "element " << i;
        continue;
      }
      ASSERT_NEAR(sparse.as<float>()[i], dense.as<float>()[i],
                  1e-4f * (1.0f + std::fabs(dense.as<float>()[i])))
          << "element " << i << (half ? " (fp16 weights)" : "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SparseOutputTest,
    ::testing::Values(Case{1, 256, 1024, 0.9, 1}, Case{1, 256, 1024, 0.0, 2},
                      Case{1, 256, 1024, 1.0, 2}, Case{3, 37, 19, 0.5, 2},
                      Case{5, 300, 1000, 0.97, 2}, Case{64, 129, 33, 0.8, 1}));

// The input side with fp16-stored weights equals the dense linear over the
// same (rounded) weights.
TEST(SparseLinear, HalfWeightsMatchDense) {
  const int64_t m = 2, k = 517, n = 301;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> val(-1, 1), coin(0, 1);
  std::vector<float> x(m * k), w(k * n);
  std::vector<uint16_t> wh(k * n);
  for (float &v : x)
    v = coin(rng) < 0.8 ? 0.0f : std::fabs(val(rng));
  for (size_t i = 0; i < w.size(); ++i) {
    wh[i] = toHalfBits(val(rng));
    w[i] = sparsec::rt::halfToFloat(wh[i]);
  }
  Tensor tx{x.data(), DType::f32, 2, {m, k}};
  Tensor tw{w.data(), DType::f32, 2, {k, n}};
  Tensor twh{wh.data(), DType::f16, 2, {k, n}};
  Context ctx(kDesc, nullptr, 2);
  Tensor sparse, dense;
  ASSERT_TRUE(ops::sparseLinearInput(ctx, tx, twh, nullptr, 0, sparse)) << ctx.error;
  ASSERT_TRUE(ops::linear(ctx, tx, tw, nullptr, ops::Activation::none, 1, dense));
  for (int64_t i = 0; i < m * n; ++i)
    ASSERT_NEAR(sparse.as<float>()[i], dense.as<float>()[i],
                1e-4f * (1.0f + std::fabs(dense.as<float>()[i])));
}

// bfloat16 rounding: nearest of the two neighbours (ties to even), NaN
// stays NaN, past the largest bfloat16 to infinity; widening is exact.
TEST(BFloat16, RoundsToNearestEven) {
  auto ref = [](float f) -> uint16_t {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    // The truncation and the next bfloat16 away from 0 (infinity read as
    // 2^128, as rounding with an unbounded exponent would have it).
    uint16_t lo = uint16_t(x >> 16), hi = uint16_t(lo + 1);
    if ((lo & 0x7fffu) >= 0x7f80u) // f is infinite
      return lo;
    const double a = sparsec::rt::bfloat16ToFloat(lo);
    const double b = (hi & 0x7fffu) == 0x7f80u
                         ? std::copysign(std::ldexp(1.0, 128), double(f))
                         : double(sparsec::rt::bfloat16ToFloat(hi));
    const double da = std::fabs(double(f) - a), db = std::fabs(b - double(f));
    return da < db || (da == db && !(lo & 1)) ? lo : hi;
  };
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t x = bits(rng);
    if (i % 4 == 0)
      x = (x & 0xffff0000u) | 0x8000u; // exact ties
    float f;
    std::memcpy(&f, &x, 4);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(
          sparsec::rt::bfloat16ToFloat(sparsec::rt::floatToBFloat16(f))));
      continue;
    }
    ASSERT_EQ(sparsec::rt::floatToBFloat16(f), ref(f)) << std::hex << x;
  }
  EXPECT_EQ(sparsec::rt::floatToBFloat16(3.4028235e38f), 0x7f80u); // inf
  EXPECT_EQ(sparsec::rt::floatToBFloat16(-0.0f), 0x8000u);
  EXPECT_EQ(sparsec::rt::bfloat16ToFloat(0x3f80u), 1.0f);
}

// bfloat16 weights (--weights bf16) in the x86 kernels: the dense linear
// (streamed at 2 rows, packed at 96), both sparse sides and the predictor
// match float32 kernels over the same rounded weights.
TEST(SparseLinear, BFloat16WeightsMatchRounded) {
  const int64_t k = 517, n = 301;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> val(-1, 1), coin(0, 1);
  std::vector<float> w(k * n), wt(n * k);
  std::vector<uint16_t> wb(k * n), wtb(n * k);
  for (size_t i = 0; i < w.size(); ++i) {
    wb[i] = sparsec::rt::floatToBFloat16(val(rng));
    w[i] = sparsec::rt::bfloat16ToFloat(wb[i]);
  }
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j) {
      wtb[j * k + i] = wb[i * n + j];
      wt[j * k + i] = w[i * n + j];
    }
  Context ctx(kDesc, nullptr, 2);
  auto near = [](const Tensor &a, const Tensor &b) {
    ASSERT_EQ(a.numel(), b.numel());
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_NEAR(a.as<float>()[i], b.as<float>()[i],
                  1e-4f * (1.0f + std::fabs(b.as<float>()[i])))
          << i;
  };
  for (int64_t m : {2, 96}) {
    std::vector<float> x(m * k);
    for (float &v : x)
      v = coin(rng) < 0.8 ? 0.0f : std::fabs(val(rng));
    Tensor tx{x.data(), DType::f32, 2, {m, k}};
    Tensor tw{w.data(), DType::f32, 2, {k, n}};
    Tensor twb{wb.data(), DType::bf16, 2, {k, n}};
    Tensor got, want;
    ASSERT_TRUE(
        ops::linear(ctx, tx, twb, nullptr, ops::Activation::relu, 0, got))
        << ctx.error;
    ASSERT_TRUE(
        ops::linear(ctx, tx, tw, nullptr, ops::Activation::relu, 1, want));
    near(got, want);
    ASSERT_TRUE(ops::sparseLinearInput(ctx, tx, twb, nullptr, 0, got))
        << ctx.error;
    ASSERT_TRUE(
        ops::linear(ctx, tx, tw, nullptr, ops::Activation::none, 1, want));
    near(got, want);
  }
  // The output side over every neuron: x [2, k] . wt^T.
  std::vector<float> x(2 * k);
  for (float &v : x)
    v = val(rng);
  std::vector<uint8_t> all(n, 1);
  Tensor tx{x.data(), DType::f32, 2, {2, k}};
  Tensor mask{all.data(), DType::b1, 1, {n}};
  Tensor tw{w.data(), DType::f32, 2, {k, n}};
  Tensor twtb{wtb.data(), DType::bf16, 2, {n, k}};
  Tensor got, want;
  ASSERT_TRUE(ops::sparseLinearOutput(ctx, tx, twtb, nullptr, mask,
                                      ops::Activation::none, 0, got))
      << ctx.error;
  ASSERT_TRUE(
      ops::linear(ctx, tx, tw, nullptr, ops::Activation::none, 1, want));
  near(got, want);
  // A wrong weight type is named.
  std::vector<int32_t> wi(k * n);
  Tensor twi{wi.data(), DType::i32, 2, {k, n}};
  EXPECT_FALSE(ops::sparseLinearInput(ctx, tx, twi, nullptr, 0, got));
  EXPECT_NE(ctx.error.find("float32, float16 or bfloat16"), std::string::npos)
      << ctx.error;
}

// The predictor's mask equals a double-precision reference of
// (x . w1) . w2 + b > t, away from the threshold.
TEST(Predict, MatchesReference) {
  for (int64_t rows : {1, 5}) {
    const int64_t d = 67, r = 9, n = 131;
    const float threshold = 0.25f;
    std::mt19937 rng(static_cast<uint32_t>(rows));
    std::uniform_real_distribution<float> val(-1, 1);
    std::vector<float> x(rows * d), w1(d * r), w2(r * n), b(n);
    for (float &v : x) v = val(rng);
    for (float &v : w1) v = val(rng);
    for (float &v : w2) v = val(rng);
    for (float &v : b) v = val(rng);
    Tensor tx{x.data(), DType::f32, 2, {rows, d}};
    Tensor t1{w1.data(), DType::f32, 2, {d, r}};
    Tensor t2{w2.data(), DType::f32, 2, {r, n}};
    Tensor tb{b.data(), DType::f32, 1, {n}};
    Context ctx(kDesc, nullptr, 2);
    Tensor mask;
    ASSERT_TRUE(ops::predict(ctx, tx, t1, t2, &tb, threshold, 0, mask)) << ctx.error;
    ASSERT_EQ(mask.dtype, DType::b1);
    ASSERT_EQ(mask.shape[1], n);
    int64_t checked = 0, on = 0;
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t j = 0; j < n; ++j) {
        double logit = b[j];
        for (int64_t e = 0; e < r; ++e) {
          double h = 0;
          for (int64_t i = 0; i < d; ++i)
            h += double(x[row * d + i]) * w1[i * r + e];
          logit += h * w2[e * n + j];
        }
        if (std::fabs(logit - threshold) < 1e-3)
          continue;
        ++checked;
        on += logit > threshold;
        ASSERT_EQ(mask.as<uint8_t>()[row * n + j] != 0, logit > threshold)
            << "row " << row << " neuron " << j;
      }
    EXPECT_GT(checked, rows * n * 9 / 10);
    EXPECT_GT(on, 0);
    EXPECT_LT(on, checked);
  }
}

// A run marked exactFfn (generate's prompt) selects every neuron, where the
// predictor would select some; the output side then equals the dense
// linear on every neuron.
TEST(Predict, ExactFfnSelectsEveryNeuron) {
  // 3 rows: per (row, neuron) pair; 20: a blocked GEMM over the
  // neuron-major weight.
  for (const int64_t rows : {3, 20}) {
    const int64_t d = 16, r = 4, n = 40;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> val(-1, 1);
    std::vector<float> x(rows * d), w1(d * r), w2(r * n);
    for (float &v : x)
      v = val(rng);
    for (float &v : w1)
      v = val(rng);
    for (float &v : w2)
      v = val(rng);
    Tensor tx{x.data(), DType::f32, 2, {rows, d}};
    Tensor t1{w1.data(), DType::f32, 2, {d, r}};
    Tensor t2{w2.data(), DType::f32, 2, {r, n}};
    Context ctx(kDesc, nullptr, 2);
    Tensor predicted;
    ASSERT_TRUE(ops::predict(ctx, tx, t1, t2, nullptr, 0.0f, 0, predicted))
        << ctx.error;
    const uint8_t *pm = predicted.as<uint8_t>();
    const int64_t on = std::count(pm, pm + rows * n, uint8_t(1));
    EXPECT_GT(on, 0);
    EXPECT_LT(on, rows * n); // the predictor leaves some out
    ctx.exactFfn = true;
    Tensor all;
    ASSERT_TRUE(ops::predict(ctx, tx, t1, t2, nullptr, 0.0f, 1, all))
        << ctx.error;
    ASSERT_EQ(all.dtype, DType::b1);
    ASSERT_EQ(all.numel(), rows * n);
    const uint8_t *am = all.as<uint8_t>();
    EXPECT_EQ(std::count(am, am + rows * n, uint8_t(1)), rows * n);
    // The up projection over that mask (neuron-major weight [n, d]) is the
    // dense product on every (row, neuron).
    std::vector<float> w(n * d);
    for (float &v : w)
      v = val(rng);
    Tensor tw{w.data(), DType::f32, 2, {n, d}};
    Tensor y;
    ASSERT_TRUE(ops::sparseLinearOutput(ctx, tx, tw, nullptr, all,
                                        ops::Activation::none, 0, y))
        << ctx.error;
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0;
        for (int64_t i = 0; i < d; ++i)
          ref += double(x[row * d + i]) * w[j * d + i];
        EXPECT_NEAR(y.as<float>()[row * n + j], ref, 1e-4)
            << "rows " << rows << ": row " << row << " neuron " << j;
      }
  }
}

// The blocked GEMM over a transposed B ([N, K], a neuron-major weight) in
// float32, float16 and bfloat16, packing per call and through the pack
// cache (twice: packed, then reused), against a double reference with the
// bias and ReLU.
TEST(Gemm, TransposedWeightMatchesReference) {
  const int64_t K = 75, N = 53;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> val(-1, 1);
  for (const int64_t M : {1, 7, 40})
    for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
      std::vector<float> a(M * K), w(N * K), bias(N);
      for (float &v : a)
        v = val(rng);
      for (float &v : bias)
        v = val(rng);
      std::vector<uint16_t> w16(N * K);
      for (int64_t i = 0; i < N * K; ++i) {
        const float v = val(rng);
        w16[i] = dt == DType::f16 ? floatToHalf(v) : floatToBFloat16(v);
        w[i] = dt == DType::f16    ? halfToFloat(w16[i])
               : dt == DType::bf16 ? bfloat16ToFloat(w16[i])
                                   : v;
      }
      ops::detail::PackCache cache(size_t(1) << 24);
      for (int pass = 0; pass < 3; ++pass) {
        std::vector<float> c(M * N, -7.0f);
        ops::detail::GemmArgs g;
        g.M = M, g.N = N, g.K = K;
        g.A = a.data(), g.lda = K;
        if (dt == DType::f16)
          g.Bh = reinterpret_cast<const ops::detail::Half *>(w16.data());
        else if (dt == DType::bf16)
          g.Bb = reinterpret_cast<const ops::detail::BFloat *>(w16.data());
        else
          g.B = w.data();
        g.ldb = K;
        g.transB = true;
        g.C = c.data(), g.ldc = N;
        g.bias = bias.data();
        g.act = ops::Activation::relu;
        g.packCache = pass ? &cache : nullptr;
        ops::detail::gemm(nullptr, g);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double ref = bias[j];
            for (int64_t k = 0; k < K; ++k)
              ref += double(a[i * K + k]) * w[j * K + k];
            ASSERT_NEAR(c[i * N + j], std::max(ref, 0.0), 1e-4)
                << "M " << M << " dtype " << int(dt) << " pass " << pass << " ("
                << i << ", " << j << ")";
          }
      }
      EXPECT_GT(cache.bytes, 0u) << "the cache was not used";
    }
}

TEST(Predict, RejectsShapesThatDoNotChain) {
  std::vector<float> x(8), w1(8 * 2), w2(3 * 4);
  Tensor tx{x.data(), DType::f32, 2, {1, 8}};
  Tensor t1{w1.data(), DType::f32, 2, {8, 2}};
  Tensor t2{w2.data(), DType::f32, 2, {3, 4}};
  Context ctx(kDesc, nullptr, 1);
  Tensor out;
  EXPECT_FALSE(ops::predict(ctx, tx, t1, t2, nullptr, 0.0f, 0, out));
  EXPECT_NE(ctx.error.find("do not chain"), std::string::npos) << ctx.error;
}

// The fused ReLU epilogue equals relu of the plain output-side result, and
// an epilogue that does not map 0 to 0 is refused.
TEST(SparseLinear, OutputSideReluEpilogue) {
  const int64_t k = 33, n = 70;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> val(-1, 1), coin(0, 1);
  std::vector<float> x(k), wt(n * k), b(n);
  std::vector<uint8_t> mask(n);
  for (float &v : x) v = val(rng);
  for (float &v : wt) v = val(rng);
  for (float &v : b) v = val(rng);
  for (uint8_t &m : mask) m = coin(rng) < 0.5;
  Tensor tx{x.data(), DType::f32, 2, {1, k}};
  Tensor tw{wt.data(), DType::f32, 2, {n, k}};
  Tensor tb{b.data(), DType::f32, 1, {n}};
  Tensor tm{mask.data(), DType::b1, 1, {n}};
  Context ctx(kDesc, nullptr, 2);
  Tensor plain, fused;
  ASSERT_TRUE(ops::sparseLinearOutput(ctx, tx, tw, &tb, tm, ops::Activation::none, 0, plain));
  ASSERT_TRUE(ops::sparseLinearOutput(ctx, tx, tw, &tb, tm, ops::Activation::relu, 1, fused));
  int64_t negative = 0;
  for (int64_t j = 0; j < n; ++j) {
    negative += plain.as<float>()[j] < 0;
    EXPECT_EQ(fused.as<float>()[j], std::max(0.0f, plain.as<float>()[j])) << j;
  }
  EXPECT_GT(negative, 0);
  Tensor bad;
  EXPECT_FALSE(ops::sparseLinearOutput(ctx, tx, tw, &tb, tm, ops::Activation::sigmoid, 0, bad));
  EXPECT_NE(ctx.error.find("map 0"), std::string::npos) << ctx.error;
}
