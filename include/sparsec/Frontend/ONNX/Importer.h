//===- Importer.h - ONNX to sparsec import ----------------------*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_FRONTEND_ONNX_IMPORTER_H
#define SPARSEC_FRONTEND_ONNX_IMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sparsec {

struct ImportOptions {
  /// Integer/bool tensors (initializers or Constant nodes) with at most this
  /// many elements become `sparsec.constant`; everything larger, and every
  /// floating-point initializer that is not a scalar, becomes a weight.
  int64_t inlineConstantLimit = 1024;
  /// Run ONNX's shape inference (with data propagation) before importing.
  bool onnxShapeInference = true;
};

/// Imports the ONNX model at `path` into a module holding one `func.func
/// @main` of sparsec ops and one `sparsec.global` per weight. On failure,
/// every problem found is reported through the context's diagnostic engine
/// (all unsupported nodes at once) and a null module is returned.
mlir::OwningOpRef<mlir::ModuleOp> importONNXFile(mlir::MLIRContext &context,
                                                 llvm::StringRef path,
                                                 const ImportOptions &options);

/// Same, from bytes in memory (used by the fuzzer and tests). `sourceName`
/// appears in diagnostics and as the module's weight file.
mlir::OwningOpRef<mlir::ModuleOp>
importONNXBuffer(mlir::MLIRContext &context, llvm::StringRef bytes,
                 llvm::StringRef sourceName, const ImportOptions &options);

/// The ONNX opsets (default domain) the importer accepts.
constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 21;

/// Op types the importer has a handler for (for `sparsec import --list-ops`).
std::vector<std::string> supportedONNXOps();

} // namespace sparsec

#endif // SPARSEC_FRONTEND_ONNX_IMPORTER_H
