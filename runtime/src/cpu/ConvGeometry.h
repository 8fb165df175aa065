//===- ConvGeometry.h - spatial geometry of convolution and pooling -*- C++
//-*-===//
//
// Part of the sparsec project.
//
// The spatial geometry of an NCHW convolution or pooling window (1 to 3
// spatial dims, normalised to 3 with leading size-1 dims) and its checks,
// shared by the x86 kernels and the CUDA runtime so that both accept the
// same arguments and give the same output shapes and messages.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_CPU_CONVGEOMETRY_H
#define SPARSEC_RT_CPU_CONVGEOMETRY_H

#include "Common.h"

#include <cstdint>
#include <string>
#include <utility>

namespace sparsec::rt::ops::detail {

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
inline bool makeGeometry(Context &ctx, const char *op, const Tensor &x,
                         const int64_t *kernel, const int64_t *strides,
                         const int64_t *pads, const int64_t *dilations,
                         Geometry &g) {
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

/// The output shape [N, channels, out...] of geometry `g` over input `x`.
inline void spatialShape(const Tensor &x, int64_t channels, const Geometry &g,
                         int64_t shape[5]) {
  const int ns = x.rank - 2;
  shape[0] = x.shape[0];
  shape[1] = channels;
  for (int i = 0; i < ns; ++i)
    shape[2 + i] = g.out[3 - ns + i];
}

/// Checks a convolution's operands (float32, [N, C, 1-3 spatial dims],
/// weight [M, C / group, kernel...] (float16 too where `halfWeights`),
/// bias [M]) and fills its geometry and output shape.
inline bool convOperands(Context &ctx, const Tensor &x, const Tensor &w,
                         const Tensor *bias, const int64_t *strides,
                         const int64_t *pads, const int64_t *dilations,
                         int64_t group, Geometry &g, int64_t shape[5],
                         bool halfWeights = false) {
  if (!checkTensor(ctx, "conv", "input", x) ||
      !checkTensor(ctx, "conv", "weight", w) ||
      (bias && !checkTensor(ctx, "conv", "bias", *bias)))
    return false;
  if (x.dtype != DType::f32 ||
      (w.dtype != DType::f32 &&
       !(halfWeights && (w.dtype == DType::f16 || w.dtype == DType::bf16))) ||
      (bias && bias->dtype != DType::f32))
    return ctx.fail(std::string("conv: only float32") +
                    (halfWeights ? " (and float16 or bfloat16 weights)" : "") +
                    " is supported, got input " + x.describe() +
                    " and weight " + w.describe());
  if (x.rank < 3 || x.rank > 5 || w.rank != x.rank)
    return ctx.fail("conv: input " + x.describe() + " and weight " +
                    w.describe() + " must both be [N, C, 1-3 spatial dims]");
  const int64_t C = x.shape[1], M = w.shape[0];
  if (group < 1 || C % group != 0 || M % group != 0 || w.shape[1] != C / group)
    return ctx.fail("conv: weight " + w.describe() + " does not match input " +
                    x.describe() + " with " + std::to_string(group) +
                    " groups");
  if (bias && bias->numel() != M)
    return ctx.fail("conv: bias " + bias->describe() + " must have " +
                    std::to_string(M) + " elements");
  if (!makeGeometry(ctx, "conv", x, w.shape + 2, strides, pads, dilations, g))
    return false;
  spatialShape(x, M, g, shape);
  return true;
}

/// Checks a pooling's input ([N, C, 1-3 spatial dims], a float type) and
/// fills its geometry and output shape; no kernel means global pooling.
inline bool poolGeometry(Context &ctx, const char *op, const Tensor &x,
                         const int64_t *kernel, const int64_t *strides,
                         const int64_t *pads, Geometry &g, int64_t shape[5]) {
  if (!checkTensor(ctx, op, "input", x))
    return false;
  if (!isFloat(x.dtype))
    return ctx.fail(std::string(op) + ": input must be a float tensor, got " +
                    x.describe());
  if (x.rank < 3 || x.rank > 5)
    return ctx.fail(std::string(op) +
                    ": input must be [N, C, 1-3 spatial dims], got " +
                    x.describe());
  if (!(kernel ? makeGeometry(ctx, op, x, kernel, strides, pads, nullptr, g)
               : makeGeometry(ctx, op, x, x.shape + 2, nullptr, nullptr,
                              nullptr, g)))
    return false;
  spatialShape(x, x.shape[1], g, shape);
  return true;
}

/// Checks a batch norm's parameters for `channels` channels of input `x`
/// (each float32 with one element a channel), naming `op` in the message.
inline bool normOperands(Context &ctx, const char *op, const Tensor &x,
                         int64_t channels, const ConvNorm &n) {
  const std::pair<const char *, const Tensor *> params[] = {
      {"scale", n.scale}, {"bias", n.bias}, {"mean", n.mean}, {"var", n.var}};
  for (auto [what, t] : params) {
    if (!checkTensor(ctx, op, what, *t))
      return false;
    if (t->dtype != DType::f32 || t->numel() != channels)
      return ctx.fail(std::string(op) + ": " + what + " " + t->describe() +
                      " must have " + std::to_string(channels) +
                      " float32 elements (input " + x.describe() + ")");
  }
  return true;
}

} // namespace sparsec::rt::ops::detail

#endif // SPARSEC_RT_CPU_CONVGEOMETRY_H
