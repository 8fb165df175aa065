//===- Norms.cpp - normalisations, attention, reductions --------*- C++ -*-===//
//
// Part of the sparsec project.
//
// layerNorm, rmsNorm, softmax, attention, embedding, batchNorm, reduce,
// cumsum and trilu. Float results are computed in the tensor's arithmetic
// type (f32 for f16), with sums accumulated in double; integer reductions
// wrap in 64 bits and then in their own type.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include <algorithm>

namespace sparsec::rt::ops {

using namespace detail;

namespace {

/// Work units per parallel chunk, given the cost of one unit in elements.
int64_t grainFor(int64_t unitCost) {
  return std::max<int64_t>(1,
                           (int64_t(1) << 14) / std::max<int64_t>(1, unitCost));
}

bool checkFloat(Context &ctx, const char *op, const Tensor &t,
                const char *what) {
  if (!isFloat(t.dtype))
    return ctx.fail(std::string(op) + ": " + what +
                    " must be a float "
                    "tensor, got " +
                    t.describe());
  return true;
}

/// Runs f(TypeTag<T>) for a float dtype.
template <typename F> void dispatchFloat(DType t, F &&f) {
  switch (t) {
  case DType::f32:
    f(TypeTag<float>{});
    return;
  case DType::f64:
    f(TypeTag<double>{});
    return;
  case DType::f16:
    f(TypeTag<Half>{});
    return;
  default:
    return;
  }
}


/// The accumulator of sums: double for floats, 64-bit unsigned (wrapping)
/// for integers.
template <typename C>
using SumType =
    std::conditional_t<std::is_floating_point_v<C>, double, uint64_t>;

template <typename C> SumType<C> toSum(C v) {
  if constexpr (std::is_floating_point_v<C>)
    return double(v);
  else
    return uint64_t(int64_t(v)); // sign-extends signed values
}
template <typename C> C fromSum(SumType<C> s) {
  if constexpr (std::is_floating_point_v<C>)
    return C(s);
  else
    return C(s); // wraps into C
}
/// Sum / count: floats divide, signed integers truncate toward zero.
template <typename C> C meanFromSum(SumType<C> s, int64_t count) {
  if constexpr (std::is_floating_point_v<C>) {
    if (count == 0)
      return std::numeric_limits<C>::quiet_NaN();
    return C(s / double(count));
  } else if constexpr (std::is_signed_v<C>) {
    if (count == 0)
      return C(0);
    return C(int64_t(s) / count);
  } else {
    if (count == 0)
      return C(0);
    return C(s / uint64_t(count));
  }
}


thread_local std::vector<float> attnScores, attnAcc, attnKeysT;

/// The sum of f(x[i]) over [0, n) in double, in four independent add
/// chains (lane i % 4, the tail in lane 0) summed pairwise.
template <typename C, typename F>
double sum4(const C *x, int64_t n, F f) {
  double s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l)
      s[l] += f(double(x[i + l]));
  for (; i < n; ++i)
    s[0] += f(double(x[i]));
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/// Query rows a head from which attention goes through the GEMM kernel.
constexpr int64_t kAttentionBlockMin = 8;

/// f(row) on each of `rows` float16 rows of `width` elements, each widened
/// to float32 (F16C where available), transformed in place and narrowed
/// into `out`: the same values, and so the same bits, as converting every
/// element on its own.
template <typename F>
void forEachHalfRow(Context &ctx, const Half *in, Half *out, int64_t rows,
                    int64_t width, int64_t grain, F f) {
  parallelFor(ctx, rows, grain, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> row;
    row.resize(size_t(width));
    for (int64_t r = b; r < e; ++r) {
      widenRow(in + r * width, row.data(), width);
      f(row.data());
      narrowRow(row.data(), out + r * width, width);
    }
  });
}

} // namespace

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

bool layerNorm(Context &ctx, const Tensor &x, const Tensor &scale,
               const Tensor *bias, int64_t axis, float epsilon, int outSlot,
               Tensor &out) {
  if (!checkTensor(ctx, "layer_norm", "input", x) ||
      !checkTensor(ctx, "layer_norm", "scale", scale) ||
      (bias && !checkTensor(ctx, "layer_norm", "bias", *bias)) ||
      !checkFloat(ctx, "layer_norm", x, "input"))
    return false;
  if (x.rank < 1)
    return ctx.fail("layer_norm: input must have rank >= 1, got " +
                    x.describe());
  int64_t ax;
  if (!normalizeAxis(ctx, "layer_norm", axis, x.rank, ax))
    return false;
  const int64_t D = product(x.shape, int(ax), x.rank);
  const int64_t rows = product(x.shape, 0, int(ax));
  if (scale.dtype != x.dtype || scale.numel() != D ||
      (bias && (bias->dtype != x.dtype || bias->numel() != D)))
    return ctx.fail("layer_norm: scale " + scale.describe() +
                    (bias ? " and bias " + bias->describe() : std::string()) +
                    " must have " + std::to_string(D) + " elements of " +
                    dtypeName(x.dtype) + " (input " + x.describe() + ", axis " +
                    std::to_string(ax) + ")");
  Tensor r;
  if (!allocateOut(ctx, "layer_norm", outSlot, r, x.dtype, x.rank, x.shape))
    return false;
  dispatchFloat(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Arith<T>::type;
    // One row in the arithmetic type C, in place or not (float16 rows are
    // widened first and narrowed after: the same values, the same bits).
    auto normRow = [&](const C *xr, const C *g, const C *bt, C *yr) {
      const double mean = sum4(xr, D, [](double v) { return v; }) / double(D);
      const double var = sum4(xr, D, [&](double v) {
                           const double d = v - mean;
                           return d * d;
                         }) /
                         double(D);
      const C inv = C(1.0 / std::sqrt(var + double(epsilon)));
      const C m = C(mean);
      for (int64_t i = 0; i < D; ++i) {
        C v = (xr[i] - m) * inv * g[i];
        if (bt)
          v += bt[i];
        yr[i] = v;
      }
    };
    const T *in = x.as<T>();
    T *o = r.as<T>();
    if constexpr (std::is_same_v<T, C>) {
      const C *g = scale.as<C>(), *bt = bias ? bias->as<C>() : nullptr;
      parallelFor(ctx, rows, grainFor(D), [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row)
          normRow(in + row * D, g, bt, o + row * D);
      });
    } else {
      std::vector<float> g(static_cast<size_t>(D)), bt(bias ? static_cast<size_t>(D) : 0);
      widenRow(scale.as<Half>(), g.data(), D);
      if (bias)
        widenRow(bias->as<Half>(), bt.data(), D);
      forEachHalfRow(ctx, in, o, rows, D, grainFor(D), [&](float *row) {
        normRow(row, g.data(), bias ? bt.data() : nullptr, row);
      });
    }
  });
  out = r;
  return true;
}

