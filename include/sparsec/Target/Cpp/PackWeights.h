//===- PackWeights.h - write the weight pack of a model ---------*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_TARGET_CPP_PACKWEIGHTS_H
#define SPARSEC_TARGET_CPP_PACKWEIGHTS_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace sparsec {

class WeightStore;

/// Writes one segment per `sparsec.global` (module order), read from the
/// store by `source` and with the global's `transforms` applied
/// ("transpose" swaps the two dims of a 2-D weight), into the weight pack at
/// `packPath`, and a JSON manifest describing every segment at
/// `manifestPath`. Reports problems as diagnostics on the global.
mlir::LogicalResult packWeights(mlir::ModuleOp module, const WeightStore &store,
                                llvm::StringRef packPath,
                                llvm::StringRef manifestPath,
                                uint64_t &checksum, uint64_t &totalBytes);

} // namespace sparsec

#endif // SPARSEC_TARGET_CPP_PACKWEIGHTS_H
