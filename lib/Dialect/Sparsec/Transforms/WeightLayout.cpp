//===- WeightLayout.cpp - the weight layout each kernel reads ------------===//
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

  /// A weight value derived from `weight` by appending `transform` to its
  /// global's transforms (a new global, shared by every op asking for the
  /// same derivation). Returns null when `weight` is not a model weight.
  Value derive(OpBuilder &b, Value weight, StringRef transform,
               RankedTensorType newType, SymbolTable &symbols) {
    auto ref = defOp<WeightOp>(weight);
    if (!ref)
      return nullptr;
    auto global = symbols.lookup<GlobalOp>(ref.getName());
    std::string name =
        (global.getSymName() + "." + (transform == "transpose" ? "T" : transform))
            .str();
    if (!symbols.lookup(name)) {
      OpBuilder gb(global);
      gb.setInsertionPointAfter(global);
      SmallVector<StringRef> transforms;
      if (auto old = global.getTransforms())
        for (Attribute a : *old)
          transforms.push_back(cast<StringAttr>(a).getValue());
      transforms.push_back(transform);
      auto newGlobal = GlobalOp::create(
          gb, global.getLoc(), gb.getStringAttr(name), TypeAttr::get(newType),
          global.getSourceAttr(), gb.getStrArrayAttr(transforms),
          global.getValueAttr(), global.getPermutationAttr());
      symbols.insert(newGlobal);
    }
    return WeightOp::create(b, ref.getLoc(), newType,
                            FlatSymbolRefAttr::get(&getContext(), name))
        .getResult();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (sparseWeights != "f32" && sparseWeights != "f16") {
      module.emitError("sparse-weights must be f32 or f16, got '")
          << sparseWeights << "'";
      return signalPassFailure();
    }
    if (denseLayout != "kn" && denseLayout != "nk") {
      module.emitError("dense-layout must be kn or nk, got '")
          << denseLayout << "'";
      return signalPassFailure();
    }
    if (denseWeights != "f32" && denseWeights != "f16") {
      module.emitError("dense-weights must be f32 or f16, got '")
          << denseWeights << "'";
      return signalPassFailure();
    }
    if (convWeights != "f32" && convWeights != "f16") {
      module.emitError("conv-weights must be f32 or f16, got '")
          << convWeights << "'";
      return signalPassFailure();
    }
    SymbolTable symbols(module);
    // linear and sparse_linear share the operand order (input, weight, ...)
    // and the transpose_weight flag.
    SmallVector<Operation *> work;
    module.walk([&](Operation *op) {
      if (isa<LinearOp, SparseLinearOp>(op))
        work.push_back(op);
    });
    for (Operation *op : work) {
      auto sparse = dyn_cast<SparseLinearOp>(op);
      bool wantNK = sparse ? sparse.getSparseDim() == SparseDim::output
                           : denseLayout == "nk" &&
                                 !op->hasAttr(kDeviceAttrName);
      bool isNK = op->hasAttr("transpose_weight");
      if (wantNK == isNK)
        continue;
      OpOperand &weightOperand = op->getOpOperand(1);
      auto wType = cast<RankedTensorType>(weightOperand.get().getType());
      auto tType = RankedTensorType::get(
          {wType.getDimSize(1), wType.getDimSize(0)}, wType.getElementType());
      OpBuilder b(op);
      Value transposed =
          derive(b, weightOperand.get(), "transpose", tType, symbols);
      if (!transposed)
        transposed =
            TransposeOp::create(b, op->getLoc(), tType, weightOperand.get(),
                                b.getDenseI64ArrayAttr({1, 0}))
                .getResult();
      weightOperand.set(transposed);
      if (wantNK)
        op->setAttr("transpose_weight", UnitAttr::get(&getContext()));
      else
        op->removeAttr("transpose_weight");
    }
    auto toF16 = [&](OpOperand &operand) {
      auto type = cast<RankedTensorType>(operand.get().getType());
      if (!type.getElementType().isF32())
        return;
      OpBuilder b(operand.getOwner());
      if (Value half = derive(b, operand.get(), "f16",
                              type.clone(Float16Type::get(&getContext())),
                              symbols))
        operand.set(half);
    };
    module.walk([&](Operation *op) {
      if (sparseWeights == "f16") {
        if (auto s = dyn_cast<SparseLinearOp>(op))
          toF16(s->getOpOperand(1));
        else if (auto p = dyn_cast<PredictOp>(op)) {
          toF16(p->getOpOperand(1));
          toF16(p->getOpOperand(2));
        }
      }
      // Dense linears on either device (the x86 kernels convert float16
      // weights as they load them).
      if (denseWeights == "f16" && isa<LinearOp>(op))
        toF16(op->getOpOperand(1));
      // Convolutions on the GPU (tensor-core GEMMs, fp32 accumulation).
      if (convWeights == "f16" && isa<ConvOp>(op))
        toF16(op->getOpOperand(1));
    });
    // The x86 convolutions compute with float32 weights: say so where fp16
    // storage was asked for, rather than leave it unsaid.
    if (denseWeights == "f16" && convWeights == "f32") {
      int64_t convs = 0;
      module.walk([&](ConvOp) { ++convs; });
      if (convs)
        module.emitRemark()
            << "fp16 weight storage (--weights f16) applies to linears on "
               "this target: the "
            << convs << " convolution" << (convs == 1 ? "" : "s")
            << " keep float32 weights (the CUDA target stores them as "
               "fp16)";
    }
    // Weights and globals nothing uses any more.
    eraseUnusedWeights(module);
  }
};
} // namespace
