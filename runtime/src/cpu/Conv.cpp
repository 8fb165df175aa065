//===- Conv.cpp - convolution and pooling -----------------------*- C++ -*-===//
//
// Part of the sparsec project.
//
// NCHW convolution with 1 to 3 spatial dims (handled as 3-D with leading
// size-1 dims), groups, pads, strides and dilations:
//
//  * a group with one input channel (depthwise): direct convolution,
//    parallel over output planes, each output row a sum of vectorised
//    axpys of input rows (one per tap; rows split into stride phases);
//  * otherwise, per image and group, im2col into a [C/g * kernel, P] panel
//    (P output positions, in chunks) and the f32 GEMM of Linear.cpp with
//    the weights [M/g, C/g * kernel] as the left operand; a pointwise
//    convolution without padding or stride reads the input directly.
//
// Max and average pooling over 1 to 3 spatial dims, global when no kernel
// is given.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include <algorithm>

namespace sparsec::rt::ops {

using namespace detail;

namespace {

/// Spatial geometry normalised to 3 dims.
struct Geometry {
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, padB[3] = {0, 0, 0}, padE[3] = {0, 0, 0};
  int64_t dil[3] = {1, 1, 1};
  int64_t inSize() const { return in[0] * in[1] * in[2]; }
  int64_t outSize() const { return out[0] * out[1] * out[2]; }
  int64_t kSize() const { return k[0] * k[1] * k[2]; }
};

/// Fills `g` from the op arguments; fails with a message naming `op`.
bool makeGeometry(Context &ctx, const char *op, const Tensor &x,
                  const int64_t *kernel, const int64_t *strides,
                  const int64_t *pads, const int64_t *dilations, Geometry &g) {
  const int ns = x.rank - 2;
  for (int i = 0; i < ns; ++i) {
    const int d = 3 - ns + i;
    g.in[d] = x.shape[2 + i];
    g.k[d] = kernel[i];
    g.stride[d] = strides ? strides[i] : 1;
    g.padB[d] = pads ? pads[i] : 0;
    g.padE[d] = pads ? pads[ns + i] : 0;
    g.dil[d] = dilations ? dilations[i] : 1;
    if (g.k[d] < 1 || g.stride[d] < 1 || g.dil[d] < 1 || g.padB[d] < 0 ||
        g.padE[d] < 0 || g.k[d] > (int64_t(1) << 32) ||
        g.dil[d] > (int64_t(1) << 32) || g.padB[d] > (int64_t(1) << 40) ||
        g.padE[d] > (int64_t(1) << 40))
      return ctx.fail(
          std::string(op) + ": invalid kernel " + std::to_string(g.k[d]) +
          ", stride " + std::to_string(g.stride[d]) + ", dilation " +
          std::to_string(g.dil[d]) + " or pads " + std::to_string(g.padB[d]) +
          "/" + std::to_string(g.padE[d]) + " on spatial dim " +
          std::to_string(i));
    const int64_t span = g.dil[d] * (g.k[d] - 1) + 1;
    const int64_t padded = g.in[d] + g.padB[d] + g.padE[d];
    if (padded < span)
      return ctx.fail(std::string(op) + ": kernel extent " +
                      std::to_string(span) + " exceeds the padded input " +
                      std::to_string(padded) + " on spatial dim " +
                      std::to_string(i) + " of " + x.describe());
    g.out[d] = (padded - span) / g.stride[d] + 1;
  }
  return true;
}

/// col[r, p - p0] for rows r of (c, kd, kh, kw) and output positions
/// [p0, p1) of image channels `x` (Cg planes of g.inSize()).
void im2col(Context &ctx, const float *x, int64_t Cg, const Geometry &g,
            int64_t p0, int64_t p1, float *col) {
  const int64_t kSize = g.kSize(), width = p1 - p0;
  parallelFor(ctx, Cg * kSize, std::max<int64_t>(1, 8192 / width),
              [&](int64_t b, int64_t e) {
                for (int64_t r = b; r < e; ++r) {
                  const int64_t c = r / kSize, kr = r % kSize;
                  const int64_t kd = kr / (g.k[1] * g.k[2]);
                  const int64_t kh = kr / g.k[2] % g.k[1], kw = kr % g.k[2];
                  const float *plane = x + c * g.inSize();
                  float *dst = col + r * width;
                  int64_t p = p0;
                  while (p < p1) {
                    const int64_t ow0 = p % g.out[2];
                    const int64_t oh = p / g.out[2] % g.out[1];
                    const int64_t od = p / (g.out[1] * g.out[2]);
                    const int64_t n = std::min(p1 - p, g.out[2] - ow0);
                    const int64_t id =
                        od * g.stride[0] - g.padB[0] + kd * g.dil[0];
                    const int64_t ih =
                        oh * g.stride[1] - g.padB[1] + kh * g.dil[1];
                    float *o = dst + (p - p0);
                    if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) {
                      std::fill(o, o + n, 0.0f);
                    } else {
                      const float *row = plane + (id * g.in[1] + ih) * g.in[2];
                      const int64_t s = g.stride[2];
                      int64_t iw = ow0 * s - g.padB[2] + kw * g.dil[2];
                      if (s == 1 && iw >= 0 && iw + n <= g.in[2]) {
                        std::memcpy(o, row + iw, size_t(n) * sizeof(float));
                      } else {
                        for (int64_t j = 0; j < n; ++j, iw += s)
                          o[j] = (iw >= 0 && iw < g.in[2]) ? row[iw] : 0.0f;
                      }
                    }
                    p += n;
                  }
                }
              });
}

thread_local std::vector<float> colBuffer;

/// Output positions ow whose input column ow * s + off lies in [0, in):
/// [lo, hi), empty when lo >= hi.
void tapRange(int64_t off, int64_t s, int64_t in, int64_t out, int64_t &lo,
              int64_t &hi) {
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = in - 1 - off < 0 ? 0 : std::min(out, (in - 1 - off) / s + 1);
}

/// Depthwise convolution of one plane (one input channel, output plane
/// `m`): per output row, the row starts from the bias and each tap whose
/// input row exists adds w * (that row, from the tap's first column with
/// the stride) over the output columns it covers, an axpy (vectorised).
/// With a stride above 1 each input row is first split into its stride
/// phases, so that every tap reads contiguous columns. `phases` is scratch.
void depthwisePlane(const float *xin, const float *wk, float bias,
                    Activation act, const Geometry &g, float *yo,
                    std::vector<float> &phases) {
  const int64_t s = g.stride[2], inW = g.in[2], outW = g.out[2];
  const int64_t phaseLen = (inW + s - 1) / s;
  if (s > 1)
    phases.resize(size_t(s * phaseLen));
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      float *yrow = yo + (od * g.out[1] + oh) * outW;
      std::fill(yrow, yrow + outW, bias);
      for (int64_t kd = 0; kd < g.k[0]; ++kd) {
        const int64_t id = od * g.stride[0] - g.padB[0] + kd * g.dil[0];
        if (id < 0 || id >= g.in[0])
          continue;
        for (int64_t kh = 0; kh < g.k[1]; ++kh) {
          const int64_t ih = oh * g.stride[1] - g.padB[1] + kh * g.dil[1];
          if (ih < 0 || ih >= g.in[1])
            continue;
          const float *row = xin + (id * g.in[1] + ih) * inW;
          if (s > 1)
            for (int64_t r = 0; r < s; ++r)
              for (int64_t j = 0; j * s + r < inW; ++j)
                phases[size_t(r * phaseLen + j)] = row[j * s + r];
          const float *wr = wk + (kd * g.k[1] + kh) * g.k[2];
          for (int64_t kw = 0; kw < g.k[2]; ++kw) {
            const int64_t off = kw * g.dil[2] - g.padB[2];
            int64_t lo, hi;
            tapRange(off, s, inW, outW, lo, hi);
            if (lo >= hi)
              continue;
            const int64_t iw = lo * s + off; // >= 0
            const float *src =
                s == 1 ? row + iw
                       : phases.data() + (iw % s) * phaseLen + iw / s;
            axpy(wr[kw], src, yrow + lo, hi - lo);
          }
        }
      }
      applyActivation(act, yrow, outW);
    }
}

} // namespace

