//===- Elementwise.cpp - unary, binary, compare, where, cast ----*- C++ -*-===//
//
// Part of the sparsec project.
//
// Elementwise ops with numpy broadcasting over every dtype. Operands are
// iterated through a BroadcastPlan: size-1 dims are dropped and contiguous
// dims merged, so equal shapes become one flat loop, a scalar operand a
// stride-0 loop and a row ([N] against [..., N]) a loop over rows with unit
// inner strides; anything else is walked as an N-d strided view. Work is
// split over ctx.pool by output element ranges.
//
// f16 computes in f32. Integer arithmetic wraps (two's complement) instead
// of overflowing.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include <algorithm>

namespace sparsec::rt::ops {

using namespace detail;

namespace {

const char *unaryName(Unary op) {
  switch (op) {
  case Unary::relu:
    return "relu";
  case Unary::gelu:
    return "gelu";
  case Unary::gelu_tanh:
    return "gelu_tanh";
  case Unary::silu:
    return "silu";
  case Unary::sigmoid:
    return "sigmoid";
  case Unary::tanh:
    return "tanh";
  case Unary::exp:
    return "exp";
  case Unary::log:
    return "log";
  case Unary::erf:
    return "erf";
  case Unary::sqrt:
    return "sqrt";
  case Unary::reciprocal:
    return "reciprocal";
  case Unary::abs:
    return "abs";
  case Unary::neg:
    return "neg";
  case Unary::logical_not:
    return "logical_not";
  case Unary::sin:
    return "sin";
  case Unary::cos:
    return "cos";
  }
  return "unary";
}

const char *binaryName(Binary op) {
  switch (op) {
  case Binary::add:
    return "add";
  case Binary::sub:
    return "sub";
  case Binary::mul:
    return "mul";
  case Binary::div:
    return "div";
  case Binary::pow:
    return "pow";
  case Binary::max:
    return "max";
  case Binary::min:
    return "min";
  case Binary::logical_and:
    return "logical_and";
  case Binary::logical_or:
    return "logical_or";
  }
  return "binary";
}

const char *compareName(Compare op) {
  switch (op) {
  case Compare::eq:
    return "equal";
  case Compare::lt:
    return "less";
  case Compare::le:
    return "less_equal";
  case Compare::gt:
    return "greater";
  case Compare::ge:
    return "greater_equal";
  }
  return "compare";
}

//===----------------------------------------------------------------------===//
// Wrapping integer arithmetic
//===----------------------------------------------------------------------===//

/// The unsigned type integer arithmetic on T is done in (at least unsigned
/// int, so that small types do not promote to signed int).
template <typename T>
using WideUnsigned = std::conditional_t<(sizeof(T) < sizeof(unsigned)),
                                        unsigned, std::make_unsigned_t<T>>;

template <typename T> T addOf(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return T(WideUnsigned<T>(a) + WideUnsigned<T>(b));
  else
    return a + b;
}
template <typename T> T subOf(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return T(WideUnsigned<T>(a) - WideUnsigned<T>(b));
  else
    return a - b;
}
template <typename T> T mulOf(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return T(WideUnsigned<T>(a) * WideUnsigned<T>(b));
  else
    return a * b;
}
/// Integer division truncates toward zero; b != 0 is checked beforehand.
template <typename T> T divOf(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    if (b == T(-1)) // min / -1 overflows: wrap like the other ops
      return T(WideUnsigned<T>(0) - WideUnsigned<T>(a));
    return T(a / b);
  } else {
    return T(a / b);
  }
}
template <typename T> T negOf(T a) {
  if constexpr (std::is_integral_v<T>)
    return T(WideUnsigned<T>(0) - WideUnsigned<T>(a));
  else
    return -a;
}
template <typename T> T absOf(T a) {
  if constexpr (std::is_unsigned_v<T>)
    return a;
  else
    return a < T(0) ? negOf(a) : a;
}

//===----------------------------------------------------------------------===//
// Drivers
//===----------------------------------------------------------------------===//

/// out[i] = f(a[i]) over a contiguous range, in parallel.
template <typename TI, typename TO, typename F>
void runUnary(Context &ctx, const TI *in, TO *out, int64_t n, int64_t grain,
              F f) {
  parallelFor(ctx, n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      out[i] = f(in[i]);
  });
}