bool rmsNorm(Context &ctx, const Tensor &x, const Tensor &scale, float epsilon,
             int outSlot, Tensor &out) {
  if (!checkTensor(ctx, "rms_norm", "input", x) ||
      !checkTensor(ctx, "rms_norm", "scale", scale) ||
      !checkFloat(ctx, "rms_norm", x, "input"))
    return false;
  if (x.rank < 1)
    return ctx.fail("rms_norm: input must have rank >= 1, got " + x.describe());
  const int64_t D = x.shape[x.rank - 1];
  const int64_t rows = product(x.shape, 0, x.rank - 1);
  if (scale.dtype != x.dtype || scale.numel() != D)
    return ctx.fail("rms_norm: scale " + scale.describe() + " must have " +
                    std::to_string(D) + " elements of " + dtypeName(x.dtype) +
                    " (input " + x.describe() + ")");
  Tensor r;
  if (!allocateOut(ctx, "rms_norm", outSlot, r, x.dtype, x.rank, x.shape))
    return false;
  dispatchFloat(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Arith<T>::type;
    // One row in the arithmetic type C (float16 rows widened and narrowed,
    // as layerNorm's).
    auto normRow = [&](const C *xr, const C *g, C *yr) {
      const double ss = sum4(xr, D, [](double v) { return v * v; });
      const C inv = C(1.0 / std::sqrt(ss / double(D) + double(epsilon)));
      for (int64_t i = 0; i < D; ++i)
        yr[i] = xr[i] * inv * g[i];
    };
    const T *in = x.as<T>();
    T *o = r.as<T>();
    if constexpr (std::is_same_v<T, C>) {
      const C *g = scale.as<C>();
      parallelFor(ctx, rows, grainFor(D), [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row)
          normRow(in + row * D, g, o + row * D);
      });
    } else {
      std::vector<float> g(static_cast<size_t>(D));
      widenRow(scale.as<Half>(), g.data(), D);
      forEachHalfRow(ctx, in, o, rows, D, grainFor(D),
                     [&](float *row) { normRow(row, g.data(), row); });
    }
  });
  out = r;
  return true;
}

bool softmax(Context &ctx, const Tensor &x, int64_t axis, int outSlot,
             Tensor &out) {
  if (!checkTensor(ctx, "softmax", "input", x) ||
      !checkFloat(ctx, "softmax", x, "input"))
    return false;
  if (x.rank < 1)
    return ctx.fail("softmax: input must have rank >= 1, got " + x.describe());
  int64_t ax;
  if (!normalizeAxis(ctx, "softmax", axis, x.rank, ax))
    return false;
  const int64_t outer = product(x.shape, 0, int(ax));
  const int64_t n = x.shape[ax];
  const int64_t inner = product(x.shape, int(ax) + 1, x.rank);
  Tensor r;
  if (!allocateOut(ctx, "softmax", outSlot, r, x.dtype, x.rank, x.shape))
    return false;
  if (r.numel() == 0) {
    out = r;
    return true;
  }
  dispatchFloat(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Arith<T>;
    using C = typename A::type;
    const T *in = x.as<T>();
    T *o = r.as<T>();
    if (inner == 1) {
      // One row in the arithmetic type C, in place (float16 rows are
      // widened first and narrowed after: the same values, the same bits).
      auto softmaxRow = [&](C *yr) {
        C m = yr[0];
        for (int64_t i = 1; i < n; ++i)
          m = std::max(m, yr[i]);
        double sum = 0;
        if (m == -std::numeric_limits<C>::infinity())
          m = 0; // all -inf: exp gives 0s and the result NaN, like numpy
        for (int64_t i = 0; i < n; ++i) {
          yr[i] = std::exp(yr[i] - m);
          sum += double(yr[i]);
        }
        const C inv = C(1.0 / sum);
        for (int64_t i = 0; i < n; ++i)
          yr[i] = yr[i] * inv;
      };
      if constexpr (std::is_same_v<T, Half>) {
        forEachHalfRow(ctx, in, o, outer, n, grainFor(n * 8), softmaxRow);
      } else {
        parallelFor(ctx, outer, grainFor(n * 8), [&](int64_t b, int64_t e) {
          for (int64_t r0 = b; r0 < e; ++r0) {
            std::copy(in + r0 * n, in + (r0 + 1) * n, o + r0 * n);
            softmaxRow(o + r0 * n);
          }
        });
      }
      return;
    }
    // Strided axis: columns of `inner` processed together, in chunks.
    constexpr int64_t CW = 256;
    const int64_t chunks = (inner + CW - 1) / CW;
    parallelFor(
        ctx, outer * chunks, grainFor(n * CW * 8), [&](int64_t b, int64_t e) {
          std::vector<C> mx(CW);
          std::vector<double> sum(CW);
          for (int64_t t = b; t < e; ++t) {
            const int64_t ob = t / chunks, c0 = t % chunks * CW;
            const int64_t w = std::min(CW, inner - c0);
            const T *base = in + ob * n * inner + c0;
            T *obase = o + ob * n * inner + c0;
            for (int64_t j = 0; j < w; ++j) {
              mx[size_t(j)] = A::load(base[j]);
              sum[size_t(j)] = 0;
            }
            for (int64_t i = 1; i < n; ++i)
              for (int64_t j = 0; j < w; ++j)
                mx[size_t(j)] =
                    std::max(mx[size_t(j)], A::load(base[i * inner + j]));
            for (int64_t j = 0; j < w; ++j)
              if (mx[size_t(j)] == -std::numeric_limits<C>::infinity())
                mx[size_t(j)] = 0;
            for (int64_t i = 0; i < n; ++i)
              for (int64_t j = 0; j < w; ++j)
                sum[size_t(j)] += double(
                    std::exp(A::load(base[i * inner + j]) - mx[size_t(j)]));
            for (int64_t i = 0; i < n; ++i)
              for (int64_t j = 0; j < w; ++j)
                obase[i * inner + j] =
                    A::store(C(double(std::exp(A::load(base[i * inner + j]) -
                                               mx[size_t(j)])) /
                               sum[size_t(j)]));
          }
        });
  });
  out = r;
  return true;
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

