//===- SparsecDialect.cpp - sparsec dialect registration -----------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace sparsec;

#include "sparsec/Dialect/Sparsec/IR/SparsecOpsDialect.cpp.inc"

#include "sparsec/Dialect/Sparsec/IR/SparsecEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "sparsec/Dialect/Sparsec/IR/SparsecAttrs.cpp.inc"

void SparsecDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "sparsec/Dialect/Sparsec/IR/SparsecOps.cpp.inc"
      >();
}

void SparsecDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "sparsec/Dialect/Sparsec/IR/SparsecAttrs.cpp.inc"
      >();
}

Operation *SparsecDialect::materializeConstant(OpBuilder &builder,
                                               Attribute value, Type type,
                                               Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}

LogicalResult
ActSparsityAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        APFloat zeroFractionAP, Granularity, SparsitySource,
                        int64_t tokens, APFloat top20ShareAP) {
  double zeroFraction = zeroFractionAP.convertToDouble();
  double top20Share = top20ShareAP.convertToDouble();
  if (!(zeroFraction >= 0.0 && zeroFraction <= 1.0))
    return emitError() << "zero_fraction must be in [0, 1], got "
                       << zeroFraction;
  if (tokens < 0)
    return emitError() << "tokens must be non-negative, got " << tokens;
  if (!(top20Share >= 0.0 && top20Share <= 1.0))
    return emitError() << "top20_share must be in [0, 1], got " << top20Share;
  return success();
}

LogicalResult
PlacementAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      int64_t gpuNeurons, int64_t totalNeurons, int64_t group) {
  if (group <= 0)
    return emitError() << "group must be positive, got " << group;
  if (totalNeurons <= 0)
    return emitError() << "total_neurons must be positive, got "
                       << totalNeurons;
  if (gpuNeurons < 0 || gpuNeurons > totalNeurons)
    return emitError() << "gpu_neurons must be in [0, total_neurons = "
                       << totalNeurons << "], got " << gpuNeurons;
  if (gpuNeurons % group != 0 && gpuNeurons != totalNeurons)
    return emitError() << "gpu_neurons (" << gpuNeurons
                       << ") must be a multiple of group (" << group
                       << ") or equal total_neurons";
  return success();
}

LogicalResult sparsec::verifyQuietly(Operation *op, bool recursive,
                                     std::string &message, Location &where) {
  message.clear();
  ScopedDiagnosticHandler capture(op->getContext(), [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error && message.empty()) {
      message = d.str();
      size_t at = message.find(" op ");
      if (!message.empty() && message[0] == '\'' && at != std::string::npos)
        message = message.substr(at + 4);
      where = d.getLocation();
    }
    return success();
  });
  return mlir::verify(op, recursive);
}