/// out[i] = f(a[.], b[.]) with a and b broadcast to out's shape.
template <typename TA, typename TB, typename TO, typename F>
void runBinary(Context &ctx, const Tensor &a, const Tensor &b,
               const Tensor &out, int64_t grain, F f) {
  const Tensor *ins[2] = {&a, &b};
  const BroadcastPlan plan = makeBroadcastPlan(out.rank, out.shape, 2, ins);
  const TA *pa = a.as<TA>();
  const TB *pb = b.as<TB>();
  TO *po = out.as<TO>();
  parallelFor(ctx, plan.total, grain, [&](int64_t begin, int64_t end) {
    forEachSpan(plan, begin, end,
                [&](int64_t pos, const int64_t *off, int64_t len,
                    const int64_t *inner) {
                  const TA *x = pa + off[0];
                  const TB *y = pb + off[1];
                  TO *o = po + pos;
                  const int64_t sa = inner[0], sb = inner[1];
                  if (sa == 1 && sb == 1) {
                    for (int64_t i = 0; i < len; ++i)
                      o[i] = f(x[i], y[i]);
                  } else if (sa == 1 && sb == 0) {
                    const TB yv = y[0];
                    for (int64_t i = 0; i < len; ++i)
                      o[i] = f(x[i], yv);
                  } else if (sa == 0 && sb == 1) {
                    const TA xv = x[0];
                    for (int64_t i = 0; i < len; ++i)
                      o[i] = f(xv, y[i]);
                  } else {
                    for (int64_t i = 0; i < len; ++i)
                      o[i] = f(x[i * sa], y[i * sb]);
                  }
                });
  });
}

/// runBinary for float16 a, b and out, with g computing in float32: spans
/// are widened and narrowed a chunk at a time (F16C where available) rather
/// than converted an element at a time. The same values as runBinary with
/// the conversions around g.
template <typename G>
void runBinaryHalf(Context &ctx, const Tensor &a, const Tensor &b,
                   const Tensor &out, int64_t grain, G g) {
  const Tensor *ins[2] = {&a, &b};
  const BroadcastPlan plan = makeBroadcastPlan(out.rank, out.shape, 2, ins);
  const Half *pa = a.as<Half>();
  const Half *pb = b.as<Half>();
  Half *po = out.as<Half>();
  // A span's operand as float32 (contiguous, broadcast or strided).
  auto widen = [](const Half *p, int64_t stride, int64_t n, float *dst) {
    if (stride == 1) {
      widenRow(p, dst, n);
    } else if (stride == 0) {
      std::fill(dst, dst + n, halfToFloat(p[0].bits));
    } else {
      for (int64_t i = 0; i < n; ++i)
        dst[i] = halfToFloat(p[i * stride].bits);
    }
  };
  parallelFor(ctx, plan.total, grain, [&](int64_t begin, int64_t end) {
    forEachSpan(plan, begin, end,
                [&](int64_t pos, const int64_t *off, int64_t len,
                    const int64_t *inner) {
                  constexpr int64_t kChunk = 256;
                  float xs[kChunk], ys[kChunk], os[kChunk];
                  for (int64_t c = 0; c < len; c += kChunk) {
                    const int64_t n = std::min(kChunk, len - c);
                    widen(pa + off[0] + c * inner[0], inner[0], n, xs);
                    widen(pb + off[1] + c * inner[1], inner[1], n, ys);
                    for (int64_t i = 0; i < n; ++i)
                      os[i] = g(xs[i], ys[i]);
                    narrowRow(os, po + pos + c, n);
                  }
                });
  });
}

/// Result shape of broadcasting a and b; fails naming the op.
bool broadcastOrFail(Context &ctx, const char *op, const Tensor &a,
                     const Tensor &b, int &rank, int64_t *shape) {
  if (!broadcastShapes(a.rank, a.shape, b.rank, b.shape, rank, shape))
    return ctx.fail(std::string(op) + ": shapes " + a.describe() + " and " +
                    b.describe() + " do not broadcast");
  return true;
}

//===----------------------------------------------------------------------===//
// Conversion
//===----------------------------------------------------------------------===//