bool attention(Context &ctx, const Tensor &q, const Tensor &k, const Tensor &v,
               const Tensor *mask, const Tensor *pastK, const Tensor *pastV,
               float scale, bool causal, HeadLayout layout, int outSlot,
               Tensor &out, int presentKSlot, Tensor *presentK,
               int presentVSlot, Tensor *presentV) {
  const char *op = "attention";
  if (!checkTensor(ctx, op, "q", q) || !checkTensor(ctx, op, "k", k) ||
      !checkTensor(ctx, op, "v", v) ||
      (mask && !checkTensor(ctx, op, "mask", *mask)) ||
      (pastK && !checkTensor(ctx, op, "past_k", *pastK)) ||
      (pastV && !checkTensor(ctx, op, "past_v", *pastV)))
    return false;
  if (q.dtype != DType::f32 || k.dtype != DType::f32 || v.dtype != DType::f32 ||
      (pastK && pastK->dtype != DType::f32) ||
      (pastV && pastV->dtype != DType::f32))
    return ctx.fail("attention: only float32 is supported (q " + q.describe() +
                    ", k " + k.describe() + ", v " + v.describe() + ")");
  AttentionDims dims;
  if (!attentionDims(ctx, q, k, v, mask, pastK, pastV, layout, dims))
    return false;
  const int64_t B = dims.B, Hq = dims.Hq, Sq = dims.Sq, D = dims.D,
                Hk = dims.Hk, Sk = dims.Sk, Dv = dims.Dv, P = dims.P,
                T = dims.T;
  const int64_t *mStr = dims.mStr;

  // present = concat(past, new) on the sequence axis (the new rows
  // gathered from their heads where they are token-major).
  auto writePresent = [&](const Tensor *past, const Tensor &cur, int slot,
                          Tensor *present, int64_t width, const int64_t *str) {
    const int64_t shape[4] = {B, Hk, T, width};
    Tensor res;
    if (!allocateOut(ctx, op, slot, res, DType::f32, 4, shape))
      return false;
    float *dst = res.as<float>();
    const float *pp = past ? past->as<float>() : nullptr;
    const float *cp = cur.as<float>();
    parallelFor(ctx, B * Hk, grainFor(T * width), [&](int64_t b, int64_t e) {
      for (int64_t bh = b; bh < e; ++bh) {
        float *d = dst + bh * T * width;
        if (P)
          std::memcpy(d, pp + bh * P * width, size_t(P * width) * 4);
        const float *c = cp + (bh / Hk) * str[0] + (bh % Hk) * str[1];
        if (str[2] == width && Sk)
          std::memcpy(d + P * width, c, size_t(Sk * width) * 4);
        else
          for (int64_t j = 0; j < Sk; ++j)
            std::memcpy(d + (P + j) * width, c + j * str[2], size_t(width) * 4);
      }
    });
    *present = res;
    return true;
  };
  Tensor res;
  const int64_t oshape[4] = {B, dims.tokenMajor ? Sq : Hq,
                             dims.tokenMajor ? Hq : Sq, Dv};
  if (!allocateOut(ctx, op, outSlot, res, DType::f32, 4, oshape))
    return false;
  Tensor pk, pv;
  if (presentK && !writePresent(pastK, k, presentKSlot, &pk, D, dims.kStr))
    return false;
  if (presentV && !writePresent(pastV, v, presentVSlot, &pv, Dv, dims.vStr))
    return false;

  const float *qp = q.as<float>(), *kp = k.as<float>(), *vp = v.as<float>();
  const float *pkp = pastK ? pastK->as<float>() : nullptr;
  const float *pvp = pastV ? pastV->as<float>() : nullptr;
  const float *mf =
      mask && mask->dtype == DType::f32 ? mask->as<float>() : nullptr;
  const Bool8 *mb =
      mask && mask->dtype == DType::b1 ? mask->as<Bool8>() : nullptr;
  float *outp = res.as<float>();
  const int64_t group = Hq / Hk;
  const float ninf = -std::numeric_limits<float>::infinity();

  // Keys [0, keysFor(i, limit)) may be attended by query row i (the causal
  // limit; `limit` without one).
  auto keysFor = [&](int64_t i, int64_t limit) {
    return causal ? std::min(limit, std::max<int64_t>(0, i + (T - Sq) + 1))
                  : limit;
  };
  // Row i's raw scores s[0, jEnd) of head h, batch b, scaled and masked in
  // place; returns their maximum.
  auto maskScores = [&](float *s, int64_t b, int64_t h, int64_t i,
                        int64_t jEnd) {
    const int64_t mRow = b * mStr[0] + h * mStr[1] + i * mStr[2];
    // No mask, or a float mask whose rows are contiguous: vectorized.
    if (!mb && (!mf || mStr[3] == 1))
      return scaleAddMax(s, jEnd, scale, mf ? mf + mRow : nullptr);
    float m = ninf;
    for (int64_t j = 0; j < jEnd; ++j) {
      float v = s[j] * scale;
      if (mf)
        v += mf[mRow + j * mStr[3]];
      else if (mb && !mb[mRow + j * mStr[3]])
        v = ninf;
      s[j] = v;
      m = std::max(m, v);
    }
    return m;
  };
  // s[j] = exp(s[j] - m) over [0, jEnd); returns their sum. Terms below
  // exp(-87) (the masked keys among them) are 0 (expShiftSum).
  auto expScores = [&](float *s, int64_t jEnd, float m) {
    return expShiftSum(s, jEnd, m);
  };

  // Row i's keys [0, jEnd) less the trailing ones its mask hides (false in
  // a bool mask, -1e3 or below in a float one: exports write -1e4, -inf or
  // float's lowest); `hidden` gets the largest mask value among those (-inf
  // for a bool mask). A row whose every key is hidden keeps them all (its
  // softmax runs over them, as the graph says). The caller skips the hidden
  // keys only where their scores cannot reach exp's cutoff (expShiftSum's
  // -87 below the row's maximum), so that they would have added exactly 0.
  auto lastKept = [&](int64_t b, int64_t h, int64_t i, int64_t jEnd,
                      float &hidden) {
    hidden = ninf;
    if (!mf && !mb)
      return jEnd;
    const int64_t mRow = b * mStr[0] + h * mStr[1] + i * mStr[2];
    for (int64_t j = jEnd; j > 0; --j) {
      const int64_t at = mRow + (j - 1) * mStr[3];
      if (mf ? mf[at] > -1e3f : bool(mb[at]))
        return j;
      if (mf)
        hidden = std::max(hidden, mf[at]);
    }
    hidden = ninf;
    return jEnd;
  };

  // Many query rows a head (prefill): blocks of rows through the GEMM
  // kernel, scores = Q K^T and out = P V, when every head's keys and values
  // are one run of [T, D] rows (no past: the new ones, each head's rows
  // strided where they are token-major; or the present copies).
  const bool contiguous = P == 0 || (presentK && presentV);
  if (Sq >= kAttentionBlockMin && contiguous && T > 0) {
    // Head bh's first key and value rows, and their strides.
    const bool own = P == 0;
    const int64_t ldk = own ? dims.kStr[2] : D, ldv = own ? dims.vStr[2] : Dv;
    auto keysOf = [&](int64_t bh) {
      return own ? kp + dims.kAt(bh / Hk, bh % Hk, 0)
                 : pk.as<float>() + bh * T * D;
    };
    auto valuesOf = [&](int64_t bh) {
      return own ? vp + dims.vAt(bh / Hk, bh % Hk, 0)
                 : pv.as<float>() + bh * T * Dv;
    };
    constexpr int64_t RB = 64; // query rows a block
    const int64_t blocks = (Sq + RB - 1) / RB;
    // With a mask: per key head, the largest key norm from key j on (the
    // bound on the scores of the keys a row's mask hides), once a call.
    std::vector<float> keyNormMax;
    if (mf || mb) {
      keyNormMax.assign(size_t(B * Hk * (T + 1)), 0.0f);
      parallelFor(ctx, B * Hk, 1, [&](int64_t begin, int64_t end) {
        for (int64_t bh = begin; bh < end; ++bh) {
          const float *kh = keysOf(bh);
          float *kmax = keyNormMax.data() + bh * (T + 1);
          for (int64_t j = T - 1; j >= 0; --j) {
            double n2 = 0;
            for (int64_t d = 0; d < D; ++d)
              n2 += double(kh[j * ldk + d]) * kh[j * ldk + d];
            kmax[j] = std::max(kmax[j + 1], float(std::sqrt(n2)));
          }
        }
      });
    }
    parallelFor(ctx, B * Hq * blocks, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> &kt = attnKeysT;
      std::vector<float> &sc = attnScores;
      for (int64_t task = begin; task < end; ++task) {
        const int64_t blk = task % blocks, bhq = task / blocks;
        const int64_t h = bhq % Hq, b = bhq / Hq;
        const int64_t bh = b * Hk + h / group;
        const int64_t i0 = blk * RB, i1 = std::min(Sq, i0 + RB);
        const int64_t rows = i1 - i0;
        // Keys [0, rowFull[r]) may be attended by row r (the causal limit);
        // the block first tries without the trailing keys the mask hides
        // (lastKept), [0, rowEnd[r]), and computes them after all if a
        // row's bound does not rule them out.
        int64_t rowEnd[RB], rowFull[RB];
        float hidden[RB];
        for (int64_t r = 0; r < rows; ++r) {
          rowFull[r] = keysFor(i0 + r, T);
          rowEnd[r] = lastKept(b, h, i0 + r, rowFull[r], hidden[r]);
        }
        const int64_t ldo = dims.oStr[2];
        float *orow0 = outp + dims.oAt(b, h, i0);
        const float *kh = keysOf(bh);
      again:
        int64_t jMax = 0;
        for (int64_t r = 0; r < rows; ++r)
          jMax = std::max(jMax, rowEnd[r]);
        if (jMax == 0) {
          for (int64_t r = 0; r < rows; ++r)
            std::fill(orow0 + r * ldo, orow0 + r * ldo + Dv, 0.0f);
          continue;
        }
        const float *kmax = keyNormMax.data() + bh * (T + 1);
        // K^T [D, jMax] of this head, 16 keys at a time (whole cache lines
        // of K^T written, 16 rows of K read).
        kt.resize(size_t(D * jMax));
        for (int64_t j0 = 0; j0 < jMax; j0 += 16) {
          const int64_t j1 = std::min(jMax, j0 + 16);
          for (int64_t d = 0; d < D; ++d)
            for (int64_t j = j0; j < j1; ++j)
              kt[size_t(d * jMax + j)] = kh[j * ldk + d];
        }
        sc.resize(size_t(rows * jMax));
        GemmArgs g;
        g.M = rows;
        g.K = D;
        g.N = jMax;
        g.A = qp + dims.qAt(b, h, i0);
        g.lda = dims.qStr[2];
        g.B = kt.data();
        g.ldb = jMax;
        g.C = sc.data();
        g.ldc = jMax;
        gemm(nullptr, g);
        // Softmax numerators per row (scaled, masked); 1 / sum kept.
        double inv[RB];
        bool empty[RB];
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r;
          float *srow = sc.data() + r * jMax;
          const int64_t jEnd = rowEnd[r];
          const float m = maskScores(srow, b, h, i, jEnd);
          if (jEnd < rowFull[r]) {
            // A hidden key's score is at most |q| max|k| |scale| + its mask
            // value; below m - 88 its exp would have been 0.
            const float *qr = qp + dims.qAt(b, h, i);
            double q2 = 0;
            for (int64_t d = 0; d < D; ++d)
              q2 += double(qr[d]) * qr[d];
            const double bound = std::sqrt(q2) * double(kmax[jEnd]) *
                                     std::fabs(double(scale)) +
                                 double(hidden[r]);
            if (!(bound < double(m) - 88.0)) {
              for (int64_t rr = 0; rr < rows; ++rr)
                rowEnd[rr] = rowFull[rr];
              goto again;
            }
          }
          empty[r] = m == ninf || m != m;
          if (empty[r]) {
            inv[r] = m != m ? double(m) : 0.0;
            std::fill(srow, srow + jMax, 0.0f);
            continue;
          }
          const double sum = expScores(srow, jEnd, m);
          std::fill(srow + jEnd, srow + jMax, 0.0f);
          inv[r] = 1.0 / sum;
        }
        // out = P V, then each row times 1 / sum.
        GemmArgs o;
        o.M = rows;
        o.K = jMax;
        o.N = Dv;
        o.A = sc.data();
        o.lda = jMax;
        o.B = valuesOf(bh);
        o.ldb = ldv;
        o.C = orow0;
        o.ldc = ldo;
        gemm(nullptr, o);
        for (int64_t r = 0; r < rows; ++r) {
          float *orow = orow0 + r * ldo;
          if (empty[r]) {
            std::fill(orow, orow + Dv, float(inv[r])); // 0, or NaN
            continue;
          }
          const float f = float(inv[r]);
          for (int64_t d = 0; d < Dv; ++d)
            orow[d] *= f;
        }
      }
    });
    if (presentK)
      *presentK = pk;
    if (presentV)
      *presentV = pv;
    out = res;
    return true;
  }

  parallelFor(ctx, B * Hq * Sq, grainFor(T * (D + Dv)),
              [&](int64_t begin, int64_t end) {
                std::vector<float> &sc = attnScores;
                std::vector<float> &acc = attnAcc;
                sc.resize(size_t(T));
                acc.resize(size_t(Dv));
                for (int64_t row = begin; row < end; ++row) {
                  const int64_t i = row % Sq, h = (row / Sq) % Hq,
                                b = row / (Sq * Hq);
                  const int64_t hk = h / group;
                  const int64_t bh = b * Hk + hk;
                  const float *qr = qp + dims.qAt(b, h, i);
                  float *orow = outp + dims.oAt(b, h, i);
                  const int64_t jEnd = keysFor(i, T);
                  for (int64_t j = 0; j < jEnd; ++j) {
                    const float *key = j < P ? pkp + (bh * P + j) * D
                                             : kp + dims.kAt(b, hk, j - P);
                    sc[size_t(j)] = dot(qr, key, D);
                  }
                  const float m = maskScores(sc.data(), b, h, i, jEnd);
                  std::fill(acc.begin(), acc.end(), 0.0f);
                  if (m == ninf || m != m) {
                    // No key can be attended (or NaN scores): zeros, resp. NaN.
                    const float fillv = m != m ? m : 0.0f;
                    std::fill(orow, orow + Dv, fillv);
                    continue;
                  }
                  const double sum = expScores(sc.data(), jEnd, m);
                  for (int64_t j = 0; j < jEnd; ++j) {
                    const float p = sc[size_t(j)];
                    if (p == 0.0f)
                      continue;
                    const float *val = j < P ? pvp + (bh * P + j) * Dv
                                             : vp + dims.vAt(b, hk, j - P);
                    axpy(p, val, acc.data(), Dv);
                  }
                  const float inv = float(1.0 / sum);
                  for (int64_t d = 0; d < Dv; ++d)
                    orow[d] = acc[size_t(d)] * inv;
                }
              });
  if (presentK)
    *presentK = pk;
  if (presentV)
    *presentV = pv;
  out = res;
  return true;
}

