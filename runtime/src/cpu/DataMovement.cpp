//===- DataMovement.cpp - shapes, gathers, transposes, slices ---*- C++ -*-===//
//
// Part of the sparsec project.
//
// Ops that move elements without arithmetic, for every dtype: elements are
// copied as unsigned integers of the element size. Most of them are one
// strided copy (stridedCopy): a view with arbitrary (zero or negative)
// element strides copied into a contiguous result, with fast paths for
// contiguous rows, broadcast rows and 2-D transposed tiles.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include <algorithm>

namespace sparsec::rt::ops {

using namespace detail;

namespace {

/// Bytes per parallel chunk of plain copies.
constexpr int64_t kCopyGrainBytes = 1 << 18;

/// out (contiguous, `shape`) = the view of `in` with element `strides`.
template <typename T>
void stridedCopyTyped(Context &ctx, T *out, const T *in, int rankIn,
                      const int64_t *shapeIn, const int64_t *stridesIn) {
  // Drop size-1 dims and merge dims that are contiguous in the view.
  int r = 0;
  int64_t shape[kMaxRank], str[kMaxRank];
  int64_t total = 1;
  for (int d = 0; d < rankIn; ++d) {
    total *= shapeIn[d];
    if (shapeIn[d] == 1)
      continue;
    if (r > 0 && str[r - 1] == stridesIn[d] * shapeIn[d]) {
      shape[r - 1] *= shapeIn[d];
      str[r - 1] = stridesIn[d];
      continue;
    }
    shape[r] = shapeIn[d];
    str[r] = stridesIn[d];
    ++r;
  }
  if (total == 0)
    return;
  if (r == 0) {
    out[0] = in[0];
    return;
  }
  const int64_t inner = shape[r - 1], innerStride = str[r - 1];
  const int64_t rows = total / inner;
  // Offset of the first element of output row `row`.
  auto rowOffset = [&](int64_t row) {
    int64_t off = 0;
    for (int d = r - 2; d >= 0; --d) {
      off += (row % shape[d]) * str[d];
      row /= shape[d];
    }
    return off;
  };

  if (r == 1 && innerStride == 1) {
    const int64_t grain = std::max<int64_t>(1, kCopyGrainBytes / sizeof(T));
    parallelFor(ctx, total, grain, [&](int64_t b, int64_t e) {
      std::memcpy(out + b, in + b, size_t(e - b) * sizeof(T));
    });
    return;
  }

  // A 2-D transpose inside: the view's unit-stride dim q is not the last
  // output dim. Copy tiles of (q, last) so that both reads and writes touch
  // few cache lines.
  int q = -1;
  for (int d = 0; d < r - 1; ++d)
    if (str[d] == 1)
      q = d;
  if (innerStride != 1 && innerStride != 0 && q >= 0) {
    constexpr int64_t TB = 16;
    int64_t outStr[kMaxRank];
    contiguousStrides(r, shape, outStr);
    const int64_t nq = shape[q];
    const int64_t outer = total / (nq * inner);
    const int64_t tq = (nq + TB - 1) / TB, tl = (inner + TB - 1) / TB;
    const int64_t tasks = outer * tq * tl;
    parallelFor(ctx, tasks, std::max<int64_t>(1, 4096 / (TB * TB)),
                [&](int64_t b, int64_t e) {
                  for (int64_t t = b; t < e; ++t) {
                    int64_t rem = t / (tq * tl);
                    const int64_t iq0 = (t / tl) % tq * TB, il0 = t % tl * TB;
                    // Offsets of the outer index (all dims but q, last).
                    int64_t inOff = 0, outOff = 0;
                    for (int d = r - 2; d >= 0; --d) {
                      if (d == q)
                        continue;
                      int64_t i = rem % shape[d];
                      rem /= shape[d];
                      inOff += i * str[d];
                      outOff += i * outStr[d];
                    }
                    const int64_t iq1 = std::min(nq, iq0 + TB);
                    const int64_t il1 = std::min(inner, il0 + TB);
                    for (int64_t iq = iq0; iq < iq1; ++iq) {
                      const T *src = in + inOff + iq + il0 * innerStride;
                      T *dst = out + outOff + iq * outStr[q];
                      for (int64_t il = il0; il < il1; ++il, src += innerStride)
                        dst[il] = *src;
                    }
                  }
                });
    return;
  }

  const int64_t grain =
      std::max<int64_t>(1, kCopyGrainBytes / int64_t(sizeof(T) * inner));
  parallelFor(ctx, rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const T *src = in + rowOffset(row);
      T *dst = out + row * inner;
      if (innerStride == 1) {
        std::memcpy(dst, src, size_t(inner) * sizeof(T));
      } else if (innerStride == 0) {
        std::fill(dst, dst + inner, *src);
      } else {
        for (int64_t i = 0; i < inner; ++i)
          dst[i] = src[i * innerStride];
      }
    }
  });
}

