//===- FuseEpilogue.cpp - activation into the producing linear or conv ---===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace sparsec {
#define GEN_PASS_DEF_FUSEEPILOGUEPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// An activation whose input is a linear's, a convolution's or a batch
/// norm's (`Producer`) only use: the producer applies it in its epilogue.
template <typename ActOp, Activation Kind, typename Producer = LinearOp>
struct ActivationIntoLinear : OpRewritePattern<ActOp> {
  using OpRewritePattern<ActOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(ActOp op,
                                PatternRewriter &rewriter) const override {
    auto lin = defOp<Producer>(op.getInput());
    if (!lin || lin.getActivation() || !lin->hasOneUse())
      return rewriter.notifyMatchFailure(op, "input is not a plain linear "
                                             "or convolution");
    rewriter.modifyOpInPlace(lin, [&] {
      lin.setActivationAttr(
          ActivationAttr::get(rewriter.getContext(), Kind));
    });
    rewriter.replaceOp(op, lin.getResult());
    return success();
  }
};

/// gelu's tanh form is a different activation.
template <typename Producer = LinearOp>
struct GeluIntoLinear : OpRewritePattern<GeluOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GeluOp op,
                                PatternRewriter &rewriter) const override {
    auto lin = defOp<Producer>(op.getInput());
    if (!lin || lin.getActivation() || !lin->hasOneUse())
      return rewriter.notifyMatchFailure(op, "input is not a plain linear");
    Activation kind =
        op.getTanhApprox() ? Activation::gelu_tanh : Activation::gelu;
    rewriter.modifyOpInPlace(lin, [&] {
      lin.setActivationAttr(ActivationAttr::get(rewriter.getContext(), kind));
    });
    rewriter.replaceOp(op, lin.getResult());
    return success();
  }
};

/// min(x, 6) of a convolution's or batch norm's (`Producer`) only use, the
/// producer's epilogue a ReLU already: the epilogue becomes relu6 (ONNX
/// Clip(x, 0, 6) imports as a ReLU and a min). Linears keep the min as its
/// own op: the sparsity passes and the CUDA emitter read a capped ReLU's
/// zeros through it.
template <typename Producer>
struct CapIntoRelu : OpRewritePattern<MinOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MinOp op,
                                PatternRewriter &rewriter) const override {
    auto pair = matchEither(op.getLhs(), op.getRhs(), [](Value v) {
      auto p = defOp<Producer>(v);
      return p && p.getActivation() == Activation::relu && p->hasOneUse();
    });
    if (!pair || !isScalar(pair->second, 6.0, 0.0) ||
        pair->first.getType() != op.getType())
      return rewriter.notifyMatchFailure(op, "not min(relu epilogue, 6)");
    auto producer = defOp<Producer>(pair->first);
    rewriter.modifyOpInPlace(producer, [&] {
      producer.setActivationAttr(
          ActivationAttr::get(rewriter.getContext(), Activation::relu6));
    });
    rewriter.replaceOp(op, producer.getResult());
    return success();
  }
};

/// The ReLU after a predicted (output-side) up projection: fused even when
/// annotated, since the sparsify phase is done with it; the neurons the
/// kernel skips are 0 either way.
template <typename ActOp, Activation Kind>
struct ActivationIntoSparseOutput : OpRewritePattern<ActOp> {
  using OpRewritePattern<ActOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(ActOp op,
                                PatternRewriter &rewriter) const override {
    auto lin = defOp<SparseLinearOp>(op.getInput());
    if (!lin || lin.getSparseDim() != SparseDim::output ||
        lin.getActivation() || !lin->hasOneUse())
      return rewriter.notifyMatchFailure(op, "input is not an output-side "
                                             "sparse_linear");
    rewriter.modifyOpInPlace(lin, [&] {
      lin.setActivationAttr(ActivationAttr::get(rewriter.getContext(), Kind));
    });
    rewriter.replaceOp(op, lin.getResult());
    return success();
  }
};

struct FuseEpiloguePass
    : public sparsec::impl::FuseEpiloguePassBase<FuseEpiloguePass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<ActivationIntoLinear<ReluOp, Activation::relu>,
                 ActivationIntoLinear<SiluOp, Activation::silu>,
                 ActivationIntoLinear<SigmoidOp, Activation::sigmoid>,
                 GeluIntoLinear<>,
                 ActivationIntoLinear<ReluOp, Activation::relu, ConvOp>,
                 ActivationIntoLinear<SiluOp, Activation::silu, ConvOp>,
                 ActivationIntoLinear<SigmoidOp, Activation::sigmoid, ConvOp>,
                 GeluIntoLinear<ConvOp>,
                 ActivationIntoLinear<ReluOp, Activation::relu, BatchNormOp>,
                 ActivationIntoLinear<SiluOp, Activation::silu, BatchNormOp>,
                 ActivationIntoLinear<SigmoidOp, Activation::sigmoid,
                                      BatchNormOp>,
                 GeluIntoLinear<BatchNormOp>, CapIntoRelu<ConvOp>,
                 CapIntoRelu<BatchNormOp>,
                 ActivationIntoSparseOutput<ReluOp, Activation::relu>,
                 ActivationIntoSparseOutput<SiluOp, Activation::silu>>(
        &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    getOperation().walk([&](Operation *op) {
      if (auto l = dyn_cast<LinearOp>(op); l && l.getActivation())
        ++numFused;
      if (auto s = dyn_cast<SparseLinearOp>(op); s && s.getActivation())
        ++numFused;
      if (auto c = dyn_cast<ConvOp>(op); c && c.getActivation())
        ++numFused;
      if (auto b = dyn_cast<BatchNormOp>(op); b && b.getActivation())
        ++numFused;
    });
  }
};
} // namespace