//===----------------------------------------------------------------------===//
// Embedding and batch norm
//===----------------------------------------------------------------------===//

namespace {
/// Id i of an int64 or int32 ids tensor.
int64_t idAt(const Tensor &ids, int64_t i) {
  return ids.dtype == DType::i64 ? ids.as<int64_t>()[i]
                                 : int64_t(ids.as<int32_t>()[i]);
}

/// The table row of id i: ONNX Gather's indices, so -V..-1 count from the
/// end (idsInRange has checked the range).
int64_t rowAt(const Tensor &ids, int64_t i, int64_t V) {
  const int64_t id = idAt(ids, i);
  return id < 0 ? id + V : id;
}

/// Fails naming the first id outside [-V, V) (`which`: the table's name in
/// the message, empty for a lone table).
bool idsInRange(Context &ctx, const Tensor &ids, int64_t V,
                const std::string &which) {
  for (int64_t i = 0, n = ids.numel(); i < n; ++i) {
    const int64_t id = idAt(ids, i);
    if (id < -V || id >= V)
      return ctx.fail("embedding: id " + std::to_string(id) + " at position " +
                      std::to_string(i) + " is outside " + which + "[-" +
                      std::to_string(V) + ", " + std::to_string(V) + ")");
  }
  return true;
}
} // namespace

