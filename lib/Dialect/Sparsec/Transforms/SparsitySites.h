//===- SparsitySites.h - where activation sparsity is measured --*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_LIB_DIALECT_SPARSEC_TRANSFORMS_SPARSITYSITES_H
#define SPARSEC_LIB_DIALECT_SPARSEC_TRANSFORMS_SPARSITYSITES_H

#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"
#include "sparsec/rt/Profile.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"
#include "llvm/Support/FormatVariadic.h"

#include <optional>
#include <string>

namespace sparsec {

/// Whether `use` is the input (operand 0) of a linear or sparse_linear.
inline bool isLinearInput(mlir::OpOperand &use) {
  return mlir::isa<LinearOp, SparseLinearOp>(use.getOwner()) &&
         use.getOperandNumber() == 0;
}

/// A gated MLP around activation `act`: down(act(gate(x)) * up(x)), as
/// LLaMA-style models (ReLU-fied LLaMA, ProSparse) write their FFN. `act`'s
/// only user is the product, whose other operand (`up`) has the same type,
/// and the product's only user is the input of a linear (`down`). Wherever
/// the activation is 0 so is the product: the down projection skips those
/// neurons, and the up projection need not compute them.
struct GatedMlp {
  MulOp product;
  mlir::Value up;
  mlir::Operation *down;
};

/// (Besides the product, the activation may feed compares against a
/// constant: the up projection's mask that sparsec-sparsify-ffn makes, so
/// that later passes still find the site.)
inline std::optional<GatedMlp> matchGatedMlp(mlir::Operation *act) {
  if (!mlir::isa<ReluOp, GeluOp, SiluOp>(act))
    return std::nullopt;
  MulOp product;
  for (mlir::Operation *user : act->getResult(0).getUsers()) {
    auto mask = mlir::dyn_cast<CompareOp>(user);
    if (mask && mask.getLhs() == act->getResult(0) &&
        mlir::matchPattern(mask.getRhs(), mlir::m_Constant()))
      continue;
    if (product || !mlir::isa<MulOp>(user))
      return std::nullopt;
    product = mlir::cast<MulOp>(user);
  }
  if (!product || product.getLhs() == product.getRhs() ||
      !product->getResult(0).hasOneUse())
    return std::nullopt;
  mlir::Value gate = act->getResult(0);
  mlir::Value up =
      product.getLhs() == gate ? product.getRhs() : product.getLhs();
  if (up.getType() != gate.getType() ||
      product.getType() != gate.getType() ||
      !isLinearInput(*product->getResult(0).getUses().begin()))
    return std::nullopt;
  return GatedMlp{product, up,
                  product->getResult(0).getUses().begin()->getOwner()};
}

/// A squared activation before a linear (ReLU^2, as in "ReLU^2 wins"):
/// `act`'s only user is `mul(act, act)` or `pow(act, c)` with a constant
/// c > 0, whose only user is a linear's input, returned (0 stays 0).
inline mlir::Operation *matchSquared(mlir::Operation *act) {
  if (!mlir::isa<ReluOp, GeluOp, SiluOp>(act) || act->getResult(0).use_empty())
    return nullptr;
  mlir::Value a = act->getResult(0);
  mlir::Operation *user = *a.getUsers().begin();
  for (mlir::Operation *other : a.getUsers()) // mul(a, a) uses it twice
    if (other != user)
      return nullptr;
  bool squared = false;
  if (auto mul = mlir::dyn_cast<MulOp>(user)) {
    squared = mul.getLhs() == a && mul.getRhs() == a;
  } else if (auto pow = mlir::dyn_cast<PowOp>(user)) {
    mlir::DenseElementsAttr c;
    if (pow.getLhs() == a && mlir::matchPattern(pow.getRhs(), mlir::m_Constant(&c)) &&
        c.isSplat() && mlir::isa<mlir::FloatType>(c.getElementType()))
      squared = c.getSplatValue<llvm::APFloat>().convertToDouble() > 0;
  }
  if (!squared || user->getResult(0).getType() != a.getType() ||
      !user->getResult(0).hasOneUse() ||
      !isLinearInput(*user->getResult(0).getUses().begin()))
    return nullptr;
  return user->getResult(0).getUses().begin()->getOwner();
}

/// A ReLU-family activation whose result is the input of a linear op, the
/// gate of a gated MLP (matchGatedMlp) or squared before one
/// (matchSquared): the unit the profile measures and the sparsify passes
/// exploit.
inline bool isSparsitySite(mlir::Operation *op) {
  if (!mlir::isa<ReluOp, GeluOp, SiluOp>(op))
    return false;
  for (mlir::OpOperand &use : op->getResult(0).getUses())
    if (isLinearInput(use))
      return true;
  return matchGatedMlp(op).has_value() || matchSquared(op) != nullptr;
}

/// Device bytes of the KV caches of every attention for `maxSeqLen`
/// tokens (float32 keys and values), as the hybrid placement counts them.
inline int64_t kvCacheBytes(mlir::ModuleOp module, int64_t maxSeqLen) {
  int64_t bytes = 0;
  module.walk([&](AttentionOp a) {
    auto k = mlir::cast<mlir::RankedTensorType>(a.getKey().getType());
    auto v = mlir::cast<mlir::RankedTensorType>(a.getValue().getType());
    if (k.getRank() == 4 && !k.isDynamicDim(1) && !k.isDynamicDim(3) &&
        !v.isDynamicDim(3))
      bytes += (k.getDimSize(1) * k.getDimSize(3) +
                v.getDimSize(1) * v.getDimSize(3)) *
               maxSeqLen * 4;
  });
  return bytes;
}

/// The site's name: the ONNX node name of the activation, else a
/// positional name.
inline std::string siteName(mlir::Operation *op, int64_t index) {
  if (auto loc = mlir::dyn_cast<mlir::NameLoc>(op->getLoc()))
    return loc.getName().str();
  return "site" + std::to_string(index);
}

/// Reads the .sprof at `path` (the `profile` option of pass `pass`) for
/// `module`: errors (on the module) for a missing option, an unreadable or
/// corrupt file and a profile recorded from another model (the model hash
/// the importer stored differs).
inline mlir::LogicalResult loadProfileFor(mlir::ModuleOp module,
                                          llvm::StringRef pass,
                                          llvm::StringRef path,
                                          rt::Profile &profile) {
  if (path.empty())
    return module.emitError() << pass << " needs profile=<file.sprof>";
  std::string error;
  if (!rt::readProfile(path.str(), profile, error))
    return module.emitError(error);
  if (auto hash = module->getAttrOfType<mlir::StringAttr>("sparsec.model_hash")) {
    std::string expected = llvm::formatv("{0:x16}", profile.modelHash).str();
    if (hash.getValue() != expected)
      return module.emitError("profile '")
             << path << "' was recorded for a different model (model hash "
             << expected << ", this model " << hash.getValue() << ")";
  }
  return mlir::success();
}

} // namespace sparsec

#endif // SPARSEC_LIB_DIALECT_SPARSEC_TRANSFORMS_SPARSITYSITES_H