void stridedCopy(Context &ctx, const Tensor &out, const void *in, int rank,
                 const int64_t *shape, const int64_t *strides) {
  dispatchSize(dtypeSize(out.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    stridedCopyTyped<T>(ctx, out.as<T>(), static_cast<const T *>(in), rank,
                        shape, strides);
  });
}

/// out = x (same element count), in parallel; nothing when they alias.
void copyBytes(Context &ctx, void *out, const void *in, size_t bytes) {
  if (out == in || bytes == 0)
    return;
  parallelFor(ctx, int64_t(bytes), kCopyGrainBytes * 4,
              [&](int64_t b, int64_t e) {
                std::memcpy(static_cast<char *>(out) + b,
                            static_cast<const char *>(in) + b, size_t(e - b));
              });
}

std::string vectorString(const std::vector<int64_t> &v) {
  return shapeString(int(v.size()), v.data());
}

} // namespace

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

bool shape(Context &ctx, const Tensor &x, int64_t start, int64_t end,
           int outSlot, Tensor &out) {
  if (x.rank < 0 || x.rank > kMaxRank)
    return ctx.fail("shape: invalid input rank " + std::to_string(x.rank));
  const int64_t r = x.rank;
  auto clampDim = [&](int64_t v) {
    if (v < 0)
      v += r;
    return std::min(std::max<int64_t>(v, 0), r);
  };
  const int64_t s = clampDim(start), e = clampDim(end);
  const int64_t n = std::max<int64_t>(0, e - s);
  Tensor res;
  if (!allocateOut(ctx, "shape", outSlot, res, DType::i64, 1, &n))
    return false;
  for (int64_t i = 0; i < n; ++i)
    res.as<int64_t>()[i] = x.shape[s + i];
  out = res;
  return true;
}

bool gather(Context &ctx, const Tensor &data, const Tensor &indices,
            int64_t axis, int outSlot, Tensor &out) {
  if (!checkTensor(ctx, "gather", "data", data) ||
      !checkTensor(ctx, "gather", "indices", indices))
    return false;
  if (indices.dtype != DType::i64 && indices.dtype != DType::i32)
    return ctx.fail("gather: indices must be int64 or int32, got " +
                    indices.describe());
  if (data.rank < 1)
    return ctx.fail("gather: data must have rank >= 1, got " + data.describe());
  int64_t ax;
  if (!normalizeAxis(ctx, "gather", axis, data.rank, ax))
    return false;
  const int rank = data.rank - 1 + indices.rank;
  if (rank > kMaxRank)
    return ctx.fail("gather: result rank " + std::to_string(rank) +
                    " exceeds " + std::to_string(kMaxRank));
  const int64_t dim = data.shape[ax];
  const int64_t nIdx = indices.numel();
  std::vector<int64_t> idx(static_cast<size_t>(nIdx));
  for (int64_t i = 0; i < nIdx; ++i) {
    int64_t v = indices.dtype == DType::i64 ? indices.as<int64_t>()[i]
                                            : indices.as<int32_t>()[i];
    if (v < -dim || v >= dim)
      return ctx.fail("gather: index " + std::to_string(v) + " at position " +
                      std::to_string(i) + " is outside [" +
                      std::to_string(-dim) + ", " + std::to_string(dim) + ")");
    idx[size_t(i)] = v < 0 ? v + dim : v;
  }
  int64_t shape[kMaxRank];
  int k = 0;
  for (int i = 0; i < ax; ++i)
    shape[k++] = data.shape[i];
  for (int i = 0; i < indices.rank; ++i)
    shape[k++] = indices.shape[i];
  for (int i = int(ax) + 1; i < data.rank; ++i)
    shape[k++] = data.shape[i];
  Tensor res;
  if (!allocateOut(ctx, "gather", outSlot, res, data.dtype, rank, shape))
    return false;
  const int64_t outer = product(data.shape, 0, int(ax));
  const size_t chunk = size_t(product(data.shape, int(ax) + 1, data.rank)) *
                       dtypeSize(data.dtype);
  const char *src = static_cast<const char *>(data.data);
  char *dst = static_cast<char *>(res.data);
  if (chunk != 0 && nIdx != 0)
    parallelFor(ctx, outer * nIdx,
                std::max<int64_t>(1, kCopyGrainBytes / int64_t(chunk)),
                [&](int64_t b, int64_t e) {
                  for (int64_t t = b; t < e; ++t) {
                    const int64_t o = t / nIdx, j = t % nIdx;
                    std::memcpy(dst + size_t(t) * chunk,
                                src + size_t(o * dim + idx[size_t(j)]) * chunk,
                                chunk);
                  }
                });
  out = res;
  return true;
}

