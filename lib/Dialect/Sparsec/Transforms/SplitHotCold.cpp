//===- SplitHotCold.cpp - GPU and CPU parts of placed FFNs ----------------===//
//
// Part of the sparsec project.
//
// See the pass description (Passes.td) and docs/HotCold.md.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

namespace sparsec {
#define GEN_PASS_DEF_SPLITHOTCOLDPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {

struct SplitHotColdPass
    : public sparsec::impl::SplitHotColdPassBase<SplitHotColdPass> {
  using Base::Base;

  /// `weight` with rows or columns [lo, hi) (a derived global).
  Value slice(OpBuilder &b, Value weight, bool rows, int64_t lo, int64_t hi,
              SymbolTable &symbols) {
    auto ref = defOp<WeightOp>(weight);
    auto global = symbols.lookup<GlobalOp>(ref.getName());
    auto type = cast<RankedTensorType>(ref.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[rows ? 0 : 1] = hi - lo;
    auto newType = RankedTensorType::get(shape, type.getElementType());
    SmallVector<StringRef> transforms;
    if (auto old = global.getTransforms())
      for (Attribute a : *old)
        transforms.push_back(cast<StringAttr>(a).getValue());
    std::string t = (rows ? "slice_rows:" : "slice_cols:") + std::to_string(lo) +
                    ":" + std::to_string(hi);
    transforms.push_back(t);
    OpBuilder gb(global);
    gb.setInsertionPointAfter(global);
    auto part = GlobalOp::create(
        gb, global.getLoc(),
        gb.getStringAttr((global.getSymName() + "." + std::to_string(lo) + "_" +
                          std::to_string(hi))
                             .str()),
        TypeAttr::get(newType), global.getSourceAttr(),
        gb.getStrArrayAttr(transforms), global.getValueAttr(),
        global.getPermutationAttr());
    symbols.insert(part);
    return WeightOp::create(b, ref.getLoc(), newType,
                            FlatSymbolRefAttr::get(part.getSymNameAttr()))
        .getResult();
  }

  static RankedTensorType withLast(Type t, int64_t n) {
    auto r = cast<RankedTensorType>(t);
    SmallVector<int64_t> shape(r.getShape());
    shape.back() = n;
    return RankedTensorType::get(shape, r.getElementType());
  }

  /// The predictor of neurons [lo, hi) of a predicted up projection: same
  /// first matrix, the range's columns of the second and its bias.
  FailureOr<Value> partPredictor(OpBuilder &b, SparseLinearOp up, int64_t lo,
                                 int64_t hi, SymbolTable &symbols) {
    auto p = defOp<PredictOp>(up.getActive());
    if (!p || !defOp<WeightOp>(p.getW2()) ||
        (p.getBias() && !defOp<WeightOp>(p.getBias())))
      return up->emitError("cannot split a predicted layer whose mask is not "
                           "a predictor over weights");
    Value w2 = slice(b, p.getW2(), /*rows=*/false, lo, hi, symbols);
    Value pb = p.getBias() ? slice(b, p.getBias(), true, lo, hi, symbols) : Value();
    Operation *pp = b.clone(*p);
    pp->setOperand(2, w2);
    if (pb)
      pp->setOperand(3, pb);
    pp->getResult(0).setType(withLast(p.getType(), hi - lo));
    return pp->getResult(0);
  }

  /// One part [lo, hi) of the FFN (up, act, down); returns the down
  /// projection's result. `mask`: the part's predicted mask (predicted
  /// up projections).
  FailureOr<Value> part(OpBuilder &b, Operation *up, Operation *act,
                        Operation *down, int64_t lo, int64_t hi, bool cpu,
                        Value mask, SymbolTable &symbols) {
    MLIRContext *ctx = &getContext();
    const int64_t n = hi - lo;
    const bool upT = up->hasAttr("transpose_weight");
    const bool downT = down->hasAttr("transpose_weight");
    Value x = up->getOperand(0);
    Value upW = slice(b, up->getOperand(1), /*rows=*/upT, lo, hi, symbols);
    auto tagCpu = [&](Operation *op) {
      if (cpu)
        op->setAttr(kDeviceAttrName, StringAttr::get(ctx, "cpu"));
    };
    Operation *newUp;
    if (auto l = dyn_cast<LinearOp>(up)) {
      Value bias = l.getBias() ? slice(b, l.getBias(), true, lo, hi, symbols) : Value();
      newUp = LinearOp::create(b, up->getLoc(), withLast(l.getType(), n), x, upW,
                               bias, l.getTransposeWeightAttr(),
                               l.getActivationAttr());
    } else {
      auto s = cast<SparseLinearOp>(up);
      Value bias = s.getBias() ? slice(b, s.getBias(), true, lo, hi, symbols) : Value();
      if (s.getActive() && !mask)
        return up->emitError("internal error: no mask for a predicted part");
      newUp = SparseLinearOp::create(
          b, up->getLoc(), withLast(s.getType(), n), x, upW, bias, mask,
          s.getSparseDimAttr(), s.getModeAttr(), s.getGranularityAttr(),
          s.getTransposeWeightAttr(), /*placement=*/nullptr, s.getActivationAttr(),
          /*pit_tile=*/nullptr);
    }
    tagCpu(newUp);
    IRMapping map;
    map.map(act->getOperand(0), newUp->getResult(0));
    Operation *newAct = b.clone(*act, map);
    newAct->getResult(0).setType(withLast(act->getResult(0).getType(), n));
    newAct->removeAttr("placement");
    tagCpu(newAct);
    Value downW = slice(b, down->getOperand(1), /*rows=*/!downT, lo, hi, symbols);
    Operation *newDown;
    if (auto l = dyn_cast<LinearOp>(down)) {
      newDown = LinearOp::create(b, down->getLoc(), l.getType(), newAct->getResult(0),
                                 downW, cpu ? Value() : l.getBias(),
                                 l.getTransposeWeightAttr(), l.getActivationAttr());
    } else {
      auto s = cast<SparseLinearOp>(down);
      newDown = SparseLinearOp::create(
          b, down->getLoc(), s.getType(), newAct->getResult(0), downW,
          cpu ? Value() : s.getBias(), s.getActive(), s.getSparseDimAttr(),
          s.getModeAttr(), s.getGranularityAttr(), s.getTransposeWeightAttr(),
          /*placement=*/nullptr, s.getActivationAttr(), s.getPitTileAttr());
    }
    tagCpu(newDown);
    return newDown->getResult(0);
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    MLIRContext *ctx = &getContext();
    SmallVector<Operation *> acts;
    module.walk([&](Operation *op) {
      if (op->hasAttr("placement") && op->getNumOperands() == 1 &&
          op->getNumResults() == 1)
        acts.push_back(op);
    });
    for (Operation *act : acts) {
      auto placement = act->getAttrOfType<PlacementAttr>("placement");
      Operation *up = act->getOperand(0).getDefiningOp();
      if (!placement || !up || !act->getResult(0).hasOneUse() ||
          !isa<LinearOp, SparseLinearOp>(up)) {
        act->emitError("a placed FFN must be linear -> activation -> linear");
        return signalPassFailure();
      }
      Operation *down = *act->getResult(0).getUsers().begin();
      if (!isa<LinearOp, SparseLinearOp>(down) ||
          !defOp<WeightOp>(up->getOperand(1)) || !defOp<WeightOp>(down->getOperand(1))) {
        act->emitError("a placed FFN must be linear -> activation -> linear "
                       "over model weights");
        return signalPassFailure();
      }
      const int64_t G = placement.getGpuNeurons(), F = placement.getTotalNeurons();
      if (G >= F)
        continue;
      if (G == 0) {
        for (Operation *op : {up, act, down})
          op->setAttr(kDeviceAttrName, StringAttr::get(ctx, "cpu"));
        ++numCpu;
        continue;
      }
      OpBuilder b(down);
      // Predictors stay on the GPU, one per part; the CPU part's first, so
      // its mask reaches the host while the GPU part runs.
      Value gpuMask, cpuMask;
      if (auto s = dyn_cast<SparseLinearOp>(up); s && s.getActive()) {
        FailureOr<Value> c = partPredictor(b, s, G, F, symbols);
        FailureOr<Value> g = failed(c) ? c : partPredictor(b, s, 0, G, symbols);
        if (failed(g))
          return signalPassFailure();
        cpuMask = *c;
        gpuMask = *g;
      }
      FailureOr<Value> gpu =
          part(b, up, act, down, 0, G, /*cpu=*/false, gpuMask, symbols);
      if (failed(gpu))
        return signalPassFailure();
      FailureOr<Value> cpu =
          part(b, up, act, down, G, F, /*cpu=*/true, cpuMask, symbols);
      if (failed(cpu))
        return signalPassFailure();
      Value sum = AddOp::create(b, down->getLoc(), down->getResult(0).getType(),
                                *gpu, *cpu)
                      .getResult();
      down->getResult(0).replaceAllUsesWith(sum);
      Operation *predict = nullptr;
      if (auto s = dyn_cast<SparseLinearOp>(up))
        if (Value mask = s.getActive())
          predict = mask.getDefiningOp();
      down->erase();
      act->erase();
      up->erase();
      if (predict && predict->use_empty())
        predict->erase();
      ++numSplit;
    }
    // Weights and globals the parts replaced.
    eraseUnusedWeights(module);
  }
};
} // namespace
