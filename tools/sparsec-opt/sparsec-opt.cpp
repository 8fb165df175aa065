//===- sparsec-opt.cpp - run sparsec passes on .mlir files ---------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"
#include "sparsec/Pipelines/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerTransformsPasses();
  sparsec::registerSparsecPasses();
  sparsec::registerSparsecPipelines();

  mlir::DialectRegistry registry;
  registry.insert<sparsec::SparsecDialect, mlir::func::FuncDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "sparsec optimizer driver\n", registry));
}