/// Converts one element between storage types (b1 handled by the caller
/// through `toBool` / `fromBool`).
template <typename From, typename To, bool fromBool, bool toBool>
To convertElement(From v) {
  if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat>) {
    float f = Arith<From>::load(v);
    return convertElement<float, To, false, toBool>(f);
  } else if constexpr (toBool && std::is_same_v<To, Bool8>) {
    return To(v != From(0) ? 1 : 0);
  } else if constexpr (fromBool) {
    return convertElement<int, To, false, false>(v != From(0) ? 1 : 0);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat>) {
    return Arith<To>::store(float(v));
  } else if constexpr (std::is_floating_point_v<From> &&
                       std::is_integral_v<To>) {
    // Truncate toward zero; NaN gives 0, out-of-range values saturate,
    // negative values into an unsigned type wrap (as the int64 would).
    if (v != v)
      return To(0);
    From t = std::trunc(v);
    if constexpr (std::is_unsigned_v<To>) {
      if (t < From(0)) {
        if (t <= From(-9223372036854775807.0))
          return To(uint64_t(1) << 63);
        return To(uint64_t(int64_t(t)));
      }
    }
    // Compare in From against the largest To that is exactly
    // representable: 2^bits (exclusive) for the upper bound.
    const From hi = From(std::numeric_limits<To>::max()) + From(1);
    const From lo = From(std::numeric_limits<To>::min());
    if (t >= hi)
      return std::numeric_limits<To>::max();
    if (t <= lo)
      return std::numeric_limits<To>::min();
    return To(t);
  } else {
    return To(v);
  }
}

template <typename From, typename To>
void castTyped(Context &ctx, const Tensor &x, DType to, Tensor &out) {
  const From *in = x.as<From>();
  To *o = out.as<To>();
  const bool fromBool = x.dtype == DType::b1, toBool = to == DType::b1;
  const int64_t n = x.numel();
  if constexpr (std::is_same_v<From, Half> && std::is_same_v<To, float>) {
    parallelFor(ctx, n, kGrainCheap, [&](int64_t b, int64_t e) {
      widenRow(in + b, o + b, e - b);
    });
    return;
  } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, Half>) {
    parallelFor(ctx, n, kGrainCheap, [&](int64_t b, int64_t e) {
      narrowRow(in + b, o + b, e - b);
    });
    return;
  }
  if (toBool)
    runUnary(ctx, in, o, n, kGrainCheap, convertElement<From, To, false, true>);
  else if (fromBool)
    runUnary(ctx, in, o, n, kGrainCheap, convertElement<From, To, true, false>);
  else
    runUnary(ctx, in, o, n, kGrainCheap,
             convertElement<From, To, false, false>);
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

template <typename C> C unaryFloat(Unary op, C x) {
  switch (op) {
  case Unary::relu:
    return reluOf(x);
  case Unary::gelu:
    return geluOf(x);
  case Unary::gelu_tanh:
    return geluTanhOf(x);
  case Unary::silu:
    return siluOf(x);
  case Unary::sigmoid:
    return sigmoidOf(x);
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
    return C(1) / x;
  case Unary::abs:
    return std::fabs(x);
  case Unary::neg:
    return -x;
  case Unary::sin:
    return std::sin(x);
  case Unary::cos:
    return std::cos(x);
  case Unary::logical_not:
    break;
  }
  return x;
}

template <typename T, Unary op>
void unaryFloatTyped(Context &ctx, const T *in, T *out, int64_t n) {
  using A = Arith<T>;
  const int64_t grain = (op == Unary::relu || op == Unary::abs ||
                         op == Unary::neg || op == Unary::reciprocal)
                            ? kGrainCheap
                            : kGrainHeavy;
  if constexpr (std::is_same_v<T, Half>) {
    // A chunk at a time through float32 (F16C where available).
    parallelFor(ctx, n, grain, [&](int64_t b, int64_t e) {
      constexpr int64_t kChunk = 256;
      float buf[kChunk];
      for (int64_t c = b; c < e; c += kChunk) {
        const int64_t m = std::min(kChunk, e - c);
        widenRow(in + c, buf, m);
        for (int64_t i = 0; i < m; ++i)
          buf[i] = unaryFloat(op, buf[i]);
        narrowRow(buf, out + c, m);
      }
    });
  } else {
    runUnary(ctx, in, out, n, grain,
             [](T v) { return A::store(unaryFloat(op, A::load(v))); });
  }
}

