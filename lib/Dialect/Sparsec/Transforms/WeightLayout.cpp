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
    auto storage = [&](StringRef option, StringRef value) {
      if (value == "f32" || value == "f16" || value == "bf16")
        return true;
      module.emitError() << option << " must be f32, f16 or bf16, got '"
                         << value << "'";
      return false;
    };
    if (!storage("sparse-weights", sparseWeights) ||
        !storage("dense-weights", denseWeights) ||
        !storage("conv-weights", convWeights))
      return signalPassFailure();
    if (denseLayout != "kn" && denseLayout != "nk") {
      module.emitError("dense-layout must be kn or nk, got '")
          << denseLayout << "'";
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
    // float32 weights to the storage `to` names (f16: transform "f16";
    // bf16: transform "bf16"; f32: left as they are).
    auto narrow = [&](OpOperand &operand, StringRef to) {
      auto type = cast<RankedTensorType>(operand.get().getType());
      if (to == "f32" || !type.getElementType().isF32())
        return;
      Type elt = to == "bf16" ? Type(BFloat16Type::get(&getContext()))
                              : Type(Float16Type::get(&getContext()));
      OpBuilder b(operand.getOwner());
      if (Value half = derive(b, operand.get(), to, type.clone(elt), symbols))
        operand.set(half);
    };
    module.walk([&](Operation *op) {
      if (auto s = dyn_cast<SparseLinearOp>(op))
        narrow(s->getOpOperand(1), sparseWeights);
      else if (auto p = dyn_cast<PredictOp>(op)) {
        narrow(p->getOpOperand(1), sparseWeights);
        narrow(p->getOpOperand(2), sparseWeights);
      }
      // Dense linears on either device (the x86 kernels convert float16
      // and bfloat16 weights as they load them).
      if (isa<LinearOp>(op))
        narrow(op->getOpOperand(1), denseWeights);
      // Convolutions on the GPU (tensor-core GEMMs, fp32 accumulation).
      if (isa<ConvOp>(op))
        narrow(op->getOpOperand(1), convWeights);
    });
    // The x86 convolutions compute with float32 weights: say so where fp16
    // storage was asked for, rather than leave it unsaid.
    if (denseWeights != "f32" && convWeights == "f32") {
      int64_t convs = 0;
      module.walk([&](ConvOp) { ++convs; });
      StringRef shown = denseWeights == "bf16" ? "bf16" : "fp16";
      if (convs)
        module.emitRemark()
            << shown << " weight storage (--weights " << denseWeights
            << ") applies to linears on this target: the " << convs
            << " convolution" << (convs == 1 ? "" : "s")
            << " keep float32 weights (the CUDA target stores them as " << shown
            << ")";
    }
    // Weights and globals nothing uses any more.
    eraseUnusedWeights(module);
  }
};
} // namespace
