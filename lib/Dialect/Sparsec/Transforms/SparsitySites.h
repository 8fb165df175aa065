//===- SparsitySites.h - where activation sparsity is measured --*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_LIB_DIALECT_SPARSEC_TRANSFORMS_SPARSITYSITES_H
#define SPARSEC_LIB_DIALECT_SPARSEC_TRANSFORMS_SPARSITYSITES_H

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"
#include "sparsec/rt/Profile.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"
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

/// A zero-keeping op after activation `act`, before a linear: a square
/// (ReLU^2, as in "ReLU^2 wins": `mul(act, act)` or `pow(act, c)` with a
/// constant c > 0) or a cap (ReLU6 and other capped ReLUs, as Clip(0, c)
/// imports: `min(act, c)` with a constant c >= 0). `act`'s only user is
/// that op, whose only user is a linear's input, returned (0 stays 0).
inline mlir::Operation *matchZeroKeeping(mlir::Operation *act) {
  if (!mlir::isa<ReluOp, GeluOp, SiluOp>(act) || act->getResult(0).use_empty())
    return nullptr;
  mlir::Value a = act->getResult(0);
  mlir::Operation *user = *a.getUsers().begin();
  for (mlir::Operation *other : a.getUsers()) // mul(a, a) uses it twice
    if (other != user)
      return nullptr;
  // A constant float splat, or nothing.
  auto splat = [](mlir::Value v) -> std::optional<double> {
    if (!mlir::isa<mlir::FloatType>(mlir::getElementTypeOrSelf(v.getType())))
      return std::nullopt;
    return scalarValue(v);
  };
  bool keeps = false;
  if (auto mul = mlir::dyn_cast<MulOp>(user)) {
    keeps = mul.getLhs() == a && mul.getRhs() == a;
  } else if (auto pow = mlir::dyn_cast<PowOp>(user)) {
    std::optional<double> c = splat(pow.getRhs());
    keeps = pow.getLhs() == a && c && *c > 0;
  } else if (auto min = mlir::dyn_cast<MinOp>(user)) {
    mlir::Value other = min.getLhs() == a ? min.getRhs() : min.getLhs();
    std::optional<double> c = splat(other);
    keeps = other != a && c && *c >= 0;
  }
  if (!keeps || user->getResult(0).getType() != a.getType() ||
      !user->getResult(0).hasOneUse() ||
      !isLinearInput(*user->getResult(0).getUses().begin()))
    return nullptr;
  return user->getResult(0).getUses().begin()->getOwner();
}

/// What matchZeroKeeping found after `act` (which it matched), for remarks:
/// "squared activation" or "capped activation".
inline llvm::StringRef zeroKeepingKind(mlir::Operation *act) {
  return mlir::isa<MinOp>(*act->getResult(0).getUsers().begin())
             ? "capped activation"
             : "squared activation";
}

/// A ReLU-family activation whose result is the input of a linear op, the
/// gate of a gated MLP (matchGatedMlp) or squared or capped before one
/// (matchZeroKeeping): the unit the profile measures and the sparsify
/// passes exploit.
inline bool isSparsitySite(mlir::Operation *op) {
  if (!mlir::isa<ReluOp, GeluOp, SiluOp>(op))
    return false;
  for (mlir::OpOperand &use : op->getResult(0).getUses())
    if (isLinearInput(use))
      return true;
  return matchGatedMlp(op).has_value() || matchZeroKeeping(op) != nullptr;
}

/// The bias operand of a linear or sparse_linear, or null without one.
inline mlir::OpOperand *biasOperand(mlir::Operation *linear) {
  mlir::Value bias = mlir::isa<LinearOp>(linear)
                         ? mlir::cast<LinearOp>(linear).getBias()
                         : mlir::cast<SparseLinearOp>(linear).getBias();
  if (bias)
    for (mlir::OpOperand &o : linear->getOpOperands())
      if (o.get() == bias && o.getOperandNumber() >= 2)
        return &o;
  return nullptr;
}

/// One FFN around a sparsity site, as the hot/cold passes place and split
/// it by neurons: the projections computing neuron-indexed values from the
/// FFN's input (the up projection; a gated MLP's gate and up projections),
/// every op up to the down projection indexed by the same neurons (the
/// activation; a gated MLP's mask and product; a square or a cap), and the
/// down projection.
struct FfnRegion {
  mlir::Operation *act = nullptr;
  /// Linear or output-side sparse_linear ops over model weights, the
  /// activation's producer first.
  llvm::SmallVector<mlir::Operation *, 2> projections;
  /// The projections and everything between them and `down`, in program
  /// order.
  llvm::SmallVector<mlir::Operation *, 6> body;
  /// A linear or input-side sparse_linear over a model weight.
  mlir::Operation *down = nullptr;
  int64_t neurons = 0;
};

