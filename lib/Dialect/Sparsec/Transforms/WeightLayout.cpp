//===- WeightLayout.cpp - [K, N] layout for every linear weight ----------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/IR/SymbolTable.h"

namespace sparsec {
#define GEN_PASS_DEF_WEIGHTLAYOUTPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
struct WeightLayoutPass
    : public sparsec::impl::WeightLayoutPassBase<WeightLayoutPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    // linear and sparse_linear share the operand order (input, weight, ...)
    // and the transpose_weight flag.
    SmallVector<Operation *> work;
    module.walk([&](Operation *op) {
      if (isa<LinearOp, SparseLinearOp>(op) && op->hasAttr("transpose_weight"))
        work.push_back(op);
    });
    for (Operation *op : work) {
      OpOperand &weightOperand = op->getOpOperand(1);
      auto wType = cast<RankedTensorType>(weightOperand.get().getType());
      auto tType = RankedTensorType::get(
          {wType.getDimSize(1), wType.getDimSize(0)}, wType.getElementType());
      OpBuilder b(op);
      Value transposed;
      if (auto weight = defOp<WeightOp>(weightOperand.get())) {
        auto global = symbols.lookup<GlobalOp>(weight.getName());
        std::string name = (global.getSymName() + ".T").str();
        if (!symbols.lookup(name)) {
          OpBuilder gb(global);
          gb.setInsertionPointAfter(global);
          SmallVector<StringRef> transforms;
          if (auto old = global.getTransforms())
            for (Attribute a : *old)
              transforms.push_back(cast<StringAttr>(a).getValue());
          transforms.push_back("transpose");
          auto newGlobal = GlobalOp::create(
              gb, global.getLoc(), gb.getStringAttr(name), TypeAttr::get(tType),
              global.getSourceAttr(), gb.getStrArrayAttr(transforms));
          symbols.insert(newGlobal);
        }
        transposed = WeightOp::create(b, weight.getLoc(), tType,
                                      FlatSymbolRefAttr::get(&getContext(), name))
                         .getResult();
      } else {
        transposed =
            TransposeOp::create(b, op->getLoc(), tType, weightOperand.get(),
                                b.getDenseI64ArrayAttr({1, 0}))
                .getResult();
      }
      weightOperand.set(transposed);
      op->removeAttr("transpose_weight");
    }
    // Weights and globals nothing uses any more.
    module.walk([&](WeightOp op) {
      if (op->use_empty())
        op->erase();
    });
    for (GlobalOp global :
         llvm::make_early_inc_range(module.getOps<GlobalOp>()))
      if (SymbolTable::symbolKnownUseEmpty(global, module))
        global->erase();
  }
};
} // namespace
