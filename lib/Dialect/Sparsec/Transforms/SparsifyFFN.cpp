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

  /// Whether site `act` carries a measurement above the threshold.
  bool sparseEnough(Operation *act) {
    auto sparsity = act->getAttrOfType<ActSparsityAttr>("sparsity");
    return sparsity &&
           sparsity.getZeroFraction().convertToDouble() >= minZeroFraction;
  }

  /// "<what> at '<site>' stays dense: the target does not take <what>s
  /// yet" (compound-sites=false).
  void remarkDense(Operation *act, StringRef what) {
    auto loc = dyn_cast<NameLoc>(act->getLoc());
    act->emitRemark(what)
        << (loc ? " at '" + loc.getName().str() + "'" : std::string())
        << " stays dense: the target does not take " << what << "s yet";
  }

  void runOnOperation() override {
    // Down projections (input side) and, for gated MLPs, the up
    // projections (output side) with the activation they follow.
    SmallVector<LinearOp> downs;
    SmallVector<std::pair<LinearOp, Operation *>> ups;
    getOperation().walk([&](LinearOp op) {
      // The site whose zeros this linear (a down projection) may skip: one
      // feeding it directly, or one reaching it through a square or a cap
      // or as the gate of a gated MLP (`compound`, with its kind).
      Operation *act = op.getInput().getDefiningOp();
      if (!act)
        return;
      Operation *site = nullptr;
      StringRef compoundKind;
      std::optional<GatedMlp> mlp;
      if (isSparsitySite(act)) {
        site = act;
      } else if (isa<MulOp, PowOp, MinOp>(act)) {
        for (Value operand : act->getOperands()) {
          Operation *base = operand.getDefiningOp();
          if (!base)
            continue;
          if (matchZeroKeeping(base) == op.getOperation()) {
            site = base;
            compoundKind = zeroKeepingKind(base);
            break;
          }
          mlp = matchGatedMlp(base);
          if (mlp && mlp->down == op.getOperation()) {
            site = base;
            compoundKind = "gated MLP";
            break;
          }
          mlp.reset();
        }
      }
      if (!site)
        return;
      if (!compoundKind.empty() && !compound) {
        remarkDense(site, compoundKind);
        ++numDense;
        return;
      }
      if (!sparseEnough(site)) {
        ++numDense;
        return;
      }
      downs.push_back(op);
      if (!mlp)
        return;
      auto up = mlp->up.getDefiningOp<LinearOp>();
      if (up && up->hasOneUse() && !up.getActivation())
        ups.push_back({up, site});
    });
    MLIRContext *ctx = &getContext();
    for (LinearOp op : downs) {
      OpBuilder b(op);
      auto sparse = SparseLinearOp::create(
          b, op.getLoc(), op.getType(), op.getInput(), op.getWeight(),
          op.getBias(), /*active=*/Value(),
          SparseDimAttr::get(ctx, SparseDim::input),
          SparseModeAttr::get(ctx, SparseMode::exact),
          GranularityAttr::get(ctx, Granularity::neuron),
          op.getTransposeWeightAttr(), /*placement=*/nullptr,
          /*activation=*/nullptr, /*pit_tile=*/nullptr,
          /*pit_columns=*/nullptr);
      op.replaceAllUsesWith(sparse.getResult());
      op.erase();
      ++numSparse;
    }
    // A gated MLP's up projection computes only the neurons whose gate is
    // not 0: the mask is `gate > 0` after a ReLU, `!(gate == 0)` otherwise.
    for (auto [up, gate] : ups) {
      OpBuilder b(up);
      Value g = gate->getResult(0);
      auto gType = cast<RankedTensorType>(g.getType());
      auto maskType = RankedTensorType::get(gType.getShape(), b.getI1Type());
      auto zeroType = RankedTensorType::get({}, gType.getElementType());
      Value zero = ConstantOp::create(
          b, up.getLoc(),
          DenseElementsAttr::get(zeroType,
                                 b.getZeroAttr(gType.getElementType())));
      Value mask;
      if (isa<ReluOp>(gate)) {
        mask = CompareOp::create(b, up.getLoc(), maskType,
                                 ComparePredicate::gt, g, zero);
      } else {
        Value isZero = CompareOp::create(b, up.getLoc(), maskType,
                                         ComparePredicate::eq, g, zero);
        mask = NotOp::create(b, up.getLoc(), maskType, isZero);
      }
      auto sparse = SparseLinearOp::create(
          b, up.getLoc(), up.getType(), up.getInput(), up.getWeight(),
          up.getBias(), mask, SparseDimAttr::get(ctx, SparseDim::output),
          SparseModeAttr::get(ctx, SparseMode::exact),
          GranularityAttr::get(ctx, Granularity::neuron),
          up.getTransposeWeightAttr(), /*placement=*/nullptr,
          /*activation=*/nullptr, /*pit_tile=*/nullptr,
          /*pit_columns=*/nullptr);
      up.replaceAllUsesWith(sparse.getResult());
      up.erase();
      ++numSparse;
    }
  }
};
} // namespace