bool reshape(Context &ctx, const Tensor &x, const Tensor &shapeT,
             bool allowzero, int outSlot, Tensor &out) {
  int rank = 0;
  int64_t shape[kMaxRank];
  return reshapeTarget(ctx, x, shapeT, allowzero, rank, shape) &&
         reshapeTo(ctx, x, rank, shape, outSlot, out);
}

bool reshapeTo(Context &ctx, const Tensor &x, int rank, const int64_t *shape,
               int outSlot, Tensor &out) {
  if (!checkReshapeTo(ctx, x, rank, shape))
    return false;
  Tensor res;
  if (!allocateOut(ctx, "reshape", outSlot, res, x.dtype, rank, shape))
    return false;
  // The planner gives a reshape its input's slot: then it is a view.
  if (res.data != x.data)
    copyBytes(ctx, res.data, x.data, x.bytes());
  out = res;
  return true;
}

bool transpose(Context &ctx, const Tensor &x, const int64_t *perm, int outSlot,
               Tensor &out) {
  if (!checkTensor(ctx, "transpose", "input", x))
    return false;
  const int r = x.rank;
  bool seen[kMaxRank] = {};
  for (int i = 0; i < r; ++i) {
    if (!perm || perm[i] < 0 || perm[i] >= r || seen[perm[i]]) {
      std::vector<int64_t> p(perm ? perm : nullptr, perm ? perm + r : nullptr);
      return ctx.fail("transpose: " + vectorString(p) +
                      " is not a permutation of the dims of " + x.describe());
    }
    seen[perm[i]] = true;
  }
  int64_t inStr[kMaxRank], shape[kMaxRank], str[kMaxRank];
  contiguousStrides(r, x.shape, inStr);
  for (int i = 0; i < r; ++i) {
    shape[i] = x.shape[perm[i]];
    str[i] = inStr[perm[i]];
  }
  if (transposeIsView(r, x.shape, perm)) {
    out = x;
    for (int i = 0; i < r; ++i)
      out.shape[i] = shape[i];
    return true;
  }
  Tensor res;
  if (!allocateOut(ctx, "transpose", outSlot, res, x.dtype, r, shape))
    return false;
  stridedCopy(ctx, res, x.data, r, shape, str);
  out = res;
  return true;
}

