//===- OpsTest.cpp - Tests for the runtime op library -----------*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// Every op of sparsec/rt/Ops.h against a straightforward reference written
// here (double precision where it matters), on random data with fixed
// seeds, odd sizes, broadcasting and every dtype an op accepts, with one
// and two threads; plus the error paths (the op returns false and
// ctx.error names it).
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Half.h"
#include "sparsec/rt/Ops.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

// Test hooks of the op library (runtime/src/cpu/Linear.cpp): select the
// kernel ISA (0 = best available, 1 = scalar, 2 = AVX2, 3 = AVX-512; an
// unavailable one falls back to the best available lower one) and query it.
namespace sparsec::rt::ops::detail {
void setKernelIsa(int isa);
int kernelIsa();
void setForceScalarKernels(bool force);
// The attention's softmax pieces (runtime/src/cpu/Common.h).
float scaleAddMax(float *s, int64_t n, float scale, const float *add);
double expShiftSum(float *s, int64_t n, float m);
} // namespace sparsec::rt::ops::detail

using namespace sparsec::rt;
using namespace sparsec::rt::ops;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

constexpr int kSlots = 16;
const int64_t kSlotBytes[kSlots] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                    -1, -1, -1, -1, -1, -1, -1, -1};
const ModelDesc kDesc = {"ops-test", 0, nullptr, 0,          nullptr, "none",
                         0,          0, kSlots,  kSlotBytes, nullptr};

using Shape = std::vector<int64_t>;

/// A tensor owning its storage.
struct Owned {
  std::vector<double> storage; // 8-byte aligned
  Tensor t;

  Owned() = default;
  Owned(DType dtype, const Shape &shape) {
    t.dtype = dtype;
    t.rank = int(shape.size());
    int64_t n = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      t.shape[i] = shape[i];
      n *= shape[i];
    }
    storage.resize(size_t(n) * dtypeSize(dtype) / 8 + 1);
    t.data = storage.data();
  }
  Owned(Owned &&) = default;
  Owned &operator=(Owned &&) = default;

  template <typename T> T *p() const { return static_cast<T *>(t.data); }
  int64_t numel() const { return t.numel(); }
  operator const Tensor &() const { return t; }
};

template <typename T>
Owned make(DType dtype, const Shape &shape, const std::vector<T> &values) {
  Owned o(dtype, shape);
  EXPECT_EQ(int64_t(values.size()), o.numel());
  if (!values.empty())
    std::memcpy(o.t.data, values.data(), values.size() * sizeof(T));
  return o;
}

Owned vecI64(const std::vector<int64_t> &v) {
  return make<int64_t>(DType::i64, {int64_t(v.size())}, v);
}

float halfBitsToFloat(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v;
  if (exp == 0)
    v = std::ldexp(double(man), -24);
  else if (exp == 31)
    v = man ? std::numeric_limits<double>::quiet_NaN()
            : std::numeric_limits<double>::infinity();
  else
    v = std::ldexp(double(man + 1024), exp - 25);
  return float(sign ? -v : v);
}

/// Nearest half (ties to even), by binary search over the table of all
/// finite non-negative halves; the reference for f16 rounding.
uint16_t floatToHalfRef(float f) {
  static const std::vector<double> table = [] {
    std::vector<double> t(0x7c00);
    for (uint32_t h = 0; h < 0x7c00; ++h)
      t[h] = halfBitsToFloat(uint16_t(h));
    return t;
  }();
  if (std::isnan(f))
    return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (a >= 65520.0)
    return sign | 0x7c00;
  size_t hi =
      size_t(std::lower_bound(table.begin(), table.end(), a) - table.begin());
  if (hi == table.size())
    return sign | 0x7bff;
  if (hi == 0 || table[hi] == a)
    return uint16_t(sign | hi);
  const size_t lo = hi - 1;
  const double dl = a - table[lo], dh = table[hi] - a;
  const size_t best = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
  return uint16_t(sign | best);
}

/// Element i of any tensor as double.
double at(const Tensor &t, int64_t i) {
  switch (t.dtype) {
  case DType::f32:
    return t.as<float>()[i];
  case DType::f64:
    return t.as<double>()[i];
  case DType::f16:
    return halfBitsToFloat(t.as<uint16_t>()[i]);
  case DType::bf16:
    return sparsec::rt::bfloat16ToFloat(t.as<uint16_t>()[i]);
  case DType::i64:
    return double(t.as<int64_t>()[i]);
  case DType::i32:
    return t.as<int32_t>()[i];
  case DType::i16:
    return t.as<int16_t>()[i];
  case DType::i8:
    return t.as<int8_t>()[i];
  case DType::u8:
    return t.as<uint8_t>()[i];
  case DType::u16:
    return t.as<uint16_t>()[i];
  case DType::u32:
    return t.as<uint32_t>()[i];
  case DType::u64:
    return double(t.as<uint64_t>()[i]);
  case DType::b1:
    return t.as<uint8_t>()[i];
  }
  return 0;
}

Shape shapeOf(const Tensor &t) { return Shape(t.shape, t.shape + t.rank); }

Shape unravel(int64_t i, const Shape &shape) {
  Shape idx(shape.size());
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    idx[size_t(d)] = i % shape[size_t(d)];
    i /= shape[size_t(d)];
  }
  return idx;
}

/// Offset in `t` of output index `idx` under numpy broadcasting.
int64_t bcastOffset(const Tensor &t, const Shape &idx) {
  int64_t off = 0, stride = 1;
  const int r = int(idx.size());
  for (int d = t.rank - 1; d >= 0; --d) {
    const int od = d + (r - t.rank);
    const int64_t i = t.shape[d] == 1 ? 0 : idx[size_t(od)];
    off += i * stride;
    stride *= t.shape[d];
  }
  return off;
}

Shape bcastShape(const Shape &a, const Shape &b) {
  const size_t r = std::max(a.size(), b.size());
  Shape s(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    const int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    s[i] = da == 1 ? db : da;
  }
  return s;
}

/// Fills any tensor with random values: floats in [lo, hi), integers in
/// [lo, hi] (clamped to the type), bools 0/1.
void fillRandom(Owned &o, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uni(lo, hi);
  const int64_t n = o.numel();
  for (int64_t i = 0; i < n; ++i) {
    double v = uni(rng);
    switch (o.t.dtype) {
    case DType::f32:
      o.p<float>()[i] = float(v);
      break;
    case DType::f64:
      o.p<double>()[i] = v;
      break;
    case DType::f16:
      // Exactly representable halves: multiples of 1/64.
      o.p<uint16_t>()[i] = floatToHalfRef(float(std::round(v * 64) / 64));
      break;
    case DType::bf16: // rounded (multiples of 1/64 below 4 are exact)
      o.p<uint16_t>()[i] =
          sparsec::rt::floatToBFloat16(float(std::round(v * 64) / 64));
      break;
    case DType::i64:
      o.p<int64_t>()[i] = int64_t(std::floor(v));
      break;
    case DType::i32:
      o.p<int32_t>()[i] = int32_t(std::floor(v));
      break;
    case DType::i16:
      o.p<int16_t>()[i] = int16_t(std::floor(v));
      break;
    case DType::i8:
      o.p<int8_t>()[i] = int8_t(std::floor(v));
      break;
    case DType::u8:
      o.p<uint8_t>()[i] = uint8_t(std::floor(std::fabs(v)));
      break;
    case DType::u16:
      o.p<uint16_t>()[i] = uint16_t(std::floor(std::fabs(v)));
      break;
    case DType::u32:
      o.p<uint32_t>()[i] = uint32_t(std::floor(std::fabs(v)));
      break;
    case DType::u64:
      o.p<uint64_t>()[i] = uint64_t(std::floor(std::fabs(v)));
      break;
    case DType::b1:
      o.p<uint8_t>()[i] = v > (lo + hi) / 2 ? 1 : 0;
      break;
    }
  }
}

Owned randomTensor(DType dtype, const Shape &shape, uint32_t seed,
                   double lo = -2.0, double hi = 2.0) {
  Owned o(dtype, shape);
  fillRandom(o, seed, lo, hi);
  return o;
}

bool isFloatType(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16;
}

/// Tolerance for comparing a result of dtype t with a double reference.
double tolFor(DType t, double ref) {
  switch (t) {
  case DType::f32:
    return 2e-6 + 2e-6 * std::fabs(ref);
  case DType::f64:
    return 1e-12 + 1e-12 * std::fabs(ref);
  case DType::f16:
    return 1e-3 + 1e-3 * std::fabs(ref);
  default:
    return 0;
  }
}

void expectShape(const Tensor &t, const Shape &shape) {
  EXPECT_EQ(shapeOf(t), shape);
}

const std::vector<DType> kAllTypes = {
    DType::f32, DType::f64, DType::f16, DType::i64, DType::i32, DType::i16,
    DType::i8,  DType::u8,  DType::u16, DType::u32, DType::u64, DType::b1};
const std::vector<DType> kNumericTypes = {
    DType::f32, DType::f64, DType::f16, DType::i64, DType::i32, DType::i16,
    DType::i8,  DType::u8,  DType::u16, DType::u32, DType::u64};

/// Shape pairs covering the broadcasting fast paths and the general case.
const std::vector<std::pair<Shape, Shape>> kBroadcastCases = {
    {{2, 3, 4}, {2, 3, 4}},    // same shape
    {{5, 7}, {}},              // scalar (rank 0)
    {{}, {3, 5}},              // scalar on the left
    {{4, 6, 9}, {9}},          // row
    {{3, 1, 5}, {4, 1}},       // both broadcast
    {{2, 3, 4, 5}, {3, 1, 5}}, // general
    {{6, 1}, {1, 7}},          // outer product
    {{1}, {1}},
    {{0, 3}, {3}},       // empty
    {{300, 129}, {129}}, // large enough to run in parallel
    {{257, 300}, {257, 1}},
};

class OpsTest : public ::testing::TestWithParam<int> {
protected:
  OpsTest() : ctx(kDesc, nullptr, GetParam()) {}
  void TearDown() override { ops::detail::setKernelIsa(0); }

  /// Expects failure with an error naming `what`, then clears it.
  void expectFail(bool ok, const std::string &what) {
    EXPECT_FALSE(ok);
    EXPECT_NE(ctx.error.find(what), std::string::npos)
        << "error '" << ctx.error << "' does not mention '" << what << "'";
    ctx.error.clear();
  }

  Context ctx;
};

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