template <typename T>
void unaryFloatDispatch(Context &ctx, Unary op, const T *in, T *out,
                        int64_t n) {
  switch (op) {
#define SPARSEC_RT_CASE(OP)                                                    \
  case Unary::OP:                                                              \
    return unaryFloatTyped<T, Unary::OP>(ctx, in, out, n);
    SPARSEC_RT_CASE(relu)
    SPARSEC_RT_CASE(gelu)
    SPARSEC_RT_CASE(gelu_tanh)
    SPARSEC_RT_CASE(silu)
    SPARSEC_RT_CASE(sigmoid)
    SPARSEC_RT_CASE(tanh)
    SPARSEC_RT_CASE(exp)
    SPARSEC_RT_CASE(log)
    SPARSEC_RT_CASE(erf)
    SPARSEC_RT_CASE(sqrt)
    SPARSEC_RT_CASE(reciprocal)
    SPARSEC_RT_CASE(abs)
    SPARSEC_RT_CASE(neg)
    SPARSEC_RT_CASE(sin)
    SPARSEC_RT_CASE(cos)
#undef SPARSEC_RT_CASE
  case Unary::logical_not:
    break;
  }
}

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

template <typename T, Binary op>
void binaryTyped(Context &ctx, const Tensor &a, const Tensor &b,
                 const Tensor &out) {
  using A = Arith<T>;
  using C = typename A::type;
  const int64_t grain = op == Binary::pow ? kGrainHeavy : kGrainCheap;
  // The op in the arithmetic type.
  auto apply = [](C u, C v) -> C {
    if constexpr (op == Binary::add)
      return addOf(u, v);
    else if constexpr (op == Binary::sub)
      return subOf(u, v);
    else if constexpr (op == Binary::mul)
      return mulOf(u, v);
    else if constexpr (op == Binary::div)
      return divOf(u, v);
    else if constexpr (op == Binary::pow && std::is_integral_v<C>) {
      // Integer power (ONNX Pow on integer tensors): exact for results that
      // fit, computed in double and rounded.
      return C(std::nearbyint(std::pow(double(u), double(v))));
    } else if constexpr (op == Binary::pow)
      return C(std::pow(u, v));
    else if constexpr (op == Binary::max)
      return maxOf(u, v);
    else if constexpr (op == Binary::min)
      return minOf(u, v);
    else if constexpr (op == Binary::logical_and)
      return C((u != C(0) && v != C(0)) ? 1 : 0);
    else
      return C((u != C(0) || v != C(0)) ? 1 : 0);
  };
  if constexpr (std::is_same_v<T, Half>)
    runBinaryHalf(ctx, a, b, out, grain, apply);
  else
    runBinary<T, T, T>(ctx, a, b, out, grain, [apply](T x, T y) {
      return A::store(apply(A::load(x), A::load(y)));
    });
}

template <typename T>
void binaryDispatch(Context &ctx, Binary op, const Tensor &a, const Tensor &b,
                    const Tensor &out) {
  switch (op) {
#define SPARSEC_RT_CASE(OP)                                                    \
  case Binary::OP:                                                             \
    return binaryTyped<T, Binary::OP>(ctx, a, b, out);
    SPARSEC_RT_CASE(add)
    SPARSEC_RT_CASE(sub)
    SPARSEC_RT_CASE(mul)
    SPARSEC_RT_CASE(div)
    SPARSEC_RT_CASE(max)
    SPARSEC_RT_CASE(min)
    SPARSEC_RT_CASE(logical_and)
    SPARSEC_RT_CASE(logical_or)
#undef SPARSEC_RT_CASE
  case Binary::pow:
    return binaryTyped<T, Binary::pow>(ctx, a, b, out);
  }
}

template <typename T, Compare op>
void compareTyped(Context &ctx, const Tensor &a, const Tensor &b,
                  const Tensor &out) {
  using A = Arith<T>;
  runBinary<T, T, Bool8>(ctx, a, b, out, kGrainCheap, [](T x, T y) {
    const auto u = A::load(x), v = A::load(y);
    bool r;
    if constexpr (op == Compare::eq)
      r = u == v;
    else if constexpr (op == Compare::lt)
      r = u < v;
    else if constexpr (op == Compare::le)
      r = u <= v;
    else if constexpr (op == Compare::gt)
      r = u > v;
    else
      r = u >= v;
    return Bool8(r ? 1 : 0);
  });
}

} // namespace

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

