//===- FuseEpilogue.cpp - activation into the producing linear -----------===//
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
template <typename ActOp, Activation Kind>
struct ActivationIntoLinear : OpRewritePattern<ActOp> {
  using OpRewritePattern<ActOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(ActOp op,
                                PatternRewriter &rewriter) const override {
    auto lin = defOp<LinearOp>(op.getInput());
    if (!lin || lin.getActivation() || !lin->hasOneUse())
      return rewriter.notifyMatchFailure(op, "input is not a plain linear");
    if (op->hasAttr("sparsity"))
      return rewriter.notifyMatchFailure(op, "annotated sparse activation");
    rewriter.modifyOpInPlace(lin, [&] {
      lin.setActivationAttr(
          ActivationAttr::get(rewriter.getContext(), Kind));
    });
    rewriter.replaceOp(op, lin.getResult());
    return success();
  }
};

/// gelu's tanh form is a different activation.
struct GeluIntoLinear : OpRewritePattern<GeluOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GeluOp op,
                                PatternRewriter &rewriter) const override {
    auto lin = defOp<LinearOp>(op.getInput());
    if (!lin || lin.getActivation() || !lin->hasOneUse() ||
        op->hasAttr("sparsity"))
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

struct FuseEpiloguePass
    : public sparsec::impl::FuseEpiloguePassBase<FuseEpiloguePass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<ActivationIntoLinear<ReluOp, Activation::relu>,
                 ActivationIntoLinear<SiluOp, Activation::silu>,
                 ActivationIntoLinear<SigmoidOp, Activation::sigmoid>,
                 GeluIntoLinear>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    getOperation().walk([&](LinearOp op) {
      if (op.getActivation())
        ++numFused;
    });
  }
};
} // namespace