double unaryRef(Unary op, double x) {
  switch (op) {
  case Unary::relu:
    return x > 0 ? x : 0;
  case Unary::gelu:
    return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  case Unary::gelu_tanh:
    return 0.5 * x *
           (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  case Unary::silu:
    return x / (1 + std::exp(-x));
  case Unary::sigmoid:
    return 1 / (1 + std::exp(-x));
  case Unary::tanh:
    return std::tanh(x);
  case Unary::exp:
    return std::exp(x);
  case Unary::log:
    return std::log(x);
  case Unary::erf:
    return std::erf(x);
  case Unary::sqrt:
    return std::sqrt(x);
  case Unary::reciprocal:
    return 1 / x;
  case Unary::abs:
    return std::fabs(x);
  case Unary::neg:
    return -x;
  case Unary::sin:
    return std::sin(x);
  case Unary::cos:
    return std::cos(x);
  case Unary::logical_not:
    return x == 0 ? 1 : 0;
  }
  return 0;
}

TEST_P(OpsTest, UnaryFloat) {
  const std::vector<Unary> ops = {
      Unary::relu,    Unary::gelu, Unary::gelu_tanh,  Unary::silu,
      Unary::sigmoid, Unary::tanh, Unary::exp,        Unary::log,
      Unary::erf,     Unary::sqrt, Unary::reciprocal, Unary::abs,
      Unary::neg,     Unary::sin,  Unary::cos};
  uint32_t seed = 1;
  for (DType t : {DType::f32, DType::f64, DType::f16})
    for (Unary op : ops)
      for (const Shape &shape :
           {Shape{}, Shape{7}, Shape{3, 5, 11}, Shape{70001}}) {
        const bool positive =
            op == Unary::log || op == Unary::sqrt || op == Unary::reciprocal;
        Owned x = randomTensor(t, shape, seed++, positive ? 0.25 : -6.0,
                               positive ? 8.0 : 6.0);
        Tensor out;
        ASSERT_TRUE(unary(ctx, op, x, 0, out)) << ctx.error;
        ASSERT_EQ(out.dtype, t);
        expectShape(out, shape);
        for (int64_t i = 0; i < x.numel(); ++i) {
          const double ref = unaryRef(op, at(x, i));
          ASSERT_NEAR(at(out, i), ref, 4 * tolFor(t, ref))
              << "op " << int(op) << " dtype " << dtypeName(t) << " x "
              << at(x, i);
        }
      }
}

TEST_P(OpsTest, UnaryIntegerAndBool) {
  Owned xi = make<int32_t>(DType::i32, {5},
                           {-3, 0, 7, std::numeric_limits<int32_t>::min(),
                            std::numeric_limits<int32_t>::max()});
  Tensor out;
  ASSERT_TRUE(unary(ctx, Unary::abs, xi, 1, out));
  EXPECT_EQ(out.as<int32_t>()[0], 3);
  EXPECT_EQ(out.as<int32_t>()[2], 7);
  EXPECT_EQ(out.as<int32_t>()[3], std::numeric_limits<int32_t>::min()); // wraps
  ASSERT_TRUE(unary(ctx, Unary::neg, xi, 1, out));
  EXPECT_EQ(out.as<int32_t>()[0], 3);
  EXPECT_EQ(out.as<int32_t>()[4], -std::numeric_limits<int32_t>::max());
  for (DType t : {DType::i64, DType::i16, DType::i8}) {
    Owned x = randomTensor(t, {4, 9}, 7, -100, 100);
    ASSERT_TRUE(unary(ctx, Unary::neg, x, 1, out));
    for (int64_t i = 0; i < x.numel(); ++i)
      EXPECT_EQ(at(out, i), -at(x, i));
    ASSERT_TRUE(unary(ctx, Unary::abs, x, 1, out));
    for (int64_t i = 0; i < x.numel(); ++i)
      EXPECT_EQ(at(out, i), std::fabs(at(x, i)));
  }
  Owned b = make<uint8_t>(DType::b1, {2, 2}, {0, 1, 1, 0});
  ASSERT_TRUE(unary(ctx, Unary::logical_not, b, 1, out));
  EXPECT_EQ(out.dtype, DType::b1);
  EXPECT_EQ(std::vector<uint8_t>(out.as<uint8_t>(), out.as<uint8_t>() + 4),
            (std::vector<uint8_t>{1, 0, 0, 1}));

  Owned xl = randomTensor(DType::i64, {3}, 1);
  expectFail(unary(ctx, Unary::relu, xl, 1, out), "relu");
  expectFail(unary(ctx, Unary::exp, b, 1, out), "exp");
  expectFail(unary(ctx, Unary::logical_not, xl, 1, out), "logical_not");
  Owned xu = randomTensor(DType::u8, {3}, 1);
  expectFail(unary(ctx, Unary::neg, xu, 1, out), "neg");
}

/// Reference for one binary op in double (integers exact for small values).
double binaryRef(Binary op, double a, double b, bool isInt) {
  switch (op) {
  case Binary::add:
    return a + b;
  case Binary::sub:
    return a - b;
  case Binary::mul:
    return a * b;
  case Binary::div:
    return isInt ? std::trunc(a / b) : a / b;
  case Binary::pow:
    return std::pow(a, b);
  case Binary::max:
    return std::max(a, b);
  case Binary::min:
    return std::min(a, b);
  case Binary::logical_and:
    return (a != 0 && b != 0) ? 1 : 0;
  case Binary::logical_or:
    return (a != 0 || b != 0) ? 1 : 0;
  }
  return 0;
}

/// Wraps an exact integer result into dtype t (as the op does).
double wrapTo(DType t, double v) {
  const int64_t i = int64_t(v);
  switch (t) {
  case DType::i32:
    return int32_t(uint32_t(i));
  case DType::i16:
    return int16_t(uint16_t(i));
  case DType::i8:
    return int8_t(uint8_t(i));
  case DType::u8:
    return uint8_t(i);
  case DType::u16:
    return uint16_t(i);
  case DType::u32:
    return uint32_t(i);
  case DType::u64:
    return double(uint64_t(i));
  default:
    return v;
  }
}

TEST_P(OpsTest, BinaryAllTypesAndBroadcasts) {
  uint32_t seed = 100;
  for (DType t : kNumericTypes)
    for (Binary op : {Binary::add, Binary::sub, Binary::mul, Binary::div,
                      Binary::max, Binary::min, Binary::pow}) {
      const bool isInt = !isFloatType(t);
      if (op == Binary::pow && isInt)
        continue;
      for (const auto &[sa, sb] : kBroadcastCases) {
        Owned a = randomTensor(t, sa, seed++, op == Binary::pow ? 0.5 : -20,
                               op == Binary::pow ? 3 : 20);
        Owned b = randomTensor(t, sb, seed++, op == Binary::pow ? -2 : 1,
                               op == Binary::pow ? 2 : 9);
        if (op == Binary::div && isInt)
          for (int64_t i = 0; i < b.numel(); ++i) // no zero divisors
            if (at(b, i) == 0)
              std::memset(static_cast<char *>(b.t.data) + i * dtypeSize(t), 1,
                          1);
        Tensor out;
        ASSERT_TRUE(binary(ctx, op, a, b, 2, out)) << ctx.error;
        const Shape os = bcastShape(sa, sb);
        expectShape(out, os);
        ASSERT_EQ(out.dtype, t);
        for (int64_t i = 0; i < out.numel(); ++i) {
          const Shape idx = unravel(i, os);
          const double x = at(a, bcastOffset(a, idx)),
                       y = at(b, bcastOffset(b, idx));
          double ref = binaryRef(op, x, y, isInt);
          if (isInt)
            ref = wrapTo(t, ref);
          if (t == DType::f16)
            ref = halfBitsToFloat(floatToHalfRef(float(ref)));
          ASSERT_NEAR(at(out, i), ref, tolFor(t, ref))
              << dtypeName(t) << " op " << int(op) << " " << x << ", " << y;
        }
      }
    }
}

TEST_P(OpsTest, BinaryIntegerSemantics) {
  Owned a = make<int32_t>(DType::i32, {4}, {-7, 7, -7, 7});
  Owned b = make<int32_t>(DType::i32, {4}, {2, 2, -2, -2});
  Tensor out;
  ASSERT_TRUE(binary(ctx, Binary::div, a, b, 3, out));
  EXPECT_EQ(std::vector<int32_t>(out.as<int32_t>(), out.as<int32_t>() + 4),
            (std::vector<int32_t>{-3, 3, 3, -3}));
  // Overflow wraps.
  Owned big = make<int64_t>(DType::i64, {2},
                            {std::numeric_limits<int64_t>::max(),
                             std::numeric_limits<int64_t>::min()});
  Owned one = make<int64_t>(DType::i64, {}, {1});
  ASSERT_TRUE(binary(ctx, Binary::add, big, one, 3, out));
  EXPECT_EQ(out.as<int64_t>()[0], std::numeric_limits<int64_t>::min());
  Owned minus1 = make<int64_t>(DType::i64, {}, {-1});
  ASSERT_TRUE(binary(ctx, Binary::div, big, minus1, 3, out));
  EXPECT_EQ(out.as<int64_t>()[1], std::numeric_limits<int64_t>::min());
  Owned u16a = make<uint16_t>(DType::u16, {1}, {65535});
  ASSERT_TRUE(binary(ctx, Binary::mul, u16a, u16a, 3, out));
  EXPECT_EQ(out.as<uint16_t>()[0], 1);
  // Division by zero fails.
  Owned z = make<int32_t>(DType::i32, {4}, {1, 0, 1, 1});
  expectFail(binary(ctx, Binary::div, a, z, 3, out), "div");
  // Logical ops on bool.
  Owned p = make<uint8_t>(DType::b1, {4}, {0, 0, 1, 1});
  Owned q = make<uint8_t>(DType::b1, {4}, {0, 1, 0, 1});
  ASSERT_TRUE(binary(ctx, Binary::logical_and, p, q, 3, out));
  EXPECT_EQ(std::vector<uint8_t>(out.as<uint8_t>(), out.as<uint8_t>() + 4),
            (std::vector<uint8_t>{0, 0, 0, 1}));
  ASSERT_TRUE(binary(ctx, Binary::logical_or, p, q, 3, out));
  EXPECT_EQ(std::vector<uint8_t>(out.as<uint8_t>(), out.as<uint8_t>() + 4),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  expectFail(binary(ctx, Binary::logical_and, a, b, 3, out), "logical_and");
  expectFail(binary(ctx, Binary::add, p, q, 3, out), "add");
}

TEST_P(OpsTest, BinaryPowMixedAndErrors) {
  Owned a = randomTensor(DType::f32, {3, 4}, 5, 0.5, 2);
  Owned e = make<int64_t>(DType::i64, {4}, {0, 1, 2, -3});
  Tensor out;
  ASSERT_TRUE(binary(ctx, Binary::pow, a, e, 4, out)) << ctx.error;
  ASSERT_EQ(out.dtype, DType::f32);
  for (int64_t i = 0; i < 12; ++i) {
    const double ref = std::pow(at(a, i), double(e.p<int64_t>()[i % 4]));
    EXPECT_NEAR(at(out, i), ref, tolFor(DType::f32, ref));
  }
  Owned ef = make<float>(DType::f32, {}, {0.5f});
  ASSERT_TRUE(binary(ctx, Binary::pow, a, ef, 4, out));
  EXPECT_NEAR(at(out, 5), std::sqrt(at(a, 5)), 1e-6);

  Owned b = randomTensor(DType::f32, {5}, 6);
  expectFail(binary(ctx, Binary::add, a, b, 4, out), "add");
  Owned c = randomTensor(DType::f64, {4}, 6);
  expectFail(binary(ctx, Binary::mul, a, c, 4, out), "mul");
  // Integer pow (ONNX Pow on int tensors), with an int or float exponent.
  Owned ib = make<int32_t>(DType::i32, {4}, {2, 3, -2, 0});
  Owned ie = make<int32_t>(DType::i32, {4}, {3, 2, 3, 5});
  ASSERT_TRUE(binary(ctx, Binary::pow, ib, ie, 4, out)) << ctx.error;
  EXPECT_EQ(std::vector<int32_t>(out.as<int32_t>(), out.as<int32_t>() + 4),
            (std::vector<int32_t>{8, 9, -8, 0}));
  Owned fe = make<float>(DType::f32, {4}, {3.0f, 2.0f, 3.0f, 5.0f});
  ASSERT_TRUE(binary(ctx, Binary::pow, ib, fe, 4, out)) << ctx.error;
  EXPECT_EQ(out.as<int32_t>()[1], 9);
  Owned bb = make<uint8_t>(DType::b1, {4}, {1, 0, 1, 0});
  expectFail(binary(ctx, Binary::pow, bb, bb, 4, out), "pow");
  // NaN propagates through max/min.
  Owned n1 = make<float>(DType::f32, {2}, {NAN, 1.0f});
  Owned n2 = make<float>(DType::f32, {2}, {0.0f, NAN});
  ASSERT_TRUE(binary(ctx, Binary::max, n1, n2, 4, out));
  EXPECT_TRUE(std::isnan(out.as<float>()[0]) && std::isnan(out.as<float>()[1]));
}

TEST_P(OpsTest, Compare) {
  uint32_t seed = 300;
  for (DType t : kAllTypes)
    for (Compare op :
         {Compare::eq, Compare::lt, Compare::le, Compare::gt, Compare::ge})
      for (size_t c = 0; c < kBroadcastCases.size(); c += 2) {
        const auto &[sa, sb] = kBroadcastCases[c];
        // Small ranges so that equality happens.
        Owned a = randomTensor(t, sa, seed++, -2, 3);
        Owned b = randomTensor(t, sb, seed++, -2, 3);
        Tensor out;
        ASSERT_TRUE(compare(ctx, op, a, b, 5, out)) << ctx.error;
        ASSERT_EQ(out.dtype, DType::b1);
        const Shape os = bcastShape(sa, sb);
        expectShape(out, os);
        for (int64_t i = 0; i < out.numel(); ++i) {
          const Shape idx = unravel(i, os);
          const double x = at(a, bcastOffset(a, idx)),
                       y = at(b, bcastOffset(b, idx));
          bool ref = op == Compare::eq   ? x == y
                     : op == Compare::lt ? x < y
                     : op == Compare::le ? x <= y
                     : op == Compare::gt ? x > y
                                         : x >= y;
          ASSERT_EQ(out.as<uint8_t>()[i], ref ? 1 : 0);
        }
      }
  Owned a = randomTensor(DType::f32, {3}, 1);
  Owned b = randomTensor(DType::i32, {3}, 1);
  Tensor out;
  expectFail(compare(ctx, Compare::lt, a, b, 5, out), "less");
  Owned c = randomTensor(DType::f32, {2}, 1);
  expectFail(compare(ctx, Compare::eq, a, c, 5, out), "equal");
}

TEST_P(OpsTest, Where) {
  uint32_t seed = 400;
  const std::vector<std::vector<Shape>> cases = {
      {{2, 3}, {2, 3}, {2, 3}},
      {{3, 1}, {1, 4}, {}},
      {{5}, {2, 5}, {5}},
      {{2, 1, 4}, {3, 1}, {1, 3, 4}},
      {{400, 100}, {100}, {400, 1}},
  };
  for (DType t : {DType::f32, DType::i64, DType::u8, DType::f16, DType::b1})
    for (const auto &c : cases) {
      Owned cond = randomTensor(DType::b1, c[0], seed++);
      Owned x = randomTensor(t, c[1], seed++);
      Owned y = randomTensor(t, c[2], seed++);
      Tensor out;
      ASSERT_TRUE(where(ctx, cond, x, y, 6, out)) << ctx.error;
      const Shape os = bcastShape(bcastShape(c[0], c[1]), c[2]);
      expectShape(out, os);
      ASSERT_EQ(out.dtype, t);
      for (int64_t i = 0; i < out.numel(); ++i) {
        const Shape idx = unravel(i, os);
        const double ref = at(cond, bcastOffset(cond, idx))
                               ? at(x, bcastOffset(x, idx))
                               : at(y, bcastOffset(y, idx));
        ASSERT_EQ(at(out, i), ref);
      }
    }
  Owned cond = randomTensor(DType::b1, {2}, 1);
  Owned x = randomTensor(DType::f32, {2}, 1);
  Owned y = randomTensor(DType::f64, {2}, 1);
  Tensor out;
  expectFail(where(ctx, cond, x, y, 6, out), "where");
  Owned y3 = randomTensor(DType::f32, {3}, 1);
  expectFail(where(ctx, cond, x, y3, 6, out), "where");
  expectFail(where(ctx, x, x, x, 6, out), "where");
}

std::vector<int> availableIsas();

/// All 65536 halves, in bit order.
Owned everyHalf() {
  std::vector<uint16_t> halves(65536);
  std::iota(halves.begin(), halves.end(), 0);
  return make<uint16_t>(DType::f16, {65536}, halves);
}

/// `back` is everyHalf() cast to float32: each value exact, NaNs NaN.
void expectEveryHalfWidened(const Tensor &back) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const float ref = halfBitsToFloat(uint16_t(i));
    if (std::isnan(ref))
      ASSERT_TRUE(std::isnan(back.as<float>()[i]));
    else
      ASSERT_EQ(back.as<float>()[i], ref) << std::hex << i;
  }
}

TEST_P(OpsTest, HalfConversionsOnEveryIsa) {
  // Casts between float16 and float32, and float16 elementwise ops, convert
  // a row at a time (F16C on AVX2 machines): the same bits as the scalar
  // reference on every ISA, ties to even included.
  std::vector<float> vals;
  for (uint32_t h = 0; h + 1 < 0x7c00; ++h) {
    const float lo = halfBitsToFloat(uint16_t(h));
    const float hi = halfBitsToFloat(uint16_t(h + 1));
    const float mid = float((double(lo) + double(hi)) / 2); // exact: a tie
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      vals.push_back(v);
      vals.push_back(-v);
    }
  }
  std::mt19937 rng(21);
  for (int i = 0; i < (1 << 16); ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    vals.push_back(f);
  }
  for (float v : {65504.0f, 65519.0f, 65520.0f, 1e30f, INFINITY, -INFINITY, 0.0f,
                  -0.0f, NAN, 1e-45f, 2.9802322e-8f, 2.9802326e-8f})
    vals.push_back(v);
  const int64_t n = int64_t(vals.size());
  Owned fv = make<float>(DType::f32, {n}, vals);
  Owned h = everyHalf();
  for (int isa : availableIsas()) {
    SCOPED_TRACE("isa " + std::to_string(isa));
    ops::detail::setKernelIsa(isa);
    Tensor out, back, relu;
    ASSERT_TRUE(cast(ctx, fv, DType::f16, 7, out));
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(vals[size_t(i)]))
        EXPECT_TRUE(std::isnan(halfBitsToFloat(out.as<uint16_t>()[i])));
      else
        ASSERT_EQ(out.as<uint16_t>()[i], floatToHalfRef(vals[size_t(i)]))
            << "value " << vals[size_t(i)];
    }
    ASSERT_TRUE(cast(ctx, h, DType::f32, 8, back));
    ASSERT_NO_FATAL_FAILURE(expectEveryHalfWidened(back));
    // An op in float16 through the same rows: relu of every half.
    ASSERT_TRUE(unary(ctx, Unary::relu, h, 9, relu));
    for (uint32_t i = 0; i < 65536; ++i) {
      const float x = halfBitsToFloat(uint16_t(i));
      const uint16_t got = relu.as<uint16_t>()[i];
      if (std::isnan(x))
        ASSERT_TRUE(std::isnan(halfBitsToFloat(got)));
      else
        ASSERT_EQ(got, floatToHalfRef(x < 0 ? 0.0f : x)) << std::hex << i; // -0 stays
    }
  }
  ops::detail::setKernelIsa(0);
}

TEST_P(OpsTest, Cast) {
  Owned f = make<float>(DType::f32, {8},
                        {-2.7f, -0.5f, 0.0f, 0.5f, 2.7f, 300.0f, 1e20f, NAN});
  Tensor out;
  ASSERT_TRUE(cast(ctx, f, DType::i32, 7, out));
  EXPECT_EQ(out.dtype, DType::i32);
  const int32_t expectI[8] = {
      -2, 0, 0, 0, 2, 300, std::numeric_limits<int32_t>::max(), 0};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(out.as<int32_t>()[i], expectI[i]) << i;
  ASSERT_TRUE(cast(ctx, f, DType::b1, 7, out));
  const uint8_t expectB[8] = {1, 1, 0, 1, 1, 1, 1, 1};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(out.as<uint8_t>()[i], expectB[i]) << i;
  Owned b = make<uint8_t>(DType::b1, {3}, {0, 1, 1});
  ASSERT_TRUE(cast(ctx, b, DType::f64, 7, out));
  EXPECT_EQ(out.as<double>()[0], 0.0);
  EXPECT_EQ(out.as<double>()[2], 1.0);
  Owned i64 = make<int64_t>(DType::i64, {3}, {300, -1, 65});
  ASSERT_TRUE(cast(ctx, i64, DType::u8, 7, out));
  EXPECT_EQ(out.as<uint8_t>()[0], 44);
  EXPECT_EQ(out.as<uint8_t>()[1], 255);
  ASSERT_TRUE(cast(ctx, i64, DType::i8, 7, out));
  EXPECT_EQ(out.as<int8_t>()[0], 44);
  // f16 rounding against an exhaustive reference.
  std::mt19937 rng(9);
  std::vector<float> vals = {
      1.0f,          65504.0f,      65519.0f,      65520.0f,
      1e-8f,         5.9604645e-8f, 2.9802322e-8f, 8.940697e-8f,
      6.1035156e-5f, 6.0975552e-5f, 0.1f,          -3.14159f,
      1e6f,          -0.0f,         INFINITY,      -INFINITY};
  std::uniform_real_distribution<float> uni(-10, 10);
  for (int i = 0; i < 200; ++i)
    vals.push_back(uni(rng) * std::pow(10.0f, float(i % 9) - 5));
  Owned fv = make<float>(DType::f32, {int64_t(vals.size())}, vals);
  ASSERT_TRUE(cast(ctx, fv, DType::f16, 7, out));
  for (size_t i = 0; i < vals.size(); ++i)
    EXPECT_EQ(out.as<uint16_t>()[i], floatToHalfRef(vals[i]))
        << "value " << vals[i];
  // f16 -> f32 is exact, over all halves.
  Owned h = everyHalf();
  Tensor back;
  ASSERT_TRUE(cast(ctx, h, DType::f32, 8, back));
  ASSERT_NO_FATAL_FAILURE(expectEveryHalfWidened(back));
  // Every pair of dtypes, on small integers (exact everywhere).
  uint32_t seed = 500;
  for (DType from : kAllTypes)
    for (DType to : kAllTypes) {
      Owned x = randomTensor(from, {37}, seed++, -50, 50);
      ASSERT_TRUE(cast(ctx, x, to, 7, out)) << ctx.error;
      ASSERT_EQ(out.dtype, to);
      for (int64_t i = 0; i < 37; ++i) {
        double v = at(x, i);
        double ref;
        if (to == DType::b1)
          ref = v != 0;
        else if (to == DType::f16)
          ref = halfBitsToFloat(floatToHalfRef(float(v)));
        else if (to == DType::f32)
          ref = double(float(v));
        else if (to == DType::f64)
          ref = v;
        else
          ref = wrapTo(to, std::trunc(v));
        ASSERT_EQ(at(out, i), ref)
            << dtypeName(from) << "->" << dtypeName(to) << " " << v;
      }
    }
}

