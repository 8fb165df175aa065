//===- InferShapes.cpp - refine dynamic dimensions -----------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"

namespace sparsec {
#define GEN_PASS_DEF_INFERSHAPESPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

/// Joins a current and an inferred type: static dims win. Returns null when
/// nothing changes or the two disagree.
static RankedTensorType refine(Type current, ArrayRef<int64_t> inferred,
                               Type inferredElt) {
  auto cur = dyn_cast<RankedTensorType>(current);
  if (!cur || cur.getRank() != static_cast<int64_t>(inferred.size()))
    return {};
  if (inferredElt && inferredElt != cur.getElementType())
    return {};
  SmallVector<int64_t> dims(cur.getShape());
  bool changed = false;
  for (auto [d, i] : llvm::zip(dims, inferred)) {
    if (!ShapedType::isDynamic(d) || ShapedType::isDynamic(i))
      continue;
    d = i;
    changed = true;
  }
  return changed ? RankedTensorType::get(dims, cur.getElementType(),
                                         cur.getEncoding())
                 : RankedTensorType();
}

int64_t sparsec::inferShapes(ModuleOp module) {
  int64_t changed = 0;
  auto update = [&](Value v, ArrayRef<int64_t> dims, Type elt) {
    if (RankedTensorType t = refine(v.getType(), dims, elt)) {
      v.setType(t);
      ++changed;
    }
  };
  module.walk([&](Operation *op) {
    if (auto infer = dyn_cast<InferShapedTypeOpInterface>(op)) {
      SmallVector<ShapedTypeComponents> comps;
      if (failed(infer.inferReturnTypeComponents(
              op->getContext(), std::nullopt, op->getOperands(),
              op->getAttrDictionary(), op->getPropertiesStorage(),
              op->getRegions(), comps)))
        return;
      for (auto [res, c] : llvm::zip(op->getResults(), comps))
        if (c.hasRank())
          update(res, c.getDims(), Type());
      return;
    }
    // Ops whose result has the shape of their first operand.
    bool sameShape = op->hasTrait<OpTrait::SameOperandsAndResultType>() ||
                     op->hasTrait<OpTrait::SameOperandsAndResultShape>() ||
                     isa<LayerNormOp, RmsNormOp, BatchNormOp>(op);
    if (sameShape && op->getNumOperands() > 0 && op->getNumResults() == 1)
      if (auto in = dyn_cast<RankedTensorType>(op->getOperand(0).getType()))
        update(op->getResult(0), in.getShape(), Type());
  });
  module.walk([&](func::FuncOp func) {
    auto ret = cast<func::ReturnOp>(func.getBody().back().getTerminator());
    auto type = func.getFunctionType();
    if (TypeRange(ret.getOperandTypes()) != type.getResults())
      func.setFunctionType(FunctionType::get(
          func.getContext(), type.getInputs(), ret.getOperandTypes()));
  });
  return changed;
}

void sparsec::pinDims(func::FuncOp func, const llvm::StringMap<int64_t> &pinned) {
  SmallVector<Type> inputs(func.getFunctionType().getInputs());
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto names = func.getArgAttrOfType<ArrayAttr>(i, "sparsec.dims");
    auto type = dyn_cast<RankedTensorType>(inputs[i]);
    if (!names || !type || static_cast<int64_t>(names.size()) != type.getRank())
      continue;
    SmallVector<int64_t> shape(type.getShape());
    for (auto [d, name] : llvm::zip(shape, names)) {
      auto it = pinned.find(cast<StringAttr>(name).getValue());
      if (ShapedType::isDynamic(d) && it != pinned.end())
        d = it->second;
    }
    inputs[i] = RankedTensorType::get(shape, type.getElementType());
    func.getArgument(i).setType(inputs[i]);
  }
  func.setFunctionType(FunctionType::get(func.getContext(), inputs,
                                         func.getFunctionType().getResults()));
}

std::string sparsec::unknownDimName(ModuleOp module,
                                    ArrayRef<std::string> entries) {
  llvm::SmallVector<StringRef> known;
  module.walk([&](func::FuncOp func) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (auto names = func.getArgAttrOfType<ArrayAttr>(i, "sparsec.dims"))
        for (Attribute a : names)
          if (auto s = dyn_cast<StringAttr>(a);
              s && !s.getValue().empty() &&
              !llvm::is_contained(known, s.getValue()))
            known.push_back(s.getValue());
  });
  for (const std::string &entry : entries) {
    StringRef name = StringRef(entry).split('=').first;
    if (llvm::is_contained(known, name))
      continue;
    return "'" + entry + "': no input has a dimension named '" + name.str() +
           "' (" +
           (known.empty() ? std::string("the inputs have no named dimensions")
                          : "named dimensions: " + llvm::join(known, ", ")) +
           ")";
  }
  return "";
}

namespace {
struct InferShapesPass
    : public sparsec::impl::InferShapesPassBase<InferShapesPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::StringMap<int64_t> pinned;
    for (const std::string &entry : dims) {
      StringRef name, value;
      std::tie(name, value) = StringRef(entry).split('=');
      int64_t v;
      if (name.empty() || value.getAsInteger(10, v) || v <= 0) {
        module.emitError("invalid dims entry '")
            << entry << "': expected name=positive-integer";
        return signalPassFailure();
      }
      pinned[name] = v;
    }
    if (!pinned.empty()) {
      if (failed(checkNames(module)))
        return signalPassFailure();
      module.walk([&](func::FuncOp func) { sparsec::pinDims(func, pinned); });
    }
    numRefined += inferShapes(module);
    if (!pinned.empty() && failed(checkConsistent(module)))
      return signalPassFailure();
  }

  /// Pinned sizes can contradict each other (seq=4 with total_seq=2 in a
  /// decoder): the first op whose verifier then fails is reported as what
  /// the pinned dims broke, naming its ONNX node.
  LogicalResult checkConsistent(ModuleOp module) {
    std::string message, node;
    Location where = module.getLoc();
    LogicalResult ok = verifyQuietly(module, /*recursive=*/true, message, where);
    if (auto name = dyn_cast<NameLoc>(where))
      node = name.getName().str();
    if (succeeded(ok))
      return success();
    InFlightDiagnostic diag = emitError(where)
                              << "the pinned dims (" << llvm::join(dims, ", ")
                              << ") give inconsistent shapes: " << message;
    if (!node.empty())
      diag << " (node '" << node << "')";
    return failure();
  }

  /// Fails naming the first pinned name that no input dimension carries (a
  /// misspelt name would otherwise pin nothing, silently).
  LogicalResult checkNames(ModuleOp module) {
    std::string unknown = unknownDimName(module, dims);
    if (unknown.empty())
      return success();
    module.emitError("dims entry ") << unknown;
    return failure();
  }

};
} // namespace
