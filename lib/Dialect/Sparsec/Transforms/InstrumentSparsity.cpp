//===- InstrumentSparsity.cpp - profile counters at sparsity sites -------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "SparsitySites.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

namespace sparsec {
#define GEN_PASS_DEF_INSTRUMENTSPARSITYPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
struct InstrumentSparsityPass
    : public sparsec::impl::InstrumentSparsityPassBase<InstrumentSparsityPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<Operation *> sites;
    module.walk([&](Operation *op) {
      if (isSparsitySite(op))
        sites.push_back(op);
    });
    SmallVector<Attribute> names;
    OpBuilder b(&getContext());
    for (auto [index, op] : llvm::enumerate(sites)) {
      std::string name = siteName(op, index);
      b.setInsertionPointAfter(op);
      // The layer input: what the linear producing the pre-activation
      // reads. Profiles sample it, with the active mask, for predictors.
      Value layerInput;
      if (auto producer = op->getOperand(0).getDefiningOp<LinearOp>())
        if (!producer.getActivation())
          layerInput = producer.getInput();
      ProfileCountOp::create(b, op->getLoc(), op->getResult(0), layerInput,
                             b.getStringAttr(name),
                             b.getI64IntegerAttr(index));
      names.push_back(b.getStringAttr(name));
    }
    module->setAttr("sparsec.profile_sites", b.getArrayAttr(names));
    numSites = sites.size();
  }
};
} // namespace
