//===- FuseGelu.cpp - erf-form GELU -> gelu ------------------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace sparsec {
#define GEN_PASS_DEF_FUSEGELUPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// Flattens a tree of single-use multiplications into its factors.
void collectFactors(Value v, bool isRoot, SmallVectorImpl<Value> &factors) {
  auto mul = defOp<MulOp>(v);
  if (mul && (isRoot || v.hasOneUse())) {
    collectFactors(mul.getLhs(), false, factors);
    collectFactors(mul.getRhs(), false, factors);
    return;
  }
  factors.push_back(v);
}

/// `v` is 1 + erf(x / sqrt(2)) (or erf(x * 1/sqrt(2))); returns x.
Value matchOnePlusErf(Value v) {
  auto add = defOp<AddOp>(v);
  if (!add)
    return {};
  auto m = matchEither(add.getLhs(), add.getRhs(),
                       [](Value x) { return isScalar(x, 1.0); });
  if (!m)
    return {};
  auto erf = defOp<ErfOp>(m->second);
  if (!erf)
    return {};
  Value arg = erf.getInput();
  if (auto div = defOp<DivOp>(arg))
    return isScalar(div.getRhs(), std::sqrt(2.0)) ? div.getLhs() : Value();
  if (auto mul = defOp<MulOp>(arg)) {
    auto s = matchEither(mul.getLhs(), mul.getRhs(), [](Value x) {
      return isScalar(x, 1.0 / std::sqrt(2.0));
    });
    return s ? s->second : Value();
  }
  return {};
}

/// x * 0.5 * (1 + erf(x / sqrt(2))), factors in any order -> gelu(x).
struct ErfGelu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp op,
                                PatternRewriter &rewriter) const override {
    SmallVector<Value> factors;
    collectFactors(op.getResult(), true, factors);
    if (factors.size() != 3)
      return rewriter.notifyMatchFailure(op, "not a product of 3 factors");
    Value half, erfTerm, x;
    for (Value f : factors) {
      if (!half && isScalar(f, 0.5))
        half = f;
      else if (!erfTerm && matchOnePlusErf(f))
        erfTerm = f;
      else
        x = f;
    }
    if (!half || !erfTerm || !x || matchOnePlusErf(erfTerm) != x ||
        x.getType() != op.getType())
      return rewriter.notifyMatchFailure(op, "not x * 0.5 * (1 + erf(x/sqrt2))");
    rewriter.replaceOpWithNewOp<GeluOp>(op, op.getType(), x);
    return success();
  }
};

struct FuseGeluPass : public sparsec::impl::FuseGeluPassBase<FuseGeluPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseGeluPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    getOperation().walk([&](GeluOp) { ++numFused; });
  }
};
} // namespace

void sparsec::populateFuseGeluPatterns(RewritePatternSet &patterns) {
  patterns.add<ErfGelu>(patterns.getContext());
}
