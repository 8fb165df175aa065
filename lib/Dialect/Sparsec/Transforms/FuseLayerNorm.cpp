//===- FuseLayerNorm.cpp - decomposed normalisations -> layer/rms_norm ---===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace sparsec {
#define GEN_PASS_DEF_FUSELAYERNORMPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// `v` is mean(x) over the last axis with keepdims; returns x.
Value matchMeanLastAxis(Value v) {
  auto red = defOp<ReduceOp>(v);
  if (!red || red.getKind() != ReduceKind::mean || !red.getKeepdims() ||
      !isLastAxis(red.getAxes(), red.getInput().getType().getRank()))
    return {};
  return red.getInput();
}

/// `v` is sqrt(mean(y) + eps); returns (y, eps).
std::optional<std::pair<Value, double>> matchRootMeanPlusEps(Value v) {
  auto sqrt = defOp<SqrtOp>(v);
  if (!sqrt)
    return std::nullopt;
  auto add = defOp<AddOp>(sqrt.getInput());
  if (!add)
    return std::nullopt;
  auto m = matchEither(add.getLhs(), add.getRhs(),
                       [](Value x) { return scalarValue(x).has_value(); });
  if (!m)
    return std::nullopt;
  Value y = matchMeanLastAxis(m->second);
  if (!y)
    return std::nullopt;
  return std::make_pair(y, *scalarValue(m->first));
}

/// A per-feature parameter over the last dimension of `x`.
bool isFeatureParam(Value p, Value x) {
  auto t = cast<RankedTensorType>(p.getType());
  int64_t d = cast<RankedTensorType>(x.getType()).getShape().back();
  return isParameter(p) && t.getRank() == 1 && t.getDimSize(0) == d;
}

/// mul(div(x - mean(x), sqrt(mean((x - mean(x))^2) + eps)), g)
///   -> layer_norm(x, g)
/// mul(div(x, sqrt(mean(x^2) + eps)), g) -> rms_norm(x, g)
struct NormalizeTimesScale : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp op,
                                PatternRewriter &rewriter) const override {
    auto m = matchEither(op.getLhs(), op.getRhs(),
                         [](Value v) { return defOp<DivOp>(v) != nullptr; });
    if (!m)
      return rewriter.notifyMatchFailure(op, "no division operand");
    auto div = defOp<DivOp>(m->first);
    Value gamma = m->second;
    auto root = matchRootMeanPlusEps(div.getRhs());
    if (!root)
      return rewriter.notifyMatchFailure(op, "denominator is not sqrt(mean+eps)");
    auto [meanArg, eps] = *root;
    auto pow = defOp<PowOp>(meanArg);
    auto sq = defOp<MulOp>(meanArg);
    Value squared; // the value whose square is averaged
    if (pow && isScalar(pow.getRhs(), 2.0))
      squared = pow.getLhs();
    else if (sq && sq.getLhs() == sq.getRhs())
      squared = sq.getLhs();
    if (!squared || squared != div.getLhs())
      return rewriter.notifyMatchFailure(op, "not a variance of the numerator");

    if (auto sub = defOp<SubOp>(div.getLhs())) {
      Value x = sub.getLhs();
      if (matchMeanLastAxis(sub.getRhs()) != x || !isFeatureParam(gamma, x) ||
          op.getType() != x.getType())
        return rewriter.notifyMatchFailure(op, "not a layer norm of x");
      rewriter.replaceOpWithNewOp<LayerNormOp>(
          op, op.getType(), x, gamma, Value(), rewriter.getI64IntegerAttr(-1),
          rewriter.getF32FloatAttr(static_cast<float>(eps)));
      return success();
    }
    Value x = div.getLhs();
    if (!isFeatureParam(gamma, x) || op.getType() != x.getType())
      return rewriter.notifyMatchFailure(op, "not an rms norm of x");
    rewriter.replaceOpWithNewOp<RmsNormOp>(
        op, op.getType(), x, gamma,
        rewriter.getF32FloatAttr(static_cast<float>(eps)));
    return success();
  }
};

/// add(layer_norm(x, g), b) -> layer_norm(x, g, b).
struct AbsorbNormBias : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp op,
                                PatternRewriter &rewriter) const override {
    auto m = matchEither(op.getLhs(), op.getRhs(), [](Value v) {
      auto ln = defOp<LayerNormOp>(v);
      return ln && !ln.getBias() && v.hasOneUse();
    });
    if (!m)
      return rewriter.notifyMatchFailure(op, "no bias-free layer_norm operand");
    auto ln = defOp<LayerNormOp>(m->first);
    if (!isFeatureParam(m->second, ln.getInput()) ||
        op.getType() != ln.getType())
      return rewriter.notifyMatchFailure(op, "addend is not a feature bias");
    rewriter.replaceOpWithNewOp<LayerNormOp>(
        op, op.getType(), ln.getInput(), ln.getScale(), m->second,
        ln.getAxisAttr(), ln.getEpsilonAttr());
    rewriter.eraseOp(ln);
    return success();
  }
};

struct FuseLayerNormPass
    : public sparsec::impl::FuseLayerNormPassBase<FuseLayerNormPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseLayerNormPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    getOperation().walk([&](Operation *op) {
      if (isa<LayerNormOp, RmsNormOp>(op))
        ++numFused;
    });
  }
};
} // namespace

void sparsec::populateFuseLayerNormPatterns(RewritePatternSet &patterns) {
  patterns.add<NormalizeTimesScale, AbsorbNormBias>(patterns.getContext());
}
