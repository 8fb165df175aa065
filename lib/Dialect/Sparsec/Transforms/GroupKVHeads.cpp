//===- GroupKVHeads.cpp - broadcast key/value heads -> grouped attention --===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// Falcon-40B's layout splits its fused projection into [B, S, G, R + 2, D]
// (G groups of R query heads, one key and one value head each) and
// broadcasts each group's key and value over its R query heads before the
// head transpose and the rotary embedding, so the attention (and a cache
// derived for it) sees H = G * R identical copies of every key and value
// head. The attention takes G key/value heads itself (grouped-query
// attention): this pass hands it the groups, rotating the G key heads
// instead of their H copies (the rotary's tables do not vary by head, so
// the rotation commutes with the broadcast). Attentions with a past (a
// KV-cache export, whose cache interface holds every head) are left alone.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/IR/DimAnalysis.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace sparsec {
#define GEN_PASS_DEF_GROUPKVHEADSPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// True when `table` (a rotary's cos or sin, broadcast against [B, H, S,
/// D]) holds one row for every head: rank below 3, or a unit head dim.
bool headInvariant(Value table) {
  auto t = cast<RankedTensorType>(table.getType());
  return t.getRank() <= 4 &&
         (t.getRank() < 3 || t.getDimSize(t.getRank() - 3) == 1);
}

/// A key or value head operand of an attention written as the broadcast of
/// G group heads: transpose(reshape(expand(x [B, S, G, 1, D] to [B, S, G, R,
/// D]) to [B, S, G * R, D]), [0, 2, 1, 3]), optionally under a rotary whose
/// tables do not vary by head.
struct Broadcast {
  Value groups; // x: [B, S, G, 1, D]
  int64_t g = 0, r = 0;
  RotaryOp rotary;
};

std::optional<Broadcast> matchBroadcast(Value v) {
  Broadcast m;
  if ((m.rotary = defOp<RotaryOp>(v))) {
    if (!headInvariant(m.rotary.getCos()) || !headInvariant(m.rotary.getSin()))
      return std::nullopt;
    v = m.rotary.getInput();
  }
  auto t = defOp<TransposeOp>(v);
  if (!t || t.getPermutation() != ArrayRef<int64_t>{0, 2, 1, 3})
    return std::nullopt;
  auto reshape = defOp<ReshapeOp>(t.getInput());
  auto expand = reshape ? defOp<ExpandOp>(reshape.getInput()) : ExpandOp();
  if (!expand)
    return std::nullopt;
  auto xt = cast<RankedTensorType>(expand.getInput().getType());
  auto et = cast<RankedTensorType>(expand.getType());
  auto rt = cast<RankedTensorType>(reshape.getType());
  if (xt.getRank() != 5 || et.getRank() != 5 || rt.getRank() != 4)
    return std::nullopt;
  m.g = xt.getDimSize(2);
  m.r = et.getDimSize(3);
  const int64_t d = xt.getDimSize(4);
  // Only the unit axis 3 grows (to R > 1); the reshape merges it into the
  // heads, group-major, so head h reads group h / R, as the attention's
  // grouped heads do.
  if (ShapedType::isDynamic(m.g) || ShapedType::isDynamic(m.r) ||
      ShapedType::isDynamic(d) || xt.getDimSize(3) != 1 || m.r < 2 ||
      et.getDimSize(2) != m.g || et.getDimSize(4) != d ||
      rt.getDimSize(2) != m.g * m.r || rt.getDimSize(3) != d)
    return std::nullopt;
  // The broadcast keeps the batch and sequence dims (a shape from an
  // unrelated tensor could broadcast a batch of 1): Falcon's
  // broadcast_to(key, query.shape), key and query cut from one tensor.
  for (int64_t i : {0, 1})
    if (!sameDim(expand.getResult(), i, expand.getInput(), i) ||
        !compatibleDims(et.getDimSize(i), rt.getDimSize(i)))
      return std::nullopt;
  m.groups = expand.getInput();
  return m;
}

