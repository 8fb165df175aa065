//===- RaiseEmbedding.cpp - gather from a weight table -> embedding ------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace sparsec {
#define GEN_PASS_DEF_RAISEEMBEDDINGPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
struct GatherToEmbedding : OpRewritePattern<GatherOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GatherOp op,
                                PatternRewriter &rewriter) const override {
    auto table = cast<RankedTensorType>(op.getData().getType());
    if (!defOp<WeightOp>(op.getData()) || table.getRank() != 2 ||
        op.getAxis() != 0 || !isa<FloatType>(table.getElementType()))
      return rewriter.notifyMatchFailure(op, "not a row lookup in a weight");
    rewriter.replaceOpWithNewOp<EmbeddingOp>(op, op.getType(), op.getData(),
                                             op.getIndices());
    return success();
  }
};

struct RaiseEmbeddingPass
    : public sparsec::impl::RaiseEmbeddingPassBase<RaiseEmbeddingPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateRaiseEmbeddingPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace

void sparsec::populateRaiseEmbeddingPatterns(RewritePatternSet &patterns) {
  patterns.add<GatherToEmbedding>(patterns.getContext());
}
