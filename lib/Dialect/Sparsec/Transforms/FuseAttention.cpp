//===- FuseAttention.cpp - SDPA subgraph -> attention --------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/IR/DimAnalysis.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace sparsec {
#define GEN_PASS_DEF_FUSEATTENTIONPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
bool isRank4(Value v) {
  return cast<RankedTensorType>(v.getType()).getRank() == 4;
}

/// Grouped-query attention's repeat_kv: reshape(expand(unsqueeze(x, 2)))
/// taking x [B, Hk, S, D] to [B, Hk * n, S, D], each head n times in a
/// row. Returns x, or null.
Value repeatedHeads(Value v) {
  auto r = defOp<ReshapeOp>(v);
  auto e = r ? defOp<ExpandOp>(r.getInput()) : ExpandOp();
  auto u = e ? defOp<UnsqueezeOp>(e.getInput()) : UnsqueezeOp();
  if (!u || u.getAxes() != ArrayRef<int64_t>{2})
    return {};
  Value x = u.getInput();
  auto xt = cast<RankedTensorType>(x.getType());
  auto et = cast<RankedTensorType>(e.getType());
  auto rt = cast<RankedTensorType>(r.getType());
  if (xt.getRank() != 4 || et.getRank() != 5 || rt.getRank() != 4)
    return {};
  const int64_t hk = xt.getDimSize(1), n = et.getDimSize(2),
                d = xt.getDimSize(3);
  // Only the inserted dim grows (the batch and sequence provably kept: a
  // shape from an unrelated tensor could broadcast a batch of 1); the
  // reshape merges it into the heads.
  if (ShapedType::isDynamic(hk) || ShapedType::isDynamic(n) ||
      ShapedType::isDynamic(d) || et.getDimSize(1) != hk ||
      et.getDimSize(4) != d || !sameDim(e.getResult(), 0, x, 0) ||
      !sameDim(e.getResult(), 3, x, 2) || rt.getDimSize(1) != hk * n ||
      rt.getDimSize(3) != d ||
      !compatibleDims(rt.getDimSize(0), xt.getDimSize(0)) ||
      !compatibleDims(rt.getDimSize(2), xt.getDimSize(2)))
    return {};
  return x;
}

