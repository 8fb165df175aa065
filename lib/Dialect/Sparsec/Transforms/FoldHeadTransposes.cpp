//===- FoldHeadTransposes.cpp - head transposes into attention layout -----===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "llvm/ADT/SetVector.h"

namespace sparsec {
#define GEN_PASS_DEF_FOLDHEADTRANSPOSESPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// `v` = transpose(x) swapping the sequence and heads of a [B, ., ., D]
/// tensor, placed where `at` is: x, else null.
Value headSwapped(Value v, Operation *at) {
  auto t = defOp<TransposeOp>(v);
  if (!t || placedOnCpu(t) != placedOnCpu(at))
    return nullptr;
  ArrayRef<int64_t> perm = t.getPermutation();
  if (perm.size() != 4 || perm[0] != 0 || perm[1] != 2 || perm[2] != 1 ||
      perm[3] != 3)
    return nullptr;
  return t.getInput();
}

/// A token-major attention operand: `x` itself, or, when `rotary` is set,
/// the rotary embedding of `x` (the rotation commutes with the head swap).
struct TokenMajor {
  Value x;
  RotaryOp rotary;
};

/// cos/sin of a rotary over [B, H, S, D] seen over [B, S, H, D]: leading
/// unit dims added up to rank 4, then the heads and sequence swapped. Both
/// are views at run time when the table does not vary by head; nullopt
/// when it does (or is not known not to).
std::optional<RankedTensorType> swappedTable(RankedTensorType t) {
  if (t.getRank() > 4)
    return std::nullopt;
  SmallVector<int64_t> shape(4 - t.getRank(), 1);
  llvm::append_range(shape, t.getShape());
  if (shape[1] != 1)
    return std::nullopt;
  std::swap(shape[1], shape[2]);
  return RankedTensorType::get(shape, t.getElementType());
}

/// `v` as a token-major operand of attention `at`: a head swap's input, or
/// a rotary of one whose only user is the attention.
std::optional<TokenMajor> tokenMajor(Value v, Operation *at) {
  if (Value x = headSwapped(v, at))
    return TokenMajor{x, RotaryOp()};
  auto r = defOp<RotaryOp>(v);
  if (!r || !r->hasOneUse() || placedOnCpu(r) != placedOnCpu(at) ||
      r.getInput().getType().getRank() != 4 ||
      !swappedTable(r.getCos().getType()))
    return std::nullopt;
  if (Value x = headSwapped(r.getInput(), at))
    return TokenMajor{x, r};
  return std::nullopt;
}

/// The value of `m` placed before `b`'s insertion point: `m.x`, or a new
/// rotary of it over the swapped tables.
Value materialize(OpBuilder &b, TokenMajor m) {
  if (!m.rotary)
    return m.x;
  Location loc = m.rotary.getLoc();
  auto swapped = [&](Value table) -> Value {
    auto t = cast<RankedTensorType>(table.getType());
    if (t.getRank() < 4) {
      SmallVector<int64_t> axes, shape(4 - t.getRank(), 1);
      for (int64_t i = 0; i < 4 - t.getRank(); ++i)
        axes.push_back(i);
      llvm::append_range(shape, t.getShape());
      table = UnsqueezeOp::create(
          b, loc, RankedTensorType::get(shape, t.getElementType()), table,
          b.getDenseI64ArrayAttr(axes));
    }
    return TransposeOp::create(b, loc, *swappedTable(t), table,
                               b.getDenseI64ArrayAttr({0, 2, 1, 3}));
  };
  Value cos = swapped(m.rotary.getCos());
  Value sin =
      m.rotary.getSin() == m.rotary.getCos() ? cos : swapped(m.rotary.getSin());
  auto r = RotaryOp::create(b, loc, m.x.getType(), m.x, cos, sin);
  r->setDiscardableAttrs(m.rotary->getDiscardableAttrDictionary());
  return r;
}

struct FoldHeadTransposesPass
    : public sparsec::impl::FoldHeadTransposesPassBase<FoldHeadTransposesPass> {
  using Base::Base;
  void runOnOperation() override {
    SmallVector<AttentionOp> attentions;
    getOperation().walk([&](AttentionOp a) {
      if (!a.getTokenMajor())
        attentions.push_back(a);
    });
    for (AttentionOp a : attentions) {
      std::optional<TokenMajor> q = tokenMajor(a.getQuery(), a),
                                k = tokenMajor(a.getKey(), a),
                                v = tokenMajor(a.getValue(), a);
      if (!q || !k || !v || v->rotary || !a.getResult().hasOneUse())
        continue;
      Operation *user = *a.getResult().getUsers().begin();
      if (user->getNumResults() != 1 ||
          headSwapped(user->getResult(0), a) != a.getResult())
        continue;
      auto back = cast<TransposeOp>(user);
      // At the old attention's place: every operand is defined before it.
      OpBuilder b(a);
      Value qx = materialize(b, *q), kx = materialize(b, *k);
      auto folded = AttentionOp::create(
          b, a.getLoc(), back.getType(),
          a.getPresentKey() ? a.getPresentKey().getType() : Type(),
          a.getPresentValue() ? a.getPresentValue().getType() : Type(), qx, kx,
          v->x, a.getMask(), a.getPastKey(), a.getPastValue(), a.getScaleAttr(),
          a.getCausalAttr(), b.getUnitAttr());
      folded->setDiscardableAttrs(a->getDiscardableAttrDictionary());
      back.getResult().replaceAllUsesWith(folded.getResult());
      back->erase();
      if (a.getPresentKey()) {
        a.getPresentKey().replaceAllUsesWith(folded.getPresentKey());
        a.getPresentValue().replaceAllUsesWith(folded.getPresentValue());
      }
      // The old operands' chains (rotary, then transpose), once unused.
      llvm::SetVector<Operation *> dead;
      for (Value x : {a.getQuery(), a.getKey(), a.getValue()})
        dead.insert(x.getDefiningOp());
      a->erase();
      for (size_t i = 0; i < dead.size(); ++i) {
        Operation *op = dead[i];
        if (!op->use_empty())
          continue;
        if (auto r = dyn_cast<RotaryOp>(op))
          dead.insert(r.getInput().getDefiningOp());
        op->erase();
      }
      ++numFolded;
    }
  }
};
} // namespace
