//===- MatchUtils.h - helpers shared by the raise patterns ------*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_LIB_DIALECT_SPARSEC_TRANSFORMS_MATCHUTILS_H
#define SPARSEC_LIB_DIALECT_SPARSEC_TRANSFORMS_MATCHUTILS_H

#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"

#include <cmath>
#include <optional>

namespace sparsec {

/// The op defining `v` if it is an `OpTy`, else null.
template <typename OpTy>
OpTy defOp(mlir::Value v) {
  return v ? v.getDefiningOp<OpTy>() : OpTy();
}

/// True for values known at compile time: weights and constants.
inline bool isParameter(mlir::Value v) {
  return defOp<WeightOp>(v) || defOp<ConstantOp>(v);
}

/// The value of a constant with a single (or splat) float element.
inline std::optional<double> scalarValue(mlir::Value v) {
  mlir::DenseElementsAttr attr;
  if (!v || !mlir::matchPattern(v, mlir::m_Constant(&attr)) ||
      !attr.isSplat())
    return std::nullopt;
  if (mlir::isa<mlir::FloatType>(attr.getElementType()))
    return attr.getSplatValue<llvm::APFloat>().convertToDouble();
  return static_cast<double>(attr.getSplatValue<llvm::APInt>().getSExtValue());
}

inline bool isScalar(mlir::Value v, double expected, double tol = 1e-4) {
  std::optional<double> s = scalarValue(v);
  return s && std::fabs(*s - expected) <= tol * std::max(1.0, std::fabs(expected));
}

/// True when `axes` names exactly the last dimension of a rank-`rank` tensor.
inline bool isLastAxis(llvm::ArrayRef<int64_t> axes, int64_t rank) {
  return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
}

/// For a commutative binary op, finds the operand order where `first`
/// satisfies `pred`; returns (matching, other) or nullopt.
template <typename Pred>
std::optional<std::pair<mlir::Value, mlir::Value>>
matchEither(mlir::Value a, mlir::Value b, Pred pred) {
  if (pred(a))
    return std::make_pair(a, b);
  if (pred(b))
    return std::make_pair(b, a);
  return std::nullopt;
}

/// Erases weight ops without uses, then the globals nothing references any
/// more (after a pass replaced weights by derived ones).
inline void eraseUnusedWeights(mlir::ModuleOp module) {
  module.walk([](WeightOp op) {
    if (op->use_empty())
      op->erase();
  });
  for (GlobalOp global :
       llvm::make_early_inc_range(module.getOps<GlobalOp>()))
    if (mlir::SymbolTable::symbolKnownUseEmpty(global, module))
      global->erase();
}

} // namespace sparsec

#endif // SPARSEC_LIB_DIALECT_SPARSEC_TRANSFORMS_MATCHUTILS_H