bool concat(Context &ctx, int n, const Tensor *const *inputs, int64_t axis,
            int outSlot, Tensor &out) {
  if (n < 1 || !inputs)
    return ctx.fail("concat: needs at least one input");
  for (int i = 0; i < n; ++i) {
    if (!inputs[i])
      return ctx.fail("concat: input " + std::to_string(i) + " is missing");
    if (!checkTensor(ctx, "concat", "input", *inputs[i]))
      return false;
  }
  const Tensor &first = *inputs[0];
  if (first.rank < 1)
    return ctx.fail("concat: inputs must have rank >= 1, got " +
                    first.describe());
  int64_t ax;
  if (!normalizeAxis(ctx, "concat", axis, first.rank, ax))
    return false;
  int64_t shape[kMaxRank];
  for (int d = 0; d < first.rank; ++d)
    shape[d] = first.shape[d];
  shape[ax] = 0;
  for (int i = 0; i < n; ++i) {
    const Tensor &t = *inputs[i];
    bool ok = t.dtype == first.dtype && t.rank == first.rank;
    for (int d = 0; ok && d < t.rank; ++d)
      ok = d == ax || t.shape[d] == first.shape[d];
    if (!ok)
      return ctx.fail("concat: input " + std::to_string(i) + " " +
                      t.describe() + " does not match " + first.describe() +
                      " on the dims other than axis " + std::to_string(ax));
    shape[ax] += t.shape[ax];
  }
  Tensor res;
  if (!allocateOut(ctx, "concat", outSlot, res, first.dtype, first.rank, shape))
    return false;
  const size_t es = dtypeSize(first.dtype);
  const int64_t outer = product(shape, 0, int(ax));
  const size_t innerBytes =
      size_t(product(shape, int(ax) + 1, first.rank)) * es;
  const size_t rowBytes = size_t(shape[ax]) * innerBytes;
  char *dst = static_cast<char *>(res.data);
  if (rowBytes != 0)
    parallelFor(
        ctx, outer, std::max<int64_t>(1, kCopyGrainBytes / int64_t(rowBytes)),
        [&](int64_t b, int64_t e) {
          for (int64_t o = b; o < e; ++o) {
            size_t off = size_t(o) * rowBytes;
            for (int i = 0; i < n; ++i) {
              const size_t bytes = size_t(inputs[i]->shape[ax]) * innerBytes;
              if (bytes)
                std::memcpy(dst + off,
                            static_cast<const char *>(inputs[i]->data) +
                                size_t(o) * bytes,
                            bytes);
              off += bytes;
            }
          }
        });
  out = res;
  return true;
}

bool slice(Context &ctx, const Tensor &data, const Tensor &starts,
           const Tensor &ends, const Tensor &axes, const Tensor &steps,
           int outSlot, Tensor &out) {
  if (!checkTensor(ctx, "slice", "data", data))
    return false;
  std::vector<int64_t> st, en, ax, sp;
  if (!readIndexTensor(ctx, "slice", "starts", starts, st) ||
      !readIndexTensor(ctx, "slice", "ends", ends, en) ||
      !readIndexTensor(ctx, "slice", "axes", axes, ax) ||
      !readIndexTensor(ctx, "slice", "steps", steps, sp))
    return false;
  const size_t n = st.size();
  if (ax.empty())
    for (size_t i = 0; i < n; ++i)
      ax.push_back(int64_t(i));
  if (sp.empty())
    sp.assign(n, 1);
  if (en.size() != n || ax.size() != n || sp.size() != n)
    return ctx.fail("slice: starts, ends, axes and steps have different "
                    "lengths (" +
                    std::to_string(n) + ", " + std::to_string(en.size()) +
                    ", " + std::to_string(ax.size()) + ", " +
                    std::to_string(sp.size()) + ")");
  const int r = data.rank;
  int64_t begin[kMaxRank], step[kMaxRank], shape[kMaxRank];
  bool used[kMaxRank] = {};
  for (int d = 0; d < r; ++d) {
    begin[d] = 0;
    step[d] = 1;
    shape[d] = data.shape[d];
  }
  for (size_t i = 0; i < n; ++i) {
    int64_t a;
    if (!normalizeAxis(ctx, "slice", ax[i], r, a))
      return false;
    if (used[a])
      return ctx.fail("slice: axis " + std::to_string(ax[i]) + " is repeated");
    used[a] = true;
    const int64_t s = sp[i], dim = data.shape[a];
    if (s == 0)
      return ctx.fail("slice: step is 0 on axis " + std::to_string(a));
    int64_t b = st[i], e = en[i];
    if (b < 0)
      b += dim;
    if (e < 0)
      e += dim;
    int64_t len;
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > b ? (e - b - 1) / s + 1 : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = b > e ? (b - e - 1) / (-s) + 1 : 0;
    }
    if (dim == 0 || len == 0) {
      b = 0;
      len = 0;
    }
    begin[a] = b;
    step[a] = s;
    shape[a] = len;
  }
  Tensor res;
  if (!allocateOut(ctx, "slice", outSlot, res, data.dtype, r, shape))
    return false;
  if (res.numel() != 0) {
    int64_t inStr[kMaxRank], str[kMaxRank];
    contiguousStrides(r, data.shape, inStr);
    int64_t offset = 0;
    for (int d = 0; d < r; ++d) {
      offset += begin[d] * inStr[d];
      str[d] = step[d] * inStr[d];
    }
    stridedCopy(ctx, res,
                static_cast<const char *>(data.data) +
                    offset * int64_t(dtypeSize(data.dtype)),
                r, shape, str);
  }
  out = res;
  return true;
}

