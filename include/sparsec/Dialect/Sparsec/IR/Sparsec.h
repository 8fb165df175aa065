//===- Sparsec.h - sparsec dialect ------------------------------*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_DIALECT_SPARSEC_IR_SPARSEC_H
#define SPARSEC_DIALECT_SPARSEC_IR_SPARSEC_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Traits.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "sparsec/Dialect/Sparsec/IR/SparsecOpsDialect.h.inc"

#include "sparsec/Dialect/Sparsec/IR/SparsecEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "sparsec/Dialect/Sparsec/IR/SparsecAttrs.h.inc"

namespace sparsec {
/// An axis as ONNX writes it (negative values count from the back) as an
/// index into `rank` dims; out of range stays out of range. Takes int64_t:
/// I64Attr accessors return the value unsigned, which this reads signed.
inline int64_t normalizeAxis(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

/// True when two dims may be equal: either is dynamic, or they are.
inline bool compatibleDims(int64_t a, int64_t b) {
  return mlir::ShapedType::isDynamic(a) || mlir::ShapedType::isDynamic(b) ||
         a == b;
}

/// The most elements (2^48) a shape computed from constants may have to be
/// taken as a static type; past it the importer and ConstantOfShape's
/// inference reject the shape (compile hung on 2^63 elements).
constexpr int64_t kMaxStaticElements = int64_t(1) << 48;

/// Multiplies `elements` by the size `d` (>= 0) and returns true, or returns
/// false and leaves `elements` unchanged when the product would pass
/// kMaxStaticElements (it is checked before the multiplication, which could
/// otherwise overflow).
inline bool mulWithinStaticLimit(int64_t &elements, int64_t d) {
  if (d != 0 && elements > kMaxStaticElements / d)
    return false;
  elements *= d;
  return true;
}

/// Whether every static size of `shape` (dynamic ones are skipped) is
/// non-negative and their product, zeros counted as ones, is at most
/// kMaxStaticElements: true for any shape whose element count and strides
/// fit int64 once its dynamic sizes are known to be small.
inline bool staticSizesWithinLimit(llvm::ArrayRef<int64_t> shape) {
  int64_t product = 1;
  for (int64_t d : shape)
    if (!mlir::ShapedType::isDynamic(d) &&
        (d < 0 || !mulWithinStaticLimit(product, std::max<int64_t>(d, 1))))
      return false;
  return true;
}

/// ONNX Slice semantics along one dimension of size `dim` (static): clamps
/// `start`/`end` (negative values count from the end) for a non-zero
/// `step`, sets `begin` to the first index read and returns how many
/// elements the slice has.
int64_t sliceExtent(int64_t dim, int64_t start, int64_t end, int64_t step,
                    int64_t &begin);

/// The ONNX data type code (TensorProto.DataType) of an element type, or
/// -1 for one ONNX does not have.
int onnxDataTypeOf(mlir::Type t);

/// The discardable attribute with which the hybrid split
/// (sparsec-split-hot-cold) places an op on the CPU: `sparsec.device =
/// "cpu"`. Ops without it run on the module's target.
constexpr llvm::StringLiteral kDeviceAttrName = "sparsec.device";

/// Whether the hybrid split placed `op` on the CPU.
inline bool placedOnCpu(mlir::Operation *op) {
  auto a = op->getAttrOfType<mlir::StringAttr>(kDeviceAttrName);
  return a && a.getValue() == "cpu";
}

/// Runs `op`'s verifier (and, with `recursive`, its nested ops') without
/// printing anything. On failure, `message` is the first error with its
/// "'sparsec.add' op " prefix removed and `where` its location, for a
/// caller to report in its own terms (the ONNX node, the pinned dims).
mlir::LogicalResult verifyQuietly(mlir::Operation *op, bool recursive,
                                  std::string &message, mlir::Location &where);
} // namespace sparsec

#define GET_OP_CLASSES
#include "sparsec/Dialect/Sparsec/IR/SparsecOps.h.inc"

#endif // SPARSEC_DIALECT_SPARSEC_IR_SPARSEC_H