/// The G heads of `m` as the attention reads them: [B, G, S, D], rotated
/// like the broadcast ones were.
Value groupHeads(PatternRewriter &rewriter, Broadcast m) {
  auto xt = cast<RankedTensorType>(m.groups.getType());
  Location loc = m.groups.getLoc();
  auto squeezed = RankedTensorType::get(
      {xt.getDimSize(0), xt.getDimSize(1), m.g, xt.getDimSize(4)},
      xt.getElementType());
  Value x = SqueezeOp::create(rewriter, loc, squeezed, m.groups,
                              rewriter.getDenseI64ArrayAttr({3}));
  auto headsFirst = RankedTensorType::get(
      {xt.getDimSize(0), m.g, xt.getDimSize(1), xt.getDimSize(4)},
      xt.getElementType());
  x = TransposeOp::create(rewriter, loc, headsFirst, x,
                          rewriter.getDenseI64ArrayAttr({0, 2, 1, 3}));
  if (!m.rotary)
    return x;
  auto r = RotaryOp::create(rewriter, m.rotary.getLoc(), headsFirst, x,
                            m.rotary.getCos(), m.rotary.getSin());
  r->setDiscardableAttrs(m.rotary->getDiscardableAttrDictionary());
  return r;
}

/// The keys and values of `a` as broadcasts of the same G groups over R
/// heads each (the values unrotated), or nothing.
std::optional<std::pair<Broadcast, Broadcast>>
groupedKeysValues(AttentionOp a) {
  std::optional<Broadcast> k = matchBroadcast(a.getKey()),
                           v = matchBroadcast(a.getValue());
  if (!k || !v || v->rotary || k->g != v->g || k->r != v->r)
    return std::nullopt;
  return std::make_pair(*k, *v);
}

struct AttendToGroups : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getPastKey() || op.getPresentKey())
      return rewriter.notifyMatchFailure(op,
                                         "a cache interface holds every head");
    if (op.getTokenMajor())
      return rewriter.notifyMatchFailure(op, "token-major");
    auto kv = groupedKeysValues(op);
    if (!kv)
      return rewriter.notifyMatchFailure(
          op, "keys and values are not broadcast groups");
    auto &[k, v] = *kv;
    auto qt = cast<RankedTensorType>(op.getQuery().getType());
    if (qt.getRank() != 4 || qt.getDimSize(1) != k.g * k.r)
      return rewriter.notifyMatchFailure(op, "query heads differ");
    rewriter.setInsertionPoint(op);
    Value key = groupHeads(rewriter, k), value = groupHeads(rewriter, v);
    rewriter.modifyOpInPlace(op, [&] {
      op.getKeyMutable().set(key);
      op.getValueMutable().set(value);
    });
    return success();
  }
};

struct GroupKVHeadsPass
    : public sparsec::impl::GroupKVHeadsPassBase<GroupKVHeadsPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<AttendToGroups>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    // A KV-cache export of this layout caches every copy: say once what
    // the export without a cache would save.
    AttentionOp first;
    int64_t count = 0, g = 0, h = 0;
    getOperation().walk([&](AttentionOp a) {
      auto kv = a.getPastKey() ? groupedKeysValues(a) : std::nullopt;
      if (!kv)
        return;
      if (!count++) {
        first = a;
        g = kv->first.g;
        h = kv->first.g * kv->first.r;
      }
    });
    if (!first)
      return;
    InFlightDiagnostic remark = first.emitRemark();
    remark << count << (count == 1 ? " attention caches" : " attentions cache")
           << " all " << h << " heads of keys and values that are " << g
           << " groups broadcast over their query heads; the model's export "
              "without a cache, compiled with --kv-cache, caches "
           << g << " heads a layer";
    if (auto name = dyn_cast<NameLoc>(first.getLoc()))
      remark << " (first: node '" << name.getName().getValue() << "')";
  }
};
} // namespace
