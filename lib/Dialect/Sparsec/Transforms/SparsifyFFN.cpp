//===- SparsifyFFN.cpp - exact neuron-sparse linears ----------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "SparsitySites.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

namespace sparsec {
#define GEN_PASS_DEF_SPARSIFYFFNPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
struct SparsifyFFNPass
    : public sparsec::impl::SparsifyFFNPassBase<SparsifyFFNPass> {
  using Base::Base;
  void runOnOperation() override {
    SmallVector<LinearOp> work;
    getOperation().walk([&](LinearOp op) {
      Operation *act = op.getInput().getDefiningOp();
      if (!act || !isSparsitySite(act))
        return;
      auto sparsity = act->getAttrOfType<ActSparsityAttr>("sparsity");
      if (!sparsity ||
          sparsity.getZeroFraction().convertToDouble() < minZeroFraction) {
        ++numDense;
        return;
      }
      work.push_back(op);
    });
    MLIRContext *ctx = &getContext();
    for (LinearOp op : work) {
      OpBuilder b(op);
      auto sparse = SparseLinearOp::create(
          b, op.getLoc(), op.getType(), op.getInput(), op.getWeight(),
          op.getBias(), /*active=*/Value(),
          SparseDimAttr::get(ctx, SparseDim::input),
          SparseModeAttr::get(ctx, SparseMode::exact),
          GranularityAttr::get(ctx, Granularity::neuron),
          op.getTransposeWeightAttr(), /*placement=*/nullptr,
          /*activation=*/nullptr, /*pit_tile=*/nullptr);
      op.replaceAllUsesWith(sparse.getResult());
      op.erase();
      ++numSparse;
    }
  }
};
} // namespace
