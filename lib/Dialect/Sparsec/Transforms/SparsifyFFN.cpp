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
      // A site feeding this linear directly (it is then not a gate, whose
      // only user is the product).
      Operation *act = op.getInput().getDefiningOp();
      if (act && isSparsitySite(act)) {
        if (!sparseEnough(act)) {
          ++numDense;
          return;
        }
        downs.push_back(op);
        return;
      }
      // A squared activation: the down projection skips its zeros too.
      if (act && isa<MulOp, PowOp>(act) && act->getOperand(0).getDefiningOp()) {
        Operation *base = act->getOperand(0).getDefiningOp();
        if (matchSquared(base) == op.getOperation()) {
          if (!compound) {
            remarkDense(base, "squared activation");
            ++numDense;
            return;
          }
          if (!sparseEnough(base)) {
            ++numDense;
            return;
          }
          downs.push_back(op);
          return;
        }
      }
      auto product = dyn_cast_or_null<MulOp>(act);
      if (!product)
        return;
      for (Value operand : product->getOperands()) {
        Operation *gate = operand.getDefiningOp();
        std::optional<GatedMlp> mlp = gate ? matchGatedMlp(gate) : std::nullopt;
        if (!mlp || mlp->down != op.getOperation())
          continue;
        if (!compound) {
          remarkDense(gate, "gated MLP");
          ++numDense;
          return;
        }
        if (!sparseEnough(gate)) {
          ++numDense;
          return;
        }
        downs.push_back(op);
        auto up = mlp->up.getDefiningOp<LinearOp>();
        if (up && up->hasOneUse() && !up.getActivation())
          ups.push_back({up, gate});
        return;
      }
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
          /*activation=*/nullptr, /*pit_tile=*/nullptr);
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
          /*activation=*/nullptr, /*pit_tile=*/nullptr);
      up.replaceAllUsesWith(sparse.getResult());
      up.erase();
      ++numSparse;
    }
  }
};
} // namespace