bool embedding(Context &ctx, const Tensor &table, const Tensor &ids,
               int outSlot, Tensor &out) {
  if (!checkTensor(ctx, "embedding", "table", table) ||
      !checkTensor(ctx, "embedding", "ids", ids))
    return false;
  if (table.rank != 2)
    return ctx.fail("embedding: table must be [V, D], got " + table.describe());
  if (ids.dtype != DType::i64 && ids.dtype != DType::i32)
    return ctx.fail("embedding: ids must be int64 or int32, got " +
                    ids.describe());
  if (ids.rank + 1 > kMaxRank)
    return ctx.fail("embedding: ids " + ids.describe() + " have too many dims");
  const int64_t V = table.shape[0], D = table.shape[1], n = ids.numel();
  if (!idsInRange(ctx, ids, V, ""))
    return false;
  int64_t shape[kMaxRank];
  for (int d = 0; d < ids.rank; ++d)
    shape[d] = ids.shape[d];
  shape[ids.rank] = D;
  Tensor r;
  if (!allocateOut(ctx, "embedding", outSlot, r, table.dtype, ids.rank + 1,
                   shape))
    return false;
  const size_t rowBytes = size_t(D) * dtypeSize(table.dtype);
  const char *src = static_cast<const char *>(table.data);
  char *dst = static_cast<char *>(r.data);
  if (rowBytes)
    parallelFor(ctx, n, grainFor(int64_t(rowBytes) / 4),
                [&](int64_t b, int64_t e) {
                  for (int64_t i = b; i < e; ++i)
                    std::memcpy(dst + size_t(i) * rowBytes,
                                src + size_t(rowAt(ids, i, V)) * rowBytes,
                                rowBytes);
                });
  out = r;
  return true;
}