//===----------------------------------------------------------------------===//
// Linear and matmul
//===----------------------------------------------------------------------===//

double actRef(Activation a, double x) {
  switch (a) {
  case Activation::none:
    return x;
  case Activation::relu:
    return unaryRef(Unary::relu, x);
  case Activation::gelu:
    return unaryRef(Unary::gelu, x);
  case Activation::gelu_tanh:
    return unaryRef(Unary::gelu_tanh, x);
  case Activation::silu:
    return unaryRef(Unary::silu, x);
  case Activation::sigmoid:
    return unaryRef(Unary::sigmoid, x);
  case Activation::relu6:
    return x < 0 ? 0 : x > 6 ? 6 : x;
  }
  return x;
}

/// Checks y = act(x . w + b) against double precision, with a tolerance of
/// 1e-4 relative to sum |x w| + |b|.
void checkLinear(const Owned &x, const Owned &w, const Owned *bias,
                 Activation act, const Tensor &y) {
  const int64_t K = w.t.shape[0], N = w.t.shape[1];
  int64_t M = 1;
  for (int d = 0; d + 1 < x.t.rank; ++d)
    M *= x.t.shape[d];
  ASSERT_EQ(y.numel(), M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p =
            double(x.p<float>()[m * K + k]) * double(w.p<float>()[k * N + n]);
        s += p;
        mag += std::fabs(p);
      }
      if (bias) {
        s += bias->p<float>()[n];
        mag += std::fabs(bias->p<float>()[n]);
      }
      const double ref = actRef(act, s);
      ASSERT_NEAR(y.as<float>()[m * N + n], ref, 1e-4 * mag + 1e-6)
          << "m " << m << " n " << n << " M " << M << " K " << K << " N " << N;
    }
}

/// The kernel ISAs (1 scalar, 2 AVX2, 3 AVX-512) this machine can run.
std::vector<int> availableIsas() {
  std::vector<int> isas;
  for (int isa : {1, 2, 3}) {
    ops::detail::setKernelIsa(isa);
    if (ops::detail::kernelIsa() == isa)
      isas.push_back(isa);
  }
  ops::detail::setKernelIsa(0);
  return isas;
}

// The attention's softmax pieces (scaleAddMax, expShiftSum): the same
// maximum as the scalar loop, exp within 2 ulp of libm's (double), 0 below
// -87, NaN kept, the double sum of what was written, on every ISA.
TEST_P(OpsTest, SoftmaxPiecesOnEveryIsa) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-120.0f, 20.0f);
  for (int isa : availableIsas()) {
    SCOPED_TRACE("isa " + std::to_string(isa));
    ops::detail::setKernelIsa(isa);
    for (int64_t n : {0, 1, 7, 8, 9, 31, 1000}) {
      SCOPED_TRACE("n " + std::to_string(n));
      std::vector<float> s(static_cast<size_t>(n)), add(s), ref(s);
      for (int64_t j = 0; j < n; ++j) {
        s[size_t(j)] = u(rng);
        add[size_t(j)] = j % 5 == 0 ? -INFINITY : u(rng) * 0.1f;
      }
      float refMax = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        ref[size_t(j)] = s[size_t(j)] * 0.125f + add[size_t(j)];
        refMax = std::max(refMax, ref[size_t(j)]);
      }
      const float m = ops::detail::scaleAddMax(s.data(), n, 0.125f, add.data());
      EXPECT_EQ(m, refMax);
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(s[size_t(j)], ref[size_t(j)]) << "j " << j;
      // exp over a wide range around the maximum, -inf included.
      for (int64_t j = 0; j < n; ++j)
        s[size_t(j)] = j % 3 ? u(rng) : ref[size_t(j)];
      const std::vector<float> in = s;
      const float mx = n ? *std::max_element(in.begin(), in.end()) : 0.0f;
      const double sum = ops::detail::expShiftSum(s.data(), n, mx);
      double written = 0;
      for (int64_t j = 0; j < n; ++j) {
        const float x = in[size_t(j)] - mx;
        const float e = s[size_t(j)];
        written += double(e);
        if (x != x) { // every score -inf: -inf - -inf
          ASSERT_TRUE(std::isnan(e));
          continue;
        }
        if (x < -87.0f) {
          ASSERT_EQ(e, 0.0f) << "x " << x;
          continue;
        }
        const double want = std::exp(double(x));
        ASSERT_NEAR(e, want, 2.4e-7 * want) << "x " << x;
      }
      if (written == written)
        EXPECT_NEAR(sum, written, 1e-12 * std::max(1.0, written));
      else
        EXPECT_TRUE(std::isnan(sum));
    }
    // A NaN score stays NaN and makes the sum NaN; the maximum ignores it.
    std::vector<float> s = {0.5f, NAN, -1.0f, 2.0f, 0.0f, 1.0f, -3.0f, 0.25f, 4.0f};
    EXPECT_EQ(ops::detail::scaleAddMax(s.data(), 9, 1.0f, nullptr), 4.0f);
    EXPECT_TRUE(std::isnan(ops::detail::expShiftSum(s.data(), 9, 4.0f)));
    EXPECT_TRUE(std::isnan(s[1]));
    EXPECT_EQ(s[8], 1.0f);
  }
  ops::detail::setKernelIsa(0);
}

TEST_P(OpsTest, KernelIsaSelection) {
  // The hook overrides SPARSEC_ISA; 0 restores the default (SPARSEC_ISA if
  // set, else the best available).
  ops::detail::setKernelIsa(0);
  const int dflt = ops::detail::kernelIsa();
  ops::detail::setKernelIsa(3);
  const int best = ops::detail::kernelIsa();
  EXPECT_GE(best, 1);
  EXPECT_LE(best, 3);
  EXPECT_LE(dflt, best);
  for (int isa : {1, 2, 3}) {
    ops::detail::setKernelIsa(isa);
    EXPECT_EQ(ops::detail::kernelIsa(), std::min(isa, best)) << isa;
  }
  ops::detail::setForceScalarKernels(true);
  EXPECT_EQ(ops::detail::kernelIsa(), 1);
  ops::detail::setForceScalarKernels(false);
  EXPECT_EQ(ops::detail::kernelIsa(), dflt);
}

/// A linear test case: the shape of x ([..., K]) and N.
struct LinearCase {
  Shape x;
  int64_t N;
};

/// Runs body(case, seed) for every case under every kernel ISA this machine
/// can run (the body draws its random seeds from `seed`, one counter for
/// the whole run), then restores the default ISA.
template <typename F>
void forEachIsaAndCase(const std::vector<LinearCase> &cases, uint32_t seed,
                       F &&body) {
  for (int isa : availableIsas()) {
    ops::detail::setKernelIsa(isa);
    SCOPED_TRACE("kernel ISA " + std::to_string(isa));
    for (const LinearCase &c : cases)
      body(c, seed);
  }
  ops::detail::setKernelIsa(0);
}

TEST_P(OpsTest, LinearShapesAndPaths) {
  const std::vector<LinearCase> cases = {
      {{1, 1}, 1},
      {{1, 13}, 5},
      {{3, 13}, 17},
      {{7, 64}, 33},
      {{1, 5, 31}, 301},
      {{2, 2, 257}, 64},
      {{33, 19}, 45},
      {{128, 100}, 77},
      {{40, 20}, 2100},
      {{200, 800}, 70},
      {{6, 1000}, 1003},
      {{2, 3, 5, 24}, 16},
      {{0, 8}, 4},
      {{4, 0}, 6},
      // M = 1, 3, 7, 33, 128 with K and N not multiples of 16 or 32.
      {{1, 1000}, 1001},
      {{3, 515}, 530},
      {{7, 97}, 211},
      {{33, 70}, 150},
      {{128, 45}, 39},
      {{128, 300}, 331},
      {{1, 4, 23}, 83},
      {{13, 77}, 95},
  };
  forEachIsaAndCase(cases, 600, [&](const LinearCase &c, uint32_t &seed) {
    const int64_t K = c.x.back();
    Owned x = randomTensor(DType::f32, c.x, seed++, -1, 1);
    Owned w = randomTensor(DType::f32, {K, c.N}, seed++, -1, 1);
    Owned b = randomTensor(DType::f32, {c.N}, seed++, -1, 1);
    for (Activation act :
         {Activation::none, Activation::relu, Activation::gelu,
          Activation::gelu_tanh, Activation::silu, Activation::sigmoid,
          Activation::relu6}) {
      const bool withBias = act != Activation::relu;
      Tensor y;
      ASSERT_TRUE(linear(ctx, x, w, withBias ? &b.t : nullptr, act, 8, y))
          << ctx.error;
      Shape ys = c.x;
      ys.back() = c.N;
      expectShape(y, ys);
      checkLinear(x, w, withBias ? &b : nullptr, act, y);
      if (act != Activation::none && c.x[0] * c.N > 5000)
        break; // the activations are covered by the smaller cases
    }
  });
}

// Batched calls (more than 32 rows) over a model weight, which lies in the
// mapped weight pack, pack it once for all calls (Context::packCache): the
// results are the same bits as packing on every call (the same panels, the
// same kernel), on every ISA, for float32 and float16 weights, over more
// than one K panel and a partial column strip; a weight outside the pack
// (an activation) is not cached.
TEST_P(OpsTest, LinearPacksModelWeightsOnce) {
  const int64_t M = 70, K = 600, N = 77;
  Owned x = randomTensor(DType::f32, {M, K}, 4100, -1, 1);
  Owned w = randomTensor(DType::f32, {K, N}, 4101, -1, 1);
  Owned wh = randomTensor(DType::f16, {K, N}, 4102, -1, 1);
  const std::string path =
      ::testing::TempDir() + "/ops-pack-" + std::to_string(::getpid()) + ".pack";
  uint64_t checksum = 0;
  std::string error;
  ASSERT_TRUE(writeWeightPack(path,
                              {{w.t.data, size_t(K * N) * 4},
                               {wh.t.data, size_t(K * N) * 2}},
                              checksum, error))
      << error;
  auto pack = WeightPack::open(path, 2, checksum, true, error);
  ASSERT_TRUE(pack) << error;
  std::remove(path.c_str());
  Context packed(kDesc, pack.get(), GetParam());
  const Tensor pw{const_cast<void *>(pack->segment(0)), DType::f32, 2, {K, N}};
  const Tensor pwh{const_cast<void *>(pack->segment(1)), DType::f16, 2, {K, N}};
  for (int isa : {1, 2, 3}) {
    ops::detail::setKernelIsa(isa);
    SCOPED_TRACE("kernel ISA " + std::to_string(isa));
    for (const auto &[cached, own] :
         {std::make_pair(pw, w.t), std::make_pair(pwh, wh.t)}) {
      Tensor ref, first, again;
      ASSERT_TRUE(linear(ctx, x, own, nullptr, Activation::none, 0, ref))
          << ctx.error;
      ASSERT_TRUE(linear(packed, x, cached, nullptr, Activation::none, 1, first))
          << packed.error;
      EXPECT_TRUE(packed.packCache) << "a batched call on a pack weight packs it";
      ASSERT_TRUE(linear(packed, x, cached, nullptr, Activation::none, 2, again))
          << packed.error;
      EXPECT_EQ(std::memcmp(ref.data, first.data, size_t(M * N) * 4), 0);
      EXPECT_EQ(std::memcmp(ref.data, again.data, size_t(M * N) * 4), 0);
    }
  }
  // Activations (not in a pack) are packed per call.
  EXPECT_FALSE(ctx.packCache);
}

// Float16 weights: the kernels convert each weight as they load it and
// accumulate in float32 exactly as for float32 weights, so the result is
// bit-identical to linear() on the weights rounded to float16, on every
// path (streaming for M <= 32, blocked above, scalar, AVX2, AVX-512).
TEST_P(OpsTest, LinearHalfWeightsMatchRoundedFloat) {
  const std::vector<LinearCase> cases = {
      {{1, 13}, 5},      {{1, 1000}, 1001}, {{3, 515}, 530},
      {{7, 97}, 211},    {{6, 1000}, 1003}, {{33, 70}, 150},
      {{128, 300}, 331}, {{1, 256}, 2048},  {{2, 3, 5, 24}, 16},
      {{40, 20}, 2100},
  };
  forEachIsaAndCase(cases, 900, [&](const LinearCase &c, uint32_t &seed) {
    const int64_t K = c.x.back();
    Owned x = randomTensor(DType::f32, c.x, seed++, -1, 1);
    Owned w = randomTensor(DType::f32, {K, c.N}, seed++, -1, 1);
    Owned b = randomTensor(DType::f32, {c.N}, seed++, -1, 1);
    Owned wh(DType::f16, {K, c.N});
    for (int64_t i = 0; i < K * c.N; ++i) {
      wh.p<uint16_t>()[i] = floatToHalf(w.p<float>()[i]);
      w.p<float>()[i] = halfToFloat(wh.p<uint16_t>()[i]);
    }
    Tensor yh, yf;
    ASSERT_TRUE(linear(ctx, x, wh, &b.t, Activation::relu, 8, yh)) << ctx.error;
    ASSERT_TRUE(linear(ctx, x, w, &b.t, Activation::relu, 9, yf)) << ctx.error;
    checkLinear(x, w, &b, Activation::relu, yh);
    ASSERT_EQ(yh.numel(), yf.numel());
    for (int64_t i = 0; i < yh.numel(); ++i)
      ASSERT_EQ(yh.as<float>()[i], yf.as<float>()[i])
          << "element " << i << " M*N " << yh.numel() << " K " << K;
  });
}

TEST_P(OpsTest, LinearErrors) {
  Owned x = randomTensor(DType::f32, {2, 5}, 1);
  Owned w = randomTensor(DType::f32, {4, 3}, 1);
  Owned w3 = randomTensor(DType::f32, {5, 3, 1}, 1);
  Owned b = randomTensor(DType::f32, {4}, 1);
  Owned w53 = randomTensor(DType::f32, {5, 3}, 1);
  Owned xd = randomTensor(DType::f64, {2, 5}, 1);
  Tensor y;
  expectFail(linear(ctx, x, w, nullptr, Activation::none, 8, y), "linear");
  expectFail(linear(ctx, x, w3, nullptr, Activation::none, 8, y), "linear");
  expectFail(linear(ctx, x, w53, &b.t, Activation::none, 8, y), "linear");
  expectFail(linear(ctx, xd, w53, nullptr, Activation::none, 8, y), "linear");
  // Float16 weights need a float32 x and bias.
  Owned wh(DType::f16, {5, 3});
  Owned bh(DType::f16, {3});
  expectFail(linear(ctx, x, wh, &bh.t, Activation::none, 8, y), "linear");
  expectFail(linear(ctx, xd, wh, nullptr, Activation::none, 8, y), "linear");
}