bool split(Context &ctx, const Tensor &x, int64_t axis, int n,
           const int64_t *sizes, const int *outSlots, Tensor *outs) {
  if (!checkTensor(ctx, "split", "input", x))
    return false;
  if (n < 1 || !outSlots || !outs)
    return ctx.fail("split: needs at least one output");
  if (x.rank < 1)
    return ctx.fail("split: input must have rank >= 1, got " + x.describe());
  int64_t ax;
  if (!normalizeAxis(ctx, "split", axis, x.rank, ax))
    return false;
  const int64_t dim = x.shape[ax];
  std::vector<int64_t> sz(static_cast<size_t>(n));
  if (sizes) {
    int64_t sum = 0;
    for (int i = 0; i < n; ++i) {
      if (sizes[i] < 0)
        return ctx.fail("split: negative size " + std::to_string(sizes[i]));
      sz[size_t(i)] = sizes[i];
      sum += sizes[i];
    }
    if (sum != dim)
      return ctx.fail("split: sizes " + vectorString(sz) +
                      " do not add up to " + std::to_string(dim) + " (axis " +
                      std::to_string(ax) + " of " + x.describe() + ")");
  } else {
    // Equal parts, the last one smaller when dim is not a multiple of n.
    const int64_t part = (dim + n - 1) / n;
    int64_t left = dim;
    for (int i = 0; i < n; ++i) {
      sz[size_t(i)] = std::min(part, left);
      left -= sz[size_t(i)];
    }
  }
  const size_t es = dtypeSize(x.dtype);
  const int64_t outer = product(x.shape, 0, int(ax));
  const size_t innerBytes = size_t(product(x.shape, int(ax) + 1, x.rank)) * es;
  const size_t rowBytes = size_t(dim) * innerBytes;
  size_t offset = 0;
  for (int i = 0; i < n; ++i) {
    int64_t shape[kMaxRank];
    for (int d = 0; d < x.rank; ++d)
      shape[d] = x.shape[d];
    shape[ax] = sz[size_t(i)];
    Tensor res;
    if (!allocateOut(ctx, "split", outSlots[i], res, x.dtype, x.rank, shape))
      return false;
    const size_t bytes = size_t(sz[size_t(i)]) * innerBytes;
    const char *src = static_cast<const char *>(x.data) + offset;
    char *dst = static_cast<char *>(res.data);
    if (bytes)
      parallelFor(ctx, outer,
                  std::max<int64_t>(1, kCopyGrainBytes / int64_t(bytes)),
                  [&](int64_t b, int64_t e) {
                    for (int64_t o = b; o < e; ++o)
                      std::memcpy(dst + size_t(o) * bytes,
                                  src + size_t(o) * rowBytes, bytes);
                  });
    offset += bytes;
    outs[i] = res;
  }
  return true;
}

bool expand(Context &ctx, const Tensor &x, const Tensor &shapeT, int outSlot,
            Tensor &out) {
  if (!checkTensor(ctx, "expand", "input", x))
    return false;
  std::vector<int64_t> req;
  if (!readShape(ctx, "expand", shapeT, req))
    return false;
  int rank;
  int64_t shape[kMaxRank];
  for (int64_t v : req)
    if (v < 0)
      return ctx.fail("expand: invalid shape " + vectorString(req));
  if (!broadcastShapes(x.rank, x.shape, int(req.size()), req.data(), rank,
                       shape))
    return ctx.fail("expand: cannot broadcast " + x.describe() + " to " +
                    vectorString(req));
  Tensor res;
  if (!allocateOut(ctx, "expand", outSlot, res, x.dtype, rank, shape))
    return false;
  int64_t str[kMaxRank];
  broadcastStridesOf(x, rank, str);
  if (res.numel() != 0)
    stridedCopy(ctx, res, x.data, rank, shape, str);
  out = res;
  return true;
}

