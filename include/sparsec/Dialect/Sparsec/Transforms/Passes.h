//===- Passes.h - sparsec graph passes --------------------------*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_DIALECT_SPARSEC_TRANSFORMS_PASSES_H
#define SPARSEC_DIALECT_SPARSEC_TRANSFORMS_PASSES_H

#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/StringMap.h"

namespace sparsec {

#define GEN_PASS_DECL
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"

/// Pattern sets behind the raise passes, exposed so pipelines and tests can
/// combine them.
void populateFuseLinearPatterns(mlir::RewritePatternSet &patterns);
void populateFuseLayerNormPatterns(mlir::RewritePatternSet &patterns);
void populateFuseGeluPatterns(mlir::RewritePatternSet &patterns);
void populateFuseAttentionPatterns(mlir::RewritePatternSet &patterns);
void populateFuseRotaryPatterns(mlir::RewritePatternSet &patterns);
void populateRaiseEmbeddingPatterns(mlir::RewritePatternSet &patterns);

/// Refines result types of every op in `module` from its operands; returns
/// the number of types changed.
int64_t inferShapes(mlir::ModuleOp module);

/// Makes the dynamic input dimensions of `func` named in `pinned` (their
/// `sparsec.dims` names) static.
void pinDims(mlir::func::FuncOp func, const llvm::StringMap<int64_t> &pinned);

/// Folds `module`'s shape arithmetic to a fixed point, interleaved with
/// shape inference (sparsec-fold-constants); fails if it does not converge.
mlir::LogicalResult foldConstants(mlir::ModuleOp module);

/// The first of `entries` (name=value) whose name no input dimension of
/// the module carries (the functions' `sparsec.dims` argument attributes,
/// which the importer copies from the ONNX `dim_param`s), with why:
/// "'m=4': no input has a dimension named 'm' (named dimensions: n)".
/// Empty when every name is known.
std::string unknownDimName(mlir::ModuleOp module,
                           llvm::ArrayRef<std::string> entries);

#define GEN_PASS_REGISTRATION
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"

} // namespace sparsec

#endif // SPARSEC_DIALECT_SPARSEC_TRANSFORMS_PASSES_H