bool unary(Context &ctx, Unary op, const Tensor &x, int outSlot, Tensor &out) {
  const char *name = unaryName(op);
  if (!checkTensor(ctx, name, "input", x))
    return false;
  const DType t = x.dtype;
  bool ok;
  if (op == Unary::logical_not)
    ok = t == DType::b1;
  else if (op == Unary::abs)
    ok = isFloat(t) || isInt(t);
  else if (op == Unary::neg)
    ok = isFloat(t) || isSignedInt(t);
  else
    ok = isFloat(t);
  if (!ok)
    return ctx.fail(std::string(name) + ": unsupported dtype " + dtypeName(t) +
                    " (input " + x.describe() + ")");
  Tensor r;
  if (!allocateOut(ctx, name, outSlot, r, t, x.rank, x.shape))
    return false;
  const int64_t n = x.numel();
  dispatchType(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *in = x.as<T>();
    T *o = r.as<T>();
    if constexpr (std::is_integral_v<T>) {
      if (op == Unary::logical_not)
        runUnary(ctx, in, o, n, kGrainCheap,
                 [](T v) { return T(v == T(0) ? 1 : 0); });
      else if (op == Unary::abs)
        runUnary(ctx, in, o, n, kGrainCheap, [](T v) { return absOf(v); });
      else
        runUnary(ctx, in, o, n, kGrainCheap, [](T v) { return negOf(v); });
    } else {
      unaryFloatDispatch(ctx, op, in, o, n);
    }
  });
  out = r;
  return true;
}

bool binary(Context &ctx, Binary op, const Tensor &a, const Tensor &b,
            int outSlot, Tensor &out) {
  const char *name = binaryName(op);
  if (!checkTensor(ctx, name, "a", a) || !checkTensor(ctx, name, "b", b))
    return false;
  const DType t = a.dtype;
  const bool mixedPow = op == Binary::pow && (isFloat(t) || isInt(t)) &&
                        b.dtype != t && (isFloat(b.dtype) || isInt(b.dtype));
  if (a.dtype != b.dtype && !mixedPow)
    return ctx.fail(std::string(name) + ": operand dtypes differ: " +
                    a.describe() + " and " + b.describe());
  bool ok;
  if (op == Binary::logical_and || op == Binary::logical_or)
    ok = t == DType::b1;
  else
    ok = isFloat(t) || isInt(t);
  if (!ok)
    return ctx.fail(std::string(name) + ": unsupported dtype " + dtypeName(t) +
                    " (" + a.describe() + " and " + b.describe() + ")");
  int rank;
  int64_t shape[kMaxRank];
  if (!broadcastOrFail(ctx, name, a, b, rank, shape))
    return false;
  if (op == Binary::div && isInt(t)) {
    const int64_t n = b.numel();
    bool zero = dispatchType(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T>) {
        const T *p = b.as<T>();
        for (int64_t i = 0; i < n; ++i)
          if (p[i] == T(0))
            return true;
      }
      return false;
    });
    if (zero && product(shape, 0, rank) != 0)
      return ctx.fail("div: integer division by zero (" + a.describe() + " / " +
                      b.describe() + ")");
  }
  // pow with an exponent of another dtype: convert the exponent first.
  std::vector<unsigned char> converted;
  Tensor bb = b;
  if (mixedPow) {
    bb.dtype = t;
    converted.resize(size_t(b.numel()) * dtypeSize(t) + 1);
    bb.data = converted.data();
    dispatchType(b.dtype, [&](auto fromTag) {
      using From = typename decltype(fromTag)::type;
      dispatchType(t, [&](auto toTag) {
        using To = typename decltype(toTag)::type;
        const From *src = b.as<From>();
        To *dst = bb.as<To>();
        const int64_t n = b.numel();
        for (int64_t i = 0; i < n; ++i)
          dst[i] = b.dtype == DType::b1
                       ? convertElement<From, To, true, false>(src[i])
                       : convertElement<From, To, false, false>(src[i]);
      });
    });
  }
  Tensor r;
  if (!allocateOut(ctx, name, outSlot, r, t, rank, shape))
    return false;
  if (r.numel() != 0)
    dispatchType(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      binaryDispatch<T>(ctx, op, a, bb, r);
    });
  out = r;
  return true;
}