/// matmul(softmax(q . transpose(k) [* s | / s] [+ mask]), v) -> attention.
struct ScoresSoftmaxContext : OpRewritePattern<MatMulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatMulOp op,
                                PatternRewriter &rewriter) const override {
    auto softmax = defOp<SoftmaxOp>(op.getLhs());
    Value v = op.getRhs();
    if (!softmax || !isRank4(v) || !isRank4(op.getLhs()) ||
        (static_cast<int64_t>(softmax.getAxis()) != -1 && softmax.getAxis() != 3))
      return rewriter.notifyMatchFailure(op, "lhs is not a last-axis softmax");
    Value scores = softmax.getInput();
    Value mask;
    if (auto add = defOp<AddOp>(scores)) {
      auto m = matchEither(add.getLhs(), add.getRhs(), [](Value x) {
        return defOp<MatMulOp>(x) || defOp<MulOp>(x) || defOp<DivOp>(x);
      });
      if (!m)
        return rewriter.notifyMatchFailure(op, "softmax input is not scores+mask");
      scores = m->first;
      mask = m->second;
      if (add.getType() != scores.getType())
        return rewriter.notifyMatchFailure(op, "mask broadcasts the scores");
    }
    double scale = 1.0;
    if (auto mul = defOp<MulOp>(scores)) {
      auto m = matchEither(mul.getLhs(), mul.getRhs(), [](Value x) {
        return scalarValue(x).has_value();
      });
      if (!m)
        return rewriter.notifyMatchFailure(op, "scores scaled by a tensor");
      scale = *scalarValue(m->first);
      scores = m->second;
    } else if (auto div = defOp<DivOp>(scores)) {
      std::optional<double> s = scalarValue(div.getRhs());
      if (!s || *s == 0.0)
        return rewriter.notifyMatchFailure(op, "scores divided by a tensor");
      scale = 1.0 / *s;
      scores = div.getLhs();
    }
    auto qk = defOp<MatMulOp>(scores);
    if (!qk)
      return rewriter.notifyMatchFailure(op, "no q . k^T matmul");
    // k^T is transpose(k [B,H,S,D], [0,1,3,2]) or, straight from the head
    // split, transpose(k [B,S,H,D], [0,2,3,1]).
    auto kt = defOp<TransposeOp>(qk.getRhs());
    if (!kt)
      return rewriter.notifyMatchFailure(op, "k is not transposed");
    Value q = qk.getLhs(), k = kt.getInput();
    if (kt.getPermutation() == ArrayRef<int64_t>{0, 2, 3, 1}) {
      auto in = cast<RankedTensorType>(k.getType());
      if (in.getRank() != 4)
        return rewriter.notifyMatchFailure(op, "k is not 4-D");
      auto headsFirst = RankedTensorType::get(
          {in.getDimSize(0), in.getDimSize(2), in.getDimSize(1),
           in.getDimSize(3)},
          in.getElementType());
      k = TransposeOp::create(rewriter, kt.getLoc(), headsFirst, k,
                              rewriter.getDenseI64ArrayAttr({0, 2, 1, 3}))
              .getResult();
    } else if (kt.getPermutation() != ArrayRef<int64_t>{0, 1, 3, 2}) {
      return rewriter.notifyMatchFailure(op, "k^T permutation not recognised");
    }
    if (!isRank4(q) || !isRank4(k))
      return rewriter.notifyMatchFailure(op, "q/k are not [B, H, S, D]");

    // Absorb a scalar applied to q before the head split:
    // transpose(reshape(mul(x, c))) -> transpose(reshape(x)), scale *= c.
    if (auto tq = defOp<TransposeOp>(q)) {
      auto rq = defOp<ReshapeOp>(tq.getInput());
      auto mq = rq ? defOp<MulOp>(rq.getInput()) : MulOp();
      auto c = mq ? matchEither(mq.getLhs(), mq.getRhs(),
                                [](Value x) {
                                  return scalarValue(x).has_value();
                                })
                  : std::nullopt;
      if (c && tq->hasOneUse() && rq->hasOneUse() && mq->hasOneUse() &&
          c->second.getType() == mq.getType()) {
        scale *= *scalarValue(c->first);
        rewriter.setInsertionPoint(tq);
        auto newReshape = ReshapeOp::create(
            rewriter, rq.getLoc(), rq.getType(), c->second, rq.getShape(),
            rq.getAllowzero());
        q = TransposeOp::create(rewriter, tq.getLoc(), tq.getType(),
                                newReshape.getResult(),
                                tq.getPermutationAttr())
                .getResult();
        rewriter.setInsertionPoint(op);
      }
    }

    // Grouped-query attention: keys and values repeated over the query
    // heads of their group are read once per group by the attention.
    Value kGroup = repeatedHeads(k), vGroup = repeatedHeads(v);
    if (kGroup && vGroup) {
      k = kGroup;
      v = vGroup;
    }

    // KV cache convention: keys/values are concat(past, new) on axis 2.
    Value pastK, pastV;
    auto ck = defOp<ConcatOp>(k);
    auto cv = defOp<ConcatOp>(v);
    if (ck && cv && ck.getInputs().size() == 2 && cv.getInputs().size() == 2 &&
        ck.getAxis() == 2 && cv.getAxis() == 2) {
      pastK = ck.getInputs()[0];
      pastV = cv.getInputs()[0];
      k = ck.getInputs()[1];
      v = cv.getInputs()[1];
    }

    auto attn = AttentionOp::create(
        rewriter, op.getLoc(), op.getType(), pastK ? ck.getType() : Type(),
        pastK ? cv.getType() : Type(), q, k, v, mask, pastK, pastV,
        rewriter.getF32FloatAttr(static_cast<float>(scale)),
        /*causal=*/UnitAttr(), /*token_major=*/UnitAttr());
    rewriter.replaceOp(op, attn.getResult());
    if (pastK) {
      rewriter.replaceAllUsesWith(ck.getResult(), attn.getPresentKey());
      rewriter.replaceAllUsesWith(cv.getResult(), attn.getPresentValue());
    }
    return success();
  }
};

struct FuseAttentionPass
    : public sparsec::impl::FuseAttentionPassBase<FuseAttentionPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseAttentionPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    getOperation().walk([&](AttentionOp) { ++numFused; });
  }
};
} // namespace

void sparsec::populateFuseAttentionPatterns(RewritePatternSet &patterns) {
  patterns.add<ScoresSoftmaxContext>(patterns.getContext());
}