bool embedding(Context &ctx, const Tensor &table, const Tensor &ids,
               const Tensor &table2, const Tensor &ids2, int outSlot,
               Tensor &out) {
  // The first lookup writes the output; the second's rows are added in
  // place (each value of the output is one sum, as an add of the two
  // lookups computes it).
  if (table.dtype != DType::f32 || table2.dtype != DType::f32)
    return ctx.fail("embedding: a sum of two lookups needs float32 tables, "
                    "got " + table.describe() + " and " + table2.describe());
  if (!checkEmbeddingPair(ctx, table, ids, table2, ids2))
    return false;
  if (ids2.dtype != DType::i64 && ids2.dtype != DType::i32)
    return ctx.fail("embedding: ids must be int64 or int32, got " +
                    ids2.describe());
  const int64_t D = table2.shape[1], n = ids2.numel();
  if (!idsInRange(ctx, ids2, table2.shape[0], "the second table's ") ||
      !embedding(ctx, table, ids, outSlot, out))
    return false;
  float *y = out.as<float>();
  const float *t2 = table2.as<float>();
  if (D > 0)
    parallelFor(ctx, n, grainFor(D), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float *row = t2 + rowAt(ids2, i, table2.shape[0]) * D;
        float *o = y + i * D;
        for (int64_t c = 0; c < D; ++c)
          o[c] += row[c];
      }
    });
  return true;
}

bool batchNorm(Context &ctx, const Tensor &x, const Tensor &scale,
               const Tensor &bias, const Tensor &mean, const Tensor &var,
               float epsilon, Activation act, int outSlot, Tensor &out) {
  const char *op = "batch_norm";
  if (!checkTensor(ctx, op, "input", x) ||
      !checkTensor(ctx, op, "scale", scale) ||
      !checkTensor(ctx, op, "bias", bias) ||
      !checkTensor(ctx, op, "mean", mean) ||
      !checkTensor(ctx, op, "var", var) || !checkFloat(ctx, op, x, "input"))
    return false;
  if (x.rank < 2)
    return ctx.fail("batch_norm: input must be [N, C, ...], got " +
                    x.describe());
  const int64_t N = x.shape[0], Cn = x.shape[1];
  const int64_t S = product(x.shape, 2, x.rank);
  for (const Tensor *t : {&scale, &bias, &mean, &var})
    if (t->dtype != x.dtype || t->numel() != Cn)
      return ctx.fail("batch_norm: " + t->describe() + " must have " +
                      std::to_string(Cn) + " elements of " +
                      dtypeName(x.dtype) + " (input " + x.describe() + ")");
  Tensor r;
  if (!allocateOut(ctx, op, outSlot, r, x.dtype, x.rank, x.shape))
    return false;
  dispatchFloat(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Arith<T>;
    using C = typename A::type;
    std::vector<C> a(static_cast<size_t>(Cn)), c(static_cast<size_t>(Cn));
    for (int64_t ch = 0; ch < Cn; ++ch) {
      double s = double(A::load(scale.as<T>()[ch])) /
                 std::sqrt(double(A::load(var.as<T>()[ch])) + double(epsilon));
      a[size_t(ch)] = C(s);
      c[size_t(ch)] = C(double(A::load(bias.as<T>()[ch])) -
                        double(A::load(mean.as<T>()[ch])) * s);
    }
    const T *in = x.as<T>();
    T *o = r.as<T>();
    parallelFor(ctx, N * Cn, grainFor(S), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const C av = a[size_t(p % Cn)], cv = c[size_t(p % Cn)];
        const T *xp = in + p * S;
        T *yp = o + p * S;
        withActivation(act, [&](auto fn) {
          for (int64_t i = 0; i < S; ++i)
            yp[i] = A::store(fn(A::load(xp[i]) * av + cv));
        });
      }
    });
  });
  out = r;
  return true;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