bool conv(Context &ctx, const Tensor &x, const Tensor &w, const Tensor *bias,
          const int64_t *strides, const int64_t *pads, const int64_t *dilations,
          int64_t group, Activation act, int outSlot, Tensor &out) {
  if (!checkTensor(ctx, "conv", "input", x) ||
      !checkTensor(ctx, "conv", "weight", w) ||
      (bias && !checkTensor(ctx, "conv", "bias", *bias)))
    return false;
  if (x.dtype != DType::f32 || w.dtype != DType::f32 ||
      (bias && bias->dtype != DType::f32))
    return ctx.fail("conv: only float32 is supported, got input " +
                    x.describe() + " and weight " + w.describe());
  if (x.rank < 3 || x.rank > 5 || w.rank != x.rank)
    return ctx.fail("conv: input " + x.describe() + " and weight " +
                    w.describe() + " must both be [N, C, 1-3 spatial dims]");
  const int64_t N = x.shape[0], C = x.shape[1], M = w.shape[0];
  if (group < 1 || C % group != 0 || M % group != 0 || w.shape[1] != C / group)
    return ctx.fail("conv: weight " + w.describe() + " does not match input " +
                    x.describe() + " with " + std::to_string(group) +
                    " groups");
  if (bias && bias->numel() != M)
    return ctx.fail("conv: bias " + bias->describe() + " must have " +
                    std::to_string(M) + " elements");
  Geometry g;
  if (!makeGeometry(ctx, "conv", x, w.shape + 2, strides, pads, dilations, g))
    return false;
  const int ns = x.rank - 2;
  int64_t shape[5] = {N, M};
  for (int i = 0; i < ns; ++i)
    shape[2 + i] = g.out[3 - ns + i];
  Tensor res;
  if (!allocateOut(ctx, "conv", outSlot, res, DType::f32, x.rank, shape))
    return false;
  if (res.numel() == 0) {
    out = res;
    return true;
  }
  const int64_t Cg = C / group, Mg = M / group;
  const int64_t P = g.outSize(), S = g.inSize(), kSize = g.kSize();
  const int64_t Kdim = Cg * kSize;
  const float *xp = x.as<float>(), *wp = w.as<float>();
  const float *bp = bias ? bias->as<float>() : nullptr;
  float *yp = res.as<float>();

  if (Cg == 1) {
    // Depthwise: one input channel per group, a plane at a time.
    parallelFor(ctx, N * M, std::max<int64_t>(1, 4096 / (P * kSize)),
                [&](int64_t b, int64_t e) {
                  std::vector<float> &phases = colBuffer;
                  for (int64_t plane = b; plane < e; ++plane) {
                    const int64_t n = plane / M, m = plane % M, c = m / Mg;
                    depthwisePlane(xp + (n * C + c) * S, wp + m * kSize,
                                   bp ? bp[m] : 0.0f, act, g, yp + plane * P,
                                   phases);
                  }
                });
    out = res;
    return true;
  }

  // im2col + GEMM. Pointwise convolutions read the input directly.
  bool pointwise = kSize == 1;
  for (int d = 0; d < 3; ++d)
    pointwise =
        pointwise && g.stride[d] == 1 && g.padB[d] == 0 && g.padE[d] == 0;
  const int64_t chunk =
      pointwise ? P
                : std::min(P, std::max<int64_t>(
                                  64, ((int64_t(1) << 21) / Kdim) / 16 * 16));
  std::vector<float> &col = colBuffer;
  if (!pointwise)
    col.resize(size_t(Kdim * chunk));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t gi = 0; gi < group; ++gi) {
      const float *xg = xp + (n * C + gi * Cg) * S;
      float *yg = yp + (n * M + gi * Mg) * P;
      for (int64_t p0 = 0; p0 < P; p0 += chunk) {
        const int64_t p1 = std::min(P, p0 + chunk);
        GemmArgs a;
        a.M = Mg;
        a.N = p1 - p0;
        a.K = Kdim;
        a.A = wp + gi * Mg * Kdim;
        a.lda = Kdim;
        if (pointwise) {
          a.B = xg + p0;
          a.ldb = S;
        } else {
          im2col(ctx, xg, Cg, g, p0, p1, col.data());
          a.B = col.data();
          a.ldb = p1 - p0;
        }
        a.C = yg + p0;
        a.ldc = P;
        gemm(&ctx.pool, a);
      }
      // The epilogue: bias and activation in one pass.
      if (bp || act != Activation::none)
        parallelFor(ctx, Mg, std::max<int64_t>(1, 16384 / P),
                    [&](int64_t b, int64_t e) {
                      for (int64_t m = b; m < e; ++m) {
                        float *row = yg + m * P;
                        if (bp) {
                          const float bv = bp[gi * Mg + m];
                          for (int64_t p = 0; p < P; ++p)
                            row[p] += bv;
                        }
                        applyActivation(act, row, P);
                      }
                    });
    }
  out = res;
  return true;
}

