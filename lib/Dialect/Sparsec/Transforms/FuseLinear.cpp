//===- FuseLinear.cpp - matmul by a weight (+ bias) -> linear ------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace sparsec {
#define GEN_PASS_DEF_FUSELINEARPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// matmul(x, W) with W a 2-D parameter -> linear(x, W).
struct MatMulToLinear : OpRewritePattern<MatMulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatMulOp op,
                                PatternRewriter &rewriter) const override {
    if (!isParameter(op.getRhs()) ||
        cast<RankedTensorType>(op.getRhs().getType()).getRank() != 2)
      return rewriter.notifyMatchFailure(op, "rhs is not a 2-D weight");
    if (cast<RankedTensorType>(op.getLhs().getType()).getRank() < 1 ||
        !isa<FloatType>(op.getType().getElementType()))
      return rewriter.notifyMatchFailure(op, "not a float linear map");
    rewriter.replaceOpWithNewOp<LinearOp>(op, op.getType(), op.getLhs(),
                                          op.getRhs(), Value(),
                                          /*transpose_weight=*/false,
                                          /*activation=*/nullptr);
    return success();
  }
};

/// add(linear(x, W), b) with b a [N] parameter -> linear(x, W, b).
struct AbsorbBias : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp op,
                                PatternRewriter &rewriter) const override {
    auto match = matchEither(op.getLhs(), op.getRhs(), [](Value v) {
      auto lin = defOp<LinearOp>(v);
      return lin && !lin.getBias() && v.hasOneUse();
    });
    if (!match)
      return rewriter.notifyMatchFailure(op, "no bias-free linear operand");
    auto lin = defOp<LinearOp>(match->first);
    Value bias = match->second;
    auto biasType = cast<RankedTensorType>(bias.getType());
    int64_t n = lin.getType().getShape().back();
    if (!isParameter(bias) || biasType.getRank() != 1 ||
        biasType.getDimSize(0) != n || op.getType() != lin.getType())
      return rewriter.notifyMatchFailure(op, "addend is not a [N] bias");
    rewriter.replaceOpWithNewOp<LinearOp>(op, op.getType(), lin.getInput(),
                                          lin.getWeight(), bias,
                                          lin.getTransposeWeight(),
                                          lin.getActivationAttr());
    rewriter.eraseOp(lin);
    return success();
  }
};

struct FuseLinearPass
    : public sparsec::impl::FuseLinearPassBase<FuseLinearPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseLinearPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    getOperation().walk([&](LinearOp) { ++numFused; });
  }
};
} // namespace

void sparsec::populateFuseLinearPatterns(RewritePatternSet &patterns) {
  patterns.add<MatMulToLinear, AbsorbBias>(patterns.getContext());
}
