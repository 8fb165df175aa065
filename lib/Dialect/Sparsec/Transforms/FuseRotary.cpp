//===- FuseRotary.cpp - rotate-half rotary embedding -> rotary -----------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace sparsec {
#define GEN_PASS_DEF_FUSEROTARYPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// The single element of a constant 1-D integer vector.
std::optional<int64_t> singleInt(Value v) {
  DenseIntElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || attr.getNumElements() != 1)
    return std::nullopt;
  return (*attr.getValues<APInt>().begin()).getSExtValue();
}

/// `v` is the first (`second` false) or second half of `x`'s last
/// dimension, of static even size: a unit-step slice or one of two equal
/// split pieces.
bool isHalfOf(Value v, Value x, bool second) {
  auto xt = cast<RankedTensorType>(x.getType());
  const int64_t rank = xt.getRank(), d = xt.getShape().back();
  if (ShapedType::isDynamic(d) || d % 2 != 0)
    return false;
  const int64_t h = d / 2;
  if (auto s = defOp<SliceOp>(v)) {
    std::optional<int64_t> start = singleInt(s.getStarts()),
                           end = singleInt(s.getEnds()),
                           axis = singleInt(s.getAxes()),
                           step = singleInt(s.getSteps());
    if (s.getData() != x || !start || !end || !axis || !step || *step != 1 ||
        !isLastAxis({*axis}, rank))
      return false;
    // Negative starts/ends count from the end; ends past it are clamped.
    auto at = [&](int64_t i) { return i < 0 ? i + d : std::min(i, d); };
    return second ? at(*start) == h && at(*end) == d
                  : at(*start) == 0 && at(*end) == h;
  }
  auto r = dyn_cast<OpResult>(v);
  auto split = r ? dyn_cast<SplitOp>(r.getOwner()) : SplitOp();
  return split && split.getInput() == x &&
         isLastAxis({static_cast<int64_t>(split.getAxis())}, rank) &&
         split.getSizes() == ArrayRef<int64_t>{h, h} &&
         r.getResultNumber() == (second ? 1u : 0u);
}

/// `v` is -b: neg(b) or b * -1; returns b.
Value negated(Value v) {
  if (auto n = defOp<NegOp>(v))
    return n.getInput();
  if (auto m = defOp<MulOp>(v)) {
    auto c = matchEither(m.getLhs(), m.getRhs(),
                         [](Value s) { return isScalar(s, -1.0); });
    if (c && c->second.getType() == m.getType())
      return c->second;
  }
  return {};
}

/// `r` is rotate_half(x) = concat(-x2, x1) on the last axis; returns x.
Value rotatedHalves(Value r) {
  auto c = defOp<ConcatOp>(r);
  if (!c || c.getInputs().size() != 2)
    return {};
  Value x2 = negated(c.getInputs()[0]), x1 = c.getInputs()[1];
  if (!x2)
    return {};
  auto s = defOp<SliceOp>(x1);
  auto res = dyn_cast<OpResult>(x1);
  Value x = s ? s.getData()
            : res && isa<SplitOp>(res.getOwner())
                ? res.getOwner()->getOperand(0)
                : Value();
  auto rt = cast<RankedTensorType>(r.getType());
  if (!x || x.getType() != rt ||
      !isLastAxis({static_cast<int64_t>(c.getAxis())}, rt.getRank()) ||
      !isHalfOf(x1, x, false) || !isHalfOf(x2, x, true))
    return {};
  return x;
}

/// add(mul(x, cos), mul(rotate_half(x), sin)), operands in any order.
struct RotateHalf : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp op,
                                PatternRewriter &rewriter) const override {
    for (auto [a, b] : {std::pair(op.getLhs(), op.getRhs()),
                        std::pair(op.getRhs(), op.getLhs())}) {
      auto byCos = defOp<MulOp>(a), bySin = defOp<MulOp>(b);
      if (!byCos || !bySin)
        continue;
      Value x;
      auto rot = matchEither(bySin.getLhs(), bySin.getRhs(), [&](Value v) {
        return static_cast<bool>(x = rotatedHalves(v));
      });
      if (!rot)
        continue;
      Value sin = rot->second;
      auto cos = matchEither(byCos.getLhs(), byCos.getRhs(),
                             [&](Value v) { return v == x; });
      if (!cos || cos->second.getType() != sin.getType() ||
          x.getType() != op.getType() || byCos.getType() != op.getType() ||
          bySin.getType() != op.getType())
        continue;
      rewriter.replaceOpWithNewOp<RotaryOp>(op, op.getType(), x, cos->second,
                                            sin);
      return success();
    }
    return rewriter.notifyMatchFailure(op,
                                       "not x * cos + rotate_half(x) * sin");
  }
};

struct FuseRotaryPass
    : public sparsec::impl::FuseRotaryPassBase<FuseRotaryPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseRotaryPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    getOperation().walk([&](RotaryOp) { ++numFused; });
  }
};
} // namespace

void sparsec::populateFuseRotaryPatterns(RewritePatternSet &patterns) {
  patterns.add<RotateHalf>(patterns.getContext());
}
