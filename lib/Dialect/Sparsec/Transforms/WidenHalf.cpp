//===- WidenHalf.cpp - half-precision products computed in float32 -------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace sparsec {
#define GEN_PASS_DEF_WIDENHALFPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// `type` with a float32 element type if its element type is a float other
/// than float32 and float64 (the kernels' float32 is what a half or bfloat
/// value widens to); nullptr otherwise.
RankedTensorType widened(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !isa<FloatType>(t.getElementType()) ||
      t.getElementType().isF32() || t.getElementType().isF64())
    return nullptr;
  return RankedTensorType::get(t.getShape(),
                               Float32Type::get(type.getContext()));
}

/// A linear's (or linear group's) float16 weight, read as it is: the
/// kernels convert its rows as they load them.
bool keptAsIs(Operation *op, OpOperand &operand) {
  Value v = operand.get();
  if (!v.getDefiningOp<WeightOp>() ||
      !cast<RankedTensorType>(v.getType()).getElementType().isF16())
    return false;
  if (auto l = dyn_cast<LinearOp>(op))
    return v == l.getWeight();
  if (auto g = dyn_cast<LinearGroupOp>(op))
    return llvm::is_contained(g.getWeights(), v);
  return false;
}

struct WidenHalfPass : public sparsec::impl::WidenHalfPassBase<WidenHalfPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (isa<LinearOp, LinearGroupOp, MatMulOp, ConvOp, AttentionOp>(op))
        ops.push_back(op);
    });
    OpBuilder builder(&getContext());
    for (Operation *op : ops) {
      bool needed = llvm::any_of(op->getResultTypes(), [](Type t) {
        return widened(t) != nullptr;
      });
      for (OpOperand &o : op->getOpOperands())
        needed |= widened(o.get().getType()) && !keptAsIs(op, o);
      if (!needed)
        continue;
      builder.setInsertionPoint(op);
      for (OpOperand &o : op->getOpOperands())
        if (auto to = widened(o.get().getType()); to && !keptAsIs(op, o))
          o.set(CastOp::create(builder, op->getLoc(), to, o.get()));
      builder.setInsertionPointAfter(op);
      for (OpResult r : op->getResults()) {
        Type original = r.getType();
        RankedTensorType to = widened(original);
        if (!to)
          continue;
        r.setType(to);
        auto back = CastOp::create(builder, op->getLoc(), original, r);
        r.replaceAllUsesExcept(back, back);
      }
      ++numWidened;
    }
  }
};
} // namespace
