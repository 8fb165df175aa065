//===- Rotary.cpp - rotate-half rotary position embedding -------*- C++ -*-===//
//
// Part of the sparsec project.
//
// One pass over x per row of its last dimension: the rotation reads both
// halves of the row and the broadcast cos/sin row, so the six elementwise
// ops it replaces (two slices, neg, concat, two products, a sum) and their
// four intermediate tensors are gone. Float16 rows are widened, rotated in
// float32 and narrowed once (the unfused ops round after each op).
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include <algorithm>
#include <vector>

namespace sparsec::rt::ops {

using namespace detail;

namespace {

/// y = x * c + rotate_half(x) * s over one row of D = 2h values; c and s
/// advance by cs (1, or 0 for a broadcast last dim).
template <typename C>
void rotateRow(const C *x, const C *c, const C *s, int64_t cs, C *y,
               int64_t h) {
  for (int64_t i = 0; i < h; ++i) {
    const C lo = x[i], hi = x[i + h];
    y[i] = lo * c[i * cs] - hi * s[i * cs];
    y[i + h] = hi * c[(i + h) * cs] + lo * s[(i + h) * cs];
  }
}

} // namespace

bool detail::rotaryStrides(Context &ctx, const Tensor &x, const Tensor &cos,
                           const Tensor &sin, int64_t *strides) {
  if (!checkTensor(ctx, "rotary", "input", x) ||
      !checkTensor(ctx, "rotary", "cos", cos) ||
      !checkTensor(ctx, "rotary", "sin", sin))
    return false;
  if (cos.dtype != x.dtype || sin.dtype != x.dtype)
    return ctx.fail("rotary: cos " + cos.describe() + " and sin " +
                    sin.describe() + " must have the input's dtype (" +
                    x.describe() + ")");
  bool sameShape = cos.rank == sin.rank;
  for (int d = 0; sameShape && d < cos.rank; ++d)
    sameShape = cos.shape[d] == sin.shape[d];
  if (!sameShape)
    return ctx.fail("rotary: cos " + cos.describe() + " and sin " +
                    sin.describe() + " must have one shape");
  if (x.rank < 1 || x.shape[x.rank - 1] % 2 != 0)
    return ctx.fail("rotary: input " + x.describe() +
                    " must have an even last dimension");
  int rank;
  int64_t shape[kMaxRank];
  bool fits = cos.rank <= x.rank && broadcastShapes(x.rank, x.shape, cos.rank,
                                                    cos.shape, rank, shape);
  for (int d = 0; fits && d < x.rank; ++d)
    fits = shape[d] == x.shape[d];
  if (!fits)
    return ctx.fail("rotary: cos and sin " + cos.describe() +
                    " do not broadcast to the input " + x.describe());
  broadcastStridesOf(cos, x.rank, strides);
  return true;
}

bool rotary(Context &ctx, const Tensor &x, const Tensor &cos, const Tensor &sin,
            int outSlot, Tensor &out) {
  int64_t cst[kMaxRank];
  if (!rotaryStrides(ctx, x, cos, sin, cst))
    return false;
  if (!isFloat(x.dtype) || x.dtype == DType::bf16)
    return ctx.fail("rotary: input must be float32, float64 or float16, got " +
                    x.describe());
  Tensor r;
  if (!allocateOut(ctx, "rotary", outSlot, r, x.dtype, x.rank, x.shape))
    return false;
  out = r;
  const int64_t D = x.shape[x.rank - 1], h = D / 2;
  const int64_t rows = D == 0 ? 0 : x.numel() / D;
  if (rows == 0)
    return true;
  const int lead = x.rank - 1;
  const int64_t cs = cst[lead];
  auto tableRow = [&](int64_t row) {
    int64_t off = 0;
    for (int d = lead - 1; d >= 0; --d) {
      off += (row % x.shape[d]) * cst[d];
      row /= x.shape[d];
    }
    return off;
  };
  const int64_t grain = std::max<int64_t>(1, kGrainCheap / D);
  auto direct = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = x.as<T>(), *pc = cos.as<T>(), *ps = sin.as<T>();
    T *py = r.as<T>();
    parallelFor(ctx, rows, grain, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const int64_t t = tableRow(row);
        rotateRow(px + row * D, pc + t, ps + t, cs, py + row * D, h);
      }
    });
    return true;
  };
  if (x.dtype == DType::f32)
    return direct(TypeTag<float>{});
  if (x.dtype == DType::f64)
    return direct(TypeTag<double>{});
  const Half *px = x.as<Half>(), *pc = cos.as<Half>(), *ps = sin.as<Half>();
  Half *py = r.as<Half>();
  parallelFor(ctx, rows, grain, [&](int64_t b, int64_t e) {
    std::vector<float> buf(size_t(4 * D));
    float *xs = buf.data(), *c = xs + D, *s = c + D, *ys = s + D;
    const int64_t n = cs == 0 ? 1 : D;
    for (int64_t row = b; row < e; ++row) {
      const int64_t t = tableRow(row);
      widenRow(px + row * D, xs, D);
      widenRow(pc + t, c, n);
      widenRow(ps + t, s, n);
      rotateRow<float>(xs, c, s, cs, ys, h);
      narrowRow(ys, py + row * D, D);
    }
  });
  return true;
}

} // namespace sparsec::rt::ops