bool reduce(Context &ctx, Reduce kind, const Tensor &x, int naxes,
            const int64_t *axes, bool keepdims, int outSlot, Tensor &out) {
  const char *op = kind == Reduce::sum    ? "reduce_sum"
                   : kind == Reduce::mean ? "reduce_mean"
                   : kind == Reduce::max  ? "reduce_max"
                                          : "reduce_min";
  if (!checkTensor(ctx, op, "input", x))
    return false;
  if (!isFloat(x.dtype) && !isInt(x.dtype))
    return ctx.fail(std::string(op) + ": unsupported dtype " +
                    dtypeName(x.dtype));
  const int r = x.rank;
  bool red[kMaxRank] = {};
  if (naxes < 0 || (naxes > 0 && !axes))
    return ctx.fail(std::string(op) + ": invalid axes");
  if (naxes == 0) {
    for (int d = 0; d < r; ++d)
      red[d] = true;
  }
  for (int i = 0; i < naxes; ++i) {
    int64_t a;
    if (!normalizeAxis(ctx, op, axes[i], r, a))
      return false;
    if (red[a])
      return ctx.fail(std::string(op) + ": axis " + std::to_string(axes[i]) +
                      " is repeated");
    red[a] = true;
  }
  int64_t count = 1;
  int orank = 0;
  int64_t oshape[kMaxRank];
  for (int d = 0; d < r; ++d) {
    if (red[d])
      count *= x.shape[d];
    if (!red[d])
      oshape[orank++] = x.shape[d];
    else if (keepdims)
      oshape[orank++] = 1;
  }
  if (count == 0 && (kind == Reduce::max || kind == Reduce::min) &&
      product(oshape, 0, orank) != 0)
    return ctx.fail(std::string(op) +
                    ": reduction over an empty dimension "
                    "of " +
                    x.describe());
  Tensor res;
  if (!allocateOut(ctx, op, outSlot, res, x.dtype, orank, oshape))
    return false;
  const int64_t nOut = res.numel();
  if (nOut == 0) {
    out = res;
    return true;
  }
  // Collapse into alternating groups of kept / reduced dims.
  int g = 0;
  int64_t gsize[kMaxRank], gstride[kMaxRank];
  bool gred[kMaxRank];
  {
    int64_t str[kMaxRank];
    contiguousStrides(r, x.shape, str);
    for (int d = 0; d < r; ++d) {
      if (x.shape[d] == 1)
        continue;
      if (g > 0 && gred[g - 1] == red[d]) {
        gsize[g - 1] *= x.shape[d];
        gstride[g - 1] = str[d];
        continue;
      }
      gsize[g] = x.shape[d];
      gstride[g] = str[d];
      gred[g] = red[d];
      ++g;
    }
  }
  // Kept and reduced groups, outermost first.
  int nk = 0, nr = 0;
  int64_t ks[kMaxRank], kstr[kMaxRank], rs[kMaxRank], rstr[kMaxRank];
  for (int i = 0; i < g; ++i) {
    if (gred[i]) {
      rs[nr] = gsize[i];
      rstr[nr++] = gstride[i];
    } else {
      ks[nk] = gsize[i];
      kstr[nk++] = gstride[i];
    }
  }
  dispatchType(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Arith<T>;
    using C = typename A::type;
    const T *in = x.as<T>();
    T *o = res.as<T>();
    auto finish = [&](SumType<C> s) {
      return kind == Reduce::mean ? meanFromSum<C>(s, count) : fromSum<C>(s);
    };
    const bool isSum = kind == Reduce::sum || kind == Reduce::mean;
    const bool isMax = kind == Reduce::max;
    // Fast path: one reduced block followed by a kept block, [R, K1] or
    // [K0, R, K1]: accumulate rows of K1, in column chunks.
    const bool rows =
        nr == 1 && !gred[g - 1] && (g == 2 || (g == 3 && !gred[0]));
    if (rows) {
      const int64_t K0 = g == 3 ? gsize[0] : 1, R = gsize[g - 2];
      const int64_t K1 = gsize[g - 1];
      constexpr int64_t CW = 1024;
      const int64_t chunks = (K1 + CW - 1) / CW;
      parallelFor(
          ctx, K0 * chunks, grainFor(R * CW), [&](int64_t b, int64_t e) {
            std::vector<SumType<C>> sacc(isSum ? size_t(CW) : 0);
            for (int64_t t = b; t < e; ++t) {
              const int64_t o0 = t / chunks, c0 = t % chunks * CW;
              const int64_t w = std::min(CW, K1 - c0);
              const T *base = in + o0 * R * K1 + c0;
              T *dst = o + o0 * K1 + c0;
              if (isSum) {
                std::fill(sacc.begin(), sacc.end(), SumType<C>(0));
                for (int64_t i = 0; i < R; ++i)
                  for (int64_t j = 0; j < w; ++j)
                    sacc[size_t(j)] += toSum<C>(A::load(base[i * K1 + j]));
                for (int64_t j = 0; j < w; ++j)
                  dst[j] = A::store(finish(sacc[size_t(j)]));
              } else {
                for (int64_t j = 0; j < w; ++j)
                  dst[j] = base[j];
                for (int64_t i = 1; i < R; ++i)
                  for (int64_t j = 0; j < w; ++j) {
                    C cur = A::load(dst[j]), v = A::load(base[i * K1 + j]);
                    dst[j] =
                        A::store(isMax ? maxOf(cur, v) : minOf(cur, v));
                  }
              }
            }
          });
      return;
    }
    // General: per output element, walk the reduced groups (the last one
    // innermost; contiguous when the reduced dims are trailing).
    parallelFor(ctx, nOut, grainFor(count), [&](int64_t b, int64_t e) {
      for (int64_t oi = b; oi < e; ++oi) {
        int64_t base = 0, rem = oi;
        for (int i = nk - 1; i >= 0; --i) {
          base += (rem % ks[i]) * kstr[i];
          rem /= ks[i];
        }
        SumType<C> s = 0;
        C m = C(0);
        bool firstV = true;
        int64_t idx[kMaxRank] = {};
        const int64_t innerN = nr ? rs[nr - 1] : 1;
        const int64_t innerS = nr ? rstr[nr - 1] : 0;
        const int64_t outerN = nr ? count / innerN : 1;
        for (int64_t t = 0; t < outerN; ++t) {
          int64_t off = base;
          for (int i = 0; i < nr - 1; ++i)
            off += idx[i] * rstr[i];
          const T *p = in + off;
          if (isSum) {
            for (int64_t j = 0; j < innerN; ++j)
              s += toSum<C>(A::load(p[j * innerS]));
          } else {
            for (int64_t j = 0; j < innerN; ++j) {
              C v = A::load(p[j * innerS]);
              m = firstV ? v : isMax ? maxOf(m, v) : minOf(m, v);
              firstV = false;
            }
          }
          for (int i = nr - 2; i >= 0; --i) {
            if (++idx[i] < rs[i])
              break;
            idx[i] = 0;
          }
        }
        o[oi] = A::store(isSum ? finish(s) : m);
      }
    });
  });
  out = res;
  return true;
}

