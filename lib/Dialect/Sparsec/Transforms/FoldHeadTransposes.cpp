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
      Value q = headSwapped(a.getQuery(), a), k = headSwapped(a.getKey(), a),
            v = headSwapped(a.getValue(), a);
      if (!q || !k || !v || !a.getResult().hasOneUse())
        continue;
      Operation *user = *a.getResult().getUsers().begin();
      if (user->getNumResults() != 1 ||
          headSwapped(user->getResult(0), a) != a.getResult())
        continue;
      auto back = cast<TransposeOp>(user);
      // At the old attention's place: every operand is defined before it.
      OpBuilder b(a);
      auto folded = AttentionOp::create(
          b, a.getLoc(), back.getType(),
          a.getPresentKey() ? a.getPresentKey().getType() : Type(),
          a.getPresentValue() ? a.getPresentValue().getType() : Type(), q, k, v,
          a.getMask(), a.getPastKey(), a.getPastValue(), a.getScaleAttr(),
          a.getCausalAttr(), b.getUnitAttr());
      folded->setDiscardableAttrs(a->getDiscardableAttrDictionary());
      back.getResult().replaceAllUsesWith(folded.getResult());
      back->erase();
      if (a.getPresentKey()) {
        a.getPresentKey().replaceAllUsesWith(folded.getPresentKey());
        a.getPresentValue().replaceAllUsesWith(folded.getPresentValue());
      }
      llvm::SetVector<Operation *> transposes;
      for (Value x : {a.getQuery(), a.getKey(), a.getValue()})
        transposes.insert(x.getDefiningOp());
      a->erase();
      for (Operation *t : transposes)
        if (t->use_empty())
          t->erase();
      ++numFolded;
    }
  }
};
} // namespace