/// numpy matmul reference.
void checkMatmul(const Owned &a, const Owned &b, const Tensor &y) {
  Shape as = shapeOf(a.t), bs = shapeOf(b.t);
  const bool av = as.size() == 1, bv = bs.size() == 1;
  if (av)
    as.insert(as.begin(), 1);
  if (bv)
    bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const Shape batch = bcastShape(ab, bb);
  int64_t nb = 1;
  for (int64_t d : batch)
    nb *= d;
  Owned aa(DType::f32, ab), bbt(DType::f32, bb); // shapes for bcastOffset
  ASSERT_EQ(y.numel(), nb * M * N);
  for (int64_t t = 0; t < nb; ++t) {
    const Shape idx = unravel(t, batch);
    const int64_t ao = bcastOffset(aa.t, idx) * M * K;
    const int64_t bo = bcastOffset(bbt.t, idx) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = double(a.p<float>()[ao + m * K + k]) *
                           double(b.p<float>()[bo + k * N + n]);
          s += p;
          mag += std::fabs(p);
        }
        ASSERT_NEAR(y.as<float>()[(t * M + m) * N + n], s, 1e-4 * mag + 1e-6);
      }
  }
}

TEST_P(OpsTest, Matmul) {
  struct Case {
    Shape a, b, y;
  };
  const std::vector<Case> cases = {
      {{3, 4}, {4, 5}, {3, 5}},
      {{4}, {4, 5}, {5}},
      {{3, 4}, {4}, {3}},
      {{7}, {7}, {}},
      {{2, 3, 4, 5}, {5, 6}, {2, 3, 4, 6}},
      {{2, 1, 4, 5}, {3, 5, 6}, {2, 3, 4, 6}},
      {{16, 4, 8}, {16, 8, 4}, {16, 4, 8 / 2}},
      {{5}, {2, 5, 3}, {2, 3}},
      {{2, 3, 5}, {5}, {2, 3}},
      {{1, 40, 33}, {2, 33, 70}, {2, 40, 70}},
      {{2, 0, 3}, {3, 4}, {2, 0, 4}},
      {{1, 333}, {333, 97}, {1, 97}},
      {{3, 3, 37}, {37, 70}, {3, 3, 70}},
      {{7, 41}, {2, 41, 55}, {2, 7, 55}},
      {{128, 67}, {67, 99}, {128, 99}},
      {{2, 33, 50}, {2, 50, 45}, {2, 33, 45}},
  };
  uint32_t seed = 700;
  for (int isa : availableIsas()) {
    ops::detail::setKernelIsa(isa);
    SCOPED_TRACE("kernel ISA " + std::to_string(isa));
    for (const Case &c : cases) {
      Owned a = randomTensor(DType::f32, c.a, seed++, -1, 1);
      Owned b = randomTensor(DType::f32, c.b, seed++, -1, 1);
      Tensor y;
      ASSERT_TRUE(matmul(ctx, a, b, 9, y)) << ctx.error;
      expectShape(y, c.y);
      checkMatmul(a, b, y);
    }
  }
  Owned a = randomTensor(DType::f32, {3, 4}, 1);
  Owned b = randomTensor(DType::f32, {5, 6}, 1);
  Tensor y;
  expectFail(matmul(ctx, a, b, 9, y), "matmul");
  Owned a3 = randomTensor(DType::f32, {2, 3, 4}, 1);
  Owned b3 = randomTensor(DType::f32, {3, 4, 5}, 1);
  expectFail(matmul(ctx, a3, b3, 9, y), "matmul");
  Owned s = randomTensor(DType::f32, {}, 1);
  expectFail(matmul(ctx, s, b, 9, y), "matmul");
  Owned ai = randomTensor(DType::i32, {3, 4}, 1);
  expectFail(matmul(ctx, ai, ai, 9, y), "matmul");
}

//===----------------------------------------------------------------------===//
// Normalisation, attention, embedding
//===----------------------------------------------------------------------===//

TEST_P(OpsTest, LayerNorm) {
  uint32_t seed = 800;
  for (DType t : {DType::f32, DType::f64, DType::f16})
    for (int64_t axis : {-1, 1, 0, 2})
      for (bool withBias : {false, true}) {
        const Shape xs = {2, 3, 33};
        Owned x = randomTensor(t, xs, seed++, -3, 5);
        int64_t ax = axis < 0 ? axis + 3 : axis;
        Shape ns(xs.begin() + ax, xs.end());
        Owned g = randomTensor(t, ns, seed++);
        Owned b = randomTensor(t, ns, seed++);
        Tensor y;
        ASSERT_TRUE(
            layerNorm(ctx, x, g, withBias ? &b.t : nullptr, axis, 1e-5f, 10, y))
            << ctx.error;
        expectShape(y, xs);
        const int64_t D = g.numel(), rows = x.numel() / D;
        for (int64_t r = 0; r < rows; ++r) {
          double mean = 0, var = 0;
          for (int64_t i = 0; i < D; ++i)
            mean += at(x, r * D + i);
          mean /= double(D);
          for (int64_t i = 0; i < D; ++i)
            var += (at(x, r * D + i) - mean) * (at(x, r * D + i) - mean);
          var /= double(D);
          for (int64_t i = 0; i < D; ++i) {
            double ref =
                (at(x, r * D + i) - mean) / std::sqrt(var + 1e-5) * at(g, i);
            if (withBias)
              ref += at(b, i);
            ASSERT_NEAR(at(y, r * D + i), ref, 10 * tolFor(t, ref));
          }
        }
      }
  Owned x = randomTensor(DType::f32, {2, 4}, 1);
  Owned g = randomTensor(DType::f32, {3}, 1);
  Tensor y;
  expectFail(layerNorm(ctx, x, g, nullptr, -1, 1e-5f, 10, y), "layer_norm");
  expectFail(layerNorm(ctx, x, x, nullptr, 2, 1e-5f, 10, y), "layer_norm");
}

TEST_P(OpsTest, RmsNorm) {
  uint32_t seed = 900;
  for (DType t : {DType::f32, DType::f64, DType::f16})
    for (const Shape &xs : {Shape{5}, Shape{3, 17}, Shape{2, 300, 64}}) {
      Owned x = randomTensor(t, xs, seed++);
      Owned g = randomTensor(t, {xs.back()}, seed++);
      Tensor y;
      ASSERT_TRUE(rmsNorm(ctx, x, g, 1e-6f, 11, y)) << ctx.error;
      expectShape(y, xs);
      const int64_t D = xs.back(), rows = x.numel() / D;
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < D; ++i)
          ss += at(x, r * D + i) * at(x, r * D + i);
        const double inv = 1 / std::sqrt(ss / double(D) + 1e-6);
        for (int64_t i = 0; i < D; ++i) {
          const double ref = at(x, r * D + i) * inv * at(g, i);
          ASSERT_NEAR(at(y, r * D + i), ref, 10 * tolFor(t, ref));
        }
      }
    }
  Owned x = randomTensor(DType::f32, {2, 4}, 1);
  Owned g = randomTensor(DType::f32, {5}, 1);
  Tensor y;
  expectFail(rmsNorm(ctx, x, g, 1e-6f, 11, y), "rms_norm");
}

TEST_P(OpsTest, Rotary) {
  uint32_t seed = 950;
  // x shape, cos/sin shape: broadcast over heads, a decode row, a rank-2
  // table over batch and heads, and a broadcast last dim.
  const std::pair<Shape, Shape> cases[] = {{{2, 3, 5, 8}, {2, 1, 5, 8}},
                                           {{1, 4, 1, 128}, {1, 1, 1, 128}},
                                           {{2, 3, 7, 6}, {7, 6}},
                                           {{3, 2, 10}, {3, 2, 1}},
                                           {{2, 0, 4}, {1, 4}}};
  for (DType t : {DType::f32, DType::f64, DType::f16})
    for (const auto &[xs, ts] : cases) {
      Owned x = randomTensor(t, xs, seed++);
      Owned c = randomTensor(t, ts, seed++, -1, 1);
      Owned sn = randomTensor(t, ts, seed++, -1, 1);
      Tensor y;
      ASSERT_TRUE(rotary(ctx, x, c, sn, 12, y)) << ctx.error;
      expectShape(y, xs);
      const int64_t D = xs.back(), h = D / 2;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const Shape idx = unravel(i, xs);
        const int64_t j = idx.back();
        // rotate_half(x)[j]: -x[j + h] in the first half, x[j - h] after.
        const double rot = j < h ? -at(x, i + h) : at(x, i - h);
        const double ref = at(x, i) * at(c, bcastOffset(c, idx)) +
                           rot * at(sn, bcastOffset(sn, idx));
        ASSERT_NEAR(at(y, i), ref, 4 * tolFor(t, ref))
            << dtypeName(t) << " element " << i;
      }
    }
  Owned x = randomTensor(DType::f32, {2, 8}, 1);
  Owned odd = randomTensor(DType::f32, {2, 7}, 1);
  Owned wide = randomTensor(DType::f32, {3, 8}, 1);
  Owned row = randomTensor(DType::f32, {1, 8}, 1);
  Owned half = randomTensor(DType::f16, {2, 8}, 1);
  Owned ids = randomTensor(DType::i64, {2, 8}, 1);
  Tensor y;
  expectFail(rotary(ctx, odd, odd, odd, 12, y), "rotary");
  expectFail(rotary(ctx, x, wide, wide, 12, y), "rotary");
  expectFail(rotary(ctx, x, x, row, 12, y), "rotary");
  expectFail(rotary(ctx, x, half, half, 12, y), "rotary");
  expectFail(rotary(ctx, ids, ids, ids, 12, y), "rotary");
}

TEST_P(OpsTest, Softmax) {
  uint32_t seed = 1000;
  for (DType t : {DType::f32, DType::f64, DType::f16})
    for (int64_t axis : {-1, 0, 1, 2}) {
      const Shape xs = {3, 40, 70};
      Owned x = randomTensor(t, xs, seed++, -10, 10);
      if (t == DType::f32) // large values: must not overflow
        for (int64_t i = 0; i < x.numel(); i += 3)
          x.p<float>()[i] += 1000.0f;
      Tensor y;
      ASSERT_TRUE(softmax(ctx, x, axis, 12, y)) << ctx.error;
      expectShape(y, xs);
      const int64_t ax = axis < 0 ? axis + 3 : axis;
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < ax; ++d)
        outer *= xs[size_t(d)];
      for (int64_t d = ax + 1; d < 3; ++d)
        inner *= xs[size_t(d)];
      const int64_t n = xs[size_t(ax)];
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < inner; ++j) {
          double m = -1e300, s = 0;
          for (int64_t i = 0; i < n; ++i)
            m = std::max(m, at(x, (o * n + i) * inner + j));
          for (int64_t i = 0; i < n; ++i)
            s += std::exp(at(x, (o * n + i) * inner + j) - m);
          for (int64_t i = 0; i < n; ++i) {
            const int64_t k = (o * n + i) * inner + j;
            const double ref = std::exp(at(x, k) - m) / s;
            ASSERT_NEAR(at(y, k), ref, 4 * tolFor(t, ref));
          }
        }
    }
  Owned x = randomTensor(DType::f32, {2, 4}, 1);
  Tensor y;
  expectFail(softmax(ctx, x, 2, 12, y), "softmax");
  Owned xi = randomTensor(DType::i32, {2, 4}, 1);
  expectFail(softmax(ctx, xi, 1, 12, y), "softmax");
}

/// Reference attention over [B, Hq, Sq, D] with keys concat(past, k).
std::vector<double> attentionRef(const Owned &q, const Owned &k, const Owned &v,
                                 const Owned *mask, const Owned *pk,
                                 const Owned *pv, float scale, bool causal) {
  const int64_t B = q.t.shape[0], Hq = q.t.shape[1], Sq = q.t.shape[2],
                D = q.t.shape[3];
  const int64_t Hk = k.t.shape[1], Sk = k.t.shape[2], Dv = v.t.shape[3];
  const int64_t P = pk ? pk->t.shape[2] : 0, T = P + Sk;
  std::vector<double> out(size_t(B * Hq * Sq * Dv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t hk = h / (Hq / Hk);
        std::vector<double> s(static_cast<size_t>(T));
        std::vector<bool> ok(size_t(T), true);
        double m = -1e300;
        for (int64_t j = 0; j < T; ++j) {
          auto key = [&](int64_t d) {
            return j < P ? at(*pk, ((b * Hk + hk) * P + j) * D + d)
                         : at(k, ((b * Hk + hk) * Sk + j - P) * D + d);
          };
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += at(q, ((b * Hq + h) * Sq + i) * D + d) * key(d);
          double sc = dot * scale;
          if (mask) {
            const int64_t off = bcastOffset(mask->t, {b, h, i, j});
            if (mask->t.dtype == DType::b1)
              ok[size_t(j)] = at(*mask, off) != 0;
            else
              sc += at(*mask, off);
          }
          if (causal && j > i + (T - Sq))
            ok[size_t(j)] = false;
          s[size_t(j)] = sc;
          if (ok[size_t(j)])
            m = std::max(m, sc);
        }
        double sum = 0;
        for (int64_t j = 0; j < T; ++j)
          if (ok[size_t(j)])
            sum += std::exp(s[size_t(j)] - m);
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < T; ++j) {
            if (!ok[size_t(j)])
              continue;
            const double val =
                j < P ? at(*pv, ((b * Hk + hk) * P + j) * Dv + d)
                      : at(v, ((b * Hk + hk) * Sk + j - P) * Dv + d);
            acc += std::exp(s[size_t(j)] - m) / sum * val;
          }
          out[size_t(((b * Hq + h) * Sq + i) * Dv + d)] = sum > 0 ? acc : 0.0;
        }
      }
  return out;
}

// The GEMM path skips trailing keys that a mask hides (-1e4 additive, as
// exports write a causal mask, or false in a bool mask) where the scores
// cannot reach exp's cutoff, and computes them where they could (scores
// of 1e4 and more, where skipping them would be wrong by O(1)): both
// against the reference, within what float32 scores of that size allow.
// Row 0 hides every key (a softmax over all of them, as the graph says).
TEST_P(OpsTest, AttentionSkipsKeysTheMaskHides) {
  const int64_t Sq = 70, D = 8, Dv = 6;
  uint32_t seed = 1200;
  for (float magnitude : {1.0f, 80.0f})
    for (bool boolMask : {false, true}) {
      SCOPED_TRACE("magnitude " + std::to_string(magnitude) +
                   (boolMask ? " bool" : " float"));
      Owned q = randomTensor(DType::f32, {1, 2, Sq, D}, seed++, -magnitude, magnitude);
      Owned k = randomTensor(DType::f32, {1, 2, Sq, D}, seed++);
      Owned v = randomTensor(DType::f32, {1, 2, Sq, Dv}, seed++);
      if (magnitude > 1) {
        // The last key, hidden from every row but the last, aligned with
        // every query: its masked score (about 2.2e4 - 1e4) dominates.
        for (int64_t i = 0; i < 2 * Sq * D; ++i)
          q.t.as<float>()[i] = std::fabs(q.t.as<float>()[i]);
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t d = 0; d < D; ++d)
            k.t.as<float>()[(h * Sq + Sq - 1) * D + d] = 200.0f;
      }
      std::vector<float> mf(size_t(Sq * Sq));
      std::vector<uint8_t> mb(size_t(Sq * Sq));
      for (int64_t i = 0; i < Sq; ++i)
        for (int64_t j = 0; j < Sq; ++j) {
          const bool kept = i > 0 && j <= i;
          mf[size_t(i * Sq + j)] = kept ? 0.0f : -1e4f;
          mb[size_t(i * Sq + j)] = kept;
        }
      Owned mask = boolMask ? make<uint8_t>(DType::b1, {Sq, Sq}, mb)
                            : make<float>(DType::f32, {Sq, Sq}, mf);
      const float scale = 1.0f / std::sqrt(float(D));
      Tensor out;
      ASSERT_TRUE(attention(ctx, q, k, v, &mask.t, nullptr, nullptr, scale,
                            false, HeadLayout::headMajor, 12, out, -1, nullptr,
                            -1, nullptr))
          << ctx.error;
      const std::vector<double> ref =
          attentionRef(q, k, v, &mask, nullptr, nullptr, scale, false);
      // float32 keeps the largest masked score |s scale + mask| to about
      // 2^-24 of itself, which moves the softmax weights by as much.
      double cond = 0;
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < Sq; ++i)
          for (int64_t j = 0; j < Sq; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += at(q, (h * Sq + i) * D + d) * at(k, (h * Sq + j) * D + d);
            cond = std::max(cond, std::fabs(dot * scale + (boolMask ? 0.0 : mf[size_t(i * Sq + j)])));
          }
      const double tol = 1e-5 + 8 * cond * std::ldexp(1.0, -24);
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(out.as<float>()[i], ref[i], tol + 1e-5 * std::fabs(ref[i]))
            << "at " << i;
    }
}

