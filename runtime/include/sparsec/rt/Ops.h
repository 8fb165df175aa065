//===- Ops.h - the op library generated code calls --------------*- C++ -*-===//
//
// Part of the sparsec project.
//
// One function per sparsec op. Each computes the result shape from its
// inputs (including values of shape tensors, so dynamic dims are runtime
// values), allocates the result in the memory slot the compiler assigned
// (ctx.allocate), and computes it, using ctx.pool for threads. Inputs are
// never written. On invalid input (mismatched shapes, out-of-range ids,
// a reshape that does not preserve the element count, ...) an op calls
// ctx.fail("<op>: <what>") and returns false; generated code then stops.
//
// Kernels are shared by every layer and model; they are specialised only
// through their arguments. Float ops compute in f32 (f64 for f64 tensors);
// integer ops in their own type. Broadcasting follows numpy rules.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_OPS_H
#define SPARSEC_RT_OPS_H

#include "sparsec/rt/Runtime.h"

namespace sparsec::rt::ops {

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

enum class Unary {
  relu, gelu, gelu_tanh, silu, sigmoid, tanh, exp, log, erf, sqrt,
  reciprocal, abs, neg, logical_not, sin, cos
};
/// Float dtypes for all; abs/neg also for signed integers; logical_not for b1.
bool unary(Context &ctx, Unary op, const Tensor &x, int outSlot, Tensor &out);

enum class Binary { add, sub, mul, div, pow, max, min, logical_and, logical_or };
/// a and b have the same dtype (checked); integer div truncates toward zero
/// and fails on division by zero; pow is float-only (ONNX allows an integer
/// exponent tensor: b may be any numeric dtype when a is float).
bool binary(Context &ctx, Binary op, const Tensor &a, const Tensor &b,
            int outSlot, Tensor &out);

enum class Compare { eq, lt, le, gt, ge };
/// Result dtype b1.
bool compare(Context &ctx, Compare op, const Tensor &a, const Tensor &b,
             int outSlot, Tensor &out);

/// cond (b1) ? x : y, all three broadcast.
bool where(Context &ctx, const Tensor &cond, const Tensor &x, const Tensor &y,
           int outSlot, Tensor &out);

/// Element type conversion (float->int truncates toward zero, like C++;
/// anything -> b1 is "!= 0").
bool cast(Context &ctx, const Tensor &x, DType to, int outSlot, Tensor &out);

//===----------------------------------------------------------------------===//
// Layers
//===----------------------------------------------------------------------===//

/// relu6: min(max(x, 0), 6), NaN kept.
enum class Activation { none, relu, gelu, gelu_tanh, silu, sigmoid, relu6 };

/// y[..., N] = act(x[..., K] . w[K, N] + bias[N]); w is row-major [K, N]
/// (the compiler packs every linear weight in this layout). f32 only.
/// AVX2/FMA when the CPU has it (chosen at run time), threads over rows
/// of y and blocks of N.
bool linear(Context &ctx, const Tensor &x, const Tensor &w, const Tensor *bias,
            Activation act, int outSlot, Tensor &out);

/// numpy matmul: 1-D operands promoted and the added dim removed, leading
/// (batch) dims broadcast. f32 only.
bool matmul(Context &ctx, const Tensor &a, const Tensor &b, int outSlot,
            Tensor &out);

/// Normalises over dims [axis, rank); scale/bias have the normalised shape
/// (any shape with that many elements).
bool layerNorm(Context &ctx, const Tensor &x, const Tensor &scale,
               const Tensor *bias, int64_t axis, float epsilon, int outSlot,
               Tensor &out);
/// x / sqrt(mean(x^2 over the last dim) + eps) * scale.
bool rmsNorm(Context &ctx, const Tensor &x, const Tensor &scale, float epsilon,
             int outSlot, Tensor &out);
bool softmax(Context &ctx, const Tensor &x, int64_t axis, int outSlot,
             Tensor &out);
/// Rotate-half rotary embedding: with h half of x's last dim (even),
/// y[.., i] = x[.., i] cos[.., i] - x[.., i + h] sin[.., i] for i < h and
/// x[.., i] cos[.., i] + x[.., i - h] sin[.., i] for i >= h. cos and sin
/// (one shape) broadcast to x. f32, f64, or f16 computed in f32.
bool rotary(Context &ctx, const Tensor &x, const Tensor &cos, const Tensor &sin,
            int outSlot, Tensor &out);

/// How attention's q, k, v and output are laid out: [B, H, S, D], or
/// [B, S, H, D] (a projection's output split into heads, before a transpose:
/// the IR's `token_major`). The past and present are [B, H, P, D] in both.
enum class HeadLayout : uint8_t { headMajor, tokenMajor };

/// Scaled dot-product attention. q [B, H, Sq, D]; k, v [B, H, Sk, D] (new
/// tokens), or all three [B, S, H, D] with HeadLayout::tokenMajor. With
/// pastK/pastV ([B, H, P, D]) the attended keys/values are concat(past,
/// new) on the sequence axis, written to presentK/presentV ([B, H, P + Sk,
/// D], slots given); otherwise presentK/presentV are null. mask (optional,
/// f32 additive or bool) broadcasts to [B, H, Sq, P + Sk]. causal: query i
/// (of Sq) may attend key j iff j <= i + (P + Sk - Sq). Output [B, H, Sq,
/// Dv], or [B, Sq, H, Dv] with tokenMajor.
bool attention(Context &ctx, const Tensor &q, const Tensor &k, const Tensor &v,
               const Tensor *mask, const Tensor *pastK, const Tensor *pastV,
               float scale, bool causal, HeadLayout layout, int outSlot,
               Tensor &out, int presentKSlot, Tensor *presentK,
               int presentVSlot, Tensor *presentV);

/// table [V, D] f32, ids int64/int32 of any shape -> ids.shape + [D].
/// Fails naming the offending id if an id is outside [0, V).
bool embedding(Context &ctx, const Tensor &table, const Tensor &ids,
               int outSlot, Tensor &out);
/// table[ids] + table2[ids2] (float32 tables of one width, ids of one
/// shape): a decoder's token and position embeddings in one op
/// (sparsec-fuse-embedding-sum).
bool embedding(Context &ctx, const Tensor &table, const Tensor &ids,
               const Tensor &table2, const Tensor &ids2, int outSlot,
               Tensor &out);

/// An inference batch norm over a convolution's output channels, applied
/// with its bias: scale * (y - mean) / sqrt(var + epsilon) + bias.
struct ConvNorm {
  const Tensor *scale, *bias, *mean, *var;
  float epsilon;
};
/// N-d convolution, NCHW; nSpatial = rank - 2 (1 to 3); pads are
/// [begin..., end...] as in ONNX; `norm` (or null) and `act` applied with
/// the bias. With a norm, the weights and bias folded with it are made by
/// the first call and kept in the context's weight cache.
bool conv(Context &ctx, const Tensor &x, const Tensor &w, const Tensor *bias,
          const int64_t *strides, const int64_t *pads, const int64_t *dilations,
          int64_t group, const ConvNorm *norm, Activation act, int outSlot,
          Tensor &out);
/// Inference batch normalisation over axis 1, `act` applied to each value.
bool batchNorm(Context &ctx, const Tensor &x, const Tensor &scale,
               const Tensor &bias, const Tensor &mean, const Tensor &var,
               float epsilon, Activation act, int outSlot, Tensor &out);

enum class Pool { max, avg };
/// 1-3 spatial dims; kernel == nullptr means global pooling (output
/// spatial dims 1). avg excludes padding unless countIncludePad.
bool pool(Context &ctx, Pool kind, const Tensor &x, const int64_t *kernel,
          const int64_t *strides, const int64_t *pads, bool countIncludePad,
          int outSlot, Tensor &out);

enum class Reduce { sum, mean, max, min };
/// naxes == 0 reduces over all dims. Axes may be negative.
bool reduce(Context &ctx, Reduce kind, const Tensor &x, int naxes,
            const int64_t *axes, bool keepdims, int outSlot, Tensor &out);
bool cumsum(Context &ctx, const Tensor &x, int64_t axis, bool exclusive,
            bool reverse, int outSlot, Tensor &out);
/// Keeps the upper (upper) or lower triangle of the last two dims, with
/// diagonal offset k; the rest becomes 0.
bool trilu(Context &ctx, const Tensor &x, bool upper, int64_t k, int outSlot,
           Tensor &out);

//===----------------------------------------------------------------------===//
// Shapes and data movement (any dtype)
//===----------------------------------------------------------------------===//

/// int64 1-D: dims [start, end) of x (ONNX Shape; negative and out-of-range
/// start/end are clamped as ONNX specifies).
bool shape(Context &ctx, const Tensor &x, int64_t start, int64_t end,
           int outSlot, Tensor &out);
/// ONNX Gather (negative indices wrap; out of range fails).
bool gather(Context &ctx, const Tensor &data, const Tensor &indices,
            int64_t axis, int outSlot, Tensor &out);
/// ONNX Reshape with the target shape as an int64 tensor (0 copies the
/// input dim unless allowzero, -1 is inferred).
bool reshape(Context &ctx, const Tensor &x, const Tensor &shape, bool allowzero,
             int outSlot, Tensor &out);
/// Copy of x with a new shape of the same element count (flatten, squeeze,
/// unsqueeze and reshapes whose target the compiler knows).
bool reshapeTo(Context &ctx, const Tensor &x, int rank, const int64_t *shape,
               int outSlot, Tensor &out);
bool transpose(Context &ctx, const Tensor &x, const int64_t *perm, int outSlot,
               Tensor &out);
bool concat(Context &ctx, int n, const Tensor *const *inputs, int64_t axis,
            int outSlot, Tensor &out);
/// ONNX Slice; starts/ends/axes/steps are int64 or int32 1-D tensors.
bool slice(Context &ctx, const Tensor &data, const Tensor &starts,
           const Tensor &ends, const Tensor &axes, const Tensor &steps,
           int outSlot, Tensor &out);
bool split(Context &ctx, const Tensor &x, int64_t axis, int n,
           const int64_t *sizes, const int *outSlots, Tensor *outs);
/// ONNX Expand (bidirectional broadcast with an int64 shape tensor).
bool expand(Context &ctx, const Tensor &x, const Tensor &shape, int outSlot,
            Tensor &out);
/// ONNX Range over scalar tensors of one numeric dtype.
bool range(Context &ctx, const Tensor &start, const Tensor &limit,
           const Tensor &delta, int outSlot, Tensor &out);
/// A tensor of the shape given by an int64 1-D tensor, filled with the
/// single element of `value` (whose dtype is the result dtype).
bool constantOfShape(Context &ctx, const Tensor &shape, const Tensor &value,
                     int outSlot, Tensor &out);

//===----------------------------------------------------------------------===//
// Activation sparsity
//===----------------------------------------------------------------------===//

/// Exact input-side sparse linear: y[..., N] = x[..., K] . w[K, N] + bias,
/// reading only the rows of w whose input neuron is non-zero (the down
/// projection after a ReLU). Equal to `linear` up to summation order.
/// `w` may be float32 or float16 (fp16-stored weights, F16C).
bool sparseLinearInput(Context &ctx, const Tensor &x, const Tensor &w,
                       const Tensor *bias, int outSlot, Tensor &out);

/// Output-side sparse linear (a predicted up projection): y[..., j] =
/// x[..., :] . w[j, :] + bias[j] for the neurons j enabled in `active`
/// (b1, [..., N] or [N]); 0 elsewhere. `w` is neuron-major [N, K], float32
/// or float16, so each selected neuron reads one contiguous row. `act`
/// (none, relu, gelu, gelu_tanh or silu: act(0) = 0) is applied to the
/// computed neurons.
bool sparseLinearOutput(Context &ctx, const Tensor &x, const Tensor &w,
                        const Tensor *bias, const Tensor &active,
                        Activation act, int outSlot, Tensor &out);

/// Low-rank predictor: mask[..., N] = (x . w1) . w2 + bias > threshold,
/// w1 [D, R], w2 [R, N] (float32 or float16), bias [N] float32; b1 result.
bool predict(Context &ctx, const Tensor &x, const Tensor &w1, const Tensor &w2,
             const Tensor *bias, float threshold, int outSlot, Tensor &out);

//===----------------------------------------------------------------------===//
// Profiling
//===----------------------------------------------------------------------===//

/// Profiling builds: for activation site `site`, counts the tokens (rows of
/// the last dimension) of x and, per neuron, the rows where it is non-zero,
/// into ctx.profileTokens / ctx.profileCounts.
/// With `layerInput` (the input of the linear producing `x`), also samples
/// (layer input, active mask) pairs into ctx.profileSamples.
bool profileCount(Context &ctx, const Tensor &x, int site,
                  const Tensor *layerInput = nullptr);

} // namespace sparsec::rt::ops

#endif // SPARSEC_RT_OPS_H