bool range(Context &ctx, const Tensor &start, const Tensor &limit,
           const Tensor &delta, int outSlot, Tensor &out) {
  if (!checkTensor(ctx, "range", "start", start) ||
      !checkTensor(ctx, "range", "limit", limit) ||
      !checkTensor(ctx, "range", "delta", delta))
    return false;
  if (start.dtype != limit.dtype || start.dtype != delta.dtype)
    return ctx.fail(
        "range: start, limit and delta dtypes differ: " + start.describe() +
        ", " + limit.describe() + ", " + delta.describe());
  if (start.numel() != 1 || limit.numel() != 1 || delta.numel() != 1)
    return ctx.fail("range: start, limit and delta must be scalars, got " +
                    start.describe() + ", " + limit.describe() + ", " +
                    delta.describe());
  const DType t = start.dtype;
  if (!isFloat(t) && !isInt(t))
    return ctx.fail("range: unsupported dtype " + std::string(dtypeName(t)));
  // Element count, computed exactly for integers and in double for floats.
  const int64_t limitCount = int64_t(1) << 40;
  int64_t count = 0;
  bool zeroDelta = false, tooMany = false;
  dispatchType(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Arith<T>;
    using C = typename A::type;
    const C s = A::load(start.as<T>()[0]), l = A::load(limit.as<T>()[0]),
            d = A::load(delta.as<T>()[0]);
    if (d == C(0)) {
      zeroDelta = true;
      return;
    }
    if constexpr (std::is_integral_v<C>) {
      __int128 span = __int128(l) - __int128(s);
      __int128 dd = __int128(d);
      __int128 c = 0;
      if ((span > 0 && dd > 0) || (span < 0 && dd < 0)) {
        if (dd < 0) {
          span = -span;
          dd = -dd;
        }
        c = (span + dd - 1) / dd;
      }
      tooMany = c > limitCount;
      count = tooMany ? 0 : int64_t(c);
    } else {
      double c = std::ceil((double(l) - double(s)) / double(d));
      if (c != c)
        c = 0;
      tooMany = c > double(limitCount);
      count = tooMany ? 0 : c > 0 ? int64_t(c) : 0;
    }
  });
  if (zeroDelta)
    return ctx.fail("range: delta is zero");
  if (tooMany)
    return ctx.fail("range: too many elements");
  Tensor res;
  if (!allocateOut(ctx, "range", outSlot, res, t, 1, &count))
    return false;
  dispatchType(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Arith<T>;
    using C = typename A::type;
    const C s = A::load(start.as<T>()[0]), d = A::load(delta.as<T>()[0]);
    T *o = res.as<T>();
    for (int64_t i = 0; i < count; ++i)
      o[i] = A::store(C(s + C(i) * d));
  });
  out = res;
  return true;
}

bool constantOfShape(Context &ctx, const Tensor &shapeT, const Tensor &value,
                     int outSlot, Tensor &out) {
  if (!checkTensor(ctx, "constant_of_shape", "value", value))
    return false;
  if (value.numel() != 1)
    return ctx.fail("constant_of_shape: value must have one element, got " +
                    value.describe());
  std::vector<int64_t> req;
  if (!readShape(ctx, "constant_of_shape", shapeT, req))
    return false;
  for (int64_t v : req)
    if (v < 0)
      return ctx.fail("constant_of_shape: invalid shape " + vectorString(req));
  Tensor res;
  if (!allocateOut(ctx, "constant_of_shape", outSlot, res, value.dtype,
                   int(req.size()), req.data()))
    return false;
  const int64_t n = res.numel();
  dispatchSize(dtypeSize(value.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v;
    std::memcpy(&v, value.data, sizeof(T));
    T *o = res.as<T>();
    parallelFor(ctx, n, kGrainCheap * 4,
                [&](int64_t b, int64_t e) { std::fill(o + b, o + e, v); });
  });
  out = res;
  return true;
}

} // namespace sparsec::rt::ops
