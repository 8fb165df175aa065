//===- SplitHotCold.cpp - GPU and CPU parts of placed FFNs ----------------===//
//
// Part of the sparsec project.
//
// See the pass description (Passes.td) and docs/HotCold.md.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "SparsitySites.h"
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

  /// One part [lo, hi) of FFN `r`: its body cloned over the range's rows or
  /// columns of every projection's weight and bias, then the down
  /// projection over the range's rows (its bias on the GPU part only).
  /// Returns the down projection's result. `mask`: the part's predicted
  /// mask (a predicted first projection).
  FailureOr<Value> part(OpBuilder &b, const FfnRegion &r, int64_t lo,
                        int64_t hi, bool cpu, Value mask, SymbolTable &symbols) {
    MLIRContext *ctx = &getContext();
    const int64_t n = hi - lo;
    auto tagCpu = [&](Operation *op) {
      if (cpu)
        op->setAttr(kDeviceAttrName, StringAttr::get(ctx, "cpu"));
    };
    IRMapping map;
    if (auto s = dyn_cast<SparseLinearOp>(r.projections.front());
        s && s.getActive()) {
      if (!mask)
        return s->emitError("internal error: no mask for a predicted part");
      map.map(s.getActive(), mask);
    }
    for (Operation *op : r.body) {
      // A projection's sliced weight and bias, created before the clone.
      SmallVector<std::pair<unsigned, Value>> sliced;
      if (llvm::is_contained(r.projections, op)) {
        const bool t = op->hasAttr("transpose_weight");
        sliced.push_back(
            {1, slice(b, op->getOperand(1), /*rows=*/t, lo, hi, symbols)});
        if (OpOperand *bias = biasOperand(op))
          sliced.push_back({bias->getOperandNumber(),
                            slice(b, bias->get(), /*rows=*/true, lo, hi, symbols)});
      }
      Operation *c = b.clone(*op, map);
      c->removeAttr("placement"); // the activation's and the linears'
      for (auto [i, v] : sliced)
        c->setOperand(i, v);
      for (Value result : c->getResults())
        result.setType(withLast(result.getType(), n));
      map.map(op->getResults(), c->getResults());
      tagCpu(c);
    }
    Operation *down = r.down;
    const bool downT = down->hasAttr("transpose_weight");
    Value input = map.lookup(down->getOperand(0));
    Value downW = slice(b, down->getOperand(1), /*rows=*/!downT, lo, hi, symbols);
    Operation *newDown;
    if (auto l = dyn_cast<LinearOp>(down)) {
      newDown = LinearOp::create(b, down->getLoc(), l.getType(), input, downW,
                                 cpu ? Value() : l.getBias(),
                                 l.getTransposeWeightAttr(), l.getActivationAttr());
    } else {
      auto s = cast<SparseLinearOp>(down);
      newDown = SparseLinearOp::create(
          b, down->getLoc(), s.getType(), input, downW,
          cpu ? Value() : s.getBias(), /*active=*/Value(), s.getSparseDimAttr(),
          s.getModeAttr(), s.getGranularityAttr(), s.getTransposeWeightAttr(),
          /*placement=*/nullptr, s.getActivationAttr(), s.getPitTileAttr(),
          s.getPitColumnsAttr());
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
      std::string why;
      std::optional<FfnRegion> r = matchFfnRegion(act, why);
      if (!placement || !r) {
        act->emitError("cannot split this placed FFN: ")
            << (placement ? why : "its placement is not #sparsec.placement");
        return signalPassFailure();
      }
      const int64_t G = placement.getGpuNeurons(), F = placement.getTotalNeurons();
      if (F != r->neurons || G < 0) {
        act->emitError("cannot split this placed FFN: its placement counts ")
            << F << " neurons (" << G << " on the GPU), the FFN has "
            << r->neurons;
        return signalPassFailure();
      }
      if (G >= F)
        continue;
      if (G == 0) {
        for (Operation *op : r->body)
          op->setAttr(kDeviceAttrName, StringAttr::get(ctx, "cpu"));
        r->down->setAttr(kDeviceAttrName, StringAttr::get(ctx, "cpu"));
        ++numCpu;
        continue;
      }
      Operation *down = r->down;
      OpBuilder b(down);
      // Predictors stay on the GPU, one per part; the CPU part's first, so
      // its mask reaches the host while the GPU part runs.
      Value gpuMask, cpuMask;
      auto first = dyn_cast<SparseLinearOp>(r->projections.front());
      Operation *predict = first && first.getActive()
                               ? first.getActive().getDefiningOp()
                               : nullptr;
      if (predict) {
        FailureOr<Value> c = partPredictor(b, first, G, F, symbols);
        FailureOr<Value> g = failed(c) ? c : partPredictor(b, first, 0, G, symbols);
        if (failed(g))
          return signalPassFailure();
        cpuMask = *c;
        gpuMask = *g;
      }
      FailureOr<Value> gpu = part(b, *r, 0, G, /*cpu=*/false, gpuMask, symbols);
      if (failed(gpu))
        return signalPassFailure();
      FailureOr<Value> cpu = part(b, *r, G, F, /*cpu=*/true, cpuMask, symbols);
      if (failed(cpu))
        return signalPassFailure();
      Value sum = AddOp::create(b, down->getLoc(), down->getResult(0).getType(),
                                *gpu, *cpu)
                      .getResult();
      down->getResult(0).replaceAllUsesWith(sum);
      down->erase();
      for (Operation *op : llvm::reverse(r->body))
        op->erase();
      if (predict && predict->use_empty())
        predict->erase();
      ++numSplit;
    }
    // Weights and globals the parts replaced.
    eraseUnusedWeights(module);
  }
};
} // namespace