/// Random operands of one attention call: q [B, Hq, Sq, D], the new keys
/// and values [B, Hk, Sk, D or Dv] and a past [B, Hk, P, D or Dv].
struct AttentionOperands {
  Owned q, k, v, pk, pv;
};
AttentionOperands randomAttention(int64_t B, int64_t Hq, int64_t Hk, int64_t Sq,
                                  int64_t Sk, int64_t P, int64_t D, int64_t Dv,
                                  uint32_t &seed) {
  AttentionOperands o;
  o.q = randomTensor(DType::f32, {B, Hq, Sq, D}, seed++);
  o.k = randomTensor(DType::f32, {B, Hk, Sk, D}, seed++);
  o.v = randomTensor(DType::f32, {B, Hk, Sk, Dv}, seed++);
  o.pk = randomTensor(DType::f32, {B, Hk, P, D}, seed++);
  o.pv = randomTensor(DType::f32, {B, Hk, P, Dv}, seed++);
  return o;
}

TEST_P(OpsTest, Attention) {
  struct Case {
    int64_t B, Hq, Hk, Sq, Sk, P, D, Dv;
    int maskKind; // 0 none, 1 [Sq, T] additive, 2 [B, 1, 1, T] bool
    bool causal;
  };
  const std::vector<Case> cases = {
      {1, 2, 2, 3, 3, 0, 8, 8, 0, false},
      {2, 4, 4, 5, 5, 0, 16, 16, 0, true},
      {2, 4, 2, 1, 1, 6, 64, 64, 0, true}, // decode with GQA
      {1, 3, 3, 4, 4, 5, 7, 9, 1, true},   // prefill with past, odd dims
      {2, 2, 1, 3, 2, 4, 5, 3, 2, false},
      {1, 2, 2, 6, 2, 0, 4, 4, 1, true},      // causal rows without any key
      {2, 8, 8, 17, 17, 0, 32, 32, 1, false}, // parallel rows
      // From 8 query rows a head the GEMM path: two row blocks (64 + 6)
      // over past and present keys with GQA and a boolean mask; causal
      // rows without any key; an additive mask over odd widths.
      {2, 4, 2, 70, 70, 9, 12, 10, 2, true},
      {1, 2, 2, 12, 4, 0, 8, 8, 0, true},
      {1, 3, 3, 9, 9, 3, 5, 7, 1, true},
  };
  uint32_t seed = 1100;
  for (const Case &c : cases) {
    const int64_t T = c.P + c.Sk;
    auto [q, k, v, pk, pv] =
        randomAttention(c.B, c.Hq, c.Hk, c.Sq, c.Sk, c.P, c.D, c.Dv, seed);
    Owned mask;
    if (c.maskKind == 1)
      mask = randomTensor(DType::f32, {c.Sq, T}, seed++, -3, 1);
    else if (c.maskKind == 2)
      mask = randomTensor(DType::b1, {c.B, 1, 1, T}, seed++, -1, 3);
    const float scale = 1.0f / std::sqrt(float(c.D));
    const bool past = c.P > 0;
    Tensor out, presK, presV;
    ASSERT_TRUE(attention(ctx, q, k, v, c.maskKind ? &mask.t : nullptr,
                          past ? &pk.t : nullptr, past ? &pv.t : nullptr, scale,
                          c.causal, HeadLayout::headMajor, 12, out, 13,
                          past ? &presK : nullptr, 14, past ? &presV : nullptr))
        << ctx.error;
    expectShape(out, {c.B, c.Hq, c.Sq, c.Dv});
    const std::vector<double> ref = attentionRef(
        q, k, v, c.maskKind ? &mask : nullptr, past ? &pk : nullptr,
        past ? &pv : nullptr, scale, c.causal);
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_NEAR(out.as<float>()[i], ref[i], 1e-5 + 1e-5 * std::fabs(ref[i]))
          << "case B" << c.B << " Sq" << c.Sq << " P" << c.P << " at " << i;
    if (past) {
      expectShape(presK, {c.B, c.Hk, T, c.D});
      expectShape(presV, {c.B, c.Hk, T, c.Dv});
      for (int64_t bh = 0; bh < c.B * c.Hk; ++bh)
        for (int64_t j = 0; j < T; ++j)
          for (int64_t d = 0; d < c.D; ++d) {
            const double ref2 = j < c.P
                                    ? at(pk, (bh * c.P + j) * c.D + d)
                                    : at(k, (bh * c.Sk + j - c.P) * c.D + d);
            ASSERT_EQ(presK.as<float>()[(bh * T + j) * c.D + d], ref2);
          }
      for (int64_t bh = 0; bh < c.B * c.Hk; ++bh)
        for (int64_t j = 0; j < T; ++j)
          for (int64_t d = 0; d < c.Dv; ++d) {
            const double ref2 = j < c.P
                                    ? at(pv, (bh * c.P + j) * c.Dv + d)
                                    : at(v, (bh * c.Sk + j - c.P) * c.Dv + d);
            ASSERT_EQ(presV.as<float>()[(bh * T + j) * c.Dv + d], ref2);
          }
    }
  }
  Owned q = randomTensor(DType::f32, {1, 2, 3, 4}, 1);
  Owned k5 = randomTensor(DType::f32, {1, 2, 3, 5}, 1);
  Owned k3 = randomTensor(DType::f32, {1, 3, 3, 4}, 1);
  Owned badMask = randomTensor(DType::f32, {2, 3}, 1);
  Tensor out;
  expectFail(attention(ctx, q, k5, k5, nullptr, nullptr, nullptr, 1.0f, false,
                       HeadLayout::headMajor, 12, out, 0, nullptr, 0, nullptr),
             "attention");
  expectFail(attention(ctx, q, k3, k3, nullptr, nullptr, nullptr, 1.0f, false,
                       HeadLayout::headMajor, 12, out, 0, nullptr, 0, nullptr),
             "attention");
  expectFail(attention(ctx, q, q, q, &badMask.t, nullptr, nullptr, 1.0f, false,
                       HeadLayout::headMajor, 12, out, 0, nullptr, 0, nullptr),
             "attention");
  Owned intMask = randomTensor(DType::i64, {1, 1, 3, 3}, 1, 0, 1);
  expectFail(attention(ctx, q, q, q, &intMask.t, nullptr, nullptr, 1.0f, false,
                       HeadLayout::headMajor, 12, out, 0, nullptr, 0, nullptr),
             "attention: mask must be float32 (additive) or bool, got");
}

/// x [B, A, C, W] with its second and third dims swapped: [B, C, A, W].
Owned swapMiddle(const Owned &x) {
  const int64_t B = x.t.shape[0], A = x.t.shape[1], C = x.t.shape[2],
                W = x.t.shape[3];
  Owned y(DType::f32, {B, C, A, W});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < A; ++a)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t w = 0; w < W; ++w)
          y.p<float>()[((b * C + c) * A + a) * W + w] =
              x.p<float>()[((b * A + a) * C + c) * W + w];
  return y;
}

// Token-major q, k, v ([B, S, H, D]: sparsec-fold-head-transposes) give
// the head-major result transposed, on the row path and the GEMM path,
// and the same presents, for the cases of the test above.
TEST_P(OpsTest, AttentionTokenMajorMatchesHeadMajor) {
  struct Case {
    int64_t B, Hq, Hk, Sq, Sk, P, D, Dv;
    bool mask, causal;
  };
  const std::vector<Case> cases = {
      {1, 2, 2, 3, 3, 0, 8, 8, false, false},
      {2, 4, 2, 1, 1, 6, 64, 64, false, true}, // decode with GQA
      {1, 3, 3, 4, 4, 5, 7, 9, true, true},
      {2, 4, 2, 70, 70, 9, 12, 10, true, true}, // GEMM path with a past
      {2, 4, 4, 70, 70, 0, 16, 8, true, false}, // GEMM path, keys strided
      {1, 2, 2, 12, 4, 0, 8, 8, false, true},
  };
  uint32_t seed = 1300;
  for (const Case &c : cases) {
    SCOPED_TRACE("case B" + std::to_string(c.B) + " Sq" + std::to_string(c.Sq) +
                 " P" + std::to_string(c.P));
    const int64_t T = c.P + c.Sk;
    auto [q, k, v, pk, pv] =
        randomAttention(c.B, c.Hq, c.Hk, c.Sq, c.Sk, c.P, c.D, c.Dv, seed);
    Owned mask = randomTensor(DType::f32, {c.Sq, T}, seed++, -3, 1);
    Owned qt = swapMiddle(q), kt = swapMiddle(k), vt = swapMiddle(v);
    const float scale = 1.0f / std::sqrt(float(c.D));
    const bool past = c.P > 0;
    Tensor out, presK, presV, outT, presKT, presVT;
    ASSERT_TRUE(attention(ctx, q, k, v, c.mask ? &mask.t : nullptr,
                          past ? &pk.t : nullptr, past ? &pv.t : nullptr, scale,
                          c.causal, HeadLayout::headMajor, 12, out, 13,
                          past ? &presK : nullptr, 14, past ? &presV : nullptr))
        << ctx.error;
    ASSERT_TRUE(attention(
        ctx, qt, kt, vt, c.mask ? &mask.t : nullptr, past ? &pk.t : nullptr,
        past ? &pv.t : nullptr, scale, c.causal, HeadLayout::tokenMajor, 9,
        outT, 10, past ? &presKT : nullptr, 11, past ? &presVT : nullptr))
        << ctx.error;
    expectShape(outT, {c.B, c.Sq, c.Hq, c.Dv});
    Owned heads(DType::f32, {c.B, c.Hq, c.Sq, c.Dv});
    std::memcpy(heads.t.data, out.data, sizeof(float) * size_t(out.numel()));
    Owned expected = swapMiddle(heads);
    for (int64_t i = 0; i < expected.numel(); ++i)
      ASSERT_NEAR(outT.as<float>()[i], expected.p<float>()[i],
                  1e-6 + 1e-6 * std::fabs(expected.p<float>()[i]))
          << "at " << i;
    if (past) {
      expectShape(presKT, {c.B, c.Hk, T, c.D});
      expectShape(presVT, {c.B, c.Hk, T, c.Dv});
      ASSERT_EQ(0, std::memcmp(presKT.data, presK.data,
                               sizeof(float) * size_t(presK.numel())));
      ASSERT_EQ(0, std::memcmp(presVT.data, presV.data,
                               sizeof(float) * size_t(presV.numel())));
    }
  }
  // Shapes read in the token-major layout: heads at dim 2.
  Owned q = randomTensor(DType::f32, {1, 3, 2, 4}, 1);
  Owned k = randomTensor(DType::f32, {1, 3, 4, 4}, 1);
  Tensor out;
  expectFail(attention(ctx, q, k, k, nullptr, nullptr, nullptr, 1.0f, false,
                       HeadLayout::tokenMajor, 12, out, 0, nullptr, 0, nullptr),
             "attention: shapes q");
}

TEST_P(OpsTest, Embedding) {
  Owned table = randomTensor(DType::f32, {256, 7}, 1);
  for (DType it : {DType::i64, DType::i32}) {
    Owned ids = randomTensor(it, {2, 3}, 2, 0, 255);
    Tensor out;
    ASSERT_TRUE(embedding(ctx, table, ids, 1, out)) << ctx.error;
    expectShape(out, {2, 3, 7});
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t d = 0; d < 7; ++d)
        ASSERT_EQ(out.as<float>()[i * 7 + d],
                  table.p<float>()[int64_t(at(ids, i)) * 7 + d]);
  }
  Owned many = randomTensor(DType::i64, {5000}, 3, 0, 255);
  Tensor out;
  ASSERT_TRUE(embedding(ctx, table, many, 1, out));
  EXPECT_EQ(out.as<float>()[4999 * 7 + 3],
            table.p<float>()[many.p<int64_t>()[4999] * 7 + 3]);
  Owned bad = make<int64_t>(DType::i64, {2, 3}, {1, 2, 3, 4, 5, 300});
  EXPECT_FALSE(embedding(ctx, table, bad, 1, out));
  EXPECT_NE(ctx.error.find("embedding: id 300 at position 5 is outside "
                           "[-256, 256)"),
            std::string::npos)
      << ctx.error;
  ctx.error.clear();
  // ONNX Gather's negative indices count from the end of the table.
  for (DType it : {DType::i64, DType::i32}) {
    Owned neg = it == DType::i64
                    ? make<int64_t>(it, {3}, {-1, -256, 5})
                    : make<int32_t>(it, {3}, {-1, -256, 5});
    ASSERT_TRUE(embedding(ctx, table, neg, 1, out)) << ctx.error;
    for (int64_t d = 0; d < 7; ++d) {
      EXPECT_EQ(out.as<float>()[d], table.p<float>()[255 * 7 + d]);
      EXPECT_EQ(out.as<float>()[7 + d], table.p<float>()[d]);
      EXPECT_EQ(out.as<float>()[14 + d], table.p<float>()[5 * 7 + d]);
    }
  }
  Owned below = make<int32_t>(DType::i32, {2}, {0, -257});
  expectFail(embedding(ctx, table, below, 1, out),
             "embedding: id -257 at position 1 is outside [-256, 256)");
  Owned fl = randomTensor(DType::f32, {2}, 1);
  expectFail(embedding(ctx, table, fl, 1, out), "embedding");
}

TEST_P(OpsTest, EmbeddingSum) {
  // table[ids] + table2[ids2] equals the two lookups and their add, bit for
  // bit (one float sum each), over a row count that spans threads.
  Owned table = randomTensor(DType::f32, {256, 7}, 11);
  Owned table2 = randomTensor(DType::f32, {40, 7}, 12);
  for (DType it : {DType::i64, DType::i32}) {
    Owned ids = randomTensor(it, {3, 700}, 13, 0, 255);
    Owned ids2 = randomTensor(it, {3, 700}, 14, 0, 39);
    Tensor out;
    ASSERT_TRUE(embedding(ctx, table, ids, table2, ids2, 1, out)) << ctx.error;
    expectShape(out, {3, 700, 7});
    for (int64_t i = 0; i < 2100; ++i)
      for (int64_t d = 0; d < 7; ++d)
        ASSERT_EQ(out.as<float>()[i * 7 + d],
                  table.p<float>()[int64_t(at(ids, i)) * 7 + d] +
                      table2.p<float>()[int64_t(at(ids2, i)) * 7 + d])
            << i << ", " << d;
  }
  Owned ids = randomTensor(DType::i64, {2, 3}, 15, 0, 39);
  Tensor out;
  // The second table's rows bound the second ids.
  Owned far = make<int64_t>(DType::i64, {2, 3}, {1, 2, 3, 4, 5, 40});
  expectFail(embedding(ctx, table, ids, table2, far, 1, out),
             "embedding: id 40 at position 5 is outside the second table's "
             "[-40, 40)");
  Owned back = make<int64_t>(DType::i64, {2, 3}, {-1, -40, 0, 1, 2, 3});
  ASSERT_TRUE(embedding(ctx, table, ids, table2, back, 1, out)) << ctx.error;
  EXPECT_EQ(out.as<float>()[0 * 7 + 2],
            table.p<float>()[ids.p<int64_t>()[0] * 7 + 2] +
                table2.p<float>()[39 * 7 + 2]);
  EXPECT_EQ(out.as<float>()[1 * 7 + 4],
            table.p<float>()[ids.p<int64_t>()[1] * 7 + 4] +
                table2.p<float>()[0 * 7 + 4]);
  Owned other = randomTensor(DType::i64, {3, 2}, 16, 0, 39);
  expectFail(embedding(ctx, table, ids, table2, other, 1, out),
             "embedding: second ids");
  Owned narrow = randomTensor(DType::f32, {40, 6}, 17);
  expectFail(embedding(ctx, table, ids, narrow, ids, 1, out),
             "embedding: second table");
  Owned half = randomTensor(DType::f16, {40, 7}, 18);
  expectFail(embedding(ctx, table, ids, half, ids, 1, out),
             "embedding: a sum of two lookups needs float32 tables");
  Owned bad = make<int64_t>(DType::i64, {2, 3}, {1, 2, 3, 4, 5, 300});
  expectFail(embedding(ctx, table, bad, table2, ids, 1, out),
             "embedding: id 300 at position 5 is outside [-256, 256)");
}