/// The FFN around site `act`, or nullopt with the reason in `why`. Every
/// value the region computes is read only inside it (or, for the last, by
/// `down`); a projection's mask is a predictor (the first projection's) or
/// the gate's mask inside the region.
inline std::optional<FfnRegion> matchFfnRegion(mlir::Operation *act,
                                               std::string &why) {
  FfnRegion r;
  r.act = act;
  auto isLinear = [](mlir::Operation *op) {
    return op && mlir::isa<LinearOp, SparseLinearOp>(op);
  };
  auto overWeights = [](mlir::Operation *op) {
    return op->getOperand(1).getDefiningOp<WeightOp>() != nullptr;
  };
  mlir::Operation *first = act->getOperand(0).getDefiningOp();
  if (!isLinear(first) || !act->getOperand(0).hasOneUse()) {
    why = isLinear(first) ? "its up projection has other users"
                          : "it is not linear -> activation -> linear";
    return std::nullopt;
  }
  r.projections.push_back(first);
  r.body = {first, act};
  if (std::optional<GatedMlp> mlp = matchGatedMlp(act)) {
    mlir::Operation *up = mlp->up.getDefiningOp();
    if (!isLinear(up) || !mlp->up.hasOneUse()) {
      why = "its up projection is not a linear read only by the product";
      return std::nullopt;
    }
    // The up projection's mask (sparsec-sparsify-ffn): compare(gate, 0),
    // negated for gates that can be negative.
    for (mlir::Operation *user : act->getResult(0).getUsers()) {
      if (user == mlp->product.getOperation())
        continue;
      mlir::Operation *mask = user;
      r.body.push_back(user);
      if (user->hasOneUse() && mlir::isa<NotOp>(*user->getUsers().begin())) {
        mask = *user->getUsers().begin();
        r.body.push_back(mask);
      }
      if (!mask->hasOneUse() || *mask->getUsers().begin() != up) {
        why = "the gate's mask has users other than the up projection";
        return std::nullopt;
      }
    }
    r.projections.push_back(up);
    r.body.push_back(up);
    r.body.push_back(mlp->product);
    r.down = mlp->down;
  } else if (mlir::Operation *down = matchZeroKeeping(act)) {
    r.body.push_back(down->getOperand(0).getDefiningOp());
    r.down = down;
  } else {
    if (!act->getResult(0).hasOneUse()) {
      why = "its activation has other users";
      return std::nullopt;
    }
    mlir::OpOperand &use = *act->getResult(0).getUses().begin();
    if (!isLinearInput(use)) {
      why = "it is not linear -> activation -> linear";
      return std::nullopt;
    }
    r.down = use.getOwner();
  }
  llvm::sort(r.body, [](mlir::Operation *a, mlir::Operation *b) {
    return a->isBeforeInBlock(b);
  });
  for (mlir::Operation *p : r.projections) {
    if (!overWeights(p)) {
      why = "its weights are not model weights";
      return std::nullopt;
    }
    auto s = mlir::dyn_cast<SparseLinearOp>(p);
    if (!s)
      continue;
    if (s.getSparseDim() != SparseDim::output) {
      why = "its up projection is not output-sparse";
      return std::nullopt;
    }
    mlir::Value mask = s.getActive();
    if (mask && !(p == first && mask.getDefiningOp<PredictOp>()) &&
        !llvm::is_contained(r.body, mask.getDefiningOp())) {
      why = "an up projection's mask is neither a predictor nor the gate's";
      return std::nullopt;
    }
  }
  if (!overWeights(r.down)) {
    why = "its weights are not model weights";
    return std::nullopt;
  }
  if (auto s = mlir::dyn_cast<SparseLinearOp>(r.down);
      s && (s.getSparseDim() != SparseDim::input || s.getActive())) {
    why = "its down projection is not input-sparse";
    return std::nullopt;
  }
  auto w = mlir::cast<mlir::RankedTensorType>(first->getOperand(1).getType());
  r.neurons = w.getDimSize(first->hasAttr("transpose_weight") ? 0 : 1);
  return r;
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