bool compare(Context &ctx, Compare op, const Tensor &a, const Tensor &b,
             int outSlot, Tensor &out) {
  const char *name = compareName(op);
  if (!checkTensor(ctx, name, "a", a) || !checkTensor(ctx, name, "b", b))
    return false;
  if (a.dtype != b.dtype)
    return ctx.fail(std::string(name) + ": operand dtypes differ: " +
                    a.describe() + " and " + b.describe());
  int rank;
  int64_t shape[kMaxRank];
  if (!broadcastOrFail(ctx, name, a, b, rank, shape))
    return false;
  Tensor r;
  if (!allocateOut(ctx, name, outSlot, r, DType::b1, rank, shape))
    return false;
  if (r.numel() != 0)
    dispatchType(a.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      switch (op) {
      case Compare::eq:
        return compareTyped<T, Compare::eq>(ctx, a, b, r);
      case Compare::lt:
        return compareTyped<T, Compare::lt>(ctx, a, b, r);
      case Compare::le:
        return compareTyped<T, Compare::le>(ctx, a, b, r);
      case Compare::gt:
        return compareTyped<T, Compare::gt>(ctx, a, b, r);
      case Compare::ge:
        return compareTyped<T, Compare::ge>(ctx, a, b, r);
      }
    });
  out = r;
  return true;
}

bool where(Context &ctx, const Tensor &cond, const Tensor &x, const Tensor &y,
           int outSlot, Tensor &out) {
  if (!checkTensor(ctx, "where", "condition", cond) ||
      !checkTensor(ctx, "where", "x", x) || !checkTensor(ctx, "where", "y", y))
    return false;
  if (cond.dtype != DType::b1)
    return ctx.fail("where: condition must be bool, got " + cond.describe());
  if (x.dtype != y.dtype)
    return ctx.fail("where: x and y dtypes differ: " + x.describe() + " and " +
                    y.describe());
  int r1, rank;
  int64_t s1[kMaxRank], shape[kMaxRank];
  if (!broadcastShapes(cond.rank, cond.shape, x.rank, x.shape, r1, s1) ||
      !broadcastShapes(r1, s1, y.rank, y.shape, rank, shape))
    return ctx.fail("where: shapes " + cond.describe() + ", " + x.describe() +
                    " and " + y.describe() + " do not broadcast");
  Tensor r;
  if (!allocateOut(ctx, "where", outSlot, r, x.dtype, rank, shape))
    return false;
  const Tensor *ins[3] = {&cond, &x, &y};
  const BroadcastPlan plan = makeBroadcastPlan(rank, shape, 3, ins);
  dispatchSize(dtypeSize(x.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Bool8 *pc = cond.as<Bool8>();
    const T *px = x.as<T>(), *py = y.as<T>();
    T *po = r.as<T>();
    parallelFor(ctx, plan.total, kGrainCheap, [&](int64_t begin, int64_t end) {
      forEachSpan(plan, begin, end,
                  [&](int64_t pos, const int64_t *off, int64_t len,
                      const int64_t *inner) {
                    const Bool8 *c = pc + off[0];
                    const T *a = px + off[1], *b = py + off[2];
                    T *o = po + pos;
                    for (int64_t i = 0; i < len; ++i)
                      o[i] =
                          c[i * inner[0]] ? a[i * inner[1]] : b[i * inner[2]];
                  });
    });
  });
  out = r;
  return true;
}

bool cast(Context &ctx, const Tensor &x, DType to, int outSlot, Tensor &out) {
  if (!checkTensor(ctx, "cast", "input", x))
    return false;
  if (static_cast<unsigned>(to) > static_cast<unsigned>(DType::b1))
    return ctx.fail("cast: invalid target dtype " +
                    std::to_string(static_cast<unsigned>(to)));
  Tensor r;
  if (!allocateOut(ctx, "cast", outSlot, r, to, x.rank, x.shape))
    return false;
  if (x.dtype == to) {
    if (r.bytes() && r.data != x.data)
      std::memcpy(r.data, x.data, r.bytes());
    out = r;
    return true;
  }
  dispatchType(x.dtype, [&](auto fromTag) {
    using From = typename decltype(fromTag)::type;
    dispatchType(to, [&](auto toTag) {
      using To = typename decltype(toTag)::type;
      castTyped<From, To>(ctx, x, to, r);
    });
  });
  out = r;
  return true;
}

} // namespace sparsec::rt::ops