TEST_P(OpsTest, BatchNorm) {
  uint32_t seed = 1200;
  for (DType t : {DType::f32, DType::f64})
    for (const Shape &xs : {Shape{2, 3}, Shape{2, 3, 4, 5}, Shape{1, 4, 9}}) {
      const int64_t C = xs[1];
      Owned x = randomTensor(t, xs, seed++);
      Owned g = randomTensor(t, {C}, seed++);
      Owned b = randomTensor(t, {C}, seed++);
      Owned m = randomTensor(t, {C}, seed++);
      Owned v = randomTensor(t, {C}, seed++, 0.1, 2);
      Tensor y;
      // With no activation and with a ReLU, a sigmoid or a ReLU6 in the
      // same pass.
      for (Activation act : {Activation::none, Activation::relu,
                             Activation::sigmoid, Activation::relu6}) {
        ASSERT_TRUE(batchNorm(ctx, x, g, b, m, v, 1e-5f, act, 2, y))
            << ctx.error;
        int64_t S = x.numel() / (xs[0] * C);
        for (int64_t i = 0; i < x.numel(); ++i) {
          const int64_t c = i / S % C;
          double ref =
              (at(x, i) - at(m, c)) / std::sqrt(at(v, c) + 1e-5) * at(g, c) +
              at(b, c);
          ref = actRef(act, ref);
          ASSERT_NEAR(at(y, i), ref, 4 * tolFor(t, ref));
        }
      }
    }
  Owned x = randomTensor(DType::f32, {2, 3, 4}, 1);
  Owned c4 = randomTensor(DType::f32, {4}, 1);
  Tensor y;
  expectFail(batchNorm(ctx, x, c4, c4, c4, c4, 1e-5f, Activation::none, 2, y),
             "batch_norm");
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

TEST_P(OpsTest, Reduce) {
  const Shape xs = {3, 4, 5, 6};
  const std::vector<std::vector<int64_t>> axesCases = {
      {}, {0}, {1}, {-1}, {3}, {0, 2}, {1, 2}, {1, 3}, {0, 1, 2, 3}, {2, 0}};
  uint32_t seed = 1300;
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::i64, DType::i32,
                  DType::u8, DType::i8})
    for (Reduce kind : {Reduce::sum, Reduce::mean, Reduce::max, Reduce::min})
      for (const auto &axes : axesCases)
        for (bool keep : {false, true}) {
          Owned x = randomTensor(t, xs, seed++, -8, 8);
          Tensor y;
          ASSERT_TRUE(
              reduce(ctx, kind, x, int(axes.size()), axes.data(), keep, 3, y))
              << ctx.error;
          bool red[4] = {axes.empty(), axes.empty(), axes.empty(),
                         axes.empty()};
          for (int64_t a : axes)
            red[a < 0 ? a + 4 : a] = true;
          Shape ys;
          for (int d = 0; d < 4; ++d)
            if (!red[d])
              ys.push_back(xs[size_t(d)]);
            else if (keep)
              ys.push_back(1);
          expectShape(y, ys);
          // Reference: accumulate per output index.
          const int64_t nOut = y.numel();
          std::vector<double> acc(size_t(nOut), 0), cnt(size_t(nOut), 0);
          std::vector<double> mx(size_t(nOut), -1e300), mn(size_t(nOut), 1e300);
          for (int64_t i = 0; i < x.numel(); ++i) {
            const Shape idx = unravel(i, xs);
            int64_t o = 0;
            for (int d = 0; d < 4; ++d)
              if (!red[d])
                o = o * xs[size_t(d)] + idx[size_t(d)];
            const double v = at(x, i);
            acc[size_t(o)] += v;
            cnt[size_t(o)] += 1;
            mx[size_t(o)] = std::max(mx[size_t(o)], v);
            mn[size_t(o)] = std::min(mn[size_t(o)], v);
          }
          for (int64_t o = 0; o < nOut; ++o) {
            double ref = kind == Reduce::sum ? acc[size_t(o)]
                         : kind == Reduce::mean
                             ? acc[size_t(o)] / cnt[size_t(o)]
                         : kind == Reduce::max ? mx[size_t(o)]
                                               : mn[size_t(o)];
            if (!isFloatType(t)) {
              if (kind == Reduce::mean)
                ref = std::trunc(ref);
              ref = wrapTo(t, ref);
            }
            double tol = t == DType::f16 ? 1e-3 * (1 + std::fabs(ref))
                                         : 10 * tolFor(t, ref);
            ASSERT_NEAR(at(y, o), ref, tol)
                << dtypeName(t) << " kind " << int(kind) << " axes "
                << axes.size() << " keep " << keep;
          }
        }
  // Leading / middle axes with a wide kept block (column chunks).
  for (const Shape &ws : {Shape{7, 2500}, Shape{3, 5, 1100}}) {
    Owned x = randomTensor(DType::f32, ws, seed++);
    const int64_t a0 = int64_t(ws.size()) - 2;
    for (Reduce kind : {Reduce::sum, Reduce::max}) {
      Tensor y;
      ASSERT_TRUE(reduce(ctx, kind, x, 1, &a0, false, 3, y));
      const int64_t R = ws[size_t(a0)], K1 = ws.back();
      for (int64_t o = 0; o < y.numel(); ++o) {
        const int64_t o0 = o / K1, j = o % K1;
        double ref = kind == Reduce::sum ? 0 : -1e300;
        for (int64_t i = 0; i < R; ++i) {
          const double v = at(x, (o0 * R + i) * K1 + j);
          ref = kind == Reduce::sum ? ref + v : std::max(ref, v);
        }
        ASSERT_NEAR(at(y, o), ref, 10 * tolFor(DType::f32, ref));
      }
    }
  }
  Owned x = randomTensor(DType::f32, {2, 0, 3}, 1);
  const int64_t ax1 = 1, ax5 = 5, axDup[2] = {0, -3};
  Tensor y;
  ASSERT_TRUE(reduce(ctx, Reduce::sum, x, 1, &ax1, false, 3, y));
  expectShape(y, {2, 3});
  EXPECT_EQ(y.as<float>()[0], 0.0f);
  expectFail(reduce(ctx, Reduce::max, x, 1, &ax1, false, 3, y), "reduce_max");
  expectFail(reduce(ctx, Reduce::sum, x, 1, &ax5, false, 3, y), "reduce_sum");
  expectFail(reduce(ctx, Reduce::min, x, 2, axDup, false, 3, y), "reduce_min");
  Owned b = randomTensor(DType::b1, {3}, 1);
  expectFail(reduce(ctx, Reduce::sum, b, 0, nullptr, false, 3, y), "reduce");
}

TEST_P(OpsTest, Cumsum) {
  uint32_t seed = 1400;
  const Shape xs = {3, 5, 300};
  for (DType t : {DType::f32, DType::f64, DType::i64, DType::i32})
    for (int64_t axis : {0, 1, -1})
      for (bool exclusive : {false, true})
        for (bool reverse : {false, true}) {
          Owned x = randomTensor(t, xs, seed++, -9, 9);
          Tensor y;
          ASSERT_TRUE(cumsum(ctx, x, axis, exclusive, reverse, 4, y))
              << ctx.error;
          expectShape(y, xs);
          const int64_t ax = axis < 0 ? axis + 3 : axis;
          const int64_t n = xs[size_t(ax)];
          int64_t inner = 1;
          for (int64_t d = ax + 1; d < 3; ++d)
            inner *= xs[size_t(d)];
          for (int64_t i = 0; i < x.numel(); ++i) {
            const int64_t pos = i / inner % n, base = i - pos * inner;
            double ref = 0;
            for (int64_t j = 0; j < n; ++j) {
              const bool take = reverse ? (exclusive ? j > pos : j >= pos)
                                        : (exclusive ? j < pos : j <= pos);
              if (take)
                ref += at(x, base + j * inner);
            }
            ASSERT_NEAR(at(y, i), ref, 10 * tolFor(t, ref));
          }
        }
  Owned x = randomTensor(DType::f32, {2}, 1);
  Tensor y;
  expectFail(cumsum(ctx, x, 1, false, false, 4, y), "cumsum");
}

TEST_P(OpsTest, Trilu) {
  uint32_t seed = 1500;
  for (DType t : {DType::f32, DType::i64, DType::u8, DType::f16})
    for (const Shape &xs : {Shape{4, 5}, Shape{2, 6, 3}, Shape{1, 1}})
      for (bool upper : {false, true})
        for (int64_t k : std::initializer_list<int64_t>{
                 -7, -1, 0, 2, 100, std::numeric_limits<int64_t>::max()}) {
          Owned x = randomTensor(t, xs, seed++, 1, 9);
          Tensor y;
          ASSERT_TRUE(trilu(ctx, x, upper, k, 5, y)) << ctx.error;
          const int64_t R = xs[xs.size() - 2], C = xs.back();
          for (int64_t i = 0; i < x.numel(); ++i) {
            const int64_t r = i / C % R, c = i % C;
            const bool keep = upper ? (c - r >= k) : (c - r <= k);
            ASSERT_EQ(at(y, i), keep ? at(x, i) : 0.0);
          }
        }
  Owned x = randomTensor(DType::f32, {4}, 1);
  Tensor y;
  expectFail(trilu(ctx, x, true, 0, 5, y), "trilu");
}

//===----------------------------------------------------------------------===//
// Shapes and data movement
//===----------------------------------------------------------------------===//

TEST_P(OpsTest, ShapeOp) {
  Owned x(DType::f32, {2, 3, 4, 5});
  struct Case {
    int64_t start, end;
    Shape expect;
  };
  const std::vector<Case> cases = {
      {0, 4, {2, 3, 4, 5}},
      {1, 3, {3, 4}},
      {-2, 100, {4, 5}},
      {-100, 1, {2}},
      {3, 1, {}},
      {0, std::numeric_limits<int64_t>::max(), {2, 3, 4, 5}},
  };
  for (const Case &c : cases) {
    Tensor y;
    ASSERT_TRUE(shape(ctx, x, c.start, c.end, 6, y));
    ASSERT_EQ(y.dtype, DType::i64);
    ASSERT_EQ(y.rank, 1);
    EXPECT_EQ(Shape(y.as<int64_t>(), y.as<int64_t>() + y.shape[0]), c.expect);
  }
}

TEST_P(OpsTest, Gather) {
  uint32_t seed = 1600;
  const Shape ds = {4, 5, 6};
  for (DType t : {DType::f32, DType::i64, DType::u8, DType::f16})
    for (int64_t axis : {0, 1, 2, -1})
      for (const Shape &is : {Shape{}, Shape{3}, Shape{2, 4}}) {
        const int64_t ax = axis < 0 ? axis + 3 : axis;
        const int64_t dim = ds[size_t(ax)];
        Owned data = randomTensor(t, ds, seed++, -50, 50);
        Owned idx = randomTensor(DType::i64, is, seed++, double(-dim),
                                 double(dim) - 0.01);
        Owned idx32(DType::i32, is);
        for (int64_t i = 0; i < idx.numel(); ++i)
          idx32.p<int32_t>()[i] = int32_t(idx.p<int64_t>()[i]);
        for (const Owned *ip : {&idx, &idx32}) {
          Tensor y;
          ASSERT_TRUE(gather(ctx, data, *ip, axis, 7, y)) << ctx.error;
          Shape ys(ds.begin(), ds.begin() + ax);
          ys.insert(ys.end(), is.begin(), is.end());
          ys.insert(ys.end(), ds.begin() + ax + 1, ds.end());
          expectShape(y, ys);
          for (int64_t i = 0; i < y.numel(); ++i) {
            const Shape oi = unravel(i, ys);
            Shape ii(oi.begin() + ax, oi.begin() + ax + int64_t(is.size()));
            int64_t flat = 0;
            for (size_t d = 0; d < is.size(); ++d)
              flat = flat * is[d] + ii[d];
            int64_t j = int64_t(at(*ip, flat));
            if (j < 0)
              j += dim;
            Shape di(oi.begin(), oi.begin() + ax);
            di.push_back(j);
            di.insert(di.end(), oi.begin() + ax + int64_t(is.size()), oi.end());
            int64_t off = 0;
            for (size_t d = 0; d < 3; ++d)
              off = off * ds[d] + di[d];
            ASSERT_EQ(at(y, i), at(data, off));
          }
        }
      }
  Owned data = randomTensor(DType::f32, {4, 5}, 1);
  Owned bad = make<int64_t>(DType::i64, {3}, {0, 1, 5});
  Tensor y;
  expectFail(gather(ctx, data, bad, 1, 7, y),
             "gather: index 5 at position 2 is outside [-5, 5)");
  Owned badNeg = make<int64_t>(DType::i64, {1}, {-6});
  expectFail(gather(ctx, data, badNeg, 1, 7, y), "gather");
  Owned ok = make<int64_t>(DType::i64, {1}, {0});
  expectFail(gather(ctx, data, ok, 2, 7, y), "gather");
}

TEST_P(OpsTest, Reshape) {
  Owned x = randomTensor(DType::f32, {2, 3, 4}, 1);
  struct Case {
    std::vector<int64_t> req;
    bool allowzero;
    Shape expect;
  };
  const std::vector<Case> cases = {
      {{4, -1}, false, {4, 6}},
      {{0, -1}, false, {2, 12}},
      {{0, 0, 4}, false, {2, 3, 4}},
      {{-1}, false, {24}},
      {{2, 3, 2, 2}, false, {2, 3, 2, 2}},
      {{24, 1}, true, {24, 1}},
  };
  for (const Case &c : cases) {
    Owned s = vecI64(c.req);
    Tensor y;
    ASSERT_TRUE(reshape(ctx, x, s, c.allowzero, 8, y)) << ctx.error;
    expectShape(y, c.expect);
    ASSERT_EQ(std::memcmp(y.data, x.t.data, x.t.bytes()), 0);
  }
  // allowzero: a 0 is a real 0.
  Owned empty(DType::f32, {0, 3});
  Owned s0 = vecI64({3, 0});
  Tensor y;
  ASSERT_TRUE(reshape(ctx, empty, s0, true, 8, y));
  expectShape(y, {3, 0});
  expectFail(reshape(ctx, x, s0, true, 8, y), "reshape");

  Owned x23 = randomTensor(DType::f32, {2, 3}, 1);
  Owned bad = vecI64({4, -1});
  EXPECT_FALSE(reshape(ctx, x23, bad, false, 8, y));
  EXPECT_NE(
      ctx.error.find("reshape: cannot reshape float32[2, 3] into [4, -1]"),
      std::string::npos)
      << ctx.error;
  ctx.error.clear();
  expectFail(reshape(ctx, x23, vecI64({-1, -1}), false, 8, y), "reshape");
  expectFail(reshape(ctx, x23, vecI64({0, 0, 0}), false, 8, y), "reshape");
  expectFail(reshape(ctx, x23, vecI64({-2, 3}), false, 8, y), "reshape");
  expectFail(reshape(ctx, x23, vecI64({7}), false, 8, y), "reshape");

  // reshapeTo.
  const int64_t to[3] = {3, 1, 2};
  ASSERT_TRUE(reshapeTo(ctx, x23, 3, to, 9, y));
  expectShape(y, {3, 1, 2});
  ASSERT_EQ(std::memcmp(y.data, x23.t.data, x23.t.bytes()), 0);
  const int64_t bad2[2] = {4, 2};
  expectFail(reshapeTo(ctx, x23, 2, bad2, 9, y), "reshape");
  Owned i8 = randomTensor(DType::i8, {5}, 3);
  const int64_t to2[2] = {1, 5};
  ASSERT_TRUE(reshapeTo(ctx, i8, 2, to2, 9, y));
  EXPECT_EQ(y.dtype, DType::i8);
  ASSERT_EQ(std::memcmp(y.data, i8.t.data, 5), 0);
}

