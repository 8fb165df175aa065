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
    SmallVector<LinearOp> work;
    module.walk([&](LinearOp op) {
      if (op.getTransposeWeight())
        work.push_back(op);
    });
    for (LinearOp op : work) {
      auto wType = cast<RankedTensorType>(op.getWeight().getType());
      auto tType = RankedTensorType::get(
          {wType.getDimSize(1), wType.getDimSize(0)}, wType.getElementType());
      OpBuilder b(op);
      Value transposed;
      if (auto weight = defOp<WeightOp>(op.getWeight())) {
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
            TransposeOp::create(b, op.getLoc(), tType, op.getWeight(),
                                b.getDenseI64ArrayAttr({1, 0}))
                .getResult();
      }
      op.getWeightMutable().assign(transposed);
      op.setTransposeWeight(false);
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
