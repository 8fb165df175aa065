//===- ImportContext.h - state shared by the ONNX node handlers -*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_LIB_FRONTEND_ONNX_IMPORTCONTEXT_H
#define SPARSEC_LIB_FRONTEND_ONNX_IMPORTCONTEXT_H

#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

#include <onnx/onnx_pb.h>

#include <functional>
#include <optional>

namespace sparsec::onnx_import {

class ImportContext;

/// Imports one ONNX node: reads operands and attributes through the
/// context, creates sparsec ops and binds every output with setResult.
using NodeHandler =
    std::function<mlir::LogicalResult(ImportContext &, const onnx::NodeProto &)>;

struct HandlerEntry {
  /// The handler applies from this opset version of the op on.
  int64_t sinceVersion;
  NodeHandler handler;
};

/// The handler table: op type -> versions, sorted by sinceVersion.
const llvm::StringMap<std::vector<HandlerEntry>> &getHandlerTable();

/// Control-flow and recurrent ops get a dedicated message: the graph is not
/// a static dataflow graph sparsec can compile.
bool isControlFlowOp(llvm::StringRef opType);

class ImportContext {
public:
  ImportContext(mlir::OpBuilder &builder, mlir::ModuleOp module,
                int64_t opset, int64_t inlineLimit)
      : builder(builder), module(module), opset(opset),
        inlineLimit(inlineLimit) {}

  mlir::OpBuilder &builder;
  mlir::ModuleOp module;
  int64_t opset;
  int64_t inlineLimit;

  // --- Per-node state, set by the driver before calling a handler. ---
  const onnx::NodeProto *node = nullptr;
  mlir::Location loc = mlir::UnknownLoc::get(builder.getContext());

  /// The value bound to ONNX name `name`, or null.
  mlir::Value lookup(llvm::StringRef name) const {
    auto it = values.find(name);
    return it == values.end() ? mlir::Value() : it->second;
  }
  void bind(llvm::StringRef name, mlir::Value v) { values[name] = v; }

  /// Operand `i` of the current node; null when absent or empty (optional).
  mlir::Value operand(int i) const;
  int numOperands() const { return node->input_size(); }

  /// Operand `i` as a constant integer vector (axes, shapes), if constant.
  std::optional<llvm::SmallVector<int64_t>> constantInts(int i) const;
  /// Operand `i` as a constant scalar double, if constant.
  std::optional<double> constantScalar(int i) const;

  /// The type ONNX shape inference gave output `i` (unranked when unknown).
  mlir::Type resultType(int i) const;
  int numResults() const { return node->output_size(); }

  /// Binds output `i` of the current node. When the ONNX type was unknown,
  /// the op's own shape inference fills it in.
  mlir::LogicalResult setResult(int i, mlir::Value v);

  // --- Attributes. ---
  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  int64_t attrInt(llvm::StringRef name, int64_t dflt) const;
  float attrFloat(llvm::StringRef name, float dflt) const;
  std::string attrString(llvm::StringRef name, llvm::StringRef dflt) const;
  llvm::SmallVector<int64_t> attrInts(llvm::StringRef name) const;

  /// Reports a problem with the current node (its name is the location).
  mlir::InFlightDiagnostic error() const {
    if (!node) // importing an initializer, outside any node
      return mlir::emitError(loc);
    return mlir::emitError(loc) << "node '" << node->name() << "' ("
                                << node->op_type() << "): ";
  }

  /// Creates a sparsec.constant holding `values` as a 1-D i64 tensor.
  mlir::Value i64Constant(llvm::ArrayRef<int64_t> values);

  /// Converts a TensorProto into an attribute (small tensors only).
  mlir::FailureOr<mlir::DenseElementsAttr>
  tensorToAttr(const onnx::TensorProto &tensor);

  /// Imports a tensor (initializer or Constant node) as a constant or a
  /// weight, following the inlining rule.
  mlir::FailureOr<mlir::Value> importTensor(const onnx::TensorProto &tensor,
                                            llvm::StringRef name,
                                            bool isInitializer);

  /// Maps an ONNX element type to an MLIR type; null if unsupported.
  mlir::Type elementType(int32_t onnxType) const;
  /// Maps an ONNX tensor type to a ranked tensor type; null if unranked.
  mlir::Type tensorType(const onnx::TypeProto &type) const;

  /// Types from the graph inputs, outputs and value_info.
  llvm::StringMap<const onnx::TypeProto *> knownTypes;

private:
  llvm::StringMap<mlir::Value> values;
  llvm::StringMap<unsigned> symbolUses;
};

} // namespace sparsec::onnx_import

#endif // SPARSEC_LIB_FRONTEND_ONNX_IMPORTCONTEXT_H