bool cumsum(Context &ctx, const Tensor &x, int64_t axis, bool exclusive,
            bool reverse, int outSlot, Tensor &out) {
  if (!checkTensor(ctx, "cumsum", "input", x))
    return false;
  if (!isFloat(x.dtype) && !isInt(x.dtype))
    return ctx.fail("cumsum: unsupported dtype " +
                    std::string(dtypeName(x.dtype)));
  if (x.rank < 1)
    return ctx.fail("cumsum: input must have rank >= 1, got " + x.describe());
  int64_t ax;
  if (!normalizeAxis(ctx, "cumsum", axis, x.rank, ax))
    return false;
  Tensor res;
  if (!allocateOut(ctx, "cumsum", outSlot, res, x.dtype, x.rank, x.shape))
    return false;
  const int64_t outer = product(x.shape, 0, int(ax)), n = x.shape[ax];
  const int64_t inner = product(x.shape, int(ax) + 1, x.rank);
  if (res.numel() == 0) {
    out = res;
    return true;
  }
  dispatchType(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Arith<T>;
    using C = typename A::type;
    const T *in = x.as<T>();
    T *o = res.as<T>();
    constexpr int64_t CW = 256;
    const int64_t chunks = (inner + CW - 1) / CW;
    parallelFor(ctx, outer * chunks, grainFor(n * CW),
                [&](int64_t b, int64_t e) {
                  std::vector<SumType<C>> acc(static_cast<size_t>(CW));
                  for (int64_t t = b; t < e; ++t) {
                    const int64_t ob = t / chunks, c0 = t % chunks * CW;
                    const int64_t w = std::min(CW, inner - c0);
                    std::fill(acc.begin(), acc.end(), SumType<C>(0));
                    for (int64_t s = 0; s < n; ++s) {
                      const int64_t i = reverse ? n - 1 - s : s;
                      const T *src = in + (ob * n + i) * inner + c0;
                      T *dst = o + (ob * n + i) * inner + c0;
                      for (int64_t j = 0; j < w; ++j) {
                        const SumType<C> v = toSum<C>(A::load(src[j]));
                        if (exclusive) {
                          dst[j] = A::store(fromSum<C>(acc[size_t(j)]));
                          acc[size_t(j)] += v;
                        } else {
                          acc[size_t(j)] += v;
                          dst[j] = A::store(fromSum<C>(acc[size_t(j)]));
                        }
                      }
                    }
                  }
                });
  });
  out = res;
  return true;
}

bool trilu(Context &ctx, const Tensor &x, bool upper, int64_t k, int outSlot,
           Tensor &out) {
  if (!checkTensor(ctx, "trilu", "input", x))
    return false;
  if (x.rank < 2)
    return ctx.fail("trilu: input must have rank >= 2, got " + x.describe());
  Tensor res;
  if (!allocateOut(ctx, "trilu", outSlot, res, x.dtype, x.rank, x.shape))
    return false;
  const int64_t R = x.shape[x.rank - 2], Cn = x.shape[x.rank - 1];
  const int64_t rows = product(x.shape, 0, x.rank - 1);
  // Clamp k so that i + k cannot overflow.
  const int64_t kk = std::clamp<int64_t>(k, -(R + 1), Cn + 1);
  const size_t es = dtypeSize(x.dtype);
  const char *src = static_cast<const char *>(x.data);
  char *dst = static_cast<char *>(res.data);
  if (res.numel() != 0)
    parallelFor(ctx, rows, grainFor(Cn), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const int64_t i = row % R;
        // Kept columns: [lo, hi).
        int64_t lo, hi;
        if (upper) {
          lo = std::clamp<int64_t>(i + kk, 0, Cn);
          hi = Cn;
        } else {
          lo = 0;
          hi = std::clamp<int64_t>(i + kk + 1, 0, Cn);
        }
        char *d = dst + size_t(row * Cn) * es;
        const char *s = src + size_t(row * Cn) * es;
        if (lo > 0)
          std::memset(d, 0, size_t(lo) * es);
        if (hi > lo)
          std::memcpy(d + size_t(lo) * es, s + size_t(lo) * es,
                      size_t(hi - lo) * es);
        if (Cn > hi)
          std::memset(d + size_t(hi) * es, 0, size_t(Cn - hi) * es);
      }
    });
  out = res;
  return true;
}

} // namespace sparsec::rt::ops
