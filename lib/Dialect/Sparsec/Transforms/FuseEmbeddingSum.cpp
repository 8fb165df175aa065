//===- FuseEmbeddingSum.cpp - add of two lookups -> one embedding ---------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace sparsec {
#define GEN_PASS_DEF_FUSEEMBEDDINGSUMPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// add(embedding(t, ids), embedding(t2, ids2)) -> embedding(t, ids plus t2,
/// ids2), both lookups single and used only by the add.
struct FuseEmbeddingAdd : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp add,
                                PatternRewriter &rewriter) const override {
    auto lhs = defOp<EmbeddingOp>(add.getLhs());
    auto rhs = defOp<EmbeddingOp>(add.getRhs());
    if (!lhs || !rhs || lhs == rhs)
      return rewriter.notifyMatchFailure(add, "not an add of two lookups");
    if (lhs.getTable2() || rhs.getTable2() || !add.getLhs().hasOneUse() ||
        !add.getRhs().hasOneUse())
      return rewriter.notifyMatchFailure(add, "a lookup is used elsewhere");
    auto type = dyn_cast<RankedTensorType>(add.getType());
    if (!type || !type.getElementType().isF32() ||
        lhs.getType() != type || rhs.getType() != type ||
        !lhs.getTable().getType().getElementType().isF32() ||
        !rhs.getTable().getType().getElementType().isF32() ||
        lhs.getIds().getType() != rhs.getIds().getType())
      return rewriter.notifyMatchFailure(add, "types differ or not f32");
    if (placedOnCpu(lhs) != placedOnCpu(add) || placedOnCpu(rhs) != placedOnCpu(add))
      return rewriter.notifyMatchFailure(add, "placed on different devices");
    // The fused lookup stands where the add was: every operand is defined
    // before it.
    auto fused = EmbeddingOp::create(rewriter, add.getLoc(), type,
                                     lhs.getTable(), lhs.getIds(),
                                     rhs.getTable(), rhs.getIds());
    fused->setDiscardableAttrs(add->getDiscardableAttrDictionary());
    rewriter.replaceOp(add, fused.getResult());
    rewriter.eraseOp(lhs);
    rewriter.eraseOp(rhs);
    return success();
  }
};

struct FuseEmbeddingSumPass
    : public sparsec::impl::FuseEmbeddingSumPassBase<FuseEmbeddingSumPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseEmbeddingAdd>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace
