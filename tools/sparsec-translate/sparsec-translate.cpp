//===- sparsec-translate.cpp - run the sparsec emitters ------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Target/Cpp/CppEmitter.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  sparsec::registerToCppTranslation();
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "sparsec translation driver\n"));
}