bool pool(Context &ctx, Pool kind, const Tensor &x, const int64_t *kernel,
          const int64_t *strides, const int64_t *pads, bool countIncludePad,
          int outSlot, Tensor &out) {
  const char *op = kind == Pool::max ? "max_pool" : "average_pool";
  if (!checkTensor(ctx, op, "input", x))
    return false;
  if (!isFloat(x.dtype))
    return ctx.fail(std::string(op) + ": input must be a float tensor, got " +
                    x.describe());
  if (x.rank < 3 || x.rank > 5)
    return ctx.fail(std::string(op) +
                    ": input must be [N, C, 1-3 spatial "
                    "dims], got " +
                    x.describe());
  const int ns = x.rank - 2;
  Geometry g;
  if (kernel) {
    if (!makeGeometry(ctx, op, x, kernel, strides, pads, nullptr, g))
      return false;
  } else {
    if (!makeGeometry(ctx, op, x, x.shape + 2, nullptr, nullptr, nullptr, g))
      return false;
  }
  int64_t shape[5] = {x.shape[0], x.shape[1]};
  for (int i = 0; i < ns; ++i)
    shape[2 + i] = g.out[3 - ns + i];
  Tensor res;
  if (!allocateOut(ctx, op, outSlot, res, x.dtype, x.rank, shape))
    return false;
  const int64_t planes = x.shape[0] * x.shape[1];
  const int64_t P = g.outSize(), S = g.inSize();
  if (res.numel() == 0) {
    out = res;
    return true;
  }
  dispatchType(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, Half>) {
      using A = Arith<T>;
      using C = typename A::type;
      const T *in = x.as<T>();
      T *o = res.as<T>();
      parallelFor(
          ctx, planes, std::max<int64_t>(1, 4096 / (P * g.kSize())),
          [&](int64_t b, int64_t e) {
            for (int64_t plane = b; plane < e; ++plane) {
              const T *xin = in + plane * S;
              T *yo = o + plane * P;
              for (int64_t od = 0; od < g.out[0]; ++od)
                for (int64_t oh = 0; oh < g.out[1]; ++oh)
                  for (int64_t ow = 0; ow < g.out[2]; ++ow) {
                    const int64_t pos[3] = {od, oh, ow};
                    int64_t lo[3], hi[3];
                    int64_t padded = 1;
                    for (int d = 0; d < 3; ++d) {
                      const int64_t s = pos[d] * g.stride[d] - g.padB[d];
                      const int64_t eEnd = s + g.k[d];
                      // Window clipped to the padded input, then to the input.
                      padded *= std::min(eEnd, g.in[d] + g.padE[d]) -
                                std::max(s, -g.padB[d]);
                      lo[d] = std::max<int64_t>(s, 0);
                      hi[d] = std::min(eEnd, g.in[d]);
                    }
                    C m = -std::numeric_limits<C>::infinity();
                    double sum = 0;
                    int64_t cnt = 0;
                    for (int64_t id = lo[0]; id < hi[0]; ++id)
                      for (int64_t ih = lo[1]; ih < hi[1]; ++ih) {
                        const T *row = xin + (id * g.in[1] + ih) * g.in[2];
                        for (int64_t iw = lo[2]; iw < hi[2]; ++iw) {
                          const C v = A::load(row[iw]);
                          if (kind == Pool::max) {
                            if (m == m && (v != v || v > m))
                              m = v; // NaN propagates and then sticks
                          } else {
                            sum += double(v);
                          }
                          ++cnt;
                        }
                      }
                    C r;
                    if (kind == Pool::max)
                      r = m;
                    else {
                      const int64_t div = countIncludePad ? padded : cnt;
                      r = div > 0 ? C(sum / double(div)) : C(0);
                    }
                    yo[(od * g.out[1] + oh) * g.out[2] + ow] = A::store(r);
                  }
            }
          });
    }
  });
  out = res;
  return true;
}

} // namespace sparsec::rt::ops