TEST_P(OpsTest, Transpose) {
  struct Case {
    Shape x;
    std::vector<int64_t> perm;
  };
  const std::vector<Case> cases = {
      {{37, 53}, {1, 0}},
      {{300, 400}, {1, 0}},
      {{2, 7, 4, 16}, {0, 2, 1, 3}}, // attention head split
      {{3, 4, 5}, {2, 0, 1}},
      {{3, 4, 5}, {1, 2, 0}},
      {{2, 3, 1, 5, 2}, {4, 2, 0, 3, 1}},
      {{1, 6, 1}, {2, 1, 0}},
      {{5}, {0}},
      {{}, {}},
      {{4, 0, 3}, {2, 1, 0}},
  };
  uint32_t seed = 1700;
  for (DType t : {DType::f32, DType::u8, DType::f16, DType::f64, DType::b1})
    for (const Case &c : cases) {
      Owned x = randomTensor(t, c.x, seed++, -100, 100);
      Tensor y;
      ASSERT_TRUE(transpose(ctx, x, c.perm.data(), 10, y)) << ctx.error;
      Shape ys;
      for (int64_t p : c.perm)
        ys.push_back(c.x[size_t(p)]);
      expectShape(y, ys);
      for (int64_t i = 0; i < y.numel(); ++i) {
        const Shape oi = unravel(i, ys);
        Shape xi(c.x.size());
        for (size_t d = 0; d < c.perm.size(); ++d)
          xi[size_t(c.perm[d])] = oi[d];
        int64_t off = 0;
        for (size_t d = 0; d < c.x.size(); ++d)
          off = off * c.x[d] + xi[d];
        ASSERT_EQ(at(y, i), at(x, off));
      }
    }
  Owned x = randomTensor(DType::f32, {2, 3}, 1);
  const int64_t bad[2] = {0, 0}, bad2[2] = {0, 2};
  Tensor y;
  expectFail(transpose(ctx, x, bad, 10, y), "transpose");
  expectFail(transpose(ctx, x, bad2, 10, y), "transpose");
}

TEST_P(OpsTest, Concat) {
  uint32_t seed = 1800;
  for (DType t : {DType::f32, DType::i64, DType::b1, DType::f16})
    for (int64_t axis : {0, 1, 2, -1}) {
      const int64_t ax = axis < 0 ? axis + 3 : axis;
      std::vector<Owned> ins;
      for (int64_t n : {2, 0, 3, 1}) {
        Shape s = {2, 3, 4};
        s[size_t(ax)] = n;
        ins.push_back(randomTensor(t, s, seed++, -9, 9));
      }
      std::vector<const Tensor *> ptrs;
      for (const Owned &o : ins)
        ptrs.push_back(&o.t);
      Tensor y;
      ASSERT_TRUE(concat(ctx, int(ptrs.size()), ptrs.data(), axis, 11, y))
          << ctx.error;
      Shape ys = {2, 3, 4};
      ys[size_t(ax)] = 6;
      expectShape(y, ys);
      for (int64_t i = 0; i < y.numel(); ++i) {
        Shape oi = unravel(i, ys);
        int64_t pos = oi[size_t(ax)];
        size_t which = 0;
        while (pos >= ins[which].t.shape[ax]) {
          pos -= ins[which].t.shape[ax];
          ++which;
        }
        oi[size_t(ax)] = pos;
        const Shape is = shapeOf(ins[which].t);
        int64_t off = 0;
        for (size_t d = 0; d < 3; ++d)
          off = off * is[d] + oi[d];
        ASSERT_EQ(at(y, i), at(ins[which], off));
      }
    }
  Owned a = randomTensor(DType::f32, {2, 3}, 1);
  Owned b = randomTensor(DType::f32, {3, 3}, 1);
  Owned c = randomTensor(DType::i32, {2, 3}, 1);
  const Tensor *ab[2] = {&a.t, &b.t};
  const Tensor *ac[2] = {&a.t, &c.t};
  Tensor y;
  expectFail(concat(ctx, 2, ab, 1, 11, y), "concat");
  expectFail(concat(ctx, 2, ac, 0, 11, y), "concat");
  expectFail(concat(ctx, 2, ab, 2, 11, y), "concat");
}

TEST_P(OpsTest, Slice) {
  const Shape xs = {5, 6, 7};
  const int64_t big = std::numeric_limits<int64_t>::max();
  const int64_t small = std::numeric_limits<int64_t>::min();
  struct Case {
    std::vector<int64_t> starts, ends, axes, steps;
  };
  const std::vector<Case> cases = {
      {{1}, {3}, {0}, {1}},
      {{0, 1}, {big, -1}, {1, 2}, {2, 3}},
      {{-1}, {small}, {0}, {-1}},
      {{4, 5}, {0, -100}, {-3, -1}, {-2, -3}},
      {{-100, 2, 0}, {100, 3, 7}, {0, 1, 2}, {1, 1, 1}},
      {{3}, {1}, {2}, {1}}, // empty
      {{10}, {20}, {1}, {1}},
      {{0, 0}, {2, 2}, {}, {}}, // default axes and steps
      {{6}, {-8}, {1}, {-4}},
  };
  uint32_t seed = 1900;
  for (DType t : {DType::f32, DType::i64, DType::u8})
    for (const Case &c : cases)
      for (bool use32 : {false, true}) {
        Owned x = randomTensor(t, xs, seed++, -100, 100);
        auto idxT = [&](const std::vector<int64_t> &v) {
          if (!use32)
            return vecI64(v);
          std::vector<int32_t> w;
          for (int64_t e : v)
            w.push_back(int32_t(
                std::clamp<int64_t>(e, std::numeric_limits<int32_t>::min(),
                                    std::numeric_limits<int32_t>::max())));
          return make<int32_t>(DType::i32, {int64_t(w.size())}, w);
        };
        Owned st = idxT(c.starts), en = idxT(c.ends), ax = idxT(c.axes),
              sp = idxT(c.steps);
        Tensor y;
        ASSERT_TRUE(slice(ctx, x, st, en, ax, sp, 12, y)) << ctx.error;
        // Reference: per axis, the selected indices (numpy semantics).
        std::vector<std::vector<int64_t>> sel(3);
        for (int d = 0; d < 3; ++d)
          for (int64_t i = 0; i < xs[size_t(d)]; ++i)
            sel[size_t(d)].push_back(i);
        for (size_t i = 0; i < c.starts.size(); ++i) {
          int64_t a = c.axes.empty() ? int64_t(i) : c.axes[i];
          if (a < 0)
            a += 3;
          const int64_t dim = xs[size_t(a)];
          const int64_t step = c.steps.empty() ? 1 : c.steps[i];
          int64_t s = c.starts[i], e = c.ends[i];
          if (use32) {
            s = std::clamp<int64_t>(s, INT32_MIN, INT32_MAX);
            e = std::clamp<int64_t>(e, INT32_MIN, INT32_MAX);
          }
          if (s < 0)
            s += dim;
          if (e < 0)
            e += dim;
          std::vector<int64_t> v;
          if (step > 0) {
            s = std::clamp<int64_t>(s, 0, dim);
            e = std::clamp<int64_t>(e, 0, dim);
            for (int64_t j = s; j < e; j += step)
              v.push_back(j);
          } else {
            s = std::clamp<int64_t>(s, 0, dim - 1);
            e = std::clamp<int64_t>(e, -1, dim - 1);
            for (int64_t j = s; j > e; j += step)
              v.push_back(j);
          }
          sel[size_t(a)] = v;
        }
        const Shape ys = {int64_t(sel[0].size()), int64_t(sel[1].size()),
                          int64_t(sel[2].size())};
        expectShape(y, ys);
        for (int64_t i = 0; i < y.numel(); ++i) {
          const Shape oi = unravel(i, ys);
          const int64_t off =
              (sel[0][size_t(oi[0])] * xs[1] + sel[1][size_t(oi[1])]) * xs[2] +
              sel[2][size_t(oi[2])];
          ASSERT_EQ(at(y, i), at(x, off));
        }
      }
  Owned x = randomTensor(DType::f32, xs, 1);
  Tensor y;
  expectFail(
      slice(ctx, x, vecI64({0}), vecI64({1}), vecI64({0}), vecI64({0}), 12, y),
      "slice");
  expectFail(
      slice(ctx, x, vecI64({0}), vecI64({1}), vecI64({3}), vecI64({1}), 12, y),
      "slice");
  expectFail(slice(ctx, x, vecI64({0, 0}), vecI64({1}), vecI64({0}),
                   vecI64({1}), 12, y),
             "slice");
  expectFail(slice(ctx, x, vecI64({0, 0}), vecI64({1, 1}), vecI64({1, -2}),
                   vecI64({1, 1}), 12, y),
             "slice");
}

TEST_P(OpsTest, Split) {
  Owned x = randomTensor(DType::f32, {4, 7, 3}, 1);
  const int slots[3] = {1, 2, 3};
  Tensor outs[3];
  const int64_t sizes[3] = {2, 0, 5};
  ASSERT_TRUE(split(ctx, x, 1, 3, sizes, slots, outs)) << ctx.error;
  expectShape(outs[0], {4, 2, 3});
  expectShape(outs[1], {4, 0, 3});
  expectShape(outs[2], {4, 5, 3});
  for (int64_t i = 0; i < x.numel(); ++i) {
    const Shape xi = unravel(i, {4, 7, 3});
    if (xi[1] < 2)
      ASSERT_EQ(outs[0].as<float>()[(xi[0] * 2 + xi[1]) * 3 + xi[2]],
                x.p<float>()[i]);
    else
      ASSERT_EQ(outs[2].as<float>()[(xi[0] * 5 + xi[1] - 2) * 3 + xi[2]],
                x.p<float>()[i]);
  }
  // Equal parts, the last one smaller.
  ASSERT_TRUE(split(ctx, x, -2, 3, nullptr, slots, outs));
  expectShape(outs[0], {4, 3, 3});
  expectShape(outs[1], {4, 3, 3});
  expectShape(outs[2], {4, 1, 3});
  EXPECT_EQ(outs[2].as<float>()[0], x.p<float>()[6 * 3]);
  Owned xi = randomTensor(DType::i16, {6}, 2);
  ASSERT_TRUE(split(ctx, xi, 0, 2, nullptr, slots, outs));
  EXPECT_EQ(outs[1].as<int16_t>()[0], xi.p<int16_t>()[3]);
  const int64_t bad[3] = {2, 2, 2};
  expectFail(split(ctx, x, 1, 3, bad, slots, outs), "split");
  expectFail(split(ctx, x, 3, 3, nullptr, slots, outs), "split");
}

TEST_P(OpsTest, Expand) {
  struct Case {
    Shape x;
    std::vector<int64_t> to;
    Shape expect;
  };
  const std::vector<Case> cases = {
      {{3, 1}, {2, 3, 4}, {2, 3, 4}},
      {{2, 1, 4}, {3, 1}, {2, 3, 4}},
      {{}, {5, 2}, {5, 2}},
      {{4}, {1}, {4}},
      {{1, 300}, {500, 1}, {500, 300}},
      {{2, 3}, {2, 3}, {2, 3}},
  };
  uint32_t seed = 2000;
  for (DType t : {DType::f32, DType::i64, DType::b1})
    for (const Case &c : cases) {
      Owned x = randomTensor(t, c.x, seed++, -9, 9);
      Tensor y;
      ASSERT_TRUE(expand(ctx, x, vecI64(c.to), 13, y)) << ctx.error;
      expectShape(y, c.expect);
      for (int64_t i = 0; i < y.numel(); ++i)
        ASSERT_EQ(at(y, i), at(x, bcastOffset(x.t, unravel(i, c.expect))));
    }
  Owned x = randomTensor(DType::f32, {3, 2}, 1);
  Tensor y;
  expectFail(expand(ctx, x, vecI64({4, 3}), 13, y), "expand");
  expectFail(expand(ctx, x, vecI64({-1, 2}), 13, y), "expand");
}

TEST_P(OpsTest, Range) {
  Tensor y;
  Owned s = make<float>(DType::f32, {}, {1.0f});
  Owned l = make<float>(DType::f32, {}, {2.0f});
  Owned d = make<float>(DType::f32, {}, {0.3f});
  ASSERT_TRUE(range(ctx, s, l, d, 14, y)) << ctx.error;
  expectShape(y, {4});
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(y.as<float>()[i], 1.0 + 0.3 * i, 1e-6);
  Owned si = make<int64_t>(DType::i64, {}, {10});
  Owned li = make<int64_t>(DType::i64, {}, {-3});
  Owned di = make<int64_t>(DType::i64, {1}, {-4});
  ASSERT_TRUE(range(ctx, si, li, di, 14, y));
  expectShape(y, {4});
  EXPECT_EQ(std::vector<int64_t>(y.as<int64_t>(), y.as<int64_t>() + 4),
            (std::vector<int64_t>{10, 6, 2, -2}));
  Owned s32 = make<int32_t>(DType::i32, {}, {0});
  Owned l32 = make<int32_t>(DType::i32, {}, {5});
  Owned d32 = make<int32_t>(DType::i32, {}, {1});
  ASSERT_TRUE(range(ctx, s32, l32, d32, 14, y));
  expectShape(y, {5});
  EXPECT_EQ(y.as<int32_t>()[4], 4);
  ASSERT_TRUE(range(ctx, l32, s32, d32, 14, y));
  expectShape(y, {0});
  Owned s64 = make<double>(DType::f64, {}, {-1.0});
  Owned l64 = make<double>(DType::f64, {}, {1.0});
  Owned d64 = make<double>(DType::f64, {}, {0.5});
  ASSERT_TRUE(range(ctx, s64, l64, d64, 14, y));
  expectShape(y, {4});
  EXPECT_EQ(y.as<double>()[3], 0.5);
  Owned z = make<int32_t>(DType::i32, {}, {0});
  expectFail(range(ctx, s32, l32, z, 14, y), "range");
  expectFail(range(ctx, s, l32, d, 14, y), "range");
}

TEST_P(OpsTest, ConstantOfShape) {
  Tensor y;
  Owned v = make<float>(DType::f32, {1}, {2.5f});
  ASSERT_TRUE(constantOfShape(ctx, vecI64({3, 70000}), v, 15, y));
  expectShape(y, {3, 70000});
  EXPECT_EQ(y.as<float>()[0], 2.5f);
  EXPECT_EQ(y.as<float>()[3 * 70000 - 1], 2.5f);
  Owned vi = make<int64_t>(DType::i64, {}, {-7});
  ASSERT_TRUE(constantOfShape(ctx, vecI64({2, 0}), vi, 15, y));
  expectShape(y, {2, 0});
  EXPECT_EQ(y.dtype, DType::i64);
  ASSERT_TRUE(constantOfShape(ctx, vecI64({}), vi, 15, y));
  expectShape(y, {});
  EXPECT_EQ(y.as<int64_t>()[0], -7);
  Owned vb = make<uint8_t>(DType::b1, {1}, {1});
  ASSERT_TRUE(constantOfShape(ctx, vecI64({5}), vb, 15, y));
  EXPECT_EQ(y.as<uint8_t>()[4], 1);
  expectFail(constantOfShape(ctx, vecI64({-1}), v, 15, y), "constant_of_shape");
  Owned two = make<float>(DType::f32, {2}, {1, 2});
  expectFail(constantOfShape(ctx, vecI64({2}), two, 15, y),
             "constant_of_shape");
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

/// Reference N-d convolution (1-3 spatial dims) in double.
std::vector<double> convRef(const Owned &x, const Owned &w, const Owned *b,
                            const std::vector<int64_t> &strides,
                            const std::vector<int64_t> &pads,
                            const std::vector<int64_t> &dil, int64_t group,
                            Shape &ys) {
  const int ns = x.t.rank - 2;
  const int64_t N = x.t.shape[0], C = x.t.shape[1], M = w.t.shape[0];
  const int64_t Cg = C / group, Mg = M / group;
  Shape in(x.t.shape + 2, x.t.shape + x.t.rank),
      k(w.t.shape + 2, w.t.shape + w.t.rank);
  Shape os(static_cast<size_t>(ns));
  for (int d = 0; d < ns; ++d)
    os[size_t(d)] = (in[size_t(d)] + pads[size_t(d)] + pads[size_t(ns + d)] -
                     dil[size_t(d)] * (k[size_t(d)] - 1) - 1) /
                        strides[size_t(d)] +
                    1;
  ys = {N, M};
  ys.insert(ys.end(), os.begin(), os.end());
  int64_t P = 1, KS = 1, S = 1;
  for (int d = 0; d < ns; ++d) {
    P *= os[size_t(d)];
    KS *= k[size_t(d)];
    S *= in[size_t(d)];
  }
  std::vector<double> y(size_t(N * M * P));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t p = 0; p < P; ++p) {
        const Shape op = unravel(p, os);
        double acc = b ? at(*b, m) : 0;
        const int64_t g = m / Mg;
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t kk = 0; kk < KS; ++kk) {
            const Shape kp = unravel(kk, k);
            int64_t off = 0;
            bool inside = true;
            for (int d = 0; d < ns; ++d) {
              const int64_t i = op[size_t(d)] * strides[size_t(d)] -
                                pads[size_t(d)] +
                                kp[size_t(d)] * dil[size_t(d)];
              inside = inside && i >= 0 && i < in[size_t(d)];
              off = off * in[size_t(d)] + i;
            }
            if (!inside)
              continue;
            acc += at(x, (n * C + g * Cg + c) * S + off) *
                   at(w, (m * Cg + c) * KS + kk);
          }
        y[size_t((n * M + m) * P + p)] = acc;
      }
  return y;
}

