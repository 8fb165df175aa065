//===- CppEmitter.h - sparsec IR to x86 C++ and CUDA C++ --------*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_TARGET_CPP_CPPEMITTER_H
#define SPARSEC_TARGET_CPP_CPPEMITTER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>

namespace sparsec {

/// What the emitted translation unit runs on.
enum class EmitTarget {
  /// C++ calling the x86 op library (sparsec/rt/Ops.h).
  x86,
  /// CUDA C++ (.cu): values computed from weights live on the device and
  /// use the CUDA op library (sparsec/rt/cuda/Ops.h); integer shape and
  /// mask arithmetic stays on the host; steps run through CUDA graphs.
  cuda,
};

struct CppEmitterOptions {
  EmitTarget target = EmitTarget::x86;
  /// Name of the weight pack file the binary loads from its directory.
  std::string weightsFile = "model.weights";
  /// Checksum of that pack (0: unknown, the runtime then only checks that
  /// the payload matches its own header).
  uint64_t weightsChecksum = 0;
  /// Largest accepted value per dynamic dimension name (others unbounded).
  llvm::StringMap<int64_t> maxDims;
};

/// Emits a standalone C++ translation unit for a module that went through
/// the schedule phase (every op result has `sparsec.slots`): one call into
/// the runtime op library per op, weights addressed by segment (the i-th
/// `sparsec.global` in module order is segment i), small constants as
/// static arrays, and the model description plus `main`.
mlir::LogicalResult translateToCpp(mlir::ModuleOp module,
                                   llvm::raw_ostream &os,
                                   const CppEmitterOptions &options);

/// Registers `--sparsec-to-cpp` and `--sparsec-to-cuda` with
/// mlir-translate style tools.
void registerToCppTranslation();

} // namespace sparsec

#endif // SPARSEC_TARGET_CPP_CPPEMITTER_H
