//===- DimAnalysis.h - which dynamic dims are provably equal ----*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// Exports compute reshape and expand targets from the shapes of other
// tensors (`x.view(batch, heads, q_len, hd)` with batch and q_len read from
// another tensor's shape). With dynamic batch and sequence dims the types
// alone cannot tell that such a reshape keeps its input's shape, or that
// such an expand broadcasts nothing along those dims. These helpers follow
// a dim back through the ops that pass it on unchanged (transposes, slices
// of other axes, reshapes that copy it, norms, linears...) to the value
// that first had it, and call two dims equal when they lead to the same
// one.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_DIALECT_SPARSEC_IR_DIMANALYSIS_H
#define SPARSEC_DIALECT_SPARSEC_IR_DIMANALYSIS_H

#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace sparsec {

/// Dim `index` of `value`.
struct DimRef {
  mlir::Value value;
  int64_t index = 0;
  bool operator==(const DimRef &o) const {
    return value == o.value && index == o.index;
  }
};

/// One entry of a shape vector: a constant, a dim of some tensor (read by
/// Shape, picked by Gather or Slice), or not known.
struct ShapeEntry {
  enum Kind { Constant, Dim, Unknown } kind = Unknown;
  int64_t constant = 0;
  DimRef dim;
};

/// The values of an integer constant (a shape vector, axes, indices).
std::optional<llvm::SmallVector<int64_t>> getConstantInts(mlir::Value v);

/// The entries of `shape`, a 1-D (or scalar) i64 tensor of static length,
/// seen through constants, Shape, Gather and Slice of a shape, Unsqueeze,
/// Squeeze and Concat; nothing when its length is not static.
std::optional<llvm::SmallVector<ShapeEntry>> shapeEntries(mlir::Value shape);

/// The earliest value whose dim is, at run time, dim `index` of `value`.
DimRef dimOrigin(mlir::Value value, int64_t index);

/// True when dim `ia` of `a` and dim `ib` of `b` are provably equal: both
/// static and the same, or of the same origin.
bool sameDim(mlir::Value a, int64_t ia, mlir::Value b, int64_t ib);

} // namespace sparsec

#endif // SPARSEC_DIALECT_SPARSEC_IR_DIMANALYSIS_H
