//===- WidenHalf.cpp - half-precision products computed in float32 -------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

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

/// `type` widened, or `type` itself where it is not half precision.
Type widenedOrSame(Type type) {
  RankedTensorType to = widened(type);
  return to ? Type(to) : type;
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

/// `attr` with float32 elements (or value) if it is half precision.
Attribute widenedAttr(Attribute attr) {
  if (auto f = dyn_cast_or_null<FloatAttr>(attr)) {
    if (f.getType().isF16() || f.getType().isBF16())
      return FloatAttr::get(Float32Type::get(attr.getContext()),
                            f.getValueAsDouble());
    return attr;
  }
  auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense)
    return attr;
  RankedTensorType to = widened(dense.getType());
  if (!to)
    return attr;
  SmallVector<float> values;
  for (APFloat v : dense.getValues<APFloat>())
    values.push_back(float(v.convertToDouble()));
  return DenseElementsAttr::get(to, ArrayRef<float>(values));
}

/// Whether every use of `global` is a WeightOp read only as a linear's (or
/// linear group's) float16 weight.
bool onlyLinearWeights(GlobalOp global, ModuleOp module) {
  if (!cast<RankedTensorType>(global.getType()).getElementType().isF16())
    return false;
  bool only = true;
  module.walk([&](WeightOp w) {
    if (w.getName() != global.getSymName())
      return;
    for (OpOperand &use : w.getResult().getUses())
      only &= keptAsIs(use.getOwner(), use);
  });
  return only;
}

struct WidenHalfPass : public sparsec::impl::WidenHalfPassBase<WidenHalfPass> {
  using Base::Base;

  void runOnOperation() override {
    if (all)
      return widenAll();
    widenOps();
  }

  /// Every half-precision value becomes float32.
  void widenAll() {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    // Weights: read as they are by linears, or converted when packed.
    llvm::StringSet<> kept;
    for (GlobalOp g : module.getOps<GlobalOp>()) {
      RankedTensorType to = widened(g.getType());
      if (!to)
        continue;
      if (onlyLinearWeights(g, module)) {
        kept.insert(g.getSymName());
        continue;
      }
      g.setType(to);
      if (g.getValueAttr()) {
        g.setValueAttr(cast<ElementsAttr>(widenedAttr(g.getValueAttr())));
      } else {
        SmallVector<Attribute> transforms{StringAttr::get(ctx, "widen")};
        if (auto list = g.getTransforms())
          transforms.append(list->begin(), list->end());
        g.setTransformsAttr(ArrayAttr::get(ctx, transforms));
      }
      ++numWidened;
    }
    module.walk([&](Operation *op) {
      // Globals are done above; a kept weight stays float16.
      if (isa<GlobalOp>(op))
        return;
      if (auto w = dyn_cast<WeightOp>(op); w && kept.contains(w.getName()))
        return;
      for (Region &region : op->getRegions())
        for (Block &block : region)
          for (BlockArgument arg : block.getArguments())
            if (RankedTensorType to = widened(arg.getType()))
              arg.setType(to);
      SmallVector<NamedAttribute> attrs(op->getAttrs());
      for (NamedAttribute a : attrs)
        if (Attribute w = widenedAttr(a.getValue()); w != a.getValue())
          op->setAttr(a.getName(), w);
      for (OpResult r : op->getResults())
        if (RankedTensorType to = widened(r.getType())) {
          r.setType(to);
          ++numWidened;
        }
    });
    // Signatures follow (declarations too): a body's arguments and
    // returned values were widened above, and a kept weight is never
    // returned (a return is not a linear's use).
    module.walk([&](func::FuncOp func) {
      auto map = [](TypeRange types) {
        return llvm::map_to_vector(types, widenedOrSame);
      };
      func.setFunctionType(FunctionType::get(
          ctx, map(func.getArgumentTypes()), map(func.getResultTypes())));
    });
  }

  /// Half-precision operands of the float32-only ops cast to float32, their
  /// results cast back.
  void widenOps() {
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