TEST_P(OpsTest, Conv) {
  struct Case {
    Shape x, w;
    std::vector<int64_t> strides, pads, dil;
    int64_t group;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{2, 3, 11}, {4, 3, 3}, {1}, {1, 1}, {1}, 1, true},
      {{1, 4, 13}, {6, 2, 4}, {2}, {0, 3}, {2}, 2, false},
      {{2, 3, 9, 8}, {5, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true},
      {{1, 4, 10, 7}, {8, 2, 3, 2}, {2, 1}, {0, 1, 2, 0}, {1, 2}, 2, true},
      {{2, 6, 7, 7}, {6, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 6, true},
      {{1, 4, 9, 9}, {8, 1, 3, 3}, {2, 2}, {1, 0, 1, 0}, {1, 1}, 4, false},
      {{2, 16, 5, 6}, {7, 16, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, true},
      {{1, 8, 6, 6}, {40, 8, 1, 1}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 1, true},
      {{1, 2, 5, 6, 4},
       {3, 2, 2, 3, 2},
       {1, 2, 1},
       {1, 0, 1, 0, 1, 1},
       {2, 1, 1},
       1,
       true},
      {{1, 64, 20, 20}, {48, 64, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true},
      // im2col written packed: the last dim strided (its rows split into
      // phases) across GEMM panels and chunks, and strided with dilation
      // and uneven pads in groups.
      {{1, 40, 23, 29}, {20, 40, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1, true},
      {{2, 8, 17, 31}, {12, 4, 3, 3}, {1, 3}, {2, 1, 0, 2}, {2, 2}, 2, true},
      // Stride 2 over rows wide enough for the vector phase split (and an
      // odd tail).
      {{1, 8, 9, 70}, {16, 8, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1, true},
      // Depthwise (rows as axpys, split into stride phases): rows wider
      // than a vector with a tail, stride 3 with dilation 2, pads wider
      // than the kernel (taps that cover no output column), 1-D and 3-D.
      {{2, 3, 6, 37}, {3, 1, 3, 5}, {1, 1}, {1, 2, 1, 2}, {1, 1}, 3, true},
      {{1, 2, 11, 29}, {4, 1, 3, 3}, {3, 3}, {2, 1, 0, 2}, {2, 2}, 2, true},
      {{1, 2, 4, 9}, {2, 1, 2, 3}, {1, 2}, {3, 4, 2, 5}, {1, 2}, 2, false},
      {{2, 5, 19}, {5, 1, 4}, {2}, {1, 2}, {1}, 5, true},
      // Rows of more than 64 outputs (the vector kernel's blocks), and
      // stride 2 over rows wide enough for the vector phase split.
      {{1, 2, 5, 150}, {2, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2, true},
      {{1, 4, 7, 67}, {4, 1, 3, 3}, {2, 2}, {0, 1, 1, 1}, {1, 1}, 4, true},
      {{1, 2, 5, 6, 7},
       {2, 1, 3, 2, 3},
       {2, 1, 2},
       {1, 0, 1, 1, 1, 0},
       {1, 2, 1},
       2,
       true},
      // Depthwise rows of exactly 64 outputs and of 40 and 48 (the vector
      // kernels' last chunk stored in place or through the scratch row).
      {{1, 3, 4, 64}, {3, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 3, true},
      {{1, 2, 3, 40}, {2, 1, 1, 3}, {1, 1}, {0, 1, 0, 1}, {1, 1}, 2, false},
      {{1, 2, 5, 96}, {2, 1, 3, 3}, {1, 2}, {1, 1, 1, 1}, {1, 1}, 2, true},
  };
  // Every kernel ISA (each packs im2col's columns in its own layout).
  for (int isa : availableIsas()) {
    ops::detail::setKernelIsa(isa);
    uint32_t seed = 2100;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case &c = cases[ci];
      // The epilogue's activation: none, ReLU, SiLU or ReLU6, in turn.
      const Activation act = ci % 4 == 1   ? Activation::relu
                             : ci % 4 == 2 ? Activation::silu
                             : ci % 4 == 3 ? Activation::relu6
                                           : Activation::none;
      Owned x = randomTensor(DType::f32, c.x, seed++, -1, 1);
      Owned w = randomTensor(DType::f32, c.w, seed++, -1, 1);
      Owned b = randomTensor(DType::f32, {c.w[0]}, seed++, -1, 1);
      // Every third case with a batch norm folded in (scale, bias, mean,
      // variance > 0.5), called twice: the folded weights are made by the
      // first call and taken from the context's cache by the second.
      const bool withNorm = ci % 3 == 2;
      Owned ns = randomTensor(DType::f32, {c.w[0]}, seed++, -2, 2);
      Owned nb = randomTensor(DType::f32, {c.w[0]}, seed++, -1, 1);
      Owned nm = randomTensor(DType::f32, {c.w[0]}, seed++, -1, 1);
      Owned nv = randomTensor(DType::f32, {c.w[0]}, seed++, 0.5, 2);
      const ConvNorm norm{&ns.t, &nb.t, &nm.t, &nv.t, 1e-3f};
      Shape ys;
      std::vector<double> ref = convRef(x, w, c.bias ? &b : nullptr, c.strides,
                                        c.pads, c.dil, c.group, ys);
      const int64_t planeSize = int64_t(ref.size()) / (ys[0] * ys[1]);
      for (size_t i = 0; i < ref.size(); ++i) {
        const size_t m = size_t(int64_t(i) / planeSize % ys[1]);
        if (withNorm)
          ref[i] = (ref[i] - nm.t.as<float>()[m]) * ns.t.as<float>()[m] /
                       std::sqrt(double(nv.t.as<float>()[m]) + 1e-3) +
                   nb.t.as<float>()[m];
        ref[i] = actRef(act, ref[i]);
      }
      double kmag = 1;
      for (size_t d = 1; d < c.w.size(); ++d)
        kmag *= double(c.w[d]);
      for (int call = 0; call < (withNorm ? 2 : 1); ++call) {
        Tensor y;
        ASSERT_TRUE(conv(ctx, x, w, c.bias ? &b.t : nullptr, c.strides.data(),
                         c.pads.data(), c.dil.data(), c.group,
                         withNorm ? &norm : nullptr, act, 1, y))
            << ctx.error;
        expectShape(y, ys);
        for (size_t i = 0; i < ref.size(); ++i)
          ASSERT_NEAR(y.as<float>()[i], ref[i],
                      1e-5 * kmag * (withNorm ? 4 : 1))
              << "case " << ci << " at " << i << " with kernel ISA " << isa
              << (withNorm ? ", batch norm folded, call " + std::to_string(call)
                           : std::string());
      }
    }
  }
  ops::detail::setKernelIsa(0);
  // Defaults (null strides/pads/dilations).
  Owned x = randomTensor(DType::f32, {1, 2, 5, 5}, 1);
  Owned w = randomTensor(DType::f32, {3, 2, 2, 2}, 2);
  Tensor y;
  ASSERT_TRUE(conv(ctx, x, w, nullptr, nullptr, nullptr, nullptr, 1, nullptr,
                   Activation::none, 1, y));
  Shape ys;
  const std::vector<double> ref =
      convRef(x, w, nullptr, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, ys);
  expectShape(y, ys);
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(y.as<float>()[i], ref[i], 1e-5);
  // Errors.
  Owned w3 = randomTensor(DType::f32, {3, 3, 2, 2}, 2);
  expectFail(conv(ctx, x, w3, nullptr, nullptr, nullptr, nullptr, 1, nullptr,
                  Activation::none, 1, y),
             "conv");
  Owned wBig = randomTensor(DType::f32, {3, 2, 7, 2}, 2);
  expectFail(conv(ctx, x, wBig, nullptr, nullptr, nullptr, nullptr, 1, nullptr,
                  Activation::none, 1, y),
             "conv");
  expectFail(conv(ctx, x, w, nullptr, nullptr, nullptr, nullptr, 3, nullptr,
                  Activation::none, 1, y),
             "conv");
  const int64_t zeroStride[2] = {0, 1};
  expectFail(conv(ctx, x, w, nullptr, zeroStride, nullptr, nullptr, 1, nullptr,
                  Activation::none, 1, y),
             "conv");
  // A norm whose parameters do not have one element per output channel.
  Owned four = randomTensor(DType::f32, {4}, 3);
  Owned three = randomTensor(DType::f32, {3}, 4);
  const ConvNorm badNorm{&three.t, &three.t, &four.t, &three.t, 1e-5f};
  expectFail(conv(ctx, x, w, nullptr, nullptr, nullptr, nullptr, 1, &badNorm,
                  Activation::none, 1, y),
             "conv (batch norm)");
}

TEST_P(OpsTest, Pool) {
  struct Case {
    Shape x;
    std::vector<int64_t> kernel, strides, pads;
  };
  const std::vector<Case> cases = {
      {{2, 3, 10}, {3}, {2}, {1, 1}},
      {{1, 2, 7, 9}, {3, 2}, {2, 2}, {1, 0, 1, 1}},
      {{2, 2, 8, 8}, {2, 2}, {2, 2}, {0, 0, 0, 0}},
      {{1, 3, 5, 6, 4}, {2, 3, 2}, {1, 2, 2}, {0, 1, 1, 1, 1, 0}},
      {{1, 1, 5, 5}, {3, 3}, {1, 1}, {2, 2, 2, 2}},
  };
  uint32_t seed = 2200;
  for (DType t : {DType::f32, DType::f64})
    for (const Case &c : cases)
      for (Pool kind : {Pool::max, Pool::avg})
        for (bool includePad : {false, true})
          for (bool global : {false, true}) {
            Owned x = randomTensor(t, c.x, seed++, -5, 5);
            Tensor y;
            ASSERT_TRUE(pool(ctx, kind, x, global ? nullptr : c.kernel.data(),
                             c.strides.data(), c.pads.data(), includePad, 2, y))
                << ctx.error;
            const int ns = int(c.x.size()) - 2;
            Shape in(c.x.begin() + 2, c.x.end());
            Shape k = global ? in : Shape(c.kernel);
            Shape st = global ? Shape(size_t(ns), 1) : Shape(c.strides);
            Shape pd = global ? Shape(size_t(2 * ns), 0) : Shape(c.pads);
            Shape os(static_cast<size_t>(ns));
            for (int d = 0; d < ns; ++d)
              os[size_t(d)] = (in[size_t(d)] + pd[size_t(d)] +
                               pd[size_t(ns + d)] - k[size_t(d)]) /
                                  st[size_t(d)] +
                              1;
            Shape ys = {c.x[0], c.x[1]};
            ys.insert(ys.end(), os.begin(), os.end());
            expectShape(y, ys);
            int64_t P = 1, S = 1, KS = 1;
            for (int d = 0; d < ns; ++d) {
              P *= os[size_t(d)];
              S *= in[size_t(d)];
              KS *= k[size_t(d)];
            }
            for (int64_t plane = 0; plane < c.x[0] * c.x[1]; ++plane)
              for (int64_t p = 0; p < P; ++p) {
                const Shape op = unravel(p, os);
                double mx = -INFINITY, sum = 0;
                int64_t cnt = 0;
                for (int64_t kk = 0; kk < KS; ++kk) {
                  const Shape kp = unravel(kk, k);
                  int64_t off = 0;
                  bool inside = true;
                  for (int d = 0; d < ns; ++d) {
                    const int64_t i = op[size_t(d)] * st[size_t(d)] -
                                      pd[size_t(d)] + kp[size_t(d)];
                    inside = inside && i >= 0 && i < in[size_t(d)];
                    off = off * in[size_t(d)] + i;
                  }
                  if (!inside)
                    continue;
                  const double v = at(x, plane * S + off);
                  mx = std::max(mx, v);
                  sum += v;
                  ++cnt;
                }
                const double ref = kind == Pool::max
                                       ? mx
                                       : sum / double(includePad ? KS : cnt);
                ASSERT_NEAR(at(y, plane * P + p), ref, 10 * tolFor(t, ref))
                    << "plane " << plane << " p " << p;
              }
          }
  Owned x = randomTensor(DType::f32, {1, 1, 4}, 1);
  const int64_t k5[1] = {6}, s1[1] = {1}, p0[2] = {0, 0};
  Tensor y;
  expectFail(pool(ctx, Pool::max, x, k5, s1, p0, false, 2, y), "max_pool");
  Owned x2 = randomTensor(DType::f32, {4, 4}, 1);
  expectFail(pool(ctx, Pool::avg, x2, nullptr, nullptr, nullptr, false, 2, y),
             "average_pool");
}

//===----------------------------------------------------------------------===//
// Robustness
//===----------------------------------------------------------------------===//

TEST_P(OpsTest, InvalidTensorsFailCleanly) {
  Tensor bad;
  bad.rank = 9;
  Tensor out;
  expectFail(unary(ctx, Unary::relu, bad, 0, out), "relu");
  Tensor neg;
  neg.rank = 2;
  neg.shape[0] = -1;
  neg.shape[1] = 3;
  Owned ok = randomTensor(DType::f32, {3}, 1);
  expectFail(binary(ctx, Binary::add, neg, ok, 0, out), "add");
  Tensor nodata;
  nodata.rank = 1;
  nodata.shape[0] = 4;
  expectFail(softmax(ctx, nodata, 0, 0, out), "softmax");
  expectFail(transpose(ctx, bad, nullptr, 0, out), "transpose");
}

//===----------------------------------------------------------------------===//
// Profiling
//===----------------------------------------------------------------------===//

// Tile counts over the full blocks of 8 / 16 / 32 consecutive rows of each
// call, against a direct count. Neuron n of a 40-row call fires on the rows
// in `on[n]` (rows 32-39 are a tail of a 16- and a 32-row block, left out);
// a second call of 5 rows has no full block.
TEST(Profiling, TileCountsMatchConsecutiveBlocks) {
  static const char *const sites[] = {"relu"};
  ModelDesc desc = kDesc;
  desc.numProfileSites = 1;
  desc.profileSites = sites;
  Context ctx(desc, nullptr, 1);
  const std::vector<std::vector<int>> on = {
      {}, {0}, {7, 8}, {15, 16}, {31}, {0, 9, 17, 33, 39}};
  const int64_t N = int64_t(on.size());
  auto call = [&](int64_t rows, const std::vector<std::vector<int>> &fire) {
    std::vector<float> x(size_t(rows * N), 0.0f);
    for (int64_t n = 0; n < N; ++n)
      for (int r : fire[size_t(n)])
        if (r < rows)
          x[size_t(r * N + n)] = 1.0f;
    Tensor t{x.data(), DType::f32, 2, {rows, N}};
    ASSERT_TRUE(ops::profileCount(ctx, t, 0)) << ctx.error;
  };
  call(40, on);
  call(5, {{}, {}, {}, {}, {}, {4}});
  const Context::Tiles &t = ctx.profileTiles[0];
  EXPECT_EQ(t.blocks[0], 5);
  EXPECT_EQ(t.blocks[1], 2);
  EXPECT_EQ(t.blocks[2], 1);
  ASSERT_EQ(t.counts.size(), size_t(3 * N));
  for (int i = 0; i < 3; ++i) {
    const int size = int(Context::kProfileTileRows[i]);
    for (int64_t n = 0; n < N; ++n) {
      std::set<int> blocks;
      for (int r : on[size_t(n)])
        if (r / size < 40 / size)
          blocks.insert(r / size);
      EXPECT_EQ(t.counts[size_t(i * N + n)], blocks.size())
          << "tile rows " << size << ", neuron " << n;
    }
  }
  EXPECT_EQ(ctx.profileTokens[0], 45);
}

INSTANTIATE_TEST_SUITE_P(Threads, OpsTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int> &info) {
                           return std::to_string(info.param) + "Threads";
                         });

} // namespace
